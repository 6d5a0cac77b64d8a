//! What the formats of 32-value runs share: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, MXFP4
//! (one run per block; the trait allows several). Each run of a row meets one block of
//! its activation column (ggml's `vec_dot_type`: Q8_0, or Q8_1 for the formats with a
//! min), so every one of these formats dots the same way — an exact integer sum per run,
//! then the same few float steps — and one summation order ([`dot_ref`], or ggml's lane
//! order for the formats that set [`Runs32::LANES`]), one AVX2 row
//! kernel on the file's layout ([`x86_64`]) and one packed layout with its AVX2 and
//! AVX-512 VNNI kernels ([`tiles`]) serve them all.
//! What is particular to a format (its block layout, how its values decode, its tables)
//! lives in its own module ([`crate::q4_0`], [`crate::q4_1`], [`crate::q5_0`],
//! [`crate::q5_1`], [`crate::iq4_nl`], [`crate::mxfp4`]), which hands
//! these generic kernels its decoders.
//!
//! **The summation order** (every kernel gives its bits, tested):
//! for each run `j` of the row, in order (block `b = j / SUBS`, run `j mod SUBS` of it),
//! `isum_j = Σ w · q` over the run's 32 weight values `w` and the activation quants `q` of
//! block `j` (exact in i32), then `acc = fma(d_w(b) · d_x(j), isum_j, acc)`, one fused
//! multiply-add per run, `d_w · d_x` rounded to f32 first, `acc` starting at `+0`. Formats
//! with a min also run `macc = fma(m_w(b), s_x(b), macc)` per block (`s_x` is the Q8_1
//! block's stored `d · Σq`), and the result is `acc + macc`; for the others it is `acc`.
//!
//! This is the order of llama.cpp's own x86 kernels for the weights it re-lays
//! (`repack.cpp`: Q4_0, IQ4_NL and MXFP4 when the row count is a multiple of 8, as in a
//! loaded model; one `fma(int sum, d_w · d_x, acc)` per block, rows in lanes, for one column
//! and for four), and the kernels keep **rows** in their vector lanes (eight rows per AVX2
//! register, sixteen per AVX-512 register of a packed tile), so one pass over the weights
//! serves eight columns. Q4_1, Q5_0 and Q5_1 are not re-laid on x86: llama.cpp runs their
//! `vec_dot`, which keeps eight lanes of partial integer sums per block, each fused with the
//! block's scale product, then reduced (Q4_1, Q5_1: plus a fused scalar sum of `m · s`);
//! those formats set [`Runs32::LANES`] and sum that way ([`dot_lanes_ref`], the AVX2 kernel
//! `x86_64::rows_lanes_avx2`, and with AVX-512 VNNI packed tiles read lane by lane,
//! `tiles::rows_lanes_vnni`), so their products are llama.cpp's bit for bit too; Q8_0
//! shares both (its tiles hold the signed values, met as `|w| · ±q` like ggml's sign
//! trick: `TileRuns::TILE_SIGNED`).

use crate::columns::Columns;
use crate::format::BlockFormat;

/// Values per run: every run of these formats meets one Q8_0 / Q8_1 block.
pub const RUN: usize = 32;

/// A weight format whose blocks are runs of 32 values, each dotted with one activation
/// block: the scalar facts [`dot_ref`] needs.
pub(crate) trait Runs32: BlockFormat {
    /// Bytes per block.
    const BLOCK_BYTES: usize;
    /// Runs per block (1 for every format here).
    const SUBS: usize = 1;
    /// Whether blocks carry a min `m` (Q4_1, Q5_1), which meets Q8_1's stored `s`.
    const HAS_MIN: bool = false;
    /// Whether the format sums in ggml's `vec_dot` lane order ([`dot_lanes_ref`]: the
    /// formats llama.cpp does not re-lay on x86 — Q4_1, Q5_0, Q5_1) rather than the
    /// run-by-run order of its re-laid kernels ([`dot_ref`]).
    const LANES: bool = false;
    /// Whether ggml's x86 `vec_dot` of this format keeps two sets of lanes, blocks
    /// alternating between them, and sums an odd last block alone (IQ4_NL, MXFP4; see
    /// [`lanes_ref`]).
    const PAIRED: bool = false;
    /// Whether llamafile's `tinyBLAS` runs this format's prompt products (Q4_0, Q5_0,
    /// Q8_0, IQ4_NL; it has no MXFP4 kernel).
    const SGEMM: bool = false;
    /// The block's scale `d_w` as f32.
    fn scale(block: &[u8]) -> f32;
    /// The block's min `m_w` as f32 (only read when [`Runs32::HAS_MIN`]).
    fn min(block: &[u8]) -> f32 {
        let _ = block;
        0.0
    }
    /// The integer values of run `sub` of the block, in element order: what the
    /// activation quants multiply (for the formats with a min, the unsigned quants; the
    /// value is `d · q + m`).
    fn values(block: &[u8], sub: usize) -> [i32; RUN];
}

/// The reference dot product of one row of `F` with column `c` of `x`, in the order
/// described in the module documentation.
pub(crate) fn dot_ref<F: Runs32>(row: &[u8], x: &Columns<'_>, c: usize) -> f32 {
    if F::LANES {
        return dot_lanes_ref::<F>(row, x, c);
    }
    dot_runs_ref::<F>(row, x, c)
}

/// The run-by-run order of the module documentation whatever the format's
/// [`Runs32::LANES`]: exact integer sums per run, one fused multiply-add each. For the
/// lane-order formats it is dspark's own order ([`crate::format::FormatKernels::own_rows`]),
/// which its packed-tile kernel runs with a quarter of the float steps.
pub(crate) fn dot_runs_ref<F: Runs32>(row: &[u8], x: &Columns<'_>, c: usize) -> f32 {
    let (xd, xq) = x.q8(c);
    let xs = x.q8_sums(c);
    let mut acc = 0.0f32;
    let mut macc = 0.0f32;
    for (b, block) in row.chunks_exact(F::BLOCK_BYTES).enumerate() {
        let d = F::scale(block);
        for sub in 0..F::SUBS {
            let j = b * F::SUBS + sub;
            let q = &xq[j * RUN..(j + 1) * RUN];
            let isum: i32 = F::values(block, sub)
                .iter()
                .zip(q)
                .map(|(&w, &q)| w * i32::from(q))
                .sum();
            acc = (d * xd[j]).mul_add(isum as f32, acc);
        }
        if F::HAS_MIN {
            macc = F::min(block).mul_add(xs[b], macc);
        }
    }
    if F::HAS_MIN {
        acc + macc
    } else {
        acc
    }
}

/// The reference dot product in ggml's x86 `vec_dot` order: [`lanes_ref`] with the
/// format's pairing ([`Runs32::PAIRED`]). The order of Q4_1, Q5_0, Q5_1 and Q8_0 always,
/// and of Q4_0, IQ4_NL and MXFP4 matrices llama.cpp does not re-lay.
pub(crate) fn dot_lanes_ref<F: Runs32>(row: &[u8], x: &Columns<'_>, c: usize) -> f32 {
    lanes_ref::<F>(row, x, c, F::PAIRED)
}

/// [`lanes_ref`] with one set of lanes: llama.cpp's llamafile `tinyBLAS` order, which its
/// prompts' products of IQ4_NL take (for the other formats it has, the same as their
/// `vec_dot`).
pub(crate) fn dot_single_lanes_ref<F: Runs32>(row: &[u8], x: &Columns<'_>, c: usize) -> f32 {
    lanes_ref::<F>(row, x, c, false)
}

/// The sum in ggml's x86 lane order (one run per block): eight lanes, lane `l` of each run
/// the exact integer sum of its values `4l..4l + 4` times the activation quants; per run,
/// in order, `lane_l = fma(d_w · d_x, isum_l, lane_l)`; the lanes reduced by
/// [`crate::lanes::hsum8`]. Formats with a min add `m_w · s_x` per block to a scalar in
/// order (`macc = fma(m_w, s_x, macc)`, as the compiler fuses ggml's `summs += m·s`), and
/// the result is `hsum + macc`. `paired` (formats without a min): blocks `2i` and `2i + 1`
/// go to two sets of lanes, added lane by lane before the reduction, and an odd last block
/// is added alone afterwards, `hsum + (d_w · d_x) · Σ isum` (two roundings: ggml's scalar
/// tail, which its compiler leaves unfused, as llama.cpp's products show).
pub(crate) fn lanes_ref<F: Runs32>(row: &[u8], x: &Columns<'_>, c: usize, paired: bool) -> f32 {
    debug_assert!(
        !(paired && F::HAS_MIN),
        "paired lanes are for formats without a min"
    );
    let (xd, xq) = x.q8(c);
    let xs = x.q8_sums(c);
    let mut acc = [crate::lanes::LaneAcc::default(); 2];
    let nb = row.len() / F::BLOCK_BYTES;
    let mut tail = None;
    for (b, block) in row.chunks_exact(F::BLOCK_BYTES).enumerate() {
        let d = F::scale(block);
        if F::HAS_MIN {
            acc[0].add_min(F::min(block), xs[b]);
        }
        for sub in 0..F::SUBS {
            let j = b * F::SUBS + sub;
            let q = &xq[j * RUN..(j + 1) * RUN];
            let v = F::values(block, sub);
            let lanes: [i32; 8] =
                std::array::from_fn(|l| (4 * l..4 * l + 4).map(|i| v[i] * i32::from(q[i])).sum());
            if paired && nb % 2 == 1 && b == nb - 1 {
                tail = Some((d * xd[j], lanes.iter().sum::<i32>()));
            } else {
                acc[if paired { b % 2 } else { 0 }].add(d * xd[j], &lanes);
            }
        }
    }
    if F::HAS_MIN {
        return acc[0].sum_with_mins();
    }
    let sum = if paired {
        acc[0].merged(acc[1]).sum()
    } else {
        acc[0].sum()
    };
    match tail {
        Some((d, isum)) => sum + d * isum as f32,
        None => sum,
    }
}

/// The f16 at byte `at` of `b`, as f32.
pub(crate) fn f16_at(b: &[u8], at: usize) -> f32 {
    half::f16::from_bits(u16::from_le_bytes([b[at], b[at + 1]])).to_f32()
}

/// The 32 quants of a block of 16 nibble bytes in element order: element `j` is the low
/// nibble of byte `j`, element `j + 16` its high nibble (ggml's Q4_0 / Q4_1 / Q5 / IQ4_NL
/// / MXFP4 layout).
pub(crate) fn nibbles(qs: &[u8]) -> [u8; RUN] {
    std::array::from_fn(|j| {
        if j < 16 {
            qs[j] & 0x0F
        } else {
            qs[j - 16] >> 4
        }
    })
}

/// The fifth bits of a Q5 block (`qh`, a little-endian u32: bit `j` for element `j`) on
/// top of its nibbles: the 5-bit quants in element order.
pub(crate) fn five_bits(qh: &[u8], qs: &[u8]) -> [u8; RUN] {
    let h = u32::from_le_bytes([qh[0], qh[1], qh[2], qh[3]]);
    let lo = nibbles(qs);
    std::array::from_fn(|j| lo[j] | ((((h >> j) & 1) as u8) << 4))
}

/// The kernel-table row of `F` for `cpu`: on AVX2 packed tiles (for the formats whose
/// codes `vpmaddubsw` takes) or the file's layout, on AVX-512 VNNI packed tiles; rows
/// outside whole tiles go to the AVX2 kernel on the file's layout.
#[cfg(target_arch = "x86_64")]
pub(crate) fn kernels<F: tiles::TileRuns + x86_64::Avx2Runs>(
    cpu: crate::cpu::Detected,
) -> crate::format::FormatKernels {
    let mut k = crate::format::FormatKernels::reference::<F>();
    if F::LANES {
        if cpu.has_avx2() {
            k.rows = lane_kernel::<F>(false, false);
        }
        if cpu.isa() == crate::cpu::Isa::Avx512Vnni {
            k.rows = |w, first, x, out| {
                // SAFETY: built only from a `Detected` with AVX-512 F, VL, BW and VNNI and the
                // AVX2 set.
                unsafe { tiles::rows_lanes_vnni::<F>(w, first, x, out) }
            };
            k.pack = Some(tiles::pack::<F>);
        }
        return k;
    }
    lane_orders::<F>(&mut k);
    if cpu.has_avx2() {
        let vnni = cpu.isa() == crate::cpu::Isa::Avx512Vnni;
        k.vec_rows = Some(lane_kernel::<F>(F::PAIRED, vnni));
        if k.sgemm_rows.is_some() {
            k.sgemm_rows = Some(lane_kernel::<F>(false, vnni));
        }
        k.rows = |w, first, x, out| {
            // SAFETY: built only from a `Detected` with AVX2, FMA and F16C.
            unsafe { x86_64::rows_avx2::<F>(w, first, x, out) }
        };
        if F::AVX2 {
            k.rows = |w, first, x, out| {
                // SAFETY: built only from a `Detected` with AVX2, FMA and F16C.
                unsafe { tiles::rows_avx2_tiles::<F>(w, first, x, out) }
            };
            k.pack = Some(tiles::pack::<F>);
        }
    }
    if cpu.isa() == crate::cpu::Isa::Avx512Vnni {
        k.rows = |w, first, x, out| {
            // SAFETY: built only from a `Detected` with AVX-512 F, VL, BW and VNNI and the
            // AVX2 set.
            unsafe { tiles::rows_vnni::<F>(w, first, x, out) }
        };
        k.pack = Some(tiles::pack::<F>);
    }
    k
}

/// The lane-order kernel of `F` on the file's layout: two sets of lanes when `paired`
/// ([`lanes_ref`]), `vpdpbusd` sums with `vnni`.
#[cfg(target_arch = "x86_64")]
fn lane_kernel<F: tiles::TileRuns + x86_64::Avx2Runs>(
    paired: bool,
    vnni: bool,
) -> crate::matrix::RowKernel {
    // The table builds these only from a `Detected` with AVX2, FMA and F16C, and with
    // `vnni` AVX-512 F, VL, BW and VNNI too.
    match (paired, vnni) {
        (false, false) => |w, first, x, out| {
            // SAFETY: AVX2, FMA and F16C (above).
            unsafe { x86_64::rows_lanes_avx2::<F, false>(w, first, x, out) }
        },
        (true, false) => |w, first, x, out| {
            // SAFETY: AVX2, FMA and F16C (above).
            unsafe { x86_64::rows_lanes_avx2::<F, true>(w, first, x, out) }
        },
        (false, true) => |w, first, x, out| {
            // SAFETY: the AVX2 set and AVX-512 VNNI (above).
            unsafe { x86_64::rows_lanes_vnni::<F, false>(w, first, x, out) }
        },
        (true, true) => |w, first, x, out| {
            // SAFETY: the AVX2 set and AVX-512 VNNI (above).
            unsafe { x86_64::rows_lanes_vnni::<F, true>(w, first, x, out) }
        },
    }
}

/// The lane orders of a format whose `rows` are llama.cpp's re-laid order (Q4_0, IQ4_NL,
/// MXFP4): its `vec_dot` for the matrices llama.cpp does not re-lay, and for IQ4_NL the
/// `tinyBLAS` order of their prompt products (one set of lanes where `vec_dot` has two).
fn lane_orders<F: Runs32>(k: &mut crate::format::FormatKernels) {
    // llama.cpp re-lays these formats' matrices of multiples of 8 rows on AVX2 CPUs
    // (`repack.cpp`); the others run its `vec_dot`, prompts its `tinyBLAS`. Every kernel
    // set, the scalar one included, mirrors that build, as the lane orders of the other
    // formats of this family do.
    k.relaid_rows = 8;
    k.vec_dot_ref = Some(dot_lanes_ref::<F>);
    k.vec_rows =
        Some(|w, first, x, out| crate::format::rows_by_dot(w, first, x, out, dot_lanes_ref::<F>));
    if F::PAIRED && F::SGEMM {
        k.sgemm_dot_ref = Some(dot_single_lanes_ref::<F>);
        k.sgemm_rows = Some(|w, first, x, out| {
            crate::format::rows_by_dot(w, first, x, out, dot_single_lanes_ref::<F>)
        });
    }
}

/// The kernel-table row of `F` for `cpu`: the references (no SIMD kernels off x86-64).
#[cfg(not(target_arch = "x86_64"))]
pub(crate) fn kernels<F: Runs32>(cpu: crate::cpu::Detected) -> crate::format::FormatKernels {
    let _ = cpu;
    let mut k = crate::format::FormatKernels::reference::<F>();
    if !F::LANES {
        lane_orders::<F>(&mut k);
    }
    k
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod tiles;
#[cfg(target_arch = "x86_64")]
pub(crate) mod x86_64;

#[cfg(test)]
mod tests;

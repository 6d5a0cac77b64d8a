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

/// The reference dot product in ggml's x86 `vec_dot` order (Q4_1, Q5_0, Q5_1; one run per
/// block): eight lanes, lane `l` of each run the exact integer sum of its values `4l..4l +
/// 4` times the activation quants; per run, in order, `lane_l = fma(d_w · d_x, isum_l,
/// lane_l)`; the lanes reduced by [`crate::lanes::hsum8`]. Formats with a min add `m_w ·
/// s_x` per block to a scalar in order (`macc = fma(m_w, s_x, macc)`, as the compiler
/// fuses ggml's `summs += m·s`), and the result is `hsum + macc`.
pub(crate) fn dot_lanes_ref<F: Runs32>(row: &[u8], x: &Columns<'_>, c: usize) -> f32 {
    let (xd, xq) = x.q8(c);
    let xs = x.q8_sums(c);
    let mut acc = crate::lanes::LaneAcc::default();
    for (b, block) in row.chunks_exact(F::BLOCK_BYTES).enumerate() {
        let d = F::scale(block);
        if F::HAS_MIN {
            acc.add_min(F::min(block), xs[b]);
        }
        for sub in 0..F::SUBS {
            let j = b * F::SUBS + sub;
            let q = &xq[j * RUN..(j + 1) * RUN];
            let v = F::values(block, sub);
            let lanes: [i32; 8] =
                std::array::from_fn(|l| (4 * l..4 * l + 4).map(|i| v[i] * i32::from(q[i])).sum());
            acc.add(d * xd[j], &lanes);
        }
    }
    if F::HAS_MIN {
        acc.sum_with_mins()
    } else {
        acc.sum()
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
            k.rows = |w, first, x, out| {
                // SAFETY: built only from a `Detected` with AVX2, FMA and F16C.
                unsafe { x86_64::rows_lanes_avx2::<F>(w, first, x, out) }
            };
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
    if cpu.has_avx2() {
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

/// The kernel-table row of `F` for `cpu`: the references (no SIMD kernels off x86-64).
#[cfg(not(target_arch = "x86_64"))]
pub(crate) fn kernels<F: Runs32>(cpu: crate::cpu::Detected) -> crate::format::FormatKernels {
    let _ = cpu;
    crate::format::FormatKernels::reference::<F>()
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod tiles;
#[cfg(target_arch = "x86_64")]
pub(crate) mod x86_64;

#[cfg(test)]
mod tests;

//! IQ1_S: superblocks of 256 values in eight sub-blocks of 32, each group of eight values
//! a point of the ternary lattice [`crate::iq1s_grid`] plus a shift of ±1/8 shared by the
//! sub-block, scaled by an odd 3-bit sub-block scale (50 bytes, 1.5625 bits per value).
//!
//! Layout (`block_iq1_s`, `ggml/src/ggml-common.h`): f16 `d`; `qs[32]`, the low eight bits
//! of each group's grid index (group l of sub-block ib at `4·ib + l`); `qh[8]`, one
//! little-endian u16 per sub-block: bits `3·l..3·l + 3` the index's high three bits for
//! group l, bits 12..15 the scale s, bit 15 the delta's sign.
//!
//! Dequantization (gguf-py's `IQ1_S.dequantize_blocks`, ggml's `dequantize_row_iq1_s` in
//! `ggml-quants.c`): `dl = d · (2s + 1)` in f32, `delta = −0.125` when bit 15 is set
//! else `+0.125` (`IQ1S_DELTA`), `y = dl · (grid + delta)` in f32 (`grid + delta` is
//! exact).
//!
//! It dots with Q8_K activations (`vec_dot_type`, `ggml-cpu/ggml-cpu.c`). The dot product
//! ([`Iq1S::dot_ref`]) is a [`crate::superblock`] sum over **eight times** the values, so
//! it stays in integers: per superblock `isum = Σ_ib ls_ib · Σ_j (8·grid_j + δ_ib) · q_j`
//! (δ = ±1), then `acc = fma(d_w · d_x, isum, acc)` in block order, and the result is
//! `acc / 8`. ggml (`ggml_vec_dot_iq1_s_q8_K`, `ggml-cpu/arch/x86/quants.c`) keeps the grid
//! sum and the delta sum (from the Q8_K sums) apart and joins them in f32 as
//! `sumi + 0.125 · sumi1`; the integers are the same. llama.cpp does not repack IQ1_S.
//!
//! Kernels (`iq1_s/x86_64.rs`, shared with [`crate::iq1_m`]): AVX2, the grid words looked
//! up with the delta folded in as unsigned bytes `u = 8·(grid + 1) + δ + 1` (0..18), so
//! `vpmaddubsw` needs no sign trick, and `Σ u·q − 9·Σ q = Σ (8·grid + δ)·q` with `Σ q`
//! taken from the Q8_K sums; with AVX-512 VNNI the scale product and accumulation are one
//! `vpdpwssd`; up to eight columns per pass over a row.

use dspark_gguf::GgmlType;

use crate::columns::{Activation, Columns};
use crate::cpu::Detected;
use crate::format::{BlockFormat, FormatKernels, Scale};
use crate::iq1s_grid;
use crate::superblock::{self, f16_at, QK_K};

/// Bytes per superblock.
pub const BLOCK_BYTES: usize = 50;

/// The shift of every value from its grid point, in units of the sub-block scale
/// (`IQ1S_DELTA`, `ggml-common.h`; gguf-py's `IQ1_S.delta`).
pub const IQ1S_DELTA: f32 = 0.125;

/// One IQ1_S superblock as laid out on disk.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockIq1S {
    /// Superblock scale, IEEE binary16 bits (little-endian).
    pub d: [u8; 2],
    /// Low eight bits of each group's grid index.
    pub qs: [u8; QK_K / 8],
    /// Per sub-block (u16, little-endian): high index bits, scale, delta sign.
    pub qh: [u8; QK_K / 16],
}
const _: () = assert!(std::mem::size_of::<BlockIq1S>() == BLOCK_BYTES);

/// Sub-block `ib`'s u16 of `block`.
#[inline]
fn qh(block: &[u8], ib: usize) -> u16 {
    u16::from_le_bytes([block[34 + 2 * ib], block[35 + 2 * ib]])
}

/// Sub-block `ib`'s scale `2s + 1` (1..15).
#[inline]
pub fn sub_scale(block: &[u8], ib: usize) -> i32 {
    2 * i32::from((qh(block, ib) >> 12) & 7) + 1
}

/// Sub-block `ib`'s delta sign: −1 or +1.
#[inline]
pub fn delta_sign(block: &[u8], ib: usize) -> i32 {
    if qh(block, ib) & 0x8000 != 0 {
        -1
    } else {
        1
    }
}

/// The grid index of group `l` (0..4) of sub-block `ib`.
#[inline]
pub fn grid_index(block: &[u8], ib: usize, l: usize) -> usize {
    usize::from(block[2 + 4 * ib + l]) | usize::from((qh(block, ib) >> (3 * l)) & 7) << 8
}

/// Dequantizes whole superblocks (see the module doc).
///
/// # Panics
/// If the lengths do not match.
pub fn dequantize_ref(q: &[u8], y: &mut [f32]) {
    assert_eq!(q.len() % BLOCK_BYTES, 0, "IQ1_S input must be whole blocks");
    assert_eq!(y.len(), q.len() / BLOCK_BYTES * QK_K, "IQ1_S output size");
    for (blk, yb) in q.chunks_exact(BLOCK_BYTES).zip(y.chunks_exact_mut(QK_K)) {
        let d = f16_at(blk, 0);
        for (ib, ys) in yb.chunks_exact_mut(32).enumerate() {
            let dl = d * sub_scale(blk, ib) as f32;
            let delta = delta_sign(blk, ib) as f32 * IQ1S_DELTA;
            for (l, yg) in ys.chunks_exact_mut(8).enumerate() {
                let idx = grid_index(blk, ib, l);
                for (j, o) in yg.iter_mut().enumerate() {
                    *o = dl * (f32::from(iq1s_grid::value(idx, j)) + delta);
                }
            }
        }
    }
}

/// Superblock `blk`'s exact integer sum with Q8_K quants `q` (256), in eighths:
/// `Σ_ib ls_ib · Σ_j (8·grid_j + δ_ib) · q_j`.
fn isum8(blk: &[u8], q: &[i8]) -> i32 {
    (0..8)
        .map(|ib| {
            let delta = delta_sign(blk, ib);
            let s: i32 = (0..32)
                .map(|j| {
                    let g = i32::from(iq1s_grid::value(grid_index(blk, ib, j / 8), j % 8));
                    (8 * g + delta) * i32::from(q[32 * ib + j])
                })
                .sum();
            sub_scale(blk, ib) * s
        })
        .sum()
}

/// The IQ1_S format.
pub struct Iq1S;

impl BlockFormat for Iq1S {
    const TYPE: GgmlType = GgmlType::IQ1_S;
    const ACTIVATION: Activation = Activation::Q8_K;
    const SCALES: &'static [Scale] = &[Scale::F16(0)];

    fn dequantize_ref(q: &[u8], y: &mut [f32]) {
        dequantize_ref(q, y)
    }

    /// Per superblock the exact `Σ_ib ls_ib · Σ_j (8·grid_j + δ_ib) · q_j`, then
    /// `acc = fma(d_w · d_x, isum, acc)` in block order from 0, and `acc · 1/8`
    /// ([`crate::superblock`]).
    fn dot_ref(row: &[u8], x: &Columns<'_>, c: usize) -> f32 {
        let (dx, qx) = x.q8(c);
        let blk = |b: usize| &row[b * BLOCK_BYTES..(b + 1) * BLOCK_BYTES];
        superblock::dot(
            row.len() / BLOCK_BYTES,
            |b| f16_at(blk(b), 0),
            dx,
            |b| isum8(blk(b), &qx[b * QK_K..(b + 1) * QK_K]),
            IQ1S_DELTA,
        )
    }

    fn kernels(cpu: Detected) -> FormatKernels {
        let mut k = FormatKernels::reference::<Iq1S>();
        #[cfg(target_arch = "x86_64")]
        {
            use crate::cpu::Isa;
            use crate::superblock::x86_64::{rows_avx2, rows_avx512};
            if cpu.has_avx2() {
                k.rows = |w, first, x, out| {
                    // SAFETY: built only from a `Detected` with AVX2, FMA and F16C.
                    unsafe { rows_avx2::<x86_64::Iq1<x86_64::SubS, false>>(w, first, x, out) }
                };
            }
            if cpu.isa() == Isa::Avx512Vnni {
                k.rows = |w, first, x, out| {
                    // SAFETY: built only from a `Detected` with AVX-512 F, VL, BW and
                    // VNNI and the AVX2 set.
                    unsafe { rows_avx512::<x86_64::Iq1<x86_64::SubS, true>>(w, first, x, out) }
                };
            }
        }
        let _ = cpu;
        k
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod x86_64;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_come_from_the_documented_bits() {
        let mut b = [0u8; BLOCK_BYTES];
        b[2 + 4 * 3 + 2] = 0xAB; // sub-block 3, group 2: low bits
        let h: u16 = 0x8000 | (5 << 12) | (6 << 6); // delta −, s = 5, group 2 high bits 6
        b[34 + 6..34 + 8].copy_from_slice(&h.to_le_bytes());
        assert_eq!(grid_index(&b, 3, 2), 0x6AB);
        assert_eq!(sub_scale(&b, 3), 11);
        assert_eq!(delta_sign(&b, 3), -1);
        assert_eq!(delta_sign(&b, 2), 1);
        assert_eq!(sub_scale(&b, 2), 1);
    }
}

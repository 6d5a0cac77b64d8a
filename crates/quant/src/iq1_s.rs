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
//! It dots with Q8_K activations (`vec_dot_type`, `ggml-cpu/ggml-cpu.c`) in the order of
//! ggml's x86 `ggml_vec_dot_iq1_s_q8_K` ([`Iq1S::dot_ref`]): eight lanes of the grid part
//! per superblock, the delta part (from the Q8_K sums) in a scalar beside them, joined as
//! `hsum + 0.125 · scalar` at the end (llama.cpp does not repack IQ1_S; in a prompt's
//! forward its tiled order, [`crate::tiled`], in eighths).
//!
//! Kernels: the scalar reference for now (the earlier SIMD kernel summed in another order).

use dspark_gguf::GgmlType;

use crate::columns::{Activation, Columns};
use crate::cpu::Detected;
use crate::format::{BlockFormat, FormatKernels, Scale};
use crate::iq1s_grid;
use crate::superblock::{f16_at, QK_K};

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

/// The IQ1_S format.
pub struct Iq1S;

/// llama.cpp's prompt orders ([`crate::tiled`]): the super-block decoded.
impl crate::tiled::TiledOrder for Iq1S {
    const SUPER_BYTES: usize = BLOCK_BYTES;
    const HAS_MIN: bool = false;
    fn decode(b: &[u8], out: &mut crate::tiled::Decoded) {
        // In eighths: `8 · grid + δ`, so `d_w = d / 8`, as llama.cpp's tile holds it.
        for (v, w) in out.w.iter_mut().enumerate() {
            let ib = v / 32;
            let g = iq1s_grid::value(grid_index(b, ib, (v % 32) / 8), v % 8);
            *w = (8 * i32::from(g) + delta_sign(b, ib)) as i8;
        }
        for t in 0..16 {
            out.sc[t] = sub_scale(b, t / 2) as i16;
        }
        out.min = [0; 16];
        (out.d, out.dmin) = (f16_at(b, 0) * 0.125, 0.0);
    }
}

impl BlockFormat for Iq1S {
    const TYPE: GgmlType = GgmlType::IQ1_S;
    const ACTIVATION: Activation = Activation::Q8_K;
    const SCALES: &'static [Scale] = &[Scale::F16(0)];

    fn dequantize_ref(q: &[u8], y: &mut [f32]) {
        dequantize_ref(q, y)
    }

    /// ggml's x86 order (`ggml_vec_dot_iq1_s_q8_K`, `ggml-cpu/arch/x86/quants.c`): per
    /// superblock eight exact lanes of `ls · grid · q` (`crate::lanes::position_lanes`)
    /// fused with `d = d_x · d_w` into eight accumulators, and the delta part
    /// `Σ_ib ls_ib · δ_ib · (Q8_K sums of the sub-block)` fused with `d` into a scalar; the
    /// result is `hsum8(lanes) + IQ1S_DELTA · scalar`.
    fn dot_ref(row: &[u8], x: &Columns<'_>, c: usize) -> f32 {
        let (dx, qx) = x.q8(c);
        let bs = x.q8_bsums(c);
        let mut acc = crate::lanes::LaneAcc::default();
        for (b, blk) in row.chunks_exact(BLOCK_BYTES).enumerate() {
            let q = &qx[b * QK_K..(b + 1) * QK_K];
            let lanes = crate::lanes::position_lanes(QK_K, |v| {
                let ib = v / 32;
                let g = iq1s_grid::value(grid_index(blk, ib, (v % 32) / 8), v % 8);
                sub_scale(blk, ib) * i32::from(g) * i32::from(q[v])
            });
            let delta: i32 = (0..8)
                .map(|ib| {
                    let s = i32::from(bs[16 * b + 2 * ib]) + i32::from(bs[16 * b + 2 * ib + 1]);
                    s * delta_sign(blk, ib) * sub_scale(blk, ib)
                })
                .sum();
            let d = dx[b] * f16_at(blk, 0);
            acc.add(d, &lanes);
            acc.add_min(d, delta as f32);
        }
        acc.sum() + IQ1S_DELTA * acc.summs()
    }

    fn kernels(cpu: Detected) -> FormatKernels {
        // The scalar reference (a kernel in ggml's lane order is still to be written);
        // the prompt orders have their kernels.
        let mut k = FormatKernels::reference::<Iq1S>();
        crate::tiled::install::<Iq1S, 0>(&mut k, cpu);
        k
    }
}

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

//! IQ1_M: superblocks of 256 values in eight sub-blocks of 32, each group of eight values
//! a point of the ternary lattice [`crate::iq1s_grid`] plus its own shift of ±1/8, each
//! run of sixteen an odd 3-bit scale; the f16 superblock scale is spread over the top
//! nibbles of the scale bytes (56 bytes, 1.75 bits per value).
//!
//! Layout (`block_iq1_m`, `ggml/src/ggml-common.h`): `qs[32]`, the low eight bits of each
//! group's grid index (group l of sub-block ib at `4·ib + l`); `qh[16]`, one nibble per
//! group (group l of sub-block ib: byte `2·ib + l/2`, low nibble for even l): bits 0..3
//! the index's high three bits, bit 3 the delta's sign; `scales[8]`, four little-endian
//! u16: run r (sixteen values, `r = 2·ib + h`) has scale bits `3·(r mod 4)..+3` of u16
//! `r/4`, and the top nibble of u16 k is bits `4k..4k + 4` of the f16 `d`
//! (`iq1m_scale_t`; [`crate::Scale::F16Nibbles`]).
//!
//! Dequantization (gguf-py's `IQ1_M.dequantize_blocks`, ggml's `dequantize_row_iq1_m` in
//! `ggml-quants.c`): `dl = d · (2s + 1)` in f32 per run, `delta = −0.125` when the
//! group's bit 3 is set else `+0.125` (`IQ1M_DELTA`), `y = dl · (grid + delta)` in f32.
//!
//! It dots with Q8_K activations (`vec_dot_type`, `ggml-cpu/ggml-cpu.c`) in the order of
//! ggml's x86 `ggml_vec_dot_iq1_m_q8_K` ([`Iq1M::dot_ref`]): two sets of eight lanes per
//! superblock, the grid part and the delta part, each in its own accumulators, joined as
//! `fma(hsum(delta), 0.125, hsum(grid))` (llama.cpp does not repack IQ1_M; in a prompt's
//! forward its tiled order, [`crate::tiled`], in eighths).
//!
//! Kernels: the scalar reference for now (the earlier SIMD kernel summed in another order).

use dspark_gguf::GgmlType;

use crate::columns::{Activation, Columns};
use crate::cpu::Detected;
use crate::format::{f16_from_nibbles, BlockFormat, FormatKernels, Scale};
use crate::iq1s_grid;
use crate::superblock::QK_K;

/// Bytes per superblock.
pub const BLOCK_BYTES: usize = 56;

/// The shift of every value from its grid point, in units of the run scale (`IQ1M_DELTA`,
/// `ggml-common.h`; gguf-py's `IQ1_M.delta`).
pub const IQ1M_DELTA: f32 = 0.125;

/// Where the scale bytes start.
const SCALES_AT: usize = 48;

/// One IQ1_M superblock as laid out on disk.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockIq1M {
    /// Low eight bits of each group's grid index.
    pub qs: [u8; QK_K / 8],
    /// One nibble per group: high index bits and delta sign.
    pub qh: [u8; QK_K / 16],
    /// Run scales and, in the top nibbles, the f16 superblock scale.
    pub scales: [u8; QK_K / 32],
}
const _: () = assert!(std::mem::size_of::<BlockIq1M>() == BLOCK_BYTES);

/// The superblock scale `d` of `block`, as f32.
#[inline]
pub fn scale(block: &[u8]) -> f32 {
    half::f16::from_bits(f16_from_nibbles(block, SCALES_AT)).to_f32()
}

/// Run `r`'s (sixteen values) scale `2s + 1` (1..15).
#[inline]
pub fn run_scale(block: &[u8], r: usize) -> i32 {
    let at = SCALES_AT + 2 * (r / 4);
    let sc = u16::from_le_bytes([block[at], block[at + 1]]);
    2 * i32::from((sc >> (3 * (r % 4))) & 7) + 1
}

/// Group `g`'s (eight values, `g = 4·ib + l`) nibble of `block`.
#[inline]
fn nibble(block: &[u8], g: usize) -> u8 {
    (block[32 + g / 2] >> (4 * (g % 2))) & 0x0F
}

/// Group `g`'s grid index.
#[inline]
pub fn grid_index(block: &[u8], g: usize) -> usize {
    usize::from(block[g]) | usize::from(nibble(block, g) & 7) << 8
}

/// Group `g`'s delta sign: −1 or +1.
#[inline]
pub fn delta_sign(block: &[u8], g: usize) -> i32 {
    if nibble(block, g) & 8 != 0 {
        -1
    } else {
        1
    }
}

/// Dequantizes whole superblocks (see the module doc).
///
/// # Panics
/// If the lengths do not match.
pub fn dequantize_ref(q: &[u8], y: &mut [f32]) {
    assert_eq!(q.len() % BLOCK_BYTES, 0, "IQ1_M input must be whole blocks");
    assert_eq!(y.len(), q.len() / BLOCK_BYTES * QK_K, "IQ1_M output size");
    for (blk, yb) in q.chunks_exact(BLOCK_BYTES).zip(y.chunks_exact_mut(QK_K)) {
        let d = scale(blk);
        for (g, yg) in yb.chunks_exact_mut(8).enumerate() {
            let dl = d * run_scale(blk, g / 2) as f32;
            let delta = delta_sign(blk, g) as f32 * IQ1M_DELTA;
            let idx = grid_index(blk, g);
            for (j, o) in yg.iter_mut().enumerate() {
                *o = dl * (f32::from(iq1s_grid::value(idx, j)) + delta);
            }
        }
    }
}

/// The IQ1_M format.
pub struct Iq1M;

/// llama.cpp's prompt orders ([`crate::tiled`]): the super-block decoded.
impl crate::tiled::TiledOrder for Iq1M {
    const SUPER_BYTES: usize = BLOCK_BYTES;
    const HAS_MIN: bool = false;
    fn decode(b: &[u8], out: &mut crate::tiled::Decoded) {
        // In eighths: `8 · grid + δ`, so `d_w = d / 8`, as llama.cpp's tile holds it.
        for (v, w) in out.w.iter_mut().enumerate() {
            let g = iq1s_grid::value(grid_index(b, v / 8), v % 8);
            *w = (8 * i32::from(g) + delta_sign(b, v / 8)) as i8;
        }
        for t in 0..16 {
            out.sc[t] = run_scale(b, t) as i16;
        }
        out.min = [0; 16];
        (out.d, out.dmin) = (scale(b) * 0.125, 0.0);
    }
}

impl BlockFormat for Iq1M {
    const TYPE: GgmlType = GgmlType::IQ1_M;
    const ACTIVATION: Activation = Activation::Q8_K;
    const SCALES: &'static [Scale] = &[Scale::F16Nibbles(SCALES_AT)];

    fn dequantize_ref(q: &[u8], y: &mut [f32]) {
        dequantize_ref(q, y)
    }

    /// ggml's x86 order (`ggml_vec_dot_iq1_m_q8_K`, `ggml-cpu/arch/x86/quants.c`): per
    /// superblock two sets of eight exact lanes (`crate::lanes::position_lanes`), of
    /// `ls · grid · q` and of `ls · δ · q`, each fused with `d = d_x · d_w` into its own
    /// eight accumulators; the result is `fma(hsum8(δ lanes), IQ1M_DELTA, hsum8(grid
    /// lanes))`.
    fn dot_ref(row: &[u8], x: &Columns<'_>, c: usize) -> f32 {
        let (dx, qx) = x.q8(c);
        let mut grid = crate::lanes::LaneAcc::default();
        let mut delta = crate::lanes::LaneAcc::default();
        for (b, blk) in row.chunks_exact(BLOCK_BYTES).enumerate() {
            let q = &qx[b * QK_K..(b + 1) * QK_K];
            let g = crate::lanes::position_lanes(QK_K, |v| {
                let w = iq1s_grid::value(grid_index(blk, v / 8), v % 8);
                run_scale(blk, v / 16) * i32::from(w) * i32::from(q[v])
            });
            let e = crate::lanes::position_lanes(QK_K, |v| {
                run_scale(blk, v / 16) * delta_sign(blk, v / 8) * i32::from(q[v])
            });
            let d = dx[b] * scale(blk);
            grid.add(d, &g);
            delta.add(d, &e);
        }
        delta.sum().mul_add(IQ1M_DELTA, grid.sum())
    }

    fn kernels(cpu: Detected) -> FormatKernels {
        // The scalar reference (a kernel in ggml's lane order is still to be written);
        // the prompt orders have their kernels.
        let mut k = FormatKernels::reference::<Iq1M>();
        crate::tiled::install::<Iq1M, 0>(&mut k, cpu);
        k
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_come_from_the_documented_bits() {
        let mut b = [0u8; BLOCK_BYTES];
        // f16 1.5 = 0x3E00: nibbles 0, 0, E, 3 (lowest first) in u16 0..4's top nibbles.
        b[SCALES_AT + 5] = 0xE0;
        b[SCALES_AT + 7] = 0x30;
        assert_eq!(scale(&b), 1.5);
        // Run 6 (u16 1, field 2): s = 5; run 7 (u16 1, field 3, bits 9..12): s = 2.
        let sc: u16 = (5 << 6) | (2 << 9);
        b[SCALES_AT + 2..SCALES_AT + 4].copy_from_slice(&sc.to_le_bytes());
        assert_eq!(run_scale(&b, 6), 11);
        assert_eq!(run_scale(&b, 7), 5);
        assert_eq!(run_scale(&b, 5), 1);
        assert_eq!(scale(&b), 1.5, "the run scales leave the f16 alone");
        // Group 13 = sub-block 3, l = 1: byte 32 + 6, high nibble.
        b[13] = 0x42;
        b[32 + 6] = 0xD0;
        assert_eq!(grid_index(&b, 13), 0x542);
        assert_eq!(delta_sign(&b, 13), -1);
        assert_eq!(delta_sign(&b, 12), 1);
    }
}

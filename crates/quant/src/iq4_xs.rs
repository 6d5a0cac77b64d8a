//! IQ4_XS: superblocks of 256 values in eight sub-blocks of 32, each value a 4-bit index
//! into the non-linear table [`KVALUES_IQ4NL`], each sub-block a 6-bit scale (136 bytes).
//!
//! Layout (`block_iq4_xs`, `ggml/src/ggml-common.h`): f16 `d`; u16 `scales_h` (two high
//! bits of each sub-block scale, sub-block ib at bits `2·ib`); `scales_l[4]` (four low
//! bits, sub-block ib in the low nibble of byte `ib/2` when ib is even, else the high
//! one); `qs[128]`, sixteen bytes per sub-block: byte j's low nibble is value j, its high
//! nibble value j + 16.
//!
//! Dequantization (gguf-py's `IQ4_XS.dequantize_blocks`, ggml's `dequantize_row_iq4_xs`
//! in `ggml-quants.c`): `ls = (low | high << 4) − 32` (−32..31), `dl = d · ls` in f32,
//! `y = dl · kvalue` in f32.
//!
//! It dots with Q8_K activations (`vec_dot_type`, `ggml-cpu/ggml-cpu.c`), in the order of
//! ggml's x86 kernel (`ggml_vec_dot_iq4_xs_q8_K`, `ggml-cpu/arch/x86/quants.c`; llama.cpp
//! does not re-lay IQ4_XS): per superblock eight exact integer lanes (`vpshufb` lookup,
//! `vpsignb` trick — [`crate::superblock::signed_mul`] —, `vpmaddubsw`, `vpmaddwd` by the
//! sub-block scale), each fused with `d_w · d_x` into its own accumulator, the eight
//! reduced at the end ([`Iq4Xs::dot_ref`]).
//!
//! Kernel (`iq4_xs/x86_64.rs`): AVX2, a row at a time, up to four columns per pass.

use dspark_gguf::GgmlType;

use crate::columns::{Activation, Columns};
use crate::cpu::Detected;
use crate::format::{BlockFormat, FormatKernels, Scale};
use crate::superblock::{f16_at, signed_mul, QK_K};

/// Bytes per superblock.
pub const BLOCK_BYTES: usize = 136;

/// The non-linear values a 4-bit index stands for: IQ4_NL's table.
pub use crate::iq4_nl::KVALUES as KVALUES_IQ4NL;

/// One IQ4_XS superblock as laid out on disk.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockIq4Xs {
    /// Superblock scale, IEEE binary16 bits (little-endian).
    pub d: [u8; 2],
    /// High two bits of the eight sub-block scales (u16, little-endian).
    pub scales_h: [u8; 2],
    /// Low four bits of the eight sub-block scales.
    pub scales_l: [u8; QK_K / 64],
    /// 4-bit indices, sixteen bytes per sub-block.
    pub qs: [u8; QK_K / 2],
}
const _: () = assert!(std::mem::size_of::<BlockIq4Xs>() == BLOCK_BYTES);

/// Sub-block `ib`'s scale `ls` (−32..31) of superblock `block`.
#[inline]
pub fn sub_scale(block: &[u8], ib: usize) -> i32 {
    let h = u16::from_le_bytes([block[2], block[3]]);
    let low = (block[4 + ib / 2] >> (4 * (ib % 2))) & 0x0F;
    let high = ((h >> (2 * ib)) & 3) as u8;
    i32::from(low | high << 4) - 32
}

/// Value `j` (0..32) of sub-block `ib` of `block`, as the table's integer.
#[inline]
fn value(block: &[u8], ib: usize, j: usize) -> i8 {
    let byte = block[8 + 16 * ib + j % 16];
    KVALUES_IQ4NL[usize::from((byte >> (4 * (j / 16))) & 0x0F)]
}

/// Dequantizes whole superblocks (see the module doc).
///
/// # Panics
/// If the lengths do not match.
pub fn dequantize_ref(q: &[u8], y: &mut [f32]) {
    assert_eq!(
        q.len() % BLOCK_BYTES,
        0,
        "IQ4_XS input must be whole blocks"
    );
    assert_eq!(y.len(), q.len() / BLOCK_BYTES * QK_K, "IQ4_XS output size");
    for (blk, yb) in q.chunks_exact(BLOCK_BYTES).zip(y.chunks_exact_mut(QK_K)) {
        let d = f16_at(blk, 0);
        for (ib, ys) in yb.chunks_exact_mut(32).enumerate() {
            let dl = d * sub_scale(blk, ib) as f32;
            for (j, o) in ys.iter_mut().enumerate() {
                *o = dl * f32::from(value(blk, ib, j));
            }
        }
    }
}

/// Superblock `blk`'s eight integer lanes with Q8_K quants `q` (256), as ggml's AVX2
/// kernel forms them: lane `l` holds `Σ_ib ls_ib · Σ w_j · q_j` over the values `j` at
/// positions `4l..4l + 4` of each sub-block of 32 (products as
/// [`crate::superblock::signed_mul`]). Exact.
pub(crate) fn block_lanes(blk: &[u8], q: &[i8]) -> [i32; 8] {
    let mut lanes = [0i32; 8];
    for ib in 0..8 {
        let ls = sub_scale(blk, ib);
        for (l, lane) in lanes.iter_mut().enumerate() {
            let s: i32 = (4 * l..4 * l + 4)
                .map(|j| signed_mul(value(blk, ib, j), q[32 * ib + j]))
                .sum();
            *lane += ls * s;
        }
    }
    lanes
}

/// The IQ4_XS format.
pub struct Iq4Xs;

/// llama.cpp's prompt orders ([`crate::tiled`]): the super-block decoded.
impl crate::tiled::TiledOrder for Iq4Xs {
    const SUPER_BYTES: usize = BLOCK_BYTES;
    const HAS_MIN: bool = false;
    fn decode(b: &[u8], out: &mut crate::tiled::Decoded) {
        for (v, w) in out.w.iter_mut().enumerate() {
            *w = value(b, v / 32, v % 32);
        }
        for t in 0..16 {
            out.sc[t] = sub_scale(b, t / 2) as i16;
        }
        out.min = [0; 16];
        (out.d, out.dmin) = (f16_at(b, 0), 0.0);
    }
}

impl BlockFormat for Iq4Xs {
    const TYPE: GgmlType = GgmlType::IQ4_XS;
    const ACTIVATION: Activation = Activation::Q8_K;
    const SCALES: &'static [Scale] = &[Scale::F16(0)];

    fn dequantize_ref(q: &[u8], y: &mut [f32]) {
        dequantize_ref(q, y)
    }

    /// In ggml's x86 order (`vec_dot_iq4_xs_q8_K`, its AVX2 path; llama.cpp does not
    /// re-lay IQ4_XS): per superblock the eight lanes of `block_lanes`, each fused with
    /// `d_w · d_x` into its own accumulator; the lanes reduced by [`crate::lanes::hsum8`].
    fn dot_ref(row: &[u8], x: &Columns<'_>, c: usize) -> f32 {
        let (dx, qx) = x.q8(c);
        let mut acc = crate::lanes::LaneAcc::default();
        for (b, blk) in row.chunks_exact(BLOCK_BYTES).enumerate() {
            let lanes = block_lanes(blk, &qx[b * QK_K..(b + 1) * QK_K]);
            acc.add(f16_at(blk, 0) * dx[b], &lanes);
        }
        acc.sum()
    }

    fn kernels(cpu: Detected) -> FormatKernels {
        let mut k = FormatKernels::reference::<Iq4Xs>();
        crate::tiled::install::<Iq4Xs, 0>(&mut k, cpu);
        #[cfg(target_arch = "x86_64")]
        if cpu.has_avx2() {
            k.rows = |w, first, x, out| {
                // SAFETY: built only from a `Detected` with AVX2, FMA and F16C.
                unsafe { crate::kquant::x86_64::rows_avx2::<x86_64::Rows>(w, first, x, out) }
            };
        }
        let _ = cpu;
        k
    }
}

#[cfg(target_arch = "x86_64")]
mod x86_64;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sub_scales_take_their_bits_from_both_fields() {
        let mut b = [0u8; BLOCK_BYTES];
        b[2..4].copy_from_slice(&0b11_10_01_00_11_10_01_00u16.to_le_bytes());
        b[4..8].copy_from_slice(&[0x21, 0x43, 0x65, 0x87]);
        let want = [1, 2 + 16, 3 + 32, 4 + 48, 5, 6 + 16, 7 + 32, 8 + 48].map(|v| v - 32);
        for (ib, w) in want.into_iter().enumerate() {
            assert_eq!(sub_scale(&b, ib), w, "sub-block {ib}");
        }
    }

    #[test]
    fn values_are_low_nibbles_then_high_nibbles() {
        let mut b = [0u8; BLOCK_BYTES];
        b[0..2].copy_from_slice(&half::f16::from_f32(1.0).to_bits().to_le_bytes());
        b[2..4].copy_from_slice(&0xFFFFu16.to_le_bytes());
        b[4..8].copy_from_slice(&[0xFF; 4]); // ls = 63 − 32 = 31
        b[8 + 16] = 0xF0; // sub-block 1: value 0 = index 0, value 16 = index 15
        let mut y = [0.0f32; QK_K];
        dequantize_ref(&b, &mut y);
        assert_eq!(y[32], 31.0 * -127.0);
        assert_eq!(y[48], 31.0 * 113.0);
        assert_eq!(y[33], 31.0 * -127.0);
    }
}

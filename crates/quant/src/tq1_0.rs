//! TQ1_0: ternary superblocks of 256 values packed five (or four) base-3 digits to a byte,
//! and one f16 scale (54 bytes, 1.6875 bits per value).
//!
//! Layout (`block_tq1_0`, `ggml/src/ggml-common.h`): `qs[48]`, `qh[4]`, then f16 `d`. A
//! byte holds digits as a fixed-point fraction: digit l of byte q is
//! `t = ((q · 3^l mod 256) · 3) >> 8` (0..2; ggml writes `q = ⌈Σ t_l 3^(4−l) · 256 / 243⌉`).
//! Value k is
//! - k < 160: digit `k / 32` of `qs[k mod 32]`;
//! - 160 ≤ k < 240: digit `(k − 160) / 16` of `qs[32 + (k − 160) mod 16]`;
//! - 240 ≤ k: digit `(k − 240) / 4` of `qh[(k − 240) mod 4]` (four digits per `qh` byte).
//!
//! Dequantization (gguf-py's `TQ1_0.dequantize_blocks`, ggml's `dequantize_row_tq1_0` in
//! `ggml-quants.c`): `y = d · (t − 1)` in f32. Every byte is a valid encoding.
//!
//! It dots with Q8_K activations (`vec_dot_type`, `ggml-cpu/ggml-cpu.c`) in the order of
//! ggml's `ggml_vec_dot_tq1_0_q8_K` (`ggml-cpu/arch/x86/quants.c`; llama.cpp does not
//! repack TQ1_0): [`crate::superblock::ternary_dot`].
//!
//! Kernels (`tq1_0/x86_64.rs`): AVX2, digits by 16-bit products (`vpmullw` by `3^l`, the
//! byte kept in the high half so the product wraps at 256, then `vpmulhuw` by 3), once
//! per group of columns; per column `vpmaddubsw(t, q)` summed in i16, the Q8_K sums
//! subtracted lane by lane — ggml's lanes; with AVX-512 VNNI, `vpdpbusd` in place of
//! `vpmaddubsw` and the i16 sums.

use dspark_gguf::GgmlType;

use crate::columns::{Activation, Columns};
use crate::cpu::Detected;
use crate::format::{BlockFormat, FormatKernels, Scale};
use crate::superblock::{self, f16_at, QK_K};

/// Bytes per superblock.
pub const BLOCK_BYTES: usize = 54;

/// Where the scale is.
const D_AT: usize = 52;

/// One TQ1_0 superblock as laid out on disk.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockTq1_0 {
    /// Five base-3 digits per byte.
    pub qs: [u8; (QK_K - 4 * QK_K / 64) / 5],
    /// Four base-3 digits per byte.
    pub qh: [u8; QK_K / 64],
    /// Superblock scale, IEEE binary16 bits (little-endian).
    pub d: [u8; 2],
}
const _: () = assert!(std::mem::size_of::<BlockTq1_0>() == BLOCK_BYTES);

/// Digit `l` of byte `q`: `((q · 3^l mod 256) · 3) >> 8`, 0..2.
#[inline]
pub fn digit(q: u8, l: usize) -> u8 {
    const POW3: [u8; 5] = [1, 3, 9, 27, 81];
    ((u16::from(q.wrapping_mul(POW3[l])) * 3) >> 8) as u8
}

/// Value `k` (0..256) of `block` as `t − 1` (−1..1).
#[inline]
pub fn value(block: &[u8], k: usize) -> i32 {
    let t = match k {
        0..160 => digit(block[k % 32], k / 32),
        160..240 => digit(block[32 + (k - 160) % 16], (k - 160) / 16),
        _ => digit(block[48 + (k - 240) % 4], (k - 240) / 4),
    };
    i32::from(t) - 1
}

/// Dequantizes whole superblocks (see the module doc).
///
/// # Panics
/// If the lengths do not match.
pub fn dequantize_ref(q: &[u8], y: &mut [f32]) {
    assert_eq!(q.len() % BLOCK_BYTES, 0, "TQ1_0 input must be whole blocks");
    assert_eq!(y.len(), q.len() / BLOCK_BYTES * QK_K, "TQ1_0 output size");
    for (blk, yb) in q.chunks_exact(BLOCK_BYTES).zip(y.chunks_exact_mut(QK_K)) {
        let d = f16_at(blk, D_AT);
        for (k, o) in yb.iter_mut().enumerate() {
            *o = d * value(blk, k) as f32;
        }
    }
}

/// The TQ1_0 format.
pub struct Tq1_0;

impl BlockFormat for Tq1_0 {
    const TYPE: GgmlType = GgmlType::TQ1_0;
    const ACTIVATION: Activation = Activation::Q8_K;
    const SCALES: &'static [Scale] = &[Scale::F16(D_AT)];

    fn dequantize_ref(q: &[u8], y: &mut [f32]) {
        dequantize_ref(q, y)
    }

    /// ggml's order ([`crate::superblock::ternary_dot`]).
    fn dot_ref(row: &[u8], x: &Columns<'_>, c: usize) -> f32 {
        superblock::ternary_dot(row, x, c, BLOCK_BYTES, D_AT, value)
    }

    fn kernels(cpu: Detected) -> FormatKernels {
        let mut k = FormatKernels::reference::<Tq1_0>();
        #[cfg(target_arch = "x86_64")]
        {
            use crate::cpu::Isa;
            use crate::superblock::x86_64::{rows_avx2, rows_avx512};
            if cpu.has_avx2() {
                k.rows = |w, first, x, out| {
                    // SAFETY: built only from a `Detected` with AVX2, FMA and F16C.
                    unsafe { rows_avx2::<x86_64::Avx2>(w, first, x, out) }
                };
            }
            if cpu.isa() == Isa::Avx512Vnni {
                k.rows = |w, first, x, out| {
                    // SAFETY: built only from a `Detected` with AVX-512 F, VL, BW and
                    // VNNI and the AVX2 set.
                    unsafe { rows_avx512::<x86_64::Avx512>(w, first, x, out) }
                };
            }
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

    /// ggml's packing (`quantize_row_tq1_0_ref`: `q = ⌈v · 256 / 243⌉` for the base-3
    /// number v of the digits, most significant first) reads back digit for digit.
    #[test]
    fn packed_digits_read_back() {
        for v in 0..243u16 {
            let q = ((v * 256).div_ceil(243)) as u8;
            let mut rest = v;
            for l in (0..5).rev() {
                assert_eq!(u16::from(digit(q, l)), rest % 3, "v {v} digit {l}");
                rest /= 3;
            }
        }
        assert!((0..=255u8).all(|q| (0..5).all(|l| digit(q, l) <= 2)));
    }

    #[test]
    fn values_sit_where_the_layout_says() {
        let mut b = [0u8; BLOCK_BYTES];
        let q = |digits: [u16; 5]| {
            let v = digits.iter().fold(0, |v, &d| 3 * v + d);
            ((v * 256).div_ceil(243)) as u8
        };
        b[7] = q([2, 1, 0, 2, 1]);
        b[32 + 3] = q([0, 2, 1, 1, 2]);
        b[48 + 2] = q([1, 2, 0, 2, 0]);
        assert_eq!(
            [0, 1, 2, 3, 4].map(|l| value(&b, 32 * l + 7)),
            [1, 0, -1, 1, 0]
        );
        assert_eq!(
            [0, 1, 2, 3, 4].map(|l| value(&b, 160 + 16 * l + 3)),
            [-1, 1, 0, 0, 1]
        );
        assert_eq!(
            [0, 1, 2, 3].map(|l| value(&b, 240 + 4 * l + 2)),
            [0, 1, -1, 1]
        );
    }
}

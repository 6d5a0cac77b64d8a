//! TQ2_0: ternary superblocks of 256 values, two bits each, and one f16 scale (66 bytes,
//! 2.0625 bits per value).
//!
//! Layout (`block_tq2_0`, `ggml/src/ggml-common.h`): `qs[64]`, then f16 `d`. Byte
//! `32·j + m` holds, in bits `2l..2l + 2`, the code c of value `128·j + 32·l + m` (j = 0,
//! 1; l = 0..4; m = 0..32).
//!
//! Dequantization (gguf-py's `TQ2_0.dequantize_blocks`, ggml's `dequantize_row_tq2_0` in
//! `ggml-quants.c`): `y = d · (c − 1)` in f32. Codes are 0..2 as ggml writes them; the
//! fourth, 3, reads as 2 in both (every byte is a valid encoding).
//!
//! It dots with Q8_K activations (`vec_dot_type`, `ggml-cpu/ggml-cpu.c`) in the order of
//! ggml's `ggml_vec_dot_tq2_0_q8_K` (`ggml-cpu/arch/x86/quants.c`; llama.cpp does not
//! repack TQ2_0): [`crate::superblock::ternary_dot`].
//!
//! Kernels (`tq2_0/x86_64.rs`): AVX2, codes unpacked by shifts and a mask once per group of
//! columns, `vpmaddubsw(c, q)` summed in i16 per column, the Q8_K sums subtracted; with
//! AVX-512 VNNI, `vpdpbusd` in place of `vpmaddubsw` and the i16 sums.

use dspark_gguf::GgmlType;

use crate::columns::{Activation, Columns};
use crate::cpu::Detected;
use crate::format::{BlockFormat, FormatKernels, Scale};
use crate::superblock::{self, f16_at, QK_K};

/// Bytes per superblock.
pub const BLOCK_BYTES: usize = 66;

/// Where the scale is.
const D_AT: usize = 64;

/// One TQ2_0 superblock as laid out on disk.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockTq2_0 {
    /// 2-bit codes, four per byte.
    pub qs: [u8; QK_K / 4],
    /// Superblock scale, IEEE binary16 bits (little-endian).
    pub d: [u8; 2],
}
const _: () = assert!(std::mem::size_of::<BlockTq2_0>() == BLOCK_BYTES);

/// Value `k` (0..256) of `block` as `c − 1` (−1..2).
#[inline]
pub fn value(block: &[u8], k: usize) -> i32 {
    let (j, l, m) = (k / 128, (k % 128) / 32, k % 32);
    i32::from((block[32 * j + m] >> (2 * l)) & 3) - 1
}

/// Dequantizes whole superblocks (see the module doc).
///
/// # Panics
/// If the lengths do not match.
pub fn dequantize_ref(q: &[u8], y: &mut [f32]) {
    assert_eq!(q.len() % BLOCK_BYTES, 0, "TQ2_0 input must be whole blocks");
    assert_eq!(y.len(), q.len() / BLOCK_BYTES * QK_K, "TQ2_0 output size");
    for (blk, yb) in q.chunks_exact(BLOCK_BYTES).zip(y.chunks_exact_mut(QK_K)) {
        let d = f16_at(blk, D_AT);
        for (k, o) in yb.iter_mut().enumerate() {
            *o = d * value(blk, k) as f32;
        }
    }
}

/// The TQ2_0 format.
pub struct Tq2_0;

impl BlockFormat for Tq2_0 {
    const TYPE: GgmlType = GgmlType::TQ2_0;
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
        let mut k = FormatKernels::reference::<Tq2_0>();
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

    #[test]
    fn codes_sit_where_the_layout_says() {
        let mut b = [0u8; BLOCK_BYTES];
        b[32 + 5] = 0b11_10_01_00;
        assert_eq!(value(&b, 128 + 5), -1);
        assert_eq!(value(&b, 128 + 32 + 5), 0);
        assert_eq!(value(&b, 128 + 64 + 5), 1);
        assert_eq!(value(&b, 128 + 96 + 5), 2);
        assert_eq!(value(&b, 5), -1);
    }
}

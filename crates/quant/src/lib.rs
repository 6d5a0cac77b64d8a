//! Block formats for dspark: scalar references and SIMD kernels that agree with them.
//!
//! # Brief overview
//! - [`q8_0`]: the Q8_0 block, [`q8_0::quantize_ref`] (ggml's reference quantizer, bit for
//!   bit) and [`q8_0::dequantize_ref`].
//! - [`float`]: decoding BF16 / F16 / F32 source bytes and encoding F16 / BF16.
//! - [`error`]: quantization error sums with a defined summation order.
//! - [`gemm`]: weight matrix × 1..16 activation columns (F32, F16, BF16, Q8_0 weights), each
//!   column computed exactly as it would be alone.
//! - [`ops`]: RMSNorm, SiLU, softmax, RoPE (NeoX, YaRN).
//! - [`vector`]: the f32 dot product and `y += s·x` of attention.
//! - [`Kernels`]: the fastest implementation of each op this CPU has, chosen once
//!   ([`kernels`]); every fast kernel equals its reference (bytes for quantizers, bits
//!   for the error sums), and the tests hold them to it.
//!
//! Set `DSPARK_FORCE_SCALAR=1` to make [`kernels`] pick the scalar references (CI runs
//! the suite that way too).
//!
//! # Example
//! ```
//! use dspark_quant::{kernels, q8_0};
//!
//! let x: Vec<f32> = (0..64).map(|i| (i as f32 - 32.0) / 10.0).collect();
//! let mut fast = vec![0u8; 68];
//! let mut reference = vec![0u8; 68];
//! (kernels().quantize_q8_0)(&x, &mut fast);
//! q8_0::quantize_ref(&x, &mut reference);
//! assert_eq!(fast, reference);
//! ```
#![deny(missing_docs)]

use std::sync::OnceLock;

pub mod error;
pub mod float;
pub mod gemm;
pub mod ops;
pub mod q8_0;
pub mod rng;
pub mod vector;

pub use error::ErrorSums;
pub use float::SourceDtype;

/// The implementation of each op chosen for this CPU.
#[derive(Clone, Copy, Debug)]
pub struct Kernels {
    /// Which instruction set the kernels use (`"avx512vnni"`, `"avx2"` or `"scalar"`).
    pub isa: &'static str,
    /// Q8_0 quantization, identical in bytes to [`q8_0::quantize_ref`].
    pub quantize_q8_0: fn(&[f32], &mut [u8]),
    /// Q8_0 dequantization, identical in values to [`q8_0::dequantize_ref`].
    pub dequantize_q8_0: fn(&[u8], &mut [f32]),
    /// Error sums, identical in bits to [`error::error_sums_ref`] (NaN payloads aside).
    pub error_sums: fn(&[f32], &[f32]) -> ErrorSums,
    /// Weight row · activation columns, within [`gemm::DOT_TOLERANCE`] of [`gemm::dot_ref`].
    pub dot: gemm::RowKernel,
    /// f32 dot product, within [`gemm::DOT_TOLERANCE`] of [`vector::dot_ref`].
    pub dot_f32: fn(&[f32], &[f32]) -> f32,
    /// `y += s·x`, within rounding of [`vector::axpy_ref`] (fused multiply-add).
    pub axpy_f32: fn(&mut [f32], f32, &[f32]),
}

impl Kernels {
    /// The scalar references.
    pub const SCALAR: Kernels = Kernels {
        isa: "scalar",
        quantize_q8_0: q8_0::quantize_ref,
        dequantize_q8_0: q8_0::dequantize_ref,
        error_sums: error::error_sums_ref,
        dot: gemm::row_ref,
        dot_f32: vector::dot_ref,
        axpy_f32: vector::axpy_ref,
    };

    /// The AVX2 kernels with the AVX-512 VNNI Q8_0 row kernel for several columns (the
    /// same bits as the AVX2 one), or `None` when this CPU lacks any of them.
    pub fn avx512() -> Option<Kernels> {
        #[cfg(target_arch = "x86_64")]
        {
            if is_x86_feature_detected!("avx512f")
                && is_x86_feature_detected!("avx512vl")
                && is_x86_feature_detected!("avx512vnni")
            {
                return Kernels::avx2().map(|k| Kernels {
                    isa: "avx512vnni",
                    dot: |w, first, x, out| {
                        // SAFETY: this table is built only after AVX-512 F, VL and VNNI and
                        // (by `avx2()`) AVX2, FMA and F16C were detected.
                        unsafe { gemm::x86_64::rows_vnni(w, first, x, out) }
                    },
                    ..k
                });
            }
        }
        None
    }

    /// The AVX2 kernels, or `None` when this CPU lacks AVX2, FMA or F16C.
    pub fn avx2() -> Option<Kernels> {
        #[cfg(target_arch = "x86_64")]
        {
            if is_x86_feature_detected!("avx2")
                && is_x86_feature_detected!("fma")
                && is_x86_feature_detected!("f16c")
            {
                return Some(Kernels {
                    isa: "avx2",
                    quantize_q8_0: |x, out| {
                        // SAFETY: this table is built only after AVX2 was detected.
                        unsafe { q8_0::x86_64::quantize_avx2(x, out) }
                    },
                    dequantize_q8_0: |q, y| {
                        // SAFETY: this table is built only after AVX2 was detected.
                        unsafe { q8_0::x86_64::dequantize_avx2(q, y) }
                    },
                    error_sums: |x, y| {
                        // SAFETY: this table is built only after AVX2 was detected.
                        unsafe { error::x86_64::error_sums_avx2(x, y) }
                    },
                    dot: |w, first, x, out| {
                        // SAFETY: this table is built only after AVX2, FMA and F16C were detected.
                        unsafe { gemm::x86_64::rows_avx2(w, first, x, out) }
                    },
                    dot_f32: |a, b| {
                        // SAFETY: this table is built only after AVX2 and FMA were detected.
                        unsafe { vector::x86_64::dot_avx2(a, b) }
                    },
                    axpy_f32: |y, s, x| {
                        // SAFETY: this table is built only after AVX2 and FMA were detected.
                        unsafe { vector::x86_64::axpy_avx2(y, s, x) }
                    },
                });
            }
        }
        None
    }
}

/// The kernels for this CPU, chosen on first use: AVX2 when available, unless
/// `DSPARK_FORCE_SCALAR` is set to anything but `0`.
pub fn kernels() -> &'static Kernels {
    static CHOSEN: OnceLock<Kernels> = OnceLock::new();
    CHOSEN.get_or_init(|| {
        let forced = std::env::var_os("DSPARK_FORCE_SCALAR").is_some_and(|v| v != "0");
        if forced {
            return Kernels::SCALAR;
        }
        Kernels::avx512()
            .or_else(Kernels::avx2)
            .unwrap_or(Kernels::SCALAR)
    })
}

#[cfg(test)]
mod tests;

//! F32: little-endian binary32 values (block length 1, 4 bytes).

use dspark_gguf::GgmlType;

use crate::columns::{Activation, Columns};
use crate::cpu::Detected;
use crate::float::{decode, encode_f32};
use crate::format::{BlockFormat, FormatKernels, Scale};
use crate::SourceDtype;

/// The F32 format.
pub struct Fp32;

impl BlockFormat for Fp32 {
    const TYPE: GgmlType = GgmlType::F32;
    const ACTIVATION: Activation = Activation::F32;

    const SCALES: &'static [Scale] = &[];
    const QUANTIZE_REF: Option<crate::format::QuantizeFn> = Some(encode_f32);

    fn dequantize_ref(q: &[u8], y: &mut [f32]) {
        decode(SourceDtype::F32, q, y)
    }

    /// In the plain kernels' order: eight lanes in two accumulators, fused multiply-adds,
    /// [`crate::lanes::hsum8`], then the tail one by one.
    fn dot_ref(row: &[u8], x: &Columns<'_>, c: usize) -> f32 {
        crate::plain::dot_lanes(
            |j| f32::from_le_bytes([row[4 * j], row[4 * j + 1], row[4 * j + 2], row[4 * j + 3]]),
            x.f32(c),
        )
    }

    fn first_non_finite(bytes: &[u8]) -> Option<usize> {
        bytes
            .chunks_exact(4)
            .position(|b| !f32::from_le_bytes([b[0], b[1], b[2], b[3]]).is_finite())
    }

    fn kernels(cpu: Detected) -> FormatKernels {
        let mut k = FormatKernels::reference::<Fp32>();
        // ggml's `vec_dot` for the products tinyBLAS does not take.
        k.tinyblas_cols = crate::plain::TINYBLAS_COLS;
        k.vec_rows = Some(|w, first, x, out| {
            crate::plain::vec_rows_with(
                w,
                first,
                x,
                out,
                |row, y| decode(SourceDtype::F32, row, y),
                crate::vector::dot_f32_ggml_ref,
            )
        });
        k.vec_dot_ref = Some(|row, x, c| {
            crate::plain::vec_dot_with(row, x, c, SourceDtype::F32, crate::vector::dot_f32_ggml_ref)
        });
        #[cfg(target_arch = "x86_64")]
        if cpu.has_avx2() {
            k.rows = |w, first, x, out| {
                // SAFETY: this row is built only from a `Detected` with AVX2, FMA and F16C.
                unsafe {
                    crate::plain::x86_64::rows_plain::<crate::plain::x86_64::LoadF32>(
                        w, first, x, out,
                    )
                }
            };
            k.vec_rows = Some(|w, first, x, out| {
                let decode = |row: &[u8], y: &mut [f32]| decode(SourceDtype::F32, row, y);
                crate::plain::vec_rows_with(w, first, x, out, decode, |a, b| {
                    // SAFETY: this row is built only from a `Detected` with AVX2, FMA and F16C.
                    unsafe { crate::vector::x86_64::dot_f32_ggml_avx2(a, b) }
                })
            });
        }
        let _ = cpu;
        k
    }
}

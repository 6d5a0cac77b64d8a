//! F16: IEEE binary16 values (block length 1, 2 bytes). Encoding rounds to nearest even
//! (numpy `astype(float16)`, as gguf-py writes it).

use dspark_gguf::GgmlType;
use half::f16;

use crate::columns::{Activation, Columns};
use crate::cpu::Detected;
use crate::float::{decode, encode_f16};
use crate::format::{BlockFormat, FormatKernels, Scale};
use crate::SourceDtype;

/// The F16 format.
pub struct Fp16;

impl BlockFormat for Fp16 {
    const TYPE: GgmlType = GgmlType::F16;
    const ACTIVATION: Activation = Activation::F16;

    const SCALES: &'static [Scale] = &[];
    const QUANTIZE_REF: Option<crate::format::QuantizeFn> = Some(encode_f16);

    fn dequantize_ref(q: &[u8], y: &mut [f32]) {
        decode(SourceDtype::F16, q, y)
    }

    /// In the plain kernels' order: eight lanes in two accumulators, fused multiply-adds,
    /// [`crate::lanes::hsum8`], then the tail one by one.
    fn dot_ref(row: &[u8], x: &Columns<'_>, c: usize) -> f32 {
        crate::plain::dot_lanes(
            |j| f16::from_bits(u16::from_le_bytes([row[2 * j], row[2 * j + 1]])).to_f32(),
            x.f32(c),
        )
    }

    fn first_non_finite(bytes: &[u8]) -> Option<usize> {
        // IEEE binary16: all-ones exponent (0x7C00) is infinity or NaN.
        bytes
            .chunks_exact(2)
            .position(|b| u16::from_le_bytes([b[0], b[1]]) & 0x7C00 == 0x7C00)
    }

    fn kernels(cpu: Detected) -> FormatKernels {
        let mut k = FormatKernels::reference::<Fp16>();
        // ggml's `vec_dot` for the products tinyBLAS does not take.
        k.tinyblas_cols = crate::plain::TINYBLAS_COLS;
        k.vec_rows = Some(|w, first, x, out| {
            crate::plain::vec_rows_with(
                w,
                first,
                x,
                out,
                |row, y| decode(SourceDtype::F16, row, y),
                crate::vector::dot_f16_ref,
            )
        });
        k.vec_dot_ref = Some(|row, x, c| {
            crate::plain::vec_dot_with(row, x, c, SourceDtype::F16, crate::vector::dot_f16_ref)
        });
        #[cfg(target_arch = "x86_64")]
        if cpu.has_avx2() {
            k.rows = |w, first, x, out| {
                // SAFETY: this row is built only from a `Detected` with AVX2, FMA and F16C.
                unsafe {
                    crate::plain::x86_64::rows_plain::<crate::plain::x86_64::LoadF16>(
                        w, first, x, out,
                    )
                }
            };
            k.vec_rows = Some(|w, first, x, out| {
                let decode = |row: &[u8], y: &mut [f32]| {
                    // SAFETY: this row is built only from a `Detected` with AVX2 and F16C.
                    unsafe { crate::plain::x86_64::decode_f16(row, y) }
                };
                crate::plain::vec_rows_with(w, first, x, out, decode, |a, b| {
                    // SAFETY: this row is built only from a `Detected` with AVX2, FMA and F16C.
                    unsafe { crate::vector::x86_64::dot_f16_avx2(a, b) }
                })
            });
        }
        let _ = cpu;
        k
    }
}

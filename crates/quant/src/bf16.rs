//! BF16: bfloat16 values, the top half of a binary32 (block length 1, 2 bytes). Decoding
//! is exact; encoding rounds as ggml's `ggml_compute_fp32_to_bf16` (NaN quieted).

use dspark_gguf::GgmlType;
use half::bf16;

use crate::columns::{Activation, Columns};
use crate::cpu::Detected;
use crate::float::{decode, encode_bf16};
use crate::format::{BlockFormat, FormatKernels, Scale};
use crate::SourceDtype;

/// The BF16 format.
pub struct Bf16;

impl BlockFormat for Bf16 {
    const TYPE: GgmlType = GgmlType::BF16;
    const ACTIVATION: Activation = Activation::Bf16;

    const SCALES: &'static [Scale] = &[];
    const QUANTIZE_REF: Option<crate::format::QuantizeFn> = Some(encode_bf16);

    fn dequantize_ref(q: &[u8], y: &mut [f32]) {
        decode(SourceDtype::BF16, q, y)
    }

    /// In the plain kernels' order: eight lanes in two accumulators, fused multiply-adds,
    /// [`crate::lanes::hsum8`], then the tail one by one.
    fn dot_ref(row: &[u8], x: &Columns<'_>, c: usize) -> f32 {
        crate::plain::dot_lanes(
            |j| bf16::from_bits(u16::from_le_bytes([row[2 * j], row[2 * j + 1]])).to_f32(),
            x.f32(c),
        )
    }

    fn first_non_finite(bytes: &[u8]) -> Option<usize> {
        // bfloat16: all-ones exponent (0x7F80) is infinity or NaN.
        bytes
            .chunks_exact(2)
            .position(|b| u16::from_le_bytes([b[0], b[1]]) & 0x7F80 == 0x7F80)
    }

    fn kernels(cpu: Detected) -> FormatKernels {
        let mut k = FormatKernels::reference::<Bf16>();
        #[cfg(target_arch = "x86_64")]
        if cpu.has_avx2() {
            k.rows = |w, first, x, out| {
                // SAFETY: this row is built only from a `Detected` with AVX2, FMA and F16C.
                unsafe {
                    crate::plain::x86_64::rows_plain::<crate::plain::x86_64::LoadBf16>(
                        w, first, x, out,
                    )
                }
            };
        }
        let _ = cpu;
        k
    }
}

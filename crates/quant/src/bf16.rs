//! BF16: bfloat16 values, the top half of a binary32 (block length 1, 2 bytes). Decoding
//! is exact; encoding rounds as ggml's `ggml_compute_fp32_to_bf16` (NaN quieted).

use dspark_gguf::GgmlType;
use half::bf16;

use crate::float::{decode, encode_bf16};
use crate::format::{Activation, BlockFormat, Detected, FormatKernels};
use crate::gemm::Columns;
use crate::SourceDtype;

/// The BF16 format.
pub struct Bf16;

impl BlockFormat for Bf16 {
    const TYPE: GgmlType = GgmlType::BF16;
    const ACTIVATION: Activation = Activation::Bf16;

    fn quantize_ref(x: &[f32], out: &mut [u8]) {
        encode_bf16(x, out)
    }

    fn dequantize_ref(q: &[u8], y: &mut [f32]) {
        decode(SourceDtype::BF16, q, y)
    }

    fn dot_ref(row: &[u8], x: &Columns<'_>, c: usize) -> f32 {
        row.chunks_exact(2)
            .zip(x.f32(c))
            .map(|(b, &v)| bf16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32() * v)
            .sum()
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
                    crate::gemm::x86_64::rows_plain::<crate::gemm::x86_64::LoadBf16>(
                        w, first, x, out,
                    )
                }
            };
        }
        let _ = cpu;
        k
    }
}

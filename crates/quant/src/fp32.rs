//! F32: little-endian binary32 values (block length 1, 4 bytes).

use dspark_gguf::GgmlType;

use crate::float::{decode, encode_f32};
use crate::format::{Activation, BlockFormat, Detected, FormatKernels};
use crate::gemm::Columns;
use crate::SourceDtype;

/// The F32 format.
pub struct Fp32;

impl BlockFormat for Fp32 {
    const TYPE: GgmlType = GgmlType::F32;
    const ACTIVATION: Activation = Activation::F32;

    fn quantize_ref(x: &[f32], out: &mut [u8]) {
        encode_f32(x, out)
    }

    fn dequantize_ref(q: &[u8], y: &mut [f32]) {
        decode(SourceDtype::F32, q, y)
    }

    fn dot_ref(row: &[u8], x: &Columns<'_>, c: usize) -> f32 {
        row.chunks_exact(4)
            .zip(x.f32(c))
            .map(|(b, &v)| f32::from_le_bytes([b[0], b[1], b[2], b[3]]) * v)
            .sum()
    }

    fn first_non_finite(bytes: &[u8]) -> Option<usize> {
        bytes
            .chunks_exact(4)
            .position(|b| !f32::from_le_bytes([b[0], b[1], b[2], b[3]]).is_finite())
    }

    fn kernels(cpu: Detected) -> FormatKernels {
        let mut k = FormatKernels::reference::<Fp32>();
        #[cfg(target_arch = "x86_64")]
        if cpu.has_avx2() {
            k.rows = |w, first, x, out| {
                // SAFETY: this row is built only from a `Detected` with AVX2, FMA and F16C.
                unsafe {
                    crate::gemm::x86_64::rows_plain::<crate::gemm::x86_64::LoadF32>(
                        w, first, x, out,
                    )
                }
            };
        }
        let _ = cpu;
        k
    }
}

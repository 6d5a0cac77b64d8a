//! AVX2 + FMA + F16C row kernels for [`super::gemm_with`], checked against
//! [`super::dot_ref`] within [`super::DOT_TOLERANCE`] by the tests.

use std::arch::x86_64::*;

use half::f16;

use super::WeightType;
use crate::q8_0::BLOCK_BYTES;

/// Horizontal sum of 8 lanes, in a fixed order.
#[target_feature(enable = "avx2")]
fn hsum(v: __m256) -> f32 {
    let s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    let s1 = _mm_add_ss(s2, _mm_shuffle_ps::<1>(s2, s2));
    _mm_cvtss_f32(s1)
}

/// One row · one column.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_avx2(ty: WeightType, row: &[u8], x: &[f32], xq: &[u8]) -> f32 {
    match ty {
        WeightType::F32 | WeightType::F16 | WeightType::BF16 => {
            let n = x.len();
            assert_eq!(row.len(), n * if ty == WeightType::F32 { 4 } else { 2 });
            let mut acc = [_mm256_setzero_ps(); 2];
            let mut k = 0;
            while k + 8 <= n {
                // SAFETY: k + 8 <= n, and row holds n values of the type's width, so the
                // 8-value loads at element k are in bounds of both slices.
                let (w, xv) = unsafe {
                    let w = match ty {
                        WeightType::F32 => _mm256_loadu_ps(row.as_ptr().add(4 * k).cast()),
                        WeightType::F16 => {
                            _mm256_cvtph_ps(_mm_loadu_si128(row.as_ptr().add(2 * k).cast()))
                        }
                        _ => _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(
                            _mm_loadu_si128(row.as_ptr().add(2 * k).cast()),
                        ))),
                    };
                    (w, _mm256_loadu_ps(x.as_ptr().add(k)))
                };
                let a = (k / 8) % 2;
                acc[a] = _mm256_fmadd_ps(w, xv, acc[a]);
                k += 8;
            }
            let mut s = hsum(_mm256_add_ps(acc[0], acc[1]));
            for (j, &xv) in x.iter().enumerate().skip(k) {
                s += match ty {
                    WeightType::F32 => f32::from_le_bytes([
                        row[4 * j],
                        row[4 * j + 1],
                        row[4 * j + 2],
                        row[4 * j + 3],
                    ]),
                    WeightType::F16 => {
                        f16::from_bits(u16::from_le_bytes([row[2 * j], row[2 * j + 1]])).to_f32()
                    }
                    _ => f32::from_bits(
                        u32::from(u16::from_le_bytes([row[2 * j], row[2 * j + 1]])) << 16,
                    ),
                } * xv;
            }
            s
        }
        WeightType::Q8_0 => {
            assert_eq!(row.len(), xq.len());
            let ones = _mm256_set1_epi16(1);
            let mut acc = _mm256_setzero_ps();
            for (wb, xb) in row
                .chunks_exact(BLOCK_BYTES)
                .zip(xq.chunks_exact(BLOCK_BYTES))
            {
                let dw = f16::from_bits(u16::from_le_bytes([wb[0], wb[1]])).to_f32();
                let dx = f16::from_bits(u16::from_le_bytes([xb[0], xb[1]])).to_f32();
                // SAFETY: each block has 32 quant bytes after its 2-byte scale.
                let (qw, qx) = unsafe {
                    (
                        _mm256_loadu_si256(wb[2..].as_ptr().cast()),
                        _mm256_loadu_si256(xb[2..].as_ptr().cast()),
                    )
                };
                // maddubs multiplies unsigned × signed: move w's sign onto x. Pair sums of
                // at most 2 · 128 · 127 fit i16.
                let aw = _mm256_sign_epi8(qw, qw);
                let sx = _mm256_sign_epi8(qx, qw);
                let i32s = _mm256_madd_epi16(_mm256_maddubs_epi16(aw, sx), ones);
                acc = _mm256_fmadd_ps(_mm256_set1_ps(dw * dx), _mm256_cvtepi32_ps(i32s), acc);
            }
            hsum(acc)
        }
    }
}

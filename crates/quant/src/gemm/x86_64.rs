//! AVX2 + FMA + F16C row kernels for [`super::gemm_with`], checked against
//! [`super::dot_ref`] within [`super::DOT_TOLERANCE`] by the tests.
//!
//! A row is multiplied with up to [`GROUP`] columns at once: the weight block is loaded
//! and converted once, then each column runs its own accumulators. Column `c`'s
//! instruction sequence is the same whatever the group holds, so one column alone and the
//! same column among others give the same bits.

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

/// Eight weights from element `k` of `row`, as f32.
///
/// # Safety
/// The CPU must support AVX2 and F16C, and `row` must hold at least `k + 8` values of `ty`.
#[target_feature(enable = "avx2,f16c")]
unsafe fn load8(ty: WeightType, row: &[u8], k: usize) -> __m256 {
    // SAFETY: the caller guarantees k + 8 values are in bounds.
    unsafe {
        match ty {
            WeightType::F32 => _mm256_loadu_ps(row.as_ptr().add(4 * k).cast()),
            WeightType::F16 => _mm256_cvtph_ps(_mm_loadu_si128(row.as_ptr().add(2 * k).cast())),
            _ => _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(
                _mm_loadu_si128(row.as_ptr().add(2 * k).cast()),
            ))),
        }
    }
}

fn scalar_weight(ty: WeightType, row: &[u8], j: usize) -> f32 {
    match ty {
        WeightType::F32 => {
            f32::from_le_bytes([row[4 * j], row[4 * j + 1], row[4 * j + 2], row[4 * j + 3]])
        }
        WeightType::F16 => {
            f16::from_bits(u16::from_le_bytes([row[2 * j], row[2 * j + 1]])).to_f32()
        }
        _ => f32::from_bits(u32::from(u16::from_le_bytes([row[2 * j], row[2 * j + 1]])) << 16),
    }
}

/// Q8_0 row · G columns (`xq[c]` = column c's blocks). Column c's operations do not
/// depend on G.
#[target_feature(enable = "avx2,fma,f16c")]
fn q8_group<const G: usize>(row: &[u8], xq: [&[u8]; G], out: &mut [f32]) {
    let ones = _mm256_set1_epi16(1);
    let mut acc = [_mm256_setzero_ps(); G];
    for (b, wb) in row.chunks_exact(BLOCK_BYTES).enumerate() {
        let dw = f16::from_bits(u16::from_le_bytes([wb[0], wb[1]])).to_f32();
        // SAFETY: each block has 32 quant bytes after its 2-byte scale.
        let qw = unsafe { _mm256_loadu_si256(wb[2..].as_ptr().cast()) };
        // maddubs multiplies unsigned × signed: move w's sign onto x. Pair sums of at most
        // 2 · 128 · 127 fit i16.
        let aw = _mm256_sign_epi8(qw, qw);
        for c in 0..G {
            let xb = &xq[c][b * BLOCK_BYTES..(b + 1) * BLOCK_BYTES];
            let dx = f16::from_bits(u16::from_le_bytes([xb[0], xb[1]])).to_f32();
            // SAFETY: xb is one whole block (the slice above is bounds-checked).
            let qx = unsafe { _mm256_loadu_si256(xb[2..].as_ptr().cast()) };
            let i32s = _mm256_madd_epi16(_mm256_maddubs_epi16(aw, _mm256_sign_epi8(qx, qw)), ones);
            acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(dw * dx), _mm256_cvtepi32_ps(i32s), acc[c]);
        }
    }
    for c in 0..G {
        out[c] = hsum(acc[c]);
    }
}

/// F32 / F16 / BF16 row · G columns (`x[c]` = column c). Column c's operations do not
/// depend on G.
#[target_feature(enable = "avx2,fma,f16c")]
fn plain_group<const G: usize>(ty: WeightType, row: &[u8], x: [&[f32]; G], out: &mut [f32]) {
    let cols = x[0].len();
    let width = if ty == WeightType::F32 { 4 } else { 2 };
    assert_eq!(row.len(), cols * width);
    let mut acc = [[_mm256_setzero_ps(); 2]; G];
    let mut k = 0;
    while k + 8 <= cols {
        // SAFETY: k + 8 <= cols and the row holds cols values.
        let w = unsafe { load8(ty, row, k) };
        let p = (k / 8) % 2;
        for c in 0..G {
            let xc = &x[c][k..k + 8];
            // SAFETY: xc has exactly 8 values.
            let xv = unsafe { _mm256_loadu_ps(xc.as_ptr()) };
            acc[c][p] = _mm256_fmadd_ps(w, xv, acc[c][p]);
        }
        k += 8;
    }
    for c in 0..G {
        let mut s = hsum(_mm256_add_ps(acc[c][0], acc[c][1]));
        for (j, &xv) in x[c].iter().enumerate().skip(k) {
            s += scalar_weight(ty, row, j) * xv;
        }
        out[c] = s;
    }
}

/// Columns sharing one pass over a row.
const GROUP: usize = 4;

/// One row · `out.len()` columns: `x` holds the columns' f32 values (`cols` each), `xq`
/// their Q8_0 blocks (used for Q8_0 rows). Columns go in groups of up to four; each
/// column's result is the same bits whatever its group.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn row_avx2(
    ty: WeightType,
    row: &[u8],
    x: &[f32],
    xq: &[u8],
    cols: usize,
    out: &mut [f32],
) {
    let n = out.len();
    let qb = row.len();
    let mut first = 0;
    while first < n {
        let g = GROUP.min(n - first);
        let o = &mut out[first..first + g];
        if ty == WeightType::Q8_0 {
            let q = |c: usize| &xq[(first + c) * qb..(first + c + 1) * qb];
            match g {
                4 => q8_group::<4>(row, [q(0), q(1), q(2), q(3)], o),
                3 => q8_group::<3>(row, [q(0), q(1), q(2)], o),
                2 => q8_group::<2>(row, [q(0), q(1)], o),
                _ => q8_group::<1>(row, [q(0)], o),
            }
        } else {
            let f = |c: usize| &x[(first + c) * cols..(first + c + 1) * cols];
            match g {
                4 => plain_group::<4>(ty, row, [f(0), f(1), f(2), f(3)], o),
                3 => plain_group::<3>(ty, row, [f(0), f(1), f(2)], o),
                2 => plain_group::<2>(ty, row, [f(0), f(1)], o),
                _ => plain_group::<1>(ty, row, [f(0)], o),
            }
        }
        first += g;
    }
}

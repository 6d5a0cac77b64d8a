//! AVX2 + FMA versions of [`super::dot_ref`] and [`super::axpy_ref`].

use std::arch::x86_64::*;

/// Dot product with four 8-lane accumulators (32 values per step), reduced in a fixed
/// order, then the leftover values in order.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
#[inline]
pub(crate) unsafe fn dot_avx2(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "dot lengths");
    let n = a.len();
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut i = 0;
    // SAFETY (loads below): i + 8·(j + 1) <= n within each step, so every 8-value load is
    // inside both slices.
    while i + 32 <= n {
        for (j, a_j) in acc.iter_mut().enumerate() {
            // SAFETY: see above.
            let (x, y) = unsafe {
                (
                    _mm256_loadu_ps(pa.add(i + 8 * j)),
                    _mm256_loadu_ps(pb.add(i + 8 * j)),
                )
            };
            *a_j = _mm256_fmadd_ps(x, y, *a_j);
        }
        i += 32;
    }
    while i + 8 <= n {
        // SAFETY: see above.
        let (x, y) = unsafe { (_mm256_loadu_ps(pa.add(i)), _mm256_loadu_ps(pb.add(i))) };
        acc[0] = _mm256_fmadd_ps(x, y, acc[0]);
        i += 8;
    }
    let v = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
    let s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    let mut s = _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps::<1>(s2, s2)));
    for k in i..n {
        s += a[k] * b[k];
    }
    s
}

/// `y += s·x` with FMA, 8 values per step, the leftover values as `y + s·x` fused too.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
#[inline]
pub(crate) unsafe fn axpy_avx2(y: &mut [f32], s: f32, x: &[f32]) {
    assert_eq!(y.len(), x.len(), "axpy lengths");
    let n = y.len();
    let sv = _mm256_set1_ps(s);
    let (py, px) = (y.as_mut_ptr(), x.as_ptr());
    let mut i = 0;
    while i + 8 <= n {
        // SAFETY: i + 8 <= n, inside both slices.
        unsafe {
            let r = _mm256_fmadd_ps(sv, _mm256_loadu_ps(px.add(i)), _mm256_loadu_ps(py.add(i)));
            _mm256_storeu_ps(py.add(i), r);
        }
        i += 8;
    }
    for k in i..n {
        y[k] = s.mul_add(x[k], y[k]);
    }
}

/// [`super::dots_ref`] with [`dot_avx2`] for each key, in one call (one dispatch for all
/// the keys of an attention row; each dot the same bits as a call of its own).
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn dots_avx2(q: &[f32], keys: &[f32], stride: usize, out: &mut [f32]) {
    super::check_strided(q.len(), keys.len(), stride, out.len());
    for (p, o) in out.iter_mut().enumerate() {
        // SAFETY: the features are this function's; the slice is inside `keys` (checked).
        *o = unsafe { dot_avx2(q, &keys[p * stride..p * stride + q.len()]) };
    }
}

/// [`super::axpys_ref`] with [`axpy_avx2`] for each value, in one call.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn axpys_avx2(y: &mut [f32], weights: &[f32], values: &[f32], stride: usize) {
    super::check_strided(y.len(), values.len(), stride, weights.len());
    let len = y.len();
    // Attention heads of 64 and 128 values: `y` stays in registers across every value
    // (the same fused steps in the same order as `axpy_avx2`, so the same bits).
    match len {
        // SAFETY: the features are this function's; the strides were checked above.
        64 => return unsafe { axpys_in_registers::<8>(y, weights, values, stride) },
        // SAFETY: as above.
        128 => return unsafe { axpys_in_registers::<16>(y, weights, values, stride) },
        _ => {}
    }
    for (p, &w) in weights.iter().enumerate() {
        // SAFETY: the features are this function's; the slice is inside `values` (checked).
        unsafe { axpy_avx2(y, w, &values[p * stride..p * stride + len]) };
    }
}

/// [`axpys_avx2`] for `y` of exactly `8 · R` values, held in R registers.
///
/// # Safety
/// The CPU must support AVX2 and FMA; `y.len() == 8 · R` and the rows fit (checked by the
/// caller with `check_strided`).
#[target_feature(enable = "avx2,fma")]
unsafe fn axpys_in_registers<const R: usize>(
    y: &mut [f32],
    weights: &[f32],
    values: &[f32],
    stride: usize,
) {
    assert_eq!(y.len(), 8 * R);
    let py = y.as_mut_ptr();
    // SAFETY: y holds 8·R values.
    let mut acc: [__m256; R] = std::array::from_fn(|j| unsafe { _mm256_loadu_ps(py.add(8 * j)) });
    for (p, &w) in weights.iter().enumerate() {
        let row = &values[p * stride..p * stride + 8 * R];
        let sv = _mm256_set1_ps(w);
        for (j, a) in acc.iter_mut().enumerate() {
            // SAFETY: row holds 8·R values.
            *a = _mm256_fmadd_ps(sv, unsafe { _mm256_loadu_ps(row.as_ptr().add(8 * j)) }, *a);
        }
    }
    for (j, a) in acc.iter().enumerate() {
        // SAFETY: y holds 8·R values.
        unsafe { _mm256_storeu_ps(py.add(8 * j), *a) };
    }
}

/// [`super::scale_round_f16_ref`] with AVX2 and F16C (the same bits: one multiply, one
/// round-to-nearest-even conversion each way).
///
/// # Safety
/// The CPU must support AVX2 and F16C.
#[target_feature(enable = "avx2,f16c")]
pub(crate) unsafe fn scale_round_f16_avx2(y: &mut [f32], s: f32) {
    let n = y.len();
    let sv = _mm256_set1_ps(s);
    let py = y.as_mut_ptr();
    let mut i = 0;
    while i + 8 <= n {
        // SAFETY: i + 8 <= n, inside the slice.
        unsafe {
            let r = _mm256_mul_ps(_mm256_loadu_ps(py.add(i)), sv);
            let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(r);
            _mm256_storeu_ps(py.add(i), _mm256_cvtph_ps(h));
        }
        i += 8;
    }
    super::scale_round_f16_ref(&mut y[i..], s);
}

/// [`super::mad_round_f16_ref`] with AVX2, FMA and F16C (the same bits).
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn mad_round_f16_avx2(y: &mut [f32], x: &[f32], s: f32, fused: usize) {
    assert_eq!(y.len(), x.len(), "mad lengths");
    let n = fused.min(y.len()) / 8 * 8;
    let sv = _mm256_set1_ps(s);
    let (py, px) = (y.as_mut_ptr(), x.as_ptr());
    let mut i = 0;
    while i < n {
        // SAFETY: i + 8 <= n <= both lengths.
        unsafe {
            let r = _mm256_fmadd_ps(_mm256_loadu_ps(px.add(i)), sv, _mm256_loadu_ps(py.add(i)));
            let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(r);
            _mm256_storeu_ps(py.add(i), _mm256_cvtph_ps(h));
        }
        i += 8;
    }
    super::mad_round_f16_ref(&mut y[i..], &x[i..], s, fused.saturating_sub(i));
}

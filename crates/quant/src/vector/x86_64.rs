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
#[inline]
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
#[inline]
pub(crate) unsafe fn mad_round_f16_avx2(y: &mut [f32], x: &[f32], s: f32) {
    assert_eq!(y.len(), x.len(), "mad lengths");
    let n = y.len() / 8 * 8;
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
    super::mad_round_f16_ref(&mut y[i..], &x[i..], s);
}

/// The polynomial part of ggml's vectorised `e^x` on eight lanes: `(n, j)` with `e^x =
/// j · 2^n` (see [`super::ggml_expf`]).
#[target_feature(enable = "avx2,fma")]
#[inline]
fn expf_parts_avx2(x: __m256) -> (__m256, __m256) {
    let c = |bits: u32| _mm256_set1_ps(f32::from_bits(bits));
    let r = c(0x4b40_0000);
    let z = _mm256_fmadd_ps(x, c(0x3fb8_aa3b), r);
    let n = _mm256_sub_ps(z, r);
    let b = _mm256_fnmadd_ps(n, c(0x35bf_be8e), _mm256_fnmadd_ps(n, c(0x3f31_7200), x));
    let u = _mm256_mul_ps(b, b);
    let j = _mm256_fmadd_ps(
        _mm256_fmadd_ps(
            _mm256_fmadd_ps(c(0x3c07_2010), b, c(0x3d2b_9f17)),
            u,
            _mm256_fmadd_ps(c(0x3e2a_af33), b, c(0x3eff_fedb)),
        ),
        u,
        _mm256_fmadd_ps(c(0x3f7f_fff6), b, _mm256_set1_ps(1.0)),
    );
    (n, j)
}

/// [`super::ggml_expf`] on eight lanes: `2^n` applied as two exact powers of two, one
/// rounding (AVX-512's `scalef`, which AVX2 lacks); `|n| > 192` gives `+inf` or `+0`.
#[target_feature(enable = "avx2,fma")]
#[inline]
fn ggml_expf_avx2(x: __m256) -> __m256 {
    let (n, j) = expf_parts_avx2(x);
    let ni = _mm256_cvttps_epi32(n);
    // n / 2 rounded toward zero, as the scalar `i32` division does.
    let half = _mm256_srai_epi32::<1>(_mm256_add_epi32(ni, _mm256_srli_epi32::<31>(ni)));
    let rest = _mm256_sub_epi32(ni, half);
    let pow2 = |e: __m256i| {
        _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_add_epi32(
            e,
            _mm256_set1_epi32(127),
        )))
    };
    let res = _mm256_mul_ps(_mm256_mul_ps(j, pow2(half)), pow2(rest));
    let abs_n = _mm256_andnot_ps(_mm256_set1_ps(-0.0), n);
    let big = _mm256_cmp_ps::<_CMP_GT_OQ>(abs_n, _mm256_set1_ps(192.0));
    let alt = _mm256_blendv_ps(
        _mm256_set1_ps(f32::INFINITY),
        _mm256_setzero_ps(),
        _mm256_cmp_ps::<_CMP_LE_OQ>(n, _mm256_setzero_ps()),
    );
    let nan = _mm256_cmp_ps::<_CMP_UNORD_Q>(n, j);
    let res = _mm256_blendv_ps(res, _mm256_add_ps(j, n), nan);
    _mm256_blendv_ps(res, alt, big)
}

/// [`super::swiglu_ref`] with eight lanes at a time: the same bits.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn swiglu_avx2(gate: &mut [f32], up: &[f32]) {
    assert_eq!(gate.len(), up.len(), "swiglu lengths");
    let grouped = gate.len() - gate.len() % super::SWIGLU_GROUP;
    let (pg, pu) = (gate.as_mut_ptr(), up.as_ptr());
    let mut i = 0;
    while i < grouped {
        // SAFETY: i + 8 <= grouped <= both lengths.
        unsafe {
            let x = _mm256_loadu_ps(pg.add(i));
            let e = ggml_expf_avx2(_mm256_sub_ps(_mm256_setzero_ps(), x));
            let s = _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0), e));
            _mm256_storeu_ps(pg.add(i), _mm256_mul_ps(s, _mm256_loadu_ps(pu.add(i))));
        }
        i += 8;
    }
    // The leftovers (fewer than a group): the reference takes them all with libm's `expf`.
    super::swiglu_ref(&mut gate[grouped..], &up[grouped..]);
}

/// [`super::swiglu_ref`] with sixteen lanes at a time and AVX-512's `scalef`, as ggml's own
/// AVX-512 build computes it: the same bits.
///
/// # Safety
/// The CPU must support AVX-512 F.
#[target_feature(enable = "avx512f")]
pub(crate) unsafe fn swiglu_avx512(gate: &mut [f32], up: &[f32]) {
    assert_eq!(gate.len(), up.len(), "swiglu lengths");
    let grouped = gate.len() - gate.len() % super::SWIGLU_GROUP;
    let (pg, pu) = (gate.as_mut_ptr(), up.as_ptr());
    let c = |bits: u32| _mm512_set1_ps(f32::from_bits(bits));
    let mut i = 0;
    while i < grouped {
        // SAFETY: i + 16 <= grouped <= both lengths.
        unsafe {
            let xv = _mm512_loadu_ps(pg.add(i));
            let x = _mm512_sub_ps(_mm512_setzero_ps(), xv);
            let r = c(0x4b40_0000);
            let z = _mm512_fmadd_ps(x, c(0x3fb8_aa3b), r);
            let n = _mm512_sub_ps(z, r);
            let b = _mm512_fnmadd_ps(n, c(0x35bf_be8e), _mm512_fnmadd_ps(n, c(0x3f31_7200), x));
            let big = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(_mm512_abs_ps(n), _mm512_set1_ps(192.0));
            let u = _mm512_mul_ps(b, b);
            let j = _mm512_fmadd_ps(
                _mm512_fmadd_ps(
                    _mm512_fmadd_ps(c(0x3c07_2010), b, c(0x3d2b_9f17)),
                    u,
                    _mm512_fmadd_ps(c(0x3e2a_af33), b, c(0x3eff_fedb)),
                ),
                u,
                _mm512_fmadd_ps(c(0x3f7f_fff6), b, _mm512_set1_ps(1.0)),
            );
            let res = _mm512_scalef_ps(j, n);
            let le0 = _mm512_cmp_ps_mask::<_CMP_LE_OQ>(n, _mm512_setzero_ps());
            let alt = _mm512_mask_blend_ps(le0, _mm512_set1_ps(f32::INFINITY), _mm512_setzero_ps());
            let e = _mm512_mask_blend_ps(big, res, alt);
            let s = _mm512_div_ps(xv, _mm512_add_ps(_mm512_set1_ps(1.0), e));
            _mm512_storeu_ps(pg.add(i), _mm512_mul_ps(s, _mm512_loadu_ps(pu.add(i))));
        }
        i += 16;
    }
    // The leftovers (fewer than a group): the reference takes them all with libm's `expf`.
    super::swiglu_ref(&mut gate[grouped..], &up[grouped..]);
}

/// A cache value type the AVX2 kernels load eight at a time, as f32 lanes.
pub(crate) trait Lanes8: super::CacheValue {
    /// The eight values at `p`, as f32.
    ///
    /// # Safety
    /// Eight values are readable at `p`; the CPU supports AVX2 and F16C.
    unsafe fn load8(p: *const Self) -> __m256;
}

impl Lanes8 for f32 {
    #[target_feature(enable = "avx2,f16c")]
    #[inline]
    unsafe fn load8(p: *const f32) -> __m256 {
        // SAFETY: the caller guarantees eight readable values.
        unsafe { _mm256_loadu_ps(p) }
    }
}

impl Lanes8 for half::f16 {
    #[target_feature(enable = "avx2,f16c")]
    #[inline]
    unsafe fn load8(p: *const half::f16) -> __m256 {
        // SAFETY: the caller guarantees eight readable values (16 bytes).
        unsafe { _mm256_cvtph_ps(_mm_loadu_si128(p.cast())) }
    }
}

/// [`super::ggml_step_sum`] on AVX2: each 16-lane accumulator of the reference held as two
/// 8-lane halves, the same fused steps, the same reduction; the same bits.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn ggml_step_sum_avx2<T: Lanes8>(a: &[f32], b: &[T]) -> (f32, usize) {
    assert_eq!(a.len(), b.len(), "dot lengths");
    let whole = a.len() / super::F16_DOT_STEP * super::F16_DOT_STEP;
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let mut acc = [_mm256_setzero_ps(); 8];
    let mut i = 0;
    while i < whole {
        for (h, reg) in acc.iter_mut().enumerate() {
            // SAFETY: i + 8h + 8 <= whole <= both lengths.
            unsafe {
                *reg = _mm256_fmadd_ps(
                    _mm256_loadu_ps(pa.add(i + 8 * h)),
                    T::load8(pb.add(i + 8 * h)),
                    *reg,
                );
            }
        }
        i += super::F16_DOT_STEP;
    }
    // Register j of the reference is halves 2j (lanes 0..8) and 2j + 1 (lanes 8..16).
    let lo = _mm256_add_ps(_mm256_add_ps(acc[0], acc[4]), _mm256_add_ps(acc[2], acc[6]));
    let hi = _mm256_add_ps(_mm256_add_ps(acc[1], acc[5]), _mm256_add_ps(acc[3], acc[7]));
    (crate::x86_64::hsum(_mm256_add_ps(lo, hi)), whole)
}

/// [`super::dot_f16_ref`] on AVX2 (the same bits).
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(crate) unsafe fn dot_f16_avx2<T: Lanes8>(a: &[f32], b: &[T]) -> f32 {
    // SAFETY: the features are this function's.
    let (steps, whole) = unsafe { ggml_step_sum_avx2(a, b) };
    let mut sum = f64::from(steps);
    for (x, y) in a[whole..].iter().zip(&b[whole..]) {
        sum += f64::from(x * y.value());
    }
    sum as f32
}

/// [`super::dot_f32_ggml_ref`] on AVX2 (the same bits).
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_f32_ggml_avx2(a: &[f32], b: &[f32]) -> f32 {
    // SAFETY: the features are this function's.
    let (mut sum, whole) = unsafe { ggml_step_sum_avx2(a, b) };
    for (x, y) in a[whole..].iter().zip(&b[whole..]) {
        sum += x * y;
    }
    sum
}

/// [`super::fused_dots_ref`] with FMA (the same bits): eight keys at a time, each its own
/// chain of scalar fused multiply-adds in order, so the chains overlap.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn fused_dots_fma<T: super::CacheValue>(
    q: &[f32],
    keys: &[T],
    stride: usize,
    out: &mut [f32],
) {
    super::check_strided(q.len(), keys.len(), stride, out.len());
    let n = q.len();
    let mut p = 0;
    while p + 8 <= out.len() {
        let k: [&[T]; 8] = std::array::from_fn(|i| &keys[(p + i) * stride..(p + i) * stride + n]);
        let mut a = [0.0f32; 8];
        for d in 0..n {
            let x = q[d];
            for i in 0..8 {
                a[i] = x.mul_add(k[i][d].value(), a[i]);
            }
        }
        out[p..p + 8].copy_from_slice(&a);
        p += 8;
    }
    for (i, o) in out.iter_mut().enumerate().skip(p) {
        let key = &keys[i * stride..i * stride + n];
        *o = q
            .iter()
            .zip(key)
            .fold(0.0f32, |a, (&x, &y)| x.mul_add(y.value(), a));
    }
}

/// [`super::fused_axpys_ref`] with AVX2 and FMA (the same bits): eight outputs per
/// register, each lane the reference's steps in order.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn fused_axpys_fma<T: Lanes8>(
    y: &mut [f32],
    weights: &[f32],
    values: &[T],
    stride: usize,
) {
    super::check_strided(y.len(), values.len(), stride, weights.len());
    let n = y.len();
    let whole = n / 8 * 8;
    for j in (0..whole).step_by(8) {
        // SAFETY: j + 8 <= n = y.len().
        let mut acc = unsafe { _mm256_loadu_ps(y.as_ptr().add(j)) };
        for (p, &w) in weights.iter().enumerate() {
            // SAFETY: value p's n floats lie inside `values` (checked above), j + 8 <= n.
            let v = unsafe { T::load8(values.as_ptr().add(p * stride + j)) };
            acc = _mm256_fmadd_ps(_mm256_set1_ps(w), v, acc);
        }
        // SAFETY: as the load.
        unsafe { _mm256_storeu_ps(y.as_mut_ptr().add(j), acc) };
    }
    for j in whole..n {
        for (p, &w) in weights.iter().enumerate() {
            y[j] = w.mul_add(values[p * stride + j].value(), y[j]);
        }
    }
}

/// Positions per window of [`attend_chunk_f16_avx2`] (their scores and weights live on the
/// stack).
const ATTEND_WINDOW: usize = 128;

/// Accumulator values [`attend_chunk_f16_avx2`] keeps in registers through a window.
const ATTEND_BLOCK: usize = 64;

/// [`super::attend_chunk_f16_ref`] with AVX2, FMA and F16C (the same bits), in windows of
/// up to [`ATTEND_WINDOW`] positions and three passes over each: every position's score
/// (by [`dot_f16_avx2`]; the scores do not depend on one another, so their loads and sums
/// overlap), then in order the running maximum, each position's `ms` and `vs` and the sum
/// (the reference's scalar steps, libm's `expf`), then the F16 accumulator
/// [`ATTEND_BLOCK`] values at a time held in registers across the window's positions
/// (rescaled where the maximum grew, then the weighted value row added, each rounded to
/// F16). Each accumulator value takes the reference's steps in the reference's order, so
/// the bits are its. The reference's loop, one position at a time, chained each position
/// through its score, an `expf` and a store and reload of every accumulator register; on
/// Zen 4 one head of 128 over 65 positions took 41 ns a position with its keys and values
/// in the L2, 23 ns this way (61 → 39 from the L3; from memory, as in a decode step whose
/// weights have streamed through the caches since, both ~65: the rows' reads decide).
/// (An AVX-512 version of the old loop, 16 lanes per F16 conversion, ran the whole decode
/// 20 % slower on this project's Zen 4 machine: not kept.)
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn attend_chunk_f16_avx2<T: Lanes8>(
    q16: &[f32],
    keys: &[T],
    values: &[T],
    stride: usize,
    positions: std::ops::Range<usize>,
    scale: f32,
    out: &mut [f32],
) -> (f32, f32) {
    super::check_strided(q16.len(), keys.len(), stride, positions.end);
    super::check_strided(out.len(), values.len(), stride, positions.end);
    let (d, r) = (q16.len(), out.len());
    let (mut m, mut sum) = (f32::NEG_INFINITY, 0.0f32);
    out.fill(0.0);
    let mut p0 = positions.start;
    while p0 < positions.end {
        let w = (positions.end - p0).min(ATTEND_WINDOW);
        // 1. The scores.
        let mut score = [0.0f32; ATTEND_WINDOW];
        for (i, s) in score[..w].iter_mut().enumerate() {
            let at = (p0 + i) * stride;
            // SAFETY: this function's features are the callee's.
            *s = unsafe { dot_f16_avx2(q16, &keys[at..at + d]) } * scale;
        }
        // 2. In order: the maximum, each position's rescale `ms` (on a new maximum) and
        //    weight `vs`, and the sum.
        let mut ms = [1.0f32; ATTEND_WINDOW];
        let mut vs = [1.0f32; ATTEND_WINDOW];
        let mut grew = [false; ATTEND_WINDOW];
        for i in 0..w {
            let s = score[i];
            if s > m {
                let old = m;
                m = s;
                ms[i] = (old - m).exp();
                grew[i] = true;
            } else {
                vs[i] = (s - m).exp();
            }
            sum = sum.mul_add(ms[i], vs[i]);
        }
        // 3. The accumulator: each value rescaled where the maximum grew, then the value
        //    row added with its weight, rounded to F16 at each step.
        let weights = (&ms[..w], &vs[..w], &grew[..w]);
        let mut j = 0;
        while j + ATTEND_BLOCK <= r {
            let at = p0 * stride + j;
            // SAFETY: the features are this function's.
            unsafe {
                window_f16::<T, { ATTEND_BLOCK / 8 }>(
                    &mut out[j..j + ATTEND_BLOCK],
                    values,
                    at,
                    stride,
                    weights,
                )
            };
            j += ATTEND_BLOCK;
        }
        while j + 8 <= r {
            // SAFETY: the features are this function's.
            unsafe {
                window_f16::<T, 1>(&mut out[j..j + 8], values, p0 * stride + j, stride, weights)
            };
            j += 8;
        }
        let row = |i: usize, jj: usize| values[(p0 + i) * stride + jj].value();
        for (jj, o) in out.iter_mut().enumerate().skip(j) {
            for i in 0..w {
                if grew[i] {
                    *o = super::round_f16(*o * ms[i]);
                }
                *o = super::round_f16(row(i, jj).mul_add(vs[i], *o));
            }
        }
        p0 += w;
    }
    (m, sum)
}

/// Step 3 of [`attend_chunk_f16_avx2`] for `8 · REGS` accumulator values `acc` (held in
/// registers through the window): position i's value row starts at `values[first + i ·
/// stride]`; where `grew[i]` the values are first rescaled by `ms[i]`, then the row is added
/// with weight `vs[i]`, each step rounded to F16 ([`super::scale_round_f16_ref`] then
/// [`super::mad_round_f16_ref`], per value).
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn window_f16<T: Lanes8, const REGS: usize>(
    acc: &mut [f32],
    values: &[T],
    first: usize,
    stride: usize,
    (ms, vs, grew): (&[f32], &[f32], &[bool]),
) {
    assert_eq!(acc.len(), 8 * REGS, "the accumulator's registers");
    let round = |x: __m256| _mm256_cvtph_ps(_mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(x));
    // SAFETY: `acc` holds REGS registers (asserted).
    let mut a: [__m256; REGS] =
        std::array::from_fn(|k| unsafe { _mm256_loadu_ps(acc.as_ptr().add(8 * k)) });
    for (i, (&vw, &up)) in vs.iter().zip(grew).enumerate() {
        if up {
            let sv = _mm256_set1_ps(ms[i]);
            for x in a.iter_mut() {
                *x = round(_mm256_mul_ps(*x, sv));
            }
        }
        let at = first + i * stride;
        let v = &values[at..at + 8 * REGS];
        let sv = _mm256_set1_ps(vw);
        for (k, x) in a.iter_mut().enumerate() {
            // SAFETY: `v` holds REGS registers.
            let vk = unsafe { T::load8(v.as_ptr().add(8 * k)) };
            *x = round(_mm256_fmadd_ps(vk, sv, *x));
        }
    }
    for (k, x) in a.iter().enumerate() {
        // SAFETY: as the load.
        unsafe { _mm256_storeu_ps(acc.as_mut_ptr().add(8 * k), *x) };
    }
}

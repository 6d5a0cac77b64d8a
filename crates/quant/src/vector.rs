//! f32 vector kernels of attention: the dot product of a query and a key, and `y += s·x`
//! for the weighted sum of values. Scalar references here; AVX2 + FMA versions in
//! `vector/x86_64.rs`, held to the references within [`crate::gemm::DOT_TOLERANCE`] of
//! `Σ |a·b|` by the tests. Each is a pure function of its inputs, so one query's result
//! does not depend on what else is computed beside it.

/// `Σ a_i · b_i`, in order.
///
/// # Panics
/// If the lengths differ.
pub fn dot_ref(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "dot lengths");
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// `y_i += s · x_i`.
///
/// # Panics
/// If the lengths differ.
pub fn axpy_ref(y: &mut [f32], s: f32, x: &[f32]) {
    assert_eq!(y.len(), x.len(), "axpy lengths");
    for (o, &v) in y.iter_mut().zip(x) {
        *o += s * v;
    }
}

/// `out[p] = dot(q, keys[p·stride .. p·stride + q.len()])` for every `p < out.len()`:
/// one query against keys laid out at a fixed stride (a KV cache's rows), each exactly as
/// [`dot_ref`] computes it.
///
/// # Panics
/// If the last key does not fit in `keys`.
pub fn dots_ref(q: &[f32], keys: &[f32], stride: usize, out: &mut [f32]) {
    check_strided(q.len(), keys.len(), stride, out.len());
    for (p, o) in out.iter_mut().enumerate() {
        *o = dot_ref(q, &keys[p * stride..p * stride + q.len()]);
    }
}

/// `y += Σ_p weights[p] · values[p·stride .. p·stride + y.len()]`, position by position in
/// order, each step exactly as [`axpy_ref`] computes it.
///
/// # Panics
/// If the last value does not fit in `values`.
pub fn axpys_ref(y: &mut [f32], weights: &[f32], values: &[f32], stride: usize) {
    check_strided(y.len(), values.len(), stride, weights.len());
    for (p, &w) in weights.iter().enumerate() {
        axpy_ref(y, w, &values[p * stride..p * stride + y.len()]);
    }
}

/// `x` rounded to the nearest F16 value (ties to even), as f32.
#[inline]
pub fn round_f16(x: f32) -> f32 {
    half::f16::from_f32(x).to_f32()
}

/// `y_i = round_f16(y_i · s)`: an F16 accumulator rescaled (ggml's `ggml_vec_scale_f16`).
pub fn scale_round_f16_ref(y: &mut [f32], s: f32) {
    for v in y.iter_mut() {
        *v = round_f16(*v * s);
    }
}

/// `y_i = round_f16(fma(x_i, s, y_i))` for `i < fused`, `round_f16(y_i + x_i · s)` (a
/// multiply, then an add) after: an F16 accumulator taking a weighted row as ggml's
/// `ggml_vec_mad_f16` does (its SIMD steps fuse, its scalar leftovers do not).
///
/// # Panics
/// If the lengths differ.
pub fn mad_round_f16_ref(y: &mut [f32], x: &[f32], s: f32, fused: usize) {
    assert_eq!(y.len(), x.len(), "mad lengths");
    for (i, (o, &v)) in y.iter_mut().zip(x).enumerate() {
        *o = round_f16(if i < fused {
            v.mul_add(s, *o)
        } else {
            *o + v * s
        });
    }
}

/// Row `count − 1` of `len` values at `stride` lies inside `total` values.
pub(crate) fn check_strided(len: usize, total: usize, stride: usize, count: usize) {
    if count > 0 {
        let end = (count - 1)
            .checked_mul(stride)
            .and_then(|s| s.checked_add(len));
        assert!(
            end.is_some_and(|e| e <= total),
            "{count} rows of {len} at stride {stride} do not fit in {total} values"
        );
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod x86_64;

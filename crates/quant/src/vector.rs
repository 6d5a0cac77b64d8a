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

#[cfg(target_arch = "x86_64")]
pub(crate) mod x86_64;

//! Elementwise and per-row operations of the forward passes: RMSNorm, SiLU, sigmoid,
//! softplus and softmax, written from `docs/RUNTIME-MATH.md` §1.8 (sigmoid and
//! softplus as ggml computes them, for Kimi K3).
//!
//! Sums use f64 in a fixed order (as ggml's `ggml_float` does for norms), so a row's result
//! depends on that row only: batched and single-position forwards agree bit for bit.
/// `out = w ⊙ x / sqrt(mean(x²) + eps)` (weight applied plainly, not `1 + w`).
///
/// # Panics
/// If the lengths differ.
pub fn rms_norm(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    assert!(
        x.len() == w.len() && x.len() == out.len(),
        "rms_norm lengths"
    );
    let scale = inv_rms(x, eps);
    for ((o, &v), &g) in out.iter_mut().zip(x).zip(w) {
        *o = g * (v * scale);
    }
}

/// `1 / sqrt(mean(x²) + eps)`, the scale [`rms_norm`] applies, as ggml's `rms_norm`
/// computes it: each square rounded to f32, summed in f64 in order, the mean rounded to
/// f32, then `eps` added, the square root and the reciprocal taken in f32.
pub fn inv_rms(x: &[f32], eps: f32) -> f32 {
    let ss: f64 = x.iter().map(|&v| f64::from(v * v)).sum();
    let mean = (ss / x.len() as f64) as f32;
    1.0 / (mean + eps).sqrt()
}

/// The logistic sigmoid `1 / (1 + e^-x)` (ggml's `ggml_vec_sigmoid_f32`).
#[inline]
pub fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// `ln(1 + e^x)`, `x` itself above 20, as ggml's `softplus` computes it: libm's `logf` of
/// the rounded `1 + expf(x)` (not `log1p`: llama.cpp's bits).
#[inline]
pub fn softplus(x: f32) -> f32 {
    if x > 20.0 {
        x
    } else {
        (1.0 + x.exp()).ln()
    }
}

/// SiLU: `x / (1 + e^-x)`, with libm's exponential (the feed-forward blocks use
/// [`swiglu`], ggml's vectorised arithmetic).
#[inline]
pub fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

/// `gate_i = silu(gate_i) · up_i` as llama.cpp's CPU backend computes it (the kernel of
/// [`dspark_quant::vector::swiglu_ref`]).
pub fn swiglu(gate: &mut [f32], up: &[f32]) {
    (dspark_quant::kernels().swiglu)(gate, up);
}

/// Softmax in place; the maximum is subtracted first. An empty slice is left alone.
pub fn softmax(x: &mut [f32]) {
    let Some(max) = x.iter().copied().reduce(f32::max) else {
        return;
    };
    let mut sum = 0.0f64;
    for v in x.iter_mut() {
        *v = (*v - max).exp();
        sum += f64::from(*v);
    }
    let inv = (1.0 / sum) as f32;
    for v in x.iter_mut() {
        *v *= inv;
    }
}

/// RMSNorm of each `w.len()`-wide row of `x` into `out`.
pub(crate) fn norm_rows(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    for (xt, ot) in x.chunks_exact(w.len()).zip(out.chunks_exact_mut(w.len())) {
        rms_norm(xt, w, eps, ot);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rms_norm_softmax_silu() {
        let mut out = [0.0f32; 4];
        rms_norm(
            &[1.0, -1.0, 1.0, -1.0],
            &[1.0, 2.0, 3.0, 4.0],
            0.0,
            &mut out,
        );
        assert_eq!(out, [1.0, -2.0, 3.0, -4.0]);
        let mut p = [1.0f32, 2.0, 3.0, 1000.0];
        softmax(&mut p);
        assert!((p.iter().sum::<f32>() - 1.0).abs() < 1e-6 && p[3] > 0.999);
        let mut e: [f32; 0] = [];
        softmax(&mut e);
        assert_eq!(silu(0.0), 0.0);
        assert!((silu(1.0) - 0.7310586).abs() < 1e-6);
    }
}

//! Elementwise and per-row operations of the Qwen3 / DFlash forward pass: RMSNorm, SiLU,
//! softmax, and rotary position embedding (NeoX half-rotation, with YaRN), written from
//! `shared/spec/runtime-math.md` §1.8 and §2.
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
    let ss: f64 = x.iter().map(|&v| f64::from(v) * f64::from(v)).sum();
    let scale = (1.0 / (ss / x.len() as f64 + f64::from(eps)).sqrt()) as f32;
    for ((o, &v), &g) in out.iter_mut().zip(x).zip(w) {
        *o = g * (v * scale);
    }
}

/// SiLU: `x / (1 + e^-x)`.
#[inline]
pub fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
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

/// YaRN settings (`rope_scaling` / `rope_parameters` with `rope_type = "yarn"`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Yarn {
    /// `factor` (s).
    pub factor: f64,
    /// `original_max_position_embeddings` (L0).
    pub original_context: f64,
    /// `beta_fast` (default 32).
    pub beta_fast: f64,
    /// `beta_slow` (default 1).
    pub beta_slow: f64,
    /// `attention_factor`, when the config gives it; else `0.1 ln s + 1`.
    pub attention_factor: Option<f64>,
}

/// Rotary embedding tables for one head size: per pair frequency and the magnitude that
/// multiplies cos and sin (YaRN's attention factor; 1 without YaRN).
#[derive(Clone, Debug, PartialEq)]
pub struct Rope {
    /// Rotary dimension r (the head dim here).
    pub dim: usize,
    /// ω_i for i in 0..r/2.
    pub freqs: Vec<f64>,
    /// Multiplier of cos and sin.
    pub mscale: f64,
}

impl Rope {
    /// Plain RoPE: `ω_i = θ^(−2i/r)`.
    pub fn new(dim: usize, theta: f64, yarn: Option<Yarn>) -> Rope {
        assert!(
            dim.is_multiple_of(2) && dim > 0,
            "rotary dimension must be even"
        );
        let r = dim as f64;
        let base: Vec<f64> = (0..dim / 2)
            .map(|i| theta.powf(-2.0 * i as f64 / r))
            .collect();
        let Some(y) = yarn.filter(|y| y.factor > 1.0) else {
            return Rope {
                dim,
                freqs: base,
                mscale: 1.0,
            };
        };
        // runtime-math.md §2.2 (HF `_compute_yarn_parameters`, truncate = true).
        let corr = |n: f64| {
            r * (y.original_context / (2.0 * std::f64::consts::PI * n)).ln() / (2.0 * theta.ln())
        };
        let low = corr(y.beta_fast).floor().max(0.0);
        let mut high = corr(y.beta_slow).ceil().min(r - 1.0);
        if low == high {
            high += 0.001;
        }
        let freqs = base
            .iter()
            .enumerate()
            .map(|(i, &w)| {
                let ramp = ((i as f64 - low) / (high - low)).clamp(0.0, 1.0);
                let keep = 1.0 - ramp;
                (w / y.factor) * (1.0 - keep) + w * keep
            })
            .collect();
        let mscale = y.attention_factor.unwrap_or(0.1 * y.factor.ln() + 1.0);
        Rope { dim, freqs, mscale }
    }

    /// Rotates one head vector in place for absolute position `pos` (NeoX pairing: element
    /// i with i + r/2). Angles are computed in f64, then cos/sin cast to f32: for positions
    /// near 10^6, f32 angles (HF's choice) lose several digits — a deliberate deviation.
    pub fn apply(&self, x: &mut [f32], pos: u64) {
        let mut table = vec![0.0f32; self.dim];
        self.angles(pos, &mut table);
        self.apply_angles(x, &table);
    }

    /// The rotation of position `pos` as `dim` values: `r/2` cosines then `r/2` sines
    /// (scaled by the YaRN attention factor), for [`Rope::apply_angles`]. Computing it once
    /// per position and applying it to every head gives the same bits as [`Rope::apply`].
    pub fn angles(&self, pos: u64, out: &mut [f32]) {
        assert_eq!(out.len(), self.dim, "table size");
        let (cos, sin) = out.split_at_mut(self.dim / 2);
        for (i, &w) in self.freqs.iter().enumerate() {
            let (s, c) = (pos as f64 * w).sin_cos();
            cos[i] = (c * self.mscale) as f32;
            sin[i] = (s * self.mscale) as f32;
        }
    }

    /// Rotates one head vector in place by a table from [`Rope::angles`].
    pub fn apply_angles(&self, x: &mut [f32], table: &[f32]) {
        assert_eq!(x.len(), self.dim, "head size");
        assert_eq!(table.len(), self.dim, "table size");
        let half = self.dim / 2;
        let (a, b) = x.split_at_mut(half);
        let (cos, sin) = table.split_at(half);
        for i in 0..half {
            let (c, s) = (cos[i], sin[i]);
            let (ai, bi) = (a[i], b[i]);
            a[i] = ai * c - bi * s;
            b[i] = bi * c + ai * s;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, rel: f64) -> bool {
        (a - b).abs() <= rel * b.abs()
    }

    /// runtime-math.md §2.3: r = 64, θ = 1e4, s = 16.
    #[test]
    fn yarn_matches_the_spec_test_vectors() {
        let yarn = |l0| Yarn {
            factor: 16.0,
            original_context: l0,
            beta_fast: 32.0,
            beta_slow: 1.0,
            attention_factor: None,
        };
        let r = Rope::new(64, 1e4, Some(yarn(4096.0)));
        assert!(close(r.mscale, 1.277259, 1e-6), "{}", r.mscale);
        for (i, want) in [
            (0, 1.0),
            (10, 0.0562341325),
            (16, 0.00567307692),
            (31, 8.33450895e-06),
        ] {
            assert!(
                close(r.freqs[i], want, 1e-8),
                "L0 4096 ω_{i} = {} not {want}",
                r.freqs[i]
            );
        }
        let r = Rope::new(64, 1e4, Some(yarn(65536.0)));
        for (i, want) in [
            (0, 1.0),
            (20, 0.00316227766),
            (26, 0.000319020559),
            (31, 2.75679911e-05),
        ] {
            assert!(
                close(r.freqs[i], want, 1e-8),
                "L0 65536 ω_{i} = {} not {want}",
                r.freqs[i]
            );
        }
    }

    #[test]
    fn rope_rotates_pairs_and_keeps_norms() {
        let rope = Rope::new(8, 10000.0, None);
        let mut x = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0];
        let before: f32 = x.iter().map(|v| v * v).sum();
        rope.apply(&mut x, 0);
        assert_eq!(
            x,
            [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0],
            "position 0 is the identity"
        );
        rope.apply(&mut x, 7);
        let after: f32 = x.iter().map(|v| v * v).sum();
        assert!((before - after).abs() < 1e-3);
        // Pair 0 (ω = 1) at position 1: (1, 5) rotated by 1 radian.
        let mut y = [1.0f32, 0.0, 0.0, 0.0, 5.0, 0.0, 0.0, 0.0];
        rope.apply(&mut y, 1);
        let (c, s) = (1f32.cos(), 1f32.sin());
        assert!((y[0] - (c - 5.0 * s)).abs() < 1e-6 && (y[4] - (5.0 * c + s)).abs() < 1e-6);
    }

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

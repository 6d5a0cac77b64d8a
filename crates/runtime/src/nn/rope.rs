//! Rotary position embedding: NeoX half-rotation, with YaRN (`shared/spec/runtime-math.md`
//! §2), and the per-head norm + rotation both models apply to queries and keys.

use crate::nn::ops::rms_norm;

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

/// RoPE tables ([`Rope::angles`]) of positions `first..first + n`, one row each.
pub(crate) fn rope_tables(rope: &Rope, first: usize, n: usize, head_dim: usize) -> Vec<f32> {
    let mut t = vec![0.0f32; n * head_dim];
    for (i, row) in t.chunks_exact_mut(head_dim).enumerate() {
        rope.angles((first + i) as u64, row);
    }
    t
}

/// Per-head RMSNorm then RoPE, in place: `x` holds rows of `heads × head_dim`, row `t`
/// rotated by row `t` of `tables` (from [`rope_tables`]).
pub(crate) fn norm_rope_heads(
    x: &mut [f32],
    row: usize,
    norm: &[f32],
    eps: f32,
    rope: &Rope,
    tables: &[f32],
) {
    let hd = norm.len();
    let mut tmp = vec![0.0f32; hd];
    for (r, table) in x.chunks_exact_mut(row).zip(tables.chunks_exact(hd)) {
        for head in r.chunks_exact_mut(hd) {
            tmp.copy_from_slice(head);
            rms_norm(&tmp, norm, eps, head);
            rope.apply_angles(head, table);
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
}

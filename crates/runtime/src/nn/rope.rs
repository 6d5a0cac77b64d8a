//! Rotary position embedding: NeoX half-rotation with YaRN as Hugging Face computes it
//! (`docs/RUNTIME-MATH.md` §2: the drafter, the Qwen3 target), ggml's own f32 computation
//! with either pairing, linear / YaRN scaling and Llama 3's frequency factors
//! ([`GgmlRope`]: llama targets), and the per-head norm + rotation the models apply to
//! queries and keys.

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
        // docs/RUNTIME-MATH.md §2.2 (HF `_compute_yarn_parameters`, truncate = true).
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

/// The rotary embedding of a decoder: Hugging Face's (NeoX pairing, angles in f64; the
/// drafter and the Qwen3 target), or ggml's own f32 computation ([`GgmlRope`]; llama
/// targets, whose greedy tokens should follow llama.cpp's).
#[derive(Clone, Debug, PartialEq)]
pub enum Rotary {
    /// [`Rope`]: a table row is `r/2` cosines then `r/2` sines.
    Hf(Rope),
    /// [`GgmlRope`]: a table row is ggml's cache (`cos, sin` per pair).
    Ggml(GgmlRope),
}

impl Rotary {
    /// Values of one position's table (the head size).
    pub fn dim(&self) -> usize {
        match self {
            Rotary::Hf(r) => r.dim,
            Rotary::Ggml(g) => g.dims,
        }
    }

    /// Tables of positions `first..first + n`, one row each.
    pub fn tables(&self, first: usize, n: usize) -> Vec<f32> {
        let d = self.dim();
        let mut t = vec![0.0f32; n * d];
        for (i, row) in t.chunks_exact_mut(d).enumerate() {
            let pos = (first + i) as u64;
            match self {
                Rotary::Hf(r) => r.angles(pos, row),
                Rotary::Ggml(g) => g.cache(pos, row),
            }
        }
        t
    }

    /// Rotates one head vector by a table row from [`Rotary::tables`].
    pub fn apply(&self, head: &mut [f32], table: &[f32]) {
        match self {
            Rotary::Hf(r) => r.apply_angles(head, table),
            Rotary::Ggml(g) => g.apply(head, table),
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

/// Per-head RMSNorm (when there is one) then RoPE, in place: `x` holds rows of
/// `heads × head_dim`, row `t` rotated by row `t` of `tables` (from [`rope_tables`]).
pub(crate) fn norm_rope_heads(
    x: &mut [f32],
    row: usize,
    norm: Option<&[f32]>,
    eps: f32,
    rope: &Rope,
    tables: &[f32],
) {
    let hd = rope.dim;
    let mut tmp = vec![0.0f32; hd];
    for (r, table) in x.chunks_exact_mut(row).zip(tables.chunks_exact(hd)) {
        for head in r.chunks_exact_mut(hd) {
            if let Some(w) = norm {
                tmp.copy_from_slice(head);
                rms_norm(&tmp, w, eps, head);
            }
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

    /// docs/RUNTIME-MATH.md §2.3: r = 64, θ = 1e4, s = 16.
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

/// How a rotary embedding pairs a head's dimensions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pairing {
    /// Adjacent dimensions `(2i, 2i + 1)` (llama.cpp's `LLAMA_ROPE_TYPE_NORM`: Llama, whose
    /// GGUF converter permutes the query and key rows for it).
    Adjacent,
    /// Dimension `i` with `i + r/2` (NeoX, `LLAMA_ROPE_TYPE_NEOX`: Qwen, Kimi).
    Halves,
}

/// Rotary embedding computed as ggml's CPU `rope` computes it (`docs/RUNTIME-MATH.md` §2.4), in
/// f32 step by step, so a target's angles are llama.cpp's to the bit: `θ_scale =
/// base^(−2/r)` once (`powf`); per position the angle starts at `p` and is multiplied by
/// `θ_scale` after each pair; a pair's angle is divided by its frequency factor (Llama 3's
/// `rope_freqs`), then YaRN-interpolated (`freq_scale · θ`, blended with `θ` by the ramp
/// between the correction dims when `ext_factor ≠ 0`, the magnitude then multiplied by
/// `1 + 0.1 ln(1/freq_scale)`), and `cos`, `sin` are scaled by the magnitude.
#[derive(Clone, Debug, PartialEq)]
pub struct GgmlRope {
    /// Rotary dimensions (the head size here).
    pub dims: usize,
    /// How dimensions pair.
    pub pairing: Pairing,
    /// `rope.freq_base`.
    pub base: f32,
    /// `1 / factor` for linear and YaRN scaling, else 1.
    pub freq_scale: f32,
    /// 1 for YaRN, else 0.
    pub ext_factor: f32,
    /// The magnitude of cos and sin before YaRN's correction.
    pub attn_factor: f32,
    /// YaRN's correction dims `[start, end]`.
    pub corr_dims: [f32; 2],
    /// Per pair divisors of the angle (Llama 3), if any.
    pub freq_factors: Option<Vec<f32>>,
}

/// The settings [`GgmlRope::new`] takes: what llama.cpp derives from a file's keys.
#[derive(Clone, Debug, PartialEq)]
pub struct GgmlRopeSettings {
    /// Rotary dimensions.
    pub dims: usize,
    /// How dimensions pair.
    pub pairing: Pairing,
    /// `rope.freq_base`.
    pub base: f32,
    /// `1 / rope.scaling.factor` (1 for no scaling).
    pub freq_scale: f32,
    /// YaRN (`rope.scaling.type = yarn`).
    pub yarn: bool,
    /// `rope.scaling.attn_factor`.
    pub attn_factor: f32,
    /// `rope.scaling.original_context_length` (or the context length).
    pub original_context: u32,
    /// Frequency factors (`rope_freqs.weight`), each finite and non-zero.
    pub freq_factors: Option<Vec<f32>>,
}

/// ggml's `ggml_rope_yarn_corr_dim`: the dimension whose wavelength spans `n_rot` turns
/// over the original context.
fn yarn_corr_dim(dims: usize, n_ctx_orig: u32, n_rot: f32, base: f32) -> f32 {
    dims as f32 * (n_ctx_orig as f32 / (n_rot * 2.0 * std::f32::consts::PI)).ln()
        / (2.0 * base.ln())
}

impl GgmlRope {
    /// The rotation llama.cpp's context applies for `s` (its `yarn_ext_factor`,
    /// `yarn_attn_factor` with the YaRN magnitude cancelled as llama.cpp does, β_fast 32,
    /// β_slow 1).
    pub fn new(s: GgmlRopeSettings) -> GgmlRope {
        let ext_factor = if s.yarn { 1.0f32 } else { 0.0 };
        let mut attn_factor = 1.0f32;
        if ext_factor != 0.0 {
            // llama.cpp's context sets the magnitude to its YaRN value (`get_mscale(factor,
            // 1)`), then cancels it, since ggml's rope multiplies it in again.
            let factor = 1.0 / s.freq_scale;
            attn_factor = if factor <= 1.0 {
                1.0
            } else {
                0.1 * factor.ln() + 1.0
            };
            attn_factor *= 1.0 / (1.0 + 0.1 * factor.ln());
        }
        attn_factor *= s.attn_factor;
        let (beta_fast, beta_slow) = (32.0f32, 1.0f32);
        let start = yarn_corr_dim(s.dims, s.original_context, beta_fast, s.base).floor();
        let end = yarn_corr_dim(s.dims, s.original_context, beta_slow, s.base).ceil();
        GgmlRope {
            dims: s.dims,
            pairing: s.pairing,
            base: s.base,
            freq_scale: s.freq_scale,
            ext_factor,
            attn_factor,
            corr_dims: [start.max(0.0), end.min(s.dims as f32 - 1.0)],
            freq_factors: s.freq_factors,
        }
    }

    /// ggml's cache for position `pos`: `cos, sin` of each pair, interleaved (`dims`
    /// values).
    pub fn cache(&self, pos: u64, out: &mut [f32]) {
        assert_eq!(out.len(), self.dims, "table size");
        let theta_scale = self.base.powf(-2.0 / self.dims as f32);
        let mut theta = pos as f32;
        for (i, pair) in out.chunks_exact_mut(2).enumerate() {
            let ff = self.freq_factors.as_ref().map_or(1.0, |f| f[i]);
            let extrap = theta / ff;
            let interp = self.freq_scale * extrap;
            let mut angle = interp;
            let mut mscale = self.attn_factor;
            if self.ext_factor != 0.0 {
                let y = (i as f32 - self.corr_dims[0])
                    / (self.corr_dims[1] - self.corr_dims[0]).max(0.001);
                let ramp = 1.0 - y.clamp(0.0, 1.0);
                let mix = ramp * self.ext_factor;
                angle = interp * (1.0 - mix) + extrap * mix;
                mscale *= 1.0 + 0.1 * (1.0 / self.freq_scale).ln();
            }
            pair[0] = angle.cos() * mscale;
            pair[1] = angle.sin() * mscale;
            theta *= theta_scale;
        }
    }

    /// Rotates one head vector by a cache from [`GgmlRope::cache`].
    pub fn apply(&self, x: &mut [f32], cache: &[f32]) {
        assert_eq!(x.len(), self.dims, "head size");
        let half = self.dims / 2;
        for (i, cs) in cache.chunks_exact(2).enumerate() {
            let (a, b) = match self.pairing {
                Pairing::Adjacent => (2 * i, 2 * i + 1),
                Pairing::Halves => (i, i + half),
            };
            let (x0, x1) = (x[a], x[b]);
            // ggml's `x0·cos − x1·sin` and `x0·sin + x1·cos` as its x86 build computes
            // them: the compiler fuses the first product into the add (one rounding
            // less), the second is rounded on its own.
            x[a] = x0.mul_add(cs[0], -(x1 * cs[1]));
            x[b] = x0.mul_add(cs[1], x1 * cs[0]);
        }
    }
}

/// Per-head RMSNorm (when the model has one) then the rotation, in place: `x` holds rows
/// of `heads × head_dim`, row `t` rotated by row `t` of `tables` (from
/// [`Rotary::tables`]).
pub(crate) fn norm_rotate_heads(
    x: &mut [f32],
    row: usize,
    norm: Option<&[f32]>,
    eps: f32,
    rotary: &Rotary,
    tables: &[f32],
) {
    let hd = rotary.dim();
    let mut tmp = vec![0.0f32; hd];
    for (r, table) in x.chunks_exact_mut(row).zip(tables.chunks_exact(hd)) {
        for head in r.chunks_exact_mut(hd) {
            if let Some(w) = norm {
                tmp.copy_from_slice(head);
                rms_norm(&tmp, w, eps, head);
            }
            rotary.apply(head, table);
        }
    }
}

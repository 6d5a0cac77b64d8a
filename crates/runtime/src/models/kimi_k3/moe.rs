//! Kimi K3's FFNs: SiTU (`docs/KIMI-K3.md#situ`), the dense FFN, and the latent MoE
//! (`docs/KIMI-K3.md#latent-moe`, llama.cpp `build_latent_moe` + `build_moe_ffn`): router
//! on the full-width input, gating, selection with the bias (group-limited when asked),
//! top-k, the unbiased weights normalised and scaled, experts in the latent, summed in
//! selection order, the latent norm and up-projection, and the shared experts.
//!
//! Routing depends on each token's own router row only, and every expert's products
//! are column-independent gemms over the tokens routed to it, so a batch routes and
//! computes each token exactly as a single-token forward does.

use dspark_contract::kimi_k3::Gating;
use dspark_quant::gemm::{gemm, gemm_local_routed};
use rayon::prelude::*;

use crate::nn::ops::{rms_norm, sigmoid, softplus};
use crate::weights::{ModelData, WeightRef};

use super::multi_gemm;
use crate::target::Routed;

/// SiTU's constants.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Situ {
    pub beta: f32,
    pub linear_beta: f32,
}

impl Situ {
    /// `β·tanh(g/β)·σ(g) · U(u)` with `U(u) = β_lin·tanh(u/β_lin)` when β_lin > 0, else
    /// `u` — into `g` (as llama.cpp computes it: scale by the reciprocal, tanh, scale).
    pub fn apply(&self, g: &mut [f32], u: &[f32]) {
        let (ib, il) = (1.0 / self.beta, 1.0 / self.linear_beta);
        for (a, &b) in g.iter_mut().zip(u) {
            let x = *a;
            let act = (x * ib).tanh() * self.beta * sigmoid(x);
            let up = if self.linear_beta > 0.0 {
                (b * il).tanh() * self.linear_beta
            } else {
                b
            };
            *a = act * up;
        }
    }
}

/// Gate, up and down projections with SiTU.
pub(crate) struct SituFfn {
    pub gate: WeightRef,
    pub up: WeightRef,
    pub down: WeightRef,
}

impl SituFfn {
    /// `down · SiTU(gate·x, up·x)` for every row of `x` into `out`.
    pub fn forward(&self, bytes: &[u8], situ: Situ, x: &[f32], out: &mut [f32]) {
        let n = x.len() / self.gate.cols;
        let f = self.gate.rows;
        let (mut g, mut u) = (vec![0.0f32; n * f], vec![0.0f32; n * f]);
        multi_gemm(bytes, &[&self.gate, &self.up], x, &mut [&mut g, &mut u]);
        situ.apply(&mut g, &u);
        gemm(&self.down.matrix(bytes), &g, out);
    }

    /// [`SituFfn::forward`] on the calling thread (`gemm_local`: the same bits), for
    /// experts run side by side; `prompt`: the tokens are a prompt's (llama.cpp's
    /// `mul_mat_id` order for them, [`gemm_local_routed`]).
    pub fn forward_local(
        &self,
        bytes: &[u8],
        situ: Situ,
        x: &[f32],
        out: &mut [f32],
        prompt: bool,
    ) {
        let n = x.len() / self.gate.cols;
        let f = self.gate.rows;
        let (mut g, mut u) = (vec![0.0f32; n * f], vec![0.0f32; n * f]);
        gemm_local_routed(&self.gate.matrix(bytes), x, &mut g, prompt);
        gemm_local_routed(&self.up.matrix(bytes), x, &mut u, prompt);
        situ.apply(&mut g, &u);
        gemm_local_routed(&self.down.matrix(bytes), &g, out, prompt);
    }

    /// Its three matrices.
    pub fn matrices(&self) -> [&WeightRef; 3] {
        [&self.gate, &self.up, &self.down]
    }

    pub fn bytes(&self) -> u64 {
        self.gate.bytes() + self.up.bytes() + self.down.bytes()
    }
}

/// A latent-MoE FFN.
pub(crate) struct Moe {
    pub router: WeightRef,
    pub probs_bias: Vec<f32>,
    /// Per expert: gate and up (`F_e × E_l`), down (`E_l × F_e`).
    pub experts: Vec<SituFfn>,
    pub routed_down: Option<WeightRef>,
    pub routed_up: Option<WeightRef>,
    pub routed_norm: Option<Vec<f32>>,
    pub shared: Option<SituFfn>,
}

/// How tokens are routed.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Routing {
    pub gating: Gating,
    pub used: usize,
    pub groups: usize,
    pub groups_used: usize,
    pub norm: bool,
    pub scale: f32,
    /// The RMSNorm epsilon (of the routed norm).
    pub eps: f32,
}

/// llama.cpp's clamp of the weights' sum before normalising (the smallest normal f16).
const MIN_WEIGHT_SUM: f32 = 6.103_515_6e-5;

impl Routing {
    /// The selected experts of one token (in selection order: highest first, ties to the
    /// lower id) and their weights, from its router logits.
    pub fn route(&self, logits: &[f32], bias: &[f32]) -> (Vec<usize>, Vec<f32>) {
        let probs: Vec<f32> = match self.gating {
            Gating::Softmax => {
                let mut p = logits.to_vec();
                crate::nn::ops::softmax(&mut p);
                p
            }
            Gating::Sigmoid => logits.iter().map(|&x| sigmoid(x)).collect(),
            Gating::SoftmaxWeight => logits.to_vec(),
            Gating::SqrtSoftplus => logits.iter().map(|&x| softplus(x).sqrt()).collect(),
        };
        let mut sel: Vec<f32> = probs.iter().zip(bias).map(|(p, b)| p + b).collect();
        if self.groups > 1 {
            let per = sel.len() / self.groups;
            // A group's score: the sum of its two best selection values.
            let scores: Vec<f32> = sel
                .chunks_exact(per)
                .map(|g| {
                    let top = top_k(g, 2);
                    top.iter().map(|&i| g[i]).sum()
                })
                .collect();
            let keep = top_k(&scores, self.groups_used);
            for (gi, g) in sel.chunks_exact_mut(per).enumerate() {
                if !keep.contains(&gi) {
                    g.fill(f32::NEG_INFINITY);
                }
            }
        }
        let chosen = top_k(&sel, self.used);
        let mut w: Vec<f32> = chosen.iter().map(|&e| probs[e]).collect();
        if self.gating == Gating::SoftmaxWeight {
            crate::nn::ops::softmax(&mut w);
        }
        if self.norm {
            // ggml's SUM_ROWS adds in f64, then rounds.
            let sum = w.iter().map(|&x| f64::from(x)).sum::<f64>() as f32;
            let sum = sum.max(MIN_WEIGHT_SUM);
            for x in &mut w {
                *x /= sum;
            }
        }
        if self.scale != 0.0 && self.scale != 1.0 {
            for x in &mut w {
                *x *= self.scale;
            }
        }
        (chosen, w)
    }
}

/// Indices of the `k` largest values, largest first, ties to the lower index.
fn top_k(v: &[f32], k: usize) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..v.len()).collect();
    idx.sort_by(|&a, &b| v[b].total_cmp(&v[a]).then(a.cmp(&b)));
    idx.truncate(k);
    idx
}

impl Moe {
    /// The MoE FFN of every row of `h` (`n × E`) into `out`; returns what the routed
    /// experts cost ([`Routed`]: the union of the rows' experts). The routed experts'
    /// bytes are named to the file as soon as the router has chosen them, before the
    /// latent projection runs ([`crate::weights::read_ahead`]: a mapped file larger than
    /// memory reads exactly them, together, while the layer computes on); each expert is
    /// checked and run as soon as a thread takes it, so the experts already in memory run
    /// while the others are read. An expert's values are checked the first time a token
    /// is routed to it (the error names the expert's tensor and the value; with several
    /// bad experts, the first in expert order).
    pub fn forward(
        &self,
        data: &dyn ModelData,
        routing: &Routing,
        situ: Situ,
        h: &[f32],
        out: &mut [f32],
    ) -> crate::error::Result<Routed> {
        let bytes: &[u8] = data.as_ref();
        let e = self.router.cols;
        let n = h.len() / e;
        let ne = self.router.rows;
        let mut logits = vec![0.0f32; n * ne];
        gemm(&self.router.matrix(bytes), h, &mut logits);
        crate::trace::put("moe_logits", &logits);
        let routes: Vec<(Vec<usize>, Vec<f32>)> = logits
            .chunks_exact(ne)
            .map(|l| routing.route(l, &self.probs_bias))
            .collect();
        if crate::trace::on() {
            let sel: Vec<f32> = routes
                .iter()
                .flat_map(|(s, _)| s.iter().map(|&e| e as f32))
                .collect();
            let ws: Vec<f32> = routes.iter().flat_map(|(_, w)| w.iter().copied()).collect();
            crate::trace::put("moe_selected", &sel);
            crate::trace::put("moe_weights", &ws);
        }
        // Each expert over the tokens routed to it, in one gemm per projection; outputs
        // kept per (token, slot).
        let used = routing.used;
        let work: Vec<(usize, Vec<(usize, usize)>)> = (0..self.experts.len())
            .map(|ei| {
                let mine = routes
                    .iter()
                    .enumerate()
                    .filter_map(|(t, (sel, _))| sel.iter().position(|&s| s == ei).map(|k| (t, k)))
                    .collect::<Vec<_>>();
                (ei, mine)
            })
            .filter(|(_, mine)| !mine.is_empty())
            .collect();
        let routed = || work.iter().flat_map(|(ei, _)| self.experts[*ei].matrices());
        crate::weights::read_ahead(data, routed());
        let cost = Routed {
            experts: work.len() as u64,
            bytes: work.iter().map(|(ei, _)| self.experts[*ei].bytes()).sum(),
        };
        // The experts' input: the latent projection, or h itself.
        let latent;
        let r: &[f32] = match &self.routed_down {
            Some(w) => {
                let mut x = vec![0.0f32; n * w.rows];
                gemm(&w.matrix(bytes), h, &mut x);
                latent = x;
                &latent
            }
            None => h,
        };
        let el = r.len() / n;
        let mut slot_out = vec![0.0f32; n * used * el];
        // The experts side by side, each on one thread over its tokens (the prompt order,
        // a thread-local of this one, passed along).
        let prompt = dspark_quant::gemm::in_prompt_order();
        let outs: Vec<crate::error::Result<Vec<f32>>> = work
            .par_iter()
            .map(|(ei, mine)| {
                for w in self.experts[*ei].matrices() {
                    w.check(bytes)?;
                }
                let mut x = Vec::with_capacity(mine.len() * el);
                for &(t, _) in mine {
                    x.extend_from_slice(&r[t * el..(t + 1) * el]);
                }
                let mut y = vec![0.0f32; mine.len() * el];
                self.experts[*ei].forward_local(bytes, situ, &x, &mut y, prompt);
                Ok(y)
            })
            .collect();
        let outs = outs.into_iter().collect::<crate::error::Result<Vec<_>>>()?;
        for ((_, mine), y) in work.iter().zip(&outs) {
            for (i, &(t, k)) in mine.iter().enumerate() {
                let at = (t * used + k) * el;
                slot_out[at..at + el].copy_from_slice(&y[i * el..(i + 1) * el]);
            }
        }
        // Weighted sum in selection order.
        let mut y = vec![0.0f32; n * el];
        for (t, (_, w)) in routes.iter().enumerate() {
            let acc = &mut y[t * el..(t + 1) * el];
            for (k, &wk) in w.iter().enumerate() {
                let o = &slot_out[(t * used + k) * el..(t * used + k + 1) * el];
                if k == 0 {
                    for (a, &b) in acc.iter_mut().zip(o) {
                        *a = b * wk;
                    }
                } else {
                    for (a, &b) in acc.iter_mut().zip(o) {
                        *a += b * wk;
                    }
                }
            }
        }
        crate::trace::put("moe_slot_out", &slot_out);
        crate::trace::put("moe_wsum", &y);
        if let Some(norm) = &self.routed_norm {
            let mut z = vec![0.0f32; y.len()];
            for (a, b) in y.chunks_exact(el).zip(z.chunks_exact_mut(el)) {
                rms_norm(a, norm, routing.eps, b);
            }
            y = z;
        }
        match &self.routed_up {
            Some(w) => gemm(&w.matrix(bytes), &y, out),
            None => out.copy_from_slice(&y),
        }
        crate::trace::put("moe_routed_out", out);
        if let Some(sh) = &self.shared {
            let mut s = vec![0.0f32; out.len()];
            sh.forward(bytes, situ, h, &mut s);
            crate::trace::put("moe_shared_out", &s);
            for (a, b) in out.iter_mut().zip(&s) {
                *a += b;
            }
        }
        Ok(cost)
    }

    /// Its matrices but the routed experts' (checked at the first forward; the experts
    /// are checked when first routed to).
    pub fn dense_matrices(&self) -> impl Iterator<Item = &WeightRef> {
        [&self.router]
            .into_iter()
            .chain(self.routed_down.iter())
            .chain(self.routed_up.iter())
            .chain(self.shared.iter().flat_map(SituFfn::matrices))
    }

    pub fn bytes(&self) -> u64 {
        self.router.bytes()
            + 4 * self.probs_bias.len() as u64
            + self.experts.iter().map(SituFfn::bytes).sum::<u64>()
            + self.routed_down.as_ref().map_or(0, WeightRef::bytes)
            + self.routed_up.as_ref().map_or(0, WeightRef::bytes)
            + self.shared.as_ref().map_or(0, SituFfn::bytes)
    }

    /// Bytes of weights one token reads (its experts, not all of them): router, the
    /// `used` experts, projections and shared experts.
    pub fn active_bytes(&self, used: usize) -> u64 {
        let per_expert = self.experts.first().map_or(0, SituFfn::bytes);
        self.bytes() - self.experts.iter().map(SituFfn::bytes).sum::<u64>()
            + per_expert * used as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The selected weights are normalised by their sum as ggml's SUM_ROWS makes it (added
    /// in f64, then rounded), not by an f32 running sum: on a token where the two sums
    /// differ, the weights are `w / f64-sum` to the bit.
    #[test]
    fn weights_are_normalised_by_ggml_s_f64_sum() {
        let routing = Routing {
            gating: Gating::Sigmoid,
            used: 8,
            groups: 1,
            groups_used: 1,
            norm: true,
            scale: 2.5,
            eps: 1e-6,
        };
        let bias = vec![0.0f32; 16];
        let mut seed = 1u64;
        let mut next = move || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((seed >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 8.0
        };
        let mut found = 0;
        for _ in 0..10_000 {
            let logits: Vec<f32> = (0..16).map(|_| next()).collect();
            let (chosen, w) = routing.route(&logits, &bias);
            let raw: Vec<f32> = chosen.iter().map(|&e| sigmoid(logits[e])).collect();
            let f32_sum: f32 = raw.iter().sum();
            let f64_sum = raw.iter().map(|&x| f64::from(x)).sum::<f64>() as f32;
            let want: Vec<u32> = raw.iter().map(|&x| (x / f64_sum * 2.5).to_bits()).collect();
            assert_eq!(w.iter().map(|x| x.to_bits()).collect::<Vec<_>>(), want);
            found += usize::from(f32_sum != f64_sum);
        }
        assert!(
            found > 0,
            "no token where the two sums differ: the test shows nothing"
        );
    }
}

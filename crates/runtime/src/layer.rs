//! The Qwen3-style decoder layer both models are made of (`runtime-math.md` §1.4): its
//! weights, and the steps target and drafter share. What differs — which keys a query
//! sees, and where keys are cached — stays in each model.

use dspark_quant::gemm::{gemm, gemm_many, Matrix};
use dspark_quant::kernels;
use dspark_quant::ops::{rms_norm, silu, softmax, Rope};

use crate::error::Result;
use crate::weights::Weights;

/// Sizes of a decoder layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Dims {
    pub hidden: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub ffn: usize,
}

/// One layer's weights, by their GGUF names under `blk.{i}.`.
pub(crate) struct DecoderLayer<'a> {
    pub attn_norm: Vec<f32>,
    pub q: Matrix<'a>,
    pub k: Matrix<'a>,
    pub v: Matrix<'a>,
    pub o: Matrix<'a>,
    pub q_norm: Vec<f32>,
    pub k_norm: Vec<f32>,
    pub ffn_norm: Vec<f32>,
    pub gate: Matrix<'a>,
    pub up: Matrix<'a>,
    pub down: Matrix<'a>,
}

impl<'a> DecoderLayer<'a> {
    /// Loads `blk.{i}.*`, checking every type and shape.
    pub fn load(w: &Weights<'a>, i: usize, d: Dims) -> Result<DecoderLayer<'a>> {
        let n = |s: &str| format!("blk.{i}.{s}.weight");
        let (q, kv) = (d.heads * d.head_dim, d.kv_heads * d.head_dim);
        Ok(DecoderLayer {
            attn_norm: w.vector(&n("attn_norm"), d.hidden)?,
            q: w.matrix(&n("attn_q"), q, d.hidden)?,
            k: w.matrix(&n("attn_k"), kv, d.hidden)?,
            v: w.matrix(&n("attn_v"), kv, d.hidden)?,
            o: w.matrix(&n("attn_output"), d.hidden, q)?,
            q_norm: w.vector(&n("attn_q_norm"), d.head_dim)?,
            k_norm: w.vector(&n("attn_k_norm"), d.head_dim)?,
            ffn_norm: w.vector(&n("ffn_norm"), d.hidden)?,
            gate: w.matrix(&n("ffn_gate"), d.ffn, d.hidden)?,
            up: w.matrix(&n("ffn_up"), d.ffn, d.hidden)?,
            down: w.matrix(&n("ffn_down"), d.hidden, d.ffn)?,
        })
    }

    /// `x += W_down(SiLU(W_gate y) ⊙ W_up y)` with `y = RMSNorm(x, ffn_norm)`, per row.
    pub fn ffn_residual(&self, x: &mut [f32], d: Dims, eps: f32) {
        let n = x.len() / d.hidden;
        let mut y = vec![0.0f32; x.len()];
        norm_rows(x, &self.ffn_norm, eps, &mut y);
        let (mut g, mut up, mut down) = (
            vec![0.0f32; n * d.ffn],
            vec![0.0f32; n * d.ffn],
            vec![0.0f32; x.len()],
        );
        if self.gate.ty == self.up.ty {
            gemm_many(&[&self.gate, &self.up], &y, &mut [&mut g, &mut up]);
        } else {
            gemm(&self.gate, &y, &mut g);
            gemm(&self.up, &y, &mut up);
        }
        for (a, b) in g.iter_mut().zip(&up) {
            *a = silu(*a) * b;
        }
        gemm(&self.down, &g, &mut down);
        for (a, b) in x.iter_mut().zip(&down) {
            *a += b;
        }
    }

    /// `q, k, v = W_q u, W_k u, W_v u`, per row, in one parallel pass.
    pub fn qkv(&self, u: &[f32], q: &mut [f32], k: &mut [f32], v: &mut [f32]) {
        if self.q.ty == self.k.ty && self.k.ty == self.v.ty {
            gemm_many(&[&self.q, &self.k, &self.v], u, &mut [q, k, v]);
        } else {
            gemm(&self.q, u, q);
            gemm(&self.k, u, k);
            gemm(&self.v, u, v);
        }
    }

    /// `x += W_o · attn`, per row.
    pub fn output_residual(&self, attn: &[f32], x: &mut [f32]) {
        let mut o = vec![0.0f32; x.len()];
        gemm(&self.o, attn, &mut o);
        for (a, b) in x.iter_mut().zip(&o) {
            *a += b;
        }
    }
}

/// RMSNorm of each `w.len()`-wide row of `x` into `out`.
pub(crate) fn norm_rows(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    for (xt, ot) in x.chunks_exact(w.len()).zip(out.chunks_exact_mut(w.len())) {
        rms_norm(xt, w, eps, ot);
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

/// The query heads sharing one KV head (`qs`: g heads of `head_dim`) attending over
/// `n_keys` keys: `out_j = Σ_p softmax_p(q_j·k_p / sqrt(d)) v_p`, keys in position order.
/// Each key and value is read once for the whole group. Every query's arithmetic is the
/// same whatever the group or the batch around it, so batched and single-position forwards
/// agree bit for bit.
pub(crate) fn attend_group<'k>(
    qs: &[f32],
    head_dim: usize,
    n_keys: usize,
    key: impl Fn(usize) -> &'k [f32],
    value: impl Fn(usize) -> &'k [f32],
    scores: &mut Vec<f32>,
    out: &mut [f32],
) {
    let k = kernels();
    let g = qs.len() / head_dim;
    let scale = 1.0 / (head_dim as f32).sqrt();
    scores.clear();
    scores.resize(g * n_keys, 0.0);
    for p in 0..n_keys {
        let kp = key(p);
        for (j, q) in qs.chunks_exact(head_dim).enumerate() {
            scores[j * n_keys + p] = (k.dot_f32)(q, kp) * scale;
        }
    }
    for row in scores.chunks_exact_mut(n_keys.max(1)) {
        softmax(row);
    }
    out.fill(0.0);
    for p in 0..n_keys {
        let vp = value(p);
        for (j, o) in out.chunks_exact_mut(head_dim).enumerate() {
            (k.axpy_f32)(o, scores[j * n_keys + p], vp);
        }
    }
}

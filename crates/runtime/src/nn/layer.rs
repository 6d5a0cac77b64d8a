//! The pre-norm decoder layer the drafter and the Qwen3 and llama targets are made of
//! (`docs/RUNTIME-MATH.md` §1.4): its weights, and the steps they share — projections
//! (with the biases llama files may carry), the output projection with its residual, and
//! the SwiGLU FFN with its residual. Qwen3 and the drafter norm each query and key head
//! (`q_norm`, `k_norm`); llama has no such norm.

use dspark_contract::llama::{LlamaLayerRefs, Qkv};
use dspark_contract::LayerRefs;
use dspark_quant::gemm::{gemm, gemm_many, scratch_bytes};

use crate::error::Result;
use crate::nn::ops::{norm_rows, swiglu};
use crate::weights::{vector, Layout, WeightRef};

/// Sizes of a decoder layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Dims {
    pub hidden: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub ffn: usize,
}

impl Dims {
    /// f32 values one decoder layer holds per row at its peak: the norm output, Q, K, V
    /// and attention output, the RoPE table, the output projection, and the FFN's input,
    /// gate, up and down rows, with the residual stream itself.
    pub fn row_floats(&self) -> u64 {
        let (h, qd, kvd) = (
            self.hidden as u64,
            (self.heads * self.head_dim) as u64,
            (self.kv_heads * self.head_dim) as u64,
        );
        5 * h + 2 * qd + 2 * kvd + 2 * self.ffn as u64 + self.head_dim as u64
    }

    /// Bytes the largest matrix product of a decoder layer over `rows` rows allocates
    /// for itself (see [`scratch_bytes`]).
    pub fn gemm_scratch(&self, rows: usize) -> u64 {
        let (h, f) = (self.hidden, self.ffn);
        let qkv = (self.heads + 2 * self.kv_heads) * self.head_dim;
        [
            scratch_bytes(qkv, h, rows),
            scratch_bytes(h, self.heads * self.head_dim, rows),
            scratch_bytes(2 * f, h, rows),
            scratch_bytes(h, f, rows),
        ]
        .into_iter()
        .max()
        .unwrap_or(0)
    }

    /// Bytes the attention score buffers take over `positions` keys: one per worker
    /// thread, a query-head group wide.
    pub fn score_bytes(&self, positions: usize) -> u64 {
        let group = (self.heads / self.kv_heads.max(1)) as u64;
        4 * rayon::current_num_threads() as u64 * group * positions as u64
    }
}

/// One layer's weights, by their GGUF names under `blk.{i}.`.
pub(crate) struct DecoderLayer {
    pub attn_norm: Vec<f32>,
    pub q: WeightRef,
    pub k: WeightRef,
    pub v: WeightRef,
    pub o: WeightRef,
    pub q_norm: Option<Vec<f32>>,
    pub k_norm: Option<Vec<f32>>,
    pub ffn_norm: Vec<f32>,
    pub gate: WeightRef,
    pub up: WeightRef,
    pub down: WeightRef,
    pub biases: Biases,
}

/// The biases a llama layer may carry, each added after its projection.
#[derive(Default)]
pub(crate) struct Biases {
    pub q: Option<Vec<f32>>,
    pub k: Option<Vec<f32>>,
    pub v: Option<Vec<f32>>,
    pub o: Option<Vec<f32>>,
    pub gate: Option<Vec<f32>>,
    pub up: Option<Vec<f32>>,
    pub down: Option<Vec<f32>>,
}

impl Biases {
    fn floats(&self) -> usize {
        [
            &self.q, &self.k, &self.v, &self.o, &self.gate, &self.up, &self.down,
        ]
        .into_iter()
        .map(|b| b.as_ref().map_or(0, Vec::len))
        .sum()
    }
}

/// `x[row] += b` for every row of `x`, when there is a bias.
fn add_bias(x: &mut [f32], b: Option<&Vec<f32>>) {
    if let Some(b) = b {
        for row in x.chunks_exact_mut(b.len()) {
            for (v, &c) in row.iter_mut().zip(b) {
                *v += c;
            }
        }
    }
}

impl DecoderLayer {
    /// The layer's weights from its checked tensors, located in `bytes` (held as `layout`
    /// says, see [`WeightRef::locate`]).
    pub fn load(bytes: &[u8], t: &LayerRefs<'_>, layout: Layout) -> Result<DecoderLayer> {
        let m = |r| WeightRef::locate(bytes, r, layout);
        Ok(DecoderLayer {
            attn_norm: vector(&t.attn_norm)?,
            q: m(&t.attn_q)?,
            k: m(&t.attn_k)?,
            v: m(&t.attn_v)?,
            o: m(&t.attn_output)?,
            q_norm: Some(vector(&t.attn_q_norm)?),
            k_norm: Some(vector(&t.attn_k_norm)?),
            ffn_norm: vector(&t.ffn_norm)?,
            gate: m(&t.ffn_gate)?,
            up: m(&t.ffn_up)?,
            down: m(&t.ffn_down)?,
            biases: Biases::default(),
        })
    }

    /// A llama layer's weights: a fused `attn_qkv` becomes three views of its row ranges
    /// (queries, keys, values), its bias split the same way.
    pub fn from_llama(
        bytes: &[u8],
        t: &LlamaLayerRefs<'_>,
        qd: usize,
        kvd: usize,
        layout: Layout,
    ) -> Result<DecoderLayer> {
        let m = |r| WeightRef::locate(bytes, r, layout);
        let opt = |r: &Option<dspark_contract::TensorRef<'_>>| r.as_ref().map(vector).transpose();
        let (q, k, v, q_bias, k_bias, v_bias) = match &t.qkv {
            Qkv::Separate {
                q,
                k,
                v,
                q_bias,
                k_bias,
                v_bias,
            } => (
                m(q)?,
                m(k)?,
                m(v)?,
                opt(q_bias)?,
                opt(k_bias)?,
                opt(v_bias)?,
            ),
            Qkv::Fused { qkv, bias } => {
                let all = WeightRef::locate(
                    bytes,
                    qkv,
                    Layout {
                        pack: false,
                        ..layout
                    },
                )?;
                let bias = opt(bias)?;
                let part =
                    |from: usize, n: usize| bias.as_ref().map(|b| b[from..from + n].to_vec());
                (
                    all.row_range(0, qd),
                    all.row_range(qd, kvd),
                    all.row_range(qd + kvd, kvd),
                    part(0, qd),
                    part(qd, kvd),
                    part(qd + kvd, kvd),
                )
            }
        };
        Ok(DecoderLayer {
            attn_norm: vector(&t.attn_norm)?,
            q,
            k,
            v,
            o: m(&t.attn_output)?,
            q_norm: None,
            k_norm: None,
            ffn_norm: vector(&t.ffn_norm)?,
            gate: m(&t.ffn_gate)?,
            up: m(&t.ffn_up)?,
            down: m(&t.ffn_down)?,
            biases: Biases {
                q: q_bias,
                k: k_bias,
                v: v_bias,
                o: opt(&t.attn_output_bias)?,
                gate: opt(&t.ffn_gate_bias)?,
                up: opt(&t.ffn_up_bias)?,
                down: opt(&t.ffn_down_bias)?,
            },
        })
    }

    /// Its matrices (a fused projection's parts share one value check).
    pub fn matrices(&self) -> [&WeightRef; 7] {
        [
            &self.q, &self.k, &self.v, &self.o, &self.gate, &self.up, &self.down,
        ]
    }

    /// Bytes of its matrices and norms.
    pub fn bytes(&self) -> u64 {
        let norms = self.attn_norm.len()
            + self.q_norm.as_ref().map_or(0, Vec::len)
            + self.k_norm.as_ref().map_or(0, Vec::len)
            + self.ffn_norm.len()
            + self.biases.floats();
        [
            &self.q, &self.k, &self.v, &self.o, &self.gate, &self.up, &self.down,
        ]
        .into_iter()
        .map(WeightRef::bytes)
        .sum::<u64>()
            + 4 * norms as u64
    }

    /// `x += W_down(SiLU(W_gate y) ⊙ W_up y)` with `y = RMSNorm(x, ffn_norm)`, per row.
    pub fn ffn_residual(&self, bytes: &[u8], x: &mut [f32], d: Dims, eps: f32) {
        let n = x.len() / d.hidden;
        let mut y = vec![0.0f32; x.len()];
        norm_rows(x, &self.ffn_norm, eps, &mut y);
        let (mut g, mut up, mut down) = (
            vec![0.0f32; n * d.ffn],
            vec![0.0f32; n * d.ffn],
            vec![0.0f32; x.len()],
        );
        let (gate, upm) = (self.gate.matrix(bytes), self.up.matrix(bytes));
        if gate.ty == upm.ty {
            gemm_many(&[&gate, &upm], &y, &mut [&mut g, &mut up]);
        } else {
            gemm(&gate, &y, &mut g);
            gemm(&upm, &y, &mut up);
        }
        add_bias(&mut g, self.biases.gate.as_ref());
        add_bias(&mut up, self.biases.up.as_ref());
        for (gt, ut) in g.chunks_exact_mut(d.ffn).zip(up.chunks_exact(d.ffn)) {
            swiglu(gt, ut);
        }
        gemm(&self.down.matrix(bytes), &g, &mut down);
        add_bias(&mut down, self.biases.down.as_ref());
        for (a, b) in x.iter_mut().zip(&down) {
            *a += b;
        }
    }

    /// `q, k, v = W_q u, W_k u, W_v u`, per row, in one parallel pass.
    pub fn qkv(&self, bytes: &[u8], u: &[f32], q: &mut [f32], k: &mut [f32], v: &mut [f32]) {
        let (wq, wk, wv) = (
            self.q.matrix(bytes),
            self.k.matrix(bytes),
            self.v.matrix(bytes),
        );
        if wq.ty == wk.ty && wk.ty == wv.ty {
            gemm_many(&[&wq, &wk, &wv], u, &mut [&mut *q, &mut *k, &mut *v]);
        } else {
            gemm(&wq, u, q);
            gemm(&wk, u, k);
            gemm(&wv, u, v);
        }
        add_bias(q, self.biases.q.as_ref());
        add_bias(k, self.biases.k.as_ref());
        add_bias(v, self.biases.v.as_ref());
    }

    /// `x += W_o · attn`, per row.
    pub fn output_residual(&self, bytes: &[u8], attn: &[f32], x: &mut [f32]) {
        let mut o = vec![0.0f32; x.len()];
        gemm(&self.o.matrix(bytes), attn, &mut o);
        add_bias(&mut o, self.biases.o.as_ref());
        for (a, b) in x.iter_mut().zip(&o) {
            *a += b;
        }
    }
}

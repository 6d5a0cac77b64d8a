//! Qwen3 as a speculative-decoding target, loaded from a GGUF in llama.cpp's `qwen3`
//! layout (`token_embd`, `blk.N.attn_q/k/v/output`, `attn_q_norm/k_norm`,
//! `ffn_gate/up/down`, `output_norm`, `output` or tied embeddings; keys `qwen3.*`).
//!
//! The forward pass follows `shared/spec/runtime-math.md` §1.4 (same decoder layer as the
//! drafter, causal here): per token, RMSNorm → q/k/v → per-head q/k RMSNorm → RoPE (NeoX)
//! → causal GQA attention over the KV cache → output projection → residual → RMSNorm →
//! SwiGLU FFN → residual. Every per-token quantity depends on that token's column only
//! (gemm computes each column alone; norms, RoPE and attention are per row), so a forward
//! over n positions gives the same bits as n single-position forwards.

use dspark_gguf::GgufFile;
use dspark_quant::gemm::{gemm, Matrix};
use dspark_quant::ops::{rms_norm, silu, softmax, Rope};

use crate::error::{Result, RuntimeError};
use crate::target::{Forward, Target};
use crate::weights::Weights;

/// Hyper-parameters read from `qwen3.*` keys.
#[derive(Clone, Debug, PartialEq)]
pub struct Qwen3Config {
    /// `embedding_length`.
    pub hidden: usize,
    /// `block_count`.
    pub layers: usize,
    /// `attention.head_count`.
    pub heads: usize,
    /// `attention.head_count_kv`.
    pub kv_heads: usize,
    /// `attention.key_length` (default hidden / heads).
    pub head_dim: usize,
    /// `feed_forward_length`.
    pub ffn: usize,
    /// Rows of `token_embd`.
    pub vocab: usize,
    /// `context_length`.
    pub context: usize,
    /// `attention.layer_norm_rms_epsilon`.
    pub eps: f32,
    /// `rope.freq_base`.
    pub rope_theta: f32,
}

struct Layer<'a> {
    attn_norm: Vec<f32>,
    q: Matrix<'a>,
    k: Matrix<'a>,
    v: Matrix<'a>,
    o: Matrix<'a>,
    q_norm: Vec<f32>,
    k_norm: Vec<f32>,
    ffn_norm: Vec<f32>,
    gate: Matrix<'a>,
    up: Matrix<'a>,
    down: Matrix<'a>,
    /// Cached keys, `[position][kv head][head_dim]`, post-norm and post-RoPE.
    k_cache: Vec<f32>,
    /// Cached values, same layout.
    v_cache: Vec<f32>,
}

/// A Qwen3 model borrowing its weights from a parsed GGUF.
pub struct Qwen3<'a> {
    /// Hyper-parameters.
    pub config: Qwen3Config,
    token_embd: Matrix<'a>,
    output_norm: Vec<f32>,
    output: Matrix<'a>,
    layers: Vec<Layer<'a>>,
    rope: Rope,
    len: usize,
}

impl<'a> Qwen3<'a> {
    /// Loads every tensor by name, checking types and shapes. `max_context` bounds the KV
    /// cache (and may be smaller than the model's context length).
    pub fn load(file: &'a GgufFile<'a>, max_context: usize) -> Result<Qwen3<'a>> {
        let w = Weights::new(file);
        match file.get("general.architecture").and_then(|v| v.as_str()) {
            Some("qwen3") => {}
            other => {
                return Err(RuntimeError::Key {
                    key: "general.architecture".into(),
                    msg: format!("is {other:?}, expected \"qwen3\""),
                })
            }
        }
        let u = |k: &str| w.u32(&format!("qwen3.{k}")).map(|v| v as usize);
        let (hidden, layers, heads) = (
            u("embedding_length")?,
            u("block_count")?,
            u("attention.head_count")?,
        );
        let kv_heads = u("attention.head_count_kv")?;
        if hidden == 0 || heads == 0 || kv_heads == 0 || heads % kv_heads != 0 || layers == 0 {
            return Err(RuntimeError::Key { key: "qwen3.attention.head_count_kv".into(), msg: format!("{kv_heads} KV heads, {heads} heads, {hidden} hidden, {layers} layers: not a valid geometry") });
        }
        let head_dim = w
            .u32("qwen3.attention.key_length")
            .map(|v| v as usize)
            .unwrap_or(hidden / heads);
        let ffn = u("feed_forward_length")?;
        let token_rows = file
            .tensor("token_embd.weight")
            .map_err(|_| RuntimeError::Tensor {
                tensor: "token_embd.weight".into(),
                msg: "missing".into(),
            })?
            .info
            .dims
            .get(1)
            .copied()
            .unwrap_or(1) as usize;
        let config = Qwen3Config {
            hidden,
            layers,
            heads,
            kv_heads,
            head_dim,
            ffn,
            vocab: token_rows,
            context: u("context_length")?.min(max_context),
            eps: w.f32_or("qwen3.attention.layer_norm_rms_epsilon", 1e-6)?,
            rope_theta: w.f32_or("qwen3.rope.freq_base", 1e6)?,
        };
        let c = &config;
        let token_embd = w.matrix("token_embd.weight", c.vocab, hidden)?;
        let output = if w.has("output.weight") {
            w.matrix("output.weight", c.vocab, hidden)?
        } else {
            token_embd
        };
        let kv = c.kv_heads * c.head_dim;
        let mut blocks = Vec::with_capacity(layers);
        for i in 0..layers {
            let n = |s: &str| format!("blk.{i}.{s}.weight");
            blocks.push(Layer {
                attn_norm: w.vector(&n("attn_norm"), hidden)?,
                q: w.matrix(&n("attn_q"), heads * head_dim, hidden)?,
                k: w.matrix(&n("attn_k"), kv, hidden)?,
                v: w.matrix(&n("attn_v"), kv, hidden)?,
                o: w.matrix(&n("attn_output"), hidden, heads * head_dim)?,
                q_norm: w.vector(&n("attn_q_norm"), head_dim)?,
                k_norm: w.vector(&n("attn_k_norm"), head_dim)?,
                ffn_norm: w.vector(&n("ffn_norm"), hidden)?,
                gate: w.matrix(&n("ffn_gate"), ffn, hidden)?,
                up: w.matrix(&n("ffn_up"), ffn, hidden)?,
                down: w.matrix(&n("ffn_down"), hidden, ffn)?,
                k_cache: vec![0.0; c.context * kv],
                v_cache: vec![0.0; c.context * kv],
            });
        }
        Ok(Qwen3 {
            output_norm: w.vector("output_norm.weight", hidden)?,
            rope: Rope::new(head_dim, f64::from(config.rope_theta), None),
            token_embd,
            output,
            layers: blocks,
            len: 0,
            config,
        })
    }
}

impl Target for Qwen3<'_> {
    fn vocab_size(&self) -> usize {
        self.config.vocab
    }

    fn hidden_size(&self) -> usize {
        self.config.hidden
    }

    fn n_layers(&self) -> usize {
        self.config.layers
    }

    fn len(&self) -> usize {
        self.len
    }

    fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    fn embed(&self, tokens: &[u32], out: &mut [f32]) -> Result<()> {
        let h = self.config.hidden;
        assert_eq!(out.len(), tokens.len() * h, "embed output size");
        for (&t, o) in tokens.iter().zip(out.chunks_exact_mut(h)) {
            if t as usize >= self.config.vocab {
                return Err(RuntimeError::Request(format!(
                    "token {t} is outside the vocabulary of {}",
                    self.config.vocab
                )));
            }
            self.token_embd.row_f32(t as usize, o);
        }
        Ok(())
    }

    fn lm_head(&self, hidden: &[f32], logits: &mut [f32]) {
        gemm(&self.output, hidden, logits);
    }

    fn forward(&mut self, tokens: &[u32], capture: &[usize]) -> Result<Forward> {
        let c = self.config.clone();
        let (n, h, hd) = (tokens.len(), c.hidden, c.head_dim);
        let p0 = self.len;
        if p0 + n > c.context {
            return Err(RuntimeError::Request(format!(
                "context full: {p0} + {n} positions > {}",
                c.context
            )));
        }
        if let Some(&bad) = capture.iter().find(|&&l| l >= c.layers) {
            return Err(RuntimeError::Request(format!(
                "cannot capture layer {bad} of {}",
                c.layers
            )));
        }
        let (qd, kvd) = (c.heads * hd, c.kv_heads * hd);
        let group = c.heads / c.kv_heads;
        let scale = 1.0 / (hd as f32).sqrt();
        let mut x = vec![0.0f32; n * h];
        self.embed(tokens, &mut x)?;
        let mut captured = vec![0.0f32; n * capture.len() * h];
        let (mut normed, mut q, mut k, mut v) = (
            vec![0.0f32; n * h],
            vec![0.0f32; n * qd],
            vec![0.0f32; n * kvd],
            vec![0.0f32; n * kvd],
        );
        let (mut attn, mut o) = (vec![0.0f32; n * qd], vec![0.0f32; n * h]);
        let (mut g, mut up, mut down) = (
            vec![0.0f32; n * c.ffn],
            vec![0.0f32; n * c.ffn],
            vec![0.0f32; n * h],
        );
        let mut tmp = vec![0.0f32; hd];
        for (li, layer) in self.layers.iter_mut().enumerate() {
            // 1. Attention input norm, projections.
            for (xt, nt) in x.chunks_exact(h).zip(normed.chunks_exact_mut(h)) {
                rms_norm(xt, &layer.attn_norm, c.eps, nt);
            }
            gemm(&layer.q, &normed, &mut q);
            gemm(&layer.k, &normed, &mut k);
            gemm(&layer.v, &normed, &mut v);
            // 2. Per-head norms and RoPE; keys and values into the cache.
            for t in 0..n {
                let pos = (p0 + t) as u64;
                for head in q[t * qd..(t + 1) * qd].chunks_exact_mut(hd) {
                    tmp.copy_from_slice(head);
                    rms_norm(&tmp, &layer.q_norm, c.eps, head);
                    self.rope.apply(head, pos);
                }
                for head in k[t * kvd..(t + 1) * kvd].chunks_exact_mut(hd) {
                    tmp.copy_from_slice(head);
                    rms_norm(&tmp, &layer.k_norm, c.eps, head);
                    self.rope.apply(head, pos);
                }
                let at = (p0 + t) * kvd;
                layer.k_cache[at..at + kvd].copy_from_slice(&k[t * kvd..(t + 1) * kvd]);
                layer.v_cache[at..at + kvd].copy_from_slice(&v[t * kvd..(t + 1) * kvd]);
            }
            // 3. Causal GQA attention: position p reads keys 0..=p.
            let mut scores = Vec::with_capacity(p0 + n);
            for t in 0..n {
                let visible = p0 + t + 1;
                for head in 0..c.heads {
                    let kvh = head / group;
                    let qh = &q[t * qd + head * hd..t * qd + (head + 1) * hd];
                    scores.clear();
                    for p in 0..visible {
                        let kp = &layer.k_cache[p * kvd + kvh * hd..p * kvd + (kvh + 1) * hd];
                        scores.push(qh.iter().zip(kp).map(|(a, b)| a * b).sum::<f32>() * scale);
                    }
                    softmax(&mut scores);
                    let out = &mut attn[t * qd + head * hd..t * qd + (head + 1) * hd];
                    out.fill(0.0);
                    for (p, &s) in scores.iter().enumerate() {
                        let vp = &layer.v_cache[p * kvd + kvh * hd..p * kvd + (kvh + 1) * hd];
                        for (o, &vv) in out.iter_mut().zip(vp) {
                            *o += s * vv;
                        }
                    }
                }
            }
            gemm(&layer.o, &attn, &mut o);
            for (a, b) in x.iter_mut().zip(&o) {
                *a += b;
            }
            // 4. SwiGLU FFN.
            for (xt, nt) in x.chunks_exact(h).zip(normed.chunks_exact_mut(h)) {
                rms_norm(xt, &layer.ffn_norm, c.eps, nt);
            }
            gemm(&layer.gate, &normed, &mut g);
            gemm(&layer.up, &normed, &mut up);
            for (a, b) in g.iter_mut().zip(&up) {
                *a = silu(*a) * b;
            }
            gemm(&layer.down, &g, &mut down);
            for (a, b) in x.iter_mut().zip(&down) {
                *a += b;
            }
            // 5. Capture: the residual stream after this layer, before the final norm.
            for (slot, _) in capture.iter().enumerate().filter(|(_, &l)| l == li) {
                for t in 0..n {
                    let dst = (t * capture.len() + slot) * h;
                    captured[dst..dst + h].copy_from_slice(&x[t * h..(t + 1) * h]);
                }
            }
        }
        for (xt, nt) in x.chunks_exact(h).zip(normed.chunks_exact_mut(h)) {
            rms_norm(xt, &self.output_norm, c.eps, nt);
        }
        let mut logits = vec![0.0f32; n * c.vocab];
        gemm(&self.output, &normed, &mut logits);
        self.len = p0 + n;
        Ok(Forward { logits, captured })
    }
}

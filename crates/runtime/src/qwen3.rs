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
use dspark_quant::ops::Rope;

use crate::error::{Result, RuntimeError};
use rayon::prelude::*;

use crate::layer::{attend_group, norm_rope_heads, norm_rows, rope_tables, DecoderLayer, Dims};
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

impl Qwen3Config {
    fn dims(&self) -> Dims {
        Dims {
            hidden: self.hidden,
            heads: self.heads,
            kv_heads: self.kv_heads,
            head_dim: self.head_dim,
            ffn: self.ffn,
        }
    }
}

struct Layer<'a> {
    w: DecoderLayer<'a>,
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
        let token_rows = w
            .tensor("token_embd.weight")?
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
        let dims = c.dims();
        let mut blocks = Vec::with_capacity(layers);
        for i in 0..layers {
            blocks.push(Layer {
                w: DecoderLayer::load(&w, i, dims)?,
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
        let mut x = vec![0.0f32; n * h];
        self.embed(tokens, &mut x)?;
        let mut captured = vec![0.0f32; n * capture.len() * h];
        let (mut normed, mut q, mut k, mut v) = (
            vec![0.0f32; n * h],
            vec![0.0f32; n * qd],
            vec![0.0f32; n * kvd],
            vec![0.0f32; n * kvd],
        );
        let mut attn = vec![0.0f32; n * qd];
        let tables = rope_tables(&self.rope, p0, n, hd);
        for (li, layer) in self.layers.iter_mut().enumerate() {
            let lw = &layer.w;
            // 1. Attention input norm, projections, per-head norms and RoPE.
            norm_rows(&x, &lw.attn_norm, c.eps, &mut normed);
            lw.qkv(&normed, &mut q, &mut k, &mut v);
            norm_rope_heads(&mut q, qd, &lw.q_norm, c.eps, &self.rope, &tables);
            norm_rope_heads(&mut k, kvd, &lw.k_norm, c.eps, &self.rope, &tables);
            // 2. Keys and values into the cache.
            layer.k_cache[p0 * kvd..(p0 + n) * kvd].copy_from_slice(&k);
            layer.v_cache[p0 * kvd..(p0 + n) * kvd].copy_from_slice(&v);
            // 3. Causal GQA attention: position p0 + t reads keys 0..=p0 + t. Each task is
            //    one position's group of query heads sharing a KV head; tasks run in
            //    parallel, each one's arithmetic the same whatever runs beside it.
            let (kc, vc) = (&layer.k_cache, &layer.v_cache);
            let q = &q;
            attn.par_chunks_mut(group * hd).enumerate().for_each_init(
                || Vec::with_capacity(group * (p0 + n)),
                |scores, (i, out)| {
                    let (t, kvh) = (i / c.kv_heads, i % c.kv_heads);
                    let span = |p: usize| p * kvd + kvh * hd..p * kvd + (kvh + 1) * hd;
                    attend_group(
                        &q[i * group * hd..(i + 1) * group * hd],
                        hd,
                        p0 + t + 1,
                        |p| &kc[span(p)],
                        |p| &vc[span(p)],
                        scores,
                        out,
                    );
                },
            );
            lw.output_residual(&attn, &mut x);
            // 4. SwiGLU FFN.
            lw.ffn_residual(&mut x, c.dims(), c.eps);
            // 5. Capture: the residual stream after this layer, before the final norm.
            for (slot, _) in capture.iter().enumerate().filter(|(_, &l)| l == li) {
                for t in 0..n {
                    let dst = (t * capture.len() + slot) * h;
                    captured[dst..dst + h].copy_from_slice(&x[t * h..(t + 1) * h]);
                }
            }
        }
        norm_rows(&x, &self.output_norm, c.eps, &mut normed);
        let mut logits = vec![0.0f32; n * c.vocab];
        gemm(&self.output, &normed, &mut logits);
        self.len = p0 + n;
        Ok(Forward { logits, captured })
    }
}

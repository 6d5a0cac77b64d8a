//! Qwen3 as a speculative-decoding target, loaded from a GGUF in llama.cpp's `qwen3`
//! layout (`token_embd`, `blk.N.attn_q/k/v/output`, `attn_q_norm/k_norm`,
//! `ffn_gate/up/down`, `output_norm`, `output` or tied embeddings; keys `qwen3.*`), as the
//! contract crate checked it ([`Qwen3File`]).
//!
//! The forward pass follows `shared/spec/runtime-math.md` §1.4 (same decoder layer as the
//! drafter, causal here): per token, RMSNorm → q/k/v → per-head q/k RMSNorm → RoPE (NeoX)
//! → causal GQA attention over the KV cache → output projection → residual → RMSNorm →
//! SwiGLU FFN → residual. Every per-token quantity depends on that token's column only
//! (gemm computes each column alone; norms, RoPE and attention are per row), so a forward
//! over n positions gives the same bits as n single-position forwards.
//!
//! [`Qwen3`] holds the weights (shared through an `Arc`); [`Qwen3Session`] one sequence's
//! KV cache and positions, so one loaded model serves any number of sessions.

use std::sync::Arc;

use dspark_contract::qwen3::Qwen3Hparams;
use dspark_contract::{Qwen3File, SpecialTokens, TargetShape};
use dspark_quant::gemm::{gemm, scratch_bytes};
use rayon::prelude::*;

use crate::cache::KvCache;
use crate::error::{Result, RuntimeError};
use crate::memory::try_zeroed;
use crate::nn::attention::{attend_group, Span};
use crate::nn::layer::{DecoderLayer, Dims};
use crate::nn::ops::norm_rows;
use crate::nn::rope::{norm_rope_heads, rope_tables, Rope};
use crate::target::{check_rollback, Forward, Logits, Target};
use crate::weights::{vector, ModelBytes, WeightRef};

/// A Qwen3 model's weights.
pub struct Qwen3 {
    bytes: ModelBytes,
    hparams: Qwen3Hparams,
    special: SpecialTokens,
    token_embd: WeightRef,
    output_norm: Vec<f32>,
    /// The LM head (`token_embd` itself when tied).
    output: WeightRef,
    layers: Vec<DecoderLayer>,
    rope: Rope,
}

impl Qwen3 {
    /// Loads the weights `file` describes; `file` must be the contract's proof for a GGUF
    /// parsed from `bytes`.
    pub fn load(bytes: ModelBytes, file: &Qwen3File<'_>) -> Result<Qwen3> {
        let b: &[u8] = (*bytes).as_ref();
        let hparams = file.hparams().clone();
        let pack = crate::weights::packs(b.len() as u64);
        let token_embd = WeightRef::locate(b, file.token_embd(), pack)?;
        let output = match file.output() {
            Some(t) => WeightRef::locate(b, t, pack)?,
            None => token_embd.clone(),
        };
        let layers = file
            .layers()
            .iter()
            .map(|l| DecoderLayer::load(b, l, pack))
            .collect::<Result<Vec<_>>>()?;
        Ok(Qwen3 {
            rope: Rope::new(hparams.head_dim, f64::from(hparams.rope_base), None),
            output_norm: vector(file.output_norm())?,
            special: file.special_tokens(),
            bytes,
            hparams,
            token_embd,
            output,
            layers,
        })
    }

    /// Parses `bytes`, checks them against the `qwen3` contract with this build's kernels,
    /// and loads them.
    pub fn open(bytes: ModelBytes) -> Result<Qwen3> {
        let file = dspark_gguf::GgufFile::parse((*bytes).as_ref())?;
        let checked = dspark_contract::qwen3::check(&file, &dspark_quant::matrix_types())?;
        Qwen3::load(bytes.clone(), &checked)
    }

    /// Hyper-parameters.
    pub fn hparams(&self) -> &Qwen3Hparams {
        &self.hparams
    }

    /// The special tokens the file declares.
    pub fn special_tokens(&self) -> SpecialTokens {
        self.special
    }

    /// Hidden size, layers and vocabulary.
    pub fn shape(&self) -> TargetShape {
        TargetShape {
            hidden: self.hparams.hidden,
            layers: self.hparams.layers,
            vocab: self.hparams.vocab,
        }
    }

    /// Bytes of weights one forward reads (every layer, the final norm, the LM head).
    pub fn weight_bytes(&self) -> u64 {
        self.layers.iter().map(DecoderLayer::bytes).sum::<u64>()
            + 4 * self.output_norm.len() as u64
            + self.output.bytes()
    }

    /// Bytes of a session's KV cache for `capacity` positions.
    pub fn session_bytes(&self, capacity: usize) -> Option<u64> {
        let h = &self.hparams;
        KvCache::bytes_for(h.layers, h.kv_heads * h.head_dim, capacity)
    }

    /// Bytes one forward of `rows` positions holds at its peak besides the weights and
    /// the KV cache: activations, captured features for `captures` layers, logits for
    /// the rows `which` asks for, attention scores over a session of `capacity`.
    pub fn step_bytes(&self, rows: usize, which: Logits, captures: usize, capacity: usize) -> u64 {
        let h = &self.hparams;
        let logit_rows = match which {
            Logits::All => rows,
            Logits::Last => 1,
        } as u64;
        let per_row = self.dims().row_floats() + (captures * h.hidden) as u64;
        (rows as u64)
            .saturating_mul(per_row)
            .saturating_add(logit_rows.saturating_mul((h.vocab + h.hidden) as u64))
            .saturating_mul(4)
            .saturating_add(self.dims().score_bytes(capacity))
            .saturating_add(self.dims().gemm_scratch(rows).max(scratch_bytes(
                h.vocab,
                h.hidden,
                logit_rows as usize,
            )))
            .saturating_add(crate::memory::STEP_BOOKKEEPING)
    }

    /// A session for up to `capacity` positions (at most the context length): an empty KV
    /// cache of that size, refused with its byte count when the machine cannot hold it.
    pub fn session(self: &Arc<Self>, capacity: usize) -> Result<Qwen3Session> {
        let h = &self.hparams;
        if capacity == 0 || capacity > h.context {
            return Err(RuntimeError::Request(format!(
                "a session of {capacity} positions does not fit the target's context of {}",
                h.context
            )));
        }
        let kv = KvCache::new(
            h.layers,
            h.kv_heads * h.head_dim,
            capacity,
            &format!("the target's KV cache for {capacity} positions"),
        )?;
        Ok(Qwen3Session {
            model: Arc::clone(self),
            kv,
            len: 0,
            committed: 0,
        })
    }

    fn dims(&self) -> Dims {
        let h = &self.hparams;
        Dims {
            hidden: h.hidden,
            heads: h.heads,
            kv_heads: h.kv_heads,
            head_dim: h.head_dim,
            ffn: h.ffn,
        }
    }

    fn bytes(&self) -> &[u8] {
        (*self.bytes).as_ref()
    }

    /// Token embeddings, `tokens.len() × hidden`.
    pub fn embed(&self, tokens: &[u32], out: &mut [f32]) -> Result<()> {
        let m = self.token_embd.matrix(self.bytes());
        crate::weights::embed_rows(&m, self.hparams.vocab, tokens, out)
    }

    /// The LM head on already-normed hidden states.
    pub fn lm_head(&self, hidden: &[f32], logits: &mut [f32]) {
        gemm(&self.output.matrix(self.bytes()), hidden, logits);
    }
}

/// One sequence on a [`Qwen3`]: its KV cache and positions.
pub struct Qwen3Session {
    model: Arc<Qwen3>,
    kv: KvCache,
    len: usize,
    committed: usize,
}

impl Qwen3Session {
    /// The model.
    pub fn model(&self) -> &Arc<Qwen3> {
        &self.model
    }
}

impl Target for Qwen3Session {
    fn shape(&self) -> TargetShape {
        self.model.shape()
    }

    fn capacity(&self) -> usize {
        self.kv.capacity()
    }

    fn len(&self) -> usize {
        self.len
    }

    fn committed(&self) -> usize {
        self.committed
    }

    fn commit(&mut self) {
        self.committed = self.len;
    }

    fn rollback(&mut self, to: usize) -> Result<()> {
        check_rollback(self.committed, self.len, to)?;
        self.len = to;
        Ok(())
    }

    fn embed(&self, tokens: &[u32], out: &mut [f32]) -> Result<()> {
        self.model.embed(tokens, out)
    }

    fn lm_head(&self, hidden: &[f32], logits: &mut [f32]) {
        self.model.lm_head(hidden, logits)
    }

    fn step_bytes(&self, rows: usize, which: Logits, captures: usize) -> u64 {
        self.model
            .step_bytes(rows, which, captures, self.kv.capacity())
    }

    fn forward(&mut self, tokens: &[u32], capture: &[usize], which: Logits) -> Result<Forward> {
        let model = Arc::clone(&self.model);
        let (c, bytes) = (&model.hparams, model.bytes());
        let (n, h, hd) = (tokens.len(), c.hidden, c.head_dim);
        let p0 = self.len;
        if n == 0 {
            return Err(RuntimeError::Request(
                "a forward needs at least one token".into(),
            ));
        }
        if p0 + n > self.kv.capacity() {
            return Err(RuntimeError::Request(format!(
                "the session holds {} positions: {p0} + {n} do not fit",
                self.kv.capacity()
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
        model.embed(tokens, &mut x)?;
        let mut captured = vec![0.0f32; n * capture.len() * h];
        let (mut normed, mut q, mut k, mut v) = (
            vec![0.0f32; n * h],
            vec![0.0f32; n * qd],
            vec![0.0f32; n * kvd],
            vec![0.0f32; n * kvd],
        );
        let mut attn = vec![0.0f32; n * qd];
        let tables = rope_tables(&model.rope, p0, n, hd);
        let dims = model.dims();
        for (li, lw) in model.layers.iter().enumerate() {
            // 1. Attention input norm, projections, per-head norms and RoPE.
            norm_rows(&x, &lw.attn_norm, c.eps, &mut normed);
            lw.qkv(bytes, &normed, &mut q, &mut k, &mut v);
            norm_rope_heads(&mut q, qd, &lw.q_norm, c.eps, &model.rope, &tables);
            norm_rope_heads(&mut k, kvd, &lw.k_norm, c.eps, &model.rope, &tables);
            // 2. Keys and values into the cache.
            self.kv.write(li, p0, &k, &v);
            // 3. Causal GQA attention: position p0 + t reads keys 0..=p0 + t. Each task is
            //    one position's group of query heads sharing a KV head; tasks run in
            //    parallel, each one's arithmetic the same whatever runs beside it.
            let (kc, vc) = (self.kv.keys(li), self.kv.values(li));
            let q = &q;
            attn.par_chunks_mut(group * hd).enumerate().for_each_init(
                || Vec::with_capacity(group * (p0 + n)),
                |scores, (i, out)| {
                    let (t, kvh) = (i / c.kv_heads, i % c.kv_heads);
                    let span = Span {
                        keys: &kc[kvh * hd..],
                        values: &vc[kvh * hd..],
                        count: p0 + t + 1,
                    };
                    attend_group(
                        &q[i * group * hd..(i + 1) * group * hd],
                        hd,
                        kvd,
                        &[span],
                        scores,
                        out,
                    );
                },
            );
            lw.output_residual(bytes, &attn, &mut x);
            // 4. SwiGLU FFN.
            lw.ffn_residual(bytes, &mut x, dims, c.eps);
            // 5. Capture: the residual stream after this layer, before the final norm.
            for (slot, _) in capture.iter().enumerate().filter(|(_, &l)| l == li) {
                for t in 0..n {
                    let dst = (t * capture.len() + slot) * h;
                    captured[dst..dst + h].copy_from_slice(&x[t * h..(t + 1) * h]);
                }
            }
        }
        // 6. Final norm and the LM head on the rows asked for.
        let rows = match which {
            Logits::All => &x[..],
            Logits::Last => &x[(n - 1) * h..],
        };
        let mut normed_rows = vec![0.0f32; rows.len()];
        norm_rows(rows, &model.output_norm, c.eps, &mut normed_rows);
        let mut logits = try_zeroed(rows.len() / h * c.vocab, "the target's logits")?;
        model.lm_head(&normed_rows, &mut logits);
        self.len = p0 + n;
        Ok(Forward { logits, captured })
    }
}

//! A decoder-only transformer as llama.cpp's `qwen3` and `llama` graphs run it: token
//! embedding, pre-norm layers (`DecoderLayer`: q/k/v projections, optional per-head
//! q/k RMSNorm, a rotary embedding, causal GQA attention over a KV cache, the output
//! projection, the SwiGLU FFN, each with its residual), the final norm and the LM head.
//! The target modules ([`crate::models::qwen3`], [`crate::models::llama`]) build a
//! `Decoder` from their checked files; [`DecoderSession`] is one sequence on any of them.
//!
//! Every per-token quantity depends on that token's column only (gemm computes each column
//! alone; norms, RoPE and attention are per row), so a forward over n positions gives the
//! same bits as n single-position forwards.

use std::sync::Arc;

use dspark_contract::{SpecialTokens, TargetShape};
use dspark_quant::gemm::{gemm, scratch_bytes};
use dspark_quant::vector::round_f16;
use rayon::prelude::*;

use crate::cache::KvCache;
use crate::error::{Result, RuntimeError};
use crate::memory::try_zeroed;
use crate::nn::attention::{
    attend_f16, attend_group, attend_tiled, kv_chunks, Attention, Span, FA_TILE,
};
use crate::nn::layer::{DecoderLayer, Dims};
use crate::nn::ops::norm_rows;
use crate::nn::rope::{norm_rotate_heads, Rotary};
use crate::target::{check_rollback, Forward, Logits, Target};
use crate::weights::{ModelBytes, WeightRef};

/// A decoder's weights and settings.
pub(crate) struct Decoder {
    pub bytes: ModelBytes,
    pub dims: Dims,
    pub layers: Vec<DecoderLayer>,
    pub token_embd: WeightRef,
    pub output_norm: Vec<f32>,
    /// The LM head (`token_embd` itself when tied).
    pub output: WeightRef,
    pub rotary: Rotary,
    /// RMSNorm epsilon.
    pub eps: f32,
    /// Attention logits' scale (`1/√head size` unless the file says otherwise).
    pub kq_scale: f32,
    pub vocab: usize,
    pub context: usize,
    pub special: SpecialTokens,
}

impl Decoder {
    pub fn bytes(&self) -> &[u8] {
        (*self.bytes).as_ref()
    }

    /// Hidden size, layers and vocabulary.
    pub fn shape(&self) -> TargetShape {
        TargetShape {
            hidden: self.dims.hidden,
            layers: self.layers.len(),
            vocab: self.vocab,
        }
    }

    /// Bytes of weights one forward reads (every layer, the final norm, the LM head).
    pub fn weight_bytes(&self) -> u64 {
        self.layers.iter().map(DecoderLayer::bytes).sum::<u64>()
            + 4 * self.output_norm.len() as u64
            + self.output.bytes()
    }

    fn kv_dim(&self) -> usize {
        self.dims.kv_heads * self.dims.head_dim
    }

    /// Bytes of a session's KV cache for `capacity` positions.
    pub fn session_bytes(&self, capacity: usize) -> Option<u64> {
        KvCache::bytes_for(self.layers.len(), self.kv_dim(), capacity)
    }

    /// Bytes one forward of `rows` positions holds at its peak besides the weights and
    /// the KV cache: activations, captured features for `captures` layers, logits for
    /// the rows `which` asks for, attention scores over a session of `capacity`.
    pub fn step_bytes(&self, rows: usize, which: Logits, captures: usize, capacity: usize) -> u64 {
        let (h, vocab) = (self.dims.hidden, self.vocab);
        let logit_rows = match which {
            Logits::All => rows,
            Logits::Last => 1,
        } as u64;
        let per_row = self.dims.row_floats() + (captures * h) as u64;
        (rows as u64)
            .saturating_mul(per_row)
            .saturating_add(logit_rows.saturating_mul((vocab + h) as u64))
            .saturating_mul(4)
            .saturating_add(self.dims.score_bytes(capacity))
            .saturating_add(self.dims.gemm_scratch(rows).max(scratch_bytes(
                vocab,
                h,
                logit_rows as usize,
            )))
            .saturating_add(crate::memory::STEP_BOOKKEEPING)
    }

    /// Checks every matrix's values once, before the first forward uses them.
    pub fn check_weights(&self) -> Result<()> {
        let mats = self.layers.iter().flat_map(DecoderLayer::matrices);
        crate::weights::check_all(
            self.bytes(),
            [&self.token_embd, &self.output].into_iter().chain(mats),
        )
    }

    /// Token embeddings, `tokens.len() × hidden`.
    pub fn embed(&self, tokens: &[u32], out: &mut [f32]) -> Result<()> {
        let m = self.token_embd.matrix(self.bytes());
        crate::weights::embed_rows(&m, self.token_embd.name(), self.vocab, tokens, out)
    }

    /// The LM head on already-normed hidden states.
    pub fn lm_head(&self, hidden: &[f32], logits: &mut [f32]) {
        gemm(&self.output.matrix(self.bytes()), hidden, logits);
    }
}

/// Something built on a [`Decoder`] (a target model), so one session type serves all.
pub(crate) trait HasDecoder: Send + Sync + 'static {
    fn decoder(&self) -> &Decoder;
}

/// One sequence on a decoder model `M`: its KV cache and positions.
pub struct DecoderSession<M> {
    model: Arc<M>,
    kv: KvCache,
    len: usize,
    committed: usize,
    attention: Attention,
}

#[allow(private_bounds)]
impl<M: HasDecoder> DecoderSession<M> {
    /// A session for up to `capacity` positions (at most the context length): an empty KV
    /// cache of that size, refused with its byte count when the machine cannot hold it.
    pub(crate) fn new(model: &Arc<M>, capacity: usize, attention: Attention) -> Result<Self> {
        let d = model.decoder();
        if capacity == 0 || capacity > d.context {
            return Err(RuntimeError::Request(format!(
                "a session of {capacity} positions does not fit the target's context of {}",
                d.context
            )));
        }
        let kv = KvCache::new(
            d.layers.len(),
            d.kv_dim(),
            capacity,
            &format!("the target's KV cache for {capacity} positions"),
        )?;
        Ok(DecoderSession {
            model: Arc::clone(model),
            kv,
            len: 0,
            committed: 0,
            attention,
        })
    }

    /// The model.
    pub fn model(&self) -> &Arc<M> {
        &self.model
    }
}

#[allow(private_bounds)]
impl<M: HasDecoder> Target for DecoderSession<M> {
    fn shape(&self) -> TargetShape {
        self.model.decoder().shape()
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
        self.model.decoder().embed(tokens, out)
    }

    fn lm_head(&self, hidden: &[f32], logits: &mut [f32]) {
        self.model.decoder().lm_head(hidden, logits)
    }

    fn step_bytes(&self, rows: usize, which: Logits, captures: usize) -> u64 {
        self.model
            .decoder()
            .step_bytes(rows, which, captures, self.kv.capacity())
    }

    fn state_bytes(&self) -> u64 {
        self.kv.bytes()
    }

    fn forward(&mut self, tokens: &[u32], capture: &[usize], which: Logits) -> Result<Forward> {
        let model = Arc::clone(&self.model);
        let d = model.decoder();
        let bytes = d.bytes();
        let dims = d.dims;
        let (n, h, hd) = (tokens.len(), dims.hidden, dims.head_dim);
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
        if let Some(&bad) = capture.iter().find(|&&l| l >= d.layers.len()) {
            return Err(RuntimeError::Request(format!(
                "cannot capture layer {bad} of {}",
                d.layers.len()
            )));
        }
        d.check_weights()?;
        let (qd, kvd) = (dims.heads * hd, dims.kv_heads * hd);
        let group = dims.heads / dims.kv_heads;
        let mut x = vec![0.0f32; n * h];
        d.embed(tokens, &mut x)?;
        let mut captured = vec![0.0f32; n * capture.len() * h];
        let (mut normed, mut q, mut k, mut v) = (
            vec![0.0f32; n * h],
            vec![0.0f32; n * qd],
            vec![0.0f32; n * kvd],
            vec![0.0f32; n * kvd],
        );
        let mut attn = vec![0.0f32; n * qd];
        let tables = d.rotary.tables(p0, n);
        let f16 = self.attention == Attention::F16;
        for (li, lw) in d.layers.iter().enumerate() {
            // 1. Attention input norm, projections, per-head norms and the rotation.
            norm_rows(&x, &lw.attn_norm, d.eps, &mut normed);
            lw.qkv(bytes, &normed, &mut q, &mut k, &mut v);
            norm_rotate_heads(&mut q, qd, lw.q_norm.as_deref(), d.eps, &d.rotary, &tables);
            norm_rotate_heads(&mut k, kvd, lw.k_norm.as_deref(), d.eps, &d.rotary, &tables);
            // 2. Keys and values into the cache (as F16 values when attention is F16, as
            //    llama.cpp's F16 cache holds them).
            if f16 {
                for a in k.iter_mut().chain(v.iter_mut()) {
                    *a = round_f16(*a);
                }
            }
            self.kv.write(li, p0, &k, &v);
            // 3. Causal GQA attention: position p0 + t reads keys 0..=p0 + t. Each task is
            //    one position's group of query heads sharing a KV head; tasks run in
            //    parallel, each one's arithmetic the same whatever runs beside it.
            let (kc, vc) = (self.kv.keys(li), self.kv.values(li));
            let q = &q;
            let scale = d.kq_scale;
            if f16 && n >= FA_TILE {
                // A prompt's forward: llama.cpp's tiled flash attention.
                attn.par_chunks_mut(hd).enumerate().for_each(|(i, out)| {
                    let (t, head) = (i / dims.heads, i % dims.heads);
                    let kvh = head / group;
                    attend_tiled(
                        &q[i * hd..(i + 1) * hd],
                        &kc[kvh * hd..],
                        &vc[kvh * hd..],
                        kvd,
                        p0 + t + 1,
                        scale,
                        out,
                    );
                });
            } else if f16 {
                // Decode and verify rows (and short prompts) by the one-chunk kernel, split
                // among llama.cpp's threads as it splits a decode step's keys.
                let (prompt, threads) = (
                    dspark_quant::gemm::in_prompt_order(),
                    rayon::current_num_threads(),
                );
                attn.par_chunks_mut(hd).enumerate().for_each_init(
                    || vec![0.0f32; hd],
                    |q16, (i, out)| {
                        let (t, head) = (i / dims.heads, i % dims.heads);
                        let kvh = head / group;
                        for (a, &b) in q16.iter_mut().zip(&q[i * hd..(i + 1) * hd]) {
                            *a = round_f16(b);
                        }
                        attend_f16(
                            q16,
                            &kc[kvh * hd..],
                            &vc[kvh * hd..],
                            kvd,
                            p0 + t + 1,
                            scale,
                            out,
                            kv_chunks(n, p0 + t + 1, prompt, threads),
                        );
                    },
                );
            } else {
                attn.par_chunks_mut(group * hd).enumerate().for_each_init(
                    || Vec::with_capacity(group * (p0 + n)),
                    |scores, (i, out)| {
                        let (t, kvh) = (i / dims.kv_heads, i % dims.kv_heads);
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
                            scale,
                            scores,
                            out,
                        );
                    },
                );
            }
            lw.output_residual(bytes, &attn, &mut x);
            // 4. SwiGLU FFN. After the last layer's attention only the rows that give
            // logits go on, as in llama.cpp's graph (`inp_out_ids`): with `Logits::Last`
            // the last layer's FFN runs on the last row alone (unless the layer is
            // captured), so a prompt's last FFN products are one-column ones there too.
            let rows_on =
                if which == Logits::Last && li + 1 == d.layers.len() && !capture.contains(&li) {
                    (n - 1) * h
                } else {
                    0
                };
            lw.ffn_residual(bytes, &mut x[rows_on..], dims, d.eps);
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
        norm_rows(rows, &d.output_norm, d.eps, &mut normed_rows);
        let mut logits = try_zeroed(rows.len() / h * d.vocab, "the target's logits")?;
        d.lm_head(&normed_rows, &mut logits);
        self.len = p0 + n;
        Ok(Forward { logits, captured })
    }
}

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
use dspark_quant::vector::round_f16s;
use half::f16;
use rayon::prelude::*;

use crate::cache::{KvCache, KvRows};
use crate::error::{Result, RuntimeError};
use crate::memory::try_zeroed;
use crate::nn::attention::{
    attend_f16, attend_group, attend_tiled, kv_chunks, Attention, Span, FA_TILE,
};
use crate::nn::layer::{DecoderLayer, Dims};
use crate::nn::ops::norm_rows;
use crate::nn::rope::{norm_rotate_heads, Rotary};
use crate::stages::{Clock, Stage};
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

    /// Bytes of a session's KV cache for `capacity` positions (f32 values; a session of F16
    /// attention stores F16 ones, half as many bytes).
    pub fn session_bytes(&self, capacity: usize) -> Option<u64> {
        KvCache::bytes_for(self.layers.len(), self.kv_dim(), capacity, false)
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

    /// [`crate::target::TargetModel::pack_lm_head`].
    pub fn pack_lm_head(&self) -> Result<()> {
        self.output.pack_now(self.bytes())
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
        // The F16 attention takes keys and values as F16 (as llama.cpp's F16 cache holds
        // them): its cache stores them so, rounding each as it is written; half the bytes.
        let what = format!("the target's KV cache for {capacity} positions");
        let (layers, kv_dim) = (d.layers.len(), d.kv_dim());
        let kv = match attention {
            Attention::F16 => KvCache::new_f16(layers, kv_dim, capacity, &what)?,
            Attention::F32 => KvCache::new(layers, kv_dim, capacity, &what)?,
        };
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

    /// Refuses a forward of `tokens` capturing `capture` that this session cannot take
    /// (nothing changed): no tokens, a token outside the vocabulary, positions beyond its
    /// capacity, a layer that does not exist, weights whose values fail their check.
    fn check(&self, tokens: &[u32], capture: &[usize]) -> Result<()> {
        let d = self.model.decoder();
        let (n, p0) = (tokens.len(), self.len);
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
        d.check_weights()
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
        self.check(tokens, capture)?;
        let model = Arc::clone(&self.model);
        let mut f = forward_many(model.decoder(), &mut [self], &[tokens], capture, which)?;
        Ok(f.pop().expect("one forward per session"))
    }

    fn as_any_mut(&mut self) -> Option<&mut dyn std::any::Any> {
        Some(self)
    }
}

/// [`crate::target::TargetModel::forward_batch`] for the decoder targets: the sessions of
/// one model and one attention setting that pass their own checks run as one forward over
/// all their columns ([`forward_many`]); any other runs alone.
pub(crate) fn forward_batch<M: HasDecoder>(
    batch: &mut [(&mut dyn Target, &[u32])],
    capture: &[usize],
    which: Logits,
) -> Vec<Result<Forward>> {
    let mut out: Vec<Option<Result<Forward>>> = (0..batch.len()).map(|_| None).collect();
    let mut first: Option<(Arc<M>, Attention)> = None;
    let mut joins = vec![false; batch.len()];
    for (i, (s, tokens)) in batch.iter_mut().enumerate() {
        let Some(ds) = s
            .as_any_mut()
            .and_then(|a| a.downcast_mut::<DecoderSession<M>>())
        else {
            continue;
        };
        let same = first
            .as_ref()
            .is_none_or(|(m, a)| Arc::ptr_eq(m, &ds.model) && *a == ds.attention);
        match ds.check(tokens, capture) {
            Err(e) => out[i] = Some(Err(e)),
            Ok(()) if same => {
                first.get_or_insert_with(|| (Arc::clone(&ds.model), ds.attention));
                joins[i] = true;
            }
            Ok(()) => {}
        }
    }
    let mut sessions: Vec<&mut DecoderSession<M>> = Vec::new();
    let mut tokens: Vec<&[u32]> = Vec::new();
    let mut at = Vec::new();
    for (i, (s, t)) in batch.iter_mut().enumerate() {
        if joins[i] {
            let ds = s
                .as_any_mut()
                .and_then(|a| a.downcast_mut::<DecoderSession<M>>())
                .expect("checked above");
            sessions.push(ds);
            tokens.push(t);
            at.push(i);
        }
    }
    if let Some((model, _)) = &first {
        match forward_many(model.decoder(), &mut sessions, &tokens, capture, which) {
            Ok(fs) => {
                for (i, f) in at.into_iter().zip(fs) {
                    out[i] = Some(Ok(f));
                }
            }
            Err(e) => {
                let msg = e.to_string();
                for i in at {
                    out[i] = Some(Err(RuntimeError::Request(msg.clone())));
                }
            }
        }
    }
    drop(sessions);
    for (i, (s, t)) in batch.iter_mut().enumerate() {
        if out[i].is_none() {
            out[i] = Some(s.forward(t, capture, which));
        }
    }
    out.into_iter()
        .map(|r| r.expect("every session answered"))
        .collect()
}

/// One forward over the columns of several sessions of the decoder `d` (each checked, one
/// attention setting): each session's tokens appended at its own positions, attention over
/// its own cache, each column's arithmetic what that session's forward alone computes
/// (matrix products column by column; norms, RoPE and attention per row). A session of
/// [`FA_TILE`] rows or more keeps llama.cpp's tiled attention of a prompt; with
/// [`Logits::Last`] each session's last row gives logits.
fn forward_many<M: HasDecoder>(
    d: &Decoder,
    sessions: &mut [&mut DecoderSession<M>],
    tokens: &[&[u32]],
    capture: &[usize],
    which: Logits,
) -> Result<Vec<Forward>> {
    let bytes = d.bytes();
    let dims = d.dims;
    let (h, hd) = (dims.hidden, dims.head_dim);
    let ns: Vec<usize> = tokens.iter().map(|t| t.len()).collect();
    let starts: Vec<usize> = ns
        .iter()
        .scan(0, |acc, &k| {
            let s = *acc;
            *acc += k;
            Some(s)
        })
        .collect();
    let n: usize = ns.iter().sum();
    let p0s: Vec<usize> = sessions.iter().map(|s| s.len).collect();
    // Row r of the forward: (its session, its index there).
    let rows: Vec<(usize, usize)> = ns
        .iter()
        .enumerate()
        .flat_map(|(si, &k)| (0..k).map(move |t| (si, t)))
        .collect();
    let (qd, kvd) = (dims.heads * hd, dims.kv_heads * hd);
    let group = dims.heads / dims.kv_heads;
    let mut clock = Clock::start();
    let all: Vec<u32> = tokens.concat();
    let mut x = vec![0.0f32; n * h];
    d.embed(&all, &mut x)?;
    let mut captured = vec![0.0f32; n * capture.len() * h];
    let (mut normed, mut q, mut k, mut v) = (
        vec![0.0f32; n * h],
        vec![0.0f32; n * qd],
        vec![0.0f32; n * kvd],
        vec![0.0f32; n * kvd],
    );
    let mut attn = vec![0.0f32; n * qd];
    let tables: Vec<_> = p0s
        .iter()
        .zip(&ns)
        .map(|(&p0, &k)| d.rotary.tables(p0, k))
        .collect();
    let f16 = sessions[0].attention == Attention::F16;
    let span = |w: usize, si: usize| starts[si] * w..(starts[si] + ns[si]) * w;
    for (li, lw) in d.layers.iter().enumerate() {
        // 1. Attention input norm, projections, per-head norms and the rotation.
        norm_rows(&x, &lw.attn_norm, d.eps, &mut normed);
        clock.mark(Stage::Norms);
        lw.qkv(bytes, &normed, &mut q, &mut k, &mut v);
        clock.mark(Stage::Qkv);
        for (si, t) in tables.iter().enumerate() {
            let (qn, kn) = (lw.q_norm.as_deref(), lw.k_norm.as_deref());
            norm_rotate_heads(&mut q[span(qd, si)], qd, qn, d.eps, &d.rotary, t);
            norm_rotate_heads(&mut k[span(kvd, si)], kvd, kn, d.eps, &d.rotary, t);
        }
        // 2. Keys and values into each session's cache (an F16 session's cache rounds
        //    them to F16 as it stores them, as llama.cpp's F16 cache holds them).
        for (si, s) in sessions.iter_mut().enumerate() {
            s.kv.write(li, p0s[si], &k[span(kvd, si)], &v[span(kvd, si)]);
        }
        clock.mark(Stage::RopeKv);
        // 3. Causal GQA attention: a session's position p0 + t reads its keys 0..=p0 + t.
        //    Each task is one row's query head (F16) or one row's group of query heads
        //    sharing a KV head (f32); tasks run in parallel, each one's arithmetic the same
        //    whatever runs beside it.
        let q = &q;
        let scale = d.kq_scale;
        if f16 {
            // The sessions' caches store F16 values as F16 (`DecoderSession::new`).
            let kvs: Vec<(&[f16], &[f16])> = sessions
                .iter()
                .map(|s| match s.kv.rows(li) {
                    KvRows::F16(k, v) => (k, v),
                    KvRows::F32(..) => unreachable!("an F16 session's cache stores F16"),
                })
                .collect();
            // A prompt's rows (a session's forward of FA_TILE rows or more) by llama.cpp's
            // tiled flash attention; decode and verify rows (and short prompts) by the
            // one-chunk kernel, split among llama.cpp's threads as it splits a decode
            // step's keys.
            let (prompt, threads) = (
                dspark_quant::gemm::in_prompt_order(),
                rayon::current_num_threads(),
            );
            attn.par_chunks_mut(hd).enumerate().for_each_init(
                || vec![0.0f32; hd],
                |q16, (i, out)| {
                    let (row, head) = (i / dims.heads, i % dims.heads);
                    let (si, t) = rows[row];
                    let (kc, vc) = kvs[si];
                    let kvh = head / group;
                    let view = p0s[si] + t + 1;
                    let qi = &q[i * hd..(i + 1) * hd];
                    let (kc, vc) = (&kc[kvh * hd..], &vc[kvh * hd..]);
                    if ns[si] >= FA_TILE {
                        attend_tiled(qi, kc, vc, kvd, view, scale, out);
                        return;
                    }
                    q16.copy_from_slice(qi);
                    round_f16s(q16);
                    let chunks = kv_chunks(ns[si], view, prompt, threads);
                    attend_f16(q16, kc, vc, kvd, view, scale, out, chunks);
                },
            );
        } else {
            let kvs: Vec<(&[f32], &[f32])> = sessions
                .iter()
                .map(|s| (s.kv.keys(li), s.kv.values(li)))
                .collect();
            let longest = p0s.iter().zip(&ns).map(|(p, k)| p + k).max().unwrap_or(0);
            attn.par_chunks_mut(group * hd).enumerate().for_each_init(
                || Vec::with_capacity(group * longest),
                |scores, (i, out)| {
                    let (row, kvh) = (i / dims.kv_heads, i % dims.kv_heads);
                    let (si, t) = rows[row];
                    let (kc, vc) = kvs[si];
                    let span = Span {
                        keys: &kc[kvh * hd..],
                        values: &vc[kvh * hd..],
                        count: p0s[si] + t + 1,
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
        clock.mark(Stage::Attention);
        lw.output_residual(bytes, &attn, &mut x);
        clock.mark(Stage::Output);
        // 4. SwiGLU FFN. After the last layer's attention only the rows that give
        // logits go on, as in llama.cpp's graph (`inp_out_ids`): a single session's
        // forward with `Logits::Last` runs the last layer's FFN on its last row alone
        // (unless the layer is captured), so a prompt's last FFN products are one-column
        // ones there too. With several sessions every row goes on: each column's
        // arithmetic is the same either way.
        let rows_on = if which == Logits::Last
            && sessions.len() == 1
            && li + 1 == d.layers.len()
            && !capture.contains(&li)
        {
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
        clock.mark(Stage::Ffn);
    }
    // 6. Final norm and the LM head on the rows asked for.
    let picked: Vec<f32>;
    let rows_in: &[f32] = match which {
        Logits::All => &x[..],
        Logits::Last if sessions.len() == 1 => &x[(n - 1) * h..],
        Logits::Last => {
            picked = starts
                .iter()
                .zip(&ns)
                .flat_map(|(&s0, &k)| x[(s0 + k - 1) * h..(s0 + k) * h].iter().copied())
                .collect();
            &picked
        }
    };
    let mut normed_rows = vec![0.0f32; rows_in.len()];
    norm_rows(rows_in, &d.output_norm, d.eps, &mut normed_rows);
    let mut logits = try_zeroed(rows_in.len() / h * d.vocab, "the target's logits")?;
    clock.mark(Stage::HeadPrep);
    d.lm_head(&normed_rows, &mut logits);
    clock.mark(Stage::Head);
    for (si, s) in sessions.iter_mut().enumerate() {
        s.len = p0s[si] + ns[si];
    }
    if sessions.len() == 1 {
        return Ok(vec![Forward { logits, captured }]);
    }
    let cap = capture.len() * h;
    Ok((0..sessions.len())
        .map(|si| Forward {
            logits: match which {
                Logits::All => logits[span(d.vocab, si)].to_vec(),
                Logits::Last => logits[si * d.vocab..(si + 1) * d.vocab].to_vec(),
            },
            captured: captured[span(cap, si)].to_vec(),
        })
        .collect())
}

//! The DSpark / DFlash drafter, loaded from a drafter file the contract crate checked
//! ([`DraftFile`]: a `dflash-draft` GGUF as `dspark convert` writes it, with or without
//! the DSpark heads).
//!
//! Follows `docs/RUNTIME-MATH.md`: §1.2 fusion `c_p = RMSNorm_hidden(W_fc f_p)` of
//! each captured feature row, §1.4 decoder layers over the block `[x0, MASK, …]` whose
//! attention sees the cached context keys and the whole block (no causal mask), §1.5 a
//! context K/V cache extended as tokens are committed (block K/V are never cached), §1.7
//! both draft-row conventions, §1.8 base logits through the target's LM head (or the
//! drafter's own, when it has one), §3.1 the Markov chain seeded with the anchor (greedy,
//! or sampling each draft from its own distribution `q_k` as §3.4 has it) and §3.3 the
//! confidence head.
//!
//! [`Drafter`] holds the weights (shared through an `Arc`) and the target shape it was
//! checked to fit; [`DraftSession`] one sequence's context cache.

use std::sync::Arc;
use std::time::{Duration, Instant};

use dspark_contract::dflash_draft::DraftHparams;
use dspark_contract::{DraftFile, TargetShape};
use dspark_quant::gemm::{gemm, scratch_bytes};
use rayon::prelude::*;
use serde::Serialize;

use crate::cache::KvCache;
use crate::error::{Result, RuntimeError};
use crate::memory::try_zeroed;
use crate::nn::attention::{attend_group, Span};
use crate::nn::layer::{DecoderLayer, Dims};
use crate::nn::ops::norm_rows;
use crate::nn::rope::{norm_rope_heads, rope_tables, Rope, Yarn};
use crate::sampling::{Dist, Sampler, Stream};
use crate::target::Target;
use crate::weights::{vector, ModelBytes, WeightRef};

/// The DSpark heads.
struct Markov {
    /// `[V rows × R]`: embedding of the previous token.
    w1: WeightRef,
    /// `[V rows × R]`: rank-R map to logits.
    w2: WeightRef,
}

/// The confidence head: weight (`hidden`, or `hidden + R` with the Markov embedding) and
/// bias.
struct Confidence {
    weight: Vec<f32>,
    bias: f32,
}

/// One drafted block.
#[derive(Clone, Debug, PartialEq)]
pub struct Draft {
    /// Drafted tokens x_1..x_γ.
    pub tokens: Vec<u32>,
    /// Per draft, the confidence head's acceptance probability (empty without the head).
    pub confidences: Vec<f32>,
    /// Per draft, the distribution it was sampled from (empty when drafted greedily).
    pub proposals: Vec<Dist>,
    /// Where the drafting time went.
    pub times: DraftTimes,
}

/// Wall time of the phases of one [`DraftSession::draft`] call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct DraftTimes {
    /// Embedding, decoder layers and the final norm.
    pub layers: Duration,
    /// The LM head on the draft rows.
    pub lm_head: Duration,
    /// Markov chain, confidence head and argmax.
    pub heads: Duration,
}

/// A drafter's weights, checked to fit one target shape.
pub struct Drafter {
    bytes: ModelBytes,
    hparams: DraftHparams,
    target: TargetShape,
    fc: WeightRef,
    hidden_norm: Vec<f32>,
    output_norm: Vec<f32>,
    layers: Vec<DecoderLayer>,
    markov: Option<Markov>,
    confidence: Option<Confidence>,
    token_embd: Option<WeightRef>,
    output: Option<WeightRef>,
    rope: Rope,
}

impl Drafter {
    /// Loads the weights `file` describes (the contract's proof for a GGUF parsed from
    /// `bytes`), after checking that the drafter fits `target` (`dspark_contract::fit`).
    pub fn load(bytes: ModelBytes, file: &DraftFile<'_>, target: &TargetShape) -> Result<Drafter> {
        dspark_contract::fit::check(file, target)?;
        let b: &[u8] = (*bytes).as_ref();
        let layout = crate::weights::Layout::for_drafter(b.len() as u64);
        let hparams = file.hparams().clone();
        let layers = file
            .layers()
            .iter()
            .map(|l| DecoderLayer::load(b, l, layout))
            .collect::<Result<Vec<_>>>()?;
        let markov = match file.markov() {
            Some(m) => Some(Markov {
                w1: WeightRef::locate(b, &m.w1, layout)?,
                w2: WeightRef::locate(b, &m.w2, layout)?,
            }),
            None => None,
        };
        let confidence = match file.confidence() {
            Some(c) => Some(Confidence {
                weight: row_vector(&c.weight)?,
                bias: vector(&c.bias)?[0],
            }),
            None => None,
        };
        let own = |t: Option<&dspark_contract::TensorRef<'_>>| {
            t.map(|t| WeightRef::locate(b, t, layout)).transpose()
        };
        let yarn = hparams.yarn.map(|y| Yarn {
            factor: f64::from(y.factor),
            original_context: f64::from(y.original_context),
            beta_fast: f64::from(y.beta_fast),
            beta_slow: f64::from(y.beta_slow),
            attention_factor: y.attention_factor.map(f64::from),
        });
        let fc = WeightRef::locate(b, file.fc(), layout)?;
        let (token_embd, output) = (own(file.token_embd())?, own(file.output())?);
        // A drafter is small beside its target: its values are checked at load.
        crate::weights::check_all(
            b,
            layers
                .iter()
                .flat_map(DecoderLayer::matrices)
                .chain([&fc])
                .chain(markov.iter().flat_map(|m| [&m.w1, &m.w2]))
                .chain(token_embd.iter())
                .chain(output.iter()),
        )?;
        Ok(Drafter {
            fc,
            hidden_norm: vector(file.hidden_norm())?,
            output_norm: vector(file.output_norm())?,
            token_embd,
            output,
            rope: Rope::new(hparams.head_dim, f64::from(hparams.rope_base), yarn),
            target: *target,
            layers,
            markov,
            confidence,
            hparams,
            bytes,
        })
    }

    /// Parses `bytes`, checks them against their drafter layout's contract with this
    /// build's kernels and against `target`, and loads them.
    pub fn open(bytes: ModelBytes, target: &TargetShape) -> Result<Drafter> {
        let file = dspark_gguf::GgufFile::parse((*bytes).as_ref())?;
        let checked = dspark_contract::drafter(&file, &dspark_quant::matrix_types())?;
        Drafter::load(bytes.clone(), &checked, target)
    }

    /// Hyper-parameters.
    pub fn hparams(&self) -> &DraftHparams {
        &self.hparams
    }

    /// The target shape it was checked against.
    pub fn target_shape(&self) -> TargetShape {
        self.target
    }

    /// Drafts per block: B (anchor-row convention) or B − 1.
    pub fn drafts_per_block(&self) -> usize {
        if self.hparams.sample_from_anchor {
            self.hparams.block_size
        } else {
            self.hparams.block_size - 1
        }
    }

    /// Whether the drafter borrows its target's LM head (it has no `output` of its own).
    pub fn borrows_lm_head(&self) -> bool {
        self.output.is_none()
    }

    /// Whether it has the Markov head.
    pub fn has_markov(&self) -> bool {
        self.markov.is_some()
    }

    /// Bytes of the decoder layers and the final norm (what a block streams besides the
    /// heads and the LM head).
    pub fn layer_bytes(&self) -> u64 {
        self.layers.iter().map(DecoderLayer::bytes).sum::<u64>() + 4 * self.output_norm.len() as u64
    }

    /// Bytes of the Markov head's W2 (read once per draft), 0 without the head.
    pub fn markov_w2_bytes(&self) -> u64 {
        self.markov.as_ref().map_or(0, |m| m.w2.bytes())
    }

    /// Bytes of a session's context cache for `capacity` positions.
    pub fn session_bytes(&self, capacity: usize) -> Option<u64> {
        let h = &self.hparams;
        KvCache::bytes_for(h.layers, h.kv_heads * h.head_dim, capacity, false)
    }

    /// Bytes one draft holds at its peak besides the weights and the context cache, for a
    /// session of `capacity` positions: the block's activations, its logits, the Markov
    /// bias row, attention scores over the context and the block.
    pub fn step_bytes(&self, capacity: usize) -> u64 {
        let h = &self.hparams;
        let b = h.block_size as u64;
        let vocab = self.target.vocab as u64;
        b.saturating_mul(self.dims().row_floats())
            .saturating_add((b + 1).saturating_mul(vocab))
            .saturating_mul(4)
            .saturating_add(self.dims().score_bytes(capacity + h.block_size))
            .saturating_add(self.dims().gemm_scratch(h.block_size).max(scratch_bytes(
                self.target.vocab,
                h.hidden,
                h.block_size,
            )))
            .saturating_add(crate::memory::STEP_BOOKKEEPING)
    }

    /// A session for up to `capacity` context positions, refused with its byte count when
    /// the machine cannot hold it.
    pub fn session(self: &Arc<Self>, capacity: usize) -> Result<DraftSession> {
        let h = &self.hparams;
        let cache = KvCache::new(
            h.layers,
            h.kv_heads * h.head_dim,
            capacity,
            &format!("the drafter's context cache for {capacity} positions"),
        )?;
        Ok(DraftSession {
            model: Arc::clone(self),
            cache,
            len: 0,
            markov_bias: true,
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
}

/// A one-row tensor's values as f32: F32 vectors as they are, a one-row matrix of any
/// kernel type (llama.cpp's `conf_proj.weight` is written at the output type) decoded;
/// refused when a value is not finite.
fn row_vector(t: &dspark_contract::TensorRef<'_>) -> Result<Vec<f32>> {
    if t.ty == dspark_gguf::GgmlType::F32 {
        return vector(t);
    }
    let m = dspark_quant::gemm::Matrix::new(t.ty, t.rows, t.cols, t.data).ok_or_else(|| {
        RuntimeError::tensor(
            t.name,
            format!("{} rows of {} cannot be decoded", t.ty, t.cols),
        )
    })?;
    let mut v = vec![0.0f32; t.cols];
    m.row_f32(0, &mut v);
    match v.iter().position(|x| !x.is_finite()) {
        Some(i) => Err(RuntimeError::tensor(
            t.name,
            format!("value {i} is not finite"),
        )),
        None => Ok(v),
    }
}

/// One sequence's drafter state: the context K/V of every committed position.
pub struct DraftSession {
    model: Arc<Drafter>,
    cache: KvCache,
    len: usize,
    markov_bias: bool,
}

impl DraftSession {
    /// Whether drafts add the Markov head's bias to the base logits (the default; off
    /// for ablations, which then draft from the base logits alone; the confidence head
    /// still reads the Markov embedding of the previous draft).
    pub fn set_markov_bias(&mut self, on: bool) {
        self.markov_bias = on;
    }

    /// The drafter.
    pub fn model(&self) -> &Arc<Drafter> {
        &self.model
    }

    /// Context positions cached.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when no context is cached.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Positions it can hold.
    pub fn capacity(&self) -> usize {
        self.cache.capacity()
    }

    /// Forgets context beyond `len` positions.
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    /// Appends context rows: `features` holds n rows of captured target features
    /// (`captured layers × hidden` each, the target's capture order), for positions
    /// `len()..len()+n`. Each layer caches their keys and values.
    pub fn add_context(&mut self, features: &[f32]) -> Result<()> {
        dspark_quant::gemm::own_order(|| self.add_context_own(features))
    }

    /// [`DraftSession::add_context`] inside [`dspark_quant::gemm::own_order`].
    fn add_context_own(&mut self, features: &[f32]) -> Result<()> {
        let model = Arc::clone(&self.model);
        let (c, bytes) = (&model.hparams, model.bytes());
        let width = c.target_layer_ids.len() * c.hidden;
        if !features.len().is_multiple_of(width) {
            return Err(RuntimeError::Request(format!(
                "{} feature values are not whole rows of {width}",
                features.len()
            )));
        }
        let n = features.len() / width;
        if self.len + n > self.cache.capacity() {
            return Err(RuntimeError::Request(format!(
                "the drafter session holds {} positions: {} + {n} do not fit",
                self.cache.capacity(),
                self.len
            )));
        }
        let (h, kvd) = (c.hidden, c.kv_heads * c.head_dim);
        // 1. Fusion: c_p = RMSNorm_hidden(W_fc f_p).
        let mut fused = vec![0.0f32; n * h];
        gemm(&model.fc.matrix(bytes), features, &mut fused);
        let mut ctx = vec![0.0f32; n * h];
        norm_rows(&fused, &model.hidden_norm, c.eps, &mut ctx);
        // 2. Per layer: K/V of the context rows (no input norm), k_norm + RoPE, cached.
        let (mut k, mut v) = (vec![0.0f32; n * kvd], vec![0.0f32; n * kvd]);
        let tables = rope_tables(&model.rope, self.len, n, c.head_dim);
        for (li, layer) in model.layers.iter().enumerate() {
            gemm(&layer.k.matrix(bytes), &ctx, &mut k);
            gemm(&layer.v.matrix(bytes), &ctx, &mut v);
            norm_rope_heads(
                &mut k,
                kvd,
                layer.k_norm.as_deref(),
                c.eps,
                &model.rope,
                &tables,
            );
            self.cache.write(li, self.len, &k, &v);
        }
        self.len += n;
        Ok(())
    }

    /// Drafts one block after the cached context greedily: the anchor `x0` at position
    /// `len()`, mask tokens after it. Returns γ = B drafts (anchor-row convention) or
    /// B − 1. `target` lends its embedding and LM head unless the drafter has its own; it
    /// must have the shape the drafter was checked against.
    pub fn draft(&self, target: &dyn Target, anchor: u32) -> Result<Draft> {
        self.draft_with(target, anchor, None)
    }

    /// [`DraftSession::draft`], the Markov chain sampling each draft from its own
    /// distribution `q_k` as `sampler`'s settings make it of `U_k + B_k` (§3.4), with the
    /// uniform keyed by the anchor's position and the depth; the `q_k` are returned in
    /// [`Draft::proposals`]. Greedy when `sampler` is `None` or greedy.
    pub fn draft_sampled(
        &self,
        target: &dyn Target,
        anchor: u32,
        sampler: &mut Sampler,
    ) -> Result<Draft> {
        self.draft_with(target, anchor, Some(sampler))
    }

    /// A drafter's products take dspark's own order where its matrices (and the target's
    /// LM head it borrows) are packed ([`dspark_quant::gemm::own_order`]): its proposals
    /// decide how fast a run is, never what it outputs.
    fn draft_with(
        &self,
        target: &dyn Target,
        anchor: u32,
        sampler: Option<&mut Sampler>,
    ) -> Result<Draft> {
        dspark_quant::gemm::own_order(|| self.draft_own(target, anchor, sampler))
    }

    fn draft_own(
        &self,
        target: &dyn Target,
        anchor: u32,
        sampler: Option<&mut Sampler>,
    ) -> Result<Draft> {
        let mut sampler = sampler.filter(|s| !s.settings().is_greedy());
        let model = &*self.model;
        let (c, bytes) = (&model.hparams, model.bytes());
        if target.shape() != model.target {
            return Err(RuntimeError::Request(format!(
                "the drafter was checked against a target of {:?}, not {:?}",
                model.target,
                target.shape()
            )));
        }
        let (b, h, hd) = (c.block_size, c.hidden, c.head_dim);
        let (qd, kvd, group) = (c.heads * hd, c.kv_heads * hd, c.heads / c.kv_heads);
        let dims = model.dims();
        let started = Instant::now();
        // 1. The block [x0, MASK, …], embedded.
        let mut tokens = vec![c.mask_token_id; b];
        tokens[0] = anchor;
        let mut z = vec![0.0f32; b * h];
        match &model.token_embd {
            Some(e) => {
                let m = e.matrix(bytes);
                if let Some(&t) = tokens.iter().find(|&&t| t as usize >= m.rows) {
                    return Err(RuntimeError::Request(format!(
                        "token {t} is outside the drafter's embedding of {} rows",
                        m.rows
                    )));
                }
                for (&t, row) in tokens.iter().zip(z.chunks_exact_mut(h)) {
                    m.row_f32(t as usize, row);
                }
            }
            None => target.embed(&tokens, &mut z)?,
        }
        let (mut u, mut q, mut k, mut v) = (
            vec![0.0f32; b * h],
            vec![0.0f32; b * qd],
            vec![0.0f32; b * kvd],
            vec![0.0f32; b * kvd],
        );
        let mut attn = vec![0.0f32; b * qd];
        let tables = rope_tables(&model.rope, self.len, b, hd);
        let scale = 1.0 / (hd as f32).sqrt();
        // 2. Decoder layers: keys are the cached context (positions 0..len), then the
        //    whole block (no mask). Each task is one block row's group of query heads
        //    sharing a KV head.
        for (li, lw) in model.layers.iter().enumerate() {
            norm_rows(&z, &lw.attn_norm, c.eps, &mut u);
            lw.qkv(bytes, &u, &mut q, &mut k, &mut v);
            norm_rope_heads(
                &mut q,
                qd,
                lw.q_norm.as_deref(),
                c.eps,
                &model.rope,
                &tables,
            );
            norm_rope_heads(
                &mut k,
                kvd,
                lw.k_norm.as_deref(),
                c.eps,
                &model.rope,
                &tables,
            );
            let (kc, vc) = (self.cache.keys(li), self.cache.values(li));
            let (k, v, q) = (&k, &v, &q);
            let len = self.len;
            attn.par_chunks_mut(group * hd).enumerate().for_each_init(
                || Vec::with_capacity(group * (len + b)),
                |scores, (i, out)| {
                    let kvh = i % c.kv_heads;
                    let spans = [
                        Span {
                            keys: &kc[kvh * hd..],
                            values: &vc[kvh * hd..],
                            count: len,
                        },
                        Span {
                            keys: &k[kvh * hd..],
                            values: &v[kvh * hd..],
                            count: b,
                        },
                    ];
                    let qs = &q[i * group * hd..(i + 1) * group * hd];
                    attend_group(qs, hd, kvd, &spans, scale, scores, out);
                },
            );
            lw.output_residual(bytes, &attn, &mut z);
            lw.ffn_residual(bytes, &mut z, dims, c.eps);
        }
        // 3. Final norm; the rows that predict drafts (§1.7).
        norm_rows(&z, &model.output_norm, c.eps, &mut u);
        let first = if c.sample_from_anchor { 0 } else { 1 };
        let hidden = &u[first * h..];
        let vocab = model.target.vocab;
        let rows = b - first;
        let mut logits = try_zeroed(rows * vocab, "the drafter's logits")?;
        let layers_done = Instant::now();
        // 4. Base logits through the LM head.
        match &model.output {
            Some(o) => gemm(&o.matrix(bytes), hidden, &mut logits),
            None => target.lm_head(hidden, &mut logits),
        }
        let head_done = Instant::now();
        // 5. Markov chain (greedy or sampled), seeded with the anchor; confidence per draft.
        let mut drafted = Vec::with_capacity(rows);
        let mut confidences = Vec::new();
        let mut proposals = Vec::new();
        let position = self.len;
        let mut prev = anchor;
        let biased = model.markov.is_some() && self.markov_bias;
        let mut bias = vec![0.0f32; if biased { vocab } else { 0 }];
        let mut e = Vec::new();
        let markov = model
            .markov
            .as_ref()
            .map(|m| (m.w1.matrix(bytes), m.w2.matrix(bytes)));
        for (i, base) in logits.chunks_exact(vocab).enumerate() {
            let hk = &hidden[i * h..(i + 1) * h];
            if let Some((w1, w2)) = &markov {
                // The contract made the Markov vocabulary the target's, so `prev` (an
                // anchor from the target or a draft from these logits) is a row of W1.
                e.resize(w1.cols, 0.0);
                w1.row_f32(prev as usize, &mut e);
                if biased {
                    // Seven passes over W2 (45 MB for K3's vocabulary and rank 256, more
                    // than a 32 MB L3): every other one from its last rows, so that each
                    // starts on the rows the cache still holds from the one before.
                    if i % 2 == 1 {
                        dspark_quant::gemm::last_rows_first(|| gemm(w2, &e, &mut bias));
                    } else {
                        gemm(w2, &e, &mut bias);
                    }
                }
            }
            if let Some(conf) = &model.confidence {
                let mut s = conf.bias
                    + conf.weight[..h]
                        .iter()
                        .zip(hk)
                        .map(|(a, b)| a * b)
                        .sum::<f32>();
                if conf.weight.len() > h {
                    s += conf.weight[h..]
                        .iter()
                        .zip(&e)
                        .map(|(a, b)| a * b)
                        .sum::<f32>();
                }
                confidences.push(1.0 / (1.0 + (-s).exp()));
            }
            // base + bias, in the bias's storage (the next draft's W2 pass overwrites it).
            let values: &[f32] = if bias.is_empty() {
                base
            } else {
                for (b, &a) in bias.iter_mut().zip(base) {
                    *b += a;
                }
                &bias
            };
            let next = match sampler.as_deref_mut() {
                Some(sampler) => {
                    let q = sampler.dist(values, &|| {
                        format!(
                            "the drafter's logits for draft {} at position {position}",
                            i + 1
                        )
                    })?;
                    let x = q.sample(sampler.uniform(Stream::Draft, position, i));
                    proposals.push(q);
                    x
                }
                // argmax of base + bias, lowest index on ties (NaN never wins).
                None => crate::generate::argmax(values),
            };
            drafted.push(next);
            prev = next;
        }
        Ok(Draft {
            tokens: drafted,
            confidences,
            proposals,
            times: DraftTimes {
                layers: layers_done - started,
                lm_head: head_done - layers_done,
                heads: head_done.elapsed(),
            },
        })
    }
}

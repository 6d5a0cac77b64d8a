//! Kimi K3 as a speculative-decoding target, loaded from a GGUF in llama.cpp's `kimi-k3`
//! layout as the contract crate checked it ([`KimiK3File`]): KDA and absorbed-MLA token
//! mixers, dense SiTU and latent-MoE FFNs, cross-layer residual attention
//! (`docs/KIMI-K3.md#forward-pass`).
//!
//! # Forward
//! Per layer l, with `P` the running residual and `C` the checkpoint stack:
//! ```text
//! a = ResMix(P; attn_res_score_l)        (P itself with no residual blocks)
//! if l % A == 0: push P onto C           (the raw layer input)
//! y = KDA_l or MLA_l (RMSNorm(a)·attn_norm)
//! P = (pushed ? y : P + y)
//! P += FFN_l(RMSNorm(ResMix(P; ffn_res_score_l))·ffn_norm)
//! ```
//! then `o = ResMix(P; output_res_score)` and `logits = output · RMSNorm(o)·output_norm`.
//!
//! # Taps
//! The drafter is fed, for a captured layer l, **the stream layer l + 1 consumes**: its
//! attention mix `ResMix(P; attn_res_score_{l+1})` over the stack as that layer sees it
//! (the output mix `o` after the last layer), before its norm — not `P`, which inside a
//! residual block is only the block's partial sum (it restarts at every checkpoint
//! layer). That is K3's counterpart of a pre-norm decoder's "residual stream after layer
//! l" (`docs/RUNTIME-MATH.md` §1.1; `docs/KIMI-K3.md` gives the reasoning). With
//! `attn_res.block_size = 0` the mix is the identity and the tap is `P`, the plain
//! residual.
//!
//! # Batched = sequential
//! Every matrix product is column-independent (`dspark_quant::gemm`), norms, mixes and
//! routing are per row, MLA attention is per (position, head) over the cache, and the
//! KDA recurrence runs one position after another with the same per-step code whatever
//! the batch ([`kda`]): a verify forward of n positions gives the bits n single-position
//! forwards give.
//!
//! # State and rollback
//! MLA layers cache one `[latent ; rope part]` row per position (f32); a rollback moves
//! the length. KDA layers keep their state as the [`kda`] module describes, undone by
//! snapshots (A) or a recurrence-only replay (C), chosen per forward with
//! [`Target::set_rollback`].

pub mod kda;
mod moe;

use std::sync::Arc;

use dspark_contract::kimi_k3::{FfnRefs, KimiK3Hparams, MixerRefs, MlaQuery, SituRefs};
use dspark_contract::{KimiK3File, SpecialTokens, TargetShape, TensorRef};
use dspark_quant::gemm::{gemm, gemm_local_plain, gemm_many, scratch_bytes, Matrix};
use dspark_quant::kernels;
use rayon::prelude::*;

use crate::error::{Result, RuntimeError};
use crate::memory::{try_zeroed, zeroed};
pub use crate::nn::attention::Attention;
use crate::nn::attention::{attend_f16, attend_tiled, kv_chunks, FA_TILE};
use crate::nn::ops::{inv_rms, norm_rows, rms_norm, sigmoid, softmax, softplus, swiglu};
use crate::target::{check_rollback, Forward, Logits, Routed, Target};
use crate::weights::{vector, Layout, ModelBytes, ModelData, WeightRef};

pub use crate::target::Rollback;
use kda::{Dest, KdaDims, KdaState};
use moe::{Moe, Routing, Situ, SituFfn};

/// `ys[i] = ws[i] · x`, in one parallel pass when the matrices share type and input size.
pub(crate) fn multi_gemm(bytes: &[u8], ws: &[&WeightRef], x: &[f32], ys: &mut [&mut [f32]]) {
    let ms: Vec<Matrix<'_>> = ws.iter().map(|w| w.matrix(bytes)).collect();
    if ms.iter().all(|m| m.ty == ms[0].ty && m.cols == ms[0].cols) {
        let refs: Vec<&Matrix<'_>> = ms.iter().collect();
        gemm_many(&refs, x, ys);
    } else {
        for (m, y) in ms.iter().zip(ys.iter_mut()) {
            gemm(m, x, y);
        }
    }
}

/// Rows `part · rows .. (part + 1) · rows` of a stacked tensor (an expert, a head) as a
/// tensor of its own.
/// Every tensor [`KimiK3::load`] decodes into a vector: norms, residual scores, conv
/// kernels, KDA's `ssm_a` and `dt_bias`, the routing bias.
fn vector_refs<'a, 'f>(file: &'a KimiK3File<'f>) -> Vec<&'a TensorRef<'f>> {
    let mut v = vec![file.output_norm()];
    v.extend(file.output_res_score());
    for l in file.layers() {
        v.extend([&l.attn_norm, &l.ffn_norm]);
        v.extend(l.attn_res_score.iter().chain(l.ffn_res_score.iter()));
        match &l.mixer {
            MixerRefs::Kda(k) => {
                v.extend([&k.conv_q, &k.conv_k, &k.conv_v, &k.a, &k.dt_bias, &k.norm])
            }
            MixerRefs::Mla(a) => {
                v.push(&a.kv_a_norm);
                if let MlaQuery::Lora { norm, .. } = &a.q {
                    v.push(norm);
                }
            }
        }
        if let FfnRefs::Moe(e) = &l.ffn {
            v.push(&e.probs_bias);
            v.extend(e.routed_norm.iter());
        }
    }
    v
}

/// Names the bytes of `refs` (tensors of a file parsed from `b`) to `data`, in one call.
fn read_ahead_refs(data: &dyn ModelData, b: &[u8], refs: &[&TensorRef<'_>]) {
    let base = b.as_ptr() as usize;
    let ranges = refs
        .iter()
        .filter_map(|t| {
            let start = (t.data.as_ptr() as usize).checked_sub(base)?;
            let end = start.checked_add(t.data.len())?;
            (end <= b.len()).then_some(start..end)
        })
        .collect();
    crate::weights::read_ahead_ranges(data, ranges);
}

fn slice<'f>(t: &TensorRef<'f>, parts: usize, part: usize) -> TensorRef<'f> {
    let rows = t.rows / parts;
    let row_bytes = t.data.len() / t.rows;
    TensorRef {
        rows,
        data: &t.data[part * rows * row_bytes..(part + 1) * rows * row_bytes],
        ..*t
    }
}

/// A small matrix read elementwise (conv kernels), decoded to f32 rows; refused when a
/// value is not finite.
fn dense(t: &TensorRef<'_>) -> Result<Vec<f32>> {
    let m = Matrix::new(t.ty, t.rows, t.cols, t.data)
        .ok_or_else(|| RuntimeError::tensor(t.name, format!("type {} has no kernel", t.ty)))?;
    let mut out = vec![0.0f32; t.rows * t.cols];
    for (r, o) in out.chunks_exact_mut(t.cols).enumerate() {
        m.row_f32(r, o);
    }
    match out.iter().position(|x| !x.is_finite()) {
        Some(i) => Err(RuntimeError::tensor(
            t.name,
            format!("value {i} is not finite"),
        )),
        None => Ok(out),
    }
}

/// Channel-major conv kernels (`[c · k + τ]`) as tap-major (`[τ · channels + c]`).
fn tap_major(w: Vec<f32>, k: usize) -> Vec<f32> {
    let channels = w.len() / k;
    (0..k * channels)
        .map(|i| w[(i % channels) * k + i / channels])
        .collect()
}

/// A KDA layer's weights.
struct Kda {
    q: WeightRef,
    k: WeightRef,
    v: WeightRef,
    /// Conv kernels tap-major, `[τ · d_in + c]` (the file's `{K, 1, d_in}` transposed,
    /// so a tap's weights for every channel are contiguous), for q, k, v.
    conv: [Vec<f32>; 3],
    f_a: WeightRef,
    f_b: WeightRef,
    beta: WeightRef,
    /// `ssm_a` = −exp(A_log) per head.
    a: Vec<f32>,
    dt_bias: Vec<f32>,
    g: WeightRef,
    norm: Vec<f32>,
    output: WeightRef,
}

/// An MLA layer's query.
enum Query {
    Plain(WeightRef),
    Lora {
        a: WeightRef,
        norm: Vec<f32>,
        b: WeightRef,
    },
}

/// An MLA layer's weights.
struct Mla {
    q: Query,
    kv_a: WeightRef,
    kv_norm: Vec<f32>,
    /// Per head: `r_kv × d_n` (q_nope → latent).
    k_b: Vec<WeightRef>,
    /// Per head: `d_v × r_kv` (latent context → value head).
    v_b: Vec<WeightRef>,
    gate: Option<WeightRef>,
    output: WeightRef,
}

enum Mixer {
    Kda(Box<Kda>),
    Mla(Box<Mla>),
}

enum Ffn {
    Dense(SituFfn),
    Moe(Box<Moe>),
}

impl Mixer {
    /// Its matrices.
    fn matrices(&self) -> Vec<&WeightRef> {
        match self {
            Mixer::Kda(k) => vec![&k.q, &k.k, &k.v, &k.f_a, &k.f_b, &k.beta, &k.g, &k.output],
            Mixer::Mla(a) => {
                let mut v: Vec<&WeightRef> = match &a.q {
                    Query::Plain(q) => vec![q],
                    Query::Lora { a, b, .. } => vec![a, b],
                };
                v.extend([&a.kv_a, &a.output]);
                v.extend(a.k_b.iter().chain(&a.v_b).chain(&a.gate));
                v
            }
        }
    }
}

struct Layer {
    attn_norm: Vec<f32>,
    ffn_norm: Vec<f32>,
    attn_res: Option<Vec<f32>>,
    ffn_res: Option<Vec<f32>>,
    mixer: Mixer,
    ffn: Ffn,
}

/// A Kimi K3 model's weights.
pub struct KimiK3 {
    bytes: ModelBytes,
    hparams: KimiK3Hparams,
    special: SpecialTokens,
    token_embd: WeightRef,
    output_norm: Vec<f32>,
    output: WeightRef,
    output_res: Option<Vec<f32>>,
    layers: Vec<Layer>,
    situ: Situ,
    routing: Routing,
    /// Set once [`KimiK3::check_dense`] has passed.
    dense_checked: std::sync::OnceLock<()>,
}

fn situ_ffn(b: &[u8], t: &SituRefs<'_>, layout: Layout) -> Result<SituFfn> {
    Ok(SituFfn {
        gate: WeightRef::locate(b, &t.gate, layout)?,
        up: WeightRef::locate(b, &t.up, layout)?,
        down: WeightRef::locate(b, &t.down, layout)?,
    })
}

impl KimiK3 {
    /// Loads the weights `file` describes; `file` must be the contract's proof for a GGUF
    /// parsed from `bytes`.
    pub fn load(bytes: ModelBytes, file: &KimiK3File<'_>) -> Result<KimiK3> {
        let b: &[u8] = (*bytes).as_ref();
        let hp = file.hparams().clone();
        // The vectors decoded below lie between the matrices all over the file: named
        // first, a mapped file reads their pages together instead of faulting each in
        // with the kernel's read-around (megabytes per vector on a cold file).
        read_ahead_refs(&*bytes, b, &vector_refs(file));
        let layout = crate::weights::Layout::for_file(b.len() as u64);
        let m = |t: &TensorRef<'_>| WeightRef::locate(b, t, layout);
        let mut layers = Vec::with_capacity(hp.layers);
        for l in file.layers() {
            let mixer = match &l.mixer {
                MixerRefs::Kda(k) => Mixer::Kda(Box::new(Kda {
                    q: m(&k.q)?,
                    k: m(&k.k)?,
                    v: m(&k.v)?,
                    conv: [
                        tap_major(dense(&k.conv_q)?, hp.conv_kernel),
                        tap_major(dense(&k.conv_k)?, hp.conv_kernel),
                        tap_major(dense(&k.conv_v)?, hp.conv_kernel),
                    ],
                    f_a: m(&k.f_a)?,
                    f_b: m(&k.f_b)?,
                    beta: m(&k.beta)?,
                    a: vector(&k.a)?,
                    dt_bias: vector(&k.dt_bias)?,
                    g: m(&k.g)?,
                    norm: vector(&k.norm)?,
                    output: m(&k.output)?,
                })),
                MixerRefs::Mla(a) => Mixer::Mla(Box::new(Mla {
                    q: match &a.q {
                        MlaQuery::Plain(q) => Query::Plain(m(q)?),
                        MlaQuery::Lora { a, norm, b } => Query::Lora {
                            a: m(a)?,
                            norm: vector(norm)?,
                            b: m(b)?,
                        },
                    },
                    kv_a: m(&a.kv_a_mqa)?,
                    kv_norm: vector(&a.kv_a_norm)?,
                    // 3-D tensors in plain products: llama.cpp never re-lays them.
                    k_b: (0..hp.heads)
                        .map(|h| m(&slice(&a.k_b, hp.heads, h)).map(WeightRef::not_relaid))
                        .collect::<Result<_>>()?,
                    v_b: (0..hp.heads)
                        .map(|h| m(&slice(&a.v_b, hp.heads, h)).map(WeightRef::not_relaid))
                        .collect::<Result<_>>()?,
                    gate: a.gate.as_ref().map(&m).transpose()?,
                    output: m(&a.output)?,
                })),
            };
            let ffn = match &l.ffn {
                FfnRefs::Dense(d) => Ffn::Dense(situ_ffn(b, d, layout)?),
                FfnRefs::Moe(e) => {
                    let n = hp.experts;
                    let experts = (0..n)
                        .map(|i| {
                            let part = |t: &TensorRef<'_>| {
                                m(&slice(t, n, i))
                                    .map(|w| w.named(format!("{} (expert {i})", t.name)))
                            };
                            Ok(SituFfn {
                                gate: part(&e.gate_exps)?,
                                up: part(&e.up_exps)?,
                                down: part(&e.down_exps)?,
                            })
                        })
                        .collect::<Result<_>>()?;
                    Ffn::Moe(Box::new(Moe {
                        router: m(&e.router)?,
                        probs_bias: vector(&e.probs_bias)?,
                        experts,
                        routed_down: e.routed_down.as_ref().map(&m).transpose()?,
                        routed_up: e.routed_up.as_ref().map(&m).transpose()?,
                        routed_norm: e.routed_norm.as_ref().map(vector).transpose()?,
                        shared: e
                            .shared
                            .as_ref()
                            .map(|s| situ_ffn(b, s, layout))
                            .transpose()?,
                    }))
                }
            };
            layers.push(Layer {
                attn_norm: vector(&l.attn_norm)?,
                ffn_norm: vector(&l.ffn_norm)?,
                attn_res: l.attn_res_score.as_ref().map(vector).transpose()?,
                ffn_res: l.ffn_res_score.as_ref().map(vector).transpose()?,
                mixer,
                ffn,
            });
        }
        Ok(KimiK3 {
            token_embd: m(file.token_embd())?,
            output_norm: vector(file.output_norm())?,
            output: m(file.output())?,
            output_res: file.output_res_score().map(vector).transpose()?,
            special: file.special_tokens(),
            situ: Situ {
                beta: hp.situ_beta,
                linear_beta: hp.situ_linear_beta,
            },
            routing: Routing {
                gating: hp.gating,
                used: hp.experts_used,
                groups: hp.expert_groups,
                groups_used: hp.expert_groups_used,
                norm: hp.expert_weights_norm,
                scale: hp.expert_weights_scale,
                eps: hp.eps,
            },
            layers,
            hparams: hp,
            bytes,
            dense_checked: std::sync::OnceLock::new(),
        })
    }

    /// Checks the values of every matrix but the routed experts' and the embedding's once,
    /// before the first forward uses them (an expert is checked when a token is first
    /// routed to it, an embedding row when it is looked up, so a file larger than memory
    /// is never read whole). The first call names the matrices' bytes to the file first
    /// ([`crate::weights::read_ahead`]): a mapped file reads them from disk together.
    fn check_dense(&self) -> Result<()> {
        if self.dense_checked.get().is_some() {
            return Ok(());
        }
        let mut all: Vec<&WeightRef> = vec![&self.output];
        for l in &self.layers {
            all.extend(l.mixer.matrices());
            match &l.ffn {
                Ffn::Dense(f) => all.extend(f.matrices()),
                Ffn::Moe(m) => all.extend(m.dense_matrices()),
            }
        }
        crate::weights::read_ahead(&*self.bytes, all.iter().copied());
        crate::weights::check_all(self.bytes(), all)?;
        let _ = self.dense_checked.set(());
        Ok(())
    }

    /// Parses `bytes`, checks them against the `kimi-k3` contract with this build's
    /// kernels, and loads them.
    pub fn open(bytes: ModelBytes) -> Result<KimiK3> {
        let file = dspark_gguf::GgufFile::parse((*bytes).as_ref())?;
        let checked = dspark_contract::kimi_k3::check(&file, &dspark_quant::matrix_types())?;
        KimiK3::load(bytes.clone(), &checked)
    }

    /// Hyper-parameters.
    pub fn hparams(&self) -> &KimiK3Hparams {
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

    fn bytes(&self) -> &[u8] {
        (*self.bytes).as_ref()
    }

    fn kda_dims(&self) -> KdaDims {
        KdaDims {
            heads: self.hparams.heads,
            dim: self.hparams.kda_head_dim,
            kernel: self.hparams.conv_kernel,
        }
    }

    /// Width of an MLA cache row: the latent and the rope part.
    fn mla_row(&self) -> usize {
        self.hparams.kv_lora_rank + self.hparams.rope_dim
    }

    /// Bytes of weights one decode step reads: every layer's mixer, the experts one token
    /// uses, the final norm and the LM head.
    pub fn weight_bytes(&self) -> u64 {
        let used = self.hparams.experts_used;
        self.layers
            .iter()
            .map(|l| {
                let mixer = match &l.mixer {
                    Mixer::Kda(k) => [&k.q, &k.k, &k.v, &k.f_a, &k.f_b, &k.beta, &k.g, &k.output]
                        .into_iter()
                        .map(WeightRef::bytes)
                        .sum::<u64>(),
                    Mixer::Mla(a) => {
                        let q = match &a.q {
                            Query::Plain(q) => q.bytes(),
                            Query::Lora { a, b, .. } => a.bytes() + b.bytes(),
                        };
                        q + a.kv_a.bytes()
                            + a.k_b
                                .iter()
                                .chain(&a.v_b)
                                .map(WeightRef::bytes)
                                .sum::<u64>()
                            + a.gate.as_ref().map_or(0, WeightRef::bytes)
                            + a.output.bytes()
                    }
                };
                let ffn = match &l.ffn {
                    Ffn::Dense(d) => d.bytes(),
                    Ffn::Moe(m) => m.active_bytes(used),
                };
                mixer + ffn
            })
            .sum::<u64>()
            + self.output.bytes()
    }

    /// Bytes of a session for `capacity` positions that may leave up to `undo` positions
    /// uncommitted: MLA caches, KDA states and what undoing `undo` positions keeps (option
    /// A's buffers come on top: [`KimiK3::snapshot_bytes`]).
    pub fn session_bytes(&self, capacity: usize, undo: usize) -> Option<u64> {
        let h = &self.hparams;
        let d = self.kda_dims();
        let mla = h.mla.iter().filter(|&&m| m).count() as u64;
        let kda = h.kda_layers() as u64;
        let cache = mla
            .checked_mul(capacity as u64)?
            .checked_mul(self.mla_row() as u64)?;
        // The base, and C's working buffer when anything may be undone.
        let states = 1 + u64::from(undo > 1);
        let per_kda = states.checked_mul(d.state_floats() as u64)?.checked_add(
            ((d.window() + undo) * d.input_floats() + undo * d.step_floats()) as u64,
        )?;
        cache.checked_add(kda.checked_mul(per_kda)?)?.checked_mul(4)
    }

    /// Bytes of option A's snapshot buffers for `undo` positions (one state per position
    /// and KDA layer), allocated on a session's first forward under it.
    pub fn snapshot_bytes(&self, undo: usize) -> u64 {
        let per = self.kda_dims().state_floats() as u64 * self.hparams.kda_layers() as u64;
        4u64.saturating_mul(per).saturating_mul(undo as u64)
    }

    /// Bytes one forward of `rows` positions holds at its peak besides the weights and
    /// the session (activations, the checkpoint stack, captures, logits, attention
    /// scores over `capacity` positions, matrix scratch) — an upper bound.
    pub fn step_bytes(&self, rows: usize, which: Logits, captures: usize, capacity: usize) -> u64 {
        let h = &self.hparams;
        let blocks = if h.res_block > 0 {
            h.layers.div_ceil(h.res_block)
        } else {
            0
        };
        let wide = [
            h.ffn,
            h.expert_ffn * h.shared_experts.max(1),
            h.expert_ffn,
            h.heads * h.key_length_mla,
            h.heads * (h.kv_lora_rank + h.rope_dim),
            h.kda_inner(),
            h.q_lora_rank,
        ]
        .into_iter()
        .max()
        .unwrap_or(0) as u64;
        let per_row = (h.hidden * (blocks + 10 + captures)) as u64
            + 16 * wide
            + (h.expert_width() * (h.experts_used + 3)) as u64
            + (h.experts + 8) as u64;
        let logit_rows = match which {
            Logits::All => rows,
            Logits::Last => 1,
        } as u64;
        let scores = (rayon::current_num_threads() * capacity) as u64 * 4;
        let scratch = [
            scratch_bytes(h.vocab, h.hidden, logit_rows as usize),
            scratch_bytes(wide as usize, h.hidden, rows),
            scratch_bytes(h.hidden, wide as usize, rows),
        ]
        .into_iter()
        .max()
        .unwrap_or(0);
        (rows as u64)
            .saturating_mul(per_row)
            .saturating_add(logit_rows.saturating_mul((h.vocab + h.hidden) as u64))
            .saturating_mul(4)
            .saturating_add(scores)
            .saturating_add(scratch)
            .saturating_add(crate::memory::STEP_BOOKKEEPING)
    }

    /// A session for up to `capacity` positions (at most the context length) that keeps
    /// what undoing up to `undo` uncommitted positions needs (a verify round's width;
    /// [`Target::forward_commit`] needs none), refused with its byte count when the machine
    /// cannot hold it. Rollback starts as [`Rollback::Replay`].
    pub fn session(self: &Arc<Self>, capacity: usize, undo: usize) -> Result<KimiK3Session> {
        let h = &self.hparams;
        if capacity == 0 || capacity > h.context {
            return Err(RuntimeError::Request(format!(
                "a session of {capacity} positions does not fit the target's context of {}",
                h.context
            )));
        }
        let undo = undo.min(capacity);
        let what = format!("the target's caches and recurrent state for {capacity} positions");
        let bytes = self
            .session_bytes(capacity, undo)
            .ok_or_else(|| RuntimeError::Memory {
                what: what.clone(),
                bytes: u64::MAX,
                available: crate::memory::available_memory(),
            })?;
        crate::memory::check_fits(bytes, &what)?;
        let mut mla = Vec::new();
        let mut kda = Vec::new();
        for &is_mla in &h.mla {
            if is_mla {
                mla.push(zeroed(capacity * self.mla_row(), &what)?);
            } else {
                kda.push(KdaState::new(self.kda_dims(), undo, &what)?);
            }
        }
        Ok(KimiK3Session {
            model: Arc::clone(self),
            capacity,
            undo,
            len: 0,
            committed: 0,
            mla,
            kda,
            mode: Rollback::Replay,
            attention: Attention::F32,
            routed: Routed::default(),
        })
    }

    /// Token embeddings, `tokens.len() × hidden`.
    pub fn embed(&self, tokens: &[u32], out: &mut [f32]) -> Result<()> {
        let m = self.token_embd.matrix(self.bytes());
        crate::weights::embed_rows(&m, self.token_embd.name(), self.hparams.vocab, tokens, out)
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

impl crate::target::TargetModel for KimiK3 {
    fn arch(&self) -> &'static str {
        dspark_contract::kimi_k3::ARCH
    }
    fn shape(&self) -> TargetShape {
        KimiK3::shape(self)
    }
    fn context(&self) -> usize {
        self.hparams.context
    }
    fn special_tokens(&self) -> SpecialTokens {
        self.special
    }
    fn weight_bytes(&self) -> u64 {
        KimiK3::weight_bytes(self)
    }
    fn pack_lm_head(&self) -> Result<()> {
        KimiK3::pack_lm_head(self)
    }
    fn session(
        self: Arc<Self>,
        options: &crate::target::SessionOptions,
    ) -> Result<Box<dyn Target + Send>> {
        let mut s = KimiK3::session(&self, options.positions, options.undo)?;
        s.set_attention(options.attention);
        Ok(Box::new(s))
    }
}

/// One checkpoint of the residual stack: n rows and each row's RMS scale.
struct Checkpoint {
    rows: Vec<f32>,
    scale: Vec<f32>,
}

impl Checkpoint {
    fn new(rows: Vec<f32>, hidden: usize, eps: f32) -> Checkpoint {
        let scale = rows.chunks_exact(hidden).map(|r| inv_rms(r, eps)).collect();
        Checkpoint { rows, scale }
    }
}

/// `ResMix(u; w)` of every row (`docs/KIMI-K3.md#resmix`): softmax over the stack's and
/// u's scores `Σ_d w_d · RMSNorm(x)_d`, then the raw rows mixed with those weights. An
/// empty stack gives u.
fn res_mix(stack: &[Checkpoint], u: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    let e = w.len();
    if stack.is_empty() {
        out.copy_from_slice(u);
        return;
    }
    let score = |x: &[f32], s: f32| -> f32 {
        x.iter()
            .zip(w)
            .map(|(&v, &wd)| f64::from(wd * (v * s)))
            .sum::<f64>() as f32
    };
    let j = stack.len();
    let mut p = vec![0.0f32; j + 1];
    for (t, (ut, ot)) in u.chunks_exact(e).zip(out.chunks_exact_mut(e)).enumerate() {
        for (pj, c) in p.iter_mut().zip(stack) {
            *pj = score(&c.rows[t * e..(t + 1) * e], c.scale[t]);
        }
        p[j] = score(ut, inv_rms(ut, eps));
        softmax(&mut p);
        for (d, o) in ot.iter_mut().enumerate() {
            let mut sum = 0.0f32;
            for (c, &pj) in stack.iter().zip(&p[..j]) {
                sum += c.rows[t * e + d] * pj;
            }
            *o = sum + ut[d] * p[j];
        }
    }
}

/// One sequence on a [`KimiK3`]: MLA caches, KDA states, positions.
pub struct KimiK3Session {
    model: Arc<KimiK3>,
    capacity: usize,
    undo: usize,
    len: usize,
    committed: usize,
    /// Per MLA layer, in layer order: `capacity` rows of `[latent ; rope part]`.
    mla: Vec<Vec<f32>>,
    /// Per KDA layer, in layer order.
    kda: Vec<KdaState>,
    mode: Rollback,
    attention: Attention,
    /// What the last forward's routed experts cost.
    routed: Routed,
}

impl KimiK3Session {
    /// Sets how MLA attention is computed from the next forward on ([`Attention`]). Cache
    /// rows already written keep the precision they were written with: set it on a new
    /// session.
    pub fn set_attention(&mut self, attention: Attention) {
        self.attention = attention;
    }

    /// The model.
    pub fn model(&self) -> &Arc<KimiK3> {
        &self.model
    }

    /// Positions a forward may leave uncommitted.
    pub fn undo(&self) -> usize {
        self.undo
    }

    /// The rollback the next forwards prepare for.
    pub fn rollback_mode(&self) -> Rollback {
        self.mode
    }

    /// The KDA states at the current length, layer by layer (each `heads × D × D`,
    /// `m[j·D + i] = S[i][j]`), and the conv windows (`K − 1` rows of `[q | k | v]`
    /// pre-conv inputs) — what tests compare.
    pub fn recurrent_state(&self) -> Vec<(Vec<f32>, Vec<f32>)> {
        self.kda
            .iter()
            .map(|k| (k.current().to_vec(), k.window_rows().to_vec()))
            .collect()
    }

    fn run(
        &mut self,
        tokens: &[u32],
        capture: &[usize],
        which: Logits,
        keep: bool,
    ) -> Result<Forward> {
        crate::trace::begin_forward();
        let model = Arc::clone(&self.model);
        let (hp, bytes) = (&model.hparams, model.bytes());
        let (n, e, eps) = (tokens.len(), hp.hidden, hp.eps);
        let p0 = self.len;
        model.check_dense()?;
        if n == 0 {
            return Err(RuntimeError::Request(
                "a forward needs at least one token".into(),
            ));
        }
        if p0 + n > self.capacity {
            return Err(RuntimeError::Request(format!(
                "the session holds {} positions: {p0} + {n} do not fit",
                self.capacity
            )));
        }
        if keep && self.len - self.committed + n > self.undo {
            return Err(RuntimeError::Request(format!(
                "the session keeps at most {} uncommitted positions for a rollback: {} + {n} do not fit (commit first)",
                self.undo,
                self.len - self.committed
            )));
        }
        if let Some(&bad) = capture.iter().find(|&&l| l >= hp.layers) {
            return Err(RuntimeError::Request(format!(
                "cannot capture layer {bad} of {}",
                hp.layers
            )));
        }
        if keep && self.mode == Rollback::Snapshots {
            // Option A's buffers, allocated on first use; where the machine cannot hold
            // them, the session replays instead (the same state, another cost).
            let need = self.undo;
            let what = format!("the target's KDA snapshots for {need} positions (rollback A)");
            let bytes = self.model.snapshot_bytes(need);
            let fits = crate::memory::check_fits(bytes, &what).is_ok()
                && self
                    .kda
                    .iter_mut()
                    .all(|k| k.ensure_snapshots(need, &what).is_ok());
            if !fits {
                self.mode = Rollback::Replay;
            }
        }
        let mut p = vec![0.0f32; n * e];
        model.embed(tokens, &mut p)?;
        let mut captured = vec![0.0f32; n * capture.len() * e];
        let take = |layer: usize, rows: &[f32], captured: &mut [f32]| {
            for (slot, _) in capture.iter().enumerate().filter(|(_, &l)| l == layer) {
                for t in 0..n {
                    let dst = (t * capture.len() + slot) * e;
                    captured[dst..dst + e].copy_from_slice(&rows[t * e..(t + 1) * e]);
                }
            }
        };
        let res = hp.res_block;
        let mut stack: Vec<Checkpoint> = Vec::new();
        let (mut mixed, mut normed, mut y) = (
            vec![0.0f32; n * e],
            vec![0.0f32; n * e],
            vec![0.0f32; n * e],
        );
        let (mut mla_i, mut kda_i) = (0, 0);
        let mut routed = Routed::default();
        for (li, layer) in model.layers.iter().enumerate() {
            // Attention input: the mix over the stack (before this layer banks), which is
            // also the previous layer's tap.
            let a_in: &[f32] = match &layer.attn_res {
                Some(w) => {
                    res_mix(&stack, &p, w, eps, &mut mixed);
                    &mixed
                }
                None => &p,
            };
            if li > 0 {
                take(li - 1, a_in, &mut captured);
            }
            crate::trace::put_named(|| format!("l{li}_a_in"), a_in);
            norm_rows(a_in, &layer.attn_norm, eps, &mut normed);
            crate::trace::put_named(|| format!("l{li}_attn_norm"), &normed);
            let banked = res > 0 && li % res == 0;
            match &layer.mixer {
                Mixer::Kda(w) => {
                    let st = &mut self.kda[kda_i];
                    kda_forward(
                        bytes,
                        hp,
                        w,
                        st,
                        &normed,
                        &mut y,
                        keep,
                        keep && self.mode == Rollback::Snapshots,
                    );
                    kda_i += 1;
                }
                Mixer::Mla(w) => {
                    mla_forward(
                        bytes,
                        hp,
                        w,
                        &mut self.mla[mla_i],
                        p0,
                        &normed,
                        &mut y,
                        self.attention,
                    );
                    mla_i += 1;
                }
            }
            if banked {
                let raw = std::mem::replace(&mut p, y.clone());
                stack.push(Checkpoint::new(raw, e, eps));
            } else {
                for (a, b) in p.iter_mut().zip(&y) {
                    *a += b;
                }
            }
            let f_in: &[f32] = match &layer.ffn_res {
                Some(w) => {
                    res_mix(&stack, &p, w, eps, &mut mixed);
                    &mixed
                }
                None => &p,
            };
            crate::trace::put_named(|| format!("l{li}_p_after_attn"), &p);
            crate::trace::put_named(|| format!("l{li}_f_in"), f_in);
            norm_rows(f_in, &layer.ffn_norm, eps, &mut normed);
            crate::trace::put_named(|| format!("l{li}_ffn_norm"), &normed);
            match &layer.ffn {
                Ffn::Dense(f) => f.forward(bytes, model.situ, &normed, &mut y),
                Ffn::Moe(m) => {
                    routed +=
                        m.forward(&*model.bytes, &model.routing, model.situ, &normed, &mut y)?
                }
            }
            crate::trace::put_named(|| format!("l{li}_ffn_out"), &y);
            for (a, b) in p.iter_mut().zip(&y) {
                *a += b;
            }
            crate::trace::put_named(|| format!("l{li}_l_out"), &p);
        }
        let o: &[f32] = match &model.output_res {
            Some(w) => {
                res_mix(&stack, &p, w, eps, &mut mixed);
                &mixed
            }
            None => &p,
        };
        take(hp.layers - 1, o, &mut captured);
        let rows = match which {
            Logits::All => o,
            Logits::Last => &o[(n - 1) * e..],
        };
        let mut normed_rows = vec![0.0f32; rows.len()];
        norm_rows(rows, &model.output_norm, eps, &mut normed_rows);
        let mut logits = try_zeroed(rows.len() / e * hp.vocab, "the target's logits")?;
        model.lm_head(&normed_rows, &mut logits);
        self.len = p0 + n;
        self.routed = routed;
        Ok(Forward { logits, captured })
    }
}

/// The KDA layer of every row of `h` into `out`, advancing `st` (keeping undo data when
/// `keep`; per-position snapshots when `snapshots`).
#[allow(clippy::too_many_arguments)]
fn kda_forward(
    bytes: &[u8],
    hp: &KimiK3Hparams,
    w: &Kda,
    st: &mut KdaState,
    h: &[f32],
    out: &mut [f32],
    keep: bool,
    snapshots: bool,
) {
    let d = st.dims;
    let (inner, dim, heads, kk) = (d.inner(), d.dim, d.heads, d.kernel);
    let n = h.len() / hp.hidden;
    let (mut pq, mut pk, mut pv, mut g2, mut braw, mut fa) = (
        vec![0.0f32; n * inner],
        vec![0.0f32; n * inner],
        vec![0.0f32; n * inner],
        vec![0.0f32; n * inner],
        vec![0.0f32; n * heads],
        vec![0.0f32; n * dim],
    );
    multi_gemm(
        bytes,
        &[&w.q, &w.k, &w.v, &w.g, &w.beta, &w.f_a],
        h,
        &mut [&mut pq, &mut pk, &mut pv, &mut g2, &mut braw, &mut fa],
    );
    let mut fb = vec![0.0f32; n * inner];
    gemm(&w.f_b.matrix(bytes), &fa, &mut fb);
    // Diagnostics (`crate::trace`, off unless DSPARK_TRACE is set): the intermediates
    // `bench/trace_compare.py` matches with llama.cpp's nodes.
    let tr = crate::trace::on();
    if tr {
        for (nm, v) in [
            ("kda_pq", &pq),
            ("kda_pk", &pk),
            ("kda_pv", &pv),
            ("kda_g2raw", &g2),
            ("kda_braw", &braw),
            ("kda_fa", &fa),
            ("kda_fb", &fb),
        ] {
            crate::trace::put(nm, v);
        }
    }
    let (mut tr_pre, mut tr_post, mut tr_lg) = (
        [(); 3].map(|_| Vec::new()),
        [(); 3].map(|_| Vec::new()),
        Vec::new(),
    );
    // Pre-conv rows [q | k | v] after the window.
    let win = d.window();
    let rw = d.input_floats();
    let mut ext = Vec::with_capacity((win + n) * rw);
    ext.extend_from_slice(st.window_rows());
    for t in 0..n {
        ext.extend_from_slice(&pq[t * inner..(t + 1) * inner]);
        ext.extend_from_slice(&pk[t * inner..(t + 1) * inner]);
        ext.extend_from_slice(&pv[t * inner..(t + 1) * inner]);
    }
    // Causal depthwise conv over the window and the new rows, then SiLU; q and k
    // L2-normed per head (rms_norm with eps/D, times 1/√D, as llama.cpp).
    let l2 = 1.0 / (dim as f32).sqrt();
    let sf = d.step_floats();
    let mut steps = vec![0.0f32; n * sf];
    let mut q = vec![0.0f32; n * inner];
    let ones = vec![1.0f32; inner];
    for t in 0..n {
        // Per channel Σ_τ w[τ][c] · x[t + τ][c], τ in order (one tap over every channel
        // at a time), then SiLU.
        let mut conv = |part: usize, dst: &mut [f32]| {
            let kern = &w.conv[part];
            dst.fill(0.0);
            for tau in 0..kk {
                let x = &ext[(t + tau) * rw + part * inner..][..inner];
                for ((o, &xv), &wv) in dst
                    .iter_mut()
                    .zip(x)
                    .zip(&kern[tau * inner..(tau + 1) * inner])
                {
                    *o = xv.mul_add(wv, *o);
                }
            }
            if tr {
                tr_pre[part].extend_from_slice(dst);
            }
            // ggml's `silu` row kernel: its arithmetic is SwiGLU's with an up of ones.
            swiglu(dst, &ones);
            if tr {
                tr_post[part].extend_from_slice(dst);
            }
        };
        let row = &mut steps[t * sf..(t + 1) * sf];
        let (k_out, rest) = row.split_at_mut(inner);
        let (v_out, rest) = rest.split_at_mut(inner);
        let (decay, beta) = rest.split_at_mut(inner);
        let q_out = &mut q[t * inner..(t + 1) * inner];
        conv(0, q_out);
        conv(1, k_out);
        conv(2, v_out);
        for x in [&mut *q_out, &mut *k_out] {
            for head in x.chunks_exact_mut(dim) {
                let s = inv_rms(head, hp.eps / dim as f32);
                for v in head.iter_mut() {
                    *v = *v * s * l2;
                }
            }
        }
        // Decay gate per channel, in log space, then exp.
        for (c, g) in decay.iter_mut().enumerate() {
            let a = w.a[c / dim];
            let u = fb[t * inner + c] + w.dt_bias[c];
            let lg = match hp.gate_lower_bound {
                Some(lb) => sigmoid(-(u * a)) * lb,
                None => softplus(u) * a,
            };
            if tr {
                tr_lg.push(lg);
            }
            *g = lg.exp();
        }
        for (b, &x) in beta.iter_mut().zip(&braw[t * heads..(t + 1) * heads]) {
            *b = sigmoid(x);
        }
    }
    if tr {
        for (i, nm) in ["q", "k", "v"].iter().enumerate() {
            crate::trace::put(&format!("kda_conv_{nm}"), &tr_pre[i]);
            crate::trace::put(&format!("kda_silu_{nm}"), &tr_post[i]);
        }
        crate::trace::put("kda_qn", &q);
        let part = |p: usize, len: usize| -> Vec<f32> {
            steps
                .chunks_exact(sf)
                .flat_map(|r| r[p * inner..p * inner + len].to_vec())
                .collect()
        };
        crate::trace::put("kda_kn", &part(0, inner));
        crate::trace::put("kda_vv", &part(1, inner));
        crate::trace::put("kda_decay", &part(2, inner));
        crate::trace::put("kda_beta", &part(3, heads));
        crate::trace::put("kda_lg", &tr_lg);
    }
    let mut o = vec![0.0f32; n * inner];
    let dest = match (keep, snapshots) {
        (false, _) => Dest::Commit,
        (true, false) => Dest::Replay,
        (true, true) => Dest::Snapshots,
    };
    st.run(n, &steps, Some((&q, &mut o)), dest);
    if keep {
        st.push_inputs(&ext[win * rw..]);
        st.push_steps(&steps);
    } else {
        st.replace_window(&ext[n * rw..]);
    }
    crate::trace::put("kda_o", &o);
    // Per-head RMSNorm, sigmoid gate, output projection.
    let mut gated = vec![0.0f32; n * inner];
    for ((oh, gh), g2h) in o
        .chunks_exact(dim)
        .zip(gated.chunks_exact_mut(dim))
        .zip(g2.chunks_exact(dim))
    {
        rms_norm(oh, &w.norm, hp.eps, gh);
        for (a, &b) in gh.iter_mut().zip(g2h) {
            *a *= sigmoid(b);
        }
    }
    crate::trace::put("kda_gated", &gated);
    gemm(&w.output.matrix(bytes), &gated, out);
    crate::trace::put("kda_out", out);
}

/// The MLA layer (absorbed form) of every row of `h` into `out`, writing positions
/// `p0..p0 + n` of `cache`.
#[allow(clippy::too_many_arguments)]
fn mla_forward(
    bytes: &[u8],
    hp: &KimiK3Hparams,
    w: &Mla,
    cache: &mut [f32],
    p0: usize,
    h: &[f32],
    out: &mut [f32],
    attention: Attention,
) {
    let n = h.len() / hp.hidden;
    let heads = hp.heads;
    let (r, d_r, d_n, d_v) = (
        hp.kv_lora_rank,
        hp.rope_dim,
        hp.nope_dim(),
        hp.value_length_mla,
    );
    let (qh, row) = (d_n + d_r, r + d_r);
    let mut q = vec![0.0f32; n * heads * qh];
    let mut kvr = vec![0.0f32; n * row];
    let mut gate = vec![0.0f32; if w.gate.is_some() { n * heads * d_v } else { 0 }];
    match &w.q {
        Query::Plain(wq) => {
            let mut ws = vec![wq, &w.kv_a];
            let mut ys: Vec<&mut [f32]> = vec![&mut q, &mut kvr];
            if let Some(g) = &w.gate {
                ws.push(g);
                ys.push(&mut gate);
            }
            multi_gemm(bytes, &ws, h, &mut ys);
        }
        Query::Lora { a, norm, b } => {
            let mut qa = vec![0.0f32; n * a.rows];
            let mut ws = vec![a, &w.kv_a];
            let mut ys: Vec<&mut [f32]> = vec![&mut qa, &mut kvr];
            if let Some(g) = &w.gate {
                ws.push(g);
                ys.push(&mut gate);
            }
            multi_gemm(bytes, &ws, h, &mut ys);
            let mut qn = vec![0.0f32; qa.len()];
            norm_rows(&qa, norm, hp.eps, &mut qn);
            gemm(&b.matrix(bytes), &qn, &mut q);
        }
    }
    crate::trace::put("mla_q", &q);
    crate::trace::put("mla_kvr", &kvr);
    crate::trace::put("mla_gate", &gate);
    // Cache rows: the normed latent, then the rope part as it is (NoPE: no rotation).
    for t in 0..n {
        let dst = &mut cache[(p0 + t) * row..(p0 + t + 1) * row];
        rms_norm(
            &kvr[t * row..t * row + r],
            &w.kv_norm,
            hp.eps,
            &mut dst[..r],
        );
        dst[r..].copy_from_slice(&kvr[t * row + r..(t + 1) * row]);
        if attention == Attention::F16 {
            round_f16s(dst);
        }
    }
    // Absorbed queries [K_b[h]ᵀ q_nope ; q_rope] per (position, head), heads side by side.
    // The per-head products are llama.cpp's batched `mul_mat` of a 3-D tensor: in a
    // prompt, its prompt kernels' order.
    let prompt = dspark_quant::gemm::in_prompt_order();
    // Those products read a permuted (not contiguous) activation, which llama.cpp's
    // tinyBLAS takes only once converted to the weight's activation type: an F32 weight
    // (nothing to convert) takes its `vec_dot` for every column.
    let head_prompt = |w: &WeightRef| prompt && w.matrix(bytes).ty != dspark_gguf::GgmlType::F32;
    let absorbed: Vec<Vec<f32>> = w
        .k_b
        .par_iter()
        .enumerate()
        .map(|(hi, kb)| {
            let mut xn = Vec::with_capacity(n * d_n);
            for t in 0..n {
                let at = (t * heads + hi) * qh;
                xn.extend_from_slice(&q[at..at + d_n]);
            }
            let mut ab = vec![0.0f32; n * r];
            gemm_local_plain(&kb.matrix(bytes), &xn, &mut ab, head_prompt(kb));
            ab
        })
        .collect();
    let mut qa = vec![0.0f32; n * heads * row];
    for (hi, ab) in absorbed.iter().enumerate() {
        for t in 0..n {
            let dst = (t * heads + hi) * row;
            qa[dst..dst + r].copy_from_slice(&ab[t * r..(t + 1) * r]);
            let src = (t * heads + hi) * qh + d_n;
            qa[dst + r..dst + row].copy_from_slice(&q[src..src + d_r]);
        }
    }
    crate::trace::put("mla_cache", &cache[..(p0 + n) * row]);
    crate::trace::put("mla_qa", &qa);
    // Attention over the cache: position p0 + t reads rows 0..=p0 + t. One task per
    // (position, head), each the same arithmetic whatever runs beside it.
    let scale = 1.0 / (hp.key_length_mla as f32).sqrt();
    let threads = rayon::current_num_threads();
    let mut ctx = vec![0.0f32; n * heads * r];
    let cache = &*cache;
    let kn = kernels();
    match attention {
        Attention::F32 => ctx.par_chunks_mut(r).enumerate().for_each_init(
            || Vec::with_capacity(p0 + n),
            |scores: &mut Vec<f32>, (i, o)| {
                let t = i / heads;
                let count = p0 + t + 1;
                scores.clear();
                scores.resize(count, 0.0);
                (kn.dots_f32)(&qa[i * row..(i + 1) * row], cache, row, scores);
                for s in scores.iter_mut() {
                    *s *= scale;
                }
                softmax(scores);
                o.fill(0.0);
                (kn.axpys_f32)(o, scores, cache, row);
            },
        ),
        // A prompt's forward of at least FA_TILE positions: llama.cpp's tiled flash
        // attention (the query unrounded); shorter ones its one-chunk kernel.
        Attention::F16 if n >= FA_TILE => ctx.par_chunks_mut(r).enumerate().for_each(|(i, o)| {
            let t = i / heads;
            attend_tiled(
                &qa[i * row..(i + 1) * row],
                cache,
                cache,
                row,
                p0 + t + 1,
                scale,
                o,
            );
        }),
        // Shorter ones (decode and verify rows too) by its one-chunk kernel, split among
        // its threads as it splits a decode step's keys.
        Attention::F16 => ctx.par_chunks_mut(r).enumerate().for_each_init(
            || vec![0.0f32; row],
            |q16: &mut Vec<f32>, (i, o)| {
                let t = i / heads;
                q16.copy_from_slice(&qa[i * row..(i + 1) * row]);
                round_f16s(q16);
                let chunks = kv_chunks(n, p0 + t + 1, prompt, threads);
                attend_f16(q16, cache, cache, row, p0 + t + 1, scale, o, chunks);
            },
        ),
    }
    crate::trace::put("mla_ctx", &ctx);
    // Value heads from the latent context, the gate, the output projection.
    let values: Vec<Vec<f32>> = w
        .v_b
        .par_iter()
        .enumerate()
        .map(|(hi, vb)| {
            let mut xc = Vec::with_capacity(n * r);
            for t in 0..n {
                let at = (t * heads + hi) * r;
                xc.extend_from_slice(&ctx[at..at + r]);
            }
            let mut y = vec![0.0f32; n * d_v];
            gemm_local_plain(&vb.matrix(bytes), &xc, &mut y, head_prompt(vb));
            y
        })
        .collect();
    let mut vo = vec![0.0f32; n * heads * d_v];
    for (hi, y) in values.iter().enumerate() {
        for t in 0..n {
            let dst = (t * heads + hi) * d_v;
            vo[dst..dst + d_v].copy_from_slice(&y[t * d_v..(t + 1) * d_v]);
        }
    }
    if w.gate.is_some() {
        for (a, &g) in vo.iter_mut().zip(&gate) {
            *a *= sigmoid(g);
        }
    }
    crate::trace::put("mla_vo", &vo);
    gemm(&w.output.matrix(bytes), &vo, out);
    crate::trace::put("mla_out", out);
}

use dspark_quant::vector::round_f16s;

impl Target for KimiK3Session {
    fn shape(&self) -> TargetShape {
        self.model.shape()
    }

    fn capacity(&self) -> usize {
        self.capacity
    }

    fn len(&self) -> usize {
        self.len
    }

    fn committed(&self) -> usize {
        self.committed
    }

    fn commit(&mut self) {
        for k in &mut self.kda {
            k.commit();
        }
        self.committed = self.len;
    }

    fn rollback(&mut self, to: usize) -> Result<()> {
        check_rollback(self.committed, self.len, to)?;
        for k in &mut self.kda {
            k.rollback(to - self.committed);
        }
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
        self.model.step_bytes(rows, which, captures, self.capacity)
    }

    fn forward(&mut self, tokens: &[u32], capture: &[usize], which: Logits) -> Result<Forward> {
        self.run(tokens, capture, which, true)
    }

    fn forward_commit(
        &mut self,
        tokens: &[u32],
        capture: &[usize],
        which: Logits,
    ) -> Result<Forward> {
        let f = self.run(tokens, capture, which, false)?;
        self.commit();
        Ok(f)
    }

    fn routed(&self) -> Option<Routed> {
        Some(self.routed)
    }

    fn state_bytes(&self) -> u64 {
        4 * self.mla.iter().map(|c| c.len() as u64).sum::<u64>()
            + self.kda.iter().map(KdaState::bytes).sum::<u64>()
    }

    fn recurrent(&self) -> bool {
        !self.kda.is_empty()
    }

    fn set_rollback(&mut self, mode: Rollback) {
        self.mode = mode;
    }
}

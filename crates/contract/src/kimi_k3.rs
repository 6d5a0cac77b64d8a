//! A Kimi K3 target in llama.cpp's `kimi-k3` layout (`src/models/kimi-k3.cpp`,
//! `docs/KIMI-K3.md#the-kimi-k3-gguf-layout`): hybrid KDA (recurrent) and absorbed MLA
//! (NoPE) layers, dense SiTU and latent-MoE FFNs, and cross-layer residual attention.
//!
//! Keys as llama.cpp's loader reads them (`docs/KIMI-K3.md#keys`): `context_length`,
//! `embedding_length`, `block_count`, `attention.layer_norm_rms_epsilon`,
//! `attention.kv_lora_rank`, `attention.key_length_mla`, `attention.value_length_mla`,
//! `ssm.conv_kernel`, `kda.head_dim`, `expert_feed_forward_length`,
//! `expert_shared_count`, `expert_gating_func`, `attn_res.block_size` and both SiTU betas
//! are required; `attention.head_count` (scalar or per-layer array, only its first value
//! sizes the heads), `attention.head_count_kv` (per layer: 0 = KDA, 1 = MLA; absent = all
//! MLA), and the MoE keys as needed. What llama.cpp loads but its graph cannot run (the
//! non-absorbed `attn_kv_b`, a fused `attn_qkv`, projection biases it never applies) is
//! refused by name rather than run differently.

use dspark_gguf::{Array, GgufFile, Value};

use crate::bounds;
use crate::check::{Checker, Role, TensorRef};
use crate::finding::{ContractError, Finding};
use crate::names::kimi_k3 as n;
use crate::names::{key, keys, tensors};
use crate::vocab::{check_vocab, GgufVocab, SpecialTokens};

/// `general.architecture` of this kind.
pub const ARCH: &str = "kimi-k3";

/// What the contract calls this kind in messages.
pub const KIND: &str = "kimi-k3 target";

/// How the router turns its logits into expert probabilities (`expert_gating_func`,
/// llama.cpp `llama-hparams.h`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Gating {
    /// 1: softmax over all experts.
    Softmax,
    /// 2: a sigmoid per expert (Kimi K3).
    Sigmoid,
    /// 3: the logits select; a softmax over the selected ones weighs them.
    SoftmaxWeight,
    /// 4: `sqrt(softplus(logit))` per expert.
    SqrtSoftplus,
}

impl Gating {
    fn from_id(id: u32) -> Option<Gating> {
        match id {
            1 => Some(Gating::Softmax),
            2 => Some(Gating::Sigmoid),
            3 => Some(Gating::SoftmaxWeight),
            4 => Some(Gating::SqrtSoftplus),
            _ => None,
        }
    }
}

/// The hyper-parameters of a checked Kimi K3 target (serialized under their GGUF key
/// names; `mla` as the list of MLA layers).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct KimiK3Hparams {
    /// `embedding_length` (E).
    #[serde(rename = "embedding_length")]
    pub hidden: usize,
    /// `block_count`.
    #[serde(rename = "block_count")]
    pub layers: usize,
    /// Rows of `token_embd`.
    pub vocab: usize,
    /// `context_length`.
    #[serde(rename = "context_length")]
    pub context: usize,
    /// `attention.layer_norm_rms_epsilon`: every RMSNorm, and the L2 norm of KDA's q, k.
    #[serde(rename = "rms_eps")]
    pub eps: f32,
    /// `attention.head_count` (its first value): heads of KDA and MLA layers alike.
    #[serde(rename = "head_count")]
    pub heads: usize,
    /// Per layer: true for an MLA layer (`head_count_kv` ≠ 0), false for KDA.
    #[serde(rename = "mla_layers", serialize_with = "layer_list")]
    pub mla: Vec<bool>,
    /// `kda.head_dim` (D): KDA key = value head size.
    pub kda_head_dim: usize,
    /// `ssm.conv_kernel` (K): taps of KDA's short convolutions.
    pub conv_kernel: usize,
    /// `kda.gate_lower_bound`: `Some(lb)` gives the decay gate `lb·σ(A·u)`, `None` the
    /// Kimi-Linear gate `−A·softplus(u)`.
    pub gate_lower_bound: Option<f32>,
    /// `attention.q_lora_rank` (0: no LoRA query).
    pub q_lora_rank: usize,
    /// `attention.kv_lora_rank`: the MLA latent width.
    pub kv_lora_rank: usize,
    /// `rope.dimension_count`: the unrotated "rope" part of MLA keys (K3 is NoPE).
    pub rope_dim: usize,
    /// `attention.key_length_mla`: nope + rope dims of an MLA query head.
    pub key_length_mla: usize,
    /// `attention.value_length_mla`: an MLA value head.
    pub value_length_mla: usize,
    /// `feed_forward_length` (its first value): the dense FFN width.
    #[serde(rename = "feed_forward_length")]
    pub ffn: usize,
    /// `leading_dense_block_count`: layers below it have a dense FFN, the rest MoE.
    #[serde(rename = "leading_dense_block_count")]
    pub dense_layers: usize,
    /// `expert_count`.
    #[serde(rename = "expert_count")]
    pub experts: usize,
    /// `expert_used_count`: experts per token.
    #[serde(rename = "expert_used_count")]
    pub experts_used: usize,
    /// `expert_group_count` (1: no group-limited routing).
    #[serde(rename = "expert_group_count")]
    pub expert_groups: usize,
    /// `expert_group_used_count`.
    #[serde(rename = "expert_group_used_count")]
    pub expert_groups_used: usize,
    /// `expert_feed_forward_length` (its first value): a routed expert's width.
    #[serde(rename = "expert_feed_forward_length")]
    pub expert_ffn: usize,
    /// `expert_shared_count`.
    #[serde(rename = "expert_shared_count")]
    pub shared_experts: usize,
    /// `expert_latent_length` (0: experts run at the hidden width).
    #[serde(rename = "expert_latent_length")]
    pub expert_latent: usize,
    /// `expert_weights_scale` (0 or 1: no scaling).
    pub expert_weights_scale: f32,
    /// `expert_weights_norm`.
    pub expert_weights_norm: bool,
    /// `expert_gating_func`.
    #[serde(rename = "expert_gating")]
    pub gating: Gating,
    /// `attn_res.block_size` (0: a plain residual network).
    #[serde(rename = "attn_res_block_size")]
    pub res_block: usize,
    /// `activation.situ_beta` (β ≠ 0).
    pub situ_beta: f32,
    /// `activation.situ_linear_beta` (≤ 0: the up branch is not transformed).
    pub situ_linear_beta: f32,
}

/// The indices of the true entries (the MLA layers).
fn layer_list<S: serde::Serializer>(mla: &[bool], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(mla.iter().enumerate().filter(|(_, &m)| m).map(|(i, _)| i))
}

impl KimiK3Hparams {
    /// KDA inner width `H·D`.
    pub fn kda_inner(&self) -> usize {
        self.heads * self.kda_head_dim
    }
    /// The nope part of an MLA query head (`key_length_mla − rope_dim`).
    pub fn nope_dim(&self) -> usize {
        self.key_length_mla - self.rope_dim
    }
    /// Width the routed experts run at (the latent, or the hidden size).
    pub fn expert_width(&self) -> usize {
        if self.expert_latent > 0 {
            self.expert_latent
        } else {
            self.hidden
        }
    }
    /// KDA layers.
    pub fn kda_layers(&self) -> usize {
        self.mla.iter().filter(|&&m| !m).count()
    }
}

/// A KDA layer's tensors (`docs/KIMI-K3.md#tensors`).
#[derive(Clone, Debug, PartialEq)]
#[allow(missing_docs)]
pub struct KdaRefs<'f> {
    pub q: TensorRef<'f>,
    pub k: TensorRef<'f>,
    pub v: TensorRef<'f>,
    /// Conv kernels `{K, 1, d_in}`: the tap index is the fastest.
    pub conv_q: TensorRef<'f>,
    pub conv_k: TensorRef<'f>,
    pub conv_v: TensorRef<'f>,
    pub f_a: TensorRef<'f>,
    pub f_b: TensorRef<'f>,
    pub beta: TensorRef<'f>,
    /// `ssm_a` = −exp(A_log), `{H}`.
    pub a: TensorRef<'f>,
    pub dt_bias: TensorRef<'f>,
    pub g: TensorRef<'f>,
    pub norm: TensorRef<'f>,
    pub output: TensorRef<'f>,
}

/// An MLA layer's query projection.
#[derive(Clone, Debug, PartialEq)]
pub enum MlaQuery<'f> {
    /// `attn_q`.
    Plain(TensorRef<'f>),
    /// `attn_q_a` → RMSNorm `attn_q_a_norm` → `attn_q_b`.
    Lora {
        /// `attn_q_a`.
        a: TensorRef<'f>,
        /// `attn_q_a_norm`.
        norm: TensorRef<'f>,
        /// `attn_q_b`.
        b: TensorRef<'f>,
    },
}

/// An MLA layer's tensors (`docs/KIMI-K3.md#tensors`, absorbed form).
#[derive(Clone, Debug, PartialEq)]
#[allow(missing_docs)]
pub struct MlaRefs<'f> {
    pub q: MlaQuery<'f>,
    pub kv_a_mqa: TensorRef<'f>,
    pub kv_a_norm: TensorRef<'f>,
    /// `{d_n, r_kv, H}`: per head, `r_kv` rows of `d_n`.
    pub k_b: TensorRef<'f>,
    /// `{r_kv, d_v, H}`: per head, `d_v` rows of `r_kv`.
    pub v_b: TensorRef<'f>,
    pub gate: Option<TensorRef<'f>>,
    pub output: TensorRef<'f>,
}

/// A layer's token mixer.
#[derive(Clone, Debug, PartialEq)]
#[allow(missing_docs)]
pub enum MixerRefs<'f> {
    Kda(Box<KdaRefs<'f>>),
    Mla(Box<MlaRefs<'f>>),
}

/// Gate, up and down projections of a SiTU FFN.
#[derive(Clone, Debug, PartialEq)]
#[allow(missing_docs)]
pub struct SituRefs<'f> {
    pub gate: TensorRef<'f>,
    pub up: TensorRef<'f>,
    pub down: TensorRef<'f>,
}

/// A latent-MoE FFN's tensors (`docs/KIMI-K3.md#tensors`).
#[derive(Clone, Debug, PartialEq)]
#[allow(missing_docs)]
pub struct MoeRefs<'f> {
    pub router: TensorRef<'f>,
    pub probs_bias: TensorRef<'f>,
    /// `{E_l, F_e, N_e}` each: expert e's rows are `e·F_e .. (e+1)·F_e`.
    pub gate_exps: TensorRef<'f>,
    pub up_exps: TensorRef<'f>,
    /// `{F_e, E_l, N_e}`.
    pub down_exps: TensorRef<'f>,
    pub routed_down: Option<TensorRef<'f>>,
    pub routed_up: Option<TensorRef<'f>>,
    pub routed_norm: Option<TensorRef<'f>>,
    pub shared: Option<SituRefs<'f>>,
}

/// A layer's FFN.
#[derive(Clone, Debug, PartialEq)]
#[allow(missing_docs)]
pub enum FfnRefs<'f> {
    Dense(SituRefs<'f>),
    Moe(Box<MoeRefs<'f>>),
}

/// One layer's tensors.
#[derive(Clone, Debug, PartialEq)]
#[allow(missing_docs)]
pub struct K3LayerRefs<'f> {
    pub attn_norm: TensorRef<'f>,
    pub ffn_norm: TensorRef<'f>,
    /// Present iff `attn_res.block_size > 0`.
    pub attn_res_score: Option<TensorRef<'f>>,
    pub ffn_res_score: Option<TensorRef<'f>>,
    pub mixer: MixerRefs<'f>,
    pub ffn: FfnRefs<'f>,
}

/// A GGUF that satisfies the `kimi-k3` contract: the proof value [`check`] alone
/// creates, which the target loader requires.
#[derive(Clone, Debug)]
pub struct KimiK3File<'f> {
    hparams: KimiK3Hparams,
    token_embd: TensorRef<'f>,
    output_norm: TensorRef<'f>,
    output: TensorRef<'f>,
    output_res_score: Option<TensorRef<'f>>,
    layers: Vec<K3LayerRefs<'f>>,
    vocab: Option<GgufVocab<'f>>,
    special: SpecialTokens,
}

impl<'f> KimiK3File<'f> {
    /// Hyper-parameters.
    pub fn hparams(&self) -> &KimiK3Hparams {
        &self.hparams
    }
    /// `token_embd.weight`, `[hidden, vocab]`.
    pub fn token_embd(&self) -> &TensorRef<'f> {
        &self.token_embd
    }
    /// `output_norm.weight`.
    pub fn output_norm(&self) -> &TensorRef<'f> {
        &self.output_norm
    }
    /// `output.weight` (K3 never ties it).
    pub fn output(&self) -> &TensorRef<'f> {
        &self.output
    }
    /// `output_res_score.weight`, present iff residual blocks are on.
    pub fn output_res_score(&self) -> Option<&TensorRef<'f>> {
        self.output_res_score.as_ref()
    }
    /// The layers.
    pub fn layers(&self) -> &[K3LayerRefs<'f>] {
        &self.layers
    }
    /// The tokenizer the file carries, if any.
    pub fn vocab(&self) -> Option<&GgufVocab<'f>> {
        self.vocab.as_ref()
    }
    /// The special tokens it declares.
    pub fn special_tokens(&self) -> SpecialTokens {
        self.special
    }
    /// What a drafter must fit.
    pub fn shape(&self) -> crate::TargetShape {
        crate::TargetShape {
            hidden: self.hparams.hidden,
            layers: self.hparams.layers,
            vocab: self.hparams.vocab,
        }
    }
}

impl<'f> crate::TargetContract<'f> for KimiK3File<'f> {
    fn arch(&self) -> &'static str {
        ARCH
    }
    fn kind(&self) -> &'static str {
        KIND
    }
    fn shape(&self) -> crate::TargetShape {
        KimiK3File::shape(self)
    }
    fn context(&self) -> usize {
        self.hparams().context
    }
    fn vocab(&self) -> Option<&GgufVocab<'f>> {
        KimiK3File::vocab(self)
    }
    fn special_tokens(&self) -> SpecialTokens {
        KimiK3File::special_tokens(self)
    }
    fn summary(&self) -> crate::TargetSummary {
        let h = self.hparams();
        crate::TargetSummary::new(
            ARCH,
            h,
            false,
            self.vocab(),
            self.special_tokens(),
            format!(
                "hidden {}, {} layers ({} KDA, {} MLA), {} heads, {} experts ({} per token, {} shared), vocabulary {}, context {}",
                h.hidden,
                h.layers,
                h.kda_layers(),
                h.layers - h.kda_layers(),
                h.heads,
                h.experts,
                h.experts_used,
                h.shared_experts,
                h.vocab,
                h.context
            ),
        )
    }
}

/// Checks `file` against the `kimi-k3` contract. `matrix_types` are the weight types the
/// caller's kernels multiply (vectors must be F32). Every finding is collected.
pub fn check<'f>(
    file: &'f GgufFile<'f>,
    matrix_types: &[dspark_gguf::GgmlType],
) -> Result<KimiK3File<'f>, ContractError> {
    let mut c = Checker::new(file, matrix_types);
    let value = check_inner(&mut c);
    c.finish(KIND, value)
}

/// A per-layer integer key: a UINT32 for every layer, or an INT32 / UINT32 array of one
/// value per layer (llama.cpp's `get_key_or_arr`). `None` when absent or wrong (a
/// finding then names it).
fn per_layer(c: &mut Checker<'_, '_>, k: &str, layers: usize, required: bool) -> Option<Vec<u64>> {
    match c.file.get(k) {
        None => {
            if required {
                c.key_finding(k, "missing");
            }
            None
        }
        Some(Value::U32(v)) => Some(vec![u64::from(*v); layers]),
        Some(Value::Array(a)) => {
            let values: Vec<i64> = match a {
                Array::I32(v) => v.iter().map(|&x| i64::from(x)).collect(),
                Array::U32(v) => v.iter().map(|&x| i64::from(x)).collect(),
                other => {
                    c.key_finding(
                        k,
                        format!(
                            "is ARRAY[{}], expected UINT32 or ARRAY[INT32/UINT32]",
                            other.elem_type().name()
                        ),
                    );
                    return None;
                }
            };
            if values.len() != layers {
                c.key_finding(
                    k,
                    format!(
                        "holds {} values, expected one per layer ({layers})",
                        values.len()
                    ),
                );
                return None;
            }
            if let Some((i, v)) = values.iter().enumerate().find(|(_, &v)| v < 0) {
                c.key_finding(k, format!("value {i} is {v}, expected at least 0"));
                return None;
            }
            Some(values.into_iter().map(|v| v as u64).collect())
        }
        Some(v) => {
            c.key_finding(
                k,
                format!(
                    "is {}, expected UINT32 or ARRAY[INT32/UINT32]",
                    v.type_name()
                ),
            );
            None
        }
    }
}

/// A finite FLOAT32 key (any sign); `default` when absent.
fn finite_f32(c: &mut Checker<'_, '_>, k: &str, default: Option<f32>) -> Option<f32> {
    match c.f32(k, default.is_none()) {
        Some(v) if v.is_finite() => Some(v),
        Some(v) => {
            c.key_finding(k, format!("is {v}, expected a finite value"));
            None
        }
        None if c.file.get(k).is_none() => default,
        None => None,
    }
}

/// A UINT32 key within `range`, `default` when absent.
fn u32_or(
    c: &mut Checker<'_, '_>,
    k: &str,
    range: std::ops::RangeInclusive<u64>,
    default: u64,
) -> Option<u64> {
    if c.file.get(k).is_none() {
        return Some(default);
    }
    c.u32_in(k, range, true)
}

fn check_inner<'f>(c: &mut Checker<'f, '_>) -> Option<KimiK3File<'f>> {
    c.architecture_is(ARCH)?;
    let k = |s: &str| key(ARCH, s);
    let hidden = c.u32_in(&k(keys::EMBEDDING_LENGTH), bounds::EMBEDDING_LENGTH, true);
    let layers = c.u32_in(&k(keys::BLOCK_COUNT), bounds::K3_BLOCK_COUNT, true);
    let context = c.u32_in(&k(keys::CONTEXT_LENGTH), bounds::CONTEXT_LENGTH, true);
    let eps = c.positive_f32(&k(keys::RMS_EPS), None, bounds::MAX_RMS_EPS);
    let layers_n = layers? as usize;

    // Heads: only the first value sizes KDA and MLA heads alike (llama.cpp's
    // `n_head()`); per-layer values other than it (or 0) would mean a geometry the
    // graph does not build.
    let heads = match per_layer(c, &k(keys::HEAD_COUNT), layers_n, true) {
        Some(v) => {
            let h = v[0];
            if !bounds::HEAD_COUNT.contains(&h) {
                c.key_finding(
                    &k(keys::HEAD_COUNT),
                    format!(
                        "starts with {h}, expected {}..={}",
                        bounds::HEAD_COUNT.start(),
                        bounds::HEAD_COUNT.end()
                    ),
                );
                None
            } else if let Some((i, x)) = v.iter().enumerate().find(|(_, &x)| x != h && x != 0) {
                c.key_finding(
                    &k(keys::HEAD_COUNT),
                    format!("layer {i} has {x} heads, but llama.cpp's kimi-k3 graph gives every layer the first value, {h}"),
                );
                None
            } else {
                Some(h as usize)
            }
        }
        None => None,
    };
    // Layer kinds: head_count_kv 0 = KDA, 1 = MLA (served as MQA over the latent).
    let mla = match per_layer(c, &k(keys::HEAD_COUNT_KV), layers_n, false) {
        Some(v) => match v.iter().enumerate().find(|(_, &x)| x > 1) {
            Some((i, x)) => {
                c.key_finding(
                    &k(keys::HEAD_COUNT_KV),
                    format!("layer {i} has {x}, expected 0 (KDA) or 1 (MLA)"),
                );
                None
            }
            None => Some(v.iter().map(|&x| x == 1).collect::<Vec<bool>>()),
        },
        None if c.file.get(&k(keys::HEAD_COUNT_KV)).is_none() => Some(vec![true; layers_n]),
        None => None,
    };
    let any_mla = mla.as_ref().is_some_and(|m| m.iter().any(|&x| x));
    let any_kda = mla.as_ref().is_some_and(|m| m.iter().any(|&x| !x));

    // KDA.
    let kda_head_dim = c.u32_in(&k(n::KDA_HEAD_DIM), bounds::K3_DIM, true);
    let conv_kernel = c.u32_in(&k(n::SSM_CONV_KERNEL), bounds::K3_CONV_KERNEL, true);
    let gate_lower_bound = match c.f32(&k(n::KDA_GATE_LOWER_BOUND), false) {
        None => (c.file.get(&k(n::KDA_GATE_LOWER_BOUND)).is_none()).then_some(None),
        Some(v) if v == f32::NEG_INFINITY => Some(None),
        Some(v) if v.is_finite() => Some(Some(v)),
        Some(v) => {
            c.key_finding(
                &k(n::KDA_GATE_LOWER_BOUND),
                format!("is {v}, expected a finite value (or −inf for none)"),
            );
            None
        }
    };

    // MLA.
    let q_lora_rank = u32_or(c, &k(n::Q_LORA_RANK), bounds::K3_RANK_OR_ZERO, 0);
    let kv_lora_rank = c.u32_in(&k(n::KV_LORA_RANK), bounds::K3_DIM, true);
    let key_length_mla = c.u32_in(&k(n::KEY_LENGTH_MLA), bounds::K3_DIM, true);
    let value_length_mla = c.u32_in(&k(n::VALUE_LENGTH_MLA), bounds::K3_DIM, true);
    let rope_dim = if any_mla {
        c.u32_in(&k(keys::ROPE_DIMENSION_COUNT), bounds::K3_DIM, true)
    } else {
        u32_or(c, &k(keys::ROPE_DIMENSION_COUNT), bounds::K3_DIM, 0)
    };
    if let (Some(d_r), Some(kl)) = (rope_dim, key_length_mla) {
        if any_mla && d_r >= kl {
            c.key_finding(
                &k(keys::ROPE_DIMENSION_COUNT),
                format!("is {d_r}, expected less than attention.key_length_mla ({kl}): the rest of a query head is its nope part"),
            );
        }
    }
    if let (Some(r), Some(d_r), true) = (kv_lora_rank, rope_dim, any_mla) {
        // The MLA cache row is key_length wide: the latent and the rope part.
        match c.file.get(&k(keys::KEY_LENGTH)) {
            Some(_) => {
                if let Some(kl) = c.u32(&k(keys::KEY_LENGTH), true) {
                    if u64::from(kl) != r + d_r {
                        c.key_finding(
                            &k(keys::KEY_LENGTH),
                            format!(
                                "is {kl}, expected kv_lora_rank + rope.dimension_count = {}",
                                r + d_r
                            ),
                        );
                    }
                }
            }
            None => {
                if let (Some(h), Some(e)) = (heads, hidden) {
                    if e / h as u64 != r + d_r {
                        c.key_finding(
                            &k(keys::KEY_LENGTH),
                            format!("missing: llama.cpp then sizes the MLA cache row as embedding_length / head_count = {}, not kv_lora_rank + rope.dimension_count = {}", e / h as u64, r + d_r),
                        );
                    }
                }
            }
        }
    }
    // value_length is read and then overwritten with kv_lora_rank by llama.cpp: only its
    // type matters.
    if c.file.get(&k(keys::VALUE_LENGTH)).is_some() {
        c.u32(&k(keys::VALUE_LENGTH), true);
    }
    if let Some(Value::Bool(false)) = c.file.get(&k(keys::CAUSAL)) {
        c.key_finding(&k(keys::CAUSAL), "is false: this target attends causally");
    }
    for s in [keys::ROPE_FREQ_BASE, keys::ROPE_SCALING_FACTOR] {
        if c.file.get(&k(s)).is_some() {
            // Read generically by llama.cpp and unused (NoPE): a type check only.
            c.f32(&k(s), true);
        }
    }

    // FFN and MoE.
    let ffn = match per_layer(c, &k(keys::FEED_FORWARD_LENGTH), layers_n, false) {
        Some(v) => Some(v[0]),
        None if c.file.get(&k(keys::FEED_FORWARD_LENGTH)).is_none() => Some(0),
        None => None,
    };
    let dense_layers = u32_or(c, &k(n::LEADING_DENSE_BLOCK_COUNT), 0..=u32::MAX as u64, 0)
        .map(|d| (d as usize).min(layers_n));
    let any_moe = dense_layers.is_some_and(|d| d < layers_n);
    let any_dense = dense_layers.is_some_and(|d| d > 0);
    if let (Some(f), true) = (ffn, any_dense) {
        if !bounds::FEED_FORWARD_LENGTH.contains(&f) {
            c.key_finding(
                &k(keys::FEED_FORWARD_LENGTH),
                format!(
                    "is {f} for the dense layers, expected {}..={}",
                    bounds::FEED_FORWARD_LENGTH.start(),
                    bounds::FEED_FORWARD_LENGTH.end()
                ),
            );
        }
    }
    let experts = u32_or(c, &k(n::EXPERT_COUNT), bounds::K3_EXPERTS, 0);
    // One count routes every MoE layer (llama.cpp's `n_expert_used()`).
    let experts_used = match per_layer(c, &k(n::EXPERT_USED_COUNT), layers_n, false) {
        Some(v) => {
            let moe = &v[dense_layers.unwrap_or(0).min(layers_n)..];
            match moe.iter().position(|&x| Some(&x) != moe.first()) {
                Some(j) => {
                    c.key_finding(
                        &k(n::EXPERT_USED_COUNT),
                        format!(
                            "varies over the MoE layers ({} then {}): llama.cpp routes every layer with one count",
                            moe[0], moe[j]
                        ),
                    );
                    None
                }
                None => Some(moe.first().copied().unwrap_or(v[0])),
            }
        }
        None if c.file.get(&k(n::EXPERT_USED_COUNT)).is_none() => Some(0),
        None => None,
    };
    let expert_ffn = per_layer(c, &k(n::EXPERT_FEED_FORWARD_LENGTH), layers_n, true).map(|v| v[0]);
    let shared_experts = c.u32_in(&k(n::EXPERT_SHARED_COUNT), bounds::K3_EXPERTS, true);
    let gating = match c.u32(&k(n::EXPERT_GATING_FUNC), true) {
        Some(id) => match Gating::from_id(id) {
            Some(g) => Some(g),
            None => {
                c.key_finding(
                    &k(n::EXPERT_GATING_FUNC),
                    format!("is {id}, expected 1 (softmax), 2 (sigmoid), 3 (softmax over the selected) or 4 (sqrt-softplus)"),
                );
                None
            }
        },
        None => None,
    };
    let expert_latent = u32_or(
        c,
        &k(n::EXPERT_LATENT_LENGTH),
        0..=*bounds::EMBEDDING_LENGTH.end(),
        0,
    );
    let expert_weights_scale = finite_f32(c, &k(n::EXPERT_WEIGHTS_SCALE), Some(0.0));
    let expert_weights_norm = match c.file.get(&k(n::EXPERT_WEIGHTS_NORM)) {
        None => Some(false),
        Some(_) => c.bool(&k(n::EXPERT_WEIGHTS_NORM)),
    };
    let expert_groups =
        u32_or(c, &k(n::EXPERT_GROUP_COUNT), bounds::K3_EXPERTS, 0).map(|g| g.max(1));
    let expert_groups_used = u32_or(c, &k(n::EXPERT_GROUP_USED_COUNT), bounds::K3_EXPERTS, 0);
    if any_moe {
        match (experts, experts_used) {
            (Some(0), _) => c.key_finding(
                &k(n::EXPERT_COUNT),
                "is 0 (or missing), but layers from leading_dense_block_count on are MoE layers",
            ),
            (Some(e), Some(u)) if u == 0 || u > e => c.key_finding(
                &k(n::EXPERT_USED_COUNT),
                format!("is {u}, expected 1..={e} (the expert count)"),
            ),
            _ => {}
        }
        if expert_ffn == Some(0) {
            c.key_finding(
                &k(n::EXPERT_FEED_FORWARD_LENGTH),
                "is 0, but the file has MoE layers",
            );
        }
        if let (Some(g), Some(e)) = (expert_groups, experts) {
            if g > 1 {
                if g >= e.max(1) || e % g != 0 {
                    c.key_finding(
                        &k(n::EXPERT_GROUP_COUNT),
                        format!(
                            "is {g}, expected fewer groups than the {e} experts, dividing them"
                        ),
                    );
                } else if let Some(gu) = expert_groups_used {
                    if gu == 0 || gu >= g {
                        c.key_finding(
                            &k(n::EXPERT_GROUP_USED_COUNT),
                            format!("is {gu}, expected 1..{g} (fewer than the groups)"),
                        );
                    } else if let Some(u) = experts_used {
                        if u > gu * (e / g) {
                            c.key_finding(
                                &k(n::EXPERT_USED_COUNT),
                                format!(
                                    "is {u}, more than the {} experts the {gu} used groups hold",
                                    gu * (e / g)
                                ),
                            );
                        }
                    }
                }
                if e / g < 2 {
                    c.key_finding(
                        &k(n::EXPERT_GROUP_COUNT),
                        format!(
                            "is {g}: groups of {} experts; a group is scored by its best two",
                            e / g
                        ),
                    );
                }
            }
        }
    }
    let res_block = c.u32_in(&k(n::ATTN_RES_BLOCK_SIZE), 0..=u32::MAX as u64, true);
    let situ_beta = match finite_f32(c, &k(n::SITU_BETA), None) {
        Some(0.0) => {
            c.key_finding(
                &k(n::SITU_BETA),
                "is 0, expected a non-zero value (SiTU divides by it)",
            );
            None
        }
        other => other,
    };
    let situ_linear_beta = finite_f32(c, &k(n::SITU_LINEAR_BETA), None);

    let (hidden, heads, mla, kda_head_dim, conv_kernel, gate_lower_bound, context, eps) = (
        hidden?,
        heads?,
        mla?,
        kda_head_dim?,
        conv_kernel?,
        gate_lower_bound?,
        context?,
        eps?,
    );
    let (q_lora_rank, kv_lora_rank, key_length_mla, value_length_mla, rope_dim) = (
        q_lora_rank?,
        kv_lora_rank?,
        key_length_mla?,
        value_length_mla?,
        rope_dim?,
    );
    let (ffn, dense_layers, experts, experts_used, expert_ffn, shared_experts, gating) = (
        ffn?,
        dense_layers?,
        experts?,
        experts_used?,
        expert_ffn?,
        shared_experts?,
        gating?,
    );
    let (expert_latent, expert_weights_scale, expert_weights_norm, expert_groups) = (
        expert_latent?,
        expert_weights_scale?,
        expert_weights_norm?,
        expert_groups?,
    );
    let (expert_groups_used, res_block, situ_beta, situ_linear_beta) = (
        expert_groups_used?,
        res_block?,
        situ_beta?,
        situ_linear_beta?,
    );
    if any_mla && rope_dim >= key_length_mla {
        return None;
    }
    let hp = KimiK3Hparams {
        hidden: hidden as usize,
        layers: layers_n,
        vocab: 0,
        context: context as usize,
        eps,
        heads,
        mla,
        kda_head_dim: kda_head_dim as usize,
        conv_kernel: conv_kernel as usize,
        gate_lower_bound,
        q_lora_rank: q_lora_rank as usize,
        kv_lora_rank: kv_lora_rank as usize,
        rope_dim: rope_dim as usize,
        key_length_mla: key_length_mla as usize,
        value_length_mla: value_length_mla as usize,
        ffn: ffn as usize,
        dense_layers,
        experts: experts as usize,
        experts_used: experts_used as usize,
        expert_groups: expert_groups as usize,
        expert_groups_used: expert_groups_used as usize,
        expert_ffn: expert_ffn as usize,
        shared_experts: shared_experts as usize,
        expert_latent: expert_latent as usize,
        expert_weights_scale,
        expert_weights_norm,
        gating,
        res_block: res_block as usize,
        situ_beta,
        situ_linear_beta,
    };
    if any_kda && hp.kda_inner() as u64 > *bounds::FEED_FORWARD_LENGTH.end() {
        c.key_finding(
            &k(n::KDA_HEAD_DIM),
            format!(
                "gives a KDA width of {} (heads × head_dim), above {}",
                hp.kda_inner(),
                bounds::FEED_FORWARD_LENGTH.end()
            ),
        );
        return None;
    }

    let vocab = c.vocab_rows(ARCH, hidden)?;
    let hp = KimiK3Hparams {
        vocab: vocab as usize,
        ..hp
    };
    let e = hidden;
    let token_embd = c.tensor(tensors::TOKEN_EMBD, Role::Matrix, &[e, vocab]);
    let output_norm = c.tensor(tensors::OUTPUT_NORM, Role::Vector, &[e]);
    let output = c.tensor(tensors::OUTPUT, Role::Matrix, &[e, vocab]);
    let output_res_score = if res_block > 0 {
        c.tensor(n::OUTPUT_RES_SCORE, Role::Vector, &[e])
    } else {
        None
    };
    let layer_refs: Vec<Option<K3LayerRefs<'f>>> =
        (0..layers_n).map(|i| check_layer(c, i, &hp)).collect();
    let (vocab_keys, special) = check_vocab(c, vocab);
    // What llama.cpp loads but its kimi-k3 graph cannot run, named before the catch-all.
    for i in 0..layers_n {
        for (suffix, why) in n::UNRUN {
            let name = format!("blk.{i}.{suffix}");
            if c.has(&name) {
                c.findings.push(Finding::tensor(&name, why));
                if let Ok(t) = c.file.tensor(&name) {
                    c.judged(&t.info.name);
                }
            }
        }
    }
    c.no_other_tensors(KIND);
    let output_res_score = match (res_block > 0, output_res_score) {
        (true, None) => return None,
        (_, s) => s,
    };
    Some(KimiK3File {
        hparams: hp,
        token_embd: token_embd?,
        output_norm: output_norm?,
        output: output?,
        output_res_score,
        layers: layer_refs.into_iter().collect::<Option<Vec<_>>>()?,
        vocab: vocab_keys,
        special,
    })
}

fn check_layer<'f>(
    c: &mut Checker<'f, '_>,
    i: usize,
    h: &KimiK3Hparams,
) -> Option<K3LayerRefs<'f>> {
    let t = |s: &str| format!("blk.{i}.{s}");
    let (e, hd, d) = (h.hidden as u64, h.heads as u64, h.kda_head_dim as u64);
    let d_in = hd * d;
    let attn_norm = c.tensor(&t(n::ATTN_NORM), Role::Vector, &[e]);
    let ffn_norm = c.tensor(&t(n::FFN_NORM), Role::Vector, &[e]);
    let (attn_res_score, ffn_res_score) = if h.res_block > 0 {
        (
            Some(c.tensor(&t(n::ATTN_RES_SCORE), Role::Vector, &[e])),
            Some(c.tensor(&t(n::FFN_RES_SCORE), Role::Vector, &[e])),
        )
    } else {
        (None, None)
    };
    let mixer = if h.mla[i] {
        let (r_q, r_kv) = (h.q_lora_rank as u64, h.kv_lora_rank as u64);
        let (d_n, d_r, d_v) = (
            h.nope_dim() as u64,
            h.rope_dim as u64,
            h.value_length_mla as u64,
        );
        let q_width = hd * (d_n + d_r);
        let q = if c.has(&t(n::ATTN_Q_A_NORM)) {
            if r_q == 0 {
                c.findings.push(Finding::tensor(
                    t(n::ATTN_Q_A_NORM),
                    "selects the LoRA query, but attention.q_lora_rank is 0 or missing",
                ));
                if let Ok(x) = c.file.tensor(&t(n::ATTN_Q_A_NORM)) {
                    c.judged(&x.info.name);
                }
                None
            } else {
                let norm = c.tensor(&t(n::ATTN_Q_A_NORM), Role::Vector, &[r_q]);
                let a = c.tensor(&t(n::ATTN_Q_A), Role::Matrix, &[e, r_q]);
                let b = c.tensor(&t(n::ATTN_Q_B), Role::Matrix, &[r_q, q_width]);
                match (a, norm, b) {
                    (Some(a), Some(norm), Some(b)) => Some(MlaQuery::Lora { a, norm, b }),
                    _ => None,
                }
            }
        } else {
            c.tensor(&t(n::ATTN_Q), Role::Matrix, &[e, q_width])
                .map(MlaQuery::Plain)
        };
        let kv_a_mqa = c.tensor(&t(n::ATTN_KV_A_MQA), Role::Matrix, &[e, r_kv + d_r]);
        let kv_a_norm = c.tensor(&t(n::ATTN_KV_A_NORM), Role::Vector, &[r_kv]);
        let k_b = c.tensor(&t(n::ATTN_K_B), Role::Matrix, &[d_n, r_kv, hd]);
        let v_b = c.tensor(&t(n::ATTN_V_B), Role::Matrix, &[r_kv, d_v, hd]);
        let gate = c.optional_tensor(&t(n::ATTN_GATE), Role::Matrix, &[e, hd * d_v]);
        let gate_bad = c.has(&t(n::ATTN_GATE)) && gate.is_none();
        let output = c.tensor(&t(n::ATTN_OUTPUT), Role::Matrix, &[hd * d_v, e]);
        (|| {
            if gate_bad {
                return None;
            }
            Some(MixerRefs::Mla(Box::new(MlaRefs {
                q: q?,
                kv_a_mqa: kv_a_mqa?,
                kv_a_norm: kv_a_norm?,
                k_b: k_b?,
                v_b: v_b?,
                gate,
                output: output?,
            })))
        })()
    } else {
        let kk = h.conv_kernel as u64;
        let q = c.tensor(&t(n::ATTN_Q), Role::Matrix, &[e, d_in]);
        let k = c.tensor(&t(n::ATTN_K), Role::Matrix, &[e, d_in]);
        let v = c.tensor(&t(n::ATTN_V), Role::Matrix, &[e, d_in]);
        let conv_q = c.tensor(&t(n::SSM_CONV1D_Q), Role::Matrix, &[kk, 1, d_in]);
        let conv_k = c.tensor(&t(n::SSM_CONV1D_K), Role::Matrix, &[kk, 1, d_in]);
        let conv_v = c.tensor(&t(n::SSM_CONV1D_V), Role::Matrix, &[kk, 1, d_in]);
        let f_a = c.tensor(&t(n::SSM_F_A), Role::Matrix, &[e, d]);
        let f_b = c.tensor(&t(n::SSM_F_B), Role::Matrix, &[d, d_in]);
        let beta = c.tensor(&t(n::SSM_BETA), Role::Matrix, &[e, hd]);
        let a = c.tensor(&t(n::SSM_A), Role::Vector, &[hd]);
        let dt_bias = c.tensor(&t(n::SSM_DT_BIAS), Role::Vector, &[d_in]);
        let g = c.tensor(&t(n::SSM_G), Role::Matrix, &[e, d_in]);
        let norm = c.tensor(&t(n::SSM_NORM), Role::Vector, &[d]);
        let output = c.tensor(&t(n::ATTN_OUTPUT), Role::Matrix, &[d_in, e]);
        (|| {
            Some(MixerRefs::Kda(Box::new(KdaRefs {
                q: q?,
                k: k?,
                v: v?,
                conv_q: conv_q?,
                conv_k: conv_k?,
                conv_v: conv_v?,
                f_a: f_a?,
                f_b: f_b?,
                beta: beta?,
                a: a?,
                dt_bias: dt_bias?,
                g: g?,
                norm: norm?,
                output: output?,
            })))
        })()
    };
    // Every tensor of the layer is looked up (each gets its own finding) before any is
    // required.
    let ffn = if i < h.dense_layers {
        let f = h.ffn as u64;
        let gate = c.tensor(&t(n::FFN_GATE), Role::Matrix, &[e, f]);
        let up = c.tensor(&t(n::FFN_UP), Role::Matrix, &[e, f]);
        let down = c.tensor(&t(n::FFN_DOWN), Role::Matrix, &[f, e]);
        (|| {
            Some(FfnRefs::Dense(SituRefs {
                gate: gate?,
                up: up?,
                down: down?,
            }))
        })()
    } else {
        let (ne, fe, el) = (
            h.experts as u64,
            h.expert_ffn as u64,
            h.expert_width() as u64,
        );
        let router = c.tensor(&t(n::FFN_GATE_INP), Role::Matrix, &[e, ne]);
        let probs_bias = c.tensor(&t(n::FFN_EXP_PROBS_B), Role::Vector, &[ne]);
        let gate_exps = c.tensor(&t(n::FFN_GATE_EXPS), Role::Matrix, &[el, fe, ne]);
        let up_exps = c.tensor(&t(n::FFN_UP_EXPS), Role::Matrix, &[el, fe, ne]);
        let down_exps = c.tensor(&t(n::FFN_DOWN_EXPS), Role::Matrix, &[fe, el, ne]);
        let routed = if h.expert_latent > 0 {
            let down = c.tensor(&t(n::FFN_ROUTED_DOWN), Role::Matrix, &[e, el]);
            let up = c.tensor(&t(n::FFN_ROUTED_UP), Role::Matrix, &[el, e]);
            let norm = c.optional_tensor(&t(n::FFN_ROUTED_NORM), Role::Vector, &[el]);
            let norm_bad = c.has(&t(n::FFN_ROUTED_NORM)) && norm.is_none();
            Some((down, up, norm, norm_bad))
        } else {
            None
        };
        let fs = fe * (h.shared_experts as u64).max(1);
        let names = [n::FFN_GATE_SHEXP, n::FFN_UP_SHEXP, n::FFN_DOWN_SHEXP];
        let present = names.map(|s| c.has(&t(s)));
        let shared = if present.iter().any(|&p| p) {
            let gate = c.tensor(&t(names[0]), Role::Matrix, &[e, fs]);
            let up = c.tensor(&t(names[1]), Role::Matrix, &[e, fs]);
            let down = c.tensor(&t(names[2]), Role::Matrix, &[fs, e]);
            Some((gate, up, down))
        } else {
            None
        };
        (|| {
            let (routed_down, routed_up, routed_norm) = match routed {
                Some((down, up, norm, false)) => (Some(down?), Some(up?), norm),
                Some((_, _, _, true)) => return None,
                None => (None, None, None),
            };
            let shared = match shared {
                Some((gate, up, down)) => Some(SituRefs {
                    gate: gate?,
                    up: up?,
                    down: down?,
                }),
                None => None,
            };
            Some(FfnRefs::Moe(Box::new(MoeRefs {
                router: router?,
                probs_bias: probs_bias?,
                gate_exps: gate_exps?,
                up_exps: up_exps?,
                down_exps: down_exps?,
                routed_down,
                routed_up,
                routed_norm,
                shared,
            })))
        })()
    };
    Some(K3LayerRefs {
        attn_norm: attn_norm?,
        ffn_norm: ffn_norm?,
        attn_res_score: match attn_res_score {
            Some(s) => Some(s?),
            None => None,
        },
        ffn_res_score: match ffn_res_score {
            Some(s) => Some(s?),
            None => None,
        },
        mixer: mixer?,
        ffn: ffn?,
    })
}

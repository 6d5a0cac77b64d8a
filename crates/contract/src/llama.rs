//! A target in llama.cpp's `llama` layout (Llama 2 / 3.x, SmolLM, Mistral-style models):
//! keys `llama.*`, tensors `token_embd`, `blk.{i}.*`, `output_norm`, `output` unless the
//! LM head is tied to the embedding, and `rope_freqs` when Llama 3's frequency factors
//! are given (what llama.cpp reads and how its graph uses it: `docs/LLAMA-CPP.md` §5).
//!
//! Keys as llama.cpp reads them: `context_length`, `embedding_length`, `block_count`,
//! `feed_forward_length`, `attention.head_count`, `attention.layer_norm_rms_epsilon`
//! required; `attention.head_count_kv` (default: head_count), `attention.key_length` =
//! `value_length` = `rope.dimension_count` (default hidden / heads; llama.cpp refuses the
//! file when they differ), `rope.freq_base` (default 10,000), the RoPE scaling keys
//! (`rope.scaling.type` none / linear / yarn, its `factor` or the old `rope.scale_linear`,
//! `original_context_length`, `attn_factor`) and `vocab_size` (the embedding's rows)
//! optional. llama.cpp's `llama` graph scales attention logits by `1/√head size` and never
//! reads `attention.scale`, so neither does this contract.
//!
//! Tensors: per layer `attn_norm`, either `attn_q` / `attn_k` / `attn_v` or the fused
//! `attn_qkv`, `attn_output`, `ffn_norm`, `ffn_gate` / `ffn_up` / `ffn_down`, and the
//! optional biases llama.cpp's graph adds (`attn_q/k/v.bias` or `attn_qkv.bias`,
//! `attn_output.bias`, `ffn_gate/up/down.bias`). What llama.cpp would run differently is
//! refused by name: experts (`expert_count` above 0: Mixtral-style MoE), LongRoPE scaling,
//! per-tensor `*.scale` factors, per-layer head counts or FFN widths.

use dspark_gguf::{GgmlType, GgufFile, Value};

use crate::bounds;
use crate::check::{Checker, Role, TensorRef};
use crate::finding::ContractError;
use crate::names::{key, keys};
use crate::vocab::{check_vocab, GgufVocab, SpecialTokens};

/// `general.architecture` of this kind.
pub const ARCH: &str = "llama";

/// What the contract calls this kind in messages.
pub const KIND: &str = "llama target";

/// llama.cpp's default RoPE base when `rope.freq_base` is absent.
pub const DEFAULT_ROPE_BASE: f32 = 10_000.0;

/// Keys of llama.cpp's `llama` layout beyond the shared ones.
pub mod names_llama {
    /// Experts (a Mixtral-style MoE when above 0).
    pub const EXPERT_COUNT: &str = "expert_count";
    /// Experts per token.
    pub const EXPERT_USED_COUNT: &str = "expert_used_count";
    /// The frequency factors of Llama 3's RoPE scaling (`[rope dims / 2]`, F32).
    pub const ROPE_FREQS: &str = "rope_freqs.weight";
}

/// How RoPE positions are scaled (`rope.scaling.type`; llama.cpp's default is `linear`,
/// which with a factor of 1 is no scaling).
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RopeScalingKind {
    /// No scaling (the factor is ignored).
    None,
    /// Positions divided by the factor.
    Linear,
    /// YaRN: per-dimension interpolation between the scaled and unscaled angles, with
    /// llama.cpp's magnitude correction.
    Yarn,
}

/// RoPE scaling as llama.cpp derives it from the keys.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct RopeScaling {
    /// `rope.scaling.type`.
    #[serde(rename = "type")]
    pub kind: RopeScalingKind,
    /// `rope.scaling.factor` (or `rope.scale_linear`); 1 when absent or 0.
    pub factor: f32,
    /// `rope.scaling.original_context_length` (default: the context length).
    pub original_context: u32,
    /// `rope.scaling.attn_factor` (default 1).
    pub attn_factor: f32,
}

/// The hyper-parameters of a checked llama target (serialized under their GGUF key
/// names).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct LlamaHparams {
    /// `embedding_length`.
    #[serde(rename = "embedding_length")]
    pub hidden: usize,
    /// `block_count`.
    #[serde(rename = "block_count")]
    pub layers: usize,
    /// `attention.head_count`.
    #[serde(rename = "head_count")]
    pub heads: usize,
    /// `attention.head_count_kv`.
    #[serde(rename = "head_count_kv")]
    pub kv_heads: usize,
    /// `attention.key_length` (= value length = rotary dimensions).
    pub head_dim: usize,
    /// `feed_forward_length`.
    #[serde(rename = "feed_forward_length")]
    pub ffn: usize,
    /// Rows of `token_embd` (= tokens in the vocabulary).
    pub vocab: usize,
    /// `context_length`.
    #[serde(rename = "context_length")]
    pub context: usize,
    /// `attention.layer_norm_rms_epsilon`.
    #[serde(rename = "rms_eps")]
    pub eps: f32,
    /// `rope.freq_base`.
    #[serde(rename = "rope_freq_base")]
    pub rope_base: f32,
    /// RoPE scaling.
    pub rope_scaling: RopeScaling,
}

/// A layer's query, key and value projections: separate, or fused in one matrix whose
/// rows are the queries', then the keys', then the values'.
#[derive(Clone, Debug, PartialEq)]
#[allow(clippy::large_enum_variant)] // one per layer, built once: size does not matter
pub enum Qkv<'f> {
    /// `attn_q`, `attn_k`, `attn_v` and their optional biases.
    Separate {
        /// `attn_q.weight`.
        q: TensorRef<'f>,
        /// `attn_k.weight`.
        k: TensorRef<'f>,
        /// `attn_v.weight`.
        v: TensorRef<'f>,
        /// `attn_q.bias`.
        q_bias: Option<TensorRef<'f>>,
        /// `attn_k.bias`.
        k_bias: Option<TensorRef<'f>>,
        /// `attn_v.bias`.
        v_bias: Option<TensorRef<'f>>,
    },
    /// `attn_qkv` and its optional bias.
    Fused {
        /// `attn_qkv.weight`.
        qkv: TensorRef<'f>,
        /// `attn_qkv.bias`.
        bias: Option<TensorRef<'f>>,
    },
}

/// One llama layer's tensors, by their GGUF names.
#[derive(Clone, Debug, PartialEq)]
#[allow(missing_docs)]
pub struct LlamaLayerRefs<'f> {
    pub attn_norm: TensorRef<'f>,
    pub qkv: Qkv<'f>,
    pub attn_output: TensorRef<'f>,
    pub attn_output_bias: Option<TensorRef<'f>>,
    pub ffn_norm: TensorRef<'f>,
    pub ffn_gate: TensorRef<'f>,
    pub ffn_up: TensorRef<'f>,
    pub ffn_down: TensorRef<'f>,
    pub ffn_gate_bias: Option<TensorRef<'f>>,
    pub ffn_up_bias: Option<TensorRef<'f>>,
    pub ffn_down_bias: Option<TensorRef<'f>>,
}

/// A GGUF that satisfies the `llama` contract: the proof value [`check`] alone creates.
#[derive(Clone, Debug)]
pub struct LlamaFile<'f> {
    hparams: LlamaHparams,
    token_embd: TensorRef<'f>,
    output_norm: TensorRef<'f>,
    output: Option<TensorRef<'f>>,
    rope_freqs: Option<TensorRef<'f>>,
    layers: Vec<LlamaLayerRefs<'f>>,
    vocab: Option<GgufVocab<'f>>,
    special: SpecialTokens,
}

impl<'f> LlamaFile<'f> {
    /// Hyper-parameters.
    pub fn hparams(&self) -> &LlamaHparams {
        &self.hparams
    }
    /// `token_embd.weight`, `[hidden, vocab]`.
    pub fn token_embd(&self) -> &TensorRef<'f> {
        &self.token_embd
    }
    /// `output_norm.weight`, `[hidden]`.
    pub fn output_norm(&self) -> &TensorRef<'f> {
        &self.output_norm
    }
    /// `output.weight`, `[hidden, vocab]`; `None` when tied to the embedding.
    pub fn output(&self) -> Option<&TensorRef<'f>> {
        self.output.as_ref()
    }
    /// `rope_freqs.weight`, `[head_dim / 2]`: Llama 3's per-frequency divisors.
    pub fn rope_freqs(&self) -> Option<&TensorRef<'f>> {
        self.rope_freqs.as_ref()
    }
    /// The layers.
    pub fn layers(&self) -> &[LlamaLayerRefs<'f>] {
        &self.layers
    }
}

impl<'f> crate::TargetContract<'f> for LlamaFile<'f> {
    fn arch(&self) -> &'static str {
        ARCH
    }
    fn kind(&self) -> &'static str {
        KIND
    }
    fn shape(&self) -> crate::TargetShape {
        crate::TargetShape {
            hidden: self.hparams.hidden,
            layers: self.hparams.layers,
            vocab: self.hparams.vocab,
        }
    }
    fn context(&self) -> usize {
        self.hparams.context
    }
    fn vocab(&self) -> Option<&GgufVocab<'f>> {
        self.vocab.as_ref()
    }
    fn special_tokens(&self) -> SpecialTokens {
        self.special
    }
    fn summary(&self) -> crate::TargetSummary {
        let h = &self.hparams;
        let scaling = match h.rope_scaling.kind {
            RopeScalingKind::None => String::new(),
            _ if h.rope_scaling.factor == 1.0 && self.rope_freqs.is_none() => String::new(),
            k => format!(", RoPE {k:?} ×{}", h.rope_scaling.factor).to_lowercase(),
        };
        let freqs = if self.rope_freqs.is_some() {
            ", RoPE frequency factors"
        } else {
            ""
        };
        crate::TargetSummary::new(
            ARCH,
            h,
            self.output.is_none(),
            self.vocab.as_ref(),
            self.special,
            format!(
                "hidden {}, {} layers, {}/{} heads of {}, FFN {}, vocabulary {}, context {}{scaling}{freqs}",
                h.hidden, h.layers, h.heads, h.kv_heads, h.head_dim, h.ffn, h.vocab, h.context
            ),
        )
    }
}

/// Checks `file` against the `llama` contract. `matrix_types` are the weight types the
/// caller's kernels multiply. Every finding is collected.
pub fn check<'f>(
    file: &'f GgufFile<'f>,
    matrix_types: &[GgmlType],
) -> Result<LlamaFile<'f>, ContractError> {
    let mut c = Checker::new(file, matrix_types);
    let value = check_inner(&mut c);
    c.finish(KIND, value)
}

/// A UINT32 key llama.cpp also reads as a per-layer array: an array is refused by name.
fn scalar_u32(
    c: &mut Checker<'_, '_>,
    key: &str,
    range: std::ops::RangeInclusive<u64>,
    required: bool,
    what: &str,
) -> Option<u64> {
    if let Some(Value::Array(_)) = c.file.get(key) {
        c.key_finding(
            key,
            format!("is an array: per-layer {what} are not supported"),
        );
        return None;
    }
    c.u32_in(key, range, required)
}

fn rope_scaling(c: &mut Checker<'_, '_>, context: Option<u64>) -> Option<RopeScaling> {
    let k = |s: &str| key(ARCH, s);
    let kind = match c.string(&k(keys::ROPE_SCALING_TYPE), false) {
        None | Some("linear") => Some(RopeScalingKind::Linear),
        Some("none") => Some(RopeScalingKind::None),
        Some("yarn") => Some(RopeScalingKind::Yarn),
        Some(other) => {
            c.key_finding(
                &k(keys::ROPE_SCALING_TYPE),
                format!("is `{other}`: a llama target's RoPE scaling is none, linear or yarn here (llama.cpp's longrope reads tensors dspark does not run)"),
            );
            None
        }
    };
    // llama.cpp: `factor`, else the old `scale_linear`; 0 (or absent) means 1.
    let factor_key = if c.file.get(&k(keys::ROPE_SCALING_FACTOR)).is_some() {
        k(keys::ROPE_SCALING_FACTOR)
    } else {
        k(keys::ROPE_SCALE_LINEAR)
    };
    let factor = match c.f32(&factor_key, false) {
        None if c.file.get(&factor_key).is_some() => None,
        None => Some(1.0),
        Some(0.0) => Some(1.0),
        Some(f) if f.is_finite() && (1.0 / 1024.0..=1024.0).contains(&f) => Some(f),
        Some(f) => {
            c.key_finding(
                &factor_key,
                format!("is {f}, expected 0 (unset) or 1/1024..=1024"),
            );
            None
        }
    };
    let original_context = match c.file.get(&k(keys::ROPE_SCALING_ORIGINAL_CONTEXT)) {
        None => context.map(|v| v as u32),
        Some(_) => c
            .u32_in(
                &k(keys::ROPE_SCALING_ORIGINAL_CONTEXT),
                bounds::CONTEXT_LENGTH,
                true,
            )
            .map(|v| v as u32),
    };
    let attn_factor = match c.file.get(&k(keys::ROPE_SCALING_ATTN_FACTOR)) {
        None => Some(1.0),
        Some(_) => c.positive_f32(&k(keys::ROPE_SCALING_ATTN_FACTOR), None, 1024.0),
    };
    Some(RopeScaling {
        kind: kind?,
        factor: factor?,
        original_context: original_context?,
        attn_factor: attn_factor?,
    })
}

fn check_inner<'f>(c: &mut Checker<'f, '_>) -> Option<LlamaFile<'f>> {
    c.architecture_is(ARCH)?;
    let k = |s: &str| key(ARCH, s);
    let hidden = c.u32_in(&k(keys::EMBEDDING_LENGTH), bounds::EMBEDDING_LENGTH, true);
    let layers = c.u32_in(&k(keys::BLOCK_COUNT), bounds::BLOCK_COUNT, true);
    let ffn = scalar_u32(
        c,
        &k(keys::FEED_FORWARD_LENGTH),
        bounds::FEED_FORWARD_LENGTH,
        true,
        "FFN widths",
    );
    let heads = scalar_u32(
        c,
        &k(keys::HEAD_COUNT),
        bounds::HEAD_COUNT,
        true,
        "head counts",
    );
    let context = c.u32_in(&k(keys::CONTEXT_LENGTH), bounds::CONTEXT_LENGTH, true);
    let kv_heads = match c.file.get(&k(keys::HEAD_COUNT_KV)) {
        None => heads,
        Some(_) => scalar_u32(
            c,
            &k(keys::HEAD_COUNT_KV),
            bounds::HEAD_COUNT,
            true,
            "head counts",
        ),
    };
    // Experts: llama.cpp runs a Mixtral-style MoE for this architecture; dspark does not.
    match c.file.get(&k(names_llama::EXPERT_COUNT)) {
        Some(Value::U32(0)) | None => {}
        Some(Value::U32(n)) => c.key_finding(
            &k(names_llama::EXPERT_COUNT),
            format!("is {n}: llama targets with experts (Mixtral-style MoE) are not supported"),
        ),
        Some(v) => c.key_finding(
            &k(names_llama::EXPERT_COUNT),
            format!("is {}, expected UINT32", v.type_name()),
        ),
    }
    let head_dim = c.head_dim(ARCH, hidden, heads);
    if let Some(hd) = head_dim {
        for (kk, what) in [
            (keys::VALUE_LENGTH, "the value head size"),
            (keys::ROPE_DIMENSION_COUNT, "the rotary dimensions"),
        ] {
            if c.file.get(&k(kk)).is_some() {
                if let Some(v) = c.u32(&k(kk), true) {
                    if u64::from(v) != hd {
                        c.key_finding(
                            &k(kk),
                            format!("is {v}: {what} must equal the key head size {hd} (llama.cpp refuses such a llama file)"),
                        );
                    }
                }
            }
        }
        if !hd.is_multiple_of(2) {
            c.key_finding(
                &k(keys::KEY_LENGTH),
                format!("is {hd}, expected an even head size (RoPE rotates pairs)"),
            );
        }
    }
    let eps = c.positive_f32(&k(keys::RMS_EPS), None, bounds::MAX_RMS_EPS);
    let rope_base = c.positive_f32(&k(keys::ROPE_FREQ_BASE), Some(DEFAULT_ROPE_BASE), f32::MAX);
    let scaling = rope_scaling(c, context);
    if c.bool(&k(keys::CAUSAL)) == Some(false) {
        c.key_finding(&k(keys::CAUSAL), "is false: these models attend causally");
    }
    let (hidden, layers, ffn, heads, kv_heads, head_dim, context, eps, rope_base, scaling) = (
        hidden?, layers?, ffn?, heads?, kv_heads?, head_dim?, context?, eps?, rope_base?, scaling?,
    );
    if kv_heads > heads || !heads.is_multiple_of(kv_heads) {
        c.key_finding(
            &k(keys::HEAD_COUNT_KV),
            format!("is {kv_heads}, which must divide the {heads} query heads"),
        );
        return None;
    }
    let vocab = c.vocab_rows(ARCH, hidden)?;
    let (qd, kvd) = (heads * head_dim, kv_heads * head_dim);
    let token_embd = c.tensor(
        crate::names::tensors::TOKEN_EMBD,
        Role::Matrix,
        &[hidden, vocab],
    );
    let output_norm = c.tensor(crate::names::tensors::OUTPUT_NORM, Role::Vector, &[hidden]);
    let output = c.optional_tensor(
        crate::names::tensors::OUTPUT,
        Role::Matrix,
        &[hidden, vocab],
    );
    let rope_freqs = c.optional_tensor(names_llama::ROPE_FREQS, Role::F32Vector, &[head_dim / 2]);
    let mut layer_refs = Vec::with_capacity(layers as usize);
    for i in 0..layers {
        layer_refs.push(check_layer(c, i, hidden, qd, kvd, ffn));
    }
    let (vocab_keys, special) = check_vocab(c, vocab);
    c.no_other_tensors(KIND);
    Some(LlamaFile {
        hparams: LlamaHparams {
            hidden: hidden as usize,
            layers: layers as usize,
            heads: heads as usize,
            kv_heads: kv_heads as usize,
            head_dim: head_dim as usize,
            ffn: ffn as usize,
            vocab: vocab as usize,
            context: context as usize,
            eps,
            rope_base,
            rope_scaling: scaling,
        },
        token_embd: token_embd?,
        output_norm: output_norm?,
        output,
        rope_freqs,
        layers: layer_refs.into_iter().collect::<Option<Vec<_>>>()?,
        vocab: vocab_keys,
        special,
    })
}

/// Tensor names of layer `i`: `blk.{i}.{suffix}`.
fn blk(i: u64, suffix: &str) -> String {
    format!("blk.{i}.{suffix}")
}

/// Tensors llama.cpp's `llama` loader accepts but dspark refuses, with why.
const UNRUN: [(&str, &str); 6] = [
    (
        "ffn_gate_inp.weight",
        "a Mixtral-style MoE router: llama targets with experts are not supported",
    ),
    (
        "attn_q.scale",
        "per-tensor scale factors (llama.cpp's NVFP4 / FP8 scales) are not supported",
    ),
    (
        "attn_k.scale",
        "per-tensor scale factors (llama.cpp's NVFP4 / FP8 scales) are not supported",
    ),
    (
        "attn_v.scale",
        "per-tensor scale factors (llama.cpp's NVFP4 / FP8 scales) are not supported",
    ),
    (
        "attn_output.scale",
        "per-tensor scale factors (llama.cpp's NVFP4 / FP8 scales) are not supported",
    ),
    (
        "ffn_down.scale",
        "per-tensor scale factors (llama.cpp's NVFP4 / FP8 scales) are not supported",
    ),
];

fn check_layer<'f>(
    c: &mut Checker<'f, '_>,
    i: u64,
    hidden: u64,
    qd: u64,
    kvd: u64,
    ffn: u64,
) -> Option<LlamaLayerRefs<'f>> {
    for (suffix, why) in UNRUN {
        let name = blk(i, suffix);
        if c.has(&name) {
            c.findings.push(crate::Finding::tensor(&name, why));
            if let Ok(t) = c.file.tensor(&name) {
                c.judged(&t.info.name);
            }
        }
    }
    let mut get = |suffix: &str, role: Role, ne: &[u64]| c.tensor(&blk(i, suffix), role, ne);
    let attn_norm = get("attn_norm.weight", Role::Vector, &[hidden]);
    let attn_output = get("attn_output.weight", Role::Matrix, &[qd, hidden]);
    let ffn_norm = get("ffn_norm.weight", Role::Vector, &[hidden]);
    let ffn_gate = get("ffn_gate.weight", Role::Matrix, &[hidden, ffn]);
    let ffn_up = get("ffn_up.weight", Role::Matrix, &[hidden, ffn]);
    let ffn_down = get("ffn_down.weight", Role::Matrix, &[ffn, hidden]);
    let mut opt = |suffix: &str, n: u64| c.optional_tensor(&blk(i, suffix), Role::Vector, &[n]);
    let attn_output_bias = opt("attn_output.bias", hidden);
    let ffn_gate_bias = opt("ffn_gate.bias", ffn);
    let ffn_up_bias = opt("ffn_up.bias", ffn);
    let ffn_down_bias = opt("ffn_down.bias", hidden);
    let qkv = if c.has(&blk(i, "attn_qkv.weight")) {
        let qkv = c.tensor(
            &blk(i, "attn_qkv.weight"),
            Role::Matrix,
            &[hidden, qd + 2 * kvd],
        );
        let bias = c.optional_tensor(&blk(i, "attn_qkv.bias"), Role::Vector, &[qd + 2 * kvd]);
        for part in [
            "attn_q.weight",
            "attn_k.weight",
            "attn_v.weight",
            "attn_q.bias",
            "attn_k.bias",
            "attn_v.bias",
        ] {
            let name = blk(i, part);
            if c.has(&name) {
                c.findings.push(crate::Finding::tensor(
                    &name,
                    "given beside the fused attn_qkv.weight: a layer has one or the other",
                ));
                if let Ok(t) = c.file.tensor(&name) {
                    c.judged(&t.info.name);
                }
            }
        }
        qkv.map(|qkv| Qkv::Fused { qkv, bias })
    } else {
        let q = c.tensor(&blk(i, "attn_q.weight"), Role::Matrix, &[hidden, qd]);
        let k = c.tensor(&blk(i, "attn_k.weight"), Role::Matrix, &[hidden, kvd]);
        let v = c.tensor(&blk(i, "attn_v.weight"), Role::Matrix, &[hidden, kvd]);
        let q_bias = c.optional_tensor(&blk(i, "attn_q.bias"), Role::Vector, &[qd]);
        let k_bias = c.optional_tensor(&blk(i, "attn_k.bias"), Role::Vector, &[kvd]);
        let v_bias = c.optional_tensor(&blk(i, "attn_v.bias"), Role::Vector, &[kvd]);
        match (q, k, v) {
            (Some(q), Some(k), Some(v)) => Some(Qkv::Separate {
                q,
                k,
                v,
                q_bias,
                k_bias,
                v_bias,
            }),
            _ => None,
        }
    };
    Some(LlamaLayerRefs {
        attn_norm: attn_norm?,
        qkv: qkv?,
        attn_output: attn_output?,
        attn_output_bias,
        ffn_norm: ffn_norm?,
        ffn_gate: ffn_gate?,
        ffn_up: ffn_up?,
        ffn_down: ffn_down?,
        ffn_gate_bias,
        ffn_up_bias,
        ffn_down_bias,
    })
}

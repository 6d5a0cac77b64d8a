//! llama.cpp's `dflash` drafter layout (`docs/LLAMA-CPP.md` §2): what
//! llama.cpp's converter writes for a Qwen3-backbone DFlash / DSpark drafter and its
//! loader reads, held to what dspark's runtime implements. It yields the same
//! [`DraftFile`] as the `dflash-draft` contract, so one loader runs both layouts.
//!
//! Keys are `dflash.<suffix>`. Required: `embedding_length`, `block_count`,
//! `feed_forward_length`, `attention.head_count`, `attention.head_count_kv`,
//! `context_length`, `attention.layer_norm_rms_epsilon`, `block_size`, `target_layers`
//! (INT32 or UINT32, 1-based: value v is the input of target layer v), and the carried
//! vocabulary (`tokenizer.ggml.*`, the target's) with `tokenizer.ggml.mask_token_id`.
//! Optional: `attention.key_length` (default hidden / heads), `attention.value_length`
//! (= the key length), `rope.freq_base` (default 10000, llama.cpp's), `rope.scaling.*`
//! (`yarn` only), `sample_from_anchor` (default true, llama.cpp's), `has_confidence_head`
//! (must agree with the tensors), `attention.causal` (must not be true).
//!
//! Refused, because they change what the drafter computes in ways the runtime does not
//! implement: value / embedding / attention scales, sliding windows, M-RoPE sections,
//! activations other than SiLU, DFlash2's convolutions and selector, DeepSeek-V4's hyper
//! connections, shared-KV layers (no `attn_v`), reduced draft vocabularies (`d2t`),
//! Gemma-style post norms and per-tensor scales (as unknown tensors). `logit_scale` and
//! `final_logit_softcapping` are accepted and ignored, as llama.cpp ignores them outside
//! DFlash2.

use dspark_gguf::{Array, GgmlType, GgufFile};

use crate::bounds;
use crate::check::{Checker, Role};
use crate::dflash_draft::{
    check_general, check_rope_scaling, ConfidenceRefs, DraftFile, DraftHparams, MarkovRefs,
};
use crate::finding::{ContractError, Finding};
use crate::layer::{attention_dims, check_layer, LayerRefs};
use crate::names::tensors::{LayerDims, LayerTensor};
use crate::names::{self, key, keys, llama_dflash as L, tensors, tokenizer};
use crate::vocab::{check_vocab, GgufVocab};

/// `general.architecture`.
pub const ARCH: &str = L::ARCH;

/// What the contract calls this kind in messages.
pub const KIND: &str = "llama.cpp dflash drafter";

/// llama.cpp's default RoPE base when `rope.freq_base` is absent.
pub const DEFAULT_ROPE_BASE: f32 = 10_000.0;

/// Keys that change the drafter's computation in ways the runtime does not implement.
const UNSUPPORTED: [(&str, &str); 16] = [
    (
        "dflash.attention.value_scale",
        "scaled attention outputs are not supported",
    ),
    (
        "dflash.embedding_scale",
        "scaled token embeddings are not supported",
    ),
    (
        "dflash.attention.scale",
        "a custom attention scale is not supported",
    ),
    (
        "dflash.attention.sliding_window",
        "sliding-window attention is not supported",
    ),
    (
        "dflash.attention.sliding_window_pattern",
        "sliding-window attention is not supported",
    ),
    (
        "dflash.rope.dimension_sections",
        "M-RoPE drafters are not supported",
    ),
    ("dflash.hidden_activation", "only SiLU FFNs are supported"),
    (
        "dflash.conv_kernel_size",
        "DFlash2 drafters are not supported",
    ),
    (
        "dflash.conv_group_size",
        "DFlash2 drafters are not supported",
    ),
    ("dflash.selector_rank", "DFlash2 drafters are not supported"),
    (
        "dflash.selector_top_k",
        "DFlash2 drafters are not supported",
    ),
    (
        "dflash.hyper_connection.count",
        "DeepSeek-V4 DSpark drafters are not supported",
    ),
    (
        "dflash.expert_count",
        "mixture-of-experts drafters are not supported",
    ),
    (
        "dflash.attention.q_lora_rank",
        "low-rank attention drafters are not supported",
    ),
    (
        "dflash.attention.kv_lora_rank",
        "low-rank attention drafters are not supported",
    ),
    (
        "dflash.rope.freq_base_swa",
        "sliding-window attention is not supported",
    ),
];

/// Tensors llama.cpp may carry that the runtime does not implement, and why.
fn unsupported_tensor(name: &str) -> Option<&'static str> {
    if name == L::D2T {
        return Some("reduced draft vocabularies (a d2t map) are not supported");
    }
    if name.starts_with("selector_") || name.contains("_conv_") {
        return Some("DFlash2 drafters are not supported");
    }
    if name.starts_with("hc_") || name.contains("_exps") {
        return Some("DeepSeek-V4 DSpark drafters are not supported");
    }
    if name.ends_with(".scale") || name.ends_with(".input_scale") {
        return Some("per-tensor scales are not supported");
    }
    if name.contains("post_attention_norm")
        || name.contains("post_ffw_norm")
        || name.contains("layer_output_scale")
        || name.contains("attn_sinks")
        || name.starts_with("rope_freqs")
    {
        return Some("this layer variant is not supported");
    }
    None
}

/// Checks `file` against llama.cpp's `dflash` layout as dspark runs it; `matrix_types`
/// are the weight types the caller's kernels multiply. Every finding is collected.
pub fn check<'f>(
    file: &'f GgufFile<'f>,
    matrix_types: &[GgmlType],
) -> Result<DraftFile<'f>, ContractError> {
    let mut c = Checker::new(file, matrix_types);
    let value = check_inner(&mut c);
    c.finish(KIND, value)
}

fn check_inner<'f>(c: &mut Checker<'f, '_>) -> Option<DraftFile<'f>> {
    match c.string(names::ARCHITECTURE, true)? {
        ARCH => {}
        other => {
            c.key_finding(
                names::ARCHITECTURE,
                format!("is `{other}`, expected `{ARCH}`"),
            );
            return None;
        }
    }
    check_general(c);
    let k = |s: &str| key(ARCH, s);
    c.unsupported_keys(&UNSUPPORTED);
    let hidden = c.u32_in(&k(keys::EMBEDDING_LENGTH), bounds::EMBEDDING_LENGTH, true);
    let layers = c.u32_in(&k(keys::BLOCK_COUNT), bounds::BLOCK_COUNT, true);
    let ffn = c.u32_in(
        &k(keys::FEED_FORWARD_LENGTH),
        bounds::FEED_FORWARD_LENGTH,
        true,
    );
    let heads = c.u32_in(&k(keys::HEAD_COUNT), bounds::HEAD_COUNT, true);
    let kv_heads = c.u32_in(&k(keys::HEAD_COUNT_KV), bounds::HEAD_COUNT, true);
    let context = c.u32_in(&k(keys::CONTEXT_LENGTH), bounds::CONTEXT_LENGTH, true);
    let head_dim = match c.file.get(&k(keys::KEY_LENGTH)) {
        Some(_) => c.u32_in(&k(keys::KEY_LENGTH), bounds::HEAD_DIM, true),
        None => match (hidden, heads) {
            (Some(h), Some(n)) if h % n == 0 && bounds::HEAD_DIM.contains(&(h / n)) => Some(h / n),
            (Some(_), Some(_)) => {
                c.key_finding(
                    &k(keys::KEY_LENGTH),
                    "missing, and embedding_length / head_count is not a head size",
                );
                None
            }
            _ => None,
        },
    };
    if let (Some(hd), Some(v)) = (head_dim, c.u32(&k(keys::VALUE_LENGTH), false)) {
        if u64::from(v) != hd {
            c.key_finding(
                &k(keys::VALUE_LENGTH),
                format!("is {v}, expected the key length {hd} (the runtime uses one head size)"),
            );
        }
    }
    let rope_base = c.positive_f32(&k(keys::ROPE_FREQ_BASE), Some(DEFAULT_ROPE_BASE), f32::MAX);
    let eps = c.positive_f32(&k(keys::RMS_EPS), None, bounds::MAX_RMS_EPS);
    let yarn = check_rope_scaling(c, ARCH);
    if let Some(hd) = head_dim {
        c.unsupported_rope_keys(ARCH, hd, matches!(yarn, Some(Some(_))), false);
    }
    let block_size = c.u32_in(&k(L::BLOCK_SIZE), bounds::BLOCK_SIZE, true);
    let ids = check_target_layers(c);
    let sample_from_anchor = c.bool(&k(L::SAMPLE_FROM_ANCHOR)).unwrap_or(true);
    let has_conf_key = c.bool(&k(L::HAS_CONFIDENCE_HEAD));

    // The carried vocabulary (the target's) sizes the Markov head and bounds the mask.
    let vocab = match c.file.get(tokenizer::TOKENS) {
        Some(dspark_gguf::Value::Array(Array::String(t)))
            if bounds::VOCAB.contains(&(t.len() as u64)) =>
        {
            Some(t.len() as u64)
        }
        Some(dspark_gguf::Value::Array(Array::String(t))) => {
            c.key_finding(
                tokenizer::TOKENS,
                format!(
                    "has {} tokens, expected {}..={}",
                    t.len(),
                    bounds::VOCAB.start(),
                    bounds::VOCAB.end()
                ),
            );
            None
        }
        Some(other) => {
            c.key_finding(
                tokenizer::TOKENS,
                format!("is {}, expected ARRAY[STRING]", other.type_name()),
            );
            None
        }
        None => {
            c.key_finding(
                tokenizer::TOKENS,
                "missing: a dflash drafter carries its target's vocabulary",
            );
            None
        }
    };
    let (vocab_keys, special) = match vocab {
        Some(v) => check_vocab(c, v),
        None => (None, Default::default()),
    };
    let _: Option<GgufVocab<'f>> = vocab_keys;
    let mask = match special.mask {
        Some(m) => Some(m),
        None => {
            if vocab.is_some() && c.file.get(tokenizer::MASK_ID).is_none() {
                c.key_finding(
                    tokenizer::MASK_ID,
                    "missing: the draft block is filled with the mask token",
                );
            }
            None
        }
    };

    let (hidden, layers, ffn, heads, kv_heads, head_dim) =
        (hidden?, layers?, ffn?, heads?, kv_heads?, head_dim?);
    let dims = attention_dims(
        c,
        &k(keys::HEAD_COUNT_KV),
        &k(keys::KEY_LENGTH),
        LayerDims {
            hidden,
            heads,
            kv_heads,
            head_dim,
            ffn,
        },
    );

    // Tensors.
    let file = c.file;
    for t in file.tensor_infos() {
        if let Some(why) = unsupported_tensor(&t.name) {
            c.findings.push(Finding::tensor(&t.name, why));
            c.judged(&t.name);
        }
    }
    let ids = ids?;
    let n_cap = ids.len() as u64;
    let fc = c.tensor(L::FC, Role::Matrix, &[n_cap * hidden, hidden]);
    let hidden_norm = c.tensor(L::HIDDEN_NORM, Role::Vector, &[hidden]);
    let dims = dims?;
    let layer_refs: Vec<Option<LayerRefs<'f>>> = (0..layers)
        .map(|i| {
            let v = LayerTensor::AttnV.name(i);
            if !c.has(&v) {
                c.findings.push(Finding::tensor(
                    &v,
                    "missing: shared-KV layers (V from the normalized K) are not supported",
                ));
                return None;
            }
            check_layer(c, i, &dims)
        })
        .collect();
    let output_norm = c.tensor(tensors::OUTPUT_NORM, Role::Vector, &[hidden]);
    let vocab = vocab?;
    let markov = check_markov(c, vocab);
    let confidence = check_confidence(c, hidden, markov.as_ref().and_then(|m| m.as_ref()));
    if let (Some(key_says), Some(conf)) = (has_conf_key, &confidence) {
        if key_says != conf.is_some() {
            c.key_finding(
                &k(L::HAS_CONFIDENCE_HEAD),
                format!(
                    "is {key_says}, but {} is {}",
                    L::CONF_PROJ,
                    if conf.is_some() { "present" } else { "absent" }
                ),
            );
        }
    }
    let token_embd = c.optional_tensor(tensors::TOKEN_EMBD, Role::Matrix, &[hidden, vocab]);
    let output = c.optional_tensor(tensors::OUTPUT, Role::Matrix, &[hidden, vocab]);
    c.no_other_tensors(KIND);
    if let Some(m) = mask {
        if u64::from(m) >= vocab {
            return None;
        }
    }
    Some(DraftFile {
        arch: ARCH,
        hparams: DraftHparams {
            hidden: hidden as usize,
            layers: layers as usize,
            heads: heads as usize,
            kv_heads: kv_heads as usize,
            head_dim: head_dim as usize,
            ffn: ffn as usize,
            block_size: block_size? as usize,
            target_layer_ids: ids,
            mask_token_id: mask?,
            sample_from_anchor,
            eps: eps?,
            rope_base: rope_base?,
            yarn: yarn?,
            target_vocab: Some(vocab as usize),
            target_layers: None,
            context: Some(context? as usize),
        },
        fc: fc?,
        hidden_norm: hidden_norm?,
        output_norm: output_norm?,
        layers: layer_refs.into_iter().collect::<Option<Vec<_>>>()?,
        markov: markov?,
        confidence: confidence?,
        token_embd,
        output,
    })
}

/// `dflash.target_layers`: 1-based (value v = the input of target layer v), INT32 or
/// UINT32 as llama.cpp's loader accepts, distinct; returned as dspark's 0-based ids.
fn check_target_layers(c: &mut Checker<'_, '_>) -> Option<Vec<usize>> {
    let k = key(ARCH, L::TARGET_LAYERS);
    let values: Vec<i64> = match c.file.get(&k) {
        Some(dspark_gguf::Value::Array(Array::I32(v))) => v.iter().map(|&x| i64::from(x)).collect(),
        Some(dspark_gguf::Value::Array(Array::U32(v))) => v.iter().map(|&x| i64::from(x)).collect(),
        Some(other) => {
            c.key_finding(
                &k,
                format!(
                    "is {}, expected ARRAY[INT32] or ARRAY[UINT32]",
                    other.type_name()
                ),
            );
            return None;
        }
        None => {
            c.key_finding(&k, "missing");
            return None;
        }
    };
    if !bounds::CAPTURED_LAYERS.contains(&(values.len() as u64)) {
        c.key_finding(
            &k,
            format!(
                "has {} layers, expected {}..={}",
                values.len(),
                bounds::CAPTURED_LAYERS.start(),
                bounds::CAPTURED_LAYERS.end()
            ),
        );
        return None;
    }
    let mut seen = std::collections::BTreeSet::new();
    let mut ok = true;
    for &v in &values {
        if v == 0 {
            c.key_finding(
                &k,
                "has 0 (the token embeddings as a feature), which the runtime does not capture",
            );
            ok = false;
        } else if v < 0 || v as u64 > *bounds::BLOCK_COUNT.end() {
            c.key_finding(
                &k,
                format!("has layer {v}, expected 1..={}", bounds::BLOCK_COUNT.end()),
            );
            ok = false;
        } else if !seen.insert(v) {
            c.key_finding(&k, format!("captures layer {v} twice"));
            ok = false;
        }
    }
    ok.then(|| values.iter().map(|&v| v as usize - 1).collect())
}

/// The Markov head: both `markov_w1.weight` and `markov_w2.weight`, `[R, V]` over the
/// carried vocabulary, or neither. `Some(None)` when absent, `None` after a finding.
fn check_markov<'f>(c: &mut Checker<'f, '_>, vocab: u64) -> Option<Option<MarkovRefs<'f>>> {
    match (c.dims(L::MARKOV_W1), c.has(L::MARKOV_W2)) {
        (None, false) => Some(None),
        (None, true) => {
            c.findings.push(Finding::tensor(
                L::MARKOV_W1,
                "missing (the Markov head needs w1 and w2)",
            ));
            None
        }
        (Some(_), false) => {
            c.findings.push(Finding::tensor(
                L::MARKOV_W2,
                "missing (the Markov head needs w1 and w2)",
            ));
            None
        }
        (Some(d), true) => {
            let Some(&r) = d.first() else {
                c.findings.push(Finding::tensor(
                    L::MARKOV_W1,
                    "has no dims, expected [rank, vocab]",
                ));
                return None;
            };
            if !c.tensor_dim_in(L::MARKOV_W1, "rank", r, bounds::MARKOV_RANK) {
                return None;
            }
            let w1 = c.tensor(L::MARKOV_W1, Role::Matrix, &[r, vocab]);
            let w2 = c.tensor(L::MARKOV_W2, Role::Matrix, &[r, vocab]);
            Some(Some(MarkovRefs {
                w1: w1?,
                w2: w2?,
                rank: r as usize,
                vocab: vocab as usize,
            }))
        }
    }
}

/// The confidence head: `conf_proj.weight` `[hidden + R, 1]` (any matrix type: llama.cpp's
/// converter writes it at the output type) and `conf_proj.bias` `[1]`, or neither; only
/// with a Markov head (llama.cpp reads them only for DSpark).
fn check_confidence<'f>(
    c: &mut Checker<'f, '_>,
    hidden: u64,
    markov: Option<&MarkovRefs<'f>>,
) -> Option<Option<ConfidenceRefs<'f>>> {
    let (has_w, has_b) = (c.has(L::CONF_PROJ), c.has(L::CONF_PROJ_BIAS));
    if !(has_w || has_b) {
        return Some(None);
    }
    let Some(m) = markov else {
        c.findings.push(Finding::tensor(
            L::CONF_PROJ,
            "present without a Markov head (llama.cpp reads it only for DSpark drafters)",
        ));
        return None;
    };
    if !(has_w && has_b) {
        let missing = if has_w {
            L::CONF_PROJ_BIAS
        } else {
            L::CONF_PROJ
        };
        c.findings.push(Finding::tensor(
            missing,
            "missing (the confidence head needs a weight and a bias)",
        ));
        return None;
    }
    let width = hidden + m.rank as u64;
    let weight = c.tensor(L::CONF_PROJ, Role::Matrix, &[width, 1]);
    let bias = c.tensor(L::CONF_PROJ_BIAS, Role::Vector, &[1]);
    Some(Some(ConfidenceRefs {
        weight: weight?,
        bias: bias?,
        with_markov: true,
    }))
}

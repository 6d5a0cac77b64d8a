//! The one table between checkpoint names and GGUF names, with each tensor's role.
//!
//! Source names are SpecForge's (no `model.` prefix), plus the DSpark head aliases other
//! producers use (`docs/GGUF.md` §6.3); GGUF names are the contract crate's
//! ([`dspark_contract::names::tensors`]). The table's order is the output's canonical
//! tensor order (`docs/OUTPUT-CONTRACT.md` §1). No other module spells a source tensor name.

use dspark_contract::names::tensors::{self as gguf, LayerTensor};

/// What a tensor is for; the type policy is a function of the role.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    /// A 2-D projection: fc, attention q/k/v/output, FFN gate/up/down.
    Projection,
    /// A low-rank Markov matrix (w1 or w2).
    Markov,
    /// An RMSNorm weight.
    Norm,
    /// The confidence head's weight.
    ConfidenceWeight,
    /// The confidence head's bias.
    ConfidenceBias,
    /// A drafter's own token embedding (optional).
    Embedding,
    /// A drafter's own LM head (optional).
    LmHead,
}

impl Role {
    /// Lower-case name for the report.
    pub fn name(self) -> &'static str {
        match self {
            Role::Projection => "projection",
            Role::Markov => "markov",
            Role::Norm => "norm",
            Role::ConfidenceWeight => "confidence_weight",
            Role::ConfidenceBias => "confidence_bias",
            Role::Embedding => "embedding",
            Role::LmHead => "lm_head",
        }
    }
}

/// Per-layer tensors in canonical order: (source suffix after `layers.{i}.`, the GGUF
/// tensor it becomes, role). The GGUF names and shapes are the contract's
/// ([`LayerTensor`]).
pub const LAYER_TENSORS: [(&str, LayerTensor, Role); 11] = [
    ("input_layernorm.weight", LayerTensor::AttnNorm, Role::Norm),
    (
        "self_attn.q_proj.weight",
        LayerTensor::AttnQ,
        Role::Projection,
    ),
    (
        "self_attn.k_proj.weight",
        LayerTensor::AttnK,
        Role::Projection,
    ),
    (
        "self_attn.v_proj.weight",
        LayerTensor::AttnV,
        Role::Projection,
    ),
    (
        "self_attn.q_norm.weight",
        LayerTensor::AttnQNorm,
        Role::Norm,
    ),
    (
        "self_attn.k_norm.weight",
        LayerTensor::AttnKNorm,
        Role::Norm,
    ),
    (
        "self_attn.o_proj.weight",
        LayerTensor::AttnOutput,
        Role::Projection,
    ),
    (
        "post_attention_layernorm.weight",
        LayerTensor::FfnNorm,
        Role::Norm,
    ),
    (
        "mlp.gate_proj.weight",
        LayerTensor::FfnGate,
        Role::Projection,
    ),
    ("mlp.up_proj.weight", LayerTensor::FfnUp, Role::Projection),
    (
        "mlp.down_proj.weight",
        LayerTensor::FfnDown,
        Role::Projection,
    ),
];

/// Tensors before the layers: (source names, GGUF name, role).
pub const HEAD_TENSORS: [(&[&str], &str, Role); 2] = [
    (&["fc.weight"], gguf::DFLASH_FC, Role::Projection),
    (
        &["hidden_norm.weight"],
        gguf::DFLASH_HIDDEN_NORM,
        Role::Norm,
    ),
];

/// Tensors after the layers, in canonical order: (source names, first preferred; GGUF
/// name; role). The DSpark heads and the optional embedding / LM head.
pub const TAIL_TENSORS: [(&[&str], &str, Role); 7] = [
    (&["norm.weight"], gguf::OUTPUT_NORM, Role::Norm),
    (
        &[
            "markov_head.markov_w1.weight",
            "logit_head.markov_head.markov_w1.weight",
            "dspark_markov_head.markov_w1.weight",
            "mtp.2.markov_head.markov_w1.weight",
        ],
        gguf::DSPARK_MARKOV_W1,
        Role::Markov,
    ),
    (
        &[
            "markov_head.markov_w2.weight",
            "logit_head.markov_head.markov_w2.weight",
            "dspark_markov_head.markov_w2.weight",
            "mtp.2.markov_head.markov_w2.weight",
        ],
        gguf::DSPARK_MARKOV_W2,
        Role::Markov,
    ),
    (
        &[
            "confidence_head.proj.weight",
            "logit_head.confidence_head.proj.weight",
            "dspark_confidence_head.weight",
            "mtp.2.confidence_head.proj.weight",
        ],
        gguf::DSPARK_CONFIDENCE_WEIGHT,
        Role::ConfidenceWeight,
    ),
    (
        &[
            "confidence_head.proj.bias",
            "logit_head.confidence_head.proj.bias",
            "dspark_confidence_head.bias",
            "mtp.2.confidence_head.proj.bias",
        ],
        gguf::DSPARK_CONFIDENCE_BIAS,
        Role::ConfidenceBias,
    ),
    (&["embed_tokens.weight"], gguf::TOKEN_EMBD, Role::Embedding),
    (&["lm_head.weight"], gguf::OUTPUT, Role::LmHead),
];

/// Source tensors that exist in some checkpoints but cannot be expressed in the
/// `dflash-draft` contract: refused with this explanation.
pub const UNREPRESENTABLE: [(&str, &str); 2] = [
    ("d2t", "a draft→target vocabulary map cannot be expressed in dflash-draft (one vocabulary for both Markov matrices)"),
    ("t2d", "a target→draft vocabulary map cannot be expressed in dflash-draft (one vocabulary for both Markov matrices)"),
];

/// Where a source tensor goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapped {
    /// GGUF tensor name.
    pub gguf: String,
    /// Role.
    pub role: Role,
    /// Sort key giving the canonical order.
    pub order: (u32, u64, u32),
    /// The draft layer, for per-layer tensors.
    pub layer: Option<u64>,
}

/// Maps a source tensor name to its GGUF name, role and canonical position.
pub fn map_source(name: &str) -> Option<Mapped> {
    for (i, (srcs, gguf, role)) in HEAD_TENSORS.iter().enumerate() {
        if srcs.contains(&name) {
            return Some(Mapped {
                gguf: gguf.to_string(),
                role: *role,
                order: (0, 0, i as u32),
                layer: None,
            });
        }
    }
    if let Some(rest) = name.strip_prefix("layers.") {
        let (idx, suffix) = rest.split_once('.')?;
        // Canonical decimal only: `layers.01.x` would collide with `layers.1.x`.
        if idx.is_empty()
            || (idx.len() > 1 && idx.starts_with('0'))
            || !idx.bytes().all(|b| b.is_ascii_digit())
        {
            return None;
        }
        let layer: u64 = idx.parse().ok()?;
        let (j, (_, tensor, role)) = LAYER_TENSORS
            .iter()
            .enumerate()
            .find(|(_, t)| t.0 == suffix)?;
        return Some(Mapped {
            gguf: tensor.name(layer),
            role: *role,
            order: (1, layer, j as u32),
            layer: Some(layer),
        });
    }
    for (i, (srcs, gguf, role)) in TAIL_TENSORS.iter().enumerate() {
        if srcs.contains(&name) {
            return Some(Mapped {
                gguf: gguf.to_string(),
                role: *role,
                order: (2, 0, i as u32),
                layer: None,
            });
        }
    }
    None
}

/// The role of a GGUF tensor this converter writes, by its GGUF name (either layout).
pub fn role_of_gguf(name: &str) -> Option<Role> {
    let name = dflash_draft_name(name);
    if let Some((_, t)) = LayerTensor::parse(name) {
        return LAYER_TENSORS.iter().find(|e| e.1 == t).map(|e| e.2);
    }
    HEAD_TENSORS
        .iter()
        .chain(TAIL_TENSORS.iter())
        .find(|e| e.1 == name)
        .map(|e| e.2)
}

/// The `dflash-draft` names llama.cpp's `dflash` layout spells differently, and its
/// spelling (`docs/LLAMA-CPP.md` §2.3); every other name is shared.
pub const LLAMA_NAMES: [(&str, &str); 6] = [
    (gguf::DFLASH_FC, dspark_contract::names::llama_dflash::FC),
    (
        gguf::DFLASH_HIDDEN_NORM,
        dspark_contract::names::llama_dflash::HIDDEN_NORM,
    ),
    (
        gguf::DSPARK_MARKOV_W1,
        dspark_contract::names::llama_dflash::MARKOV_W1,
    ),
    (
        gguf::DSPARK_MARKOV_W2,
        dspark_contract::names::llama_dflash::MARKOV_W2,
    ),
    (
        gguf::DSPARK_CONFIDENCE_WEIGHT,
        dspark_contract::names::llama_dflash::CONF_PROJ,
    ),
    (
        gguf::DSPARK_CONFIDENCE_BIAS,
        dspark_contract::names::llama_dflash::CONF_PROJ_BIAS,
    ),
];

/// A `dflash-draft` tensor name as llama.cpp's layout spells it.
pub fn llama_name(name: &str) -> &str {
    LLAMA_NAMES
        .iter()
        .find(|(d, _)| *d == name)
        .map_or(name, |(_, l)| l)
}

/// A tensor name of either layout as `dflash-draft` spells it.
pub fn dflash_draft_name(name: &str) -> &str {
    LLAMA_NAMES
        .iter()
        .find(|(_, l)| *l == name)
        .map_or(name, |(d, _)| d)
}

/// Why a source tensor that does not map is refused, when the contract cannot carry it.
pub fn unrepresentable(name: &str) -> Option<&'static str> {
    UNREPRESENTABLE
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, why)| *why)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_every_kind_of_name() {
        let m = map_source("layers.3.self_attn.o_proj.weight").unwrap();
        assert_eq!(
            (m.gguf.as_str(), m.role, m.layer),
            ("blk.3.attn_output.weight", Role::Projection, Some(3))
        );
        assert_eq!(
            map_source("mtp.2.markov_head.markov_w2.weight")
                .unwrap()
                .gguf,
            "dflash.dspark.markov.w2"
        );
        assert_eq!(map_source("norm.weight").unwrap().role, Role::Norm);
        assert_eq!(map_source("layers.01.mlp.up_proj.weight"), None);
        assert_eq!(map_source("layers.1.self_attn.q_proj.bias"), None);
        assert_eq!(map_source("model.norm.weight"), None);
        assert!(unrepresentable("d2t").is_some());
    }

    #[test]
    fn order_is_canonical() {
        let names = [
            "confidence_head.proj.bias",
            "layers.10.mlp.down_proj.weight",
            "layers.2.input_layernorm.weight",
            "fc.weight",
            "norm.weight",
            "layers.2.mlp.down_proj.weight",
            "hidden_norm.weight",
        ];
        let mut m: Vec<Mapped> = names.iter().map(|n| map_source(n).unwrap()).collect();
        m.sort_by_key(|m| m.order);
        let got: Vec<&str> = m.iter().map(|m| m.gguf.as_str()).collect();
        assert_eq!(
            got,
            [
                "dflash.fc.weight",
                "dflash.hidden_norm.weight",
                "blk.2.attn_norm.weight",
                "blk.2.ffn_down.weight",
                "blk.10.ffn_down.weight",
                "output_norm.weight",
                "dflash.dspark.confidence.bias",
            ]
        );
    }
}

//! One check of any model file into one typed value: a drafter of either layout, or a
//! target of any architecture in [`TARGETS`], with a serializable [`Summary`] that
//! `inspect` and `verify` print.
//!
//! A new target architecture is a contract module (its keys, tensors and bounds, a proof
//! value implementing [`TargetContract`]), a variant of [`TargetFile`] and a row of
//! [`TARGETS`]; nothing outside this crate and the runtime's model factory names it.

use dspark_gguf::{GgmlType, GgufFile, Value};
use serde::Serialize;

use crate::finding::{ContractError, Finding};
use crate::vocab::{GgufVocab, SpecialTokens};
use crate::TargetShape;
use crate::{
    dflash_draft, kimi_k3, llama, llama_dflash, names, qwen3, DraftFile, KimiK3File, LlamaFile,
    Qwen3File,
};

/// What every checked target tells the tools, whatever its architecture.
pub trait TargetContract<'f> {
    /// `general.architecture`.
    fn arch(&self) -> &'static str;
    /// What the contract calls the kind in messages (`"qwen3 target"`).
    fn kind(&self) -> &'static str;
    /// What a drafter must fit: hidden size, layers, vocabulary.
    fn shape(&self) -> TargetShape;
    /// The context it was trained for (`context_length`).
    fn context(&self) -> usize;
    /// The tokenizer the file carries, if any.
    fn vocab(&self) -> Option<&GgufVocab<'f>>;
    /// The special tokens it declares (each inside the vocabulary).
    fn special_tokens(&self) -> SpecialTokens;
    /// Its hyper-parameters and tokenizer, for `inspect` and `verify`.
    fn summary(&self) -> TargetSummary;
}

/// A checked target file of one of the architectures of [`TARGETS`]. Not
/// `non_exhaustive` on purpose: a new architecture fails to compile until the runtime's
/// factory has its row.
#[derive(Clone, Debug)]
pub enum TargetFile<'f> {
    /// llama.cpp's `qwen3`.
    Qwen3(Qwen3File<'f>),
    /// llama.cpp's `llama`.
    Llama(LlamaFile<'f>),
    /// llama.cpp's `kimi-k3`.
    KimiK3(KimiK3File<'f>),
}

impl<'f> TargetFile<'f> {
    /// What every target tells, whatever its architecture.
    pub fn contract(&self) -> &dyn TargetContract<'f> {
        match self {
            TargetFile::Qwen3(f) => f,
            TargetFile::Llama(f) => f,
            TargetFile::KimiK3(f) => f,
        }
    }
}

/// A target architecture: its name, and the check that turns a file into a [`TargetFile`].
#[derive(Clone, Copy)]
pub struct TargetKind {
    /// `general.architecture`.
    pub arch: &'static str,
    /// What the contract calls the kind in messages.
    pub kind: &'static str,
    /// The architecture's contract. `matrix_types` are the weight types the caller's
    /// kernels multiply.
    pub check: for<'f> fn(&'f GgufFile<'f>, &[GgmlType]) -> Result<TargetFile<'f>, ContractError>,
}

impl std::fmt::Debug for TargetKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.arch)
    }
}

/// The target architectures, one row each.
pub const TARGETS: &[TargetKind] = &[
    TargetKind {
        arch: qwen3::ARCH,
        kind: qwen3::KIND,
        check: |f, t| qwen3::check(f, t).map(TargetFile::Qwen3),
    },
    TargetKind {
        arch: llama::ARCH,
        kind: llama::KIND,
        check: |f, t| llama::check(f, t).map(TargetFile::Llama),
    },
    TargetKind {
        arch: kimi_k3::ARCH,
        kind: kimi_k3::KIND,
        check: |f, t| kimi_k3::check(f, t).map(TargetFile::KimiK3),
    },
];

/// The kind of model a file says it is (by `general.architecture`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FileKind {
    /// A `dflash-draft` drafter (any of [`dflash_draft::ACCEPTED_ARCHS`]).
    DflashDraft,
    /// A llama.cpp `dflash` drafter (DFlash or DSpark).
    LlamaDflash,
    /// A target of the architecture of this row of [`TARGETS`].
    Target(&'static str),
    /// Another architecture (its name), or none (`None`).
    Unknown(Option<String>),
}

/// Which contract applies to `file`.
pub fn identify(file: &GgufFile<'_>) -> FileKind {
    match file.get(names::ARCHITECTURE) {
        Some(Value::String(a)) if dflash_draft::ACCEPTED_ARCHS.contains(&a.as_str()) => {
            FileKind::DflashDraft
        }
        Some(Value::String(a)) if a == llama_dflash::ARCH => FileKind::LlamaDflash,
        Some(Value::String(a)) => match TARGETS.iter().find(|t| t.arch == a) {
            Some(t) => FileKind::Target(t.arch),
            None => FileKind::Unknown(Some(a.clone())),
        },
        _ => FileKind::Unknown(None),
    }
}

/// The architectures dspark knows, for messages: "`dflash-draft`, … or `kimi-k3`".
pub fn known_architectures() -> String {
    let mut all: Vec<String> = dflash_draft::ACCEPTED_ARCHS
        .iter()
        .chain([&llama_dflash::ARCH])
        .chain(TARGETS.iter().map(|t| &t.arch))
        .map(|a| format!("`{a}`"))
        .collect();
    let last = all.pop().unwrap_or_default();
    format!("{} or {last}", all.join(", "))
}

/// A checked model file of any kind.
#[derive(Clone, Debug)]
pub enum ModelFile<'f> {
    /// A drafter (either layout).
    Drafter(DraftFile<'f>),
    /// A target.
    Target(TargetFile<'f>),
}

impl ModelFile<'_> {
    /// What the file is, for `inspect` and `verify`.
    pub fn summary(&self) -> Summary {
        match self {
            ModelFile::Drafter(d) => Summary::Drafter(d.summary()),
            ModelFile::Target(t) => Summary::Target(t.contract().summary()),
        }
    }
}

/// What the contract calls the kind of `file` in messages (`"qwen3 target"`, …).
pub fn kind_of(file: &GgufFile<'_>) -> &'static str {
    match identify(file) {
        FileKind::DflashDraft => dflash_draft::KIND,
        FileKind::LlamaDflash => llama_dflash::KIND,
        FileKind::Target(arch) => TARGETS
            .iter()
            .find(|t| t.arch == arch)
            .map_or("target", |t| t.kind),
        FileKind::Unknown(_) => "model file",
    }
}

/// Checks any model file against its kind's contract (by `general.architecture`); a file
/// of an unknown architecture is one finding naming it and what dspark knows.
pub fn check<'f>(
    file: &'f GgufFile<'f>,
    matrix_types: &[GgmlType],
) -> Result<ModelFile<'f>, ContractError> {
    match identify(file) {
        FileKind::DflashDraft | FileKind::LlamaDflash => {
            crate::drafter(file, matrix_types).map(ModelFile::Drafter)
        }
        FileKind::Target(_) => check_target(file, matrix_types).map(ModelFile::Target),
        FileKind::Unknown(arch) => Err(unknown(arch, "model file")),
    }
}

/// Checks a target of any architecture of [`TARGETS`]; any other file is one finding
/// naming its architecture and the target architectures dspark runs.
pub fn check_target<'f>(
    file: &'f GgufFile<'f>,
    matrix_types: &[GgmlType],
) -> Result<TargetFile<'f>, ContractError> {
    let arch = match file.get(names::ARCHITECTURE) {
        Some(Value::String(a)) => Some(a.clone()),
        _ => None,
    };
    match TARGETS.iter().find(|t| Some(t.arch) == arch.as_deref()) {
        Some(t) => (t.check)(file, matrix_types),
        None => {
            let known: Vec<String> = TARGETS.iter().map(|t| format!("`{}`", t.arch)).collect();
            Err(ContractError {
                kind: "target",
                findings: vec![Finding::key(
                    names::ARCHITECTURE,
                    format!(
                        "is {}: not a target architecture dspark runs ({})",
                        arch.map_or("missing".into(), |a| format!("`{a}`")),
                        known.join(", ")
                    ),
                )],
            })
        }
    }
}

fn unknown(arch: Option<String>, kind: &'static str) -> ContractError {
    ContractError {
        kind,
        findings: vec![Finding::key(
            names::ARCHITECTURE,
            format!(
                "is {}: not a kind dspark knows (expected {})",
                arch.map_or("missing".into(), |a| format!("`{a}`")),
                known_architectures()
            ),
        )],
    }
}

/// What a checked file is: `inspect --json` prints it as its `contract` object.
#[derive(Clone, Debug, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Summary {
    /// A drafter.
    Drafter(DrafterSummary),
    /// A target.
    Target(TargetSummary),
}

impl Summary {
    /// One or two lines for a person: the geometry, and the heads or the tokenizer.
    pub fn describe(&self) -> String {
        match self {
            Summary::Drafter(d) => d.describe(),
            Summary::Target(t) => t.describe(),
        }
    }
}

/// A tokenizer a file carries.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct TokenizerSummary {
    /// `tokenizer.ggml.model`.
    pub model: String,
    /// `tokenizer.ggml.pre`.
    pub pre: Option<String>,
    /// Tokens.
    pub tokens: usize,
    /// BPE merges.
    pub merges: usize,
}

impl TokenizerSummary {
    /// The summary of `v`.
    pub fn of(v: &GgufVocab<'_>) -> TokenizerSummary {
        TokenizerSummary {
            model: v.model.to_string(),
            pre: v.pre.map(str::to_string),
            tokens: v.tokens.len(),
            merges: v.merges.len(),
        }
    }
}

/// A target's summary: its architecture, its hyper-parameters under their GGUF key names
/// (each architecture's own), its LM head, tokenizer and special tokens.
#[derive(Clone, Debug, Serialize)]
pub struct TargetSummary {
    /// `general.architecture`.
    pub architecture: &'static str,
    /// The hyper-parameters, by their GGUF key names (without the architecture prefix).
    #[serde(flatten)]
    pub hparams: serde_json::Map<String, serde_json::Value>,
    /// The LM head is the token embedding (no `output.weight`).
    pub tied_lm_head: bool,
    /// The tokenizer the file carries.
    pub tokenizer: Option<TokenizerSummary>,
    /// `tokenizer.ggml.bos_token_id`.
    pub bos_token_id: Option<u32>,
    /// `tokenizer.ggml.eos_token_id`.
    pub eos_token_id: Option<u32>,
    /// One line for a person (the geometry).
    #[serde(skip)]
    pub line: String,
}

impl TargetSummary {
    /// A summary of `hparams` (serialized under GGUF key names) and the rest.
    pub(crate) fn new(
        architecture: &'static str,
        hparams: &impl Serialize,
        tied_lm_head: bool,
        vocab: Option<&GgufVocab<'_>>,
        special: SpecialTokens,
        line: String,
    ) -> TargetSummary {
        let hparams = match serde_json::to_value(hparams) {
            Ok(serde_json::Value::Object(m)) => m,
            _ => serde_json::Map::new(),
        };
        TargetSummary {
            architecture,
            hparams,
            tied_lm_head,
            tokenizer: vocab.map(TokenizerSummary::of),
            bos_token_id: special.bos,
            eos_token_id: special.eos,
            line,
        }
    }

    fn describe(&self) -> String {
        let tied = if self.tied_lm_head {
            "tied to the embedding"
        } else {
            "separate"
        };
        let tok = match &self.tokenizer {
            Some(t) => format!(
                "tokenizer: {} ({} pre-tokenizer), {} tokens, {} merges; eos {}",
                t.model,
                t.pre.as_deref().unwrap_or("no"),
                t.tokens,
                t.merges,
                self.eos_token_id
                    .map_or("none".to_string(), |e| e.to_string())
            ),
            None => "tokenizer: none in the file".to_string(),
        };
        format!(
            "target ({}): {}, LM head {tied}\n{tok}",
            self.architecture, self.line
        )
    }
}

/// A drafter's summary.
#[derive(Clone, Debug, Serialize)]
pub struct DrafterSummary {
    /// `general.architecture`.
    pub architecture: String,
    /// `dflash-draft` or `llama.cpp`.
    pub layout: &'static str,
    /// Hidden size.
    pub embedding_length: usize,
    /// Draft layers.
    pub block_count: usize,
    /// Query heads.
    pub head_count: usize,
    /// Key/value heads.
    pub head_count_kv: usize,
    /// Head size.
    pub head_dim: usize,
    /// FFN width.
    pub feed_forward_length: usize,
    /// Tokens per draft block.
    pub block_size: usize,
    /// Captured target layers, in `fc` input order.
    pub target_layer_ids: Vec<usize>,
    /// How many.
    pub n_target_layers: usize,
    /// The target's depth, when recorded.
    pub target_block_count: Option<usize>,
    /// The target's vocabulary, when recorded.
    pub target_vocab: Option<usize>,
    /// The mask token.
    pub mask_token_id: u32,
    /// Drafts come from rows 0..B−1.
    pub sample_from_anchor: bool,
    /// YaRN scaling, when the file asks for it.
    pub rope_scaling: Option<serde_json::Value>,
    /// The Markov head's rank, when present.
    pub markov_rank: Option<usize>,
    /// The Markov head's vocabulary, when present.
    pub markov_vocab: Option<usize>,
    /// The confidence head's input width, when present.
    pub confidence_dim: Option<usize>,
    /// Positions the drafter was made for, when recorded.
    pub context_length: Option<usize>,
}

impl DrafterSummary {
    fn describe(&self) -> String {
        let heads = match self.markov_rank {
            Some(r) => format!(
                "DSpark heads: Markov rank {r}, vocabulary {}; confidence {}",
                self.markov_vocab.unwrap_or(0),
                self.confidence_dim
                    .map_or("absent".into(), |c| format!("width {c}"))
            ),
            None => "DSpark heads: absent (plain DFlash)".to_string(),
        };
        format!(
            "drafter ({}): hidden {}, {} draft layers, {}/{} heads of {}, FFN {}, block {}; captures target layers {:?} of {}\n{heads}",
            self.architecture,
            self.embedding_length,
            self.block_count,
            self.head_count,
            self.head_count_kv,
            self.head_dim,
            self.feed_forward_length,
            self.block_size,
            self.target_layer_ids,
            self.target_block_count
                .map_or("?".into(), |n| n.to_string())
        )
    }
}

impl DraftFile<'_> {
    /// What the drafter is, for `inspect` and `verify`.
    pub fn summary(&self) -> DrafterSummary {
        let h = self.hparams();
        DrafterSummary {
            architecture: self.arch().to_string(),
            layout: if self.arch() == llama_dflash::ARCH {
                "llama.cpp"
            } else {
                "dflash-draft"
            },
            embedding_length: h.hidden,
            block_count: h.layers,
            head_count: h.heads,
            head_count_kv: h.kv_heads,
            head_dim: h.head_dim,
            feed_forward_length: h.ffn,
            block_size: h.block_size,
            target_layer_ids: h.target_layer_ids.clone(),
            n_target_layers: h.target_layer_ids.len(),
            target_block_count: h.target_layers,
            target_vocab: h.target_vocab,
            mask_token_id: h.mask_token_id,
            sample_from_anchor: h.sample_from_anchor,
            rope_scaling: h.yarn.map(|y| {
                serde_json::json!({"type": "yarn", "factor": y.factor, "original_context": y.original_context})
            }),
            markov_rank: self.markov().map(|m| m.rank),
            markov_vocab: self.markov().map(|m| m.vocab),
            confidence_dim: self.confidence().map(|c| c.weight.cols),
            context_length: h.context,
        }
    }
}

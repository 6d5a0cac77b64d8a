//! The conversion plan: every check, every output tensor and every metadata key, decided
//! before a byte is written.
//!
//! [`Plan::new`] cross-checks the checkpoint against its config (every expected tensor
//! present once, shapes consistent with heads × head_dim, FFN, fc input = captured layers
//! × hidden, Markov and confidence shapes), applies the type policy
//! (`docs/OUTPUT-CONTRACT.md` §2) and lays out the GGUF. The only thing it cannot know yet is
//! the source files' SHA256, which the metadata records; hashes are fixed-length hex, so
//! the header's size, and every offset, is known now ([`Plan::header`]).

use std::collections::BTreeSet;

use dspark_gguf::{Array, GgmlType, Header, Layout, TensorInfo, Value};
use dspark_quant::SourceDtype;

use crate::config::{DraftConfig, RopeScaling, Sourced};
use crate::error::{ConvertError, Result};
use crate::names::{map_source, unrepresentable, Role, LAYER_TENSORS};
use crate::source::Checkpoint;
use dspark_contract::names::general as G;
use dspark_contract::names::keys as K;
use dspark_contract::names::llama_dflash as L;
use dspark_contract::names::tensors::{self as T, LayerDims};

/// The architecture string written to `general.architecture`.
pub const ARCH: &str = dspark_contract::dflash_draft::ARCH;

/// `provenance.source.repository`: where the checkpoint came from.
pub const PROVENANCE_REPOSITORY: &str = "provenance.source.repository";
/// `provenance.source.revision`: its pinned revision, or `unknown`.
pub const PROVENANCE_REVISION: &str = "provenance.source.revision";
/// `provenance.source.files`: the source weight files.
pub const PROVENANCE_FILES: &str = "provenance.source.files";
/// `provenance.source.sha256`: each file's SHA256.
pub const PROVENANCE_SHA256: &str = "provenance.source.sha256";
/// `provenance.source.parameters`: parameters converted.
pub const PROVENANCE_PARAMETERS: &str = "provenance.source.parameters";
/// `provenance.converter`: `dspark <version>`.
pub const PROVENANCE_CONVERTER: &str = "provenance.converter";
/// `provenance.policy`: the type policy used.
pub const PROVENANCE_POLICY: &str = "provenance.policy";
/// `provenance.vocab.sha256`: SHA256 of the target GGUF a llama.cpp-layout drafter's
/// vocabulary was copied from.
pub const PROVENANCE_VOCAB_SHA256: &str = "provenance.vocab.sha256";

/// Output type family (`--outtype`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutType {
    /// Matrices Q8_0 (the default).
    Q8_0,
    /// Matrices F16.
    F16,
    /// Matrices BF16.
    BF16,
    /// Everything F32.
    F32,
}

impl OutType {
    /// Parses `q8_0`, `f16`, `bf16`, `f32` (case-insensitive).
    pub fn parse(s: &str) -> Option<OutType> {
        match s.to_ascii_lowercase().as_str() {
            "q8_0" => Some(OutType::Q8_0),
            "f16" => Some(OutType::F16),
            "bf16" => Some(OutType::BF16),
            "f32" => Some(OutType::F32),
            _ => None,
        }
    }

    /// The type matrices get.
    pub fn matrix_type(self) -> GgmlType {
        match self {
            OutType::Q8_0 => GgmlType::Q8_0,
            OutType::F16 => GgmlType::F16,
            OutType::BF16 => GgmlType::BF16,
            OutType::F32 => GgmlType::F32,
        }
    }

    /// `general.file_type` (llama's `LlamaFileType` numbering).
    pub fn file_type(self) -> u32 {
        match self {
            OutType::Q8_0 => 7,
            OutType::F16 => 1,
            OutType::BF16 => 32,
            OutType::F32 => 0,
        }
    }

    /// The file type's name, as the report spells it.
    pub fn file_type_name(self) -> &'static str {
        match self {
            OutType::Q8_0 => "MOSTLY_Q8_0",
            OutType::F16 => "MOSTLY_F16",
            OutType::BF16 => "MOSTLY_BF16",
            OutType::F32 => "ALL_F32",
        }
    }

    /// The suffix of default file names and the tag (`Q8_0`, `F16`, ...).
    pub fn label(self) -> &'static str {
        self.matrix_type().name()
    }

    /// One line describing the policy (`provenance.policy`).
    pub fn policy(self) -> String {
        let m = self.label();
        let fallback = if self == OutType::Q8_0 {
            " (F16 when a row is not a multiple of 32)"
        } else {
            ""
        };
        format!("{m} for fc, attention q/k/v/output, FFN gate/up/down, Markov w1/w2 and any embedding/lm_head{fallback}; F32 for every norm and the confidence head")
    }

    /// [`OutType::policy`] under `layout` (llama.cpp's converter treats the confidence
    /// weight as a matrix).
    pub fn policy_for(self, layout: FileLayout) -> String {
        match layout {
            FileLayout::DflashDraft => self.policy(),
            FileLayout::LlamaCpp => {
                let m = self.label();
                let fallback = if self == OutType::Q8_0 {
                    " (F16 when a row is not a multiple of 32)"
                } else {
                    ""
                };
                format!("{m} for fc, attention q/k/v/output, FFN gate/up/down, Markov w1/w2, the confidence weight and any embedding/lm_head{fallback}; F32 for every norm and the confidence bias")
            }
        }
    }
}

/// Which drafter layout the output follows (`--layout`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FileLayout {
    /// The generic `dflash-draft` layout (Lucebox's loader; the default).
    #[default]
    DflashDraft,
    /// llama.cpp's `dflash` layout, as its `convert_hf_to_gguf.py` writes it.
    LlamaCpp,
}

impl FileLayout {
    /// Parses `dflash-draft` or `llama.cpp`.
    pub fn parse(s: &str) -> Option<FileLayout> {
        match s {
            "dflash-draft" => Some(FileLayout::DflashDraft),
            "llama.cpp" => Some(FileLayout::LlamaCpp),
            _ => None,
        }
    }

    /// The `--layout` spelling.
    pub fn name(self) -> &'static str {
        match self {
            FileLayout::DflashDraft => "dflash-draft",
            FileLayout::LlamaCpp => "llama.cpp",
        }
    }

    /// `general.architecture`.
    pub fn arch(self) -> &'static str {
        match self {
            FileLayout::DflashDraft => ARCH,
            FileLayout::LlamaCpp => dspark_contract::llama_dflash::ARCH,
        }
    }
}

/// The target vocabulary a llama.cpp-layout drafter carries (`--vocab-from`): the
/// target GGUF's `tokenizer.ggml.*` keys, in its order, and that file's SHA256.
#[derive(Clone, Debug, PartialEq)]
pub struct CarriedVocab {
    /// The keys, as the target stores them (its mask id, if any, excluded).
    pub keys: Vec<(String, Value)>,
    /// SHA256 of the target file they came from (`provenance.vocab.sha256`).
    pub sha256: String,
}

/// Options that shape the output (everything else comes from the source bytes).
#[derive(Clone, Debug)]
pub struct Options {
    /// Output type family.
    pub outtype: OutType,
    /// Output layout.
    pub layout: FileLayout,
    /// The carried vocabulary (required by, and only used for, the llama.cpp layout).
    pub vocab: Option<CarriedVocab>,
    /// `--name`.
    pub name: Option<String>,
    /// `--source-repo ORG/NAME`.
    pub source_repo: Option<String>,
    /// `--source-revision`.
    pub source_revision: Option<String>,
    /// `--allow-extra`: skip unknown tensors instead of refusing them.
    pub allow_extra: bool,
    /// `--allow-nonfinite`: convert NaN / Inf instead of refusing them.
    pub allow_nonfinite: bool,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            outtype: OutType::Q8_0,
            layout: FileLayout::DflashDraft,
            vocab: None,
            name: None,
            source_repo: None,
            source_revision: None,
            allow_extra: false,
            allow_nonfinite: false,
        }
    }
}

/// One output tensor.
#[derive(Clone, Debug, PartialEq)]
pub struct PlannedTensor {
    /// GGUF name.
    pub name: String,
    /// Source name.
    pub source_name: String,
    /// Index into the checkpoint's tensors.
    pub source_index: usize,
    /// Source element type.
    pub source_dtype: SourceDtype,
    /// PyTorch shape.
    pub source_shape: Vec<u64>,
    /// Role.
    pub role: Role,
    /// Output type.
    pub ty: GgmlType,
    /// Dims in ggml order.
    pub dims: Vec<u64>,
    /// Why the policy's type was not used, if it was not.
    pub fallback: Option<String>,
}

impl PlannedTensor {
    /// Elements.
    pub fn n_elements(&self) -> u64 {
        self.dims.iter().product()
    }
}

/// A metadata entry and where its value came from.
#[derive(Clone, Debug, PartialEq)]
pub struct MetaEntry {
    /// Key.
    pub key: String,
    /// Value.
    pub value: Value,
    /// Config key, `derived: <rule>`, `option: --x` or `default`.
    pub from: String,
}

/// The resolved geometry of the drafter.
#[derive(Clone, Debug, Default, PartialEq)]
#[allow(missing_docs)]
pub struct Geometry {
    pub hidden: u64,
    pub n_layers: u64,
    pub n_head: u64,
    pub n_head_kv: u64,
    pub head_dim: u64,
    pub n_ff: u64,
    pub vocab: u64,
    pub n_cap: u64,
    /// Markov rank, when the Markov head is present.
    pub markov_rank: Option<u64>,
    /// Markov vocabulary (rows of w1 = rows of w2).
    pub markov_vocab: Option<u64>,
    /// Confidence input width, when the confidence head is present.
    pub confidence_dim: Option<u64>,
}

/// Everything the writer needs, decided up front.
#[derive(Clone, Debug)]
pub struct Plan {
    /// Options used.
    pub options: Options,
    /// The resolved config.
    pub config: DraftConfig,
    /// The geometry.
    pub geometry: Geometry,
    /// Output tensors in canonical order.
    pub tensors: Vec<PlannedTensor>,
    /// Source tensors left out (only with `--allow-extra`).
    pub skipped: Vec<String>,
    /// `general.name`.
    pub name: String,
    /// `provenance.source.repository`.
    pub repository: String,
    /// Total parameters converted.
    pub parameters: u64,
    /// Every source tensor's dtype, counted (skipped tensors too), by name.
    pub source_dtypes: std::collections::BTreeMap<String, usize>,
    /// Elements in the whole source (skipped tensors too).
    pub source_parameters: u64,
    /// Source weight file names.
    pub source_files: Vec<String>,
    /// Metadata without the source hashes (filled by [`Plan::metadata`]).
    meta: Vec<MetaEntry>,
}

/// Placeholder the size computation uses for each source hash: the real ones have the
/// same length (64 hex digits), so the layout does not change when they arrive.
const HASH_PLACEHOLDER: &str = "0000000000000000000000000000000000000000000000000000000000000000";

fn shape_str(s: &[u64]) -> String {
    format!("{s:?}")
}

impl Plan {
    /// Checks `ckpt` against `config` and decides every byte of the output but the hashes.
    pub fn new(config: DraftConfig, ckpt: &Checkpoint, options: Options) -> Result<Plan> {
        let c = &config;
        let cfg_err = |key: &str, msg: String| ConvertError::Config {
            path: c.path.clone(),
            key: key.to_string(),
            msg,
        };

        // 1. Map every source tensor; refuse unknown ones (unless --allow-extra).
        let mut mapped = Vec::new();
        let mut skipped = Vec::new();
        for (i, t) in ckpt.tensors.iter().enumerate() {
            if let Some(why) = unrepresentable(&t.name) {
                return Err(ConvertError::tensor(&t.name, why));
            }
            match map_source(&t.name) {
                Some(m) => mapped.push((i, m)),
                None if options.allow_extra => skipped.push(t.name.clone()),
                None => {
                    return Err(ConvertError::tensor(
                        &t.name,
                        "not a DSpark/DFlash drafter tensor this converter knows (use --allow-extra to skip it)",
                    ))
                }
            }
        }
        mapped.sort_by_key(|(_, m)| m.order);
        for w in mapped.windows(2) {
            if w[0].1.gguf == w[1].1.gguf {
                let (a, b) = (&ckpt.tensors[w[0].0].name, &ckpt.tensors[w[1].0].name);
                return Err(ConvertError::tensor(
                    &w[0].1.gguf,
                    format!("given twice, as `{a}` and `{b}`"),
                ));
            }
        }
        let present: BTreeSet<&str> = mapped.iter().map(|(_, m)| m.gguf.as_str()).collect();
        let source_of = |gguf: &str| {
            mapped
                .iter()
                .find(|(_, m)| m.gguf == gguf)
                .map(|(i, _)| &ckpt.tensors[*i])
        };

        // 2. Geometry from the config, cross-checked against the tensors.
        let h = c.hidden_size.value;
        let n_layers = c.num_hidden_layers.value;
        let (n_head, n_head_kv, hd) = (
            c.num_attention_heads.value,
            c.num_key_value_heads.value,
            c.head_dim.value,
        );
        if n_head_kv > n_head || n_head % n_head_kv != 0 {
            return Err(cfg_err(
                &c.num_key_value_heads.from,
                format!("{n_head_kv} KV heads must divide {n_head} query heads"),
            ));
        }
        let n_ff = c.intermediate_size.value;
        let n_cap = c.target_layer_ids.value.len() as u64;
        if let Some(depth) = &c.num_target_layers {
            if let Some(bad) = c
                .target_layer_ids
                .value
                .iter()
                .find(|&&id| id >= depth.value)
            {
                return Err(cfg_err(
                    &c.target_layer_ids.from,
                    format!(
                        "captured layer {bad} is outside the target's {} layers ({})",
                        depth.value, depth.from
                    ),
                ));
            }
        }
        let mut seen = BTreeSet::new();
        if let Some(dup) = c
            .target_layer_ids
            .value
            .iter()
            .find(|id| !seen.insert(**id))
        {
            return Err(cfg_err(
                &c.target_layer_ids.from,
                format!("layer {dup} is captured twice"),
            ));
        }

        let mut expect: Vec<(String, Vec<u64>)> = vec![
            (T::DFLASH_FC.into(), vec![h, n_cap * h]),
            (T::DFLASH_HIDDEN_NORM.into(), vec![h]),
        ];
        let dims = LayerDims {
            hidden: h,
            heads: n_head,
            kv_heads: n_head_kv,
            head_dim: hd,
            ffn: n_ff,
        };
        for i in 0..n_layers {
            for (_, tensor, _) in LAYER_TENSORS {
                let ne = tensor.ne(&dims);
                expect.push((tensor.name(i), ne.into_iter().rev().collect()));
            }
        }
        expect.push((T::OUTPUT_NORM.into(), vec![h]));

        // Markov head: present when the config gives a rank or the tensors exist.
        let has_w1 = present.contains(T::DSPARK_MARKOV_W1);
        let has_w2 = present.contains(T::DSPARK_MARKOV_W2);
        let mut markov_rank = None;
        let mut markov_vocab = None;
        if c.has_markov() || has_w1 || has_w2 {
            let (w1, w2) = match (
                source_of(T::DSPARK_MARKOV_W1),
                source_of(T::DSPARK_MARKOV_W2),
            ) {
                (Some(a), Some(b)) => (a, b),
                (None, _) => {
                    return Err(ConvertError::tensor(
                        "markov_head.markov_w1.weight",
                        "missing: the Markov head needs both w1 and w2",
                    ))
                }
                (_, None) => {
                    return Err(ConvertError::tensor(
                        "markov_head.markov_w2.weight",
                        "missing: the Markov head needs both w1 and w2",
                    ))
                }
            };
            if w1.shape.len() != 2 || w2.shape.len() != 2 {
                return Err(ConvertError::tensor(
                    &w1.name,
                    format!(
                        "Markov matrices must be 2-D [vocab, rank], found {} and {}",
                        shape_str(&w1.shape),
                        shape_str(&w2.shape)
                    ),
                ));
            }
            let r = match &c.markov_rank {
                Some(r) if r.value > 0 => r.value,
                _ => w1.shape[1],
            };
            if w1.shape[0] != w2.shape[0] {
                return Err(ConvertError::tensor(
                    &w2.name,
                    format!(
                        "Markov input vocabulary {} (w1 rows) differs from the draft vocabulary {} (w2 rows): dflash-draft stores both as [R, V] with one V",
                        w1.shape[0], w2.shape[0]
                    ),
                ));
            }
            if c.draft_vocab_size.value != c.vocab_size.value {
                return Err(cfg_err(
                    &c.draft_vocab_size.from,
                    format!("draft vocabulary {} differs from vocab_size {}: not representable in dflash-draft", c.draft_vocab_size.value, c.vocab_size.value),
                ));
            }
            let v = c.vocab_size.value;
            expect.push((T::DSPARK_MARKOV_W1.into(), vec![v, r]));
            expect.push((T::DSPARK_MARKOV_W2.into(), vec![v, r]));
            markov_rank = Some(r);
            markov_vocab = Some(v);
        }

        // Confidence head: both tensors or neither; width H, or H + R with the Markov input.
        let mut confidence_dim = None;
        let conf_cfg = c.enable_confidence_head.as_ref().is_some_and(|e| e.value);
        let has_cw = present.contains(T::DSPARK_CONFIDENCE_WEIGHT);
        let has_cb = present.contains(T::DSPARK_CONFIDENCE_BIAS);
        if conf_cfg || has_cw || has_cb {
            if !has_cw {
                return Err(ConvertError::tensor(
                    "confidence_head.proj.weight",
                    "missing: the confidence head needs a weight and a bias",
                ));
            }
            if !has_cb {
                return Err(ConvertError::tensor(
                    "confidence_head.proj.bias",
                    "missing: the confidence head needs a weight and a bias",
                ));
            }
            let with_markov = match &c.confidence_head_with_markov {
                Some(w) => w.value,
                None => markov_rank.is_some(),
            };
            let width = match (with_markov, markov_rank) {
                (true, Some(r)) => h + r,
                (true, None) => {
                    return Err(cfg_err(
                        "dflash_config.confidence_head_with_markov",
                        "is true, but there is no Markov head".into(),
                    ))
                }
                (false, _) => h,
            };
            expect.push((T::DSPARK_CONFIDENCE_WEIGHT.into(), vec![1, width]));
            expect.push((T::DSPARK_CONFIDENCE_BIAS.into(), vec![1]));
            confidence_dim = Some(width);
        }
        if present.contains(T::TOKEN_EMBD) {
            expect.push((T::TOKEN_EMBD.into(), vec![c.vocab_size.value, h]));
        }
        if present.contains(T::OUTPUT) {
            expect.push((T::OUTPUT.into(), vec![c.draft_vocab_size.value, h]));
        }

        // 3. Every expected tensor present with its shape; nothing else mapped.
        let expected_names: BTreeSet<&str> = expect.iter().map(|(n, _)| n.as_str()).collect();
        for (i, m) in &mapped {
            if !expected_names.contains(m.gguf.as_str()) {
                let t = &ckpt.tensors[*i];
                let why = match m.layer {
                    Some(l) if l >= n_layers => format!(
                        "layer {l} does not exist: {} says {n_layers} layers",
                        c.num_hidden_layers.from
                    ),
                    _ => "not expected by this config".to_string(),
                };
                return Err(ConvertError::tensor(&t.name, why));
            }
        }
        let mut tensors = Vec::with_capacity(expect.len());
        for (gguf, shape) in &expect {
            let (idx, m) = mapped
                .iter()
                .find(|(_, m)| m.gguf == *gguf)
                .ok_or_else(|| {
                    ConvertError::tensor(
                        gguf_to_source_hint(gguf),
                        format!("missing (GGUF `{gguf}`)"),
                    )
                })?;
            let t = &ckpt.tensors[*idx];
            if t.shape != *shape {
                return Err(ConvertError::tensor(
                    &t.name,
                    format!(
                        "shape {} does not match the config, expected {}",
                        shape_str(&t.shape),
                        shape_str(shape)
                    ),
                ));
            }
            let dtype = t.dtype.clone().map_err(|d| {
                ConvertError::tensor(
                    &t.name,
                    format!("dtype {d} is not supported (expected BF16, F16 or F32)"),
                )
            })?;
            let dims: Vec<u64> = shape.iter().rev().copied().collect();
            let (ty, fallback) =
                layout_policy_type(options.layout, m.role, options.outtype, dims[0]);
            let name = match options.layout {
                FileLayout::DflashDraft => gguf.clone(),
                FileLayout::LlamaCpp => crate::names::llama_name(gguf).to_string(),
            };
            tensors.push(PlannedTensor {
                name,
                source_name: t.name.clone(),
                source_index: *idx,
                source_dtype: dtype,
                source_shape: t.shape.clone(),
                role: m.role,
                ty,
                dims,
                fallback,
            });
        }

        let geometry = Geometry {
            hidden: h,
            n_layers,
            n_head,
            n_head_kv,
            head_dim: hd,
            n_ff,
            vocab: c.vocab_size.value,
            n_cap,
            markov_rank,
            markov_vocab,
            confidence_dim,
        };
        let repository = options
            .source_repo
            .clone()
            .unwrap_or_else(|| folder_name(&ckpt.layout.dir));
        let name = model_name(&ckpt.layout.dir, &options);
        let parameters = tensors.iter().map(|t| t.n_elements()).sum();
        let mut source_dtypes = std::collections::BTreeMap::new();
        for t in &ckpt.tensors {
            let name = match &t.dtype {
                Ok(d) => d.name().to_string(),
                Err(other) => other.clone(),
            };
            *source_dtypes.entry(name).or_insert(0) += 1;
        }
        let source_parameters = ckpt.tensors.iter().map(|t| t.n_elements()).sum();
        let mut plan = Plan {
            source_dtypes,
            source_parameters,
            meta: Vec::new(),
            source_files: ckpt.layout.files.clone(),
            options,
            config,
            geometry,
            tensors,
            skipped,
            name,
            repository,
            parameters,
        };
        plan.meta = plan.build_metadata()?;
        plan.check_contract()?;
        Ok(plan)
    }

    /// Holds the planned file to the `dflash-draft` contract — the same check `verify`
    /// and the runtime's loader make — so `convert` never writes a file they refuse. A
    /// finding about a key is reported against the config key its value came from.
    fn check_contract(&self) -> Result<()> {
        let header = self.header(&vec![HASH_PLACEHOLDER.to_string(); self.source_files.len()]);
        let bytes = header.to_bytes();
        let file = dspark_gguf::GgufFile::parse_header(&bytes, header.layout().file_size).map_err(
            |e| ConvertError::Output {
                path: self.config.path.clone(),
                msg: format!("the planned header does not parse: {e}"),
            },
        )?;
        let Err(e) = dspark_contract::drafter(&file, &dspark_quant::matrix_types()) else {
            return Ok(());
        };
        let f = &e.findings[0];
        let more = match e.findings.len() {
            1 => String::new(),
            n => format!(" (and {} more)", n - 1),
        };
        let origin = match &f.subject {
            dspark_contract::Subject::Key(k) => self
                .meta
                .iter()
                .find(|m| m.key == *k)
                .map(|m| m.from.clone()),
            _ => None,
        };
        Err(ConvertError::Config {
            path: self.config.path.clone(),
            key: origin.unwrap_or_else(|| "(the converted file)".to_string()),
            msg: format!(
                "the {} contract refuses the result: {f}{more}",
                self.options.layout.name()
            ),
        })
    }

    fn build_metadata(&self) -> Result<Vec<MetaEntry>> {
        let c = &self.config;
        let g = &self.geometry;
        let o = &self.options;
        let mut m: Vec<MetaEntry> = Vec::new();
        let mut put = |key: &str, value: Value, from: &str| {
            m.push(MetaEntry {
                key: key.to_string(),
                value,
                from: from.to_string(),
            });
        };
        let a = |k: &str| dspark_contract::names::key(ARCH, k);
        let u32_of = |s: &Sourced<u64>| -> Result<Value> {
            u32::try_from(s.value)
                .map(Value::U32)
                .map_err(|_| ConvertError::Config {
                    path: c.path.clone(),
                    key: s.from.clone(),
                    msg: format!("{} does not fit in a UINT32", s.value),
                })
        };
        // The rope-scaling keys (suffixes), values and sources, in the layout's order:
        // llama.cpp's converter writes the attention factor before the betas, the
        // dflash-draft layout after them.
        type Entry = (&'static str, Value, String);
        let rope_scaling = |rs: &RopeScaling, attn_first: bool| -> Result<Vec<Entry>> {
            let f32_of = |s: &Sourced<f64>| Value::F32(s.value as f32);
            let mut v: Vec<Entry> = vec![
                (
                    K::ROPE_SCALING_TYPE,
                    Value::String(rs.rope_type.value.clone()),
                    rs.rope_type.from.clone(),
                ),
                (
                    K::ROPE_SCALING_FACTOR,
                    f32_of(&rs.factor),
                    rs.factor.from.clone(),
                ),
            ];
            if let Some(o) = &rs.original_max_position_embeddings {
                v.push((K::ROPE_SCALING_ORIGINAL_CONTEXT, u32_of(o)?, o.from.clone()));
            }
            let attn = rs
                .attention_factor
                .as_ref()
                .map(|s| (K::ROPE_SCALING_ATTN_FACTOR, f32_of(s), s.from.clone()));
            let betas = [
                (K::ROPE_SCALING_YARN_BETA_FAST, &rs.beta_fast),
                (K::ROPE_SCALING_YARN_BETA_SLOW, &rs.beta_slow),
            ]
            .into_iter()
            .filter_map(|(key, b)| b.as_ref().map(|b| (key, f32_of(b), b.from.clone())));
            if attn_first {
                v.extend(attn);
                v.extend(betas);
            } else {
                v.extend(betas);
                v.extend(attn);
            }
            Ok(v)
        };
        let small = |n: u64, what: &str| -> Result<Value> {
            u32::try_from(n)
                .map(Value::U32)
                .map_err(|_| ConvertError::Config {
                    path: c.path.clone(),
                    key: what.to_string(),
                    msg: format!("{n} does not fit in a UINT32"),
                })
        };

        put(
            dspark_contract::names::ARCHITECTURE,
            Value::String(o.layout.arch().into()),
            "option: --layout",
        );
        put(G::TYPE, Value::String("model".into()), "default");
        let name_from = if o.name.is_some() {
            "option: --name"
        } else if o.source_repo.is_some() {
            "derived: --source-repo name"
        } else {
            "derived: source folder name"
        };
        put(G::NAME, Value::String(self.name.clone()), name_from);
        put(
            G::SIZE_LABEL,
            Value::String(size_label(self.parameters)),
            "derived: parameter count",
        );
        put(
            G::FILE_TYPE,
            Value::U32(o.outtype.file_type()),
            "option: --outtype",
        );
        put(G::QUANTIZATION_VERSION, Value::U32(2), "default");
        if let Some(repo) = &o.source_repo {
            let url = format!("https://huggingface.co/{repo}");
            put(
                G::SOURCE_REPO_URL,
                Value::String(url.clone()),
                "option: --source-repo",
            );
            let (org, base) = repo.split_once('/').unwrap_or(("", repo.as_str()));
            put(G::BASE_MODEL_COUNT, Value::U32(1), "option: --source-repo");
            put(
                G::BASE_MODEL_0_NAME,
                Value::String(base.to_string()),
                "option: --source-repo",
            );
            if !org.is_empty() {
                put(
                    G::BASE_MODEL_0_ORGANIZATION,
                    Value::String(org.to_string()),
                    "option: --source-repo",
                );
            }
            put(
                G::BASE_MODEL_0_REPO_URL,
                Value::String(url),
                "option: --source-repo",
            );
        }
        let kind = if g.markov_rank.is_some() {
            "dspark"
        } else {
            "dflash"
        };
        put(
            G::TAGS,
            Value::Array(Array::String(vec![
                kind.into(),
                "speculative-decoding".into(),
                o.outtype.label().to_ascii_lowercase(),
            ])),
            "derived: heads present and --outtype",
        );

        if o.layout == FileLayout::DflashDraft {
            put(
                &a(K::CONTEXT_LENGTH),
                u32_of(&c.max_position_embeddings)?,
                &c.max_position_embeddings.from,
            );
            put(
                &a(K::EMBEDDING_LENGTH),
                u32_of(&c.hidden_size)?,
                &c.hidden_size.from,
            );
            put(
                &a(K::BLOCK_COUNT),
                u32_of(&c.num_hidden_layers)?,
                &c.num_hidden_layers.from,
            );
            put(
                &a(K::FEED_FORWARD_LENGTH),
                u32_of(&c.intermediate_size)?,
                &c.intermediate_size.from,
            );
            put(
                &a(K::HEAD_COUNT),
                u32_of(&c.num_attention_heads)?,
                &c.num_attention_heads.from,
            );
            put(
                &a(K::HEAD_COUNT_KV),
                u32_of(&c.num_key_value_heads)?,
                &c.num_key_value_heads.from,
            );
            put(&a(K::KEY_LENGTH), u32_of(&c.head_dim)?, &c.head_dim.from);
            put(&a(K::VALUE_LENGTH), u32_of(&c.head_dim)?, &c.head_dim.from);
            put(
                &a(K::RMS_EPS),
                Value::F32(c.rms_norm_eps.value as f32),
                &c.rms_norm_eps.from,
            );
            put(
                &a(K::ROPE_FREQ_BASE),
                Value::F32(c.rope_theta.value as f32),
                &c.rope_theta.from,
            );
            if let Some(rs) = &c.rope_scaling {
                for (key, value, from) in rope_scaling(rs, false)? {
                    put(&a(key), value, &from);
                }
            }
            put(
                &a(K::VOCAB_SIZE),
                u32_of(&c.vocab_size)?,
                &c.vocab_size.from,
            );
            put(
                &a(K::DFLASH_BLOCK_SIZE),
                u32_of(&c.block_size)?,
                &c.block_size.from,
            );
            put(
                &a(K::DFLASH_N_TARGET_LAYERS),
                small(g.n_cap, "target_layer_ids")?,
                &format!("derived: length of {}", c.target_layer_ids.from),
            );
            put(
                &a(K::DFLASH_N_TARGET_FEATURES),
                small(g.n_cap * g.hidden, "fc.weight")?,
                "derived: captured layers × hidden_size (fc.weight input width)",
            );
            put(
                &a(K::DFLASH_TARGET_LAYER_IDS),
                Value::Array(Array::I32(
                    c.target_layer_ids.value.iter().map(|&x| x as i32).collect(),
                )),
                &c.target_layer_ids.from,
            );
            if let Some(depth) = &c.num_target_layers {
                put(
                    &a(K::DFLASH_TARGET_BLOCK_COUNT),
                    u32_of(depth)?,
                    &depth.from,
                );
            }
            let target_hidden_from = c.target_hidden_size.as_ref().map_or(
                "derived: hidden_size (the fc input is captured layers × hidden_size)".to_string(),
                |t| t.from.clone(),
            );
            put(
                &a(K::DFLASH_TARGET_HIDDEN_SIZE),
                u32_of(&c.hidden_size)?,
                &target_hidden_from,
            );
            if let Some(mask) = &c.mask_token_id {
                put(&a(K::DFLASH_MASK_TOKEN_ID), u32_of(mask)?, &mask.from);
            }
            let (anchor, anchor_from) = match &c.sample_from_anchor {
                Some(s) => (s.value, s.from.clone()),
                None => (
                    g.markov_rank.is_some(),
                    "derived: true with a Markov head (DSpark), false without (DFlash)".to_string(),
                ),
            };
            put(
                &a(K::DFLASH_SAMPLE_FROM_ANCHOR),
                Value::Bool(anchor),
                &anchor_from,
            );
            if let (Some(r), Some(v)) = (g.markov_rank, g.markov_vocab) {
                put(
                    &a(K::DSPARK_ENABLED),
                    Value::U32(1),
                    "derived: Markov head tensors present",
                );
                let rank_from = c
                    .markov_rank
                    .as_ref()
                    .map_or("derived: markov_w1 columns".to_string(), |s| s.from.clone());
                put(
                    &a(K::DSPARK_MARKOV_RANK),
                    small(r, "markov_rank")?,
                    &rank_from,
                );
                put(
                    &a(K::DSPARK_VOCAB_SIZE),
                    small(v, "vocab_size")?,
                    "derived: markov_w2 rows",
                );
                if let Some(cd) = g.confidence_dim {
                    put(
                        &a(K::DSPARK_CONFIDENCE_DIM),
                        small(cd, "confidence_head.proj.weight")?,
                        "derived: confidence_head.proj.weight columns",
                    );
                }
                let head_type_from = c
                    .markov_head_type
                    .as_ref()
                    .map_or("default".to_string(), |s| s.from.clone());
                put(
                    &a(K::DSPARK_MARKOV_HEAD_TYPE),
                    Value::String("vanilla".into()),
                    &head_type_from,
                );
                let with_markov = g.confidence_dim.is_some_and(|cd| cd != g.hidden);
                let wm_from = c.confidence_head_with_markov.as_ref().map_or(
                    "derived: confidence width = hidden + rank".to_string(),
                    |s| s.from.clone(),
                );
                put(
                    &a(K::DSPARK_CONFIDENCE_WITH_MARKOV),
                    Value::Bool(with_markov),
                    &wm_from,
                );
            } else if let Some(cd) = g.confidence_dim {
                put(
                    &a(K::DSPARK_CONFIDENCE_DIM),
                    small(cd, "confidence_head.proj.weight")?,
                    "derived: confidence_head.proj.weight columns",
                );
            }
        } else {
            let l = |k: &str| dspark_contract::names::key(L::ARCH, k);
            put(
                &l(K::BLOCK_COUNT),
                u32_of(&c.num_hidden_layers)?,
                &c.num_hidden_layers.from,
            );
            put(
                &l(K::CONTEXT_LENGTH),
                u32_of(&c.max_position_embeddings)?,
                &c.max_position_embeddings.from,
            );
            put(
                &l(K::EMBEDDING_LENGTH),
                u32_of(&c.hidden_size)?,
                &c.hidden_size.from,
            );
            put(
                &l(K::FEED_FORWARD_LENGTH),
                u32_of(&c.intermediate_size)?,
                &c.intermediate_size.from,
            );
            put(
                &l(K::HEAD_COUNT),
                u32_of(&c.num_attention_heads)?,
                &c.num_attention_heads.from,
            );
            put(
                &l(K::HEAD_COUNT_KV),
                u32_of(&c.num_key_value_heads)?,
                &c.num_key_value_heads.from,
            );
            if let Some(rs) = &c.rope_scaling {
                for (key, value, from) in rope_scaling(rs, true)? {
                    put(&l(key), value, &from);
                }
            }
            put(
                &l(K::ROPE_FREQ_BASE),
                Value::F32(c.rope_theta.value as f32),
                &c.rope_theta.from,
            );
            put(
                &l(K::RMS_EPS),
                Value::F32(c.rms_norm_eps.value as f32),
                &c.rms_norm_eps.from,
            );
            put(&l(K::KEY_LENGTH), u32_of(&c.head_dim)?, &c.head_dim.from);
            put(&l(K::VALUE_LENGTH), u32_of(&c.head_dim)?, &c.head_dim.from);
            put(
                &l(L::BLOCK_SIZE),
                u32_of(&c.block_size)?,
                &c.block_size.from,
            );
            put(
                &l(L::TARGET_LAYERS),
                Value::Array(Array::I32(
                    c.target_layer_ids
                        .value
                        .iter()
                        .map(|&x| x as i32 + 1)
                        .collect(),
                )),
                &format!(
                    "derived: {} + 1 (llama.cpp counts layer inputs)",
                    c.target_layer_ids.from
                ),
            );
            if g.markov_rank.is_some() {
                let (anchor, anchor_from) = match &c.sample_from_anchor {
                    Some(s) => (s.value, s.from.clone()),
                    None => (
                        true,
                        "derived: true with a Markov head (DSpark)".to_string(),
                    ),
                };
                put(&l(L::SAMPLE_FROM_ANCHOR), Value::Bool(anchor), &anchor_from);
                put(
                    &l(L::HAS_CONFIDENCE_HEAD),
                    Value::Bool(g.confidence_dim.is_some()),
                    "derived: confidence head tensors present",
                );
            } else if c.sample_from_anchor.as_ref().is_some_and(|s| s.value) {
                let s = c.sample_from_anchor.as_ref().expect("checked");
                return Err(ConvertError::Config {
                    path: c.path.clone(),
                    key: s.from.clone(),
                    msg: "is true, but without a Markov head llama.cpp drafts DFlash-style, from rows 1..B-1: not representable in the llama.cpp layout".into(),
                });
            }
            let vocab = o.vocab.as_ref().ok_or_else(|| ConvertError::Config {
                path: c.path.clone(),
                key: "(--vocab-from)".into(),
                msg: "the llama.cpp layout carries the target's vocabulary: give --vocab-from TARGET.gguf".into(),
            })?;
            for (k, v) in &vocab.keys {
                put(k, v.clone(), "option: --vocab-from");
            }
            if let Some(mask) = &c.mask_token_id {
                put(
                    dspark_contract::names::tokenizer::MASK_ID,
                    u32_of(mask)?,
                    &mask.from,
                );
            }
        }
        let repo_from = if o.source_repo.is_some() {
            "option: --source-repo"
        } else {
            "derived: source folder name"
        };
        put(
            PROVENANCE_REPOSITORY,
            Value::String(self.repository.clone()),
            repo_from,
        );
        let (rev, rev_from) = match &o.source_revision {
            Some(r) => (r.clone(), "option: --source-revision"),
            None => ("unknown".to_string(), "default"),
        };
        put(PROVENANCE_REVISION, Value::String(rev), rev_from);
        put(
            PROVENANCE_FILES,
            Value::Array(Array::String(self.source_files.clone())),
            "derived: source weight files",
        );
        put(
            PROVENANCE_SHA256,
            Value::Array(Array::String(vec![
                HASH_PLACEHOLDER.to_string();
                self.source_files.len()
            ])),
            "derived: SHA256 of each source weight file",
        );
        put(
            PROVENANCE_PARAMETERS,
            Value::U64(self.parameters),
            "derived: sum of converted tensor elements",
        );
        put(
            PROVENANCE_CONVERTER,
            Value::String(converter_version()),
            "default",
        );
        put(
            PROVENANCE_POLICY,
            Value::String(o.outtype.policy_for(o.layout)),
            "option: --outtype",
        );
        if let Some(v) = o
            .vocab
            .as_ref()
            .filter(|_| o.layout == FileLayout::LlamaCpp)
        {
            put(
                PROVENANCE_VOCAB_SHA256,
                Value::String(v.sha256.clone()),
                "option: --vocab-from",
            );
        }
        Ok(m)
    }

    /// The metadata with the source hashes filled in (`source_sha256[i]` for file `i`).
    pub fn metadata(&self, source_sha256: &[String]) -> Vec<MetaEntry> {
        let mut m = self.meta.clone();
        assert_eq!(source_sha256.len(), self.source_files.len());
        assert!(source_sha256
            .iter()
            .all(|h| h.len() == HASH_PLACEHOLDER.len()));
        for e in &mut m {
            if e.key == PROVENANCE_SHA256 {
                e.value = Value::Array(Array::String(source_sha256.to_vec()));
            }
        }
        m
    }

    /// The GGUF header for the given source hashes.
    pub fn header(&self, source_sha256: &[String]) -> Header {
        let mut h = Header::new();
        for e in self.metadata(source_sha256) {
            h.push_kv(e.key, e.value)
                .expect("plan keys are unique and well-formed");
        }
        for t in &self.tensors {
            h.push_tensor(TensorInfo {
                name: t.name.clone(),
                dims: t.dims.clone(),
                ty: t.ty,
            })
            .expect("plan tensors were checked");
        }
        h
    }

    /// Where everything goes; identical for any source hashes.
    pub fn layout(&self) -> Layout {
        self.header(&vec![HASH_PLACEHOLDER.to_string(); self.source_files.len()])
            .layout()
    }

    /// Tensor count per output type, in type-id order.
    pub fn type_counts(&self) -> Vec<(GgmlType, usize)> {
        let mut counts: Vec<(GgmlType, usize)> = Vec::new();
        for t in &self.tensors {
            match counts.iter_mut().find(|(ty, _)| *ty == t.ty) {
                Some((_, n)) => *n += 1,
                None => counts.push((t.ty, 1)),
            }
        }
        counts.sort_by_key(|(ty, _)| ty.id());
        counts
    }

    /// The default output file name: `<name>-<TYPE>.gguf`.
    pub fn default_file_name(&self) -> String {
        default_file_name(&self.name, self.options.outtype)
    }
}

/// The type policy of `layout`: [`policy_type`], except that llama.cpp's converter
/// writes the confidence head's weight, a one-row matrix, at the output type (F16 when
/// its row is not whole blocks, `docs/LLAMA-CPP.md` §2.5).
pub fn layout_policy_type(
    layout: FileLayout,
    role: Role,
    outtype: OutType,
    ne0: u64,
) -> (GgmlType, Option<String>) {
    match (layout, role) {
        (FileLayout::LlamaCpp, Role::ConfidenceWeight) => {
            policy_type(Role::Projection, outtype, ne0)
        }
        _ => policy_type(role, outtype, ne0),
    }
}

/// The type policy (`docs/OUTPUT-CONTRACT.md` §2): the type a tensor of `role` gets under
/// `outtype`, and why it falls back to F16 when its rows (`ne0` values) are not whole
/// blocks of the policy's type.
pub fn policy_type(role: Role, outtype: OutType, ne0: u64) -> (GgmlType, Option<String>) {
    let policy = match role {
        Role::Norm | Role::ConfidenceWeight | Role::ConfidenceBias => GgmlType::F32,
        Role::Projection | Role::Markov | Role::Embedding | Role::LmHead => outtype.matrix_type(),
    };
    if ne0.is_multiple_of(policy.block_size()) {
        (policy, None)
    } else {
        (
            GgmlType::F16,
            Some(format!(
                "row length {ne0} is not a multiple of {policy}'s block size {}",
                policy.block_size()
            )),
        )
    }
}

/// The source folder's own name (`model` when it has none, e.g. `/`).
fn folder_name(dir: &std::path::Path) -> String {
    dir.canonicalize()
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "model".to_string())
}

/// `general.name`: `--name`, else the `--source-repo` name, else the source folder's name.
/// Known before the source is read, so a default output path can be checked first.
pub fn model_name(src_dir: &std::path::Path, options: &Options) -> String {
    options.name.clone().unwrap_or_else(|| {
        options
            .source_repo
            .as_deref()
            .map(|r| r.rsplit('/').next().unwrap_or(r).to_string())
            .unwrap_or_else(|| folder_name(src_dir))
    })
}

/// The default output file name: `<name>-<TYPE>.gguf`.
pub fn default_file_name(name: &str, outtype: OutType) -> String {
    format!("{name}-{}.gguf", outtype.label())
}

/// The source name a missing GGUF tensor would have had, for messages.
fn gguf_to_source_hint(gguf: &str) -> String {
    use crate::names::{HEAD_TENSORS, TAIL_TENSORS};
    for (srcs, g, _) in HEAD_TENSORS.iter().chain(TAIL_TENSORS.iter()) {
        if *g == gguf {
            return srcs[0].to_string();
        }
    }
    if let Some(rest) = gguf.strip_prefix("blk.") {
        if let Some((i, suffix)) = rest.split_once('.') {
            if let Some((src, ..)) = LAYER_TENSORS.iter().find(|t| t.1.suffix() == suffix) {
                return format!("layers.{i}.{src}");
            }
        }
    }
    gguf.to_string()
}

/// `dspark <version>`.
pub fn converter_version() -> String {
    format!("dspark {}", env!("CARGO_PKG_VERSION"))
}

/// Parameter-count label as gguf-py writes it (two significant digits at least):
/// 2,249,289,601 → `2.2B`, 120,000 → `120K`.
pub fn size_label(n: u64) -> String {
    let (scaled, suffix) = match n as f64 {
        x if x >= 1e12 => (x / 1e12, "T"),
        x if x >= 1e9 => (x / 1e9, "B"),
        x if x >= 1e6 => (x / 1e6, "M"),
        x => (x / 1e3, "K"),
    };
    let int_digits = format!("{}", scaled.round() as u64)
        .trim_start_matches('0')
        .len();
    let decimals = 2usize.saturating_sub(int_digits);
    format!("{scaled:.decimals$}{suffix}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_labels() {
        assert_eq!(size_label(2_249_289_601), "2.2B");
        assert_eq!(size_label(120_000), "120K");
        assert_eq!(size_label(596_000_000), "596M");
        assert_eq!(size_label(7_600_000_000), "7.6B");
    }
}

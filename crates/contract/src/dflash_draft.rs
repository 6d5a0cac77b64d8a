//! The generic `dflash-draft` drafter (`docs/GGUF.md` §5): what Lucebox's loader
//! reads (every rule of §5.4, key types included), made strict where dspark's runtime
//! needs more (a mask token, exact shapes, F32 norms, no stray tensors), and what
//! `dspark convert` writes (`docs/OUTPUT-CONTRACT.md` §3).
//!
//! Keys are `<arch>.<suffix>` with `<arch>` one of [`ACCEPTED_ARCHS`]. Required:
//! `embedding_length`, `block_count`, `feed_forward_length`, `attention.head_count`,
//! `attention.head_count_kv`, `attention.key_length`, `rope.freq_base`,
//! `dflash.block_size`, `dflash.target_layer_ids`, `dflash.mask_token_id`. Optional, and
//! cross-checked when present: `dflash.n_target_layers`, `dflash.n_target_features`,
//! `dflash.target_block_count`, `dflash.target_hidden_size`, `vocab_size`,
//! `context_length`, `attention.value_length`, `attention.layer_norm_rms_epsilon` (default
//! 1e-6, Lucebox's compile-time value), `dflash.sample_from_anchor` (default: true with a
//! Markov head), `rope.scaling.*` (`yarn` only), the DSpark keys.

use dspark_gguf::{Array, GgmlType, GgufFile, Value};

use crate::bounds;
use crate::check::{Checker, Role, TensorRef};
use crate::finding::{ContractError, Finding};
use crate::layer::{attention_dims, check_layer, LayerRefs};
use crate::names::tensors::LayerDims;
use crate::names::{self, key, keys, tensors};

/// Architecture names the generic loader accepts (`docs/GGUF.md` §5.1); dspark
/// writes the first.
pub const ACCEPTED_ARCHS: [&str; 3] =
    ["dflash-draft", "qwen35-dflash-draft", "gemma4-dflash-draft"];

/// The architecture `dspark convert` writes.
pub const ARCH: &str = ACCEPTED_ARCHS[0];

/// What the contract calls this kind in messages.
pub const KIND: &str = "dflash-draft drafter";

/// RMSNorm epsilon when the key is absent (Lucebox's graph uses 1e-6).
pub const DEFAULT_RMS_EPS: f32 = 1e-6;

/// The one Markov head kind that runs.
pub const MARKOV_HEAD_VANILLA: &str = "vanilla";

/// YaRN RoPE scaling (`docs/RUNTIME-MATH.md` §2.2).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct YarnParams {
    /// `rope.scaling.factor` s.
    pub factor: f32,
    /// `rope.scaling.original_context_length`.
    pub original_context: u32,
    /// `rope.scaling.yarn_beta_fast` (default 32).
    pub beta_fast: f32,
    /// `rope.scaling.yarn_beta_slow` (default 1).
    pub beta_slow: f32,
    /// `rope.scaling.attn_factor`, when given.
    pub attention_factor: Option<f32>,
}

/// The hyper-parameters of a checked drafter, whatever its file layout.
#[derive(Clone, Debug, PartialEq)]
pub struct DraftHparams {
    /// Hidden size (the target's).
    pub hidden: usize,
    /// Draft decoder layers.
    pub layers: usize,
    /// Query heads.
    pub heads: usize,
    /// Key/value heads.
    pub kv_heads: usize,
    /// Head size.
    pub head_dim: usize,
    /// FFN inner size.
    pub ffn: usize,
    /// Tokens per block B.
    pub block_size: usize,
    /// Captured target layers, 0-based, in `fc` input order (distinct).
    pub target_layer_ids: Vec<usize>,
    /// The token filling the block after the anchor.
    pub mask_token_id: u32,
    /// Drafts come from rows 0..B−1 (DSpark) rather than 1..B−1 (z-lab DFlash).
    pub sample_from_anchor: bool,
    /// RMSNorm epsilon.
    pub eps: f32,
    /// RoPE base.
    pub rope_base: f32,
    /// YaRN scaling, when the file asks for it.
    pub yarn: Option<YarnParams>,
    /// The target vocabulary the drafter was made for (`vocab_size`), when given.
    pub target_vocab: Option<usize>,
    /// The target's depth (`dflash.target_block_count`), when given.
    pub target_layers: Option<usize>,
    /// Positions the drafter was made for (`context_length`), when given.
    pub context: Option<usize>,
}

/// The DSpark Markov head: `bias(prev) = W2 · W1[prev]`, both stored `[R, V]`.
#[derive(Clone, Debug, PartialEq)]
pub struct MarkovRefs<'f> {
    /// `[R, V]`: row `prev` is the rank-R embedding of the previous token.
    pub w1: TensorRef<'f>,
    /// `[R, V]`: V rows of R, the map to logits.
    pub w2: TensorRef<'f>,
    /// Rank R.
    pub rank: usize,
    /// Vocabulary V.
    pub vocab: usize,
}

/// The DSpark confidence head: `sigmoid(w · x + b)`.
#[derive(Clone, Debug, PartialEq)]
pub struct ConfidenceRefs<'f> {
    /// `[C]`, C = hidden or hidden + R.
    pub weight: TensorRef<'f>,
    /// `[1]`.
    pub bias: TensorRef<'f>,
    /// The input includes the Markov embedding (C = hidden + R).
    pub with_markov: bool,
}

/// A drafter file that satisfies its contract: the proof value only the checks create,
/// which the drafter loader requires.
#[derive(Clone, Debug)]
pub struct DraftFile<'f> {
    pub(crate) arch: &'f str,
    pub(crate) hparams: DraftHparams,
    pub(crate) fc: TensorRef<'f>,
    pub(crate) hidden_norm: TensorRef<'f>,
    pub(crate) output_norm: TensorRef<'f>,
    pub(crate) layers: Vec<LayerRefs<'f>>,
    pub(crate) markov: Option<MarkovRefs<'f>>,
    pub(crate) confidence: Option<ConfidenceRefs<'f>>,
    pub(crate) token_embd: Option<TensorRef<'f>>,
    pub(crate) output: Option<TensorRef<'f>>,
}

impl<'f> DraftFile<'f> {
    /// `general.architecture`.
    pub fn arch(&self) -> &'f str {
        self.arch
    }
    /// Hyper-parameters.
    pub fn hparams(&self) -> &DraftHparams {
        &self.hparams
    }
    /// Feature fusion, `[captured × hidden, hidden]`.
    pub fn fc(&self) -> &TensorRef<'f> {
        &self.fc
    }
    /// RMSNorm after the fusion.
    pub fn hidden_norm(&self) -> &TensorRef<'f> {
        &self.hidden_norm
    }
    /// Final RMSNorm.
    pub fn output_norm(&self) -> &TensorRef<'f> {
        &self.output_norm
    }
    /// Decoder layers.
    pub fn layers(&self) -> &[LayerRefs<'f>] {
        &self.layers
    }
    /// The Markov head, if present.
    pub fn markov(&self) -> Option<&MarkovRefs<'f>> {
        self.markov.as_ref()
    }
    /// The confidence head, if present.
    pub fn confidence(&self) -> Option<&ConfidenceRefs<'f>> {
        self.confidence.as_ref()
    }
    /// The drafter's own token embedding (else the target's is used).
    pub fn token_embd(&self) -> Option<&TensorRef<'f>> {
        self.token_embd.as_ref()
    }
    /// The drafter's own LM head (else the target's is used).
    pub fn output(&self) -> Option<&TensorRef<'f>> {
        self.output.as_ref()
    }
}

/// Checks `file` against the `dflash-draft` contract; `matrix_types` are the weight
/// types the caller's kernels multiply. Every finding is collected.
pub fn check<'f>(
    file: &'f GgufFile<'f>,
    matrix_types: &[GgmlType],
) -> Result<DraftFile<'f>, ContractError> {
    let mut c = Checker::new(file, matrix_types);
    let value = check_inner(&mut c);
    c.finish(KIND, value)
}

fn check_inner<'f>(c: &mut Checker<'f, '_>) -> Option<DraftFile<'f>> {
    let arch: &'f str = c.string(names::ARCHITECTURE, true)?;
    if !ACCEPTED_ARCHS.contains(&arch) {
        c.key_finding(
            names::ARCHITECTURE,
            format!(
                "is `{arch}`, expected one of {ACCEPTED_ARCHS:?} or `{}` (llama.cpp's layout)",
                crate::llama_dflash::ARCH
            ),
        );
        return None;
    }
    check_general(c);
    let k = |s: &str| key(arch, s);
    let hidden = c.u32_in(&k(keys::EMBEDDING_LENGTH), bounds::EMBEDDING_LENGTH, true);
    let layers = c.u32_in(&k(keys::BLOCK_COUNT), bounds::BLOCK_COUNT, true);
    let ffn = c.u32_in(
        &k(keys::FEED_FORWARD_LENGTH),
        bounds::FEED_FORWARD_LENGTH,
        true,
    );
    let heads = c.u32_in(&k(keys::HEAD_COUNT), bounds::HEAD_COUNT, true);
    let kv_heads = c.u32_in(&k(keys::HEAD_COUNT_KV), bounds::HEAD_COUNT, true);
    let head_dim = c.u32_in(&k(keys::KEY_LENGTH), bounds::HEAD_DIM, true);
    if let (Some(hd), Some(v)) = (head_dim, c.u32(&k(keys::VALUE_LENGTH), false)) {
        if u64::from(v) != hd {
            c.key_finding(
                &k(keys::VALUE_LENGTH),
                format!("is {v}, expected the key length {hd} (the runtime uses one head size)"),
            );
        }
    }
    let context = c.u32_in(&k(keys::CONTEXT_LENGTH), bounds::CONTEXT_LENGTH, false);
    let rope_base = c.positive_f32(&k(keys::ROPE_FREQ_BASE), None, f32::MAX);
    let eps = c.positive_f32(
        &k(keys::RMS_EPS),
        Some(DEFAULT_RMS_EPS),
        bounds::MAX_RMS_EPS,
    );
    let yarn = check_rope_scaling(c, arch);
    if let Some(hd) = head_dim {
        c.unsupported_rope_keys(arch, hd, matches!(yarn, Some(Some(_))), true);
    }
    let block_size = c.u32_in(&k(keys::DFLASH_BLOCK_SIZE), bounds::BLOCK_SIZE, true);
    let mask = c.u32(&k(keys::DFLASH_MASK_TOKEN_ID), true);
    let target_vocab = c.u32_in(&k(keys::VOCAB_SIZE), bounds::VOCAB, false);
    if let (Some(m), Some(v)) = (mask, target_vocab) {
        if u64::from(m) >= v {
            c.key_finding(
                &k(keys::DFLASH_MASK_TOKEN_ID),
                format!(
                    "is {m}, outside the vocabulary of {v} tokens ({})",
                    k(keys::VOCAB_SIZE)
                ),
            );
        }
    }
    let target_layers = c.u32_in(
        &k(keys::DFLASH_TARGET_BLOCK_COUNT),
        bounds::BLOCK_COUNT,
        false,
    );
    let ids = check_layer_ids(c, arch, target_layers);
    if let (Some(h), Some(th)) = (hidden, c.u32(&k(keys::DFLASH_TARGET_HIDDEN_SIZE), false)) {
        if u64::from(th) != h {
            c.key_finding(
                &k(keys::DFLASH_TARGET_HIDDEN_SIZE),
                format!("is {th}, but the drafter's embedding_length is {h}: the fc input must be captured layers × the same hidden size"),
            );
        }
    }
    let (hidden, layers, ffn, heads, kv_heads, head_dim) =
        (hidden?, layers?, ffn?, heads?, kv_heads?, head_dim?);
    let n_cap = ids.as_ref().map(|v| v.len() as u64);
    if let (Some(n), Some(feat)) = (n_cap, c.u32(&k(keys::DFLASH_N_TARGET_FEATURES), false)) {
        if u64::from(feat) != n * hidden {
            c.key_finding(
                &k(keys::DFLASH_N_TARGET_FEATURES),
                format!(
                    "is {feat}, expected captured layers × embedding_length = {}",
                    n * hidden
                ),
            );
        }
    }
    let sample_from_anchor = c.bool(&k(keys::DFLASH_SAMPLE_FROM_ANCHOR));
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
    let (dims, n_cap, rope_base, eps, block_size, mask) =
        (dims?, n_cap?, rope_base?, eps?, block_size?, mask?);
    let yarn = yarn?;

    // Tensors.
    let fc = c.tensor(tensors::DFLASH_FC, Role::Matrix, &[n_cap * hidden, hidden]);
    let hidden_norm = c.tensor(tensors::DFLASH_HIDDEN_NORM, Role::Vector, &[hidden]);
    let layer_refs: Vec<Option<LayerRefs<'f>>> =
        (0..layers).map(|i| check_layer(c, i, &dims)).collect();
    let output_norm = c.tensor(tensors::OUTPUT_NORM, Role::Vector, &[hidden]);
    let markov = check_markov(c, arch, target_vocab);
    let confidence = check_confidence(c, arch, hidden, markov.as_ref().and_then(|m| m.as_ref()));
    let vocab_for_own = markov
        .as_ref()
        .and_then(|m| m.as_ref())
        .map(|m| m.vocab as u64)
        .or(target_vocab);
    let own = |c: &mut Checker<'f, '_>, name: &str| -> Option<Option<TensorRef<'f>>> {
        if !c.has(name) {
            return Some(None);
        }
        let Some(v) = vocab_for_own.or_else(|| c.dims(name).and_then(|d| d.get(1).copied())) else {
            c.findings
                .push(Finding::tensor(name, "has no vocabulary dimension"));
            return None;
        };
        c.tensor(name, Role::Matrix, &[hidden, v]).map(Some)
    };
    let token_embd = own(c, tensors::TOKEN_EMBD);
    let output = own(c, tensors::OUTPUT);
    c.no_other_tensors(KIND);
    let sample_from_anchor = sample_from_anchor.unwrap_or(matches!(markov, Some(Some(_))));
    Some(DraftFile {
        arch,
        hparams: DraftHparams {
            hidden: hidden as usize,
            layers: layers as usize,
            heads: heads as usize,
            kv_heads: kv_heads as usize,
            head_dim: head_dim as usize,
            ffn: ffn as usize,
            block_size: block_size as usize,
            target_layer_ids: ids?,
            mask_token_id: mask,
            sample_from_anchor,
            eps,
            rope_base,
            yarn,
            target_vocab: target_vocab.map(|v| v as usize),
            target_layers: target_layers.map(|v| v as usize),
            context: context.map(|v| v as usize),
        },
        fc: fc?,
        hidden_norm: hidden_norm?,
        output_norm: output_norm?,
        layers: layer_refs.into_iter().collect::<Option<Vec<_>>>()?,
        markov: markov?,
        confidence: confidence?,
        token_embd: token_embd?,
        output: output?,
    })
}

/// `rope.scaling.*`: absent or `none` (plain RoPE), or `yarn` with sound parameters.
/// `Some(None)` for plain RoPE, `None` after a finding.
pub(crate) fn check_rope_scaling(
    c: &mut Checker<'_, '_>,
    arch: &str,
) -> Option<Option<YarnParams>> {
    let k = |s: &str| key(arch, s);
    match c.string(&k(keys::ROPE_SCALING_TYPE), false) {
        None | Some("none") => Some(None),
        Some("yarn") => {
            let factor = c.f32(&k(keys::ROPE_SCALING_FACTOR), false).unwrap_or(1.0);
            if !bounds::YARN_FACTOR.contains(&factor) {
                c.key_finding(
                    &k(keys::ROPE_SCALING_FACTOR),
                    format!(
                        "is {factor}, expected {}..={}",
                        bounds::YARN_FACTOR.start(),
                        bounds::YARN_FACTOR.end()
                    ),
                );
            }
            let original = c.u32_in(
                &k(keys::ROPE_SCALING_ORIGINAL_CONTEXT),
                bounds::CONTEXT_LENGTH,
                true,
            );
            let mut beta = |s: &str, default: f32| -> Option<f32> {
                let v = c.f32(&k(s), false).unwrap_or(default);
                if !v.is_finite() {
                    c.key_finding(&k(s), format!("is {v}, expected a finite value"));
                    return None;
                }
                Some(v)
            };
            let beta_fast = beta(keys::ROPE_SCALING_YARN_BETA_FAST, 32.0);
            let beta_slow = beta(keys::ROPE_SCALING_YARN_BETA_SLOW, 1.0);
            let attention_factor = if c.file.get(&k(keys::ROPE_SCALING_ATTN_FACTOR)).is_some() {
                Some(c.positive_f32(&k(keys::ROPE_SCALING_ATTN_FACTOR), None, f32::MAX)?)
            } else {
                None
            };
            if !bounds::YARN_FACTOR.contains(&factor) {
                return None;
            }
            Some(Some(YarnParams {
                factor,
                original_context: original? as u32,
                beta_fast: beta_fast?,
                beta_slow: beta_slow?,
                attention_factor,
            }))
        }
        Some(other) => {
            c.key_finding(
                &k(keys::ROPE_SCALING_TYPE),
                format!("is `{other}`, expected `yarn` or `none`"),
            );
            None
        }
    }
}

/// `dflash.target_layer_ids`: non-negative, distinct, within the target's depth when it is
/// given, as many as `dflash.n_target_layers` says when that is given.
fn check_layer_ids(c: &mut Checker<'_, '_>, arch: &str, depth: Option<u64>) -> Option<Vec<usize>> {
    let ids_key = key(arch, keys::DFLASH_TARGET_LAYER_IDS);
    let n_key = key(arch, keys::DFLASH_N_TARGET_LAYERS);
    let ids = c.array(&ids_key, "ARRAY[INT32]", true, |a| match a {
        Array::I32(v) => Some(&v[..]),
        _ => None,
    });
    let n = c.u32(&n_key, false);
    let ids = ids?;
    if !bounds::CAPTURED_LAYERS.contains(&(ids.len() as u64)) {
        c.key_finding(
            &ids_key,
            format!(
                "has {} ids, expected {}..={}",
                ids.len(),
                bounds::CAPTURED_LAYERS.start(),
                bounds::CAPTURED_LAYERS.end()
            ),
        );
        return None;
    }
    if let Some(n) = n {
        if u64::from(n) != ids.len() as u64 {
            c.key_finding(
                &n_key,
                format!("is {n}, but {ids_key} has {} ids", ids.len()),
            );
        }
    }
    let mut ok = true;
    let mut seen = std::collections::BTreeSet::new();
    for &id in ids {
        if id < 0 || id as u64 >= *bounds::BLOCK_COUNT.end() {
            c.key_finding(
                &ids_key,
                format!(
                    "has layer id {id}, expected 0..{}",
                    bounds::BLOCK_COUNT.end()
                ),
            );
            ok = false;
        } else if depth.is_some_and(|d| id as u64 >= d) {
            c.key_finding(
                &ids_key,
                format!(
                    "captures layer {id}, outside the target's {} layers",
                    depth.unwrap_or(0)
                ),
            );
            ok = false;
        } else if !seen.insert(id) {
            c.key_finding(&ids_key, format!("captures layer {id} twice"));
            ok = false;
        }
    }
    ok.then(|| ids.iter().map(|&i| i as usize).collect())
}

/// The Markov head: present when `dflash.dspark.enabled` ≠ 0 or either matrix exists;
/// then both are `[R, V]` with R and V from the keys, else from `w1`; the head kind must
/// be `vanilla`. `Some(None)` when absent, `None` after a finding.
fn check_markov<'f>(
    c: &mut Checker<'f, '_>,
    arch: &str,
    target_vocab: Option<u64>,
) -> Option<Option<MarkovRefs<'f>>> {
    let k = |s: &str| key(arch, s);
    let enabled_key = c.u32(&k(keys::DSPARK_ENABLED), false);
    let enabled = enabled_key.unwrap_or(0) != 0;
    let rank_key = c.u32_in(&k(keys::DSPARK_MARKOV_RANK), bounds::MARKOV_RANK, false);
    let vocab_key = c.u32_in(&k(keys::DSPARK_VOCAB_SIZE), bounds::VOCAB, false);
    let head_type = c.string(&k(keys::DSPARK_MARKOV_HEAD_TYPE), false);
    let tensors_present = c.has(tensors::DSPARK_MARKOV_W1) || c.has(tensors::DSPARK_MARKOV_W2);
    match enabled_key {
        Some(v) if v > 1 => {
            c.key_finding(&k(keys::DSPARK_ENABLED), format!("is {v}, expected 0 or 1"));
            return None;
        }
        Some(0) if tensors_present => {
            c.key_finding(
                &k(keys::DSPARK_ENABLED),
                "is 0, but the Markov head's tensors are present",
            );
            return None;
        }
        _ => {}
    }
    if !(enabled || tensors_present) {
        return Some(None);
    }
    if let Some(t) = head_type.filter(|t| *t != MARKOV_HEAD_VANILLA) {
        c.key_finding(
            &k(keys::DSPARK_MARKOV_HEAD_TYPE),
            format!("is `{t}`: only the `{MARKOV_HEAD_VANILLA}` Markov head runs"),
        );
        return None;
    }
    let w1_dims = match c.dims(tensors::DSPARK_MARKOV_W1) {
        Some(d) => d,
        None => {
            c.findings.push(Finding::tensor(
                tensors::DSPARK_MARKOV_W1,
                "missing (the Markov head needs w1 and w2)",
            ));
            return None;
        }
    };
    let rank = rank_key.or_else(|| w1_dims.first().copied());
    let vocab = vocab_key.or_else(|| w1_dims.get(1).copied());
    let (Some(r), Some(v)) = (rank, vocab) else {
        c.findings.push(Finding::tensor(
            tensors::DSPARK_MARKOV_W1,
            format!("has ne {w1_dims:?}, expected [rank, vocab]"),
        ));
        return None;
    };
    if !c.tensor_dim_in(tensors::DSPARK_MARKOV_W1, "rank", r, bounds::MARKOV_RANK) {
        return None;
    }
    if let Some(tv) = target_vocab.filter(|&tv| tv != v) {
        c.key_finding(
            &k(keys::VOCAB_SIZE),
            format!("is {tv}, but the Markov head covers {v} tokens"),
        );
    }
    let w1 = c.tensor(tensors::DSPARK_MARKOV_W1, Role::Matrix, &[r, v]);
    let w2 = c.tensor(tensors::DSPARK_MARKOV_W2, Role::Matrix, &[r, v]);
    Some(Some(MarkovRefs {
        w1: w1?,
        w2: w2?,
        rank: r as usize,
        vocab: v as usize,
    }))
}

/// The confidence head: present when `dflash.dspark.confidence_dim` ≠ 0 or either tensor
/// exists; then both, the weight `[C]` with C = hidden or hidden + R (and
/// `confidence_with_markov`, when given, saying which), the bias `[1]`.
fn check_confidence<'f>(
    c: &mut Checker<'f, '_>,
    arch: &str,
    hidden: u64,
    markov: Option<&MarkovRefs<'f>>,
) -> Option<Option<ConfidenceRefs<'f>>> {
    let k = |s: &str| key(arch, s);
    let dim = c.u32(&k(keys::DSPARK_CONFIDENCE_DIM), false).unwrap_or(0);
    let with_markov_key = c.bool(&k(keys::DSPARK_CONFIDENCE_WITH_MARKOV));
    let (w, b) = (
        tensors::DSPARK_CONFIDENCE_WEIGHT,
        tensors::DSPARK_CONFIDENCE_BIAS,
    );
    if !(dim != 0 || c.has(w) || c.has(b)) {
        return Some(None);
    }
    let width = if dim != 0 {
        u64::from(dim)
    } else {
        match c.dims(w) {
            Some(d) if d.len() == 1 => d[0],
            Some(d) => {
                c.findings.push(Finding::tensor(
                    w,
                    format!("has ne {d:?}, expected [width]"),
                ));
                return None;
            }
            None => {
                c.findings.push(Finding::tensor(
                    w,
                    "missing (the confidence head needs a weight and a bias)",
                ));
                return None;
            }
        }
    };
    let rank = markov.map(|m| m.rank as u64);
    let with_markov = if width == hidden {
        false
    } else if Some(width) == rank.map(|r| hidden + r) {
        true
    } else {
        c.findings.push(Finding::tensor(
            w,
            format!(
                "width {width} is neither hidden ({hidden}) nor hidden + Markov rank{}",
                rank.map_or(" (there is no Markov head)".to_string(), |r| format!(
                    " ({})",
                    hidden + r
                ))
            ),
        ));
        return None;
    };
    if with_markov_key.is_some_and(|wm| wm != with_markov) {
        c.key_finding(
            &k(keys::DSPARK_CONFIDENCE_WITH_MARKOV),
            format!(
                "is {}, but the confidence width {width} says {with_markov}",
                !with_markov
            ),
        );
    }
    let weight = c.tensor(w, Role::Vector, &[width]);
    let bias = c.tensor(b, Role::Vector, &[1]);
    Some(Some(ConfidenceRefs {
        weight: weight?,
        bias: bias?,
        with_markov,
    }))
}

/// The drafter's `general.file_type` and `general.quantization_version`, when present,
/// are UINT32 (Lucebox's `gguf_inspect` reads them with aborting getters).
pub(crate) fn check_general(c: &mut Checker<'_, '_>) {
    for key in [
        names::general::FILE_TYPE,
        names::general::QUANTIZATION_VERSION,
    ] {
        c.u32(key, false);
    }
    if let Some(v) = c.file.get(names::general::NAME) {
        if !matches!(v, Value::String(_)) {
            c.key_finding(
                names::general::NAME,
                format!("is {}, expected STRING", v.type_name()),
            );
        }
    }
}

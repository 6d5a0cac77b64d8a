//! A Qwen3 target in llama.cpp's `qwen3` layout (`llama-arch.cpp` `LLM_ARCH_QWEN3`,
//! `llama-model.cpp`): keys `qwen3.*`, tensors `token_embd`, `blk.{i}.*` (eleven per
//! layer), `output_norm`, and `output` unless the LM head is tied to the embedding.
//!
//! Keys as llama.cpp reads them: `context_length`, `embedding_length`, `block_count`,
//! `feed_forward_length`, `attention.head_count` and `attention.layer_norm_rms_epsilon`
//! required; `attention.head_count_kv` (default: head_count), `attention.key_length` and
//! `value_length` (default hidden / heads; they must be equal), `rope.freq_base` (default
//! 10,000, llama.cpp's `rope_freq_base_train` default) optional. RoPE scaling is not
//! supported (refused unless `none`).

use dspark_gguf::GgufFile;

use crate::bounds;
use crate::check::{Checker, Role, TensorRef};
use crate::finding::ContractError;
use crate::layer::{attention_dims, check_layer, LayerRefs};
use crate::names::tensors::LayerDims;
use crate::names::{key, keys, tensors};
use crate::vocab::{check_vocab, GgufVocab, SpecialTokens};

/// `general.architecture` of this kind.
pub const ARCH: &str = "qwen3";

/// What the contract calls this kind in messages.
pub const KIND: &str = "qwen3 target";

/// llama.cpp's default RoPE base when `rope.freq_base` is absent.
pub const DEFAULT_ROPE_BASE: f32 = 10_000.0;

/// The hyper-parameters of a checked Qwen3 target (serialized under their GGUF key names).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Qwen3Hparams {
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
    /// `attention.key_length`.
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
}

/// A GGUF that satisfies the `qwen3` contract: the proof value [`check`] alone creates,
/// which the target loader requires. Every tensor is listed here, checked.
#[derive(Clone, Debug)]
pub struct Qwen3File<'f> {
    hparams: Qwen3Hparams,
    token_embd: TensorRef<'f>,
    output_norm: TensorRef<'f>,
    output: Option<TensorRef<'f>>,
    layers: Vec<LayerRefs<'f>>,
    vocab: Option<GgufVocab<'f>>,
    special: SpecialTokens,
}

impl<'f> Qwen3File<'f> {
    /// Hyper-parameters.
    pub fn hparams(&self) -> &Qwen3Hparams {
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
    /// The decoder layers.
    pub fn layers(&self) -> &[LayerRefs<'f>] {
        &self.layers
    }
    /// The tokenizer the file carries, if any.
    pub fn vocab(&self) -> Option<&GgufVocab<'f>> {
        self.vocab.as_ref()
    }
    /// The special tokens it declares (each inside the vocabulary).
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

impl<'f> crate::TargetContract<'f> for Qwen3File<'f> {
    fn arch(&self) -> &'static str {
        ARCH
    }
    fn kind(&self) -> &'static str {
        KIND
    }
    fn shape(&self) -> crate::TargetShape {
        Qwen3File::shape(self)
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
        crate::TargetSummary::new(
            ARCH,
            h,
            self.output.is_none(),
            self.vocab.as_ref(),
            self.special,
            format!(
                "hidden {}, {} layers, {}/{} heads of {}, FFN {}, vocabulary {}, context {}",
                h.hidden, h.layers, h.heads, h.kv_heads, h.head_dim, h.ffn, h.vocab, h.context
            ),
        )
    }
}

/// Checks `file` against the `qwen3` contract. `matrix_types` are the weight types the
/// caller's kernels multiply (norms must be F32). Every finding is collected.
pub fn check<'f>(
    file: &'f GgufFile<'f>,
    matrix_types: &[dspark_gguf::GgmlType],
) -> Result<Qwen3File<'f>, ContractError> {
    let mut c = Checker::new(file, matrix_types);
    let value = check_inner(&mut c);
    c.finish(KIND, value)
}

fn check_inner<'f>(c: &mut Checker<'f, '_>) -> Option<Qwen3File<'f>> {
    c.architecture_is(ARCH)?;
    let k = |s: &str| key(ARCH, s);
    let hidden = c.u32_in(&k(keys::EMBEDDING_LENGTH), bounds::EMBEDDING_LENGTH, true);
    let layers = c.u32_in(&k(keys::BLOCK_COUNT), bounds::BLOCK_COUNT, true);
    let ffn = c.u32_in(
        &k(keys::FEED_FORWARD_LENGTH),
        bounds::FEED_FORWARD_LENGTH,
        true,
    );
    let heads = c.u32_in(&k(keys::HEAD_COUNT), bounds::HEAD_COUNT, true);
    let context = c.u32_in(&k(keys::CONTEXT_LENGTH), bounds::CONTEXT_LENGTH, true);
    let kv_heads = match c.file.get(&k(keys::HEAD_COUNT_KV)) {
        None => heads,
        Some(_) => c.u32_in(&k(keys::HEAD_COUNT_KV), bounds::HEAD_COUNT, true),
    };
    let head_dim = c.head_dim(ARCH, hidden, heads);
    if let (Some(hd), Some(_)) = (head_dim, c.file.get(&k(keys::VALUE_LENGTH))) {
        if let Some(v) = c.u32(&k(keys::VALUE_LENGTH), true) {
            if u64::from(v) != hd {
                c.key_finding(
                    &k(keys::VALUE_LENGTH),
                    format!("is {v}, expected the key length {hd} (Qwen3 has equal head sizes)"),
                );
            }
        }
    }
    let eps = c.positive_f32(&k(keys::RMS_EPS), None, bounds::MAX_RMS_EPS);
    let rope_base = c.positive_f32(&k(keys::ROPE_FREQ_BASE), Some(DEFAULT_ROPE_BASE), f32::MAX);
    match c.string(&k(keys::ROPE_SCALING_TYPE), false) {
        None | Some("none") => {}
        Some(other) => c.key_finding(
            &k(keys::ROPE_SCALING_TYPE),
            format!("is `{other}`: RoPE scaling of a qwen3 target is not supported"),
        ),
    }
    if let Some(hd) = head_dim {
        c.unsupported_rope_keys(ARCH, hd, false, true);
    }
    let (hidden, layers, ffn, heads, kv_heads, head_dim, context, eps, rope_base) = (
        hidden?, layers?, ffn?, heads?, kv_heads?, head_dim?, context?, eps?, rope_base?,
    );
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
    )?;
    let vocab = c.vocab_rows(ARCH, hidden)?;
    let token_embd = c.tensor(tensors::TOKEN_EMBD, Role::Matrix, &[hidden, vocab]);
    let output_norm = c.tensor(tensors::OUTPUT_NORM, Role::Vector, &[hidden]);
    let output = c.optional_tensor(tensors::OUTPUT, Role::Matrix, &[hidden, vocab]);
    let layer_refs: Vec<Option<LayerRefs<'f>>> =
        (0..layers).map(|i| check_layer(c, i, &dims)).collect();
    let (vocab_keys, special) = check_vocab(c, vocab);
    c.no_other_tensors(KIND);
    Some(Qwen3File {
        hparams: Qwen3Hparams {
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
        },
        token_embd: token_embd?,
        output_norm: output_norm?,
        output,
        layers: layer_refs.into_iter().collect::<Option<Vec<_>>>()?,
        vocab: vocab_keys,
        special,
    })
}

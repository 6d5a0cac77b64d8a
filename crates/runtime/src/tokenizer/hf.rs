//! The Hugging Face side: `tokenizer.json` files (`--tokenizer`) run through the
//! `tokenizers` crate, and the `tokenizer.json` document of a byte-level BPE vocabulary
//! (the synthetic targets' tokenizers are written with it).

use dspark_contract::char_byte;
use serde_json::json;

use crate::error::{Result, RuntimeError};

/// Qwen2/Qwen3's pre-tokenizer split pattern (llama.cpp pre `qwen2`).
pub const QWEN2_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Llama 3's pre-tokenizer split pattern (llama.cpp pre `llama-bpe`).
pub const LLAMA3_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// The pre-tokenizer and decoder of a byte-level BPE tokenizer for llama.cpp pre-tokenizer
/// `pre`, and whether merges are ignored; `None` when unsupported.
fn byte_level_parts(pre: &str) -> Option<(serde_json::Value, bool)> {
    let split = |regex: &str| {
        json!({"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": false},
            {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
        ]})
    };
    match pre {
        "qwen2" => Some((split(QWEN2_SPLIT), false)),
        "llama-bpe" | "llama3" => Some((split(LLAMA3_SPLIT), true)),
        "gpt-2" => Some((
            json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": true}),
            false,
        )),
        _ => None,
    }
}

/// The ids of `tokens` that are added tokens, and the vocabulary of the others, for
/// [`byte_level_tokenizer_json`]: serialized as the BPE model's `vocab` map without
/// building it.
struct Vocab<'a> {
    tokens: &'a [String],
    special: &'a [bool],
}

impl serde::Serialize for Vocab<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(None)?;
        for (i, t) in self.tokens.iter().enumerate() {
            if !self.special[i] {
                m.serialize_entry(t, &i)?;
            }
        }
        m.end()
    }
}

#[derive(serde::Serialize)]
struct Added<'a> {
    id: usize,
    content: &'a str,
    single_word: bool,
    lstrip: bool,
    rstrip: bool,
    normalized: bool,
    special: bool,
}

#[derive(serde::Serialize)]
struct Bpe<'a> {
    #[serde(rename = "type")]
    ty: &'static str,
    dropout: Option<f32>,
    unk_token: Option<&'a str>,
    continuing_subword_prefix: Option<&'a str>,
    end_of_word_suffix: Option<&'a str>,
    fuse_unk: bool,
    byte_fallback: bool,
    ignore_merges: bool,
    vocab: Vocab<'a>,
    merges: &'a [String],
}

#[derive(serde::Serialize)]
struct Document<'a> {
    version: &'static str,
    truncation: Option<()>,
    padding: Option<()>,
    added_tokens: Vec<Added<'a>>,
    normalizer: Option<()>,
    pre_tokenizer: serde_json::Value,
    post_processor: Option<()>,
    decoder: serde_json::Value,
    model: Bpe<'a>,
}

/// A `tokenizer.json` document (its bytes) for a byte-level BPE vocabulary: `tokens` by
/// id, `special` telling which ids are added tokens (control, user-defined), `merges` in
/// priority order, `pre` the llama.cpp pre-tokenizer.
pub fn byte_level_tokenizer_json(
    tokens: &[String],
    special: &dyn Fn(usize) -> bool,
    merges: &[String],
    pre: &str,
) -> Result<Vec<u8>> {
    let Some((pre_tokenizer, ignore_merges)) = byte_level_parts(pre) else {
        return Err(RuntimeError::Tokenizer(format!(
            "pre-tokenizer `{pre}` is not supported (qwen2, gpt-2, llama-bpe are); give --tokenizer tokenizer.json"
        )));
    };
    let flags: Vec<bool> = (0..tokens.len()).map(special).collect();
    let mut seen = std::collections::HashMap::with_capacity(tokens.len());
    for (i, t) in tokens.iter().enumerate().filter(|&(i, _)| !flags[i]) {
        if let Some(first) = seen.insert(t.as_str(), i) {
            return Err(RuntimeError::Tokenizer(format!(
                "token {t:?} appears twice, as ids {first} and {i}"
            )));
        }
    }
    let doc = Document {
        version: "1.0",
        truncation: None,
        padding: None,
        added_tokens: (0..tokens.len())
            .filter(|&i| flags[i])
            .map(|i| Added {
                id: i,
                content: &tokens[i],
                single_word: false,
                lstrip: false,
                rstrip: false,
                normalized: false,
                special: true,
            })
            .collect(),
        normalizer: None,
        pre_tokenizer,
        post_processor: None,
        decoder: json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}),
        model: Bpe {
            ty: "BPE",
            dropout: None,
            unk_token: None,
            continuing_subword_prefix: None,
            end_of_word_suffix: None,
            fuse_unk: false,
            byte_fallback: false,
            ignore_merges,
            vocab: Vocab {
                tokens,
                special: &flags,
            },
            merges,
        },
    };
    Ok(serde_json::to_vec(&doc).expect("a tokenizer document serializes"))
}

/// Every id's bytes when `inner` is byte-level (its decoder `ByteLevel`): added tokens
/// as their text, others through the byte alphabet; `None` for other tokenizers.
pub(crate) fn byte_pieces(inner: &tokenizers::Tokenizer) -> Option<Vec<Vec<u8>>> {
    if !matches!(
        inner.get_decoder(),
        Some(tokenizers::DecoderWrapper::ByteLevel(_))
    ) {
        return None;
    }
    let added = inner.get_added_tokens_decoder();
    Some(
        (0..inner.get_vocab_size(true) as u32)
            .map(|id| {
                if let Some(a) = added.get(&id) {
                    return a.content.as_bytes().to_vec();
                }
                let Some(t) = inner.id_to_token(id) else {
                    return Vec::new();
                };
                let mut out = Vec::with_capacity(t.len());
                for c in t.chars() {
                    match char_byte(c) {
                        Some(b) => out.push(b),
                        None => out.extend(c.to_string().as_bytes()),
                    }
                }
                out
            })
            .collect(),
    )
}

pub(crate) type HfDecodeStream<'t> = tokenizers::DecodeStream<
    't,
    tokenizers::ModelWrapper,
    tokenizers::NormalizerWrapper,
    tokenizers::PreTokenizerWrapper,
    tokenizers::PostProcessorWrapper,
    tokenizers::DecoderWrapper,
>;

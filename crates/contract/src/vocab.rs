//! llama.cpp's tokenizer keys (`tokenizer.ggml.*`) in a target GGUF.

use dspark_gguf::Array;

use crate::check::Checker;
use crate::names::tokenizer as k;

/// The vocabulary a target GGUF carries: enough to rebuild its tokenizer.
#[derive(Clone, Debug, PartialEq)]
pub struct GgufVocab<'f> {
    /// `tokenizer.ggml.model` (`gpt2` = byte-level BPE, `llama` = SentencePiece, …).
    pub model: &'f str,
    /// `tokenizer.ggml.pre`, the pre-tokenizer.
    pub pre: Option<&'f str>,
    /// Token strings by id; exactly as many as the embedding has rows.
    pub tokens: &'f [String],
    /// Token types by id (same length), when given.
    pub token_type: Option<&'f [i32]>,
    /// BPE merges (`"left right"`), highest priority first; empty when absent.
    pub merges: &'f [String],
    /// Add BOS when encoding.
    pub add_bos: bool,
    /// Add EOS when encoding.
    pub add_eos: bool,
}

/// llama.cpp's token type of padding the converter adds (`gguf.TokenType.UNUSED`).
pub const TOKEN_TYPE_UNUSED: i32 = 5;
/// llama.cpp's token type of control tokens (`<|endoftext|>`, …).
pub const TOKEN_TYPE_CONTROL: i32 = 3;
/// llama.cpp's token type of user-defined (added) tokens.
pub const TOKEN_TYPE_USER_DEFINED: i32 = 4;

/// The special-token ids a target declares (each inside the vocabulary).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct SpecialTokens {
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    pub eot: Option<u32>,
    pub pad: Option<u32>,
    pub mask: Option<u32>,
}

/// Checks the tokenizer keys against a vocabulary of `vocab` ids.
pub(crate) fn check_vocab<'f>(
    c: &mut Checker<'f, '_>,
    vocab: u64,
) -> (Option<GgufVocab<'f>>, SpecialTokens) {
    let mut ids = [None; k::SPECIAL_IDS.len()];
    for (slot, key) in ids.iter_mut().zip(k::SPECIAL_IDS) {
        if let Some(id) = c.u32(key, false) {
            if u64::from(id) >= vocab {
                c.key_finding(
                    key,
                    format!("is {id}, outside the vocabulary of {vocab} tokens"),
                );
            } else {
                *slot = Some(id);
            }
        }
    }
    let special = SpecialTokens {
        bos: ids[0],
        eos: ids[1],
        eot: ids[2],
        pad: ids[5],
        mask: ids[7],
    };
    let add_bos = c.bool(k::ADD_BOS).unwrap_or(false);
    let add_eos = c.bool(k::ADD_EOS).unwrap_or(false);
    let pre = c.string(k::PRE, false);
    let Some(model) = c.string(k::MODEL, false) else {
        if c.file.get(k::TOKENS).is_some() {
            c.key_finding(k::TOKENS, format!("given without {}", k::MODEL));
        }
        return (None, special);
    };
    let tokens = c.array(k::TOKENS, "ARRAY[STRING]", true, |a| match a {
        Array::String(v) => Some(&v[..]),
        _ => None,
    });
    let n = tokens.map_or(0, |t| t.len() as u64);
    if tokens.is_some() && n != vocab {
        c.key_finding(
            k::TOKENS,
            format!("has {n} tokens, but the embedding has {vocab} rows"),
        );
    }
    let token_type = c.array(k::TOKEN_TYPE, "ARRAY[INT32]", false, |a| match a {
        Array::I32(v) => Some(&v[..]),
        _ => None,
    });
    if let Some(tt) = token_type {
        if tt.len() as u64 != n {
            c.key_finding(
                k::TOKEN_TYPE,
                format!("has {} entries for {n} tokens", tt.len()),
            );
        }
    }
    if let Some(scores) = c.array(k::SCORES, "ARRAY[FLOAT32]", false, |a| match a {
        Array::F32(v) => Some(&v[..]),
        _ => None,
    }) {
        if scores.len() as u64 != n {
            c.key_finding(
                k::SCORES,
                format!("has {} entries for {n} tokens", scores.len()),
            );
        }
    }
    let merges = c
        .array(k::MERGES, "ARRAY[STRING]", false, |a| match a {
            Array::String(v) => Some(&v[..]),
            _ => None,
        })
        .unwrap_or(&[]);
    if let Some(i) = merges.iter().position(|m| match m.split_once(' ') {
        Some((a, b)) => a.is_empty() || b.is_empty() || b.contains(' '),
        None => true,
    }) {
        c.key_finding(
            k::MERGES,
            format!(
                "merge {i} ({:?}) is not two tokens separated by one space",
                merges[i]
            ),
        );
    }
    let vocab = tokens.map(|tokens| GgufVocab {
        model,
        pre,
        tokens,
        token_type,
        merges,
        add_bos,
        add_eos,
    });
    (vocab, special)
}

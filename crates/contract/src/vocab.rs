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

/// llama.cpp's token types run from 0 (undefined) to 6 (byte).
pub const TOKEN_TYPES: std::ops::RangeInclusive<i32> = 0..=6;
/// llama.cpp's token type of ordinary tokens.
pub const TOKEN_TYPE_NORMAL: i32 = 1;
/// llama.cpp's token type of padding the converter adds (`gguf.TokenType.UNUSED`).
pub const TOKEN_TYPE_UNUSED: i32 = 5;
/// llama.cpp's token type of control tokens (`<|endoftext|>`, …).
pub const TOKEN_TYPE_CONTROL: i32 = 3;
/// llama.cpp's token type of user-defined (added) tokens.
pub const TOKEN_TYPE_USER_DEFINED: i32 = 4;

/// GPT-2's byte-level alphabet, which every `gpt2` (byte-level BPE) vocabulary spells its
/// ordinary tokens in: printable Latin-1 bytes stand for themselves, the others
/// (controls, space, DEL, NBSP, soft hyphen…) for code points from U+0100 up, in order.
pub fn byte_char(b: u8) -> char {
    let printable = |b: u8| matches!(b, 33..=126 | 161..=172 | 174..=255);
    if printable(b) {
        return char::from(b);
    }
    let rank = (0..b).filter(|&x| !printable(x)).count() as u32;
    char::from_u32(256 + rank).expect("U+0100..U+0143 are characters")
}

/// The byte a character of GPT-2's alphabet stands for.
pub fn char_byte(c: char) -> Option<u8> {
    match c as u32 {
        33..=126 | 161..=172 | 174..=255 => Some(c as u8),
        cp @ 256..=323 => (0..=255u8)
            .filter(|&b| !matches!(b, 33..=126 | 161..=172 | 174..=255))
            .nth((cp - 256) as usize),
        _ => None,
    }
}

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
    if matches!(model, "none" | "no_vocab") {
        // llama.cpp's model without a tokenizer (token ids only; its size from
        // `<arch>.vocab_size`, which the target's contract holds to the embedding).
        if c.file.get(k::TOKENS).is_some() {
            c.key_finding(
                k::TOKENS,
                format!("given with {} `{model}`, which has no tokens", k::MODEL),
            );
        }
        return (None, special);
    }
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
        if let Some(i) = tt.iter().position(|t| !TOKEN_TYPES.contains(t)) {
            c.key_finding(
                k::TOKEN_TYPE,
                format!(
                    "token {i} has type {}, expected {}..={}",
                    tt[i],
                    TOKEN_TYPES.start(),
                    TOKEN_TYPES.end()
                ),
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
    if let (Some(tokens), "gpt2") = (tokens, model) {
        check_byte_level(c, tokens, token_type, merges);
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

/// A byte-level BPE (`gpt2`) vocabulary: ordinary tokens spelled in GPT-2's byte
/// alphabet, one such token for every byte, merges present, and each merge joining two
/// tokens into a third.
fn check_byte_level(
    c: &mut Checker<'_, '_>,
    tokens: &[String],
    token_type: Option<&[i32]>,
    merges: &[String],
) {
    let special = |i: usize| {
        token_type.is_some_and(|tt| {
            matches!(
                tt.get(i),
                Some(&TOKEN_TYPE_CONTROL) | Some(&TOKEN_TYPE_USER_DEFINED)
            )
        })
    };
    if let Some(i) = tokens.iter().position(String::is_empty) {
        c.key_finding(k::TOKENS, format!("token {i} is empty"));
        return;
    }
    if let Some(i) = (0..tokens.len())
        .find(|&i| !special(i) && tokens[i].chars().any(|ch| char_byte(ch).is_none()))
    {
        c.key_finding(
            k::TOKENS,
            format!(
                "token {i} ({:?}) is not spelled in the byte-level alphabet of a gpt2 vocabulary",
                tokens[i]
            ),
        );
        return;
    }
    let known: std::collections::HashSet<&str> = tokens.iter().map(String::as_str).collect();
    if let Some(b) = (0..=255u8).find(|&b| !known.contains::<str>(&byte_char(b).to_string())) {
        c.key_finding(
            k::TOKENS,
            format!(
                "has no token for byte {b:#04x} ({:?}): text containing it cannot be encoded",
                byte_char(b)
            ),
        );
    }
    if merges.is_empty() {
        c.key_finding(
            k::MERGES,
            "missing or empty: a gpt2 (byte-level BPE) vocabulary needs its merges",
        );
        return;
    }
    for (i, m) in merges.iter().enumerate() {
        let Some((a, b)) = m.split_once(' ') else {
            continue;
        };
        let joined = format!("{a}{b}");
        let missing = [a, b, joined.as_str()]
            .into_iter()
            .find(|t| !known.contains::<str>(t))
            .map(String::from);
        if let Some(missing) = missing {
            c.key_finding(
                k::MERGES,
                format!("merge {i} ({m:?}) names {missing:?}, which is not a token"),
            );
            return;
        }
    }
}

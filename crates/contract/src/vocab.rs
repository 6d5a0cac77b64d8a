//! llama.cpp's tokenizer keys (`tokenizer.ggml.*`): every value a tokenizer rebuilt from a
//! GGUF reads, checked before it is read, in a target, a drafter carrying its target's
//! vocabulary, or any GGUF ([`tokenizer`]: a vocabulary-only file like llama.cpp's
//! `ggml-vocab-*.gguf` too, which [`vocab_file`] parses).

use dspark_gguf::{Array, GgufError, GgufFile, Malformed, Value};

use crate::check::Checker;
use crate::finding::{ContractError, Finding};
use crate::names::general;
use crate::names::tokenizer as k;

/// The vocabulary a GGUF carries: enough to rebuild its tokenizer as llama.cpp does.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct GgufVocab<'f> {
    /// `tokenizer.ggml.model` (`gpt2` = byte-level BPE, `llama` = SentencePiece, …).
    pub model: &'f str,
    /// `tokenizer.ggml.pre`, the pre-tokenizer.
    pub pre: Option<&'f str>,
    /// Token strings by id: unique, none empty, none longer than [`MAX_TOKEN_BYTES`]; as
    /// many as the embedding has rows (in a model file).
    pub tokens: &'f [String],
    /// Token types by id (same length, each in [`TOKEN_TYPES`]), when given; every
    /// [`TOKEN_TYPE_BYTE`] token is spelled `<0xXX>`.
    pub token_type: Option<&'f [i32]>,
    /// Token scores by id (same length), when given; finite in a `llama` vocabulary, which
    /// must have them.
    pub scores: Option<&'f [f32]>,
    /// BPE merges (`"left right"`, one space, both sides non-empty), highest priority
    /// first; empty when absent. In a `gpt2` vocabulary both sides and their join are
    /// tokens.
    pub merges: &'f [String],
    /// `tokenizer.ggml.add_bos_token`, when given.
    pub add_bos: Option<bool>,
    /// `tokenizer.ggml.add_eos_token`, when given.
    pub add_eos: Option<bool>,
    /// `tokenizer.ggml.add_space_prefix`, when given.
    pub add_space_prefix: Option<bool>,
    /// The special-token id keys given (each inside the vocabulary).
    pub ids: SpecialIds,
    /// `general.name` (llama.cpp gives some models' special tokens extra rules by name).
    pub name: Option<&'f str>,
    /// `general.architecture`.
    pub arch: Option<&'f str>,
}

/// llama.cpp's token types run from 0 (undefined) to 6 (byte).
pub const TOKEN_TYPES: std::ops::RangeInclusive<i32> = 0..=6;
/// llama.cpp's token type of tokens without a type.
pub const TOKEN_TYPE_UNDEFINED: i32 = 0;
/// llama.cpp's token type of ordinary tokens.
pub const TOKEN_TYPE_NORMAL: i32 = 1;
/// llama.cpp's token type of the unknown token.
pub const TOKEN_TYPE_UNKNOWN: i32 = 2;
/// llama.cpp's token type of control tokens (`<|endoftext|>`, …).
pub const TOKEN_TYPE_CONTROL: i32 = 3;
/// llama.cpp's token type of user-defined (added) tokens.
pub const TOKEN_TYPE_USER_DEFINED: i32 = 4;
/// llama.cpp's token type of padding the converter adds (`gguf.TokenType.UNUSED`).
pub const TOKEN_TYPE_UNUSED: i32 = 5;
/// llama.cpp's token type of byte-fallback tokens (`<0x0A>`).
pub const TOKEN_TYPE_BYTE: i32 = 6;

/// Longest token accepted, in bytes. Real vocabularies stay far below (the longest token
/// of llama.cpp's test vocabularies has 1,024 bytes); the cap bounds what one lookup hashes
/// and one piece copies.
pub const MAX_TOKEN_BYTES: usize = 1 << 16;

/// GPT-2's byte-level alphabet, which every `gpt2` (byte-level BPE) vocabulary spells its
/// ordinary tokens in: printable Latin-1 bytes stand for themselves, the 68 others
/// (0x00–0x20, 0x7F–0xA0, the soft hyphen 0xAD) for U+0100 to U+0143, in order.
pub fn byte_char(b: u8) -> char {
    let cp = match b {
        0x00..=0x20 => 0x100 + u32::from(b),
        0x7F..=0xA0 => 0x121 + u32::from(b - 0x7F),
        0xAD => 0x143,
        _ => u32::from(b),
    };
    char::from_u32(cp).expect("U+0021..U+0143 are characters")
}

/// The byte a character of GPT-2's alphabet stands for.
pub fn char_byte(c: char) -> Option<u8> {
    match c as u32 {
        cp @ (0x21..=0x7E | 0xA1..=0xAC | 0xAE..=0xFF) => Some(cp as u8),
        cp @ 0x100..=0x120 => Some((cp - 0x100) as u8),
        cp @ 0x121..=0x142 => Some((cp - 0x121) as u8 + 0x7F),
        0x143 => Some(0xAD),
        _ => None,
    }
}

/// The byte a SentencePiece byte-fallback token (`<0x0A>`, hex in either case) stands for.
pub fn byte_token_value(token: &str) -> Option<u8> {
    let hex = token.strip_prefix("<0x")?.strip_suffix('>')?;
    if hex.len() != 2 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u8::from_str_radix(hex, 16).ok()
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

/// Every special-token id key a GGUF gives, as llama.cpp reads them (the older
/// `prefix`/`suffix`/`middle` keys over the `fim_*` ones); each inside the vocabulary.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct SpecialIds {
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    pub eot: Option<u32>,
    pub eom: Option<u32>,
    pub unk: Option<u32>,
    pub sep: Option<u32>,
    pub pad: Option<u32>,
    pub cls: Option<u32>,
    pub mask: Option<u32>,
    pub fim_pre: Option<u32>,
    pub fim_suf: Option<u32>,
    pub fim_mid: Option<u32>,
    pub fim_pad: Option<u32>,
    pub fim_rep: Option<u32>,
    pub fim_sep: Option<u32>,
}

/// Parses a GGUF as [`GgufFile::parse`] does, also taking llama.cpp's vocabulary-only
/// files: no tensors, and the header ending the file without the alignment padding a data
/// section would start after (llama.cpp reads these, `ggml-vocab-*.gguf` among them).
pub fn vocab_file(bytes: &[u8]) -> Result<GgufFile<'_>, GgufError> {
    match GgufFile::parse(bytes) {
        Err(GgufError::Malformed {
            kind:
                Malformed::UnexpectedEof {
                    what: "padding before the data section",
                    need,
                    ..
                },
            ..
        }) => {
            let padded = (bytes.len() as u64).saturating_add(need);
            let file = GgufFile::parse_header(bytes, padded)?;
            if file.tensor_infos().is_empty() {
                Ok(file)
            } else {
                GgufFile::parse(bytes)
            }
        }
        other => other,
    }
}

/// Checks the tokenizer keys of any GGUF (a model of any architecture, or a
/// vocabulary-only file): its vocabulary is as many ids as it has tokens.
pub fn tokenizer<'f>(file: &'f GgufFile<'f>) -> Result<GgufVocab<'f>, ContractError> {
    const KIND: &str = "GGUF vocabulary";
    let mut c = Checker::new(file, &[]);
    let n = match file.get(k::TOKENS) {
        Some(Value::Array(a)) => a.len() as u64,
        _ => 0,
    };
    // A file without a vocabulary has no ids to hold its special-token keys to.
    let none = match file.get(k::MODEL) {
        None => Some("missing: the file carries no tokenizer".to_string()),
        Some(Value::String(m)) if matches!(m.as_str(), "none" | "no_vocab") => Some(format!(
            "is `{m}`: the file has no vocabulary (token ids only)"
        )),
        _ => None,
    };
    if let Some(why) = none {
        c.findings.push(Finding::key(k::MODEL, why));
        return c.finish(KIND, None);
    }
    let (vocab, _) = check_vocab(&mut c, n);
    if vocab.is_some() && !crate::bounds::VOCAB.contains(&n) {
        c.key_finding(
            k::TOKENS,
            format!(
                "has {n} tokens, expected {}..={}",
                crate::bounds::VOCAB.start(),
                crate::bounds::VOCAB.end()
            ),
        );
    }
    c.finish(KIND, vocab)
}

/// Checks the tokenizer keys against a vocabulary of `vocab` ids.
pub(crate) fn check_vocab<'f>(
    c: &mut Checker<'f, '_>,
    vocab: u64,
) -> (Option<GgufVocab<'f>>, SpecialTokens) {
    let mut raw = [None; k::SPECIAL_IDS.len()];
    for (slot, key) in raw.iter_mut().zip(k::SPECIAL_IDS) {
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
    let ids = SpecialIds {
        bos: raw[0],
        eos: raw[1],
        eot: raw[2],
        unk: raw[3],
        sep: raw[4],
        pad: raw[5],
        cls: raw[6],
        mask: raw[7],
        eom: raw[8],
        fim_pre: raw[15].or(raw[9]),
        fim_suf: raw[16].or(raw[10]),
        fim_mid: raw[17].or(raw[11]),
        fim_pad: raw[12],
        fim_rep: raw[13],
        fim_sep: raw[14],
    };
    let special = SpecialTokens {
        bos: ids.bos,
        eos: ids.eos,
        eot: ids.eot,
        pad: ids.pad,
        mask: ids.mask,
    };
    let add_bos = c.bool(k::ADD_BOS);
    let add_eos = c.bool(k::ADD_EOS);
    let add_space_prefix = c.bool(k::ADD_SPACE_PREFIX);
    let pre = c.string(k::PRE, false);
    let name = c.string(general::NAME, false);
    let arch = c.string(crate::names::ARCHITECTURE, false);
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
    let known = tokens.and_then(|t| check_tokens(c, t));
    let token_type = c.array(k::TOKEN_TYPE, "ARRAY[INT32]", false, |a| match a {
        Array::I32(v) => Some(&v[..]),
        _ => None,
    });
    let mut types_ok = true;
    if let Some(tt) = token_type {
        if tt.len() as u64 != n {
            c.key_finding(
                k::TOKEN_TYPE,
                format!("has {} entries for {n} tokens", tt.len()),
            );
            types_ok = false;
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
            types_ok = false;
        }
        if let (Some(tokens), true) = (tokens, types_ok) {
            if let Some(i) = (0..tokens.len())
                .find(|&i| tt[i] == TOKEN_TYPE_BYTE && byte_token_value(&tokens[i]).is_none())
            {
                c.key_finding(
                    k::TOKEN_TYPE,
                    format!(
                        "token {i} ({:?}) is a byte token (type {TOKEN_TYPE_BYTE}) but not spelled <0xXX>",
                        clip(&tokens[i])
                    ),
                );
            }
        }
    }
    let scores = c.array(k::SCORES, "ARRAY[FLOAT32]", false, |a| match a {
        Array::F32(v) => Some(&v[..]),
        _ => None,
    });
    if let Some(scores) = scores {
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
                clip(&merges[i])
            ),
        );
    }
    match (tokens, &known, model) {
        (Some(_), Some(known), "gpt2") => check_byte_level(c, known, merges, pre),
        (Some(tokens), Some(_), "llama") => check_sentencepiece(c, tokens, scores),
        _ => {}
    }
    let vocab = tokens.map(|tokens| GgufVocab {
        model,
        pre,
        tokens,
        token_type,
        scores,
        merges,
        add_bos,
        add_eos,
        add_space_prefix,
        ids,
        name,
        arch,
    });
    (vocab, special)
}

/// At most 64 characters of `s`, for messages.
fn clip(s: &str) -> String {
    match s.char_indices().nth(64) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

/// Every token non-empty, at most [`MAX_TOKEN_BYTES`] long, and unique (llama.cpp maps
/// text to id and refuses a vocabulary where two ids share a text): text → id, or `None`
/// after a finding.
fn check_tokens<'t>(
    c: &mut Checker<'_, '_>,
    tokens: &'t [String],
) -> Option<foldhash::HashMap<&'t str, usize>> {
    if let Some(i) = tokens.iter().position(String::is_empty) {
        c.key_finding(k::TOKENS, format!("token {i} is empty"));
        return None;
    }
    if let Some(i) = tokens.iter().position(|t| t.len() > MAX_TOKEN_BYTES) {
        c.key_finding(
            k::TOKENS,
            format!(
                "token {i} has {} bytes, more than {MAX_TOKEN_BYTES}",
                tokens[i].len()
            ),
        );
        return None;
    }
    let mut seen = foldhash::HashMap::with_capacity_and_hasher(tokens.len(), Default::default());
    for (i, t) in tokens.iter().enumerate() {
        if let Some(first) = seen.insert(t.as_str(), i) {
            c.key_finding(
                k::TOKENS,
                format!(
                    "token {i} ({:?}) repeats token {first}: a text must name one id",
                    clip(t)
                ),
            );
            return None;
        }
    }
    Some(seen)
}

/// A byte-level BPE (`gpt2`) vocabulary: merges present (Kimi K2's `kimi-k2`
/// pre-tokenizer may go without, as llama.cpp allows), each joining two tokens into a
/// third. Ordinary tokens are not held to GPT-2's byte alphabet, nor must every byte
/// have a token: real vocabularies break both (Command R spells emoji tokens in UTF-8,
/// StarCoder has no token for bytes UTF-8 never uses), and llama.cpp reads them anyway.
fn check_byte_level(
    c: &mut Checker<'_, '_>,
    known: &foldhash::HashMap<&str, usize>,
    merges: &[String],
    pre: Option<&str>,
) {
    if merges.is_empty() {
        if pre != Some("kimi-k2") {
            c.key_finding(
                k::MERGES,
                "missing or empty: a gpt2 (byte-level BPE) vocabulary needs its merges",
            );
        }
        return;
    }
    let mut joined = String::new();
    for (i, m) in merges.iter().enumerate() {
        let Some((a, b)) = m.split_once(' ') else {
            continue;
        };
        joined.clear();
        joined.push_str(a);
        joined.push_str(b);
        let missing = [a, b, joined.as_str()]
            .into_iter()
            .find(|t| !known.contains_key(t))
            .map(clip);
        if let Some(missing) = missing {
            c.key_finding(
                k::MERGES,
                format!(
                    "merge {i} ({:?}) names {missing:?}, which is not a token",
                    clip(m)
                ),
            );
            return;
        }
    }
}

/// A SentencePiece (`llama`) vocabulary: finite scores (the merge order) for every token,
/// and a token for every byte, `<0xXX>` or the byte itself, for text no token covers.
fn check_sentencepiece(c: &mut Checker<'_, '_>, tokens: &[String], scores: Option<&[f32]>) {
    match scores {
        None => c.key_finding(
            k::SCORES,
            "missing: a llama (SentencePiece) vocabulary merges by score",
        ),
        Some(s) => {
            if let Some(i) = s.iter().position(|v| !v.is_finite()) {
                c.key_finding(k::SCORES, format!("token {i} has score {}", s[i]));
            }
        }
    }
    let mut have = [false; 256];
    for t in tokens {
        // llama.cpp looks byte tokens up as `<0x` + two upper-case hex digits + `>`.
        if let Some(b) = byte_token_value(t).filter(|&b| *t == format!("<0x{b:02X}>")) {
            have[usize::from(b)] = true;
        } else if t.len() == 1 {
            have[usize::from(t.as_bytes()[0])] = true;
        }
    }
    if let Some(b) = (0..256).find(|&b| !have[b]) {
        c.key_finding(
            k::TOKENS,
            format!(
                "has no token <0x{b:02X}> (nor the byte itself): text containing byte {b:#04x} cannot be encoded"
            ),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_tokens_are_parsed_strictly() {
        assert_eq!(byte_token_value("<0x0A>"), Some(10));
        assert_eq!(byte_token_value("<0xff>"), Some(255));
        for bad in ["<0x0>", "<0x0AA>", "<0xGG>", "0x0A", "<0x0A", "<0x+A>", ""] {
            assert_eq!(byte_token_value(bad), None, "{bad}");
        }
    }

    #[test]
    fn byte_alphabet_round_trips() {
        // GPT-2's definition: printable bytes as themselves, the others from U+0100 in
        // byte order.
        let printable = |b: u8| matches!(b, 33..=126 | 161..=172 | 174..=255);
        let mut next = 0x100;
        for b in 0..=255u8 {
            let want = if printable(b) {
                u32::from(b)
            } else {
                next += 1;
                next - 1
            };
            assert_eq!(byte_char(b) as u32, want, "byte {b:#04x}");
            assert_eq!(char_byte(byte_char(b)), Some(b));
        }
        assert_eq!(char_byte('\u{144}'), None);
        assert_eq!(char_byte(' '), None);
        assert_eq!(char_byte('Ġ'), Some(b' '));
        assert_eq!(char_byte('中'), None);
    }
}

//! Text in and out: a GGUF's own vocabulary rebuilt exactly as llama.cpp tokenizes it, or a
//! Hugging Face `tokenizer.json`; checked against the target it serves; and a byte stream
//! of the output as tokens are committed.
//!
//! # From a GGUF, as llama.cpp does it
//! [`Tokenizer::from_gguf`] takes the `tokenizer.ggml.*` keys the contract checked
//! ([`dspark_contract::GgufVocab`]) and gives the ids llama.cpp's `llama_tokenize` gives
//! and the pieces its `token_to_piece` gives, for the models real GGUFs use:
//! - `gpt2`, byte-level BPE, with the pre-tokenizer `tokenizer.ggml.pre` names (one table
//!   row per family, `pre.rs`: qwen2, qwen35, llama-bpe/llama3, gpt-2, default, smollm,
//!   starcoder, refact, command-r, deepseek-llm, deepseek-coder, falcon, mpt, kimi-k2, …);
//! - `llama`, SentencePiece: score-ordered merges, byte fallback `<0xXX>`, `▁` for spaces
//!   and the space prefix (`tokenizer.ggml.add_space_prefix`).
//!
//! Control, user-defined and unknown tokens split the text first (`special.rs`), with
//! llama.cpp's rules for which tokens those are; BOS/EOS are added as the GGUF says.
//! Anything else (another model, a pre-tokenizer not in the table) is an error naming the
//! key and value and listing what is supported: nothing falls back to a tokenizer that
//! would cut text differently.
//!
//! Why not the `tokenizers` crate, which `tokenizer.json` files still go through:
//! llama.cpp does not run the Hugging Face pipeline. It splits text with hand-written
//! splitters whose edge cases differ from the regexes they stand for, runs other patterns
//! on a category-collapsed copy of the text with C++'s `std::regex`, classifies code
//! points with its own Unicode 15.1 tables, and merges with its own tie-breaking; every
//! one of those shows on some input. Matching it exactly means doing what it does, which
//! this module does in a few hundred lines on the `regex` crate (linear time on any
//! input, from the maintainers of Rust's regex stack), and it builds a 150k-token
//! vocabulary in tens of milliseconds where a `tokenizer.json` must first be written and
//! parsed.
//!
//! Output streams as bytes: a token's piece is its bytes (GPT-2's byte alphabet mapped
//! back, `▁` as a space, `<0xXX>` as the byte, special tokens as their text), so the
//! stream is exactly the bytes of the whole decode, split at token boundaries, even
//! mid-character; a `tokenizer.json` that is not byte-level streams through the
//! `tokenizers` crate's `DecodeStream`.

mod bpe;
mod hf;
mod llama;
mod pre;
mod special;
mod spm;
mod unicode;
mod unicode_data;

use std::io::Read;
use std::path::Path;

pub use dspark_contract::byte_char;
use dspark_contract::{GgufVocab, TOKEN_TYPE_UNUSED};
pub use hf::{byte_level_tokenizer_json, LLAMA3_SPLIT, QWEN2_SPLIT};

use crate::error::{Result, RuntimeError};
use hf::HfDecodeStream;
use llama::LlamaVocab;

/// Every `tokenizer.ggml.pre` a `gpt2` vocabulary may name, in the pre-tokenizer table's
/// order.
pub fn supported_pre_tokenizers() -> Vec<&'static str> {
    pre::RULES
        .iter()
        .flat_map(|r| r.names.iter().copied())
        .collect()
}

/// Larger tokenizer files are refused before parsing (real ones are a few MB).
pub const MAX_TOKENIZER_BYTES: u64 = 256 << 20;

/// Where a tokenizer's behaviour comes from.
enum Inner {
    /// A GGUF's vocabulary, run as llama.cpp runs it.
    Llama(Box<LlamaVocab>),
    /// A `tokenizer.json`, with every id's bytes when it is byte-level.
    Hf {
        inner: Box<tokenizers::Tokenizer>,
        pieces: Option<Vec<Vec<u8>>>,
    },
}

/// A tokenizer, with where it came from for messages.
pub struct Tokenizer {
    inner: Inner,
    source: String,
}

impl Tokenizer {
    /// A `tokenizer.json` file (at most [`MAX_TOKENIZER_BYTES`]).
    pub fn from_file(path: &Path) -> Result<Tokenizer> {
        let bytes = read_capped(path, MAX_TOKENIZER_BYTES)?;
        Tokenizer::from_json_bytes(&bytes, &path.display().to_string())
    }

    /// A `tokenizer.json` document; `source` names it in messages.
    pub fn from_json_bytes(bytes: &[u8], source: &str) -> Result<Tokenizer> {
        let inner = tokenizers::Tokenizer::from_bytes(bytes).map_err(|e| {
            RuntimeError::Tokenizer(format!("{source}: not a Hugging Face tokenizer.json: {e}"))
        })?;
        let pieces = hf::byte_pieces(&inner);
        Ok(Tokenizer {
            inner: Inner::Hf {
                inner: Box::new(inner),
                pieces,
            },
            source: source.to_string(),
        })
    }

    /// The tokenizer a target GGUF carries (`tokenizer.ggml.*`, checked by the contract),
    /// as llama.cpp runs it.
    pub fn from_gguf(v: &GgufVocab<'_>) -> Result<Tokenizer> {
        Tokenizer::from_gguf_named(v, "the target's tokenizer.ggml keys")
    }

    /// The tokenizer of any GGUF's checked vocabulary ([`dspark_contract::tokenizer`]);
    /// `source` names it in messages.
    pub fn from_gguf_named(v: &GgufVocab<'_>, source: &str) -> Result<Tokenizer> {
        let vocab =
            LlamaVocab::new(v).map_err(|e| RuntimeError::Tokenizer(format!("{source}: {e}")))?;
        Ok(Tokenizer {
            inner: Inner::Llama(Box::new(vocab)),
            source: source.to_string(),
        })
    }

    /// Where it came from.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Ids it knows (added tokens included).
    pub fn vocab_size(&self) -> usize {
        match &self.inner {
            Inner::Llama(v) => v.len(),
            Inner::Hf { inner, .. } => inner.get_vocab_size(true),
        }
    }

    /// Whether [`Tokenizer::encode_with`] adds BOS when asked for special tokens
    /// (llama.cpp's `llama_vocab_get_add_bos`; a `tokenizer.json` decides for itself).
    pub fn adds_bos(&self) -> bool {
        match &self.inner {
            Inner::Llama(v) => v.add_bos(),
            Inner::Hf { .. } => false,
        }
    }

    /// The text of token `id`, as the vocabulary spells it.
    pub fn token_text(&self, id: u32) -> Option<String> {
        match &self.inner {
            Inner::Llama(v) => v.text(id).map(str::to_string),
            Inner::Hf { inner, .. } => inner.id_to_token(id),
        }
    }

    fn err(&self, msg: impl std::fmt::Display) -> RuntimeError {
        RuntimeError::Tokenizer(format!("{}: {msg}", self.source))
    }

    /// Checks that it serves a target of `vocab` ids whose GGUF carries `gguf` (when it
    /// does): every id it knows is the target's, it knows every target id but padding the
    /// GGUF marks unused, and where both name a token they name the same one.
    pub fn check_target(&self, vocab: usize, gguf: Option<&GgufVocab<'_>>) -> Result<()> {
        let n = self.vocab_size();
        let max = match &self.inner {
            Inner::Llama(v) => v.len().checked_sub(1),
            Inner::Hf { inner, .. } => inner.get_vocab(true).values().max().map(|&m| m as usize),
        };
        if let Some(max) = max.filter(|&m| m >= vocab) {
            return Err(self.err(format!(
                "has token id {max}, outside the target's vocabulary of {vocab}"
            )));
        }
        let unused = |i: usize| {
            gguf.and_then(|g| g.token_type)
                .is_some_and(|tt| tt.get(i) == Some(&TOKEN_TYPE_UNUSED))
        };
        if let Some(missing) =
            (0..vocab).find(|&i| self.token_text(i as u32).is_none() && !unused(i))
        {
            return Err(self.err(format!(
                "knows {n} tokens, the target's vocabulary {vocab}: id {missing} could be generated but not printed"
            )));
        }
        if let Some(g) = gguf {
            for (i, want) in g.tokens.iter().enumerate() {
                if let Some(got) = self.token_text(i as u32) {
                    if &got != want {
                        return Err(self.err(format!(
                            "disagrees with the target's own tokenizer at id {i}: {got:?} vs {want:?}"
                        )));
                    }
                }
            }
        }
        Ok(())
    }

    /// Checks that this tokenizer encodes and decodes like `other` (the target's own): the
    /// same ids for probe texts (spaces, tabs, newlines, capitals, digits, punctuation,
    /// accents, CJK, emoji) and the same text back from them.
    pub fn check_agrees(&self, other: &Tokenizer) -> Result<()> {
        const PROBES: [&str; 4] = [
            "Hello, World! The quick brown fox jumps over 1234567 lazy dogs.",
            "def f(x):\n\treturn x  +  1  # ok?\r\n\n  trailing   ",
            "Äpfel café naïve ĦĲ — «quotes» 'single' \"double\"",
            "中文 日本語 한국어 😀 \u{1F680}\u{0}",
        ];
        for text in PROBES {
            let (a, b) = (self.encode(text)?, other.encode(text)?);
            if a != b {
                return Err(RuntimeError::Tokenizer(format!(
                    "{} encodes {text:?} as {a:?}, but {} as {b:?}: the two tokenizers disagree",
                    self.source, other.source
                )));
            }
            let (x, y) = (self.decode(&a)?, other.decode(&a)?);
            if x != y {
                return Err(RuntimeError::Tokenizer(format!(
                    "{} decodes {a:?} as {x:?}, but {} as {y:?}: the two tokenizers disagree",
                    self.source, other.source
                )));
            }
        }
        Ok(())
    }

    /// Encodes `text` with no special tokens added; special tokens in the text are matched
    /// ([`Tokenizer::encode_with`]`(text, false, true)`).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        self.encode_with(text, false, true)
    }

    /// Encodes `text` as llama.cpp's `llama_tokenize(text, add_special, parse_special)`:
    /// BOS/EOS added as the vocabulary says when `add_special`; control tokens written in
    /// the text matched as tokens when `parse_special` (user-defined ones always are). A
    /// `tokenizer.json` always matches its special tokens (`parse_special` false is an
    /// error there) and adds what its post-processor adds.
    pub fn encode_with(
        &self,
        text: &str,
        add_special: bool,
        parse_special: bool,
    ) -> Result<Vec<u32>> {
        match &self.inner {
            Inner::Llama(v) => v
                .encode(text, add_special, parse_special)
                .map_err(|e| self.err(format!("cannot encode the text: {e}"))),
            Inner::Hf { inner, .. } => {
                if !parse_special {
                    return Err(self.err("a tokenizer.json always matches its special tokens"));
                }
                let enc = inner
                    .encode(text, add_special)
                    .map_err(|e| self.err(format!("cannot encode the prompt: {e}")))?;
                Ok(enc.get_ids().to_vec())
            }
        }
    }

    /// The bytes of token `id` as llama.cpp's `token_to_piece` gives them: control and
    /// unknown tokens are empty unless `special`.
    pub fn token_to_piece(&self, id: u32, special: bool) -> Result<Vec<u8>> {
        let outside = || self.err(format!("token {id} is outside its vocabulary"));
        match &self.inner {
            Inner::Llama(v) => v.piece(id, special).map(<[u8]>::to_vec).ok_or_else(outside),
            Inner::Hf {
                pieces: Some(p), ..
            } => p.get(id as usize).cloned().ok_or_else(outside),
            Inner::Hf { inner, .. } => inner
                .decode(&[id], !special)
                .map(String::into_bytes)
                .map_err(|e| self.err(format!("cannot decode token {id}: {e}"))),
        }
    }

    /// Decodes `ids` to text (special tokens kept).
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        match &self.inner {
            Inner::Hf {
                inner,
                pieces: None,
            } => inner
                .decode(ids, false)
                .map_err(|e| self.err(format!("cannot decode the output: {e}"))),
            _ => {
                let mut s = self.stream();
                let mut bytes = Vec::new();
                for &id in ids {
                    bytes.extend(s.push(id)?);
                }
                bytes.extend(s.finish());
                Ok(String::from_utf8_lossy(&bytes).into_owned())
            }
        }
    }

    /// A stream of the output's bytes as tokens arrive.
    pub fn stream(&self) -> TextStream<'_> {
        TextStream {
            tok: self,
            generic: match &self.inner {
                Inner::Hf {
                    inner,
                    pieces: None,
                } => Some(inner.decode_stream(false)),
                _ => None,
            },
        }
    }
}

/// The output's bytes, token by token.
pub struct TextStream<'t> {
    tok: &'t Tokenizer,
    generic: Option<HfDecodeStream<'t>>,
}

impl TextStream<'_> {
    /// The bytes `id` adds to the output (possibly none yet, possibly part of a character).
    pub fn push(&mut self, id: u32) -> Result<Vec<u8>> {
        match self.generic.as_mut() {
            None => self.tok.token_to_piece(id, true),
            Some(s) => match s.step(id) {
                Ok(text) => Ok(text.map(String::into_bytes).unwrap_or_default()),
                Err(e) => Err(self.tok.err(format!("cannot decode token {id}: {e}"))),
            },
        }
    }

    /// Bytes held back at the end (none for byte-level tokenizers).
    pub fn finish(&mut self) -> Vec<u8> {
        Vec::new()
    }
}

/// Reads a whole regular file of at most `cap` bytes.
pub fn read_capped(path: &Path, cap: u64) -> Result<Vec<u8>> {
    let err = |what: &str, e: Option<std::io::Error>| {
        RuntimeError::Tokenizer(match e {
            Some(e) => format!("{}: {what}: {e}", path.display()),
            None => format!("{}: {what}", path.display()),
        })
    };
    let meta = std::fs::metadata(path).map_err(|e| err("cannot open", Some(e)))?;
    if !meta.is_file() {
        return Err(err("not a regular file", None));
    }
    let file = std::fs::File::open(path).map_err(|e| err("cannot open", Some(e)))?;
    let mut bytes = Vec::new();
    file.take(cap + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| err("cannot read", Some(e)))?;
    if bytes.len() as u64 > cap {
        return Err(err(&format!("larger than {} MiB", cap >> 20), None));
    }
    Ok(bytes)
}

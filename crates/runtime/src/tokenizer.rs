//! Text in and out: a Hugging Face tokenizer (`tokenizer.json`, or rebuilt from a target
//! GGUF's `tokenizer.ggml.*` keys), checked against the target it serves, and a byte
//! stream of the output as tokens are committed.
//!
//! From a GGUF, the `gpt2` model (byte-level BPE) is rebuilt with the pre-tokenizer its
//! `tokenizer.ggml.pre` names (`qwen2`, `gpt-2`/`default`, `llama-bpe`); control and
//! user-defined tokens become added tokens. Other models (SentencePiece `llama`, …) need a
//! `tokenizer.json`.
//!
//! Output streams as bytes: for byte-level tokenizers every token's piece is its bytes
//! (GPT-2's byte alphabet mapped back), so the stream is exactly the bytes of the whole
//! decode, split at token boundaries, even mid-character; other tokenizers stream through
//! the `tokenizers` crate's `DecodeStream`.

use std::io::Read;
use std::path::Path;

pub use dspark_contract::byte_char;
use dspark_contract::{
    char_byte, GgufVocab, TOKEN_TYPE_CONTROL, TOKEN_TYPE_UNUSED, TOKEN_TYPE_USER_DEFINED,
};
use serde_json::json;

use crate::error::{Result, RuntimeError};

/// Larger tokenizer files are refused before parsing (real ones are a few MB).
pub const MAX_TOKENIZER_BYTES: u64 = 256 << 20;

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
        "gpt-2" | "gpt2" | "default" => Some((
            json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": true}),
            false,
        )),
        _ => None,
    }
}

/// A `tokenizer.json` document for a byte-level BPE vocabulary: `tokens` by id, `special`
/// telling which ids are added tokens (control, user-defined), `merges` in priority order.
pub fn byte_level_tokenizer_json(
    tokens: &[String],
    special: &dyn Fn(usize) -> bool,
    merges: &[String],
    pre: &str,
) -> Result<serde_json::Value> {
    let Some((pre_tokenizer, ignore_merges)) = byte_level_parts(pre) else {
        return Err(RuntimeError::Tokenizer(format!(
            "pre-tokenizer `{pre}` is not supported (qwen2, gpt-2, llama-bpe are); give --tokenizer tokenizer.json"
        )));
    };
    let mut vocab = serde_json::Map::new();
    let mut added = Vec::new();
    for (i, t) in tokens.iter().enumerate() {
        if special(i) {
            added.push(
                json!({"id": i, "content": t, "single_word": false, "lstrip": false,
                              "rstrip": false, "normalized": false, "special": true}),
            );
        } else if let Some(first) = vocab.insert(t.clone(), json!(i)) {
            return Err(RuntimeError::Tokenizer(format!(
                "token {t:?} appears twice, as ids {first} and {i}"
            )));
        }
    }
    let decoder = json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false});
    Ok(json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
        "normalizer": null,
        "pre_tokenizer": pre_tokenizer,
        "post_processor": null,
        "decoder": decoder,
        "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
                  "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false,
                  "ignore_merges": ignore_merges, "vocab": vocab, "merges": merges},
    }))
}

/// A tokenizer, with where it came from for messages.
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    source: String,
    /// Every id's bytes, for byte-level tokenizers.
    pieces: Option<Vec<Vec<u8>>>,
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
        let byte_level = matches!(
            inner.get_decoder(),
            Some(tokenizers::DecoderWrapper::ByteLevel(_))
        );
        let mut t = Tokenizer {
            inner,
            source: source.to_string(),
            pieces: None,
        };
        if byte_level {
            t.pieces = Some(t.byte_pieces());
        }
        Ok(t)
    }

    /// The tokenizer a target GGUF carries (`tokenizer.ggml.*`, checked by the contract).
    pub fn from_gguf(v: &GgufVocab<'_>) -> Result<Tokenizer> {
        let source = "the target's tokenizer.ggml keys";
        if v.model != "gpt2" {
            return Err(RuntimeError::Tokenizer(format!(
                "{source}: tokenizer model `{}` cannot be rebuilt (only `gpt2`, byte-level BPE); give --tokenizer tokenizer.json",
                v.model
            )));
        }
        let special = |i: usize| {
            v.token_type
                .is_some_and(|tt| matches!(tt[i], TOKEN_TYPE_CONTROL | TOKEN_TYPE_USER_DEFINED))
        };
        let doc =
            byte_level_tokenizer_json(v.tokens, &special, v.merges, v.pre.unwrap_or("default"))
                .map_err(|e| RuntimeError::Tokenizer(format!("{source}: {e}")))?;
        let bytes = serde_json::to_vec(&doc).expect("a JSON value serializes");
        Tokenizer::from_json_bytes(&bytes, source)
    }

    /// Where it came from.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Ids it knows (added tokens included).
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// Checks that it serves a target of `vocab` ids whose GGUF carries `gguf` (when it
    /// does): every id it knows is the target's, it knows every target id but padding the
    /// GGUF marks unused, and where both name a token they name the same one.
    pub fn check_target(&self, vocab: usize, gguf: Option<&GgufVocab<'_>>) -> Result<()> {
        let n = self.vocab_size();
        let err = |msg: String| Err(RuntimeError::Tokenizer(format!("{}: {msg}", self.source)));
        if let Some(max) = self.inner.get_vocab(true).values().copied().max() {
            if max as usize >= vocab {
                return err(format!(
                    "has token id {max}, outside the target's vocabulary of {vocab}"
                ));
            }
        }
        let unused = |i: usize| {
            gguf.and_then(|g| g.token_type)
                .is_some_and(|tt| tt.get(i) == Some(&TOKEN_TYPE_UNUSED))
        };
        if let Some(missing) =
            (0..vocab).find(|&i| self.inner.id_to_token(i as u32).is_none() && !unused(i))
        {
            return err(format!(
                "knows {n} tokens, the target's vocabulary {vocab}: id {missing} could be generated but not printed"
            ));
        }
        if let Some(g) = gguf {
            for (i, want) in g.tokens.iter().enumerate() {
                if let Some(got) = self.inner.id_to_token(i as u32) {
                    if &got != want {
                        return err(format!(
                            "disagrees with the target's own tokenizer at id {i}: {got:?} vs {want:?}"
                        ));
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

    /// Encodes `text` (no special tokens added; special tokens in the text are matched).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let enc = self.inner.encode(text, false).map_err(|e| {
            RuntimeError::Tokenizer(format!("{}: cannot encode the prompt: {e}", self.source))
        })?;
        Ok(enc.get_ids().to_vec())
    }

    /// Decodes `ids` to text (special tokens kept).
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        match &self.pieces {
            Some(_) => {
                let mut s = self.stream();
                let mut bytes = Vec::new();
                for &id in ids {
                    bytes.extend(s.push(id)?);
                }
                bytes.extend(s.finish());
                Ok(String::from_utf8_lossy(&bytes).into_owned())
            }
            None => self.inner.decode(ids, false).map_err(|e| {
                RuntimeError::Tokenizer(format!("{}: cannot decode the output: {e}", self.source))
            }),
        }
    }

    /// A stream of the output's bytes as tokens arrive.
    pub fn stream(&self) -> TextStream<'_> {
        TextStream {
            tok: self,
            generic: match &self.pieces {
                Some(_) => None,
                None => Some(self.inner.decode_stream(false)),
            },
        }
    }

    /// Every id's bytes: added tokens as their text, others through the byte alphabet.
    fn byte_pieces(&self) -> Vec<Vec<u8>> {
        let added = self.inner.get_added_tokens_decoder();
        (0..self.vocab_size() as u32)
            .map(|id| {
                if let Some(a) = added.get(&id) {
                    return a.content.as_bytes().to_vec();
                }
                let Some(t) = self.inner.id_to_token(id) else {
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
            .collect()
    }
}

type HfDecodeStream<'t> = tokenizers::DecodeStream<
    't,
    tokenizers::ModelWrapper,
    tokenizers::NormalizerWrapper,
    tokenizers::PreTokenizerWrapper,
    tokenizers::PostProcessorWrapper,
    tokenizers::DecoderWrapper,
>;

/// The output's bytes, token by token.
pub struct TextStream<'t> {
    tok: &'t Tokenizer,
    generic: Option<HfDecodeStream<'t>>,
}

impl TextStream<'_> {
    /// The bytes `id` adds to the output (possibly none yet, possibly part of a character).
    pub fn push(&mut self, id: u32) -> Result<Vec<u8>> {
        if let Some(pieces) = &self.tok.pieces {
            return match pieces.get(id as usize) {
                Some(p) => Ok(p.clone()),
                None => Err(RuntimeError::Tokenizer(format!(
                    "{}: token {id} is outside its vocabulary",
                    self.tok.source
                ))),
            };
        }
        let s = self
            .generic
            .as_mut()
            .expect("a generic stream without pieces");
        match s.step(id) {
            Ok(text) => Ok(text.map(String::into_bytes).unwrap_or_default()),
            Err(e) => Err(RuntimeError::Tokenizer(format!(
                "{}: cannot decode token {id}: {e}",
                self.tok.source
            ))),
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

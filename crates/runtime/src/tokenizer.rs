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

/// What a tokenizer rebuilt from a GGUF is made of, kept to build the Hugging Face
/// tokenizer the first time text is encoded (decoding needs only the pieces).
struct Recipe {
    tokens: Vec<String>,
    special: Vec<bool>,
    merges: Vec<String>,
    pre: String,
}

/// A tokenizer, with where it came from for messages.
pub struct Tokenizer {
    /// The Hugging Face tokenizer; built on first use for one rebuilt from a GGUF.
    inner: std::sync::OnceLock<std::result::Result<tokenizers::Tokenizer, String>>,
    recipe: Option<Recipe>,
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
        let pieces = byte_pieces(&inner);
        let cell = std::sync::OnceLock::new();
        let _ = cell.set(Ok(inner));
        Ok(Tokenizer {
            inner: cell,
            recipe: None,
            source: source.to_string(),
            pieces,
        })
    }

    /// The tokenizer a target GGUF carries (`tokenizer.ggml.*`, checked by the contract:
    /// a `gpt2` vocabulary is spelled in the byte alphabet, with merges). Its pieces are
    /// read from the tokens directly; the Hugging Face tokenizer, which only encoding
    /// needs, is built the first time text is encoded.
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
        let pre = v.pre.unwrap_or("default");
        if byte_level_parts(pre).is_none() {
            return Err(RuntimeError::Tokenizer(format!(
                "{source}: pre-tokenizer `{pre}` is not supported (qwen2, gpt-2, llama-bpe are); give --tokenizer tokenizer.json"
            )));
        }
        let pieces = v
            .tokens
            .iter()
            .enumerate()
            .map(|(i, t)| {
                if special(i) {
                    t.as_bytes().to_vec()
                } else {
                    t.chars().filter_map(char_byte).collect()
                }
            })
            .collect();
        Ok(Tokenizer {
            inner: std::sync::OnceLock::new(),
            recipe: Some(Recipe {
                tokens: v.tokens.to_vec(),
                special: (0..v.tokens.len()).map(special).collect(),
                merges: v.merges.to_vec(),
                pre: pre.to_string(),
            }),
            source: source.to_string(),
            pieces: Some(pieces),
        })
    }

    /// The Hugging Face tokenizer, built now if it was deferred.
    fn hf(&self) -> Result<&tokenizers::Tokenizer> {
        let built = self.inner.get_or_init(|| {
            let r = self
                .recipe
                .as_ref()
                .expect("a deferred tokenizer has its recipe");
            let json = byte_level_tokenizer_json(&r.tokens, &|i| r.special[i], &r.merges, &r.pre)
                .map_err(|e| format!("{}: {e}", self.source))?;
            tokenizers::Tokenizer::from_bytes(&json)
                .map_err(|e| format!("{}: cannot be rebuilt: {e}", self.source))
        });
        built
            .as_ref()
            .map_err(|e| RuntimeError::Tokenizer(e.clone()))
    }

    /// Where it came from.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Ids it knows (added tokens included).
    pub fn vocab_size(&self) -> usize {
        match (&self.pieces, &self.recipe) {
            (Some(p), Some(_)) => p.len(),
            _ => self.hf().map_or(0, |t| t.get_vocab_size(true)),
        }
    }

    /// Checks that it serves a target of `vocab` ids whose GGUF carries `gguf` (when it
    /// does): every id it knows is the target's, it knows every target id but padding the
    /// GGUF marks unused, and where both name a token they name the same one.
    pub fn check_target(&self, vocab: usize, gguf: Option<&GgufVocab<'_>>) -> Result<()> {
        let inner = self.hf()?;
        let n = self.vocab_size();
        let err = |msg: String| Err(RuntimeError::Tokenizer(format!("{}: {msg}", self.source)));
        if let Some(max) = inner.get_vocab(true).values().copied().max() {
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
            (0..vocab).find(|&i| inner.id_to_token(i as u32).is_none() && !unused(i))
        {
            return err(format!(
                "knows {n} tokens, the target's vocabulary {vocab}: id {missing} could be generated but not printed"
            ));
        }
        if let Some(g) = gguf {
            for (i, want) in g.tokens.iter().enumerate() {
                if let Some(got) = inner.id_to_token(i as u32) {
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
        let enc = self.hf()?.encode(text, false).map_err(|e| {
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
            None => self.hf()?.decode(ids, false).map_err(|e| {
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
                None => self.hf().ok().map(|inner| inner.decode_stream(false)),
            },
        }
    }
}

/// Every id's bytes when `inner` is byte-level (its decoder `ByteLevel`): added tokens
/// as their text, others through the byte alphabet; `None` for other tokenizers.
fn byte_pieces(inner: &tokenizers::Tokenizer) -> Option<Vec<Vec<u8>>> {
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

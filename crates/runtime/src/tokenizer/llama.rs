//! A GGUF's vocabulary as llama.cpp reads it (`src/llama-vocab.cpp`): token attributes
//! from the token types and llama.cpp's by-text corrections, the special-token ids with
//! llama.cpp's defaults, the special tokens text is split at, the BOS/EOS rules, each
//! token's piece, and encoding through the byte-level BPE ([`super::bpe`]) or SentencePiece
//! ([`super::spm`]) session.

use std::sync::Arc;

use dspark_contract::{
    byte_char, byte_token_value, char_byte, GgufVocab, TOKEN_TYPE_BYTE, TOKEN_TYPE_CONTROL,
    TOKEN_TYPE_NORMAL, TOKEN_TYPE_UNKNOWN, TOKEN_TYPE_UNUSED, TOKEN_TYPE_USER_DEFINED,
};

use super::bpe::Merges;
use super::pre::{self, PreTokenizer};
use super::special::{partition, Fragment, Special};
use super::spm::{self, SpmVocab};

/// Token attributes (llama.cpp's `llama_token_attr` bits).
pub(crate) mod attr {
    pub const UNKNOWN: u16 = 1 << 0;
    pub const UNUSED: u16 = 1 << 1;
    pub const NORMAL: u16 = 1 << 2;
    pub const CONTROL: u16 = 1 << 3;
    pub const USER_DEFINED: u16 = 1 << 4;
    pub const BYTE: u16 = 1 << 5;
    pub const LSTRIP: u16 = 1 << 7;
    pub const RSTRIP: u16 = 1 << 8;
}

/// The tokenizer models dspark rebuilds.
pub(crate) const MODELS: &str = "gpt2 (byte-level BPE), llama (SentencePiece)";

/// SentencePiece's space.
const SPACE: &str = "\u{2581}";

/// Token texts llama.cpp marks as ending generation (and so as control tokens).
const END_OF_GENERATION: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<\u{ff5c}end\u{2581}of\u{2581}sentence\u{ff5c}>",
    "[e~[",
];

/// Texts llama.cpp takes for fill-in-the-middle tokens a GGUF does not name, by role
/// (prefix, suffix, middle, padding, repository, file separator).
const FIM_TEXTS: [&[&str]; 6] = [
    &[
        "<|fim_prefix|>",
        "<fim-prefix>",
        "<fim_prefix>",
        "<\u{ff5c}fim\u{2581}begin\u{ff5c}>",
        "<PRE>",
        "\u{2581}<PRE>",
        "<|code_prefix|>",
        "<|prefix|>",
    ],
    &[
        "<|fim_suffix|>",
        "<fim-suffix>",
        "<fim_suffix>",
        "<\u{ff5c}fim\u{2581}hole\u{ff5c}>",
        "<SUF>",
        "\u{2581}<SUF>",
        "<|code_suffix|>",
        "<|suffix|>",
    ],
    &[
        "<|fim_middle|>",
        "<fim-middle>",
        "<fim_middle>",
        "<\u{ff5c}fim\u{2581}end\u{ff5c}>",
        "<MID>",
        "\u{2581}<MID>",
        "<|code_middle|>",
        "<|middle|>",
    ],
    &["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"],
    &[
        "<|fim_repo|>",
        "<|repo_name|>",
        "<fim-repo>",
        "<REPO>",
        "<reponame>",
    ],
    &["<|file_sep|>"],
];

/// How text becomes tokens.
#[derive(Debug)]
enum Model {
    /// Byte-level BPE.
    Bpe {
        pre: PreTokenizer,
        merges: Merges,
        ignore_merges: bool,
    },
    /// SentencePiece.
    Spm { add_space_prefix: bool },
}

/// A vocabulary rebuilt from a GGUF.
#[derive(Debug)]
pub(crate) struct LlamaVocab {
    model: Model,
    texts: Vec<Arc<str>>,
    by_text: foldhash::HashMap<Arc<str>, u32>,
    scores: Vec<f32>,
    attrs: Vec<u16>,
    /// Special tokens in the order the partition tries them (longest text first).
    specials: Vec<u32>,
    /// Every token's piece (special tokens as their text), back to back.
    pieces: Vec<u8>,
    piece_ends: Vec<usize>,
    /// The token for each byte: its GPT-2 spelling (BPE) or `<0xXX>` (SentencePiece).
    byte_tokens: [Option<u32>; 256],
    bos: Option<u32>,
    eos: Option<u32>,
    add_bos: bool,
    add_eos: bool,
}

impl LlamaVocab {
    /// Rebuilds `v` (checked by the contract); an error names what is not supported.
    pub fn new(v: &GgufVocab<'_>) -> Result<LlamaVocab, String> {
        let n = v.tokens.len();
        let texts: Vec<Arc<str>> = v.tokens.iter().map(|t| Arc::from(t.as_str())).collect();
        let mut by_text = foldhash::HashMap::with_capacity_and_hasher(n, Default::default());
        for (i, t) in texts.iter().enumerate() {
            if by_text.insert(t.clone(), i as u32).is_some() {
                return Err(format!("token {i} ({t:?}) repeats an earlier token"));
            }
        }
        let id = |t: &str| by_text.get(t).copied();
        let in_vocab = |i: u32| (i as usize) < n;
        let mut attrs: Vec<u16> = match v.token_type {
            Some(tt) => tt.iter().map(|&t| type_attr(t)).collect(),
            None => vec![attr::NORMAL; n],
        };
        if attrs.len() != n {
            return Err(format!("{} token types for {n} tokens", attrs.len()));
        }

        // The model, with llama.cpp's defaults for it.
        let (model, mut bos, mut eos, add_bos) = match v.model {
            "gpt2" => {
                let name = v.pre.filter(|p| !p.is_empty()).unwrap_or("default");
                let Some(rule) = pre::find_rule(name) else {
                    let why = if pre::NOT_RUN.contains(&name) {
                        "is a llama.cpp pre-tokenizer dspark does not run"
                    } else {
                        "is not a pre-tokenizer llama.cpp knows"
                    };
                    return Err(format!(
                        "tokenizer.ggml.pre `{name}` {why} (supported: {})",
                        pre::supported_names()
                    ));
                };
                let pre = PreTokenizer::new(rule.steps)
                    .map_err(|e| format!("tokenizer.ggml.pre `{name}`: {e}"))?;
                let merges = bpe_merges(v.merges, &id)?;
                let bos = (!rule.no_default_bos).then_some(11);
                let model = Model::Bpe {
                    pre,
                    merges,
                    ignore_merges: rule.ignore_merges,
                };
                (model, bos, Some(11), rule.add_bos)
            }
            "llama" => (
                Model::Spm {
                    add_space_prefix: v.add_space_prefix.unwrap_or(true),
                },
                Some(1),
                Some(2),
                true,
            ),
            other => {
                return Err(format!(
                    "tokenizer.ggml.model `{other}` is not supported (supported: {MODELS})"
                ))
            }
        };
        // Defaults outside the vocabulary are dropped; the GGUF's keys (inside it: the
        // contract checked) win.
        bos = v.ids.bos.or(bos.filter(|&i| in_vocab(i)));
        eos = v.ids.eos.or(eos.filter(|&i| in_vocab(i)));
        // Scores order SentencePiece merges; byte-level BPE ignores them.
        let scores = match (&model, v.scores) {
            (Model::Bpe { .. }, _) => Vec::new(),
            (Model::Spm { .. }, Some(s)) if s.len() == n => s.to_vec(),
            (Model::Spm { .. }, _) => return Err("tokenizer.ggml.scores: not one per token".into()),
        };

        // llama.cpp's corrections by text: end-of-generation and fill-in-the-middle tokens
        // are control tokens, and a few model families' tokens are re-typed.
        let mut eog: Vec<u32> = Vec::new();
        let fim_keys = [
            v.ids.fim_pre,
            v.ids.fim_suf,
            v.ids.fim_mid,
            v.ids.fim_pad,
            v.ids.fim_rep,
            v.ids.fim_sep,
        ];
        for (role, (key, candidates)) in fim_keys.iter().zip(FIM_TEXTS).enumerate() {
            // Without a key, the lowest id among the texts llama.cpp looks for (llama.cpp
            // takes the first its hash map yields; vocabularies have at most one).
            let found = key.or_else(|| candidates.iter().filter_map(|t| id(t)).min());
            if let Some(f) = found {
                if key.is_none() {
                    attrs[f as usize] |= attr::CONTROL;
                }
                // Padding, repository and file separator end generation.
                if role >= 3 {
                    eog.push(f);
                }
            }
        }
        for t in END_OF_GENERATION {
            if let Some(i) = id(t) {
                attrs[i as usize] |= attr::CONTROL;
                eog.push(i);
            }
        }
        for t in ["<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"] {
            if let Some(i) = id(t) {
                attrs[i as usize] = attr::USER_DEFINED;
            }
        }
        // The end-of-turn/-message tokens the GGUF names end generation too (those it does
        // not name are found by text above).
        eog.extend([eos, v.ids.eot, v.ids.eom].into_iter().flatten());
        let eog_has = |t: &str| id(t).is_some_and(|i| eog.contains(&i));
        if eog_has("<|end|>")
            && ((eog_has("<|return|>") && (eog_has("<|call|>") || eog_has("<|calls|>")))
                || ((eog_has("<|call|>") || eog_has("<|calls|>")) && eog_has("<|flush|>")))
        {
            // OpenAI's harmony format: `<|end|>` is an ordinary special token there.
            attrs[id("<|end|>").unwrap_or(0) as usize] = attr::USER_DEFINED;
        }
        if (eog_has("<|tool_response>") || eog_has("<|plamo:eos|>")) && eog_has("</s>") {
            attrs[id("</s>").unwrap_or(0) as usize] = attr::NORMAL;
        }

        // The special tokens text is split at: control, user-defined and unknown tokens,
        // longest first (llama.cpp's sort is not stable; among equal lengths, by id).
        let mut specials: Vec<u32> = (0..n as u32)
            .filter(|&i| {
                attrs[i as usize] & (attr::CONTROL | attr::USER_DEFINED | attr::UNKNOWN) != 0
            })
            .collect();
        specials.sort_by_key(|&i| std::cmp::Reverse(texts[i as usize].len()));

        // Strip rules llama.cpp gives some models' special tokens, by name.
        let pre_name = v.pre.unwrap_or("");
        let arch = v.arch.unwrap_or("");
        let model_name = v.name.unwrap_or("").to_ascii_lowercase();
        if ["jina-v2-de", "jina-v2-es", "jina-v2-code"]
            .iter()
            .any(|s| pre_name.contains(s))
            || ["nomic-bert-moe", "jina-bert-v3"]
                .iter()
                .any(|s| arch.contains(s))
        {
            if let Some(i) = id("<mask>") {
                attrs[i as usize] |= attr::LSTRIP;
            }
        } else if ["phi-3", "phi3"].iter().any(|s| model_name.contains(s)) {
            for &i in &specials {
                attrs[i as usize] |= attr::RSTRIP;
            }
            if let Some(i) = id("</s>") {
                attrs[i as usize] |= attr::RSTRIP;
            }
            for t in ["<unk>", "<s>", "<|endoftext|>"] {
                if let Some(i) = id(t) {
                    attrs[i as usize] &= !attr::RSTRIP;
                }
            }
        } else if model_name.contains("modern-bert") {
            if let Some(i) = id("[MASK]") {
                attrs[i as usize] |= attr::LSTRIP;
            }
        }

        let mut byte_tokens = [None; 256];
        for (b, slot) in byte_tokens.iter_mut().enumerate() {
            let b = b as u8;
            *slot = match model {
                Model::Bpe { .. } => id(&byte_char(b).to_string()),
                Model::Spm { .. } => id(&format!("<0x{b:02X}>")).or_else(|| {
                    b.is_ascii()
                        .then(|| id(char::from(b).encode_utf8(&mut [0; 4])))
                        .flatten()
                }),
            };
        }

        let mut vocab = LlamaVocab {
            model,
            texts,
            by_text,
            scores,
            attrs,
            specials,
            pieces: Vec::new(),
            piece_ends: Vec::with_capacity(n),
            byte_tokens,
            bos,
            eos,
            add_bos: v.add_bos.unwrap_or(add_bos),
            add_eos: v.add_eos.unwrap_or(false),
        };
        vocab.build_pieces();
        Ok(vocab)
    }

    /// Every token's piece as llama.cpp's `token_to_piece` gives it with special tokens
    /// rendered.
    fn build_pieces(&mut self) {
        let spm = matches!(self.model, Model::Spm { .. });
        let mut pieces = Vec::new();
        for (i, t) in self.texts.iter().enumerate() {
            let a = self.attrs[i];
            if a & (attr::UNKNOWN | attr::CONTROL | attr::USER_DEFINED) != 0 {
                pieces.extend_from_slice(t.as_bytes());
            } else if a & attr::NORMAL != 0 {
                if spm {
                    pieces.extend_from_slice(t.replace(SPACE, " ").as_bytes());
                } else {
                    decode_byte_level(t, &mut pieces);
                }
            } else if a & attr::BYTE != 0 {
                // The contract holds byte tokens to `<0xXX>`.
                pieces.extend(byte_token_value(t));
            }
            self.piece_ends.push(pieces.len());
        }
        self.pieces = pieces;
    }

    /// Tokens in the vocabulary.
    pub fn len(&self) -> usize {
        self.texts.len()
    }

    /// The text of token `id`.
    pub fn text(&self, id: u32) -> Option<&str> {
        self.texts.get(id as usize).map(|t| &**t)
    }

    /// Whether encoding with special tokens adds BOS.
    pub fn add_bos(&self) -> bool {
        self.add_bos
    }

    /// The piece of token `id`; control and unknown tokens are empty unless `special`.
    pub fn piece(&self, id: u32, special: bool) -> Option<&[u8]> {
        let i = id as usize;
        let end = *self.piece_ends.get(i)?;
        if !special && self.attrs[i] & (attr::UNKNOWN | attr::CONTROL) != 0 {
            return Some(&[]);
        }
        let start = if i == 0 { 0 } else { self.piece_ends[i - 1] };
        Some(&self.pieces[start..end])
    }

    /// Encodes `text` as `llama_tokenize` does: BOS and EOS added as the vocabulary says
    /// when `add_special`, control tokens in the text matched when `parse_special`
    /// (user-defined tokens always are).
    pub fn encode(
        &self,
        text: &str,
        add_special: bool,
        parse_special: bool,
    ) -> Result<Vec<u32>, String> {
        let specials: Vec<Special<'_>> = self
            .specials
            .iter()
            .filter(|&&i| {
                parse_special || self.attrs[i as usize] & (attr::CONTROL | attr::UNKNOWN) == 0
            })
            .map(|&i| Special {
                id: i,
                text: &self.texts[i as usize],
                lstrip: self.attrs[i as usize] & attr::LSTRIP != 0,
                rstrip: self.attrs[i as usize] & attr::RSTRIP != 0,
            })
            .collect();
        let frags = partition(text, &specials);
        let mut out = Vec::new();
        if add_special && self.add_bos {
            out.push(
                self.bos
                    .ok_or("the vocabulary adds BOS but has no BOS token")?,
            );
        }
        match &self.model {
            Model::Spm { add_space_prefix } => {
                let mut after_special = true;
                let mut buf = String::new();
                for f in &frags {
                    match f {
                        Fragment::Text(r) => {
                            buf.clear();
                            if *add_space_prefix && after_special {
                                buf.push_str(SPACE);
                            }
                            for ch in text[r.clone()].chars() {
                                match ch {
                                    ' ' => buf.push_str(SPACE),
                                    c => buf.push(c),
                                }
                            }
                            spm::encode(self, &buf, &mut out).map_err(|b| {
                                format!("byte {b:#04x} has no token <0x{b:02X}> to fall back to")
                            })?;
                            after_special = false;
                        }
                        Fragment::Token(t) => {
                            out.push(*t);
                            after_special = true;
                        }
                    }
                }
            }
            Model::Bpe {
                pre,
                merges,
                ignore_merges,
            } => {
                let mut spelled = String::new();
                for f in &frags {
                    match f {
                        Fragment::Text(r) => {
                            let fragment = &text[r.clone()];
                            for piece in pre.split(fragment) {
                                let bytes = &fragment.as_bytes()[piece];
                                if *ignore_merges {
                                    spelled.clear();
                                    spelled.extend(bytes.iter().map(|&b| byte_char(b)));
                                    if let Some(&t) = self.by_text.get(spelled.as_str()) {
                                        out.push(t);
                                        continue;
                                    }
                                }
                                merges.encode(bytes, &self.byte_tokens, &mut out);
                            }
                        }
                        Fragment::Token(t) => out.push(*t),
                    }
                }
            }
        }
        if add_special && self.add_eos {
            out.push(
                self.eos
                    .ok_or("the vocabulary adds EOS but has no EOS token")?,
            );
        }
        Ok(out)
    }
}

impl SpmVocab for LlamaVocab {
    fn token(&self, text: &str) -> Option<u32> {
        self.by_text.get(text).copied()
    }
    fn score(&self, id: u32) -> f32 {
        self.scores.get(id as usize).copied().unwrap_or(0.0)
    }
    fn byte_token(&self, b: u8) -> Option<u32> {
        self.byte_tokens[usize::from(b)]
    }
}

/// llama.cpp's attribute for a token type (types outside 0..=6 are refused by the
/// contract; llama.cpp reads them as undefined).
fn type_attr(t: i32) -> u16 {
    match t {
        TOKEN_TYPE_NORMAL => attr::NORMAL,
        TOKEN_TYPE_UNKNOWN => attr::UNKNOWN,
        TOKEN_TYPE_CONTROL => attr::CONTROL,
        TOKEN_TYPE_USER_DEFINED => attr::USER_DEFINED,
        TOKEN_TYPE_UNUSED => attr::UNUSED,
        TOKEN_TYPE_BYTE => attr::BYTE,
        _ => 0,
    }
}

/// A byte-level token's bytes: each character of GPT-2's alphabet back to its byte; a
/// character outside it as llama.cpp writes one (`[UNK_BYTE_0x` + its UTF-8 in hex + the
/// whole token + `]`).
fn decode_byte_level(token: &str, out: &mut Vec<u8>) {
    for c in token.chars() {
        match char_byte(c) {
            Some(b) => out.push(b),
            None => {
                out.extend_from_slice(b"[UNK_BYTE_0x");
                let mut utf8 = [0; 4];
                for b in c.encode_utf8(&mut utf8).bytes() {
                    out.extend_from_slice(format!("{b:02x}").as_bytes());
                }
                out.extend_from_slice(token.as_bytes());
                out.push(b']');
            }
        }
    }
}

/// The merges of a `gpt2` vocabulary as token ids.
fn bpe_merges(merges: &[String], id: &dyn Fn(&str) -> Option<u32>) -> Result<Merges, String> {
    let mut list = Vec::with_capacity(merges.len());
    let mut joined = String::new();
    for (i, m) in merges.iter().enumerate() {
        let ids = m.split_once(' ').and_then(|(a, b)| {
            joined.clear();
            joined.push_str(a);
            joined.push_str(b);
            Some((id(a)?, id(b)?, id(&joined)?))
        });
        list.push(
            ids.ok_or_else(|| format!("merge {i} ({m:?}) is not two tokens joining into a third"))?,
        );
    }
    Ok(Merges::new(list.into_iter()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_level_pieces_decode_the_alphabet() {
        let mut out = Vec::new();
        decode_byte_level("Ġhi", &mut out);
        assert_eq!(out, b" hi");
        out.clear();
        decode_byte_level("a‼", &mut out);
        assert_eq!(out, b"a[UNK_BYTE_0xe280bca\xe2\x80\xbc]");
    }
}

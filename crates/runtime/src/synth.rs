//! Random-weight Qwen3 targets in llama.cpp's `qwen3` GGUF layout, deterministic from a
//! seed, for tests and benchmarks. Matrices are Q8_0 (or F32), norms F32 near 1.

use dspark_gguf::{Array, GgmlType, Header, TensorInfo, Value};
use dspark_quant::gemm::{gemm, Matrix, WeightType};
use dspark_quant::q8_0::quantize_ref;
use dspark_quant::rng::SplitMix64;

use crate::error::{Result, RuntimeError};
use crate::target::{Forward, Target};

/// The shape of a synthetic Qwen3 target.
#[derive(Clone, Debug, PartialEq)]
#[allow(missing_docs)]
pub struct Qwen3Geometry {
    pub hidden: usize,
    pub layers: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub ffn: usize,
    pub vocab: usize,
    pub context: usize,
    /// Write a separate `output.weight` (else the LM head is tied to `token_embd`).
    pub untied_output: bool,
}

impl Qwen3Geometry {
    /// Qwen3-0.6B's shape (hidden 1024, 28 layers, 16/8 heads of 128, FFN 3072,
    /// vocabulary 151,936, tied embeddings).
    pub fn qwen3_0_6b() -> Qwen3Geometry {
        Qwen3Geometry {
            hidden: 1024,
            layers: 28,
            heads: 16,
            kv_heads: 8,
            head_dim: 128,
            ffn: 3072,
            vocab: 151_936,
            context: 40_960,
            untied_output: false,
        }
    }

    /// Looks a target geometry up by its CLI name (`qwen3-tiny`, `qwen3-small`,
    /// `qwen3-0.6b`).
    pub fn by_name(name: &str) -> Option<Qwen3Geometry> {
        match name {
            "qwen3-tiny" => Some(Qwen3Geometry::tiny()),
            "qwen3-small" => Some(Qwen3Geometry::small()),
            "qwen3-0.6b" => Some(Qwen3Geometry::qwen3_0_6b()),
            _ => None,
        }
    }

    /// Block size of the synthetic drafter for this target: 4 for the tiny test target, 6
    /// for the small one, 8 for Qwen3-0.6B's shape (a verify forward of the anchor and 8
    /// drafts).
    pub fn draft_block_size(&self) -> u64 {
        match self.hidden {
            h if h >= 1024 => 8,
            h if h >= 256 => 6,
            _ => 4,
        }
    }

    /// Captured target layers for a drafter of this target: up to five, spread evenly
    /// over layers 1..L−2 (never the embedding output nor the last layer).
    pub fn capture_layers(&self) -> Vec<u64> {
        let l = self.layers as u64;
        let m = 5.min(l.saturating_sub(2)).max(1);
        if m == 1 {
            return vec![l / 2];
        }
        (0..m).map(|i| 1 + i * (l - 3) / (m - 1)).collect()
    }

    /// A small target for tests whose rows are whole groups of eight Q8_0 blocks or more
    /// (hidden 256, FFN 800 = 25 blocks, so the eight-block kernel paths and their
    /// leftovers both run): 3 layers, GQA 4/2 heads of 64, vocabulary 1024, untied LM head.
    pub fn small() -> Qwen3Geometry {
        Qwen3Geometry {
            hidden: 256,
            layers: 3,
            heads: 4,
            kv_heads: 2,
            head_dim: 64,
            ffn: 800,
            vocab: 1024,
            context: 4096,
            untied_output: true,
        }
    }

    /// A tiny target for tests: 4 layers of 64, GQA 4/2, vocabulary 512.
    pub fn tiny() -> Qwen3Geometry {
        Qwen3Geometry {
            hidden: 64,
            layers: 4,
            heads: 4,
            kv_heads: 2,
            head_dim: 16,
            ffn: 128,
            vocab: 512,
            context: 4096,
            untied_output: false,
        }
    }
}

/// The whole GGUF file of a random Qwen3 target; `ty` is the matrices' type (Q8_0 or F32).
pub fn qwen3_gguf(g: &Qwen3Geometry, seed: u64, ty: GgmlType) -> Vec<u8> {
    assert!(
        matches!(ty, GgmlType::Q8_0 | GgmlType::F32),
        "matrices are Q8_0 or F32"
    );
    let mut h = Header::new();
    let kv = |h: &mut Header, k: &str, v: Value| h.push_kv(k, v).expect("unique keys");
    kv(
        &mut h,
        "general.architecture",
        Value::String("qwen3".into()),
    );
    kv(
        &mut h,
        "general.name",
        Value::String("dspark synthetic qwen3".into()),
    );
    for (k, v) in [
        ("context_length", g.context),
        ("embedding_length", g.hidden),
        ("block_count", g.layers),
        ("feed_forward_length", g.ffn),
        ("attention.head_count", g.heads),
        ("attention.head_count_kv", g.kv_heads),
        ("attention.key_length", g.head_dim),
        ("attention.value_length", g.head_dim),
    ] {
        kv(&mut h, &format!("qwen3.{k}"), Value::U32(v as u32));
    }
    kv(&mut h, "qwen3.rope.freq_base", Value::F32(1_000_000.0));
    kv(
        &mut h,
        "qwen3.attention.layer_norm_rms_epsilon",
        Value::F32(1e-6),
    );
    for (k, v) in SynthVocab::new(g.vocab).gguf_metadata() {
        kv(&mut h, k, v);
    }

    // (name, rows, cols, is_norm) in llama.cpp's order.
    let mut tensors: Vec<(String, usize, usize, bool)> =
        vec![("token_embd.weight".into(), g.vocab, g.hidden, false)];
    let (q, kvd) = (g.heads * g.head_dim, g.kv_heads * g.head_dim);
    for i in 0..g.layers {
        let n = |s: &str| format!("blk.{i}.{s}.weight");
        tensors.extend([
            (n("attn_norm"), 1, g.hidden, true),
            (n("attn_q"), q, g.hidden, false),
            (n("attn_k"), kvd, g.hidden, false),
            (n("attn_v"), kvd, g.hidden, false),
            (n("attn_output"), g.hidden, q, false),
            (n("attn_q_norm"), 1, g.head_dim, true),
            (n("attn_k_norm"), 1, g.head_dim, true),
            (n("ffn_norm"), 1, g.hidden, true),
            (n("ffn_gate"), g.ffn, g.hidden, false),
            (n("ffn_up"), g.ffn, g.hidden, false),
            (n("ffn_down"), g.hidden, g.ffn, false),
        ]);
    }
    tensors.push(("output_norm.weight".into(), 1, g.hidden, true));
    if g.untied_output {
        tensors.push(("output.weight".into(), g.vocab, g.hidden, false));
    }
    let mut rng = SplitMix64(seed);
    let mut blobs = Vec::with_capacity(tensors.len());
    for (name, rows, cols, is_norm) in &tensors {
        let values: Vec<f32> = (0..rows * cols)
            .map(|_| {
                if *is_norm {
                    1.0 + 0.1 * rng.normal()
                } else {
                    0.3 * rng.normal()
                }
            })
            .collect();
        let (t, bytes) = if *is_norm || ty == GgmlType::F32 {
            (
                GgmlType::F32,
                values.iter().flat_map(|v| v.to_le_bytes()).collect(),
            )
        } else {
            let mut b = vec![0u8; rows * cols / 32 * 34];
            quantize_ref(&values, &mut b);
            (GgmlType::Q8_0, b)
        };
        let dims = if *is_norm {
            vec![*cols as u64]
        } else {
            vec![*cols as u64, *rows as u64]
        };
        h.push_tensor(TensorInfo {
            name: name.clone(),
            dims,
            ty: t,
        })
        .expect("valid tensor");
        blobs.push(bytes);
    }
    let refs: Vec<&[u8]> = blobs.iter().map(|b| &b[..]).collect();
    let mut out = Vec::new();
    h.write_file(&mut out, &refs).expect("writing to memory");
    out
}

/// The byte-level BPE vocabulary of a synthetic target, written both as llama.cpp's
/// `tokenizer.ggml.*` metadata (so llama.cpp loads the GGUF) and as a Hugging Face
/// `tokenizer.json` (so `dspark generate --prompt` can encode text for it). The two
/// describe the same tokenizer: ids 0–255 are the 256 bytes in GPT-2's byte-to-character
/// mapping, then a few hundred merges of letters, then unreachable filler tokens `<tN>`,
/// and three control tokens at the end (`<|endoftext|>`, `<|im_start|>`, `<|im_end|>`,
/// as in Qwen3; `<|im_end|>` is end of sequence).
#[derive(Clone, Debug)]
pub struct SynthVocab {
    /// Token strings by id (byte-level characters).
    pub tokens: Vec<String>,
    /// `"left right"` pairs, highest priority first.
    pub merges: Vec<String>,
    /// Id of `<|endoftext|>` (beginning of sequence and padding).
    pub bos: u32,
    /// Id of `<|im_end|>` (end of sequence).
    pub eos: u32,
}

/// Qwen2/Qwen3's pre-tokenizer split pattern (the regex in their `tokenizer.json`).
const QWEN2_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// GGUF `token_type` of an ordinary token and of a control token.
const NORMAL: i32 = 1;
const CONTROL: i32 = 3;

/// GPT-2's byte-level alphabet: printable Latin-1 bytes stand for themselves, the others
/// (controls, space, DEL, NBSP, soft hyphen…) for code points from U+0100 up, in order.
fn byte_char(b: u8) -> char {
    let printable = |b: u8| matches!(b, 33..=126 | 161..=172 | 174..=255);
    if printable(b) {
        return char::from(b);
    }
    let rank = (0..b).filter(|&x| !printable(x)).count() as u32;
    char::from_u32(256 + rank).expect("U+0100..U+0143 are characters")
}

impl SynthVocab {
    /// The vocabulary of `size` tokens (at least 259).
    ///
    /// # Panics
    /// If `size < 259`.
    pub fn new(size: usize) -> SynthVocab {
        assert!(
            size >= 259,
            "a synthetic vocabulary needs 256 bytes and 3 control tokens"
        );
        let mut tokens: Vec<String> = (0..=255u8).map(|b| byte_char(b).to_string()).collect();
        let space = byte_char(b' ').to_string();
        let letters: Vec<String> = ('a'..='z').map(String::from).collect();
        // Merge candidates, highest priority first: " x", "xy", " xy".
        let mut pairs: Vec<(String, String)> = Vec::new();
        pairs.extend(letters.iter().map(|l| (space.clone(), l.clone())));
        for a in &letters {
            pairs.extend(letters.iter().map(|b| (a.clone(), b.clone())));
        }
        for a in &letters {
            pairs.extend(letters.iter().map(|b| (format!("{space}{a}"), b.clone())));
        }
        let room = size - 256 - 3;
        let merges: Vec<String> = pairs
            .iter()
            .take(room)
            .map(|(a, b)| {
                tokens.push(format!("{a}{b}"));
                format!("{a} {b}")
            })
            .collect();
        while tokens.len() < size - 3 {
            tokens.push(format!("<t{}>", tokens.len()));
        }
        let bos = tokens.len() as u32;
        tokens.extend(["<|endoftext|>", "<|im_start|>", "<|im_end|>"].map(String::from));
        SynthVocab {
            tokens,
            merges,
            bos,
            eos: bos + 2,
        }
    }

    fn is_control(&self, id: usize) -> bool {
        id >= self.bos as usize
    }

    /// llama.cpp's `tokenizer.ggml.*` keys for this vocabulary (model `gpt2`, pre-tokenizer
    /// `qwen2`).
    pub fn gguf_metadata(&self) -> Vec<(&'static str, Value)> {
        let types = (0..self.tokens.len())
            .map(|i| if self.is_control(i) { CONTROL } else { NORMAL })
            .collect();
        vec![
            ("tokenizer.ggml.model", Value::String("gpt2".into())),
            ("tokenizer.ggml.pre", Value::String("qwen2".into())),
            (
                "tokenizer.ggml.tokens",
                Value::Array(Array::String(self.tokens.clone())),
            ),
            ("tokenizer.ggml.token_type", Value::Array(Array::I32(types))),
            (
                "tokenizer.ggml.merges",
                Value::Array(Array::String(self.merges.clone())),
            ),
            ("tokenizer.ggml.eos_token_id", Value::U32(self.eos)),
            ("tokenizer.ggml.padding_token_id", Value::U32(self.bos)),
            ("tokenizer.ggml.bos_token_id", Value::U32(self.bos)),
            ("tokenizer.ggml.add_bos_token", Value::Bool(false)),
        ]
    }

    /// The same tokenizer as a Hugging Face `tokenizer.json` document (BPE over Qwen2's
    /// split pattern and the byte-level alphabet, control tokens as special added tokens).
    pub fn tokenizer_json(&self) -> serde_json::Value {
        use serde_json::json;
        let vocab: serde_json::Map<String, serde_json::Value> = self
            .tokens
            .iter()
            .enumerate()
            .filter(|&(i, _)| !self.is_control(i))
            .map(|(i, t)| (t.clone(), json!(i)))
            .collect();
        let added: Vec<serde_json::Value> = (self.bos as usize..self.tokens.len())
            .map(|i| {
                json!({"id": i, "content": self.tokens[i], "single_word": false, "lstrip": false,
                       "rstrip": false, "normalized": false, "special": true})
            })
            .collect();
        json!({
            "version": "1.0",
            "truncation": null,
            "padding": null,
            "added_tokens": added,
            "normalizer": null,
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": QWEN2_SPLIT}, "behavior": "Isolated", "invert": false},
                {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
            ]},
            "post_processor": null,
            "decoder": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
            "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
                      "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false,
                      "ignore_merges": false, "vocab": vocab, "merges": self.merges},
        })
    }
}

/// A target with only a (tied) embedding table and LM head, random Q8_0 deterministic
/// from a seed: enough to draft blocks with a drafter whose real target is too large to
/// synthesize (Kimi K3's, say), to time the drafter alone. It has no decoder layers:
/// [`Target::forward`] is an error.
pub struct HeadOnlyTarget {
    vocab: usize,
    hidden: usize,
    table: Vec<u8>,
}

impl HeadOnlyTarget {
    /// `vocab × hidden` (hidden a multiple of 32); rows of random quants with scale 1/64.
    ///
    /// # Panics
    /// If `hidden` is not a positive multiple of 32.
    pub fn new(vocab: usize, hidden: usize, seed: u64) -> HeadOnlyTarget {
        use rayon::prelude::*;
        assert!(
            hidden > 0 && hidden.is_multiple_of(32),
            "hidden must be whole Q8_0 blocks"
        );
        let row = hidden / 32 * 34;
        let mut table = vec![0u8; vocab * row];
        let scale = half::f16::from_f32(1.0 / 64.0).to_bits().to_le_bytes();
        table
            .par_chunks_mut(row)
            .enumerate()
            .for_each(|(r, bytes)| {
                let mut rng = SplitMix64(seed ^ (r as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
                for block in bytes.chunks_exact_mut(34) {
                    block[..2].copy_from_slice(&scale);
                    for q in block[2..].chunks_exact_mut(8) {
                        q.copy_from_slice(&rng.next_u64().to_le_bytes());
                    }
                }
            });
        HeadOnlyTarget {
            vocab,
            hidden,
            table,
        }
    }

    /// The table as a matrix (`vocab` rows of `hidden`).
    pub fn matrix(&self) -> Matrix<'_> {
        Matrix::new(WeightType::Q8_0, self.vocab, self.hidden, &self.table)
            .expect("sizes set by new")
    }
}

impl Target for HeadOnlyTarget {
    fn vocab_size(&self) -> usize {
        self.vocab
    }

    fn hidden_size(&self) -> usize {
        self.hidden
    }

    fn n_layers(&self) -> usize {
        0
    }

    fn len(&self) -> usize {
        0
    }

    fn forward(&mut self, _tokens: &[u32], _capture: &[usize]) -> Result<Forward> {
        Err(RuntimeError::Request(
            "a head-only target has no decoder layers to run".into(),
        ))
    }

    fn truncate(&mut self, _len: usize) {}

    fn embed(&self, tokens: &[u32], out: &mut [f32]) -> Result<()> {
        let m = self.matrix();
        for (&t, o) in tokens.iter().zip(out.chunks_exact_mut(self.hidden)) {
            if t as usize >= self.vocab {
                return Err(RuntimeError::Request(format!(
                    "token {t} is outside the vocabulary of {}",
                    self.vocab
                )));
            }
            m.row_f32(t as usize, o);
        }
        Ok(())
    }

    fn lm_head(&self, hidden: &[f32], logits: &mut [f32]) {
        gemm(&self.matrix(), hidden, logits);
    }
}

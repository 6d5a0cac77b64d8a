//! Random-weight Qwen3 targets in llama.cpp's `qwen3` GGUF layout, deterministic from a
//! seed, for tests and benchmarks. Matrices are Q8_0 (or F32), norms F32 near 1.

use dspark_contract::names::tensors::{LayerDims, LayerTensor, OUTPUT, OUTPUT_NORM, TOKEN_EMBD};
use dspark_contract::names::tokenizer as tk;
use dspark_contract::names::{self, keys};
use dspark_contract::qwen3::ARCH;
use dspark_gguf::{Array, GgmlType, Header, TensorInfo, Value};
use dspark_quant::q8_0::quantize_ref;

use dspark_runtime::tokenizer::byte_char;

use crate::rng::SplitMix64;

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

    /// A micro target for mutation tests and fuzz seeds: three layers of 32, 2/1 heads of
    /// 16, a 320-token vocabulary (256 bytes, 61 merges, 3 control tokens), context 64.
    pub fn micro() -> Qwen3Geometry {
        Qwen3Geometry {
            hidden: 32,
            layers: 3,
            heads: 2,
            kv_heads: 1,
            head_dim: 16,
            ffn: 32,
            vocab: 320,
            context: 64,
            untied_output: false,
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
    kv(&mut h, names::ARCHITECTURE, Value::String(ARCH.into()));
    kv(
        &mut h,
        names::general::NAME,
        Value::String("dspark synthetic qwen3".into()),
    );
    for (k, v) in [
        (keys::CONTEXT_LENGTH, g.context),
        (keys::EMBEDDING_LENGTH, g.hidden),
        (keys::BLOCK_COUNT, g.layers),
        (keys::FEED_FORWARD_LENGTH, g.ffn),
        (keys::HEAD_COUNT, g.heads),
        (keys::HEAD_COUNT_KV, g.kv_heads),
        (keys::KEY_LENGTH, g.head_dim),
        (keys::VALUE_LENGTH, g.head_dim),
    ] {
        kv(&mut h, &names::key(ARCH, k), Value::U32(v as u32));
    }
    kv(
        &mut h,
        &names::key(ARCH, keys::ROPE_FREQ_BASE),
        Value::F32(1_000_000.0),
    );
    kv(&mut h, &names::key(ARCH, keys::RMS_EPS), Value::F32(1e-6));
    for (k, v) in SynthVocab::new(g.vocab).gguf_metadata() {
        kv(&mut h, k, v);
    }

    // (name, rows, cols, is_norm): embedding, layers, final norm, LM head.
    let mut tensors: Vec<(String, usize, usize, bool)> =
        vec![(TOKEN_EMBD.into(), g.vocab, g.hidden, false)];
    let dims = LayerDims {
        hidden: g.hidden as u64,
        heads: g.heads as u64,
        kv_heads: g.kv_heads as u64,
        head_dim: g.head_dim as u64,
        ffn: g.ffn as u64,
    };
    for i in 0..g.layers {
        for t in LayerTensor::ALL {
            let ne = t.ne(&dims);
            let rows = ne.get(1).copied().unwrap_or(1) as usize;
            tensors.push((t.name(i as u64), rows, ne[0] as usize, t.is_norm()));
        }
    }
    tensors.push((OUTPUT_NORM.into(), 1, g.hidden, true));
    if g.untied_output {
        tensors.push((OUTPUT.into(), g.vocab, g.hidden, false));
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

/// GGUF `token_type` of an ordinary token and of a control token.
const NORMAL: i32 = 1;
const CONTROL: i32 = dspark_contract::TOKEN_TYPE_CONTROL;

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
            (tk::MODEL, Value::String("gpt2".into())),
            (tk::PRE, Value::String("qwen2".into())),
            (tk::TOKENS, Value::Array(Array::String(self.tokens.clone()))),
            (tk::TOKEN_TYPE, Value::Array(Array::I32(types))),
            (tk::MERGES, Value::Array(Array::String(self.merges.clone()))),
            (tk::EOS_ID, Value::U32(self.eos)),
            (tk::PAD_ID, Value::U32(self.bos)),
            (tk::BOS_ID, Value::U32(self.bos)),
            (tk::ADD_BOS, Value::Bool(false)),
        ]
    }

    /// The same tokenizer as a Hugging Face `tokenizer.json` document (BPE over Qwen2's
    /// split pattern and the byte-level alphabet, control tokens as special added tokens),
    /// built by the runtime's own GGUF-vocabulary builder.
    pub fn tokenizer_json(&self) -> Vec<u8> {
        dspark_runtime::tokenizer::byte_level_tokenizer_json(
            &self.tokens,
            &|i| self.is_control(i),
            &self.merges,
            "qwen2",
        )
        .expect("a synthetic vocabulary has unique tokens and a supported pre-tokenizer")
    }
}

/// The drafter checkpoint [`write_pair`] writes beside a target of geometry `t`: one layer
/// with the target's head layout, capturing [`Qwen3Geometry::capture_layers`].
pub fn pair_drafter(t: &Qwen3Geometry) -> crate::drafter::SynthGeometry {
    let mut d = crate::drafter::SynthGeometry::for_target(
        "draft",
        t.hidden as u64,
        t.heads as u64,
        t.kv_heads as u64,
        t.head_dim as u64,
        t.ffn as u64,
        t.vocab as u64,
        t.layers as u64,
        t.capture_layers(),
    );
    d.block_size = t.draft_block_size();
    d
}

/// Writes a synthetic pair into `dir`: `target.gguf` (random Qwen3, Q8_0 matrices),
/// `tokenizer.json` (its vocabulary) and `draft/` (a DSpark drafter checkpoint that fits
/// it), each file atomically. `progress` returning false cancels.
pub fn write_pair(
    t: &Qwen3Geometry,
    dir: &std::path::Path,
    seed: u64,
    progress: &dyn Fn(u64, u64) -> bool,
) -> crate::Result<()> {
    write_pair_files(
        dir,
        &qwen3_gguf(t, seed, GgmlType::Q8_0),
        t.vocab,
        &pair_drafter(t),
        seed,
        progress,
    )
}

/// Writes `target` as `dir/target.gguf`, the synthetic vocabulary of `vocab` tokens as
/// `dir/tokenizer.json` and the drafter checkpoint `drafter` in `dir/draft/`, each file
/// atomically (the pair writers of every target kind).
pub(crate) fn write_pair_files(
    dir: &std::path::Path,
    target: &[u8],
    vocab: usize,
    drafter: &crate::drafter::SynthGeometry,
    seed: u64,
    progress: &dyn Fn(u64, u64) -> bool,
) -> crate::Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| crate::SynthError::io(dir, e))?;
    crate::write_atomic(&dir.join("target.gguf"), target)?;
    crate::write_atomic(
        &dir.join("tokenizer.json"),
        &SynthVocab::new(vocab).tokenizer_json(),
    )?;
    crate::drafter::write_synth(drafter, &dir.join("draft"), seed, progress)
}

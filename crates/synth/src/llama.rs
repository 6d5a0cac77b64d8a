//! Random-weight targets in llama.cpp's `llama` GGUF layout, deterministic from a seed,
//! for tests and benchmarks: GQA, the options llama files carry (biases, a fused
//! `attn_qkv`, Llama 3's `rope_freqs`, linear or YaRN RoPE scaling, a tied or separate LM
//! head) and any weight type of the kernel table for the matrices.

use dspark_contract::llama::{names_llama, ARCH};
use dspark_contract::names::tensors::{OUTPUT, OUTPUT_NORM, TOKEN_EMBD};
use dspark_contract::names::{self, keys};
use dspark_gguf::{GgmlType, Header, TensorInfo, Value};

use crate::rng::SplitMix64;
use crate::target::SynthVocab;

/// RoPE scaling a synthetic llama target declares.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum SynthRopeScaling {
    /// None (no scaling keys).
    None,
    /// `rope.scaling.type = linear` with this factor.
    Linear(f32),
    /// `rope.scaling.type = yarn` with this factor and original context.
    Yarn(f32, u32),
}

/// The shape and options of a synthetic llama target.
#[derive(Clone, Debug, PartialEq)]
#[allow(missing_docs)]
pub struct LlamaGeometry {
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
    /// Write every optional bias llama.cpp's graph adds.
    pub biases: bool,
    /// Write `attn_qkv` instead of `attn_q` / `attn_k` / `attn_v`.
    pub fused_qkv: bool,
    /// Write Llama 3's `rope_freqs.weight`.
    pub rope_freqs: bool,
    /// RoPE scaling keys.
    pub rope_scaling: SynthRopeScaling,
}

impl LlamaGeometry {
    /// A tiny target: 4 layers of 64, GQA 4/2 heads of 16, vocabulary 512, tied LM head
    /// (as SmolLM2's).
    pub fn tiny() -> LlamaGeometry {
        LlamaGeometry {
            hidden: 64,
            layers: 4,
            heads: 4,
            kv_heads: 2,
            head_dim: 16,
            ffn: 128,
            vocab: 512,
            context: 4096,
            untied_output: false,
            biases: false,
            fused_qkv: false,
            rope_freqs: false,
            rope_scaling: SynthRopeScaling::None,
        }
    }

    /// The tiny target with every option llama files may carry: biases, a fused QKV,
    /// Llama 3's frequency factors, YaRN scaling, a separate LM head.
    pub fn tiny_options() -> LlamaGeometry {
        LlamaGeometry {
            untied_output: true,
            biases: true,
            fused_qkv: true,
            rope_freqs: true,
            rope_scaling: SynthRopeScaling::Yarn(4.0, 1024),
            ..LlamaGeometry::tiny()
        }
    }

    /// A small target whose rows are whole super-blocks (256) for every weight type: 3
    /// layers of 256, GQA 4/2 heads of 64, FFN 512, vocabulary 1024, linear RoPE scaling.
    pub fn small() -> LlamaGeometry {
        LlamaGeometry {
            hidden: 256,
            layers: 3,
            heads: 4,
            kv_heads: 2,
            head_dim: 64,
            ffn: 512,
            vocab: 1024,
            context: 4096,
            untied_output: true,
            rope_scaling: SynthRopeScaling::Linear(2.0),
            ..LlamaGeometry::tiny()
        }
    }

    /// SmolLM2-135M's shape (hidden 576, 30 layers, 9/3 heads of 64, FFN 1536, vocabulary
    /// 49,152, tied embeddings).
    pub fn smollm2_135m() -> LlamaGeometry {
        LlamaGeometry {
            hidden: 576,
            layers: 30,
            heads: 9,
            kv_heads: 3,
            head_dim: 64,
            ffn: 1536,
            vocab: 49_152,
            context: 8192,
            ..LlamaGeometry::tiny()
        }
    }

    /// Looks a geometry up by its CLI name (`llama-tiny`, `llama-tiny-options`,
    /// `llama-small`, `llama-smollm2`).
    pub fn by_name(name: &str) -> Option<LlamaGeometry> {
        match name {
            "llama-tiny" => Some(LlamaGeometry::tiny()),
            "llama-tiny-options" => Some(LlamaGeometry::tiny_options()),
            "llama-small" => Some(LlamaGeometry::small()),
            "llama-smollm2" => Some(LlamaGeometry::smollm2_135m()),
            _ => None,
        }
    }

    /// The drafter checkpoint that fits this target (as for Qwen3 targets).
    pub fn drafter(&self) -> crate::drafter::SynthGeometry {
        crate::target::pair_drafter(&self.as_qwen3())
    }

    /// The same sizes as a Qwen3 geometry (for the drafter and its captured layers).
    fn as_qwen3(&self) -> crate::target::Qwen3Geometry {
        crate::target::Qwen3Geometry {
            hidden: self.hidden,
            layers: self.layers,
            heads: self.heads,
            kv_heads: self.kv_heads,
            head_dim: self.head_dim,
            ffn: self.ffn,
            vocab: self.vocab,
            context: self.context,
            untied_output: self.untied_output,
        }
    }
}

/// Bytes of `values` as a matrix of `ty` (rows of whole blocks): quantized by the type's
/// reference quantizer when dspark writes the type, else `ty`'s sampled valid blocks (every
/// weight type of the kernel table can be synthesized, the read-only ones as random
/// blocks).
fn matrix_bytes(values: &[f32], ty: GgmlType, seed: u64) -> Vec<u8> {
    let f = dspark_quant::format_of(ty).expect("a type of the kernel table");
    match f.quantize_ref {
        Some(q) => {
            let mut b = vec![0u8; f.row_bytes(values.len())];
            q(values, &mut b);
            b
        }
        None => f.sample(values.len(), seed),
    }
}

/// The whole GGUF file of a random llama target; `ty` is the matrices' type (any type of
/// the kernel table whose blocks divide every row; norms, biases and factors are F32).
///
/// # Panics
/// If `ty` has no kernel or a row is not whole blocks of it.
pub fn llama_gguf(g: &LlamaGeometry, seed: u64, ty: GgmlType) -> Vec<u8> {
    let mut h = Header::new();
    let kv = |h: &mut Header, k: &str, v: Value| h.push_kv(k, v).expect("unique keys");
    let key = |s: &str| names::key(ARCH, s);
    kv(&mut h, names::ARCHITECTURE, Value::String(ARCH.into()));
    kv(
        &mut h,
        names::general::NAME,
        Value::String("dspark synthetic llama".into()),
    );
    for (k, v) in [
        (keys::CONTEXT_LENGTH, g.context),
        (keys::EMBEDDING_LENGTH, g.hidden),
        (keys::BLOCK_COUNT, g.layers),
        (keys::FEED_FORWARD_LENGTH, g.ffn),
        (keys::HEAD_COUNT, g.heads),
        (keys::HEAD_COUNT_KV, g.kv_heads),
        (keys::ROPE_DIMENSION_COUNT, g.head_dim),
    ] {
        kv(&mut h, &key(k), Value::U32(v as u32));
    }
    kv(&mut h, &key(keys::ROPE_FREQ_BASE), Value::F32(10_000.0));
    kv(&mut h, &key(keys::RMS_EPS), Value::F32(1e-5));
    match g.rope_scaling {
        SynthRopeScaling::None => {}
        SynthRopeScaling::Linear(f) => {
            kv(
                &mut h,
                &key(keys::ROPE_SCALING_TYPE),
                Value::String("linear".into()),
            );
            kv(&mut h, &key(keys::ROPE_SCALING_FACTOR), Value::F32(f));
        }
        SynthRopeScaling::Yarn(f, orig) => {
            kv(
                &mut h,
                &key(keys::ROPE_SCALING_TYPE),
                Value::String("yarn".into()),
            );
            kv(&mut h, &key(keys::ROPE_SCALING_FACTOR), Value::F32(f));
            kv(
                &mut h,
                &key(keys::ROPE_SCALING_ORIGINAL_CONTEXT),
                Value::U32(orig),
            );
        }
    }
    for (k, v) in SynthVocab::new(g.vocab).gguf_metadata() {
        kv(&mut h, k, v);
    }

    // (name, ne, kind): kind 0 = matrix, 1 = norm (near 1), 2 = bias (near 0), 3 =
    // frequency factor (1..4).
    let (qd, kvd) = (g.heads * g.head_dim, g.kv_heads * g.head_dim);
    let mut tensors: Vec<(String, Vec<usize>, u8)> =
        vec![(TOKEN_EMBD.into(), vec![g.hidden, g.vocab], 0)];
    if g.rope_freqs {
        tensors.push((names_llama::ROPE_FREQS.into(), vec![g.head_dim / 2], 3));
    }
    for i in 0..g.layers {
        let b = |s: &str| format!("blk.{i}.{s}");
        tensors.push((b("attn_norm.weight"), vec![g.hidden], 1));
        if g.fused_qkv {
            tensors.push((b("attn_qkv.weight"), vec![g.hidden, qd + 2 * kvd], 0));
            if g.biases {
                tensors.push((b("attn_qkv.bias"), vec![qd + 2 * kvd], 2));
            }
        } else {
            tensors.push((b("attn_q.weight"), vec![g.hidden, qd], 0));
            tensors.push((b("attn_k.weight"), vec![g.hidden, kvd], 0));
            tensors.push((b("attn_v.weight"), vec![g.hidden, kvd], 0));
            if g.biases {
                tensors.push((b("attn_q.bias"), vec![qd], 2));
                tensors.push((b("attn_k.bias"), vec![kvd], 2));
                tensors.push((b("attn_v.bias"), vec![kvd], 2));
            }
        }
        tensors.push((b("attn_output.weight"), vec![qd, g.hidden], 0));
        tensors.push((b("ffn_norm.weight"), vec![g.hidden], 1));
        tensors.push((b("ffn_gate.weight"), vec![g.hidden, g.ffn], 0));
        tensors.push((b("ffn_up.weight"), vec![g.hidden, g.ffn], 0));
        tensors.push((b("ffn_down.weight"), vec![g.ffn, g.hidden], 0));
        if g.biases {
            tensors.push((b("attn_output.bias"), vec![g.hidden], 2));
            tensors.push((b("ffn_gate.bias"), vec![g.ffn], 2));
            tensors.push((b("ffn_up.bias"), vec![g.ffn], 2));
            tensors.push((b("ffn_down.bias"), vec![g.hidden], 2));
        }
    }
    tensors.push((OUTPUT_NORM.into(), vec![g.hidden], 1));
    if g.untied_output {
        tensors.push((OUTPUT.into(), vec![g.hidden, g.vocab], 0));
    }
    let mut rng = SplitMix64(seed);
    let mut blobs = Vec::with_capacity(tensors.len());
    for (name, ne, kind) in &tensors {
        let n: usize = ne.iter().product();
        let values: Vec<f32> = (0..n)
            .map(|_| match kind {
                1 => 1.0 + 0.1 * rng.normal(),
                2 => 0.05 * rng.normal(),
                3 => 1.0 + 3.0 * rng.uniform(),
                _ => 0.3 * rng.normal(),
            })
            .collect();
        let (t, bytes) = if *kind != 0 || ty == GgmlType::F32 {
            (
                GgmlType::F32,
                values.iter().flat_map(|v| v.to_le_bytes()).collect(),
            )
        } else {
            (ty, matrix_bytes(&values, ty, rng.next_u64()))
        };
        h.push_tensor(TensorInfo {
            name: name.clone(),
            dims: ne.iter().map(|&d| d as u64).collect(),
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

/// Writes a synthetic llama pair into `dir`: `target.gguf` (Q8_0 matrices),
/// `tokenizer.json` and `draft/` (a DSpark drafter checkpoint that fits it), each file
/// atomically. `progress` returning false cancels.
pub fn write_llama_pair(
    g: &LlamaGeometry,
    dir: &std::path::Path,
    seed: u64,
    progress: &dyn Fn(u64, u64) -> bool,
) -> crate::Result<()> {
    crate::target::write_pair_files(
        dir,
        &llama_gguf(g, seed, GgmlType::Q8_0),
        g.vocab,
        &g.drafter(),
        seed,
        progress,
    )
}

//! Random-weight Kimi K3 targets in llama.cpp's `kimi-k3` GGUF layout
//! (`shared/spec/llama-cpp/kimi-k3-layout.md` §1–§2), deterministic from a seed, with the
//! synthetic byte-level vocabulary llama.cpp loads, and DSpark drafters that fit them
//! capturing MLA layers (as the seed's drafter captures K3's).
//!
//! Matrices are Q8_0 where their rows are whole Q8_0 blocks and F32 otherwise (or F32
//! throughout); vectors, norms, the router and the conv kernels are F32, as llama.cpp's
//! converter writes them. Weights are scaled by fan-in so activations stay near 1.

use dspark_contract::kimi_k3::ARCH;
use dspark_contract::names::kimi_k3 as n;
use dspark_contract::names::{self, keys, tensors};
use dspark_gguf::{Array, GgmlType, Header, TensorInfo, Value};

use crate::rng::SplitMix64;
use crate::target::SynthVocab;

/// The shape of a synthetic Kimi K3 target.
#[derive(Clone, Debug, PartialEq)]
#[allow(missing_docs)]
pub struct K3Geometry {
    pub name: &'static str,
    pub hidden: usize,
    pub layers: usize,
    pub heads: usize,
    pub kda_head_dim: usize,
    pub conv_kernel: usize,
    /// 0-based MLA layers (the others are KDA).
    pub mla_layers: Vec<usize>,
    pub q_lora_rank: usize,
    pub kv_lora_rank: usize,
    pub rope_dim: usize,
    pub nope_dim: usize,
    pub v_dim: usize,
    pub mla_gate: bool,
    pub dense_layers: usize,
    pub ffn: usize,
    pub experts: usize,
    pub experts_used: usize,
    pub shared_experts: usize,
    pub expert_ffn: usize,
    pub latent: usize,
    pub routed_norm: bool,
    pub weights_norm: bool,
    pub weights_scale: f32,
    /// `expert_gating_func`: 1 softmax, 2 sigmoid, 3 softmax-weight, 4 sqrt-softplus.
    pub gating: u32,
    pub expert_groups: usize,
    pub expert_groups_used: usize,
    pub res_block: usize,
    pub situ_beta: f32,
    pub situ_linear_beta: f32,
    pub gate_lower_bound: Option<f32>,
    pub eps: f32,
    pub vocab: usize,
    pub context: usize,
    /// Captured layers of the drafter written beside it (MLA layers).
    pub captures: Vec<u64>,
    /// The drafter's block size.
    pub block_size: u64,
}

impl K3Geometry {
    /// A tiny target for tests: 6 layers of 64 (MLA at 1, 3, 5 — q LoRA, gate —, KDA
    /// between), one dense layer, then MoE with 4 experts top-2 in a 32-wide latent and a
    /// shared expert, residual blocks of 2, weights normalised and scaled by 2.5.
    pub fn tiny() -> K3Geometry {
        K3Geometry {
            name: "kimi-k3-tiny",
            hidden: 64,
            layers: 6,
            heads: 2,
            kda_head_dim: 32,
            conv_kernel: 4,
            mla_layers: vec![1, 3, 5],
            q_lora_rank: 32,
            kv_lora_rank: 32,
            rope_dim: 8,
            nope_dim: 16,
            v_dim: 16,
            mla_gate: true,
            dense_layers: 1,
            ffn: 128,
            experts: 4,
            experts_used: 2,
            shared_experts: 1,
            expert_ffn: 32,
            latent: 32,
            routed_norm: true,
            weights_norm: true,
            weights_scale: 2.5,
            gating: 2,
            expert_groups: 0,
            expert_groups_used: 0,
            res_block: 2,
            situ_beta: 4.0,
            situ_linear_beta: 25.0,
            gate_lower_bound: Some(-5.0),
            eps: 1e-5,
            vocab: 512,
            context: 4096,
            captures: vec![1, 3],
            block_size: 4,
        }
    }

    /// A target sized for benchmarks with K3's structure: 16 layers of 512, MLA every 4th
    /// and the last (3, 7, 11, 15), KDA 8 heads × 64 with conv 4, q LoRA 256, latent 128
    /// + rope 32, one dense layer, then 16 experts top-2 in a 256-wide latent with a
    ///   shared expert, residual blocks of 4; the drafter captures 3, 7, 11.
    pub fn small() -> K3Geometry {
        K3Geometry {
            name: "kimi-k3-small",
            hidden: 512,
            layers: 16,
            heads: 8,
            kda_head_dim: 64,
            conv_kernel: 4,
            mla_layers: vec![3, 7, 11, 15],
            q_lora_rank: 256,
            kv_lora_rank: 128,
            rope_dim: 32,
            nope_dim: 64,
            v_dim: 64,
            mla_gate: true,
            dense_layers: 1,
            ffn: 1024,
            experts: 16,
            experts_used: 2,
            shared_experts: 1,
            expert_ffn: 256,
            latent: 256,
            routed_norm: true,
            weights_norm: true,
            weights_scale: 2.5,
            gating: 2,
            expert_groups: 0,
            expert_groups_used: 0,
            res_block: 4,
            situ_beta: 4.0,
            situ_linear_beta: 25.0,
            gate_lower_bound: Some(-5.0),
            eps: 1e-5,
            vocab: 2048,
            context: 8192,
            captures: vec![3, 7, 11],
            block_size: 8,
        }
    }

    /// Looks a geometry up by its CLI name (`kimi-k3-tiny`, `kimi-k3-small`).
    pub fn by_name(name: &str) -> Option<K3Geometry> {
        match name {
            "kimi-k3-tiny" => Some(K3Geometry::tiny()),
            "kimi-k3-small" => Some(K3Geometry::small()),
            _ => None,
        }
    }

    fn d_in(&self) -> usize {
        self.heads * self.kda_head_dim
    }

    fn expert_width(&self) -> usize {
        if self.latent > 0 {
            self.latent
        } else {
            self.hidden
        }
    }

    /// Every tensor: name, ne, and how its values are drawn.
    fn tensors(&self) -> Vec<(String, Vec<u64>, Init)> {
        let u = |x: usize| x as u64;
        let (e, h, d, din) = (
            u(self.hidden),
            u(self.heads),
            u(self.kda_head_dim),
            u(self.d_in()),
        );
        let mut t: Vec<(String, Vec<u64>, Init)> = vec![(
            tensors::TOKEN_EMBD.into(),
            vec![e, u(self.vocab)],
            Init::Embedding,
        )];
        let blk = |i: usize, s: &str| format!("blk.{i}.{s}");
        for i in 0..self.layers {
            t.push((blk(i, n::ATTN_NORM), vec![e], Init::Norm));
            t.push((blk(i, n::FFN_NORM), vec![e], Init::Norm));
            if self.res_block > 0 {
                t.push((blk(i, n::ATTN_RES_SCORE), vec![e], Init::Score));
                t.push((blk(i, n::FFN_RES_SCORE), vec![e], Init::Score));
            }
            if self.mla_layers.contains(&i) {
                let (rq, rkv) = (u(self.q_lora_rank), u(self.kv_lora_rank));
                let (dn, dr, dv) = (u(self.nope_dim), u(self.rope_dim), u(self.v_dim));
                if rq > 0 {
                    t.push((blk(i, n::ATTN_Q_A), vec![e, rq], Init::Matrix));
                    t.push((blk(i, n::ATTN_Q_A_NORM), vec![rq], Init::Norm));
                    t.push((blk(i, n::ATTN_Q_B), vec![rq, h * (dn + dr)], Init::Matrix));
                } else {
                    t.push((blk(i, n::ATTN_Q), vec![e, h * (dn + dr)], Init::Matrix));
                }
                t.push((blk(i, n::ATTN_KV_A_MQA), vec![e, rkv + dr], Init::Matrix));
                t.push((blk(i, n::ATTN_KV_A_NORM), vec![rkv], Init::Norm));
                t.push((blk(i, n::ATTN_K_B), vec![dn, rkv, h], Init::Matrix));
                t.push((blk(i, n::ATTN_V_B), vec![rkv, dv, h], Init::Matrix));
                if self.mla_gate {
                    t.push((blk(i, n::ATTN_GATE), vec![e, h * dv], Init::Matrix));
                }
                t.push((blk(i, n::ATTN_OUTPUT), vec![h * dv, e], Init::Matrix));
            } else {
                let k = u(self.conv_kernel);
                for s in [n::ATTN_Q, n::ATTN_K, n::ATTN_V] {
                    t.push((blk(i, s), vec![e, din], Init::Matrix));
                }
                for s in [n::SSM_CONV1D_Q, n::SSM_CONV1D_K, n::SSM_CONV1D_V] {
                    t.push((blk(i, s), vec![k, 1, din], Init::Conv));
                }
                t.push((blk(i, n::SSM_F_A), vec![e, d], Init::Matrix));
                t.push((blk(i, n::SSM_F_B), vec![d, din], Init::Matrix));
                t.push((blk(i, n::SSM_BETA), vec![e, h], Init::Matrix));
                t.push((blk(i, n::SSM_A), vec![h], Init::NegExp));
                t.push((blk(i, n::SSM_DT_BIAS), vec![din], Init::Small));
                t.push((blk(i, n::SSM_G), vec![e, din], Init::Matrix));
                t.push((blk(i, n::SSM_NORM), vec![d], Init::Norm));
                t.push((blk(i, n::ATTN_OUTPUT), vec![din, e], Init::Matrix));
            }
            if i < self.dense_layers {
                let f = u(self.ffn);
                t.push((blk(i, n::FFN_GATE), vec![e, f], Init::Matrix));
                t.push((blk(i, n::FFN_UP), vec![e, f], Init::Matrix));
                t.push((blk(i, n::FFN_DOWN), vec![f, e], Init::Matrix));
            } else {
                let (ne, fe, el) = (u(self.experts), u(self.expert_ffn), u(self.expert_width()));
                t.push((blk(i, n::FFN_GATE_INP), vec![e, ne], Init::Router));
                t.push((blk(i, n::FFN_EXP_PROBS_B), vec![ne], Init::Small));
                t.push((blk(i, n::FFN_GATE_EXPS), vec![el, fe, ne], Init::Matrix));
                t.push((blk(i, n::FFN_UP_EXPS), vec![el, fe, ne], Init::Matrix));
                t.push((blk(i, n::FFN_DOWN_EXPS), vec![fe, el, ne], Init::Matrix));
                if self.latent > 0 {
                    t.push((blk(i, n::FFN_ROUTED_DOWN), vec![e, el], Init::Matrix));
                    t.push((blk(i, n::FFN_ROUTED_UP), vec![el, e], Init::Matrix));
                    if self.routed_norm {
                        t.push((blk(i, n::FFN_ROUTED_NORM), vec![el], Init::Norm));
                    }
                }
                if self.shared_experts > 0 {
                    let fs = fe * u(self.shared_experts);
                    t.push((blk(i, n::FFN_GATE_SHEXP), vec![e, fs], Init::Matrix));
                    t.push((blk(i, n::FFN_UP_SHEXP), vec![e, fs], Init::Matrix));
                    t.push((blk(i, n::FFN_DOWN_SHEXP), vec![fs, e], Init::Matrix));
                }
            }
        }
        t.push((tensors::OUTPUT_NORM.into(), vec![e], Init::Norm));
        if self.res_block > 0 {
            t.push((n::OUTPUT_RES_SCORE.into(), vec![e], Init::Score));
        }
        t.push((tensors::OUTPUT.into(), vec![e, u(self.vocab)], Init::Head));
        t
    }

    /// The drafter checkpoint for this target: one Qwen3-style layer of the target's
    /// hidden size (4 heads, 2 KV heads), capturing [`K3Geometry::captures`].
    pub fn drafter(&self) -> crate::drafter::SynthGeometry {
        let mut d = crate::drafter::SynthGeometry::for_target(
            "draft",
            self.hidden as u64,
            4,
            2,
            (self.hidden / 4) as u64,
            (2 * self.hidden) as u64,
            self.vocab as u64,
            self.layers as u64,
            self.captures.clone(),
        );
        d.block_size = self.block_size;
        d.max_position_embeddings = self.context as u64;
        d
    }
}

/// How a tensor's values are drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Init {
    /// N(0, 1/fan_in) · 1.2: matrices.
    Matrix,
    /// N(0, 1): embedding rows.
    Embedding,
    /// N(0, 2.5²/fan_in): the LM head (logits of a few units).
    Head,
    /// N(0, 2/fan_in): the router.
    Router,
    /// 1 + N(0, 0.1²): RMSNorm weights.
    Norm,
    /// N(0, 0.5²/√E)… residual scores: N(0, 0.3²).
    Score,
    /// N(0, 0.5²): conv kernels.
    Conv,
    /// N(0, 0.1²): biases.
    Small,
    /// −exp(U(−1, 1)): `ssm_a`.
    NegExp,
}

/// The whole GGUF of a random Kimi K3 target; `ty` is the matrices' type (Q8_0 where
/// rows are whole blocks, else F32; or F32 throughout).
pub fn kimi_k3_gguf(g: &K3Geometry, seed: u64, ty: GgmlType) -> Vec<u8> {
    assert!(
        matches!(ty, GgmlType::Q8_0 | GgmlType::F32),
        "matrices are Q8_0 or F32"
    );
    let mut h = Header::new();
    let kv = |h: &mut Header, k: &str, v: Value| h.push_kv(k, v).expect("unique keys");
    let k = |s: &str| names::key(ARCH, s);
    kv(&mut h, names::ARCHITECTURE, Value::String(ARCH.into()));
    kv(
        &mut h,
        names::general::NAME,
        Value::String(format!("dspark synthetic {}", g.name)),
    );
    let u32s: Vec<(&str, usize)> = vec![
        (keys::CONTEXT_LENGTH, g.context),
        (keys::EMBEDDING_LENGTH, g.hidden),
        (keys::BLOCK_COUNT, g.layers),
        (keys::FEED_FORWARD_LENGTH, g.ffn),
        (keys::HEAD_COUNT, g.heads),
        (keys::KEY_LENGTH, g.kv_lora_rank + g.rope_dim),
        (keys::VALUE_LENGTH, g.kv_lora_rank),
        (keys::ROPE_DIMENSION_COUNT, g.rope_dim),
        (n::KEY_LENGTH_MLA, g.nope_dim + g.rope_dim),
        (n::VALUE_LENGTH_MLA, g.v_dim),
        (n::Q_LORA_RANK, g.q_lora_rank),
        (n::KV_LORA_RANK, g.kv_lora_rank),
        (n::SSM_CONV_KERNEL, g.conv_kernel),
        (n::KDA_HEAD_DIM, g.kda_head_dim),
        (n::EXPERT_COUNT, g.experts),
        (n::EXPERT_USED_COUNT, g.experts_used),
        (n::EXPERT_FEED_FORWARD_LENGTH, g.expert_ffn),
        (n::EXPERT_SHARED_COUNT, g.shared_experts),
        (n::LEADING_DENSE_BLOCK_COUNT, g.dense_layers),
        (n::EXPERT_LATENT_LENGTH, g.latent),
        (n::ATTN_RES_BLOCK_SIZE, g.res_block),
        (keys::VOCAB_SIZE, g.vocab),
    ];
    for (key, v) in u32s {
        kv(&mut h, &k(key), Value::U32(v as u32));
    }
    kv(&mut h, &k(n::EXPERT_GATING_FUNC), Value::U32(g.gating));
    if g.expert_groups > 1 {
        kv(
            &mut h,
            &k(n::EXPERT_GROUP_COUNT),
            Value::U32(g.expert_groups as u32),
        );
        kv(
            &mut h,
            &k(n::EXPERT_GROUP_USED_COUNT),
            Value::U32(g.expert_groups_used as u32),
        );
    }
    let kinds: Vec<i32> = (0..g.layers)
        .map(|i| i32::from(g.mla_layers.contains(&i)))
        .collect();
    kv(
        &mut h,
        &k(keys::HEAD_COUNT_KV),
        Value::Array(Array::I32(kinds)),
    );
    kv(&mut h, &k(keys::RMS_EPS), Value::F32(g.eps));
    kv(
        &mut h,
        &k(n::EXPERT_WEIGHTS_SCALE),
        Value::F32(g.weights_scale),
    );
    kv(
        &mut h,
        &k(n::EXPERT_WEIGHTS_NORM),
        Value::Bool(g.weights_norm),
    );
    kv(&mut h, &k(n::SITU_BETA), Value::F32(g.situ_beta));
    kv(
        &mut h,
        &k(n::SITU_LINEAR_BETA),
        Value::F32(g.situ_linear_beta),
    );
    if let Some(lb) = g.gate_lower_bound {
        kv(&mut h, &k(n::KDA_GATE_LOWER_BOUND), Value::F32(lb));
    }
    for (key, v) in SynthVocab::new(g.vocab).gguf_metadata() {
        kv(&mut h, key, v);
    }
    let mut rng = SplitMix64(seed);
    let mut blobs = Vec::new();
    for (name, ne, init) in g.tensors() {
        let count: u64 = ne.iter().product();
        let fan_in = ne[0] as f32;
        let values: Vec<f32> = (0..count)
            .map(|_| {
                let z = rng.normal();
                match init {
                    Init::Matrix => 1.2 * z / fan_in.sqrt(),
                    Init::Embedding => z,
                    Init::Head => 2.5 * z / fan_in.sqrt(),
                    Init::Router => 1.4 * z / fan_in.sqrt(),
                    Init::Norm => 1.0 + 0.1 * z,
                    Init::Score => 0.3 * z,
                    Init::Conv => 0.5 * z,
                    Init::Small => 0.1 * z,
                    Init::NegExp => -(2.0 * rng.uniform() - 1.0).exp(),
                }
            })
            .collect();
        let vector = matches!(
            init,
            Init::Norm | Init::Score | Init::Small | Init::NegExp | Init::Conv | Init::Router
        );
        let t = if !vector && ty == GgmlType::Q8_0 && ne[0] % 32 == 0 {
            GgmlType::Q8_0
        } else {
            GgmlType::F32
        };
        let f = dspark_quant::format_of(t).expect("a kernel format");
        let mut bytes = vec![0u8; f.row_bytes(ne[0] as usize) * (count / ne[0]) as usize];
        (f.quantize_ref)(&values, &mut bytes);
        h.push_tensor(TensorInfo {
            name,
            dims: ne,
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

/// Writes a synthetic Kimi K3 pair into `dir`: `target.gguf` (Q8_0 where rows are whole
/// blocks), `tokenizer.json`, and `draft/` (a DSpark drafter checkpoint capturing MLA
/// layers), each file atomically. `progress` returning false cancels.
pub fn write_k3_pair(
    g: &K3Geometry,
    dir: &std::path::Path,
    seed: u64,
    progress: &dyn Fn(u64, u64) -> bool,
) -> crate::Result<()> {
    crate::target::write_pair_files(
        dir,
        &kimi_k3_gguf(g, seed, GgmlType::Q8_0),
        g.vocab,
        &g.drafter(),
        seed,
        progress,
    )
}

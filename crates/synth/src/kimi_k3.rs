//! Random-weight Kimi K3 targets in llama.cpp's `kimi-k3` GGUF layout
//! (`docs/KIMI-K3.md#the-kimi-k3-gguf-layout`), deterministic from a seed, with the
//! synthetic byte-level vocabulary llama.cpp loads, and DSpark drafters that fit them
//! capturing MLA layers (as the seed's drafter captures K3's).
//!
//! Matrices are Q8_0 where their rows are whole Q8_0 blocks and F32 otherwise (or F32
//! throughout); vectors, norms, the router and the conv kernels are F32, as llama.cpp's
//! converter writes them. Weights are scaled by fan-in so activations stay near 1.

use dspark_contract::kimi_k3::ARCH;
use dspark_contract::names::kimi_k3 as n;
use dspark_contract::names::{self, keys, tensors};
use dspark_gguf::{pad_to, Array, GgmlType, Header, TensorInfo, Value};

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
    /// How the routed experts are stored: `None` as the other matrices, `Some(MXFP4)` as
    /// random MXFP4 blocks (as K3 ships its experts; rows must be whole 32-blocks).
    pub expert_type: Option<GgmlType>,
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
            expert_type: None,
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
            expert_type: None,
        }
    }

    /// A target larger than this machine's memory, to time decoding from a file that
    /// cannot be cached (38.5 GB; the routed experts are 97 % of it): 23 layers of 2048,
    /// MLA every 4th and the last (3, 7, 11, 15, 19, 22), KDA 16 heads × 128, q LoRA 512,
    /// latent 512 + rope 64, one dense layer (ffn 4096), then 22 MoE layers of 1024
    /// experts (llama.cpp's maximum) top-8 in a 1024-wide latent with a shared expert,
    /// experts 1024 wide and stored as random MXFP4 blocks (1.67 MB each), residual blocks
    /// of 4, vocabulary 4096; the drafter captures 3, 11, 19.
    pub fn large() -> K3Geometry {
        K3Geometry {
            name: "kimi-k3-large",
            hidden: 2048,
            layers: 23,
            heads: 16,
            kda_head_dim: 128,
            conv_kernel: 4,
            mla_layers: vec![3, 7, 11, 15, 19, 22],
            q_lora_rank: 512,
            kv_lora_rank: 512,
            rope_dim: 64,
            nope_dim: 128,
            v_dim: 128,
            mla_gate: true,
            dense_layers: 1,
            ffn: 4096,
            experts: 1024,
            experts_used: 8,
            shared_experts: 1,
            expert_ffn: 1024,
            latent: 1024,
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
            vocab: 4096,
            context: 8192,
            captures: vec![3, 11, 19],
            block_size: 8,
            expert_type: Some(GgmlType::MXFP4),
        }
    }

    /// Looks a geometry up by its CLI name (`kimi-k3-tiny`, `kimi-k3-small`,
    /// `kimi-k3-large`).
    pub fn by_name(name: &str) -> Option<K3Geometry> {
        match name {
            "kimi-k3-tiny" => Some(K3Geometry::tiny()),
            "kimi-k3-small" => Some(K3Geometry::small()),
            "kimi-k3-large" => Some(K3Geometry::large()),
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
                t.push((blk(i, n::FFN_GATE_EXPS), vec![el, fe, ne], Init::Expert));
                t.push((blk(i, n::FFN_UP_EXPS), vec![el, fe, ne], Init::Expert));
                t.push((blk(i, n::FFN_DOWN_EXPS), vec![fe, el, ne], Init::Expert));
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
    /// Routed experts: as [`Init::Matrix`], or random MXFP4 blocks
    /// ([`K3Geometry::expert_type`]).
    Expert,
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

/// Values per chunk of a tensor generated at a time (whole rows, at least one): what a
/// writer holds besides its output buffer, whatever the file's size.
const CHUNK_VALUES: usize = 1 << 20;

/// The E8M0 exponents of random MXFP4 expert blocks for a fan-in of 1024: values
/// `2^(e − 128) · k` with `k` uniform over MXFP4's 16 codes (RMS 5.85) have an RMS of
/// 0.026 over these four exponents, near `1.2 / √1024` (a [`Init::Matrix`] draw), so
/// activations stay near 1. Other fan-ins shift the range by half their log2 ratio to 1024.
const MXFP4_EXPONENTS_1024: std::ops::RangeInclusive<u8> = 118..=121;

/// The storage type of a tensor drawn as `init` with `ne`, in a target whose matrices
/// are `ty` (see [`kimi_k3_gguf`]).
fn storage(g: &K3Geometry, init: Init, ne: &[u64], ty: GgmlType) -> GgmlType {
    if init == Init::Expert {
        if let Some(t) = g.expert_type {
            return t;
        }
    }
    let vector = matches!(
        init,
        Init::Norm | Init::Score | Init::Small | Init::NegExp | Init::Conv | Init::Router
    );
    if !vector && ty == GgmlType::Q8_0 && ne[0].is_multiple_of(32) {
        GgmlType::Q8_0
    } else {
        GgmlType::F32
    }
}

/// The header of a random Kimi K3 target, and how each tensor's values are drawn.
fn header(g: &K3Geometry, ty: GgmlType) -> (Header, Vec<Init>) {
    assert!(
        matches!(ty, GgmlType::Q8_0 | GgmlType::F32),
        "matrices are Q8_0 or F32"
    );
    assert!(
        matches!(g.expert_type, None | Some(GgmlType::MXFP4)),
        "experts are stored as the other matrices or as MXFP4"
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
    let mut inits = Vec::new();
    for (name, ne, init) in g.tensors() {
        let ty = storage(g, init, &ne, ty);
        h.push_tensor(TensorInfo { name, dims: ne, ty })
            .expect("valid tensor");
        inits.push(init);
    }
    (h, inits)
}

/// One value drawn as `init` for a row of `fan_in`.
fn draw(rng: &mut SplitMix64, init: Init, fan_in: f32) -> f32 {
    let z = rng.normal();
    match init {
        Init::Matrix | Init::Expert => 1.2 * z / fan_in.sqrt(),
        Init::Embedding => z,
        Init::Head => 2.5 * z / fan_in.sqrt(),
        Init::Router => 1.4 * z / fan_in.sqrt(),
        Init::Norm => 1.0 + 0.1 * z,
        Init::Score => 0.3 * z,
        Init::Conv => 0.5 * z,
        Init::Small => 0.1 * z,
        Init::NegExp => -(2.0 * rng.uniform() - 1.0).exp(),
    }
}

/// `out.len() / 17` random MXFP4 blocks for rows of `fan_in`: codes uniform, exponents
/// uniform over [`MXFP4_EXPONENTS_1024`] shifted for the fan-in.
fn random_mxfp4(rng: &mut SplitMix64, fan_in: u64, out: &mut [u8]) {
    let shift = ((fan_in.max(1) as f64).log2() / 2.0 - 5.0).round() as i32;
    let lo = i32::from(*MXFP4_EXPONENTS_1024.start()) - shift;
    let span = u64::from(MXFP4_EXPONENTS_1024.end() - MXFP4_EXPONENTS_1024.start()) + 1;
    for b in out.chunks_exact_mut(dspark_quant::mxfp4::BLOCK_BYTES) {
        let e = lo + (rng.next_u64() % span) as i32;
        b[0] = e.clamp(2, 254) as u8;
        b[1..9].copy_from_slice(&rng.next_u64().to_le_bytes());
        b[9..17].copy_from_slice(&rng.next_u64().to_le_bytes());
    }
}

/// Generates the file `h` describes, in order, a chunk of whole rows at a time: `sink`
/// gets every byte (the header, each tensor's data and padding) and may stop the stream
/// with an error. Memory stays at one chunk whatever the file's size.
fn stream(
    h: &Header,
    inits: &[Init],
    seed: u64,
    sink: &mut dyn FnMut(&[u8]) -> crate::Result<()>,
) -> crate::Result<()> {
    let layout = h.layout();
    sink(&h.to_bytes())?;
    let mut rng = SplitMix64(seed);
    let mut values = Vec::new();
    let mut bytes = Vec::new();
    for ((info, &init), &(_, nbytes)) in h.tensors().iter().zip(inits).zip(&layout.tensors) {
        let ne0 = info.dims[0];
        let rows = info.n_elements() / ne0;
        let f = dspark_quant::format_of(info.ty).expect("a kernel format");
        let row_bytes = f.row_bytes(ne0 as usize);
        let rows_per_chunk = (CHUNK_VALUES as u64 / ne0).max(1);
        let mut row = 0u64;
        while row < rows {
            let n = rows_per_chunk.min(rows - row) as usize;
            bytes.clear();
            bytes.resize(n * row_bytes, 0);
            if info.ty == GgmlType::MXFP4 {
                random_mxfp4(&mut rng, ne0, &mut bytes);
            } else {
                values.clear();
                values.extend((0..n * ne0 as usize).map(|_| draw(&mut rng, init, ne0 as f32)));
                (f.quantize_ref.expect("a format dspark writes"))(&values, &mut bytes);
            }
            sink(&bytes)?;
            row += n as u64;
        }
        let pad = pad_to(nbytes, layout.alignment).expect("laid out") - nbytes;
        sink(&vec![0u8; pad as usize])?;
    }
    Ok(())
}

/// The whole GGUF of a random Kimi K3 target, in memory; `ty` is the matrices' type
/// (Q8_0 where rows are whole blocks, else F32; or F32 throughout); routed experts are
/// random MXFP4 blocks when [`K3Geometry::expert_type`] says so. For files too large to
/// hold, [`write_kimi_k3_gguf`] writes the same bytes as a stream.
pub fn kimi_k3_gguf(g: &K3Geometry, seed: u64, ty: GgmlType) -> Vec<u8> {
    let (h, inits) = header(g, ty);
    let mut out = Vec::with_capacity(h.layout().file_size as usize);
    stream(&h, &inits, seed, &mut |b| {
        out.extend_from_slice(b);
        Ok(())
    })
    .expect("writing to memory");
    out
}

/// Bytes of the file [`kimi_k3_gguf`] and [`write_kimi_k3_gguf`] make.
pub fn kimi_k3_gguf_size(g: &K3Geometry, ty: GgmlType) -> u64 {
    header(g, ty).0.layout().file_size
}

/// Writes [`kimi_k3_gguf`]'s bytes to `path` as a stream (never holding the file), into
/// a temporary file renamed into place when complete; the space is reserved first, so
/// a full disk is reported before any work. `progress(done, total)` is called after
/// every chunk; returning false cancels, leaving nothing behind.
pub fn write_kimi_k3_gguf(
    g: &K3Geometry,
    seed: u64,
    ty: GgmlType,
    path: &std::path::Path,
    progress: &dyn Fn(u64, u64) -> bool,
) -> crate::Result<()> {
    use std::io::Write;
    let (h, inits) = header(g, ty);
    let total = h.layout().file_size;
    let file = dspark_output::AtomicFile::create(path)?;
    file.reserve(total)?;
    {
        let mut w = std::io::BufWriter::with_capacity(8 << 20, file.file());
        let mut done = 0u64;
        stream(&h, &inits, seed, &mut |b| {
            w.write_all(b).map_err(|e| crate::SynthError::io(path, e))?;
            done += b.len() as u64;
            if progress(done, total) {
                Ok(())
            } else {
                Err(crate::SynthError::Cancelled)
            }
        })?;
        w.flush().map_err(|e| crate::SynthError::io(path, e))?;
    }
    file.commit()?;
    Ok(())
}

/// Writes a synthetic Kimi K3 pair into `dir`: `target.gguf` (Q8_0 where rows are whole
/// blocks; streamed, see [`write_kimi_k3_gguf`]), `tokenizer.json`, and `draft/` (a
/// DSpark drafter checkpoint capturing MLA layers), each file atomically. `progress`
/// returning false cancels.
pub fn write_k3_pair(
    g: &K3Geometry,
    dir: &std::path::Path,
    seed: u64,
    progress: &dyn Fn(u64, u64) -> bool,
) -> crate::Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| crate::SynthError::io(dir, e))?;
    write_kimi_k3_gguf(g, seed, GgmlType::Q8_0, &dir.join("target.gguf"), progress)?;
    crate::write_atomic(
        &dir.join("tokenizer.json"),
        &SynthVocab::new(g.vocab).tokenizer_json(),
    )?;
    crate::drafter::write_synth(&g.drafter(), &dir.join("draft"), seed, progress)
}

#[cfg(test)]
mod tests {
    use super::*;
    use dspark_gguf::GgufFile;
    use sha2::{Digest, Sha256};

    fn sha(b: &[u8]) -> String {
        Sha256::digest(b)
            .iter()
            .map(|x| format!("{x:02x}"))
            .collect()
    }

    /// The generator's stream never changes: these are the bytes `dspark synth` wrote
    /// before targets were streamed (seed 3).
    #[test]
    fn tiny_bytes_are_pinned() {
        assert_eq!(
            sha(&kimi_k3_gguf(&K3Geometry::tiny(), 3, GgmlType::Q8_0)),
            "68f7fa7ab7ea127aacc07867d07d90a75f1ba057b4b019b844911a4084d1db2a"
        );
    }

    fn tiny_mxfp4() -> K3Geometry {
        K3Geometry {
            expert_type: Some(GgmlType::MXFP4),
            ..K3Geometry::tiny()
        }
    }

    #[test]
    fn streamed_file_equals_the_in_memory_bytes() {
        let g = tiny_mxfp4();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.gguf");
        let calls = std::cell::Cell::new(0u64);
        write_kimi_k3_gguf(&g, 9, GgmlType::Q8_0, &path, &|done, total| {
            assert!(done <= total);
            calls.set(calls.get() + 1);
            true
        })
        .unwrap();
        let mem = kimi_k3_gguf(&g, 9, GgmlType::Q8_0);
        assert_eq!(std::fs::read(&path).unwrap(), mem);
        assert_eq!(kimi_k3_gguf_size(&g, GgmlType::Q8_0), mem.len() as u64);
        assert!(calls.get() > 1);
    }

    #[test]
    fn a_cancelled_write_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.gguf");
        let r = write_kimi_k3_gguf(&tiny_mxfp4(), 1, GgmlType::Q8_0, &path, &|_, _| false);
        assert!(matches!(r, Err(crate::SynthError::Cancelled)), "{r:?}");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    /// MXFP4 experts: the contract accepts them, every exponent lies in the range for
    /// the rows' fan-in, and the rest of the file is what the geometry says.
    #[test]
    fn mxfp4_experts_are_valid_blocks_in_range() {
        let g = tiny_mxfp4();
        let bytes = kimi_k3_gguf(&g, 4, GgmlType::Q8_0);
        let file = GgufFile::parse(&bytes).unwrap();
        dspark_contract::kimi_k3::check(&file, &dspark_quant::matrix_types()).unwrap();
        let mut experts = 0;
        for t in file.tensors() {
            let name = &t.info.name;
            if name.contains("_exps.") {
                experts += 1;
                assert_eq!(t.info.ty, GgmlType::MXFP4, "{name}");
                // Rows of 32: log2(32 / 1024) / 2 = -2.5, rounded to -3 halvings, so the
                // exponents move up by 3.
                let exps: Vec<u8> = t.data.chunks_exact(17).map(|b| b[0]).collect();
                assert!(exps.iter().all(|e| (121..=124).contains(e)), "{name}");
                assert!((121..=124).all(|e| exps.contains(&e)), "{name}");
            } else if name == "blk.1.ffn_gate_shexp.weight" {
                assert_eq!(t.info.ty, GgmlType::Q8_0);
            }
        }
        assert_eq!(experts, 3 * (g.layers - g.dense_layers));
    }

    /// The large geometry is larger than a 24 GiB machine's memory, its experts MXFP4,
    /// and valid for the contract (checked on its header alone: no data is generated).
    #[test]
    fn large_is_larger_than_memory() {
        let g = K3Geometry::large();
        let size = kimi_k3_gguf_size(&g, GgmlType::Q8_0);
        assert!(size > 36_000_000_000 && size < 40_000_000_000, "{size}");
        let (h, _) = header(&g, GgmlType::Q8_0);
        let experts: u64 = h
            .tensors()
            .iter()
            .filter(|t| t.name.contains("_exps."))
            .inspect(|t| assert_eq!(t.ty, GgmlType::MXFP4))
            .map(TensorInfo::n_bytes)
            .sum();
        assert!(experts * 100 / size >= 97, "{experts} of {size}");
    }
}

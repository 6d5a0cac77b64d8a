//! A llama target (Llama 2 / 3.x, SmolLM, Mistral-style), loaded from a GGUF in llama.cpp's
//! `llama` layout as the contract crate checked it ([`LlamaFile`]), run as llama.cpp's
//! `llama` graph runs it (`docs/LLAMA-CPP.md` §5): per token, RMSNorm → q/k/v (+ biases) →
//! RoPE with adjacent pairs, computed as ggml computes it (linear or YaRN scaling, Llama 3's
//! frequency factors) → causal GQA attention over the KV cache (f32, or as llama.cpp's
//! default flash attention with its F16 cache: [`Attention::F16`]) → output projection
//! (+ bias) → residual → RMSNorm → SwiGLU FFN (+ biases) → residual; the final norm and the
//! LM head (the embedding when `output.weight` is absent). The forward is the shared
//! decoder's ([`crate::nn::decoder`]); hidden-state taps are as for Qwen3 (the residual
//! stream after a layer), so DFlash / DSpark drafters run on it.

use std::sync::Arc;

use dspark_contract::llama::{LlamaHparams, RopeScalingKind};
use dspark_contract::{LlamaFile, SpecialTokens, TargetShape};

use crate::error::Result;
use crate::nn::attention::Attention;
use crate::nn::decoder::{Decoder, DecoderSession, HasDecoder};
use crate::nn::layer::{DecoderLayer, Dims};
use crate::nn::rope::{GgmlRope, GgmlRopeSettings, Pairing, Rotary};
use crate::target::{Target, TargetModel};
use crate::weights::{vector, ModelBytes, WeightRef};
use crate::RuntimeError;

/// A llama model's weights.
pub struct Llama {
    hparams: LlamaHparams,
    decoder: Decoder,
}

/// One sequence on a [`Llama`]: its KV cache and positions.
pub type LlamaSession = DecoderSession<Llama>;

impl HasDecoder for Llama {
    fn decoder(&self) -> &Decoder {
        &self.decoder
    }
}

impl Llama {
    /// Loads the weights `file` describes; `file` must be the contract's proof for a GGUF
    /// parsed from `bytes`.
    pub fn load(bytes: ModelBytes, file: &LlamaFile<'_>) -> Result<Llama> {
        let b: &[u8] = (*bytes).as_ref();
        let h = file.hparams().clone();
        let layout = crate::weights::Layout::for_file(b.len() as u64);
        let token_embd = WeightRef::locate(b, file.token_embd(), layout)?;
        let output = match file.output() {
            Some(t) => WeightRef::locate(b, t, layout)?,
            None => token_embd.clone(),
        };
        let (qd, kvd) = (h.heads * h.head_dim, h.kv_heads * h.head_dim);
        let layers = file
            .layers()
            .iter()
            .map(|l| DecoderLayer::from_llama(b, l, qd, kvd, layout))
            .collect::<Result<Vec<_>>>()?;
        let freq_factors = match file.rope_freqs() {
            Some(t) => {
                let f = vector(t)?;
                if let Some(i) = f.iter().position(|&v| v == 0.0) {
                    return Err(RuntimeError::tensor(
                        t.name,
                        format!("value {i} is 0: a RoPE angle cannot be divided by it"),
                    ));
                }
                Some(f)
            }
            None => None,
        };
        let s = &h.rope_scaling;
        let rope = GgmlRope::new(GgmlRopeSettings {
            dims: h.head_dim,
            pairing: Pairing::Adjacent,
            base: h.rope_base,
            freq_scale: match s.kind {
                RopeScalingKind::None => 1.0,
                RopeScalingKind::Linear | RopeScalingKind::Yarn => 1.0 / s.factor,
            },
            yarn: s.kind == RopeScalingKind::Yarn,
            attn_factor: s.attn_factor,
            original_context: s.original_context,
            freq_factors,
        });
        let decoder = Decoder {
            dims: Dims {
                hidden: h.hidden,
                heads: h.heads,
                kv_heads: h.kv_heads,
                head_dim: h.head_dim,
                ffn: h.ffn,
            },
            layers,
            token_embd,
            output_norm: vector(file.output_norm())?,
            output,
            rotary: Rotary::Ggml(rope),
            eps: h.eps,
            kq_scale: 1.0 / (h.head_dim as f32).sqrt(),
            vocab: h.vocab,
            context: h.context,
            special: dspark_contract::TargetContract::special_tokens(file),
            bytes,
        };
        Ok(Llama {
            hparams: h,
            decoder,
        })
    }

    /// Parses `bytes`, checks them against the `llama` contract with this build's kernels,
    /// and loads them.
    pub fn open(bytes: ModelBytes) -> Result<Llama> {
        let file = dspark_gguf::GgufFile::parse((*bytes).as_ref())?;
        let checked = dspark_contract::llama::check(&file, &dspark_quant::matrix_types())?;
        Llama::load(bytes.clone(), &checked)
    }

    /// Hyper-parameters.
    pub fn hparams(&self) -> &LlamaHparams {
        &self.hparams
    }

    /// A session for up to `capacity` positions whose attention is computed as
    /// `attention` says.
    pub fn session(
        self: &Arc<Self>,
        capacity: usize,
        attention: Attention,
    ) -> Result<LlamaSession> {
        DecoderSession::new(self, capacity, attention)
    }
}

impl TargetModel for Llama {
    fn arch(&self) -> &'static str {
        dspark_contract::llama::ARCH
    }
    fn shape(&self) -> TargetShape {
        self.decoder.shape()
    }
    fn context(&self) -> usize {
        self.hparams.context
    }
    fn special_tokens(&self) -> SpecialTokens {
        self.decoder.special
    }
    fn weight_bytes(&self) -> u64 {
        self.decoder.weight_bytes()
    }
    fn pack_lm_head(&self) -> Result<()> {
        self.decoder.pack_lm_head()
    }
    fn session(
        self: Arc<Self>,
        options: &crate::target::SessionOptions,
    ) -> Result<Box<dyn Target + Send>> {
        Ok(Box::new(DecoderSession::new(
            &self,
            options.positions,
            options.attention,
        )?))
    }
    fn forward_batch(
        &self,
        batch: &mut [(&mut dyn Target, &[u32])],
        capture: &[usize],
        logits: crate::target::Logits,
    ) -> Vec<Result<crate::target::Forward>> {
        crate::nn::decoder::forward_batch::<Llama>(batch, capture, logits)
    }
}

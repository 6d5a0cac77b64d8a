//! Qwen3 as a speculative-decoding target, loaded from a GGUF in llama.cpp's `qwen3`
//! layout (`token_embd`, `blk.N.attn_q/k/v/output`, `attn_q_norm/k_norm`,
//! `ffn_gate/up/down`, `output_norm`, `output` or tied embeddings; keys `qwen3.*`), as the
//! contract crate checked it ([`Qwen3File`]).
//!
//! The forward pass follows `docs/RUNTIME-MATH.md` §1.4 (same decoder layer as the
//! drafter, causal here): per token, RMSNorm → q/k/v → per-head q/k RMSNorm → RoPE (NeoX, ggml's f32 angles)
//! → causal GQA attention over the KV cache → output projection → residual → RMSNorm →
//! SwiGLU FFN → residual. Every per-token quantity depends on that token's column only
//! (gemm computes each column alone; norms, RoPE and attention are per row), so a forward
//! over n positions gives the same bits as n single-position forwards.
//!
//! [`Qwen3`] holds the weights (shared through an `Arc`); [`Qwen3Session`] one sequence's
//! KV cache and positions, so one loaded model serves any number of sessions. The forward
//! is the shared decoder's ([`crate::nn::decoder`]) with Qwen3's per-head q/k norms and
//! the NeoX rotation computed as ggml computes it; attention is what the session asks
//! (F16, llama.cpp's default flash attention, or f32).

use std::sync::Arc;

use dspark_contract::qwen3::Qwen3Hparams;
use dspark_contract::{Qwen3File, SpecialTokens, TargetShape};

use crate::error::Result;
use crate::nn::attention::Attention;
use crate::nn::decoder::{Decoder, DecoderSession, HasDecoder};
use crate::nn::layer::{DecoderLayer, Dims};
use crate::nn::rope::{GgmlRope, GgmlRopeSettings, Pairing, Rotary};
use crate::target::{Logits, Target};
use crate::weights::{vector, ModelBytes, WeightRef};

/// A Qwen3 model's weights.
pub struct Qwen3 {
    hparams: Qwen3Hparams,
    decoder: Decoder,
}

/// One sequence on a [`Qwen3`]: its KV cache and positions.
pub type Qwen3Session = DecoderSession<Qwen3>;

impl HasDecoder for Qwen3 {
    fn decoder(&self) -> &Decoder {
        &self.decoder
    }
}

impl Qwen3 {
    /// Loads the weights `file` describes; `file` must be the contract's proof for a GGUF
    /// parsed from `bytes`.
    pub fn load(bytes: ModelBytes, file: &Qwen3File<'_>) -> Result<Qwen3> {
        let b: &[u8] = (*bytes).as_ref();
        let h = file.hparams().clone();
        let layout = crate::weights::Layout::for_file(b.len() as u64);
        let token_embd = WeightRef::locate(b, file.token_embd(), layout)?;
        let output = match file.output() {
            Some(t) => WeightRef::locate(b, t, layout)?,
            None => token_embd.clone(),
        };
        let layers = file
            .layers()
            .iter()
            .map(|l| DecoderLayer::load(b, l, layout))
            .collect::<Result<Vec<_>>>()?;
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
            rotary: Rotary::Ggml(GgmlRope::new(GgmlRopeSettings {
                dims: h.head_dim,
                pairing: Pairing::Halves,
                base: h.rope_base,
                freq_scale: 1.0,
                yarn: false,
                attn_factor: 1.0,
                original_context: u32::try_from(h.context).unwrap_or(u32::MAX),
                freq_factors: None,
            })),
            eps: h.eps,
            kq_scale: 1.0 / (h.head_dim as f32).sqrt(),
            vocab: h.vocab,
            context: h.context,
            special: file.special_tokens(),
            bytes,
        };
        Ok(Qwen3 {
            hparams: h,
            decoder,
        })
    }

    /// Parses `bytes`, checks them against the `qwen3` contract with this build's kernels,
    /// and loads them.
    pub fn open(bytes: ModelBytes) -> Result<Qwen3> {
        let file = dspark_gguf::GgufFile::parse((*bytes).as_ref())?;
        let checked = dspark_contract::qwen3::check(&file, &dspark_quant::matrix_types())?;
        Qwen3::load(bytes.clone(), &checked)
    }

    /// Hyper-parameters.
    pub fn hparams(&self) -> &Qwen3Hparams {
        &self.hparams
    }

    /// The special tokens the file declares.
    pub fn special_tokens(&self) -> SpecialTokens {
        self.decoder.special
    }

    /// Hidden size, layers and vocabulary.
    pub fn shape(&self) -> TargetShape {
        self.decoder.shape()
    }

    /// Bytes of weights one forward reads (every layer, the final norm, the LM head).
    pub fn weight_bytes(&self) -> u64 {
        self.decoder.weight_bytes()
    }

    /// Bytes of a session's KV cache for `capacity` positions.
    pub fn session_bytes(&self, capacity: usize) -> Option<u64> {
        self.decoder.session_bytes(capacity)
    }

    /// Bytes one forward of `rows` positions holds at its peak besides the weights and
    /// the KV cache: activations, captured features for `captures` layers, logits for
    /// the rows `which` asks for, attention scores over a session of `capacity`.
    pub fn step_bytes(&self, rows: usize, which: Logits, captures: usize, capacity: usize) -> u64 {
        self.decoder.step_bytes(rows, which, captures, capacity)
    }

    /// A session for up to `capacity` positions (at most the context length): an empty KV
    /// cache of that size, refused with its byte count when the machine cannot hold it.
    pub fn session(self: &Arc<Self>, capacity: usize) -> Result<Qwen3Session> {
        DecoderSession::new(self, capacity, Attention::F32)
    }

    /// Token embeddings, `tokens.len() × hidden`.
    pub fn embed(&self, tokens: &[u32], out: &mut [f32]) -> Result<()> {
        self.decoder.embed(tokens, out)
    }

    /// The LM head on already-normed hidden states.
    pub fn lm_head(&self, hidden: &[f32], logits: &mut [f32]) {
        self.decoder.lm_head(hidden, logits)
    }
}

impl crate::target::TargetModel for Qwen3 {
    fn arch(&self) -> &'static str {
        dspark_contract::qwen3::ARCH
    }
    fn shape(&self) -> TargetShape {
        Qwen3::shape(self)
    }
    fn context(&self) -> usize {
        self.hparams.context
    }
    fn special_tokens(&self) -> SpecialTokens {
        self.decoder.special
    }
    fn weight_bytes(&self) -> u64 {
        Qwen3::weight_bytes(self)
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
        crate::nn::decoder::forward_batch::<Qwen3>(batch, capture, logits)
    }
}

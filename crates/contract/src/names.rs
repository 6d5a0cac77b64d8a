//! The one place GGUF key and tensor names are spelled. Every other crate (the converter
//! that writes them, the checks and the loaders that read them) takes them from here.

/// `general.architecture`.
pub const ARCHITECTURE: &str = "general.architecture";

/// Key suffixes after `<arch>.`, shared by llama.cpp's model architectures and the
/// `dflash-draft` drafters (`docs/GGUF.md` §5.2; llama.cpp `llama-arch.cpp`).
pub mod keys {
    /// Positions the model was trained for.
    pub const CONTEXT_LENGTH: &str = "context_length";
    /// Hidden size.
    pub const EMBEDDING_LENGTH: &str = "embedding_length";
    /// Decoder layers.
    pub const BLOCK_COUNT: &str = "block_count";
    /// FFN inner size.
    pub const FEED_FORWARD_LENGTH: &str = "feed_forward_length";
    /// Query heads.
    pub const HEAD_COUNT: &str = "attention.head_count";
    /// Key/value heads.
    pub const HEAD_COUNT_KV: &str = "attention.head_count_kv";
    /// Key head size.
    pub const KEY_LENGTH: &str = "attention.key_length";
    /// Value head size.
    pub const VALUE_LENGTH: &str = "attention.value_length";
    /// RMSNorm epsilon.
    pub const RMS_EPS: &str = "attention.layer_norm_rms_epsilon";
    /// RoPE base.
    pub const ROPE_FREQ_BASE: &str = "rope.freq_base";
    /// Dimensions RoPE rotates (llama.cpp: partial rotary when below the head size).
    pub const ROPE_DIMENSION_COUNT: &str = "rope.dimension_count";
    /// Linear RoPE scale (llama.cpp's older spelling).
    pub const ROPE_SCALE_LINEAR: &str = "rope.scale_linear";
    /// Whether attention is causal (llama.cpp; false makes a model bidirectional).
    pub const CAUSAL: &str = "attention.causal";
    /// RoPE scaling kind (`none`, `yarn`, …).
    pub const ROPE_SCALING_TYPE: &str = "rope.scaling.type";
    /// RoPE scaling factor.
    pub const ROPE_SCALING_FACTOR: &str = "rope.scaling.factor";
    /// Context the scaled RoPE was trained from.
    pub const ROPE_SCALING_ORIGINAL_CONTEXT: &str = "rope.scaling.original_context_length";
    /// YaRN β_fast.
    pub const ROPE_SCALING_YARN_BETA_FAST: &str = "rope.scaling.yarn_beta_fast";
    /// YaRN β_slow.
    pub const ROPE_SCALING_YARN_BETA_SLOW: &str = "rope.scaling.yarn_beta_slow";
    /// YaRN attention factor.
    pub const ROPE_SCALING_ATTN_FACTOR: &str = "rope.scaling.attn_factor";
    /// Vocabulary size (drafters: the target's).
    pub const VOCAB_SIZE: &str = "vocab_size";

    /// Tokens per draft block.
    pub const DFLASH_BLOCK_SIZE: &str = "dflash.block_size";
    /// Captured target layers (the count).
    pub const DFLASH_N_TARGET_LAYERS: &str = "dflash.n_target_layers";
    /// `fc` input width (captured layers × hidden).
    pub const DFLASH_N_TARGET_FEATURES: &str = "dflash.n_target_features";
    /// Captured target layers, 0-based, in `fc` input order.
    pub const DFLASH_TARGET_LAYER_IDS: &str = "dflash.target_layer_ids";
    /// The target's depth.
    pub const DFLASH_TARGET_BLOCK_COUNT: &str = "dflash.target_block_count";
    /// The target's hidden size.
    pub const DFLASH_TARGET_HIDDEN_SIZE: &str = "dflash.target_hidden_size";
    /// The token filling the block after the anchor.
    pub const DFLASH_MASK_TOKEN_ID: &str = "dflash.mask_token_id";
    /// Drafts come from rows 0..B−1 (true) or 1..B−1 (false).
    pub const DFLASH_SAMPLE_FROM_ANCHOR: &str = "dflash.sample_from_anchor";
    /// Non-zero when the Markov head is present.
    pub const DSPARK_ENABLED: &str = "dflash.dspark.enabled";
    /// Markov rank R.
    pub const DSPARK_MARKOV_RANK: &str = "dflash.dspark.markov_rank";
    /// Markov vocabulary V.
    pub const DSPARK_VOCAB_SIZE: &str = "dflash.dspark.vocab_size";
    /// Confidence input width C.
    pub const DSPARK_CONFIDENCE_DIM: &str = "dflash.dspark.confidence_dim";
    /// Markov head kind (only `vanilla` runs).
    pub const DSPARK_MARKOV_HEAD_TYPE: &str = "dflash.dspark.markov_head_type";
    /// The confidence input includes the Markov embedding.
    pub const DSPARK_CONFIDENCE_WITH_MARKOV: &str = "dflash.dspark.confidence_with_markov";
}

/// llama.cpp's `dflash` drafters (`docs/LLAMA-CPP.md` §2): key
/// suffixes after `dflash.` and tensor names, where they differ from `dflash-draft`'s.
pub mod llama_dflash {
    /// `general.architecture` of llama.cpp's DFlash / DSpark drafters.
    pub const ARCH: &str = "dflash";
    /// Tokens per block B (llama.cpp's DSpark graph requires it).
    pub const BLOCK_SIZE: &str = "block_size";
    /// Captured target layers as llama.cpp counts them: value v is the input of target
    /// layer v, i.e. the output of layer v − 1 (dspark's 0-based id + 1).
    pub const TARGET_LAYERS: &str = "target_layers";
    /// Drafts come from rows 0..B−1 (true, the default) or 1..B−1 (false).
    pub const SAMPLE_FROM_ANCHOR: &str = "sample_from_anchor";
    /// Whether the file has a confidence head (informational; tensors decide).
    pub const HAS_CONFIDENCE_HEAD: &str = "has_confidence_head";

    /// Feature fusion (`[captured × hidden, hidden]`).
    pub const FC: &str = "fc.weight";
    /// RMSNorm after the fusion (`[hidden]`).
    pub const HIDDEN_NORM: &str = "enc.output_norm.weight";
    /// Markov embedding of the previous token (`[R, V]`).
    pub const MARKOV_W1: &str = "markov_w1.weight";
    /// Markov map to logits (`[R, V]`).
    pub const MARKOV_W2: &str = "markov_w2.weight";
    /// Confidence head weight (`[hidden + R, 1]`, a one-row matrix).
    pub const CONF_PROJ: &str = "conf_proj.weight";
    /// Confidence head bias (`[1]`).
    pub const CONF_PROJ_BIAS: &str = "conf_proj.bias";
    /// Draft-to-target vocabulary map of reduced-vocabulary drafters (I64).
    pub const D2T: &str = "d2t";
}

/// llama.cpp's `kimi-k3` target (`docs/KIMI-K3.md#the-kimi-k3-gguf-layout`): key suffixes
/// after `kimi-k3.` beyond [`keys`], and tensor names (per layer: the suffix after
/// `blk.{i}.`).
pub mod kimi_k3 {
    /// KDA head size D.
    pub const KDA_HEAD_DIM: &str = "kda.head_dim";
    /// KDA decay-gate lower bound (its presence selects K3's gate formula).
    pub const KDA_GATE_LOWER_BOUND: &str = "kda.gate_lower_bound";
    /// Taps of KDA's short convolutions.
    pub const SSM_CONV_KERNEL: &str = "ssm.conv_kernel";
    /// MLA query LoRA rank (0 or absent: a plain query projection).
    pub const Q_LORA_RANK: &str = "attention.q_lora_rank";
    /// MLA latent width.
    pub const KV_LORA_RANK: &str = "attention.kv_lora_rank";
    /// MLA query/key head size before absorption (nope + rope).
    pub const KEY_LENGTH_MLA: &str = "attention.key_length_mla";
    /// MLA value head size.
    pub const VALUE_LENGTH_MLA: &str = "attention.value_length_mla";
    /// Layers below it have a dense FFN.
    pub const LEADING_DENSE_BLOCK_COUNT: &str = "leading_dense_block_count";
    /// Routed experts.
    pub const EXPERT_COUNT: &str = "expert_count";
    /// Experts per token.
    pub const EXPERT_USED_COUNT: &str = "expert_used_count";
    /// Expert groups (group-limited routing when above 1).
    pub const EXPERT_GROUP_COUNT: &str = "expert_group_count";
    /// Groups a token's experts come from.
    pub const EXPERT_GROUP_USED_COUNT: &str = "expert_group_used_count";
    /// A routed expert's width.
    pub const EXPERT_FEED_FORWARD_LENGTH: &str = "expert_feed_forward_length";
    /// Shared experts (their FFN is this many routed widths wide).
    pub const EXPERT_SHARED_COUNT: &str = "expert_shared_count";
    /// Scale of the routed weights (0 or 1: none).
    pub const EXPERT_WEIGHTS_SCALE: &str = "expert_weights_scale";
    /// Renormalise the selected experts' weights.
    pub const EXPERT_WEIGHTS_NORM: &str = "expert_weights_norm";
    /// Router activation (1 softmax, 2 sigmoid, 3 softmax over the selected, 4 sqrt-softplus).
    pub const EXPERT_GATING_FUNC: &str = "expert_gating_func";
    /// Latent width of the routed experts (0: the hidden size).
    pub const EXPERT_LATENT_LENGTH: &str = "expert_latent_length";
    /// Cross-layer residual block size (0: off).
    pub const ATTN_RES_BLOCK_SIZE: &str = "attn_res.block_size";
    /// SiTU β.
    pub const SITU_BETA: &str = "activation.situ_beta";
    /// SiTU β of the up branch.
    pub const SITU_LINEAR_BETA: &str = "activation.situ_linear_beta";

    /// The output mix's score vector.
    pub const OUTPUT_RES_SCORE: &str = "output_res_score.weight";
    /// Attention input norm.
    pub const ATTN_NORM: &str = "attn_norm.weight";
    /// FFN input norm.
    pub const FFN_NORM: &str = "ffn_norm.weight";
    /// Attention-input residual mix scores.
    pub const ATTN_RES_SCORE: &str = "attn_res_score.weight";
    /// FFN-input residual mix scores.
    pub const FFN_RES_SCORE: &str = "ffn_res_score.weight";
    /// KDA query projection; an MLA layer's plain query projection.
    pub const ATTN_Q: &str = "attn_q.weight";
    /// KDA key projection.
    pub const ATTN_K: &str = "attn_k.weight";
    /// KDA value projection.
    pub const ATTN_V: &str = "attn_v.weight";
    /// Output projection (KDA and MLA).
    pub const ATTN_OUTPUT: &str = "attn_output.weight";
    /// KDA query conv kernel.
    pub const SSM_CONV1D_Q: &str = "ssm_conv1d_q.weight";
    /// KDA key conv kernel.
    pub const SSM_CONV1D_K: &str = "ssm_conv1d_k.weight";
    /// KDA value conv kernel.
    pub const SSM_CONV1D_V: &str = "ssm_conv1d_v.weight";
    /// KDA decay gate, first (rank-D) projection.
    pub const SSM_F_A: &str = "ssm_f_a.weight";
    /// KDA decay gate, second projection.
    pub const SSM_F_B: &str = "ssm_f_b.weight";
    /// KDA β projection.
    pub const SSM_BETA: &str = "ssm_beta.weight";
    /// KDA −exp(A_log) per head.
    pub const SSM_A: &str = "ssm_a";
    /// KDA decay-gate bias.
    pub const SSM_DT_BIAS: &str = "ssm_dt.bias";
    /// KDA full-rank output gate.
    pub const SSM_G: &str = "ssm_g.weight";
    /// KDA per-head output RMSNorm.
    pub const SSM_NORM: &str = "ssm_norm.weight";
    /// MLA LoRA query: down projection.
    pub const ATTN_Q_A: &str = "attn_q_a.weight";
    /// MLA LoRA query: its RMSNorm (its presence selects the LoRA query).
    pub const ATTN_Q_A_NORM: &str = "attn_q_a_norm.weight";
    /// MLA LoRA query: up projection.
    pub const ATTN_Q_B: &str = "attn_q_b.weight";
    /// MLA latent + rope-part projection.
    pub const ATTN_KV_A_MQA: &str = "attn_kv_a_mqa.weight";
    /// MLA latent RMSNorm.
    pub const ATTN_KV_A_NORM: &str = "attn_kv_a_norm.weight";
    /// MLA absorbed key up-projection.
    pub const ATTN_K_B: &str = "attn_k_b.weight";
    /// MLA absorbed value up-projection.
    pub const ATTN_V_B: &str = "attn_v_b.weight";
    /// MLA sigmoid output gate.
    pub const ATTN_GATE: &str = "attn_gate.weight";
    /// Dense FFN gate.
    pub const FFN_GATE: &str = "ffn_gate.weight";
    /// Dense FFN up.
    pub const FFN_UP: &str = "ffn_up.weight";
    /// Dense FFN down.
    pub const FFN_DOWN: &str = "ffn_down.weight";
    /// MoE router.
    pub const FFN_GATE_INP: &str = "ffn_gate_inp.weight";
    /// MoE selection bias.
    pub const FFN_EXP_PROBS_B: &str = "exp_probs_b.bias";
    /// Routed experts' gate projections.
    pub const FFN_GATE_EXPS: &str = "ffn_gate_exps.weight";
    /// Routed experts' up projections.
    pub const FFN_UP_EXPS: &str = "ffn_up_exps.weight";
    /// Routed experts' down projections.
    pub const FFN_DOWN_EXPS: &str = "ffn_down_exps.weight";
    /// Hidden → latent projection of the routed experts' input.
    pub const FFN_ROUTED_DOWN: &str = "ffn_routed_down.weight";
    /// Latent → hidden projection of their output.
    pub const FFN_ROUTED_UP: &str = "ffn_routed_up.weight";
    /// RMSNorm of the routed output in the latent.
    pub const FFN_ROUTED_NORM: &str = "ffn_routed_norm.weight";
    /// Shared experts' gate.
    pub const FFN_GATE_SHEXP: &str = "ffn_gate_shexp.weight";
    /// Shared experts' up.
    pub const FFN_UP_SHEXP: &str = "ffn_up_shexp.weight";
    /// Shared experts' down.
    pub const FFN_DOWN_SHEXP: &str = "ffn_down_shexp.weight";

    /// Tensors llama.cpp's loader accepts but its kimi-k3 graph cannot run, with why.
    pub const UNRUN: [(&str, &str); 5] = [
        (
            "attn_kv_b.weight",
            "the non-absorbed MLA form: llama.cpp's kimi-k3 graph runs only attn_k_b / attn_v_b",
        ),
        (
            "attn_qkv.weight",
            "a fused KDA projection: llama.cpp's kimi-k3 graph reads attn_q / attn_k / attn_v",
        ),
        (
            "attn_q.bias",
            "llama.cpp loads KDA projection biases but never applies them",
        ),
        (
            "attn_k.bias",
            "llama.cpp loads KDA projection biases but never applies them",
        ),
        (
            "attn_v.bias",
            "llama.cpp loads KDA projection biases but never applies them",
        ),
    ];
}

/// `<arch>.<suffix>`.
pub fn key(arch: &str, suffix: &str) -> String {
    format!("{arch}.{suffix}")
}

/// `general.*` keys the converter writes.
pub mod general {
    /// `general.type`.
    pub const TYPE: &str = "general.type";
    /// `general.name`.
    pub const NAME: &str = "general.name";
    /// `general.size_label`.
    pub const SIZE_LABEL: &str = "general.size_label";
    /// `general.file_type`.
    pub const FILE_TYPE: &str = "general.file_type";
    /// `general.quantization_version`.
    pub const QUANTIZATION_VERSION: &str = "general.quantization_version";
    /// `general.source.repo_url`.
    pub const SOURCE_REPO_URL: &str = "general.source.repo_url";
    /// `general.base_model.count`.
    pub const BASE_MODEL_COUNT: &str = "general.base_model.count";
    /// `general.base_model.0.name`.
    pub const BASE_MODEL_0_NAME: &str = "general.base_model.0.name";
    /// `general.base_model.0.organization`.
    pub const BASE_MODEL_0_ORGANIZATION: &str = "general.base_model.0.organization";
    /// `general.base_model.0.repo_url`.
    pub const BASE_MODEL_0_REPO_URL: &str = "general.base_model.0.repo_url";
    /// `general.tags`.
    pub const TAGS: &str = "general.tags";
}

/// llama.cpp's tokenizer keys (`llama-arch.cpp`, `LLM_KV_TOKENIZER_*`).
pub mod tokenizer {
    /// Tokenizer model (`gpt2` = byte-level BPE, `llama` = SentencePiece, …).
    pub const MODEL: &str = "tokenizer.ggml.model";
    /// Pre-tokenizer (`qwen2`, `gpt-2`, `llama-bpe`, …).
    pub const PRE: &str = "tokenizer.ggml.pre";
    /// Token strings by id.
    pub const TOKENS: &str = "tokenizer.ggml.tokens";
    /// Token types by id (1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte).
    pub const TOKEN_TYPE: &str = "tokenizer.ggml.token_type";
    /// Token scores by id (SentencePiece).
    pub const SCORES: &str = "tokenizer.ggml.scores";
    /// BPE merges, highest priority first.
    pub const MERGES: &str = "tokenizer.ggml.merges";
    /// Beginning of sequence.
    pub const BOS_ID: &str = "tokenizer.ggml.bos_token_id";
    /// End of sequence.
    pub const EOS_ID: &str = "tokenizer.ggml.eos_token_id";
    /// End of turn.
    pub const EOT_ID: &str = "tokenizer.ggml.eot_token_id";
    /// Unknown token.
    pub const UNK_ID: &str = "tokenizer.ggml.unknown_token_id";
    /// Separator.
    pub const SEP_ID: &str = "tokenizer.ggml.seperator_token_id";
    /// Padding.
    pub const PAD_ID: &str = "tokenizer.ggml.padding_token_id";
    /// Classifier.
    pub const CLS_ID: &str = "tokenizer.ggml.cls_token_id";
    /// Mask (llama.cpp's DFlash drafters take theirs from the target).
    pub const MASK_ID: &str = "tokenizer.ggml.mask_token_id";
    /// Add BOS when encoding.
    pub const ADD_BOS: &str = "tokenizer.ggml.add_bos_token";
    /// Add EOS when encoding.
    pub const ADD_EOS: &str = "tokenizer.ggml.add_eos_token";
    /// Prefix a space to text that follows a special token or starts the input
    /// (SentencePiece).
    pub const ADD_SPACE_PREFIX: &str = "tokenizer.ggml.add_space_prefix";
    /// End of message.
    pub const EOM_ID: &str = "tokenizer.ggml.eom_token_id";
    /// Fill-in-the-middle: prefix.
    pub const FIM_PRE_ID: &str = "tokenizer.ggml.fim_pre_token_id";
    /// Fill-in-the-middle: suffix.
    pub const FIM_SUF_ID: &str = "tokenizer.ggml.fim_suf_token_id";
    /// Fill-in-the-middle: middle.
    pub const FIM_MID_ID: &str = "tokenizer.ggml.fim_mid_token_id";
    /// Fill-in-the-middle: padding.
    pub const FIM_PAD_ID: &str = "tokenizer.ggml.fim_pad_token_id";
    /// Fill-in-the-middle: repository name.
    pub const FIM_REP_ID: &str = "tokenizer.ggml.fim_rep_token_id";
    /// Fill-in-the-middle: file separator.
    pub const FIM_SEP_ID: &str = "tokenizer.ggml.fim_sep_token_id";
    /// Fill-in-the-middle prefix, older spelling (read after, and over, [`FIM_PRE_ID`]).
    pub const PREFIX_ID: &str = "tokenizer.ggml.prefix_token_id";
    /// Fill-in-the-middle suffix, older spelling (over [`FIM_SUF_ID`]).
    pub const SUFFIX_ID: &str = "tokenizer.ggml.suffix_token_id";
    /// Fill-in-the-middle middle, older spelling (over [`FIM_MID_ID`]).
    pub const MIDDLE_ID: &str = "tokenizer.ggml.middle_token_id";
    /// Every special-token id key, for range checks (the first eight as before; the
    /// fill-in-the-middle ones after).
    pub const SPECIAL_IDS: [&str; 18] = [
        BOS_ID, EOS_ID, EOT_ID, UNK_ID, SEP_ID, PAD_ID, CLS_ID, MASK_ID, EOM_ID, FIM_PRE_ID,
        FIM_SUF_ID, FIM_MID_ID, FIM_PAD_ID, FIM_REP_ID, FIM_SEP_ID, PREFIX_ID, SUFFIX_ID,
        MIDDLE_ID,
    ];
}

/// Tensor names.
pub mod tensors {
    /// Token embedding (`[hidden, vocab]`).
    pub const TOKEN_EMBD: &str = "token_embd.weight";
    /// Final RMSNorm (`[hidden]`).
    pub const OUTPUT_NORM: &str = "output_norm.weight";
    /// LM head (`[hidden, vocab]`); absent when tied to the embedding.
    pub const OUTPUT: &str = "output.weight";
    /// DFlash feature fusion (`[captured × hidden, hidden]`).
    pub const DFLASH_FC: &str = "dflash.fc.weight";
    /// RMSNorm after the fusion (`[hidden]`).
    pub const DFLASH_HIDDEN_NORM: &str = "dflash.hidden_norm.weight";
    /// Markov embedding of the previous token (`[R, V]`).
    pub const DSPARK_MARKOV_W1: &str = "dflash.dspark.markov.w1";
    /// Markov map to logits (`[R, V]`).
    pub const DSPARK_MARKOV_W2: &str = "dflash.dspark.markov.w2";
    /// Confidence head weight (`[C]`).
    pub const DSPARK_CONFIDENCE_WEIGHT: &str = "dflash.dspark.confidence.weight";
    /// Confidence head bias (`[1]`).
    pub const DSPARK_CONFIDENCE_BIAS: &str = "dflash.dspark.confidence.bias";

    /// The sizes a decoder layer's tensor shapes follow from.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    #[allow(missing_docs)]
    pub struct LayerDims {
        pub hidden: u64,
        pub heads: u64,
        pub kv_heads: u64,
        pub head_dim: u64,
        pub ffn: u64,
    }

    /// The tensors of a Qwen3-style decoder layer (`blk.{i}.*`), in the canonical order
    /// `dspark convert` writes them.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
    #[allow(missing_docs)]
    pub enum LayerTensor {
        AttnNorm,
        AttnQ,
        AttnK,
        AttnV,
        AttnQNorm,
        AttnKNorm,
        AttnOutput,
        FfnNorm,
        FfnGate,
        FfnUp,
        FfnDown,
    }

    impl LayerTensor {
        /// All of them, in canonical order.
        pub const ALL: [LayerTensor; 11] = [
            LayerTensor::AttnNorm,
            LayerTensor::AttnQ,
            LayerTensor::AttnK,
            LayerTensor::AttnV,
            LayerTensor::AttnQNorm,
            LayerTensor::AttnKNorm,
            LayerTensor::AttnOutput,
            LayerTensor::FfnNorm,
            LayerTensor::FfnGate,
            LayerTensor::FfnUp,
            LayerTensor::FfnDown,
        ];

        /// The name after `blk.{i}.`.
        pub fn suffix(self) -> &'static str {
            match self {
                LayerTensor::AttnNorm => "attn_norm.weight",
                LayerTensor::AttnQ => "attn_q.weight",
                LayerTensor::AttnK => "attn_k.weight",
                LayerTensor::AttnV => "attn_v.weight",
                LayerTensor::AttnQNorm => "attn_q_norm.weight",
                LayerTensor::AttnKNorm => "attn_k_norm.weight",
                LayerTensor::AttnOutput => "attn_output.weight",
                LayerTensor::FfnNorm => "ffn_norm.weight",
                LayerTensor::FfnGate => "ffn_gate.weight",
                LayerTensor::FfnUp => "ffn_up.weight",
                LayerTensor::FfnDown => "ffn_down.weight",
            }
        }

        /// The full name in layer `i`.
        pub fn name(self, layer: u64) -> String {
            format!("blk.{layer}.{}", self.suffix())
        }

        /// An RMSNorm weight (a vector), not a matrix.
        pub fn is_norm(self) -> bool {
            matches!(
                self,
                LayerTensor::AttnNorm
                    | LayerTensor::AttnQNorm
                    | LayerTensor::AttnKNorm
                    | LayerTensor::FfnNorm
            )
        }

        /// The GGUF `ne` (fastest-varying first): matrices are `[inputs, outputs]`.
        pub fn ne(self, d: &LayerDims) -> Vec<u64> {
            let (q, kv) = (d.heads * d.head_dim, d.kv_heads * d.head_dim);
            match self {
                LayerTensor::AttnNorm | LayerTensor::FfnNorm => vec![d.hidden],
                LayerTensor::AttnQNorm | LayerTensor::AttnKNorm => vec![d.head_dim],
                LayerTensor::AttnQ => vec![d.hidden, q],
                LayerTensor::AttnK | LayerTensor::AttnV => vec![d.hidden, kv],
                LayerTensor::AttnOutput => vec![q, d.hidden],
                LayerTensor::FfnGate | LayerTensor::FfnUp => vec![d.hidden, d.ffn],
                LayerTensor::FfnDown => vec![d.ffn, d.hidden],
            }
        }

        /// Parses `blk.{i}.<suffix>` (canonical decimal `i`) into the layer and the tensor.
        pub fn parse(name: &str) -> Option<(u64, LayerTensor)> {
            let rest = name.strip_prefix("blk.")?;
            let (idx, suffix) = rest.split_once('.')?;
            if idx.is_empty()
                || (idx.len() > 1 && idx.starts_with('0'))
                || !idx.bytes().all(|b| b.is_ascii_digit())
            {
                return None;
            }
            let t = LayerTensor::ALL
                .into_iter()
                .find(|t| t.suffix() == suffix)?;
            Some((idx.parse().ok()?, t))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::tensors::LayerTensor;

    #[test]
    fn layer_names_round_trip() {
        for t in LayerTensor::ALL {
            assert_eq!(LayerTensor::parse(&t.name(17)), Some((17, t)));
        }
        assert_eq!(LayerTensor::parse("blk.01.attn_q.weight"), None);
        assert_eq!(LayerTensor::parse("blk.1.attn_q.bias"), None);
        assert_eq!(LayerTensor::parse("blk..attn_q.weight"), None);
    }
}

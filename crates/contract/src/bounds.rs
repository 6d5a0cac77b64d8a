//! Hyper-parameter bounds. Each is a named limit with the reason it is where it is: the
//! generic `dflash-draft` loader's own bound where it has one (Lucebox
//! `draft_gguf_loader.cpp`, `docs/GGUF.md` §5.2), else a margin over the largest
//! value real checkpoints use. A value outside is a finding naming the key; values inside
//! are still cross-checked against the tensors, which the file must actually hold, so no
//! bound here lets a header claim memory the file does not back.

use std::ops::RangeInclusive;

/// Hidden size: 1..=131,072 (Lucebox's bound; Kimi K3 is 7,168, the largest open models
/// 16,384).
pub const EMBEDDING_LENGTH: RangeInclusive<u64> = 1..=131_072;
/// Decoder layers: 1..=1,024 (Lucebox's bound for drafters; the deepest open targets have
/// 126).
pub const BLOCK_COUNT: RangeInclusive<u64> = 1..=1024;
/// FFN inner size: 1..=524,288 (Lucebox).
pub const FEED_FORWARD_LENGTH: RangeInclusive<u64> = 1..=524_288;
/// Query (and key/value) heads: 1..=1,024 (Lucebox).
pub const HEAD_COUNT: RangeInclusive<u64> = 1..=1024;
/// Head size: 2..=1,024 (Lucebox's bound), and even: NeoX RoPE rotates pairs.
pub const HEAD_DIM: RangeInclusive<u64> = 2..=1024;
/// Vocabulary: 1..=4,194,304 (the largest in use is Gemma's 262,144).
pub const VOCAB: RangeInclusive<u64> = 1..=(1 << 22);
/// Context length: any positive UINT32. Memory is sized from each request, never from
/// this value, so 2^32 − 1 is legal.
pub const CONTEXT_LENGTH: RangeInclusive<u64> = 1..=(u32::MAX as u64);
/// Tokens per draft block: 2..=256 (DFlash uses 16, the Kimi K3 DSpark drafter 7; a block
/// of one token drafts nothing under the DFlash row convention).
pub const BLOCK_SIZE: RangeInclusive<u64> = 2..=256;
/// Markov rank: 1..=16,384 (every published DSpark head uses 256; SpecForge's examples 64).
pub const MARKOV_RANK: RangeInclusive<u64> = 1..=16_384;
/// Captured target layers: 1..=64 (DFlash and DSpark drafters capture 3 to 5).
pub const CAPTURED_LAYERS: RangeInclusive<u64> = 1..=64;
/// RMSNorm epsilon: finite, in (0, 1] (checkpoints use 1e-6 or 1e-5).
pub const MAX_RMS_EPS: f32 = 1.0;
/// YaRN scaling factor: finite, in [1, 1024] (Kimi K3's drafter uses 16).
pub const YARN_FACTOR: RangeInclusive<f32> = 1.0..=1024.0;

/// Kimi K3 layers: 1..=512 (llama.cpp's `LLAMA_MAX_LAYERS`; K3 has 93).
pub const K3_BLOCK_COUNT: RangeInclusive<u64> = 1..=512;
/// A Kimi K3 width that sizes tensors (KDA head, MLA latent and head parts): 1..=65,536
/// (K3's largest is the 1,536-wide query LoRA).
pub const K3_DIM: RangeInclusive<u64> = 1..=65_536;
/// The MLA query LoRA rank: 0 (none) or a width as [`K3_DIM`].
pub const K3_RANK_OR_ZERO: RangeInclusive<u64> = 0..=65_536;
/// KDA conv taps: 1..=256 (K3 uses 4; the conv window holds K − 1 inputs).
pub const K3_CONV_KERNEL: RangeInclusive<u64> = 1..=256;
/// Experts (routed, shared, groups): 0..=1,024 (llama.cpp's `LLAMA_MAX_EXPERTS`; K3 has
/// 896).
pub const K3_EXPERTS: RangeInclusive<u64> = 0..=1024;

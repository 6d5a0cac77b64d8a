//! One module per model: the Qwen3 target ([`qwen3`]) and the DSpark / DFlash drafter
//! ([`dspark`]). Each holds weights (shared by `Arc`) apart from the per-sequence session.

pub mod dspark;
pub mod qwen3;

//! One module per model: the Qwen3 target ([`qwen3`]), the Kimi K3 target ([`kimi_k3`]) and the DSpark / DFlash drafter
//! ([`dspark`]). Each holds weights (shared by `Arc`) apart from the per-sequence session.

pub mod dspark;
pub mod kimi_k3;
pub mod qwen3;

//! Drafter and target models on the CPU, and the speculative-decoding loop around them.
//!
//! # Brief overview
//! - [`Target`]: what the loop needs from a target model (forward with hidden-state
//!   capture, KV rollback, embeddings, LM head).
//! - [`Qwen3`]: the reference target, loaded from a llama.cpp `qwen3` GGUF; a forward over
//!   n positions is bit-identical to n single-position forwards.
//! - [`Drafter`]: a `dflash-draft` GGUF (DSpark heads optional): context cache, block
//!   drafting, Markov chain and confidence head.
//! - [`spec`]: greedy decoding, plain and speculative (lossless: same tokens).
//! - [`synth`]: random-weight Qwen3 GGUFs for tests and benchmarks.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod dspark;
pub mod error;
mod layer;
pub mod qwen3;
pub mod spec;
pub mod synth;
pub mod target;
pub mod weights;

pub use dspark::{Draft, DraftConfig, DraftTimes, Drafter};
pub use error::{Result, RuntimeError};
pub use qwen3::{Qwen3, Qwen3Config};
pub use target::{Forward, Target};

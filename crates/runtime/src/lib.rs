//! Drafter and target models on the CPU, and the speculative-decoding loop around them.
//!
//! # Brief overview
//! - [`models`]: [`Qwen3`] (the reference target, llama.cpp's `qwen3` GGUF) and
//!   [`Drafter`] (a `dflash-draft` GGUF, DSpark heads optional). Each loads only from the
//!   contract crate's proof value ([`dspark_contract::Qwen3File`],
//!   [`dspark_contract::DraftFile`]); weights sit in the file's bytes behind an `Arc`
//!   ([`ModelBytes`]), shared by any number of sessions ([`Qwen3Session`],
//!   [`DraftSession`]) that hold one sequence's state each.
//! - [`Target`]: what the loop needs from a target session, with a rollback contract
//!   (commit / roll back to a position) a recurrent target can honour too.
//! - [`generate`]: decoding, plain and speculative, greedy (lossless: the same tokens) or
//!   sampled ([`sampling`]: lossless in law), streaming committed tokens to an
//!   [`generate::Observer`], with a stop reason and [`generate::Stats`]; [`schedule`]:
//!   how many drafts each round verifies, from measured costs and acceptance.
//! - [`nn`]: the decoder layer, attention, norms, RoPE; [`cache`]: the KV cache;
//!   [`memory`]: buffers sized from the request and refused with their byte count.
//! - [`tokenizer`]: Hugging Face tokenizers, also rebuilt from a GGUF's own vocabulary.
//!
//! # Example
//! ```
//! use std::sync::Arc;
//! use dspark_gguf::GgmlType;
//! use dspark_runtime::generate::{autoregressive, Quiet, Request};
//! use dspark_runtime::Qwen3;
//! use dspark_testkit::target::{qwen3_gguf, Qwen3Geometry};
//!
//! let bytes = qwen3_gguf(&Qwen3Geometry::tiny(), 1, GgmlType::Q8_0);
//! let model = Arc::new(Qwen3::open(Arc::new(bytes))?);
//! let req = Request { prompt: &[5, 6, 7], max_tokens: 4, context: 64, stop: &[], eos: None, sampling: Default::default() };
//! // Two sessions on one loaded model give the same tokens.
//! let a = autoregressive(&mut model.session(req.positions(0))?, &req, &mut Quiet)?;
//! let b = autoregressive(&mut model.session(req.positions(0))?, &req, &mut Quiet)?;
//! assert_eq!(a.tokens.len(), 4);
//! assert_eq!(a.tokens, b.tokens);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod cache;
pub mod chat;
pub mod error;
pub mod eval;
pub mod generate;
pub mod memory;
pub mod models;
pub mod nn;
pub mod sampling;
pub mod schedule;
pub mod stages;
pub mod target;
pub mod tokenizer;
pub mod trace;
mod weights;

pub use error::{Result, RuntimeError};
pub use models::dspark::{Draft, DraftSession, DraftTimes, Drafter};
pub use models::kimi_k3::{KimiK3, KimiK3Session};
pub use models::llama::{Llama, LlamaSession};
pub use models::qwen3::{Qwen3, Qwen3Session};
pub use models::{load_target, open_target, OpenedTarget};
pub use target::{
    Attention, Forward, Logits, Rollback, Routed, SessionOptions, Target, TargetModel, TargetShape,
};
pub use weights::{ModelBytes, ModelData};

//! Test support for dspark (not published, a dev-dependency only): crafted-file builders,
//! mutants under a memory bound, one-line load/convert/decode helpers, and the synthetic
//! models of [`dspark_synth`] re-exported under their old paths.
//!
//! # Brief overview
//! - [`craft`]: GGUF files rebuilt with one key or tensor changed, for crafted-input tests;
//!   [`mutate`]: every truncation and seeded mutants of a file, under a memory bound.
//! - [`run`]: load, convert and decode in one line, for tests.
//! - [`micro_pair`]: the micro target and its converted drafter, the fuzzing seeds.
//! - [`rng`], [`drafter`], [`target`], [`kimi_k3`], [`llama`], [`head_only`]: [`dspark_synth`]'s.
//!
//! # Example
//! ```
//! use dspark_testkit::craft::with_key;
//! use dspark_testkit::target::{qwen3_gguf, Qwen3Geometry};
//! use dspark_gguf::{GgmlType, GgufFile, Value};
//!
//! let good = qwen3_gguf(&Qwen3Geometry::tiny(), 7, GgmlType::Q8_0);
//! let bad = with_key(&good, "qwen3.block_count", Value::U32(0));
//! let file = GgufFile::parse(&bad)?;
//! assert!(dspark_contract::qwen3::check(&file, &dspark_quant::matrix_types()).is_err());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod craft;
pub mod mutate;
pub mod run;

pub use dspark_synth::{
    drafter, head_only, kimi_k3, llama, rng, target, write_atomic, Result, SynthError,
};

/// The micro target and its converted drafter (seed 1), as bytes: the seeds of the
/// runtime-loader fuzz target and mutation test.
pub fn micro_pair() -> (Vec<u8>, Vec<u8>) {
    let g = target::Qwen3Geometry::micro();
    let dir = tempfile::tempdir().expect("a temporary folder");
    target::write_pair(&g, dir.path(), 1, &|_, _| true).expect("writing the micro pair");
    (
        target::qwen3_gguf(&g, 1, dspark_gguf::GgmlType::Q8_0),
        run::convert(&dir.path().join("draft")),
    )
}

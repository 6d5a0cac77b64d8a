//! Drafter checkpoint → `dflash-draft` GGUF: source reading, the name map, the type
//! policy, metadata with provenance, the streaming writer, the report, and verification.
//!
//! # Brief overview
//! - [`source::SourceLayout`] finds the weight files of a checkpoint folder and
//!   [`source::Checkpoint`] opens and validates them (headers only; data is read later,
//!   chunk by chunk, with positioned reads).
//! - [`config::DraftConfig`] resolves `config.json` in any of the known spellings, keeping
//!   each value's origin.
//! - [`plan::Plan`] cross-checks the two and decides every output byte but the hashes:
//!   tensors in canonical order ([`names`]), types, metadata, layout.
//! - [`write::write_gguf`] streams the GGUF (parallel quantization, ordered writes, hashes
//!   of both files, fsync); [`report::Report`] is `conversion-report.json`.
//! - [`verify`] proves a file against this project's output contract, its report and its
//!   source (the `dflash-draft` contract itself is `dspark_contract`'s).
//!
//! # Example
//! ```
//! use std::sync::atomic::AtomicBool;
//! use dspark_convert::config::DraftConfig;
//! use dspark_convert::plan::{Options, Plan};
//! use dspark_convert::source::{Checkpoint, SourceLayout};
//! use dspark_convert::write::write_gguf;
//! use dspark_testkit::drafter::{write_synth, SynthGeometry};
//!
//! let dir = tempfile::tempdir()?;
//! write_synth(&SynthGeometry::tiny(), dir.path(), 0, &|_, _| true)?;
//! let layout = SourceLayout::discover(dir.path())?;
//! let config = DraftConfig::read(&layout.config_path())?;
//! let ckpt = Checkpoint::open(layout)?;
//! let plan = Plan::new(config, &ckpt, Options::default())?;
//! assert_eq!(plan.type_counts().len(), 2); // F32 norms and Q8_0 matrices
//!
//! let out = tempfile::tempfile()?;
//! let result = write_gguf(&plan, &ckpt, &out, std::path::Path::new("out.gguf"), 2, &AtomicBool::new(false), &|_, _| {})?;
//! assert_eq!(result.output_size, plan.layout().file_size);
//! assert!(result.tensors.iter().all(|t| t.errors.relative_rmse() < 0.01));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod config;
pub mod error;
pub mod names;
pub mod plan;
pub mod report;
pub mod source;
pub mod verify;
pub mod vocab_from;
pub mod write;

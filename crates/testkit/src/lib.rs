//! Test and benchmark support for dspark (not published): the one seeded generator, the
//! synthetic checkpoints and models every test and benchmark builds on, crafted-file
//! builders, and a head-only stand-in target.
//!
//! # Brief overview
//! - [`rng::SplitMix64`]: the only random generator of the workspace's tests, synthetic
//!   models and benchmarks (its stream never changes, so seeded outputs are stable).
//! - [`drafter`]: synthetic DSpark drafter checkpoints (`config.json` + BF16 safetensors).
//! - [`target`]: synthetic Qwen3 targets in llama.cpp's `qwen3` GGUF layout, with a
//!   byte-level BPE vocabulary ([`target::SynthVocab`]), and [`target::write_pair`], a target
//!   with a drafter checkpoint that fits it.
//! - [`craft`]: GGUF files rebuilt with one key or tensor changed, for crafted-input tests;
//!   [`mutate`]: every truncation and seeded mutants of a file, under a memory bound.
//! - [`head_only::HeadOnlyTarget`]: a target of an embedding and LM head only, to time a
//!   drafter whose real target is too large to build.
//! - [`run`]: load, convert and decode in one line, for tests.
//!
//! # Example
//! ```
//! use dspark_testkit::target::{qwen3_gguf, Qwen3Geometry};
//! use dspark_gguf::{GgmlType, GgufFile};
//!
//! let bytes = qwen3_gguf(&Qwen3Geometry::tiny(), 7, GgmlType::Q8_0);
//! let file = GgufFile::parse(&bytes)?;
//! assert!(dspark_contract::qwen3::check(&file, &dspark_quant::matrix_types()).is_ok());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]

use std::path::{Path, PathBuf};

pub mod craft;
pub mod drafter;
pub mod head_only;
pub mod kimi_k3;
pub mod mutate;
pub mod rng;
pub mod run;
pub mod target;

/// A synthetic model could not be written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SynthError {
    /// A file or folder could not be written (the OS error is the source).
    #[error("{}", path.display())]
    Io {
        /// The path.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The output machinery refused or failed.
    #[error(transparent)]
    Output(#[from] dspark_output::OutputError),
    /// The caller asked to stop; nothing was left behind.
    #[error("interrupted")]
    Cancelled,
}

impl SynthError {
    fn io(path: &Path, source: std::io::Error) -> SynthError {
        SynthError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

/// Short alias.
pub type Result<T, E = SynthError> = std::result::Result<T, E>;

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

/// Writes `bytes` to `path` atomically (a temporary file renamed into place).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    let f = dspark_output::AtomicFile::create(path)?;
    f.file()
        .write_all(bytes)
        .map_err(|e| SynthError::io(path, e))?;
    f.commit()?;
    Ok(())
}

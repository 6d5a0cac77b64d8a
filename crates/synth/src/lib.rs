//! Synthetic models that ship with `dspark`: the seeded generator they are made from,
//! DSpark drafter checkpoints, Qwen3 and Kimi K3 targets in llama.cpp's GGUF layouts (with
//! a byte-level BPE vocabulary llama.cpp loads) and drafters that fit them, and a
//! head-only stand-in target for timing a drafter whose real target is too large to build.
//! `dspark synth` and `dspark bench` use them; the tests and benchmarks build on them too.
//!
//! # Brief overview
//! - [`rng::SplitMix64`]: the only random generator of synthetic models, tests and
//!   benchmarks (its stream never changes, so seeded outputs are stable).
//! - [`drafter`]: synthetic DSpark drafter checkpoints (`config.json` + BF16 safetensors).
//! - [`target`]: synthetic Qwen3 targets in llama.cpp's `qwen3` GGUF layout, with a
//!   byte-level BPE vocabulary ([`target::SynthVocab`]), and [`target::write_pair`], a
//!   target with a drafter checkpoint that fits it.
//! - [`kimi_k3`]: synthetic Kimi K3 targets in llama.cpp's `kimi-k3` layout, and pairs.
//! - [`head_only::HeadOnlyTarget`]: a target of an embedding and LM head only.
//!
//! # Example
//! ```
//! use dspark_synth::target::{qwen3_gguf, Qwen3Geometry};
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

pub mod drafter;
pub mod head_only;
pub mod kimi_k3;
pub mod llama;
pub mod rng;
pub mod target;

/// Writes a synthetic target with a drafter checkpoint that fits it into a folder
/// (`dir`, `seed`, `progress` returning false to cancel), and says what it wrote.
pub type PairWriter = fn(&Path, u64, &dyn Fn(u64, u64) -> bool) -> Result<String>;

/// The synthetic pairs `dspark synth` writes, by geometry name: a target of each
/// architecture (`target.gguf`), its vocabulary as `tokenizer.json`, and `draft/`.
pub const PAIRS: &[(&str, PairWriter)] = &[
    ("qwen3-tiny", |d, s, p| qwen3_pair("qwen3-tiny", d, s, p)),
    ("qwen3-small", |d, s, p| qwen3_pair("qwen3-small", d, s, p)),
    ("qwen3-0.6b", |d, s, p| qwen3_pair("qwen3-0.6b", d, s, p)),
    ("llama-tiny", |d, s, p| llama_pair("llama-tiny", d, s, p)),
    ("llama-tiny-options", |d, s, p| {
        llama_pair("llama-tiny-options", d, s, p)
    }),
    ("llama-small", |d, s, p| llama_pair("llama-small", d, s, p)),
    ("llama-smollm2", |d, s, p| {
        llama_pair("llama-smollm2", d, s, p)
    }),
    ("kimi-k3-tiny", |d, s, p| k3_pair("kimi-k3-tiny", d, s, p)),
    ("kimi-k3-small", |d, s, p| k3_pair("kimi-k3-small", d, s, p)),
    ("kimi-k3-large", |d, s, p| k3_pair("kimi-k3-large", d, s, p)),
];

/// The pair writer of geometry `name`, if it is one.
pub fn pair(name: &str) -> Option<PairWriter> {
    PAIRS.iter().find(|(n, _)| *n == name).map(|(_, w)| *w)
}

fn qwen3_pair(name: &str, dir: &Path, seed: u64, p: &dyn Fn(u64, u64) -> bool) -> Result<String> {
    let t = target::Qwen3Geometry::by_name(name).expect("a listed geometry");
    target::write_pair(&t, dir, seed, p)?;
    Ok(format!(
        "target.gguf (qwen3, {} layers, hidden {}, vocabulary {}), tokenizer.json and draft/ (captures {:?}, {} parameters)",
        t.layers,
        t.hidden,
        t.vocab,
        t.capture_layers(),
        target::pair_drafter(&t).parameters()
    ))
}

fn llama_pair(name: &str, dir: &Path, seed: u64, p: &dyn Fn(u64, u64) -> bool) -> Result<String> {
    let g = llama::LlamaGeometry::by_name(name).expect("a listed geometry");
    llama::write_llama_pair(&g, dir, seed, p)?;
    let d = g.drafter();
    Ok(format!(
        "target.gguf (llama, {} layers, hidden {}, {}/{} heads, vocabulary {}), tokenizer.json and draft/ (captures {:?}, {} parameters)",
        g.layers, g.hidden, g.heads, g.kv_heads, g.vocab, d.target_layer_ids, d.parameters()
    ))
}

fn k3_pair(name: &str, dir: &Path, seed: u64, p: &dyn Fn(u64, u64) -> bool) -> Result<String> {
    let g = kimi_k3::K3Geometry::by_name(name).expect("a listed geometry");
    kimi_k3::write_k3_pair(&g, dir, seed, p)?;
    Ok(format!(
        "target.gguf (kimi-k3, {} layers, MLA at {:?}, hidden {}, {} experts top-{}, vocabulary {}), tokenizer.json and draft/ (captures {:?}, {} parameters)",
        g.layers,
        g.mla_layers,
        g.hidden,
        g.experts,
        g.experts_used,
        g.vocab,
        g.captures,
        g.drafter().parameters()
    ))
}

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

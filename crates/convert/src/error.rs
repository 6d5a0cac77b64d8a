//! Conversion errors: each names the file, key or tensor and what was expected.

use std::path::PathBuf;

use thiserror::Error;

/// Everything that can stop a conversion, inspection or verification.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ConvertError {
    /// Reading or writing a file failed (the OS error is the source).
    #[error("{}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// `config.json` is missing a key, has a wrong type, or an unsupported value.
    #[error("{}: {key}: {msg}", path.display())]
    Config {
        /// The config file.
        path: PathBuf,
        /// The key (dotted for nested keys).
        key: String,
        /// What is wrong, with found vs expected.
        msg: String,
    },
    /// A source weight file is not valid safetensors, or the shard index is inconsistent.
    #[error("{}: {msg}", path.display())]
    Source {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        msg: String,
    },
    /// A tensor is missing, unknown, duplicated, or has the wrong shape or dtype.
    #[error("tensor `{tensor}`: {msg}")]
    Tensor {
        /// The source (or GGUF) tensor name.
        tensor: String,
        /// What is wrong, with found vs expected.
        msg: String,
    },
    /// A source tensor holds NaN or infinity (allowed only with `--allow-nonfinite`).
    #[error("tensor `{tensor}`: non-finite value {value} at flat index {index} (use --allow-nonfinite to convert anyway)")]
    NonFinite {
        /// The source tensor name.
        tensor: String,
        /// First offending flat (row-major) index.
        index: u64,
        /// The value found.
        value: f32,
    },
    /// A finite source value the output type cannot hold (its Q8_0 block's f16 scale, or
    /// the F16 value, overflows); allowed only with `--allow-nonfinite`.
    #[error("tensor `{tensor}`: value {value} at flat index {index} does not fit {ty} (it would become infinite); convert with --outtype bf16 or f32, or pass --allow-nonfinite to write it anyway")]
    Unrepresentable {
        /// The source tensor name.
        tensor: String,
        /// First offending flat (row-major) index (of its block, for Q8_0).
        index: u64,
        /// The largest magnitude there.
        value: f32,
        /// The output type.
        ty: String,
    },
    /// The output could not be produced.
    #[error("{}: {msg}", path.display())]
    Output {
        /// The destination.
        path: PathBuf,
        /// What is wrong.
        msg: String,
    },
    /// A GGUF file failed to parse (the parse error is the source).
    #[error("{}", path.display())]
    Gguf {
        /// The file.
        path: PathBuf,
        /// The parse error.
        source: dspark_gguf::GgufError,
    },
    /// The run was interrupted (Ctrl-C or SIGTERM); nothing was written.
    #[error("interrupted; nothing was written")]
    Cancelled,
}

impl ConvertError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> ConvertError {
        ConvertError::Io {
            path: path.into(),
            source,
        }
    }

    pub(crate) fn tensor(tensor: impl Into<String>, msg: impl Into<String>) -> ConvertError {
        ConvertError::Tensor {
            tensor: tensor.into(),
            msg: msg.into(),
        }
    }
}

/// Short alias.
pub type Result<T, E = ConvertError> = std::result::Result<T, E>;

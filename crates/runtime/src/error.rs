//! Runtime errors: what in the model file is wrong or unsupported.

use thiserror::Error;

/// A model could not be loaded or run.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum RuntimeError {
    /// A metadata key is missing or has the wrong type or value.
    #[error("key `{key}`: {msg}")]
    Key {
        /// The key.
        key: String,
        /// What is wrong.
        msg: String,
    },
    /// A tensor is missing or has the wrong type or shape.
    #[error("tensor `{tensor}`: {msg}")]
    Tensor {
        /// The tensor.
        tensor: String,
        /// What is wrong.
        msg: String,
    },
    /// A request the model cannot serve (context full, token out of range).
    #[error("{0}")]
    Request(String),
}

/// Short alias.
pub type Result<T, E = RuntimeError> = std::result::Result<T, E>;

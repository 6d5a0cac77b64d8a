//! Runtime errors: a model file that breaks its contract, a request the loaded models
//! cannot serve, memory the machine cannot give.

use thiserror::Error;

/// A model could not be loaded or run.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum RuntimeError {
    /// The bytes are not a GGUF file.
    #[error(transparent)]
    Gguf(#[from] dspark_gguf::GgufError),
    /// The file breaks its kind's contract (every finding is listed).
    #[error(transparent)]
    Contract(#[from] dspark_contract::ContractError),
    /// A tensor cannot be used as the contract promised (a bug, or a proof from another
    /// file).
    #[error("tensor `{tensor}`: {msg}")]
    Tensor {
        /// The tensor.
        tensor: String,
        /// What is wrong.
        msg: String,
    },
    /// A request the loaded models cannot serve (positions beyond the session, a token
    /// outside the vocabulary, a drafter made for another target).
    #[error("{0}")]
    Request(String),
    /// A request that does not fit the context (the models', or the one asked for),
    /// refused before any work by [`crate::generate::fit_context`].
    #[error("{0}")]
    Context(String),
    /// An allocation this machine cannot hold, refused before it was tried.
    #[error("{what} needs {bytes} bytes of memory{}", available.map_or(String::new(), |a| format!(", but only {a} are available")))]
    Memory {
        /// What the memory is for.
        what: String,
        /// Bytes needed.
        bytes: u64,
        /// Bytes this machine has left, when known.
        available: Option<u64>,
    },
    /// A model computed NaN or infinity (its weights overflow f32), so its output would be
    /// meaningless.
    #[error("{0}")]
    NonFinite(String),
    /// A tokenizer could not be built, or does not fit the target.
    #[error("{0}")]
    Tokenizer(String),
}

impl RuntimeError {
    pub(crate) fn tensor(tensor: &str, msg: impl Into<String>) -> RuntimeError {
        RuntimeError::Tensor {
            tensor: tensor.to_string(),
            msg: msg.into(),
        }
    }
}

/// Short alias.
pub type Result<T, E = RuntimeError> = std::result::Result<T, E>;

//! One module per model: the targets ([`qwen3`], [`llama`], [`kimi_k3`]) and the DSpark / DFlash
//! drafter ([`dspark`]). Each holds weights (shared by `Arc`) apart from the per-sequence
//! session. [`load_target`] is the factory: one row per target architecture turns the
//! contract's checked file into a [`TargetModel`]; [`open_target`] parses, checks and
//! loads any target file in one call, with the tokenizer it carries.

pub mod dspark;
pub mod kimi_k3;
pub mod llama;
pub mod qwen3;

use std::sync::Arc;

use dspark_contract::TargetFile;

use crate::error::{Result, RuntimeError};
use crate::target::TargetModel;
use crate::tokenizer::Tokenizer;
use crate::weights::ModelBytes;

/// Loads the weights `file` describes (the contract's proof for a GGUF parsed from
/// `bytes`), as the model of its architecture.
pub fn load_target(bytes: ModelBytes, file: &TargetFile<'_>) -> Result<Arc<dyn TargetModel>> {
    Ok(match file {
        TargetFile::Qwen3(f) => Arc::new(qwen3::Qwen3::load(bytes, f)?),
        TargetFile::Llama(f) => Arc::new(llama::Llama::load(bytes, f)?),
        TargetFile::KimiK3(f) => Arc::new(kimi_k3::KimiK3::load(bytes, f)?),
    })
}

/// A target opened from its bytes: the model, and the tokenizer to use with it.
pub struct OpenedTarget {
    /// The weights, shared by every session.
    pub model: Arc<dyn TargetModel>,
    /// The tokenizer given to [`open_target`] (checked against the file), else the file's
    /// own rebuilt; `None` when there is neither.
    pub tokenizer: Option<Arc<Tokenizer>>,
    /// Why the file's own tokenizer could not be rebuilt, when none was given and it could
    /// not (a text prompt then needs another tokenizer).
    pub tokenizer_problem: Option<RuntimeError>,
    /// The file's chat template (`tokenizer.chat_template`), when it carries one.
    pub chat_template: Option<String>,
}

/// Parses `bytes`, checks them against their architecture's contract with this build's
/// kernels, and loads them, with a tokenizer: `given` (a `tokenizer.json`) must serve this
/// target — its vocabulary size, and the file's own tokens where the file carries them —
/// and behave as the file's own tokenizer where that can be rebuilt; without it, the
/// file's own is rebuilt.
pub fn open_target(bytes: ModelBytes, given: Option<Tokenizer>) -> Result<OpenedTarget> {
    let file = dspark_gguf::GgufFile::parse((*bytes).as_ref())?;
    let checked = dspark_contract::check_target(&file, &dspark_quant::matrix_types())?;
    let contract = checked.contract();
    let own = contract.vocab();
    let (tokenizer, tokenizer_problem) = match given {
        Some(t) => {
            t.check_target(contract.shape().vocab, own)?;
            if let Some(Ok(rebuilt)) = own.map(Tokenizer::from_gguf) {
                t.check_agrees(&rebuilt)?;
            }
            (Some(t), None)
        }
        None => match own.map(Tokenizer::from_gguf) {
            None => (None, None),
            Some(Ok(t)) => (Some(t), None),
            Some(Err(e)) => (None, Some(e)),
        },
    };
    let chat_template = match file.get("tokenizer.chat_template") {
        None => None,
        Some(v) => match v.as_str() {
            Some(s) if s.len() <= crate::chat::MAX_TEMPLATE_BYTES => Some(s.to_string()),
            Some(s) => {
                return Err(RuntimeError::Request(format!(
                    "key `tokenizer.chat_template`: {} bytes, at most {} are accepted",
                    s.len(),
                    crate::chat::MAX_TEMPLATE_BYTES
                )))
            }
            None => {
                return Err(RuntimeError::Request(
                    "key `tokenizer.chat_template`: not a string".into(),
                ))
            }
        },
    };
    let model = load_target(bytes.clone(), &checked)?;
    Ok(OpenedTarget {
        model,
        tokenizer: tokenizer.map(Arc::new),
        tokenizer_problem,
        chat_template,
    })
}

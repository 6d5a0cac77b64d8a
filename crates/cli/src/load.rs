//! Loading model files for `generate` and `bench`: map, parse, check against the kind's
//! contract (the same check `verify` and `inspect` run), load; every error names the file.

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result};
use dspark_contract::{ContractError, TargetShape};
use dspark_gguf::GgufFile;
use dspark_runtime::tokenizer::Tokenizer;
use dspark_runtime::{Drafter, ModelBytes, Qwen3, RuntimeError};

use crate::mmap::map_input;

/// A contract failure with every finding on its own line.
pub fn contract_error(path: &Path, e: &ContractError) -> anyhow::Error {
    let mut msg = format!("{}: not a valid {}:", path.display(), e.kind);
    for f in &e.findings {
        msg.push_str(&format!("\n  - {f}"));
    }
    anyhow::anyhow!(msg)
}

/// A runtime error about `path`, with contract findings spelled out; memory a request
/// would need beyond what the machine gives is a usage error (exit 2), like a request
/// beyond the context.
pub fn runtime_error(path: &Path, e: RuntimeError) -> anyhow::Error {
    match e {
        RuntimeError::Contract(c) => contract_error(path, &c),
        m @ RuntimeError::Memory { .. } => {
            anyhow::Error::new(crate::Usage(format!("{}: {m}", path.display())))
        }
        other => anyhow::Error::new(other).context(path.display().to_string()),
    }
}

/// Maps `path` as shared model bytes.
pub fn map_model(path: &Path) -> Result<ModelBytes> {
    Ok(Arc::new(map_input(path)?))
}

/// A loaded target and the tokenizer it comes with.
pub struct LoadedTarget {
    /// The weights.
    pub model: Arc<Qwen3>,
    /// `--tokenizer` (checked against the target), else the target's own vocabulary
    /// rebuilt, else none.
    pub tokenizer: Option<Arc<Tokenizer>>,
    /// Why the target's own vocabulary could not be rebuilt, when it could not.
    pub tokenizer_problem: Option<String>,
}

/// Loads a Qwen3 target, and its tokenizer: `tokenizer_json` when given (it must serve
/// this target and agree with the target's own vocabulary), else the GGUF's own.
pub fn load_target(path: &Path, tokenizer_json: Option<&Path>) -> Result<LoadedTarget> {
    let bytes = map_model(path)?;
    let file = GgufFile::parse((*bytes).as_ref()).with_context(|| path.display().to_string())?;
    let checked = dspark_contract::qwen3::check(&file, &dspark_quant::matrix_types())
        .map_err(|e| contract_error(path, &e))?;
    let model = Arc::new(Qwen3::load(bytes.clone(), &checked).map_err(|e| runtime_error(path, e))?);
    let vocab = checked.hparams().vocab;
    let (tokenizer, tokenizer_problem) = match tokenizer_json {
        Some(p) => {
            let t = Tokenizer::from_file(p).map_err(anyhow::Error::new)?;
            t.check_target(vocab, checked.vocab())
                .map_err(|e| anyhow::anyhow!("{e} (target {})", path.display()))?;
            // Where the target's own tokenizer can be rebuilt, the two must also behave alike.
            if let Some(Ok(own)) = checked.vocab().map(Tokenizer::from_gguf) {
                t.check_agrees(&own)
                    .map_err(|e| anyhow::anyhow!("{e} (target {})", path.display()))?;
            }
            (Some(t), None)
        }
        None => match checked.vocab().map(Tokenizer::from_gguf) {
            None => (None, None),
            Some(Ok(t)) => (Some(t), None),
            Some(Err(e)) => (None, Some(format!("{}: {e}", path.display()))),
        },
    };
    Ok(LoadedTarget {
        model,
        tokenizer: tokenizer.map(Arc::new),
        tokenizer_problem,
    })
}

/// Loads a drafter that must fit `target` (`target_path` names it in messages).
pub fn load_drafter(path: &Path, target: &TargetShape, target_path: &str) -> Result<Arc<Drafter>> {
    let bytes = map_model(path)?;
    let file = GgufFile::parse((*bytes).as_ref()).with_context(|| path.display().to_string())?;
    let checked = dspark_contract::drafter(&file, &dspark_quant::matrix_types())
        .map_err(|e| contract_error(path, &e))?;
    match Drafter::load(bytes.clone(), &checked, target) {
        Ok(d) => Ok(Arc::new(d)),
        Err(RuntimeError::Contract(c)) => {
            let mut msg = format!("{} does not fit the target {target_path}:", path.display());
            for f in &c.findings {
                msg.push_str(&format!("\n  - {f}"));
            }
            Err(anyhow::anyhow!(msg))
        }
        Err(e) => Err(runtime_error(path, e)),
    }
}

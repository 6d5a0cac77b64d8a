//! Loading model files for `generate`, `eval` and `bench`: map the file, hand it to the
//! runtime (which checks it against its kind's contract — the same check `verify` and
//! `inspect` run — and loads it); every error names the file.

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result};
use dspark_contract::{ContractError, TargetShape};
use dspark_gguf::GgufFile;
use dspark_runtime::tokenizer::Tokenizer;
use dspark_runtime::{
    open_target, Attention, DraftSession, Drafter, ModelBytes, OpenedTarget, RuntimeError,
    SessionOptions, Target, TargetModel,
};

use crate::mmap::map_model_file;

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
        c @ RuntimeError::Context(_) => anyhow::Error::new(crate::Usage(c.to_string())),
        other => anyhow::Error::new(other).context(path.display().to_string()),
    }
}

/// Maps `path` as shared model bytes.
pub fn map_model(path: &Path) -> Result<ModelBytes> {
    Ok(Arc::new(map_model_file(path)?))
}

/// Loads a target of any architecture dspark runs, and its tokenizer:
/// `tokenizer_json` when given (it must serve this target and agree with the target's own
/// vocabulary), else the GGUF's own.
pub fn load_target(path: &Path, tokenizer_json: Option<&Path>) -> Result<OpenedTarget> {
    let bytes = map_model(path)?;
    let given = match tokenizer_json {
        Some(p) => Some(Tokenizer::from_file(p).map_err(anyhow::Error::new)?),
        None => None,
    };
    let mut opened = open_target(bytes, given).map_err(|e| match e {
        RuntimeError::Tokenizer(msg) => anyhow::anyhow!("{msg} (target {})", path.display()),
        other => runtime_error(path, other),
    })?;
    if let Some(problem) = opened.tokenizer_problem.take() {
        opened.tokenizer_problem = Some(RuntimeError::Tokenizer(format!(
            "{}: {problem}",
            path.display()
        )));
    }
    Ok(opened)
}

/// The target's tokenizer, for a command that encodes text: when the target has none, the
/// problem that made its own unusable followed by `need`, or a usage error naming the file
/// followed by `remedy`.
pub fn require_tokenizer(
    target: &OpenedTarget,
    path: &Path,
    need: &str,
    remedy: &str,
) -> Result<Arc<Tokenizer>> {
    if let Some(t) = &target.tokenizer {
        return Ok(Arc::clone(t));
    }
    match &target.tokenizer_problem {
        Some(p) => anyhow::bail!("{p}; {need}"),
        None => Err(anyhow::Error::new(crate::Usage(format!(
            "{} carries no tokenizer: {remedy}",
            path.display()
        )))),
    }
}

/// Loads a drafter that must fit `model` (`target_path` names it in messages); when it
/// borrows the target's LM head, the head gets its packed copy
/// ([`TargetModel::pack_lm_head`]).
pub fn load_drafter(
    path: &Path,
    model: &dyn TargetModel,
    target_path: &str,
) -> Result<Arc<Drafter>> {
    let drafter = load_drafter_for(path, &model.shape(), target_path)?;
    if drafter.borrows_lm_head() {
        model
            .pack_lm_head()
            .map_err(|e| anyhow::anyhow!("{target_path}: {e}"))?;
    }
    Ok(drafter)
}

/// Loads a drafter that must fit a target of shape `target`.
fn load_drafter_for(path: &Path, target: &TargetShape, target_path: &str) -> Result<Arc<Drafter>> {
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

/// A target session of `positions` (able to undo a block of the drafter's, when there is
/// one) and the drafter's session of as many positions; errors name the file.
pub fn open_sessions(
    model: &Arc<dyn TargetModel>,
    target_path: &Path,
    drafter: Option<(&Arc<Drafter>, &Path)>,
    positions: usize,
    attention: Attention,
) -> Result<(Box<dyn Target + Send>, Option<DraftSession>)> {
    let drafts = drafter.map_or(0, |(d, _)| d.drafts_per_block());
    let target = Arc::clone(model)
        .session(&SessionOptions {
            positions,
            undo: drafts + 1,
            attention,
        })
        .map_err(|e| runtime_error(target_path, e))?;
    let draft = match drafter {
        Some((d, p)) => Some(d.session(positions).map_err(|e| runtime_error(p, e))?),
        None => None,
    };
    Ok((target, draft))
}

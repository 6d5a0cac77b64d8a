//! Loading model files for `generate` and `bench`: map, parse, check against the kind's
//! contract (the same check `verify` and `inspect` run), load; every error names the file.

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result};
use dspark_contract::{ContractError, TargetShape};
use dspark_gguf::GgufFile;
use dspark_runtime::tokenizer::Tokenizer;
use dspark_runtime::{Attention, Drafter, KimiK3, ModelBytes, Qwen3, RuntimeError, Target};

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

/// A loaded target model of either kind.
#[derive(Clone)]
pub enum TargetModel {
    /// llama.cpp's `qwen3`.
    Qwen3(Arc<Qwen3>),
    /// llama.cpp's `kimi-k3`.
    KimiK3(Arc<KimiK3>),
}

impl TargetModel {
    /// Hidden size, layers and vocabulary.
    pub fn shape(&self) -> TargetShape {
        match self {
            TargetModel::Qwen3(m) => m.shape(),
            TargetModel::KimiK3(m) => m.shape(),
        }
    }
    /// The context it was trained for.
    pub fn context(&self) -> usize {
        match self {
            TargetModel::Qwen3(m) => m.hparams().context,
            TargetModel::KimiK3(m) => m.hparams().context,
        }
    }
    /// Tokens in its vocabulary.
    pub fn vocab(&self) -> usize {
        self.shape().vocab
    }
    /// The special tokens it declares.
    pub fn special_tokens(&self) -> dspark_contract::SpecialTokens {
        match self {
            TargetModel::Qwen3(m) => m.special_tokens(),
            TargetModel::KimiK3(m) => m.special_tokens(),
        }
    }
    /// Bytes of weights one decode step reads.
    pub fn weight_bytes(&self) -> u64 {
        match self {
            TargetModel::Qwen3(m) => m.weight_bytes(),
            TargetModel::KimiK3(m) => m.weight_bytes(),
        }
    }
    /// `general.architecture`.
    pub fn arch(&self) -> &'static str {
        match self {
            TargetModel::Qwen3(_) => dspark_contract::qwen3::ARCH,
            TargetModel::KimiK3(_) => dspark_contract::kimi_k3::ARCH,
        }
    }
    /// A session of `positions` that may leave `undo` positions uncommitted (a
    /// speculative round's width; only recurrent targets keep anything for it), its MLA
    /// attention computed as `attention` says (Kimi K3; a Qwen3 target's attention is f32
    /// either way).
    pub fn session(
        &self,
        positions: usize,
        undo: usize,
        attention: Attention,
    ) -> dspark_runtime::Result<Box<dyn Target + Send>> {
        Ok(match self {
            TargetModel::Qwen3(m) => Box::new(m.session(positions)?),
            TargetModel::KimiK3(m) => {
                let mut s = m.session(positions, undo)?;
                s.set_attention(attention);
                Box::new(s)
            }
        })
    }
}

/// A loaded target and the tokenizer it comes with.
pub struct LoadedTarget {
    /// The weights.
    pub model: TargetModel,
    /// `--tokenizer` (checked against the target), else the target's own vocabulary
    /// rebuilt, else none.
    pub tokenizer: Option<Arc<Tokenizer>>,
    /// Why the target's own vocabulary could not be rebuilt, when it could not.
    pub tokenizer_problem: Option<String>,
}

/// Loads a target (`qwen3` or `kimi-k3`, by its architecture), and its tokenizer:
/// `tokenizer_json` when given (it must serve this target and agree with the target's own
/// vocabulary), else the GGUF's own.
pub fn load_target(path: &Path, tokenizer_json: Option<&Path>) -> Result<LoadedTarget> {
    let bytes = map_model(path)?;
    let file = GgufFile::parse((*bytes).as_ref()).with_context(|| path.display().to_string())?;
    let types = dspark_quant::matrix_types();
    let (model, own_vocab) = match dspark_contract::identify(&file) {
        dspark_contract::FileKind::KimiK3 => {
            let checked = dspark_contract::kimi_k3::check(&file, &types)
                .map_err(|e| contract_error(path, &e))?;
            let m = KimiK3::load(bytes.clone(), &checked).map_err(|e| runtime_error(path, e))?;
            (TargetModel::KimiK3(Arc::new(m)), checked.vocab().cloned())
        }
        _ => {
            let checked = dspark_contract::qwen3::check(&file, &types)
                .map_err(|e| contract_error(path, &e))?;
            let m = Qwen3::load(bytes.clone(), &checked).map_err(|e| runtime_error(path, e))?;
            (TargetModel::Qwen3(Arc::new(m)), checked.vocab().cloned())
        }
    };
    let vocab = model.vocab();
    let (tokenizer, tokenizer_problem) = match tokenizer_json {
        Some(p) => {
            let t = Tokenizer::from_file(p).map_err(anyhow::Error::new)?;
            t.check_target(vocab, own_vocab.as_ref())
                .map_err(|e| anyhow::anyhow!("{e} (target {})", path.display()))?;
            // Where the target's own tokenizer can be rebuilt, the two must also behave alike.
            if let Some(Ok(own)) = own_vocab.as_ref().map(Tokenizer::from_gguf) {
                t.check_agrees(&own)
                    .map_err(|e| anyhow::anyhow!("{e} (target {})", path.display()))?;
            }
            (Some(t), None)
        }
        None => match own_vocab.as_ref().map(Tokenizer::from_gguf) {
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

//! `--vocab-from TARGET.gguf`: the target's tokenizer keys, carried into a drafter in
//! llama.cpp's layout, and the facts a drafter checkpoint must fit — the target's token
//! count and depth.

use std::path::Path;

use dspark_contract::names::{tokenizer, ARCHITECTURE};
use dspark_gguf::{Array, GgufFile, Value};

use crate::config::DraftConfig;
use crate::error::{ConvertError, Result};
use crate::plan::CarriedVocab;

/// What a drafter takes from, and must fit, the target named by `--vocab-from`.
#[derive(Clone, Debug)]
pub struct TargetVocab {
    /// The tokenizer keys to carry.
    pub carried: CarriedVocab,
    /// Tokens in the target's vocabulary.
    pub tokens: usize,
    /// The target's depth (`<arch>.block_count`), when it gives one.
    pub depth: Option<u64>,
}

fn target_error(path: &Path, msg: String) -> ConvertError {
    ConvertError::Source {
        path: path.to_path_buf(),
        msg,
    }
}

impl TargetVocab {
    /// Reads them from a target GGUF's bytes (`path` names it in messages).
    pub fn read(path: &Path, bytes: &[u8]) -> Result<TargetVocab> {
        let file = GgufFile::parse(bytes).map_err(|e| target_error(path, e.to_string()))?;
        let keys: Vec<(String, Value)> = file
            .kvs()
            .iter()
            .filter(|(k, _)| k.starts_with("tokenizer.") && k.as_str() != tokenizer::MASK_ID)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let tokens = match file.get(tokenizer::TOKENS) {
            Some(Value::Array(Array::String(t))) => t.len(),
            _ => {
                return Err(target_error(
                    path,
                    format!(
                        "no {} array: --vocab-from needs a GGUF that carries its tokenizer",
                        tokenizer::TOKENS
                    ),
                ))
            }
        };
        let depth = file
            .get(ARCHITECTURE)
            .and_then(Value::as_str)
            .and_then(|arch| file.get(&format!("{arch}.block_count")))
            .and_then(|v| match v {
                Value::U32(n) => Some(u64::from(*n)),
                _ => None,
            });
        Ok(TargetVocab {
            carried: CarriedVocab {
                keys,
                sha256: crate::verify::sha256_hex(bytes),
            },
            tokens,
            depth,
        })
    }

    /// Checks that the drafter `config` fits this target (its vocabulary, every captured
    /// layer inside the target's depth); returns the warnings to print (see
    /// [`untappable`]).
    pub fn check_fit(&self, config: &DraftConfig, path: &Path) -> Result<Vec<String>> {
        if self.tokens as u64 != config.vocab_size.value {
            return Err(target_error(
                path,
                format!(
                    "the target has {} tokens, but {} says {} ({})",
                    self.tokens,
                    config.path.display(),
                    config.vocab_size.value,
                    config.vocab_size.from
                ),
            ));
        }
        let Some(depth) = self.depth else {
            return Ok(Vec::new());
        };
        if let Some(bad) = config
            .target_layer_ids
            .value
            .iter()
            .find(|&&id| id >= depth)
        {
            return Err(target_error(
                path,
                format!(
                    "captured layer {bad} ({}) is outside the target's {depth} layers",
                    config.target_layer_ids.from
                ),
            ));
        }
        Ok(untappable(config, depth, &path.display().to_string()))
    }
}

/// llama.cpp taps a target layer's input, so it cannot give the output of the last layer
/// (`docs/LLAMA-CPP.md` §3): a drafter capturing it aborts there. One warning per such layer
/// of a target of `depth` layers (`depth_from` says where the depth came from).
pub fn untappable(config: &DraftConfig, depth: u64, depth_from: &str) -> Vec<String> {
    config
        .target_layer_ids
        .value
        .iter()
        .filter(|&&id| id + 1 == depth)
        .map(|id| format!(
            "captured layer {id} is the last of the target's {depth} ({depth_from}): llama.cpp cannot tap its output (it aborts with \"layer input tensor is null\"); dspark can"
        ))
        .collect()
}

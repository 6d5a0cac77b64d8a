//! Drafter ↔ target: the cross-checks that make a pair runnable.

use crate::dflash_draft::DraftFile;
use crate::finding::{ContractError, Finding};

/// What a drafter must fit in its target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TargetShape {
    /// Hidden size.
    pub hidden: usize,
    /// Decoder layers.
    pub layers: usize,
    /// Vocabulary (embedding rows).
    pub vocab: usize,
}

/// What the pair is called in messages.
pub const KIND: &str = "drafter for this target";

/// Checks that `draft` fits `target`: the same hidden size, captured layers the target
/// has, the target's depth and vocabulary where the drafter records them, a Markov head
/// and the drafter's own embedding / LM head over the target's vocabulary, and a mask
/// token inside it.
pub fn check(draft: &DraftFile<'_>, target: &TargetShape) -> Result<(), ContractError> {
    let h = draft.hparams();
    let mut f = Vec::new();
    if h.hidden != target.hidden {
        f.push(Finding::file(format!(
            "the drafter's hidden size {} differs from the target's {}",
            h.hidden, target.hidden
        )));
    }
    if let Some(&l) = h.target_layer_ids.iter().find(|&&l| l >= target.layers) {
        f.push(Finding::file(format!(
            "the drafter captures target layer {l}, but the target has {} layers",
            target.layers
        )));
    }
    if let Some(d) = h.target_layers.filter(|&d| d != target.layers) {
        f.push(Finding::file(format!(
            "the drafter was made for a target of {d} layers, this one has {}",
            target.layers
        )));
    }
    if let Some(v) = h.target_vocab.filter(|&v| v != target.vocab) {
        f.push(Finding::file(format!(
            "the drafter was made for a vocabulary of {v} tokens, the target has {}",
            target.vocab
        )));
    }
    if let Some(m) = draft.markov().filter(|m| m.vocab != target.vocab) {
        f.push(Finding::file(format!(
            "the drafter's Markov head covers {} tokens, the target's vocabulary {}",
            m.vocab, target.vocab
        )));
    }
    for t in [draft.token_embd(), draft.output()].into_iter().flatten() {
        if t.rows != target.vocab {
            f.push(Finding::tensor(
                t.name,
                format!(
                    "covers {} tokens, the target's vocabulary {}",
                    t.rows, target.vocab
                ),
            ));
        }
    }
    if h.mask_token_id as usize >= target.vocab {
        f.push(Finding::file(format!(
            "the drafter's mask token {} is outside the target's vocabulary of {}",
            h.mask_token_id, target.vocab
        )));
    }
    if f.is_empty() {
        Ok(())
    } else {
        Err(ContractError {
            kind: KIND,
            findings: f,
        })
    }
}

//! What the speculative loop needs from a target model.

use crate::error::Result;

/// The result of a target forward over n positions.
#[derive(Clone, Debug, PartialEq)]
pub struct Forward {
    /// `n × vocab` logits, position-major.
    pub logits: Vec<f32>,
    /// `n × captured layers × hidden`: per position, the residual stream after each
    /// requested layer (before the final norm), in the order requested (the drafter's
    /// `fc` input order).
    pub captured: Vec<f32>,
}

/// A target model with a KV cache that can be rolled back.
pub trait Target {
    /// Vocabulary size.
    fn vocab_size(&self) -> usize;
    /// Hidden size.
    fn hidden_size(&self) -> usize;
    /// Decoder layers.
    fn n_layers(&self) -> usize;
    /// Committed positions in the KV cache.
    fn len(&self) -> usize;
    /// True when nothing is cached.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Runs `tokens` at positions `len()..len()+n`, appending to the cache, capturing the
    /// outputs of layers `capture`.
    fn forward(&mut self, tokens: &[u32], capture: &[usize]) -> Result<Forward>;
    /// Rolls the cache back to `len` positions (a no-op if already shorter).
    fn truncate(&mut self, len: usize);
    /// Token embeddings, `tokens.len() × hidden`.
    fn embed(&self, tokens: &[u32], out: &mut [f32]) -> Result<()>;
    /// The LM head applied to already-normed hidden states (`n × hidden` → `n × vocab`).
    fn lm_head(&self, hidden: &[f32], logits: &mut [f32]);
}

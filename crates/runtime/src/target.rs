//! What the decoding loop needs from a target session.
//!
//! # The rollback contract
//! A session holds positions `0..len()`. [`Target::forward`] appends positions
//! tentatively; [`Target::rollback`] returns to any position between [`Target::committed`]
//! and `len()`; [`Target::commit`] makes every position so far permanent — it is the
//! snapshot later rollbacks return to at most, so the session may drop whatever it kept
//! to undo older positions. A KV cache honours this by moving its length (nothing to
//! keep); a recurrent layer (Kimi K3's KDA) keeps its state at the last commit plus what
//! it needs to replay or restore any position since (ReplaySSM), and drops it at commit.
//! The speculative loop commits after every round, so a recurrent target never keeps more
//! than one round of history.

use std::sync::Arc;

use dspark_contract::SpecialTokens;
pub use dspark_contract::TargetShape;

use crate::error::Result;
pub use crate::nn::attention::Attention;

/// How a recurrent target returns to an earlier position (ReplaySSM,
/// `docs/RUNTIME-MATH.md` §6.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Rollback {
    /// A: keep the state after each position of a forward (one state per position of
    /// the rollback window); a rollback picks one.
    Snapshots,
    /// C: keep one state and the recurrence's inputs per position; a rollback replays
    /// the recurrence alone over the kept prefix.
    Replay,
}

impl Rollback {
    /// Its name in flags and statistics (`snapshots`, `replay`).
    pub fn name(self) -> &'static str {
        match self {
            Rollback::Snapshots => "snapshots",
            Rollback::Replay => "replay",
        }
    }
}

/// Which rows of logits a forward returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Logits {
    /// One row per position (verification).
    All,
    /// The last position's row only (prefill).
    Last,
}

/// The result of a target forward over n positions.
#[derive(Clone, Debug, PartialEq)]
pub struct Forward {
    /// Logits, position-major: `n × vocab` ([`Logits::All`]) or `vocab` ([`Logits::Last`]).
    pub logits: Vec<f32>,
    /// `n × captured layers × hidden`: per position, the residual stream after each
    /// requested layer (before the final norm), in the order requested (the drafter's
    /// `fc` input order).
    pub captured: Vec<f32>,
}

/// What the routed experts of a mixture-of-experts target cost one forward: per MoE
/// layer the union of its rows' experts, summed over the layers. On a file larger than
/// memory these are the bytes a forward may have to read from disk, and a verify of n
/// tokens reads the union of what its tokens route to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Routed {
    /// Distinct (layer, expert) pairs the rows were routed to.
    pub experts: u64,
    /// Their weight bytes.
    pub bytes: u64,
}

impl std::ops::AddAssign for Routed {
    fn add_assign(&mut self, o: Routed) {
        self.experts += o.experts;
        self.bytes += o.bytes;
    }
}

/// A target model's session: its weights (shared) and one sequence's state.
pub trait Target {
    /// Hidden size, layers, vocabulary.
    fn shape(&self) -> TargetShape;
    /// Positions this session can hold (sized from its request, within the context).
    fn capacity(&self) -> usize;
    /// Positions held (committed and tentative).
    fn len(&self) -> usize;
    /// True when nothing is held.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Bytes one [`Target::forward`] of `rows` tokens holds at its peak besides the
    /// weights and the session's cache (activations, `captures` layers' features, logits).
    fn step_bytes(&self, rows: usize, logits: Logits, captures: usize) -> u64;
    /// Runs `tokens` at positions `len()..len() + n`, appending them tentatively and
    /// capturing the outputs of layers `capture`. Fails, changing nothing, when a token is
    /// outside the vocabulary, a layer does not exist, or the positions exceed
    /// [`Target::capacity`].
    fn forward(&mut self, tokens: &[u32], capture: &[usize], logits: Logits) -> Result<Forward>;
    /// The positions no rollback can go below.
    fn committed(&self) -> usize;
    /// Makes positions `0..len()` permanent.
    fn commit(&mut self);
    /// Returns to `to` positions, `committed() <= to <= len()`; anything else is an error
    /// that changes nothing.
    fn rollback(&mut self, to: usize) -> Result<()>;
    /// [`Target::forward`] then [`Target::commit`]: the positions will not be undone, so
    /// a recurrent session keeps nothing to undo them (prefill, plain steps).
    fn forward_commit(
        &mut self,
        tokens: &[u32],
        capture: &[usize],
        logits: Logits,
    ) -> Result<Forward> {
        let f = self.forward(tokens, capture, logits)?;
        self.commit();
        Ok(f)
    }
    /// Whether rolling back costs more than moving a length (recurrent layers).
    fn recurrent(&self) -> bool {
        false
    }
    /// How the next forwards prepare to be undone (recurrent sessions; others ignore it).
    fn set_rollback(&mut self, _mode: Rollback) {}
    /// Bytes the session's state holds now (caches, recurrent state, undo data), where it
    /// reports them (0 otherwise).
    fn state_bytes(&self) -> u64 {
        0
    }
    /// What the last forward's routed experts cost ([`Routed`]); `None` for a target
    /// without routed experts.
    fn routed(&self) -> Option<Routed> {
        None
    }
    /// Token embeddings, `tokens.len() × hidden`.
    fn embed(&self, tokens: &[u32], out: &mut [f32]) -> Result<()>;
    /// The LM head applied to already-normed hidden states (`n × hidden` → `n × vocab`).
    fn lm_head(&self, hidden: &[f32], logits: &mut [f32]);
    /// The session as `Any`, for a model that forwards several of its sessions at once
    /// ([`TargetModel::forward_batch`]); `None` for sessions that cannot be batched.
    fn as_any_mut(&mut self) -> Option<&mut dyn std::any::Any> {
        None
    }
}

/// The rollback rule every session applies: `committed <= to <= len`.
pub(crate) fn check_rollback(committed: usize, len: usize, to: usize) -> Result<()> {
    if to < committed || to > len {
        return Err(crate::RuntimeError::Request(format!(
            "cannot roll back to position {to}: positions {committed}..={len} are reachable"
        )));
    }
    Ok(())
}

/// What every session is made from: one options value, whatever the architecture.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SessionOptions {
    /// Positions the session holds (at most the context; sized from the request).
    pub positions: usize,
    /// Uncommitted positions it must be able to undo at once (a speculative round's
    /// width); only recurrent targets keep anything for it.
    pub undo: usize,
    /// How attention is computed ([`Attention::F16`]: as llama.cpp's CPU flash attention
    /// does by default; targets whose attention is f32 only ignore it).
    pub attention: Attention,
}

/// A loaded target model of any architecture: weights loaded once and shared by every
/// session it makes. [`crate::models::open_target`] makes one from any checked file.
pub trait TargetModel: Send + Sync {
    /// `general.architecture`.
    fn arch(&self) -> &'static str;
    /// Hidden size, layers and vocabulary.
    fn shape(&self) -> TargetShape;
    /// The context it was trained for.
    fn context(&self) -> usize;
    /// The special tokens the file declares.
    fn special_tokens(&self) -> SpecialTokens;
    /// Bytes of weights one decode step reads.
    fn weight_bytes(&self) -> u64;
    /// Makes a packed copy of the LM head, for a drafter that borrows it: the drafter's
    /// products take dspark's own order, whose kernel reads packed tiles
    /// ([`dspark_quant::gemm::own_order`]); the target's own products read the copy too
    /// (the same bits). A no-op where the head already has one or its kernels read none.
    fn pack_lm_head(&self) -> Result<()> {
        Ok(())
    }
    /// A session on these weights, sized by `options`; refused (with the byte count) when
    /// the machine cannot hold it, or when its positions exceed the context.
    fn session(self: Arc<Self>, options: &SessionOptions) -> Result<Box<dyn Target + Send>>;
    /// Forwards of several sessions at once: each `(session, tokens)` gets what
    /// `session.forward(tokens, capture, logits)` alone gives it, bit for bit, and is
    /// changed as it would change it. A model that can run them as one forward over all
    /// their columns (the decoder targets: weights read once for every session) does; the
    /// default runs them one after the other.
    fn forward_batch(
        &self,
        batch: &mut [(&mut dyn Target, &[u32])],
        capture: &[usize],
        logits: Logits,
    ) -> Vec<Result<Forward>> {
        batch
            .iter_mut()
            .map(|(s, t)| s.forward(t, capture, logits))
            .collect()
    }
}

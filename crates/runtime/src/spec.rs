//! Greedy decoding, plain and speculative (`shared/spec/runtime-math.md` §4.2–4.4).
//!
//! The speculative loop: prefill with capture → draft a block after the anchor → verify
//! the anchor and the drafts in one target forward → accept the longest prefix of drafts
//! that equal the target's argmax, plus the target's next token (the bonus) → roll the
//! target back to the committed length and give the drafter the committed positions'
//! features. Because a batched target forward equals single-position forwards bit for bit,
//! the output equals [`greedy`]'s token for token.

use crate::dspark::Drafter;
use crate::error::Result;
use crate::target::Target;

/// Index of the largest logit (the lowest index among equals).
pub fn argmax(logits: &[f32]) -> u32 {
    logits.iter().enumerate().fold(
        0usize,
        |best, (j, &x)| if x > logits[best] { j } else { best },
    ) as u32
}

/// Counts of a speculative run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Stats {
    /// Draft–verify rounds.
    pub rounds: usize,
    /// `accepted[m]`: rounds in which m drafts were accepted.
    pub accepted: Vec<usize>,
}

impl Stats {
    /// Mean tokens committed per round (accepted drafts + the bonus token).
    pub fn mean_acceptance_length(&self) -> f64 {
        let total: usize = self
            .accepted
            .iter()
            .enumerate()
            .map(|(m, &n)| (m + 1) * n)
            .sum();
        total as f64 / self.rounds.max(1) as f64
    }
}

/// Truncates `out` after its first stop token or at `max_new`; true when it ended.
fn finish(out: &mut Vec<u32>, max_new: usize, stop: &[u32]) -> bool {
    if let Some(i) = out.iter().position(|t| stop.contains(t)) {
        out.truncate(i + 1);
        return true;
    }
    if out.len() >= max_new {
        out.truncate(max_new);
        return true;
    }
    false
}

/// Target-only greedy decoding of up to `max_new` tokens after `prompt`.
pub fn greedy(
    target: &mut dyn Target,
    prompt: &[u32],
    max_new: usize,
    stop: &[u32],
) -> Result<Vec<u32>> {
    let vocab = target.vocab_size();
    let f = target.forward(prompt, &[])?;
    let mut out = vec![argmax(&f.logits[f.logits.len() - vocab..])];
    while !finish(&mut out, max_new, stop) {
        let f = target.forward(&out[out.len() - 1..], &[])?;
        out.push(argmax(&f.logits));
    }
    Ok(out)
}

/// Greedy speculative decoding with `drafter`; returns the tokens and the statistics.
pub fn speculative(
    target: &mut dyn Target,
    drafter: &mut Drafter<'_>,
    prompt: &[u32],
    max_new: usize,
    stop: &[u32],
) -> Result<(Vec<u32>, Stats)> {
    let vocab = target.vocab_size();
    let capture = drafter.config.target_layer_ids.clone();
    let f = target.forward(prompt, &capture)?;
    drafter.add_context(&f.captured)?;
    let mut anchor = argmax(&f.logits[f.logits.len() - vocab..]);
    let mut out = vec![anchor];
    let mut stats = Stats::default();
    let width = capture.len() * target.hidden_size();
    while !finish(&mut out, max_new, stop) {
        let draft = drafter.draft(target, anchor)?;
        let committed = target.len();
        let mut verify = Vec::with_capacity(draft.tokens.len() + 1);
        verify.push(anchor);
        verify.extend(&draft.tokens);
        let f = target.forward(&verify, &capture)?;
        let targets: Vec<u32> = f.logits.chunks_exact(vocab).map(argmax).collect();
        let m = draft
            .tokens
            .iter()
            .zip(&targets)
            .take_while(|(d, t)| d == t)
            .count();
        let bonus = targets[m];
        // Commit the anchor and m drafts; their features go to the drafter.
        target.truncate(committed + m + 1);
        drafter.add_context(&f.captured[..(m + 1) * width])?;
        out.extend(&draft.tokens[..m]);
        out.push(bonus);
        anchor = bonus;
        stats.rounds += 1;
        if stats.accepted.len() <= m {
            stats.accepted.resize(m + 1, 0);
        }
        stats.accepted[m] += 1;
    }
    Ok((out, stats))
}

//! Greedy decoding, plain and speculative (`shared/spec/runtime-math.md` §4.2–4.4).
//!
//! The speculative loop: prefill with capture → draft a block after the anchor → verify
//! the anchor and the drafts in one target forward → accept the longest prefix of drafts
//! that equal the target's argmax, plus the target's next token (the bonus) → roll the
//! target back to the committed length and give the drafter the committed positions'
//! features. Because a batched target forward equals single-position forwards bit for bit,
//! the output equals [`greedy`]'s token for token.

use std::time::{Duration, Instant};

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

/// Counts and times of a run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Stats {
    /// Draft–verify rounds (0 for plain decoding).
    pub rounds: usize,
    /// `accepted[m]`: rounds in which m drafts were accepted.
    pub accepted: Vec<usize>,
    /// Time in target forwards (prefill included).
    pub target_time: Duration,
    /// Time in the drafter (context and drafting).
    pub draft_time: Duration,
    /// Wall time of the whole run.
    pub total_time: Duration,
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

/// One round, as `--trace` records it.
#[derive(Clone, Debug, PartialEq)]
pub struct Round {
    /// Position of the anchor.
    pub position: usize,
    /// The anchor token.
    pub anchor: u32,
    /// Drafted tokens.
    pub drafted: Vec<u32>,
    /// Their confidences (empty without a confidence head).
    pub confidences: Vec<f32>,
    /// Drafts verified by the target.
    pub verified: usize,
    /// Drafts accepted.
    pub accepted: usize,
    /// Tokens committed this round (accepted drafts, then the bonus).
    pub committed: Vec<u32>,
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
    greedy_timed(target, prompt, max_new, stop).map(|(out, _)| out)
}

/// [`greedy`], with its time in the target.
pub fn greedy_timed(
    target: &mut dyn Target,
    prompt: &[u32],
    max_new: usize,
    stop: &[u32],
) -> Result<(Vec<u32>, Stats)> {
    let start = Instant::now();
    let vocab = target.vocab_size();
    let f = target.forward(prompt, &[])?;
    let mut out = vec![argmax(&f.logits[f.logits.len() - vocab..])];
    while !finish(&mut out, max_new, stop) {
        let f = target.forward(&out[out.len() - 1..], &[])?;
        out.push(argmax(&f.logits));
    }
    let total = start.elapsed();
    Ok((
        out,
        Stats {
            target_time: total,
            total_time: total,
            ..Stats::default()
        },
    ))
}

/// Greedy speculative decoding with `drafter`; returns the tokens and the statistics.
pub fn speculative(
    target: &mut dyn Target,
    drafter: &mut Drafter<'_>,
    prompt: &[u32],
    max_new: usize,
    stop: &[u32],
) -> Result<(Vec<u32>, Stats)> {
    speculative_traced(target, drafter, prompt, max_new, stop, &mut |_| {})
}

/// [`speculative`], calling `on_round` after every round.
pub fn speculative_traced(
    target: &mut dyn Target,
    drafter: &mut Drafter<'_>,
    prompt: &[u32],
    max_new: usize,
    stop: &[u32],
    on_round: &mut dyn FnMut(&Round),
) -> Result<(Vec<u32>, Stats)> {
    let start = Instant::now();
    drafter.check_target(target)?;
    let mut stats = Stats::default();
    let vocab = target.vocab_size();
    let capture = drafter.config.target_layer_ids.clone();
    let width = capture.len() * target.hidden_size();
    let t = Instant::now();
    let f = target.forward(prompt, &capture)?;
    stats.target_time += t.elapsed();
    let t = Instant::now();
    drafter.add_context(&f.captured)?;
    stats.draft_time += t.elapsed();
    let mut anchor = argmax(&f.logits[f.logits.len() - vocab..]);
    let mut out = vec![anchor];
    while !finish(&mut out, max_new, stop) {
        let t = Instant::now();
        let draft = drafter.draft(target, anchor)?;
        stats.draft_time += t.elapsed();
        let committed = target.len();
        let mut verify = Vec::with_capacity(draft.tokens.len() + 1);
        verify.push(anchor);
        verify.extend(&draft.tokens);
        let t = Instant::now();
        let f = target.forward(&verify, &capture)?;
        stats.target_time += t.elapsed();
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
        let t = Instant::now();
        drafter.add_context(&f.captured[..(m + 1) * width])?;
        stats.draft_time += t.elapsed();
        let mut done = draft.tokens[..m].to_vec();
        done.push(bonus);
        out.extend(&done);
        on_round(&Round {
            position: committed,
            anchor,
            verified: draft.tokens.len(),
            accepted: m,
            drafted: draft.tokens,
            confidences: draft.confidences,
            committed: done,
        });
        anchor = bonus;
        stats.rounds += 1;
        if stats.accepted.len() <= m {
            stats.accepted.resize(m + 1, 0);
        }
        stats.accepted[m] += 1;
    }
    stats.total_time = start.elapsed();
    Ok((out, stats))
}

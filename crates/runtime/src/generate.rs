//! Decoding, plain and speculative (`docs/RUNTIME-MATH.md` §4), greedy or sampled
//! ([`crate::sampling`]), with tokens handed to an [`Observer`] as they are committed, a
//! stop reason for every run, and statistics.
//!
//! The speculative loop: prefill with capture → draft a block after the anchor → verify
//! the anchor and the drafts in one target forward → accept drafts, plus one token from
//! the target (the bonus, or the residual sample that replaces the first rejected draft)
//! → roll the target back to the committed length, commit, and give the drafter the
//! committed positions' features. Greedy, a draft is accepted when it equals the target's
//! argmax; because a batched target forward equals single-position forwards bit for bit,
//! the output equals [`autoregressive`]'s token for token. Sampled, a draft drawn from the
//! drafter's own distribution `q` is accepted with probability `min(1, p/q)` and the
//! output's law is the target's (§4.5). How many drafts a round verifies, and whether a
//! step drafts at all, is a [`Plan`]'s choice ([`crate::schedule`]); it changes the
//! speed, never the greedy tokens or the sampled law. Plain steps' features reach the
//! drafter in one batch before it next drafts.
//!
//! Both loops prefill in chunks of [`PREFILL_CHUNK`] positions (llama.cpp's micro-batches)
//! and poll [`Observer::interrupted`] between chunks and steps, so an interrupt
//! is honoured within one step; what was generated until then is kept.

use std::time::Instant;

use serde::Serialize;

use crate::error::{Result, RuntimeError};
use crate::models::dspark::DraftSession;
use crate::sampling::{judge, Sampler, Sampling, Stream, Verdict};
use crate::schedule::{Planner, Schedule};
use crate::target::{Logits, Rollback, Target};

/// Positions per prefill forward: llama.cpp's default micro-batch (`n_ubatch`, 512), so a
/// prompt is split into forwards of the sizes llama.cpp splits it into, and the paths it
/// picks by a forward's size (its tiled flash attention from 64 positions,
/// [`crate::nn::decoder`]) are followed bit for bit. An interrupt is seen between chunks.
pub const PREFILL_CHUNK: usize = 512;

/// Bytes of plain steps' features a speculative run keeps before handing them to the
/// drafter in one batch (it takes them before it drafts in any case): 8 MiB, a few hundred
/// positions of a Qwen3-0.6B-sized target's captures, 58 of Kimi K3's.
pub const PENDING_BYTES: usize = 8 << 20;

/// Index of the largest logit (the lowest index among equals; NaN never wins): what a scan
/// keeping the first value that is greater than every one before it finds (also when the
/// first logit is NaN: then nothing is greater, and it is 0).
///
/// In two vectorizable passes (the scan's chain of compares took 90 µs over 163,840 logits
/// on a Zen 4 core, these 21): the largest value, then the first index holding it. The largest is taken in 16 lanes, each keeping its first value, then
/// a greater one (so NaN never enters, as in the scan); the first index equal to it is the
/// scan's, since the scan moves to an index exactly when its value exceeds all before it.
/// Equal here counts -0 and +0 alike, as `>` does.
pub fn argmax(logits: &[f32]) -> u32 {
    const LANES: usize = 16;
    let Some(&first) = logits.first() else {
        return 0;
    };
    if first.is_nan() {
        return 0;
    }
    let mut lanes = [first; LANES];
    let chunks = logits.chunks_exact(LANES);
    let rest = chunks.remainder();
    for chunk in chunks {
        for (lane, &x) in lanes.iter_mut().zip(chunk) {
            if x > *lane {
                *lane = x;
            }
        }
    }
    let largest = lanes
        .iter()
        .chain(rest)
        .fold(first, |m, &x| if x > m { x } else { m });
    // The first group of 16 holding it (each group compared whole), then its place there.
    let group = logits
        .chunks(LANES)
        .position(|c| c.iter().fold(false, |found, &x| found | (x == largest)))
        .unwrap_or(0);
    let at = logits[group * LANES..]
        .iter()
        .position(|&x| x == largest)
        .unwrap_or(0);
    (group * LANES + at) as u32
}

/// [`argmax`] of logits that must all be finite: the target's at `position` (a NaN or
/// infinite logit means its weights overflow, and every token would come out as 0).
fn pick(logits: &[f32], position: usize) -> Result<u32> {
    if let Some(j) = logits.iter().position(|x| !x.is_finite()) {
        return Err(RuntimeError::NonFinite(format!(
            "{}: logit {j} is {}",
            target_logits(position),
            logits[j]
        )));
    }
    Ok(argmax(logits))
}

/// How a run chooses the target's tokens: argmax, or samples with uniforms keyed by the
/// position they decide ([`crate::sampling`]).
struct Chooser(Option<Sampler>);

impl Chooser {
    fn new(sampling: Sampling) -> Result<Chooser> {
        Ok(Chooser(if sampling.is_greedy() {
            None
        } else {
            Some(Sampler::new(sampling)?)
        }))
    }

    /// The token for position `position + 1` from the target's logits at `position`.
    fn token(&mut self, logits: &[f32], position: usize) -> Result<u32> {
        match &mut self.0 {
            None => pick(logits, position),
            Some(s) => {
                let p = s.dist(logits, &|| target_logits(position))?;
                Ok(p.sample(s.uniform(Stream::Target, position + 1, 0)))
            }
        }
    }
}

fn target_logits(position: usize) -> String {
    format!("the target's logits at position {position} (its weights overflow f32)")
}

/// What to generate.
///
/// The sessions a run is given may already hold the first positions of `prompt` (an
/// earlier turn of the same conversation: after every run they hold its prompt and its
/// output but the last token, exactly); the run evaluates only the rest. The caller
/// vouches that the positions held are those tokens.
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    /// The prompt (at least one token beyond what the sessions hold).
    pub prompt: &'a [u32],
    /// Tokens to generate at most.
    pub max_tokens: usize,
    /// Tokens the prompt and the output may hold together (the context length, or less).
    pub context: usize,
    /// Tokens that end the output (included in it).
    pub stop: &'a [u32],
    /// The end-of-sequence token, which ends the output too (`None`: ignored).
    pub eos: Option<u32>,
    /// How each token is chosen from the target's logits (greedy by default).
    pub sampling: Sampling,
}

impl Request<'_> {
    /// Tokens the run may produce: `max_tokens`, or fewer when the context is shorter.
    pub fn budget(&self) -> usize {
        self.max_tokens
            .min(self.context.saturating_sub(self.prompt.len()))
    }

    /// Positions a target session needs to serve this request when it verifies up to
    /// `drafts` drafts per step (0 for plain decoding): the prompt, the output but its last
    /// token, and one block of tentative positions.
    pub fn positions(&self, drafts: usize) -> usize {
        (self.prompt.len() + self.budget()).saturating_sub(1) + drafts + 1
    }
}

/// The contexts a request must fit: the target's, and the drafter's when it records one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Contexts {
    /// The target's context.
    pub target: usize,
    /// The drafter's, when it records one (`context_length`).
    pub drafter: Option<usize>,
}

/// How a request asks for its context.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ContextAsk {
    /// Prompt tokens.
    pub prompt: usize,
    /// Tokens to generate at most.
    pub max_tokens: usize,
    /// A context shorter than the models' (`None`: the models').
    pub context: Option<usize>,
    /// When the prompt and `max_tokens` exceed the context, stop at the context instead
    /// of refusing.
    pub stop_at_context: bool,
}

/// The context a request runs in — the one rule every command and the server apply: the
/// models' context is the smaller of the target's and the drafter's; a requested context
/// may not exceed it; the prompt must leave room for one token; and unless
/// `stop_at_context`, the prompt and `max_tokens` must fit. Anything else is a
/// [`RuntimeError::Context`] saying which limit and whose, refused before any work.
pub fn fit_context(models: Contexts, ask: &ContextAsk) -> Result<usize> {
    let (limit, whose) = match models.drafter {
        Some(d) if d < models.target => (d, "drafter"),
        _ => (models.target, "target"),
    };
    let (context, whose) = match ask.context {
        Some(c) if c > limit => {
            return Err(RuntimeError::Context(format!(
                "a context of {c} exceeds the {whose}'s context of {limit} tokens"
            )))
        }
        Some(c) => (c, "the one asked for".to_string()),
        None => (limit, format!("the {whose}'s")),
    };
    let wanted = ask.prompt.saturating_add(ask.max_tokens);
    if wanted > context && !ask.stop_at_context {
        return Err(RuntimeError::Context(format!(
            "the prompt ({} tokens) and the {} tokens asked for need {wanted} positions, beyond the context of {context} tokens ({whose})",
            ask.prompt, ask.max_tokens
        )));
    }
    if ask.prompt >= context {
        return Err(RuntimeError::Context(format!(
            "the prompt ({} tokens) leaves no room in the context of {context} tokens ({whose})",
            ask.prompt
        )));
    }
    Ok(context)
}

/// Why a run ended.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// `max_tokens` were generated.
    #[default]
    MaxTokens,
    /// The end-of-sequence token was generated.
    Eos,
    /// A stop token was generated.
    Stop,
    /// The prompt and the output filled the context.
    Context,
    /// The observer asked to stop (Ctrl-C).
    Interrupted,
}

/// One speculative round, as `--trace` records it (one JSON line each).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Round {
    /// Position of the anchor.
    pub position: usize,
    /// The anchor token.
    pub anchor: u32,
    /// Drafted tokens.
    pub drafted: Vec<u32>,
    /// Their confidences (empty without a confidence head).
    pub confidences: Vec<f32>,
    /// Drafts verified by the target (the first ones): as planned, or fewer near the end.
    pub verified: usize,
    /// Drafts the schedule planned to verify ([`crate::schedule`]).
    pub planned: usize,
    /// The plan's predicted tokens per second over verifying every draft (1 when the
    /// plan is to verify every draft).
    pub predicted_gain: f64,
    /// Drafts accepted.
    pub accepted: usize,
    /// Tokens committed this round (accepted drafts, then the bonus or the residual
    /// sample), after stop rules.
    pub committed: Vec<u32>,
    /// When sampling: `q(x_i)`, the drafter's probability of each verified draft.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub q: Vec<f64>,
    /// When sampling: `p(x_i)`, the target's probability of each verified draft given the
    /// drafts before it (rows after the first rejection only when the observer asks,
    /// [`Observer::wants_probabilities`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub p: Vec<f64>,
    /// A recurrent target's rollback option this round (`snapshots`, `replay`); absent
    /// for attention-only targets.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rollback: Option<&'static str>,
    /// The seconds that round's rollback and commit took (recurrent targets).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rollback_seconds: Option<f64>,
    /// The seconds the drafter took (the block and its context update).
    pub draft_seconds: f64,
    /// The seconds the verify forward took (`verified` + 1 tokens).
    pub verify_seconds: f64,
}

/// A step of a speculative run that did not draft (the schedule's gate), as `--trace`
/// records it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PlainStep {
    /// Position of the anchor.
    pub position: usize,
    /// The anchor token.
    pub anchor: u32,
    /// Always true: tells a plain step's trace line from a round's.
    pub plain: bool,
    /// The token committed (after stop rules: empty if cut).
    pub committed: Vec<u32>,
    /// The seconds the target's forward took.
    pub seconds: f64,
}

/// Wall time of a run, in seconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Seconds {
    /// The whole run.
    pub total: f64,
    /// Prompt evaluation (prefill, and the drafter's context for it).
    pub prompt: f64,
    /// Everything after the prompt.
    pub eval: f64,
    /// In target forwards (prefill included).
    pub target: f64,
    /// In the drafter (context and drafting).
    pub drafter: f64,
    /// Rolling a recurrent target back (ReplaySSM: restoring and replaying KDA state;
    /// 0 for attention-only targets, whose rollback moves a length).
    pub replay: f64,
    /// The rest (acceptance, bookkeeping, the observer).
    pub bookkeeping: f64,
}

/// Counts and times of a run, as `generate --json` prints them (`stats`).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Stats {
    /// Prompt tokens evaluated by this run (those the sessions already held excluded).
    pub prompt_tokens: usize,
    /// Prompt tokens the sessions already held when the run started (a conversation's
    /// earlier turns), not evaluated again.
    pub prompt_cached: usize,
    /// Tokens generated.
    pub generated: usize,
    /// Draft–verify rounds (0 for plain decoding).
    pub rounds: usize,
    /// Steps of a speculative run that did not draft (the schedule's gate): plain decode
    /// steps, not counted in `rounds`.
    pub plain_steps: usize,
    /// Mean tokens committed per round (accepted drafts + the bonus); 1 without rounds.
    pub mean_acceptance_length: f64,
    /// `acceptance_histogram[m]`: rounds in which m drafts were accepted.
    pub acceptance_histogram: Vec<usize>,
    /// Drafts verified, over all rounds.
    pub drafts_verified: usize,
    /// Drafts accepted, over all rounds.
    pub drafts_accepted: usize,
    /// Prompt tokens per second of prompt evaluation.
    pub prompt_tokens_per_second: f64,
    /// Tokens after the first per second of evaluation.
    pub eval_tokens_per_second: f64,
    /// Tokens generated per second of the whole run.
    pub tokens_per_second: f64,
    /// Where the time went.
    pub seconds: Seconds,
    /// Why the run ended.
    pub stop_reason: StopReason,
}

impl Stats {
    fn finish(&mut self, started: Instant, prompt_done: Option<Instant>) {
        let total = started.elapsed().as_secs_f64();
        let prompt = prompt_done.map_or(total, |p| (p - started).as_secs_f64());
        let s = &mut self.seconds;
        s.total = total;
        s.prompt = prompt;
        s.eval = (total - prompt).max(0.0);
        s.bookkeeping = (total - s.target - s.drafter - s.replay).max(0.0);
        let committed: usize = self
            .acceptance_histogram
            .iter()
            .enumerate()
            .map(|(m, &n)| (m + 1) * n)
            .sum();
        self.mean_acceptance_length = if self.rounds > 0 {
            committed as f64 / self.rounds as f64
        } else {
            1.0
        };
        let per = |n: usize, t: f64| if t > 0.0 { n as f64 / t } else { 0.0 };
        self.prompt_tokens_per_second = per(self.prompt_tokens, s.prompt);
        self.eval_tokens_per_second = per(self.generated.saturating_sub(1), s.eval);
        self.tokens_per_second = per(self.generated, s.total);
    }
}

/// Receives a run's progress.
pub trait Observer {
    /// Tokens just committed, in order (already cut by the stop rules).
    fn tokens(&mut self, _tokens: &[u32]) {}
    /// A speculative round, after its tokens.
    fn round(&mut self, _round: &Round) {}
    /// A plain step of a speculative run, after its token.
    fn plain_step(&mut self, _step: &PlainStep) {}
    /// Polled between steps: true stops the run (stop reason `interrupted`).
    fn interrupted(&self) -> bool {
        false
    }
    /// True when [`Round::p`] should hold the target's probability of every verified draft
    /// (the rows after a rejection cost a distribution each, which only a trace needs).
    fn wants_probabilities(&self) -> bool {
        false
    }
}

/// An observer that keeps nothing and never interrupts.
pub struct Quiet;

impl Observer for Quiet {}

/// A run's tokens and statistics.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    /// Generated tokens (the prompt excluded).
    pub tokens: Vec<u32>,
    /// Counts, times and the stop reason.
    pub stats: Stats,
}

/// The output so far and the rules that end it.
struct Output<'r> {
    tokens: Vec<u32>,
    req: &'r Request<'r>,
    budget: usize,
    stopped: Option<StopReason>,
}

impl<'r> Output<'r> {
    fn new(req: &'r Request<'r>) -> Output<'r> {
        Output {
            tokens: Vec::new(),
            req,
            budget: req.budget(),
            stopped: None,
        }
    }

    /// Appends `new` up to and including the first stop or EOS token and within the
    /// budget; returns what was kept.
    fn push(&mut self, new: &[u32]) -> &[u32] {
        let start = self.tokens.len();
        for &t in new {
            if self.stopped.is_some() {
                break;
            }
            self.tokens.push(t);
            if self.req.eos == Some(t) {
                self.stopped = Some(StopReason::Eos);
            } else if self.req.stop.contains(&t) {
                self.stopped = Some(StopReason::Stop);
            } else if self.tokens.len() >= self.budget {
                self.stopped = Some(if self.budget < self.req.max_tokens {
                    StopReason::Context
                } else {
                    StopReason::MaxTokens
                });
            }
        }
        &self.tokens[start..]
    }

    fn remaining(&self) -> usize {
        self.budget - self.tokens.len()
    }

    /// Starts the output with the token the prefill's last logits give, or records that
    /// the prefill was interrupted. Returns when the prompt was done.
    fn start(
        &mut self,
        prefilled: Option<Vec<f32>>,
        chooser: &mut Chooser,
        obs: &mut dyn Observer,
    ) -> Result<Option<Instant>> {
        match prefilled {
            None => {
                self.stopped = Some(StopReason::Interrupted);
                Ok(None)
            }
            Some(logits) => {
                let done = Instant::now();
                let first = chooser.token(&logits, self.req.prompt.len() - 1)?;
                obs.tokens(self.push(&[first]));
                Ok(Some(done))
            }
        }
    }

    /// True while the run goes on (an interrupt ends it here).
    fn going(&mut self, obs: &dyn Observer) -> bool {
        if self.stopped.is_none() && obs.interrupted() {
            self.stopped = Some(StopReason::Interrupted);
        }
        self.stopped.is_none()
    }

    /// The run's tokens and statistics.
    fn finish(self, mut stats: Stats, started: Instant, prompt_done: Option<Instant>) -> Outcome {
        stats.stop_reason = self.stopped.unwrap_or_default();
        stats.generated = self.tokens.len();
        stats.finish(started, prompt_done);
        Outcome {
            tokens: self.tokens,
            stats,
        }
    }
}

fn check_request(target: &dyn Target, req: &Request<'_>) -> Result<()> {
    if req.prompt.is_empty() {
        return Err(RuntimeError::Request(
            "the prompt is empty: generation needs at least one token".into(),
        ));
    }
    if req.budget() == 0 {
        return Err(RuntimeError::Request(format!(
            "nothing to generate: {} prompt tokens, {} tokens at most, a context of {}",
            req.prompt.len(),
            req.max_tokens,
            req.context
        )));
    }
    // Plain decoding needs every position but the last token's; drafts beyond the room
    // left are not verified, so a session of that size serves speculation too.
    let need = req.positions(0);
    if target.capacity() < need {
        return Err(RuntimeError::Request(format!(
            "the target session holds {} positions; this request needs {need}",
            target.capacity(),
        )));
    }
    // A session that holds positions continues them: the prompt must go beyond them,
    // and nothing tentative may be left.
    if target.len() >= req.prompt.len() || target.committed() != target.len() {
        return Err(RuntimeError::Request(format!(
            "the target session holds {} positions ({} committed); a request continues it only with a longer prompt",
            target.len(),
            target.committed()
        )));
    }
    Ok(())
}

/// Refuses a run whose per-step working memory (`bytes`, for `what`) the machine cannot
/// give, before anything is computed: the caches were checked when the sessions were
/// made, but logits over a large vocabulary for a whole block can be larger still.
fn check_step_memory(bytes: u64, what: &str) -> Result<()> {
    crate::memory::check_fits(bytes, &format!("the working memory of {what}"))
}

/// Prefills `prompt` in chunks; `with_features` receives each chunk's captured features,
/// its width and the seconds its forward took. Returns the last position's logits, or
/// `None` when interrupted.
fn prefill(
    target: &mut dyn Target,
    prompt: &[u32],
    capture: &[usize],
    stats: &mut Stats,
    obs: &dyn Observer,
    mut with_features: impl FnMut(&[f32], usize, f64, &mut Stats) -> Result<()>,
) -> Result<Option<Vec<f32>>> {
    let mut last = Vec::new();
    for chunk in prompt.chunks(PREFILL_CHUNK) {
        if obs.interrupted() {
            return Ok(None);
        }
        let t = Instant::now();
        // Prefill is never undone: a recurrent target keeps nothing to undo it. Its
        // products take llama.cpp's prompt order (`dspark_quant::tiled`), as its own
        // prompt processing does.
        let f = dspark_quant::gemm::prompt_order(|| {
            target.forward_commit(chunk, capture, Logits::Last)
        })?;
        let seconds = t.elapsed().as_secs_f64();
        stats.seconds.target += seconds;
        with_features(&f.captured, chunk.len(), seconds, stats)?;
        last = f.logits;
    }
    target.commit();
    Ok(Some(last))
}

/// Target-only decoding: greedy, or sampling as `req.sampling` says.
pub fn autoregressive(
    target: &mut dyn Target,
    req: &Request<'_>,
    obs: &mut dyn Observer,
) -> Result<Outcome> {
    check_request(target, req)?;
    let cached = target.len();
    let fresh = &req.prompt[cached..];
    let chunk = fresh.len().min(PREFILL_CHUNK);
    check_step_memory(
        target.step_bytes(chunk, Logits::Last, 0),
        &format!("a {chunk}-token prefill step"),
    )?;
    let started = Instant::now();
    let mut stats = Stats {
        prompt_tokens: fresh.len(),
        prompt_cached: cached,
        ..Stats::default()
    };
    let mut chooser = Chooser::new(req.sampling)?;
    let mut out = Output::new(req);
    let prefilled = prefill(target, fresh, &[], &mut stats, obs, |_, _, _, _| Ok(()))?;
    let prompt_done = out.start(prefilled, &mut chooser, obs)?;
    while out.going(obs) {
        let last = *out.tokens.last().expect("a token was generated");
        let t = Instant::now();
        let position = target.len();
        let f = target.forward_commit(&[last], &[], Logits::Last)?;
        stats.seconds.target += t.elapsed().as_secs_f64();
        obs.tokens(out.push(&[chooser.token(&f.logits, position)?]));
    }
    Ok(out.finish(stats, started, prompt_done))
}

/// Hands the drafter the `pending` features of plain steps (timed as drafter time).
fn feed(drafter: &mut DraftSession, pending: &mut Vec<f32>, stats: &mut Stats) -> Result<()> {
    if !pending.is_empty() {
        let t = Instant::now();
        drafter.add_context(pending)?;
        stats.seconds.drafter += t.elapsed().as_secs_f64();
        pending.clear();
    }
    Ok(())
}

/// Speculative sampling's acceptance of `drafts` (drawn from `proposals`) against the
/// verify forward's logit `rows` (row i: the target's logits after the anchor and drafts
/// `..i`, the anchor at position `anchor_at`): each draft in turn is accepted with
/// probability `min(1, p/q)`; the first rejected one is replaced by a sample of the
/// residual; when every draft is accepted the last row gives the bonus. Returns the drafts
/// accepted, the token after them, and `q(x_i)`, `p(x_i)` of the drafts (of every
/// verified one when `every_p`, else up to the first rejection).
fn accept_sampled(
    sampler: &mut Sampler,
    rows: &[&[f32]],
    drafts: &[u32],
    proposals: &[crate::sampling::Dist],
    anchor_at: usize,
    every_p: bool,
) -> Result<(usize, u32, Vec<f64>, Vec<f64>)> {
    let (mut q, mut p) = (
        Vec::with_capacity(drafts.len()),
        Vec::with_capacity(drafts.len()),
    );
    let mut decided = None;
    for (i, (&x, proposal)) in drafts.iter().zip(proposals).enumerate() {
        if decided.is_some() && !every_p {
            break;
        }
        let at = anchor_at + i;
        let target = sampler.dist(rows[i], &|| target_logits(at))?;
        q.push(proposal.prob(x));
        p.push(target.prob(x));
        if decided.is_none() {
            let u = sampler.uniform(Stream::Accept, at + 1, 0);
            let r = sampler.uniform(Stream::Residual, at + 1, 0);
            if let Verdict::Reject(t) = judge(&target, proposal, x, u, r) {
                decided = Some((i, t));
            }
        }
    }
    let (m, last) = match decided {
        Some(d) => d,
        None => {
            let n = drafts.len();
            let at = anchor_at + n;
            let target = sampler.dist(rows[n], &|| target_logits(at))?;
            (n, target.sample(sampler.uniform(Stream::Target, at + 1, 0)))
        }
    };
    Ok((m, last, q, p))
}

/// How a speculative run chooses the drafts each round verifies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plan {
    /// Fixed or adaptive ([`crate::schedule`]).
    pub schedule: Schedule,
    /// The most drafts a round verifies (`None`: every draft of a block).
    pub draft_max: Option<usize>,
    /// How a recurrent target undoes rejected drafts (`None`: the planner prices both
    /// per round, [`Planner::rollback`]); attention-only targets ignore it.
    pub rollback: Option<Rollback>,
}

impl Plan {
    /// Every draft of every block.
    pub const FIXED: Plan = Plan {
        schedule: Schedule::Fixed,
        draft_max: None,
        rollback: None,
    };

    /// A fresh schedule state for this plan with a drafter of `per_block` drafts a block.
    pub fn planner(&self, per_block: usize) -> Planner {
        Planner::new(
            self.schedule,
            self.draft_max.unwrap_or(per_block).min(per_block),
        )
    }
}

/// Speculative decoding with a drafter session (empty, for the same sequence), verifying
/// every draft of every block ([`Plan::FIXED`]): greedy, or speculative sampling as
/// `req.sampling` says.
pub fn speculative(
    target: &mut dyn Target,
    drafter: &mut DraftSession,
    req: &Request<'_>,
    obs: &mut dyn Observer,
) -> Result<Outcome> {
    speculative_with(target, drafter, req, Plan::FIXED, obs)
}

/// [`speculative`] with the drafts per round chosen by `plan`: greedy, the same tokens
/// whatever it chooses, at another speed; sampling, the same law of the output (the
/// tokens for a seed follow the rounds the plan makes).
pub fn speculative_with(
    target: &mut dyn Target,
    drafter: &mut DraftSession,
    req: &Request<'_>,
    plan: Plan,
    obs: &mut dyn Observer,
) -> Result<Outcome> {
    let mut planner = plan.planner(drafter.model().drafts_per_block());
    speculative_planned(target, drafter, req, plan, &mut planner, obs)
}

/// [`speculative_with`] with the schedule's state given: what `planner` learnt in earlier
/// runs (acceptance per depth, the costs of each step, the gate) goes on, and what this run
/// learns stays in it, so a server's slot pays the schedule's warm-up once, not per request.
/// `planner` must be [`Plan::planner`]'s for this plan and drafter.
pub fn speculative_planned(
    target: &mut dyn Target,
    drafter: &mut DraftSession,
    req: &Request<'_>,
    plan: Plan,
    planner: &mut Planner,
    obs: &mut dyn Observer,
) -> Result<Outcome> {
    let model = std::sync::Arc::clone(drafter.model());
    let cap = plan.planner(model.drafts_per_block()).max();
    if planner.max() != cap {
        return Err(RuntimeError::Request(format!(
            "the planner verifies up to {} drafts; this plan and drafter up to {cap}",
            planner.max()
        )));
    }
    check_request(target, req)?;
    if drafter.len() != target.len() || drafter.capacity() < target.capacity() {
        return Err(RuntimeError::Request(format!(
            "the drafter session holds {} positions ({} used); the target's holds {} ({} used)",
            drafter.capacity(),
            drafter.len(),
            target.capacity(),
            target.len()
        )));
    }
    let started = Instant::now();
    let cached = target.len();
    let fresh = &req.prompt[cached..];
    let mut stats = Stats {
        prompt_tokens: fresh.len(),
        prompt_cached: cached,
        ..Stats::default()
    };
    let capture = model.hparams().target_layer_ids.clone();
    let width = capture.len() * target.shape().hidden;
    let chunk = fresh.len().min(PREFILL_CHUNK);
    let block = model.hparams().block_size;
    let target_step = target
        .step_bytes(chunk, Logits::Last, capture.len())
        .max(target.step_bytes(block + 1, Logits::All, capture.len()));
    check_step_memory(
        target_step.saturating_add(model.step_bytes(drafter.capacity())),
        &format!("a speculative round (a block of {block}, logits for each row)"),
    )?;
    let mut out = Output::new(req);
    // The prefill's forwards seed the cost of verifying as many tokens (a short
    // calibration that costs nothing); the first chunk also pages the weights in.
    let mut chunks = 0;
    let prefilled = prefill(
        target,
        fresh,
        &capture,
        &mut stats,
        obs,
        |features, width, seconds, stats| {
            if chunks > 0 || fresh.len() <= PREFILL_CHUNK {
                planner.record_prefill(width, seconds);
            }
            chunks += 1;
            let t = Instant::now();
            drafter.add_context(features)?;
            stats.seconds.drafter += t.elapsed().as_secs_f64();
            Ok(())
        },
    )?;
    let mut chooser = Chooser::new(req.sampling)?;
    let prompt_done = out.start(prefilled, &mut chooser, obs)?;
    let vocab = target.shape().vocab;
    let recurrent = target.recurrent();
    planner.set_recurrent(recurrent);
    let every_p = obs.wants_probabilities();
    // Features of plain steps the drafter has not taken yet: they go to it in one batch
    // before it next drafts (a useless drafter then costs few context updates, each
    // batched), or when PENDING_BYTES have gathered.
    let mut pending: Vec<f32> = Vec::new();
    while out.going(obs) {
        let step_start = Instant::now();
        let anchor = *out.tokens.last().expect("a token was generated");
        let committed = target.len();
        if !planner.draft_now() {
            // A plain step: the anchor alone, its features kept for the drafter.
            let t = Instant::now();
            let f = target.forward_commit(&[anchor], &capture, Logits::Last)?;
            let forward_s = t.elapsed().as_secs_f64();
            stats.seconds.target += forward_s;
            pending.extend_from_slice(&f.captured[..width]);
            if pending.len() * 4 >= PENDING_BYTES {
                feed(drafter, &mut pending, &mut stats)?;
            }
            planner.record_plain(forward_s);
            stats.plain_steps += 1;
            let kept = out.push(&[chooser.token(&f.logits, committed)?]).to_vec();
            obs.tokens(&kept);
            obs.plain_step(&PlainStep {
                position: committed,
                anchor,
                plain: true,
                committed: kept,
                seconds: forward_s,
            });
            planner.record_plain_wall(step_start.elapsed().as_secs_f64());
            continue;
        }
        // Plain steps' cost, not this round's: timed apart from the draft.
        feed(drafter, &mut pending, &mut stats)?;
        debug_assert_eq!(
            drafter.len(),
            committed,
            "the drafter has every committed position"
        );
        let t = Instant::now();
        let draft = match &mut chooser.0 {
            None => drafter.draft(&*target, anchor)?,
            Some(sampler) => drafter.draft_sampled(&*target, anchor, sampler)?,
        };
        let mut drafter_s = t.elapsed().as_secs_f64();
        // Verify the planned drafts, only those that can still be committed and still fit
        // the session. Sampling admits drafts by a causal scan (a stopping rule that sees
        // only the drafts already admitted keeps the output's law).
        let room = target.capacity() - committed;
        let choice = match chooser.0 {
            None => planner.choose(&draft.confidences),
            Some(_) => planner.choose_causal(&draft.confidences),
        };
        let n = choice
            .planned
            .min(draft.tokens.len())
            .min(out.remaining() - 1)
            .min(room - 1);
        let mut verify = Vec::with_capacity(n + 1);
        verify.push(anchor);
        verify.extend(&draft.tokens[..n]);
        let mode = plan.rollback.unwrap_or_else(|| planner.rollback(n));
        target.set_rollback(mode);
        let t = Instant::now();
        let f = target.forward(&verify, &capture, Logits::All)?;
        let verify_s = t.elapsed().as_secs_f64();
        stats.seconds.target += verify_s;
        let rows: Vec<&[f32]> = f.logits.chunks_exact(vocab).collect();
        let (m, last, q, p) = match &mut chooser.0 {
            None => {
                let targets = rows
                    .iter()
                    .enumerate()
                    .map(|(i, row)| pick(row, committed + i))
                    .collect::<Result<Vec<u32>>>()?;
                let m = draft.tokens[..n]
                    .iter()
                    .zip(&targets)
                    .take_while(|(d, t)| d == t)
                    .count();
                (m, targets[m], Vec::new(), Vec::new())
            }
            Some(sampler) => accept_sampled(
                sampler,
                &rows,
                &draft.tokens[..n],
                &draft.proposals[..n],
                committed,
                every_p,
            )?,
        };
        let mut new = draft.tokens[..m].to_vec();
        new.push(last);
        let kept = out.push(&new).to_vec();
        // Commit the anchor and the kept tokens but the last (the next step's anchor):
        // the m accepted drafts, or fewer when a stop rule cut the round, so that the
        // sessions hold exactly the prompt and the output but its last token. Their
        // features go to the drafter.
        let keep = kept.len();
        let t = Instant::now();
        target.rollback(committed + keep)?;
        target.commit();
        let commit_s = t.elapsed().as_secs_f64();
        stats.seconds.replay += commit_s;
        if recurrent {
            planner.record_rollback(mode, n, m, verify_s, commit_s);
        }
        let t = Instant::now();
        drafter.add_context(&f.captured[..keep * width])?;
        drafter_s += t.elapsed().as_secs_f64();
        stats.seconds.drafter += drafter_s;
        planner.record(n, m, &draft.confidences, drafter_s, verify_s);
        obs.tokens(&kept);
        stats.rounds += 1;
        stats.drafts_verified += n;
        stats.drafts_accepted += m;
        if stats.acceptance_histogram.len() <= m {
            stats.acceptance_histogram.resize(m + 1, 0);
        }
        stats.acceptance_histogram[m] += 1;
        obs.round(&Round {
            position: committed,
            anchor,
            verified: n,
            planned: choice.planned,
            predicted_gain: choice.predicted_gain,
            accepted: m,
            drafted: draft.tokens,
            confidences: draft.confidences,
            committed: kept,
            q,
            p,
            rollback: recurrent.then_some(mode.name()),
            rollback_seconds: recurrent.then_some(commit_s),
            draft_seconds: drafter_s,
            verify_seconds: verify_s,
        });
        planner.record_round_wall(step_start.elapsed().as_secs_f64(), keep);
    }
    // The drafter takes the last plain steps' features too: the sessions end holding the
    // same positions, which a next turn of the conversation continues.
    feed(drafter, &mut pending, &mut stats)?;
    Ok(out.finish(stats, started, prompt_done))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The scan [`argmax`] stands for: the first value greater than every one before it.
    fn scan_argmax(logits: &[f32]) -> u32 {
        let mut best = 0;
        for (j, &x) in logits.iter().enumerate() {
            if x > logits[best] {
                best = j;
            }
        }
        best as u32
    }

    #[test]
    fn argmax_is_the_scans_index_whatever_the_values() {
        let mut rng = dspark_testkit::rng::SplitMix64(11);
        let specials = [
            f32::NAN,
            -f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            0.0,
            -0.0,
            f32::MAX,
            f32::MIN,
        ];
        for len in (0..70).chain([1000, 4096 + 5, 163_840]) {
            for case in 0..24 {
                let v: Vec<f32> = (0..len)
                    .map(|_| {
                        let r = rng.next_u64();
                        match case % 6 {
                            // Few distinct values: many ties, the largest among them.
                            0 => (r % 4) as f32,
                            // Specials sprinkled among normal values.
                            1 if r.is_multiple_of(7) => {
                                specials[(r >> 8) as usize % specials.len()]
                            }
                            // Only specials.
                            2 => specials[(r >> 8) as usize % specials.len()],
                            // Signed zeros and NaN only.
                            3 => [0.0, -0.0, f32::NAN][(r % 3) as usize],
                            _ => rng.normal(),
                        }
                    })
                    .collect();
                assert_eq!(argmax(&v), scan_argmax(&v), "len {len} case {case}: {v:?}");
            }
        }
        // The largest value's first occurrence, in the remainder past the last full lanes
        // and in the lanes; a NaN first is index 0.
        let mut v = vec![1.0f32; 35];
        v[34] = 2.0;
        assert_eq!(argmax(&v), 34);
        v[3] = 2.0;
        assert_eq!(argmax(&v), 3);
        v[0] = f32::NAN;
        assert_eq!(argmax(&v), 0);
    }

    fn ask(prompt: usize, max_tokens: usize, context: Option<usize>, stop: bool) -> ContextAsk {
        ContextAsk {
            prompt,
            max_tokens,
            context,
            stop_at_context: stop,
        }
    }

    fn refusal(m: Contexts, a: ContextAsk) -> String {
        match fit_context(m, &a) {
            Err(RuntimeError::Context(s)) => s,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_smaller_context_wins_and_every_limit_is_named() {
        let both = Contexts {
            target: 4096,
            drafter: Some(2048),
        };
        assert_eq!(fit_context(both, &ask(10, 20, None, false)).unwrap(), 2048);
        assert!(refusal(both, ask(10, 20, Some(3000), false))
            .contains("exceeds the drafter's context of 2048"));
        let target = Contexts {
            target: 4096,
            drafter: None,
        };
        assert!(refusal(target, ask(10, 20, Some(5000), false))
            .contains("exceeds the target's context of 4096"));
        assert!(refusal(target, ask(100, 4000, None, false))
            .contains("need 4100 positions, beyond the context of 4096"));
        assert_eq!(
            fit_context(target, &ask(100, 4000, None, true)).unwrap(),
            4096
        );
        assert!(refusal(target, ask(4096, 1, None, true))
            .contains("leaves no room in the context of 4096"));
        assert_eq!(
            fit_context(target, &ask(4095, 1, None, false)).unwrap(),
            4096
        );
        assert_eq!(
            fit_context(target, &ask(1, usize::MAX, None, true)).unwrap(),
            4096
        );
        let longer_drafter = Contexts {
            target: 512,
            drafter: Some(4096),
        };
        assert!(refusal(longer_drafter, ask(10, 20, Some(600), false))
            .contains("exceeds the target's context of 512"));
    }
}

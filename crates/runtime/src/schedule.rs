//! How many drafts a speculative round verifies, and whether to draft at all
//! (`docs/RUNTIME-MATH.md` §5.1 and §5.8).
//!
//! A verify forward of ℓ drafts costs more the more tokens it carries: on a small target
//! (compute-bound) almost in proportion, on a large one (memory-bound) a little. Verifying
//! the j-th draft is worth its survival `a_j` (the chance that drafts 1..=j are all
//! accepted), so the round that commits the most tokens per second verifies
//!
//! `ℓ* = argmax_ℓ E(ℓ) / (T_draft + T_verify(ℓ + 1))`, with `E(ℓ) = 1 + Σ_{j≤ℓ} a_j`,
//!
//! searched over every ℓ in `0..=max` (the cost is a staircase: a first-descent search would
//! stop on a shelf). The survivals are the products of this round's confidences (the
//! drafter's confidence head) calibrated against the acceptance observed in the run: per
//! depth, the confidences are scaled by observed / predicted acceptance, since the head is
//! trained for sampling at T = 1, not greedy matching (§3.3). A drafter without the head
//! uses the observed acceptance per depth alone. The costs are the run's own timings (the
//! median of the last [`COST_WINDOW`] per verify width, and of the drafter's — the
//! smaller of two while there are two — so one slow step on a busy machine cannot swing
//! them; linear between the widths measured and below them, flat above them). A trimmed length is used only when its predicted rate beats
//! verifying everything by [`MIN_GAIN`] (TensorRT-LLM's guard).
//!
//! Before drafting, a gate compares the best rate the history predicts with a plain decode
//! step's, `1 / T_verify(1)`: when drafting does not pay by [`MIN_GAIN`], the step is a
//! plain decode (its features still go to the drafter, in one batch before it next
//! drafts), so a useless drafter costs almost nothing. The predictions are checked
//! against what was realised: when the last [`REALISED_WINDOW`] rounds, timed whole
//! (drafting, verifying, undoing, feeding the drafter, bookkeeping), committed fewer
//! tokens per second than the last plain steps, timed whole, the gate shuts whatever the
//! predictions say, until probe rounds bring the realised rate back. The prefill's
//! forwards seed the costs of their widths ([`Planner::record_prefill`]); the warm-up
//! alternates plain steps with [`WARM_UP`] rounds (two timings of each, so that one slow
//! one cannot shut the gate for long), each round verifying what the costs measured so
//! far and the prior acceptance make best, at least one draft — never a whole block on
//! faith, which on a model read from disk costs several decode steps; while the gate is open a
//! plain step still comes every [`PLAIN_EVERY`] steps, so the cost drafting is judged
//! against stays current. While the gate stays shut, a probe round still drafts,
//! verifying at least one draft, after [`PROBE`] plain steps, then after twice as many each time it does not reopen the
//! gate, and at least as many as keep the extra time of every round since the gate shut
//! (the warm-up's included) within [`PROBE_BUDGET`] of the plain decoding since, up to
//! [`MAX_PROBE`] (once a round has shut the gate, only a probe's result reopens it, not
//! the predictions of costs that swung since); and every [`FULL_EVERY`]-th
//! round verifies the whole block, so the statistics never freeze and a drafter that never
//! pays costs a few per cent.
//!
//! Greedy verification accepts the same tokens whatever ℓ is and whether a step drafts
//! (the target's argmax decides each position), so the schedule changes only the speed,
//! never the output. Sampled verification ([`crate::sampling`]) keeps the target's law
//! under any length that is a stopping time of the drafts, and the global argmax is not
//! one (its later confidences see drafts it may not admit): there the length is a causal
//! scan ([`Planner::choose_causal`], §5.8 2(i)) that adds drafts while each raises the
//! predicted rate and stops at the first that does not. The gate and the forced lengths
//! (warm-up, probes, every [`FULL_EVERY`]-th round) depend on the history alone, so they
//! are stopping rules too.

use serde::Serialize;

use crate::target::Rollback;

/// How the number of drafts to verify is chosen.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Schedule {
    /// Per round, from the acceptance and the costs measured in the run (the module doc).
    #[default]
    Adaptive,
    /// Every draft, up to the cap.
    Fixed,
}

impl Schedule {
    /// Parses `adaptive` or `fixed` (the `--schedule` spellings).
    pub fn parse(s: &str) -> Option<Schedule> {
        match s {
            "adaptive" => Some(Schedule::Adaptive),
            "fixed" => Some(Schedule::Fixed),
            _ => None,
        }
    }
}

/// Minimum predicted gain of a trimmed length over verifying everything
/// (`docs/RUNTIME-MATH.md` §5.3: TensorRT-LLM's `confidence_min_predicted_gain` default).
pub const MIN_GAIN: f64 = 0.04;

/// Plain steps after which a probe round drafts although the gate is shut (doubling, up
/// to [`MAX_PROBE`], while probes do not reopen it).
pub const PROBE: u64 = 8;

/// The longest run of plain steps between probes.
pub const MAX_PROBE: u64 = 256;

/// The share of the plain decoding time failed rounds may cost (1 %): after one, the next
/// probe waits until the extra time of all the rounds since the gate shut (the warm-up's
/// among them) is at most this share of the plain steps since (doubling after [`PROBE`] as
/// long as that is longer; at most [`MAX_PROBE`]). So a drafter that never pays costs a
/// short run its warm-up and a long one about this share.
pub const PROBE_BUDGET: f64 = 0.01;

/// Every this many rounds one verifies the whole block, whatever the plan, so the
/// acceptance of deep positions is still observed.
pub const FULL_EVERY: u64 = 16;

/// Weight a round's acceptance keeps per round after it: the statistics follow the text
/// (about the last 20 rounds), not the whole run.
pub const MEMORY: f64 = 0.95;

/// The widest prefill forward that seeds a verify cost.
pub const MAX_SEED_WIDTH: usize = 64;

/// Weight of the newest timing in the rollback costs' exponential averages.
const SMOOTHING: f64 = 0.25;

/// Timings a cost keeps: each cost is the median of its last this many (one slow step
/// on a busy machine cannot swing it; a lasting change moves it within a few steps).
pub const COST_WINDOW: usize = 9;

/// While the gate is open, a plain step every this many steps, so that the cost of plain
/// decoding, against which drafting is judged, is never an old timing (the mirror of
/// the probes).
pub const PLAIN_EVERY: u64 = 32;

/// Rounds of the warm-up, each after a plain step.
pub const WARM_UP: u64 = 2;

/// Rounds (and plain steps) whose realised speed is compared: the last this many.
pub const REALISED_WINDOW: usize = 16;

/// Rounds the realised comparison needs before it can shut the gate.
pub const REALISED_MIN_ROUNDS: usize = 8;

/// The per-run state of a [`Schedule`]: acceptance and confidence sums per depth, and
/// measured costs.
#[derive(Clone, Debug)]
pub struct Planner {
    schedule: Schedule,
    max: usize,
    /// `reached[j - 1]`: rounds whose draft j was verified with drafts 1..j accepted
    /// (each round's weight decays by [`MEMORY`] per round after it).
    reached: Vec<f64>,
    /// `accepted[j - 1]`: of those, the rounds that accepted draft j too.
    accepted: Vec<f64>,
    /// `predicted[j - 1]`: of those, the sum of draft j's confidences.
    predicted: Vec<f64>,
    /// `verify[m - 1]`: seconds of a verify forward of m tokens, where measured (the
    /// median of `verify_samples[m - 1]`).
    verify: Vec<Option<f64>>,
    verify_samples: Vec<Window>,
    /// `prefill[m - 1]`: the fastest prefill forward of m tokens (a seed of the verify
    /// costs before a verify of that width is measured; it may be wider than a block).
    prefill: Vec<Option<f64>>,
    /// Seconds of the drafter per round (drafting and taking the committed features):
    /// the median of `draft_samples`.
    draft: Option<f64>,
    draft_samples: Window,
    /// The last rounds' whole wall-clock seconds and tokens committed, and the last plain
    /// steps' seconds, as they were realised (everything a round or a step costs, not
    /// only its forwards): the check on the predictions ([`Planner::realised_losing`]).
    realised_round_s: Window,
    realised_round_tokens: Window,
    realised_plain: Window,
    /// Steps so far: rounds and plain steps.
    steps: u64,
    /// Rounds so far.
    rounds: u64,
    /// The step of the last round.
    last_round: u64,
    /// The step of the last plain step.
    last_plain: u64,
    /// Plain steps after which the next probe drafts.
    probe_after: u64,
    /// Rounds in a row that left the gate shut.
    failures: u32,
    /// Seconds those rounds cost beyond plain steps for the tokens they committed (by the
    /// estimates), and the plain steps since the first of them: the probe budget's books.
    debt: f64,
    plain_while_shut: u64,
    /// Seconds the last round took (drafter and verify) and the tokens it committed.
    last_cost: (f64, usize),
    /// What undoing rejected drafts costs a recurrent target.
    rollback: RollbackCosts,
}

/// The measured cost of each way a recurrent target undoes rejected drafts
/// (`docs/RUNTIME-MATH.md` §5.8, `T_commit`): per verify width, the verify forward's
/// seconds under each (option A writes every position's state to its own buffer), and
/// the seconds per position a replay (option C) takes.
#[derive(Clone, Debug, Default)]
struct RollbackCosts {
    /// Whether the target is recurrent (else nothing is priced).
    recurrent: bool,
    /// `snapshots[l]`, `replay[l]`: verify seconds of a round of `l` drafts under A, C.
    snapshots: Vec<Option<f64>>,
    replay: Vec<Option<f64>>,
    /// Seconds per replayed position (restore and recurrence steps, every KDA layer).
    per_step: Option<f64>,
    /// Seconds of a commit under A (picking a buffer).
    commit_snapshots: Option<f64>,
}

/// What the plan was for a step, as the trace records it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Choice {
    /// Drafts planned (before the end of the budget or the session trims them).
    pub planned: usize,
    /// Predicted committed tokens per second of the plan over verifying everything (1 for
    /// a forced or fixed choice).
    pub predicted_gain: f64,
}

impl Planner {
    /// A planner verifying at most `max` drafts per round.
    pub fn new(schedule: Schedule, max: usize) -> Planner {
        Planner {
            schedule,
            max,
            reached: vec![0.0; max],
            accepted: vec![0.0; max],
            predicted: vec![0.0; max],
            verify: vec![None; max + 1],
            verify_samples: vec![Window::new(COST_WINDOW); max + 1],
            prefill: Vec::new(),
            draft: None,
            draft_samples: Window::new(COST_WINDOW),
            realised_round_s: Window::new(REALISED_WINDOW),
            realised_round_tokens: Window::new(REALISED_WINDOW),
            realised_plain: Window::new(REALISED_WINDOW),
            steps: 0,
            rounds: 0,
            last_round: 0,
            last_plain: 0,
            probe_after: PROBE,
            failures: 0,
            debt: 0.0,
            plain_while_shut: 0,
            last_cost: (0.0, 0),
            rollback: RollbackCosts {
                snapshots: vec![None; max + 1],
                replay: vec![None; max + 1],
                ..RollbackCosts::default()
            },
        }
    }

    /// Prices rollbacks: the target is recurrent (ReplaySSM), so a rejected draft costs
    /// more than moving a length.
    pub fn set_recurrent(&mut self, recurrent: bool) {
        self.rollback.recurrent = recurrent;
    }

    /// Positions a replay re-runs on average after verifying `l` drafts: `m + 1` when
    /// `m < l` drafts are accepted (all accepted: nothing to undo), by the observed
    /// survivals.
    fn replayed(&self, l: usize) -> f64 {
        let a = self.survivals(&[]);
        let at = |j: usize| if j == 0 { 1.0 } else { a[j - 1] };
        (0..l.min(a.len()))
            .map(|m| (at(m) - at(m + 1)) * (m + 1) as f64)
            .sum()
    }

    /// Expected seconds each rollback option adds to a round of `l` drafts, where both
    /// are known: `(snapshots, replay)`. A's cost is its verify's excess over C's, C's its
    /// expected replay.
    fn rollback_costs(&self, l: usize) -> Option<(f64, f64)> {
        let r = &self.rollback;
        let l = l.min(self.max);
        let (a, c) = (r.snapshots[l]?, r.replay[l]?);
        let replay = r.per_step.unwrap_or(0.0) * self.replayed(l);
        Some(((a - c).max(0.0) + r.commit_snapshots.unwrap_or(0.0), replay))
    }

    /// How a recurrent target should prepare a verify of `l` drafts to be undone: each
    /// option is tried once per width first (replay, then snapshots), then the one with the
    /// lower expected cost ([`Planner::record_rollback`] measures them). Any choice is
    /// exact; only the time differs.
    pub fn rollback(&self, l: usize) -> Rollback {
        let r = &self.rollback;
        let l = l.min(self.max);
        if !r.recurrent || r.replay[l].is_none() || l == 0 {
            return Rollback::Replay;
        }
        match self.rollback_costs(l) {
            None => Rollback::Snapshots,
            Some((a, c)) if a < c => Rollback::Snapshots,
            Some(_) => Rollback::Replay,
        }
    }

    /// Seconds a round of `l` drafts adds by undoing rejected drafts (0 for attention-only
    /// targets): the cheaper option's, or a replay's before snapshots are measured.
    fn commit_cost(&self, l: usize) -> f64 {
        if !self.rollback.recurrent {
            return 0.0;
        }
        match self.rollback_costs(l) {
            Some((a, c)) => a.min(c),
            None => self.rollback.per_step.unwrap_or(0.0) * self.replayed(l.min(self.max)),
        }
    }

    /// Records a round of a recurrent target: `verified` drafts verified under `mode` in
    /// `verify_s` seconds, `accepted` of them kept, the rollback and commit taking
    /// `commit_s`.
    pub fn record_rollback(
        &mut self,
        mode: Rollback,
        verified: usize,
        accepted: usize,
        verify_s: f64,
        commit_s: f64,
    ) {
        let l = verified.min(self.max);
        let r = &mut self.rollback;
        match mode {
            Rollback::Snapshots => {
                r.snapshots[l] = average(r.snapshots[l], verify_s);
                r.commit_snapshots = average(r.commit_snapshots, commit_s);
            }
            Rollback::Replay => {
                r.replay[l] = average(r.replay[l], verify_s);
                if accepted < verified {
                    r.per_step = average(r.per_step, commit_s / (accepted + 1) as f64);
                }
            }
        }
    }

    /// The most drafts a round verifies.
    pub fn max(&self) -> usize {
        self.max
    }

    /// Steps recorded so far (rounds and plain steps, over every run it planned).
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// The plan of a drafting round whose length the history alone sets (the whole block):
    /// a fixed schedule's, every [`FULL_EVERY`]-th round's after the warm-up.
    fn forced_round(&self) -> Option<Choice> {
        let full = self.schedule == Schedule::Fixed
            || self.max == 0
            || (self.rounds >= WARM_UP && self.rounds.is_multiple_of(FULL_EVERY));
        full.then_some(Choice {
            planned: self.max,
            predicted_gain: 1.0,
        })
    }

    /// The fewest drafts a round verifies: one in a warm-up round or a probe (a round
    /// drafted while the gate is shut), which must observe an acceptance, else none.
    fn least(&self) -> usize {
        usize::from(self.max > 0 && (self.rounds < WARM_UP || !self.gate_open()))
    }

    /// Whether drafting may go on without a probe: the last round left the history
    /// saying drafting pays ([`Planner::pays`]), and it still says so. Once a round has
    /// shut the gate, only a probe's result reopens it: the costs of a model read from
    /// disk swing with what the page cache holds (a plain step may cost twice what it
    /// cost a few steps before, next to a verify timed then), and predictions from costs
    /// timed apart must not buy rounds the probe budget does not allow.
    fn gate_open(&self) -> bool {
        self.failures == 0 && self.pays()
    }

    /// Whether the history says drafting pays: the best rate over lengths 1..=max beats a
    /// plain step's by [`MIN_GAIN`], and the rounds as they were realised did not lose to
    /// the plain steps as they were realised ([`Planner::realised_losing`]).
    fn pays(&self) -> bool {
        let history = self.survivals(&[]);
        let best = (1..=self.max)
            .map(|l| self.rate(&history, l))
            .fold(0.0, f64::max);
        best >= (1.0 + MIN_GAIN) * self.plain_rate() && !self.realised_losing()
    }

    /// True when the last rounds, as realised (their mean tokens over their median whole
    /// wall-clock time), committed fewer tokens per second than the last plain steps did
    /// (one over their median time): the predictions (forward times, calibrated
    /// acceptance) then missed a cost, and speculation stops until probes show it paying.
    /// Times by their medians, so one round or step slowed by a neighbour decides nothing;
    /// tokens by their mean, which is what a round yields. Needs [`REALISED_MIN_ROUNDS`]
    /// rounds and as many plain steps timed.
    pub fn realised_losing(&self) -> bool {
        if self.realised_round_s.len() < REALISED_MIN_ROUNDS
            || self.realised_plain.len() < REALISED_MIN_ROUNDS
        {
            return false;
        }
        match (
            self.realised_round_tokens.mean(),
            self.realised_round_s.median(),
            self.realised_plain.median(),
        ) {
            (Some(tokens), Some(round), Some(plain)) if round > 0.0 && plain > 0.0 => {
                tokens / round < 1.0 / plain
            }
            _ => false,
        }
    }

    /// Records a round's whole wall-clock seconds (drafting, verifying, undoing, the
    /// drafter's context, the bookkeeping) and the tokens it committed.
    pub fn record_round_wall(&mut self, seconds: f64, tokens: usize) {
        if seconds.is_finite() {
            self.realised_round_s.push(seconds);
            self.realised_round_tokens.push(tokens as f64);
        }
    }

    /// Records a plain step's whole wall-clock seconds.
    pub fn record_plain_wall(&mut self, seconds: f64) {
        self.realised_plain.push(seconds);
    }

    /// Whether to draft this step (false: a plain decode step), decided before drafting
    /// from the history alone (the gate), or because a probe is due. The warm-up: a plain
    /// step (measuring one), then a round (measuring the drafter and a verify), [`WARM_UP`]
    /// times.
    pub fn draft_now(&self) -> bool {
        if self.schedule == Schedule::Fixed || self.max == 0 {
            return self.max > 0;
        }
        if self.steps < 2 * WARM_UP {
            return !self.steps.is_multiple_of(2);
        }
        if self.steps - self.last_plain > PLAIN_EVERY {
            return false;
        }
        self.gate_open() || self.steps - self.last_round > self.probe_after
    }

    /// Drafts to verify this round (at most [`Planner::max`]), given the round's
    /// confidences (empty without a confidence head); every [`FULL_EVERY`]-th round
    /// verifies the whole block.
    pub fn choose(&self, confidences: &[f32]) -> Choice {
        if let Some(forced) = self.forced_round() {
            return forced;
        }
        let a = self.survivals(confidences);
        let best = (self.least()..=self.max)
            .max_by(|&x, &y| {
                self.rate(&a, x)
                    .total_cmp(&self.rate(&a, y))
                    .then(y.cmp(&x))
            })
            .unwrap_or(self.max);
        let all = self.rate(&a, self.max);
        let gain = |l: usize| {
            if all > 0.0 {
                self.rate(&a, l) / all
            } else {
                1.0
            }
        };
        if best < self.max && gain(best) < 1.0 + MIN_GAIN {
            Choice {
                planned: self.max,
                predicted_gain: 1.0,
            }
        } else {
            Choice {
                planned: best,
                predicted_gain: gain(best),
            }
        }
    }

    /// [`Planner::choose`] for sampled verification (docs/RUNTIME-MATH.md §5.8 2(i)): admit drafts
    /// one by one while one more raises the predicted rate, stop at the first that does
    /// not; no guard. Whether draft j is admitted depends on confidences up to j, which
    /// see drafts up to j − 1 only: the length is a stopping time of the drafts, so the
    /// output keeps the target's law (a global argmax would look at later drafts).
    pub fn choose_causal(&self, confidences: &[f32]) -> Choice {
        if let Some(forced) = self.forced_round() {
            return forced;
        }
        let a = self.survivals(confidences);
        let mut l = self.least();
        while l < self.max && self.rate(&a, l + 1) > self.rate(&a, l) {
            l += 1;
        }
        let all = self.rate(&a, self.max);
        Choice {
            planned: l,
            predicted_gain: if all > 0.0 {
                self.rate(&a, l) / all
            } else {
                1.0
            },
        }
    }

    /// Records a round that verified `verified` drafts (whose confidences were
    /// `confidences`, empty without a head) and accepted `accepted` of them, with the
    /// drafter's and the verify forward's seconds.
    pub fn record(
        &mut self,
        verified: usize,
        accepted: usize,
        confidences: &[f32],
        drafter_s: f64,
        verify_s: f64,
    ) {
        let verified = verified.min(self.max);
        let accepted = accepted.min(verified);
        for sums in [&mut self.reached, &mut self.accepted, &mut self.predicted] {
            sums.iter_mut().for_each(|x| *x *= MEMORY);
        }
        // Draft j was reached when drafts 1..j were accepted: j <= accepted + 1.
        for j in 1..=verified.min(accepted + 1) {
            self.reached[j - 1] += 1.0;
            self.predicted[j - 1] += confidences.get(j - 1).map_or(0.5, |&c| f64::from(c));
            if j <= accepted {
                self.accepted[j - 1] += 1.0;
            }
        }
        self.verify[verified] = self.verify_samples[verified].push(verify_s).estimate();
        self.draft = self.draft_samples.push(drafter_s).estimate();
        self.last_round = self.steps;
        self.steps += 1;
        self.rounds += 1;
        // What such a round costs, by the estimates (not this round's own timings, which a
        // neighbour may have slowed): the back-off prices the next probe with it.
        self.last_cost = (
            self.draft.unwrap_or(drafter_s) + self.verify_cost(verified + 1),
            accepted + 1,
        );
        self.failures = if self.pays() { 0 } else { self.failures + 1 };
        self.back_off();
    }

    /// Sets the plain steps before the next probe: [`PROBE`] while the gate is open; after
    /// `k` rounds in a row that left it shut, `PROBE · 2^(k−1)`, or more when the extra
    /// time of those `k` rounds over plain steps is more than [`PROBE_BUDGET`] of the
    /// plain steps since the first of them and those to wait; at most [`MAX_PROBE`].
    fn back_off(&mut self) {
        if self.failures == 0 {
            self.probe_after = PROBE;
            self.debt = 0.0;
            self.plain_while_shut = 0;
            return;
        }
        let plain = self.verify_cost(1);
        let (cost, tokens) = self.last_cost;
        let extra = cost - tokens as f64 * plain;
        if extra.is_finite() {
            self.debt += extra.max(0.0);
        }
        let budget = if plain > 0.0 {
            ((self.debt / (PROBE_BUDGET * plain)).ceil() as u64)
                .saturating_sub(self.plain_while_shut)
        } else {
            0
        };
        let doubled = PROBE << (self.failures - 1).min(16);
        self.probe_after = doubled.max(budget).min(MAX_PROBE);
    }

    /// Records a prefill forward of `width` positions that took `seconds`: the fastest of
    /// each width seeds the verify cost of that width until one is measured (a prefill
    /// computes one row of logits where a verify computes all, so the seed is a little
    /// low). Widths beyond [`MAX_SEED_WIDTH`] are ignored.
    pub fn record_prefill(&mut self, width: usize, seconds: f64) {
        if width == 0 || width > MAX_SEED_WIDTH || !seconds.is_finite() {
            return;
        }
        if self.prefill.len() < width {
            self.prefill.resize(width, None);
        }
        let t = &mut self.prefill[width - 1];
        *t = Some(t.map_or(seconds, |old| old.min(seconds)));
    }

    /// Records a plain decode step of `forward_s` seconds.
    pub fn record_plain(&mut self, forward_s: f64) {
        self.verify[0] = self.verify_samples[0].push(forward_s).estimate();
        if self.failures > 0 {
            self.plain_while_shut += 1;
        }
        self.last_plain = self.steps;
        self.steps += 1;
    }

    /// Survivals `a_1..a_max` for this round: from the confidences calibrated per depth
    /// (observed acceptance / mean confidence), or from the observed acceptance alone
    /// (one accept and one reject of prior) when there are fewer confidences than depths.
    fn survivals(&self, confidences: &[f32]) -> Vec<f64> {
        let mut a = Vec::with_capacity(self.max);
        let mut survival = 1.0;
        for j in 0..self.max {
            let observed = (self.accepted[j] + 1.0) / (self.reached[j] + 2.0);
            let c = match confidences.get(j) {
                Some(&c) if confidences.len() >= self.max && c.is_finite() => {
                    let mean = (self.predicted[j] + 0.5) / (self.reached[j] + 1.0);
                    (f64::from(c) * observed / mean.max(1e-3)).clamp(0.0, 1.0)
                }
                _ => observed,
            };
            survival *= c;
            a.push(survival);
        }
        a
    }

    /// Predicted committed tokens per second verifying `l` drafts with survivals `a`
    /// (0 before any cost is measured).
    fn rate(&self, a: &[f64], l: usize) -> f64 {
        let cost = self.draft.unwrap_or(0.0) + self.verify_cost(l + 1) + self.commit_cost(l);
        if cost > 0.0 {
            expected(a, l) / cost
        } else {
            0.0
        }
    }

    /// Tokens per second of a plain decode step.
    fn plain_rate(&self) -> f64 {
        let t = self.verify_cost(1);
        if t > 0.0 {
            1.0 / t
        } else {
            f64::INFINITY
        }
    }

    /// `E(l) = 1 + Σ_{j≤l} a_j` from the observed acceptance alone: tokens a round
    /// verifying `l` drafts commits on average.
    pub fn expected_tokens(&self, l: usize) -> f64 {
        expected(&self.survivals(&[]), l)
    }

    /// Seconds of a verify forward of `m` tokens: measured; else linear between the nearest
    /// measured widths; below them, the line through the two lowest (at most the lowest's
    /// cost, at least 0); above them, the line through the two highest (at least the
    /// highest's cost), or in proportion to the width when only one is measured — a width
    /// never measured is priced as dear as the measured ones allow, so that a schedule
    /// tries it only when the acceptance justifies that price (on a model whose experts
    /// are read from disk, a verify costs several decode steps); 0 when none is measured.
    pub fn verify_cost(&self, m: usize) -> f64 {
        let at = |i: usize| {
            self.verify
                .get(i)
                .copied()
                .flatten()
                .or_else(|| self.prefill.get(i).copied().flatten())
        };
        let widths = self.verify.len().max(self.prefill.len());
        let i = m.clamp(1, self.max + 1) - 1;
        if let Some(t) = at(i) {
            return t;
        }
        let below = (0..i).rev().find_map(|k| at(k).map(|t| (k, t)));
        let above = (i + 1..widths).find_map(|k| at(k).map(|t| (k, t)));
        match (below, above) {
            (Some((k0, t0)), Some((k1, t1))) => t0 + (t1 - t0) * (i - k0) as f64 / (k1 - k0) as f64,
            (Some((k1, t1)), None) => match (0..k1).rev().find_map(|k| at(k).map(|t| (k, t))) {
                Some((k0, t0)) => t1 + ((t1 - t0) / (k1 - k0) as f64).max(0.0) * (i - k1) as f64,
                None => t1 * (i + 1) as f64 / (k1 + 1) as f64,
            },
            (None, Some((k0, t0))) => match (k0 + 1..widths).find_map(|k| at(k).map(|t| (k, t))) {
                Some((k1, t1)) => {
                    let slope = (t1 - t0) / (k1 - k0) as f64;
                    (t0 - slope * (k0 - i) as f64).clamp(0.0, t0)
                }
                None => t0,
            },
            (None, None) => 0.0,
        }
    }
}

/// `E(l) = 1 + Σ_{j≤l} a_j` for survivals `a`.
fn expected(a: &[f64], l: usize) -> f64 {
    1.0 + a[..l.min(a.len())].iter().sum::<f64>()
}

/// The last few timings of one cost: a ring of at most its capacity (at most
/// [`Window::MAX`], so that a median sorts a copy on the stack).
#[derive(Clone, Debug)]
struct Window {
    samples: std::collections::VecDeque<f64>,
    cap: usize,
}

impl Window {
    const MAX: usize = 16;

    fn new(cap: usize) -> Window {
        assert!((1..=Window::MAX).contains(&cap), "window of {cap}");
        Window {
            samples: std::collections::VecDeque::with_capacity(cap),
            cap,
        }
    }

    /// Adds `x` (a finite value; others are ignored), dropping the oldest beyond the
    /// capacity.
    fn push(&mut self, x: f64) -> &Self {
        if x.is_finite() {
            if self.samples.len() == self.cap {
                self.samples.pop_front();
            }
            self.samples.push_back(x);
        }
        self
    }

    fn len(&self) -> usize {
        self.samples.len()
    }

    /// A cost's estimate: the median, or the smaller of two (a slow step only adds time:
    /// of two timings, the smaller is the better guess).
    fn estimate(&self) -> Option<f64> {
        match self.samples.len() {
            2 => Some(self.samples[0].min(self.samples[1])),
            _ => self.median(),
        }
    }

    /// The median (the mean of the middle two for an even count).
    fn median(&self) -> Option<f64> {
        let n = self.samples.len();
        if n == 0 {
            return None;
        }
        let mut v = [0.0; Window::MAX];
        for (slot, &x) in v.iter_mut().zip(&self.samples) {
            *slot = x;
        }
        let v = &mut v[..n];
        v.sort_unstable_by(f64::total_cmp);
        Some(if n % 2 == 1 {
            v[n / 2]
        } else {
            0.5 * (v[n / 2 - 1] + v[n / 2])
        })
    }

    fn mean(&self) -> Option<f64> {
        let n = self.samples.len();
        (n > 0).then(|| self.samples.iter().sum::<f64>() / n as f64)
    }
}

/// An exponential average's next value.
fn average(old: Option<f64>, new: f64) -> Option<f64> {
    Some(old.map_or(new, |o| o + SMOOTHING * (new - o)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A planner past its warm-up with verify costs `cost(m)`, drafts accepted with
    /// conditional probability `c` at every depth (as expected counts, confidences equal
    /// to `c`) and drafting costing `draft`.
    fn planner(max: usize, cost: impl Fn(usize) -> f64, c: f64, draft: f64) -> Planner {
        let mut p = Planner::new(Schedule::Adaptive, max);
        for m in 1..=max + 1 {
            p.verify[m - 1] = Some(cost(m));
        }
        let mut reach = 1000.0;
        for j in 0..max {
            p.reached[j] = reach;
            p.accepted[j] = reach * c;
            p.predicted[j] = reach * c;
            reach *= c;
        }
        p.draft = Some(draft);
        p.rounds = WARM_UP + 1;
        p.steps = 2 * WARM_UP + 1;
        p.last_plain = p.steps - 1;
        p
    }

    /// Uniform values in [0, 1) from the workspace's seeded generator.
    fn unit(seed: u64) -> impl FnMut() -> f32 {
        let mut rng = dspark_testkit::rng::SplitMix64(seed);
        move || (rng.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }

    fn rate(p: &Planner, l: usize) -> f64 {
        p.rate(&p.survivals(&[]), l)
    }

    #[test]
    fn a_flat_verify_cost_with_full_acceptance_verifies_everything() {
        let p = planner(8, |_| 1.0, 1.0, 0.1);
        assert!(p.draft_now());
        assert_eq!(p.choose(&[]).planned, 8);
        assert_eq!(p.choose(&[1.0; 8]).planned, 8);
    }

    #[test]
    fn a_verify_cost_per_token_never_drafts() {
        // Each token costs a whole forward (the ds4 lesson, docs/RUNTIME-MATH.md §5.7): drafting
        // never beats a plain step, whatever the acceptance.
        for c in [0.3, 0.9, 1.0] {
            let p = planner(8, |m| m as f64, c, 0.2);
            assert!(!p.draft_now(), "c {c}");
        }
        // A round drafted anyway is a probe: it verifies the fewest drafts that observe an
        // acceptance, one.
        let p = planner(8, |m| m as f64, 0.3, 1.0);
        assert_eq!(p.choose(&[]).planned, 1);
    }

    #[test]
    fn a_steep_verify_cost_trims_the_block() {
        // Decode 25, +4 per token, acceptance 0.6 per depth: a short block pays best.
        let p = planner(8, |m| 25.0 + 4.0 * (m - 1) as f64, 0.6, 4.0);
        assert!(p.draft_now());
        let c = p.choose(&[]);
        assert!((1..8).contains(&c.planned), "{c:?}");
        for k in 0..=8 {
            assert!(rate(&p, c.planned) >= rate(&p, k), "ℓ {} vs {k}", c.planned);
        }
        assert!((c.predicted_gain - rate(&p, c.planned) / rate(&p, 8)).abs() < 1e-12);
    }

    #[test]
    fn the_chosen_drafts_follow_this_rounds_confidences() {
        let p = planner(8, |m| 25.0 + 4.0 * (m - 1) as f64, 0.6, 4.0);
        // Sure drafts are all worth verifying; doubtful ones none.
        assert_eq!(p.choose(&[1.0; 8]).planned, 8);
        assert_eq!(p.choose(&[0.05; 8]).planned, 0);
        // A confident start and a doubtful rest: verify the start.
        let mut c = [0.02f32; 8];
        c[..3].fill(1.0);
        assert_eq!(p.choose(&c).planned, 3);
    }

    #[test]
    fn confidences_are_calibrated_against_observed_acceptance() {
        // The head says 0.9 at every depth, the target accepts 0.45 of the time.
        let mut p = planner(4, |_| 1.0, 0.45, 0.0);
        for j in 0..4 {
            p.predicted[j] = p.reached[j] * 0.9;
        }
        let a = p.survivals(&[0.9; 4]);
        let want = [0.45f64, 0.45 * 0.45, 0.45f64.powi(3), 0.45f64.powi(4)];
        for (x, w) in a.iter().zip(want) {
            assert!((x - w).abs() < 0.02 * w, "{a:?}");
        }
        // Without confidences, the observed acceptance alone.
        let b = p.survivals(&[]);
        assert!((b[0] - 0.45).abs() < 0.01, "{b:?}");
    }

    #[test]
    fn the_guard_keeps_the_whole_block_unless_trimming_gains_four_percent() {
        // The ninth token makes ℓ = 7 a hair better than ℓ = 8.
        let mut p = planner(8, |m| 1.0 + 0.001 * m as f64, 0.9, 0.0);
        p.verify[8] = Some(1.10);
        assert!(rate(&p, 7) > rate(&p, 8) && rate(&p, 7) < 1.04 * rate(&p, 8));
        assert_eq!(p.choose(&[]).planned, 8);
        // Make the last token expensive enough to gain more than 4 %.
        p.verify[8] = Some(2.0);
        assert!(rate(&p, 7) > 1.04 * rate(&p, 8));
        let c = p.choose(&[]);
        assert!(c.planned < 8 && c.predicted_gain > 1.04, "{c:?}");
    }

    #[test]
    fn warm_up_and_probes_measure_what_the_plan_would_not() {
        let mut p = Planner::new(Schedule::Adaptive, 8);
        // The warm-up: a plain step, then a round verifying what the costs measured so far
        // price best, at least one draft: with one width measured, the others are priced
        // in proportion (each token a step), so the prior acceptance buys one draft.
        for _ in 0..WARM_UP {
            assert!(!p.draft_now(), "a plain step first");
            p.record_plain(1.0);
            assert!(p.draft_now(), "then a round");
            let l = p.choose(&[]).planned;
            assert_eq!(
                l, 1,
                "the warm-up verifies what its costs justify, not the block"
            );
            p.record(l, 0, &[], 1.0, 1.0 + l as f64);
        }
        // Nothing is ever accepted. A warm-up round of l drafts costs its draft (1 step) and
        // a verify of l + 1 tokens (l + 1 steps) for the one token it commits: l + 1 steps
        // more than plain decoding. The failed rounds' extra time, the warm-up's two
        // included, is kept within 1 % of the plain steps since the gate shut: the warm-up
        // owes 4 steps, 400 plain steps' budget, so the first probe waits the longest
        // allowed; then PROBE · 2^(k−1) after k failures when longer, up to MAX_PROBE;
        // every 16th round verifies the whole block.
        assert_eq!(p.probe_after, MAX_PROBE);
        let mut probes = Vec::new();
        // The books, kept here from the costs the test gives: extra steps of the failed
        // rounds so far, plain steps since the first of them.
        let (mut extra, mut plain_since) = (4.0, 1u64);
        let mut books = Vec::new();
        while p.steps < 2000 {
            if p.draft_now() {
                let l = p.choose(&[]).planned;
                assert_eq!(
                    l == 8,
                    p.rounds.is_multiple_of(FULL_EVERY),
                    "round {}: {l}",
                    p.rounds
                );
                probes.push(p.steps);
                books.push((extra, plain_since));
                p.record(l, 0, &[], 1.0, 1.0 + l as f64);
                extra += 1.0 + l as f64;
            } else {
                p.record_plain(1.0);
                plain_since += 1;
            }
        }
        let gaps: Vec<u64> = probes.windows(2).map(|w| w[1] - w[0] - 1).collect();
        assert_eq!(probes[0], 2 * WARM_UP + MAX_PROBE, "{probes:?}");
        // Debts of 6 and 8 steps want 600 and 800 plain steps: the longest waits; then 10
        // steps of debt against 769 plain steps want 231 more (the doubling: 128); then
        // the doubling's 256 is the longer.
        assert_eq!(gaps[..4], [256, 256, 231, 256], "{probes:?}");
        // Every probe came when the books allowed it, or after the longest wait.
        for (i, &(e, n)) in books.iter().enumerate() {
            let waited = if i == 0 {
                probes[0] - 2 * WARM_UP
            } else {
                gaps[i - 1]
            };
            assert!(
                e <= PROBE_BUDGET * n as f64 + 1e-9 || waited == MAX_PROBE,
                "probe {i}: {e} steps of extra over {n} plain steps after a wait of {waited}"
            );
        }
        assert!(gaps.iter().all(|&g| g <= MAX_PROBE), "{gaps:?}");
        // Once drafting pays again (every draft accepted, the block as cheap as a step),
        // the gate opens at once...
        for _ in 0..40 {
            p.record(8, 8, &[], 0.1, 1.0);
            p.record_round_wall(1.1, 9);
        }
        assert!(p.gate_open());
        assert_eq!(p.probe_after, PROBE);
        assert!(
            !p.draft_now(),
            "40 rounds since the last plain step: one is due"
        );
        p.record_plain(1.0);
        assert!(p.draft_now());
        // ...and a plain step still comes every PLAIN_EVERY steps, so that the cost it is
        // judged against stays current.
        let mut plain = Vec::new();
        for _ in 0..100 {
            if p.draft_now() {
                p.record(8, 8, &[], 0.1, 1.0);
            } else {
                plain.push(p.steps);
                p.record_plain(1.0);
            }
        }
        assert!(!plain.is_empty());
        assert!(
            plain.windows(2).all(|w| w[1] - w[0] == PLAIN_EVERY + 1),
            "{plain:?}"
        );
    }

    #[test]
    fn a_shut_gate_waits_for_its_probe_when_the_costs_swing() {
        // A model read from disk: the warm-up's plain steps find their pages cached (1 s),
        // its rounds of one draft cost 1.6 s and accept nothing.
        let mut p = Planner::new(Schedule::Adaptive, 8);
        for _ in 0..WARM_UP {
            assert!(!p.draft_now());
            p.record_plain(1.0);
            assert!(p.draft_now());
            assert_eq!(p.choose(&[]).planned, 1);
            p.record(1, 0, &[], 0.05, 1.6);
        }
        assert!(!p.gate_open() && p.failures == WARM_UP as u32);
        let wait = p.probe_after;
        assert!(
            wait > PROBE,
            "the warm-up's debt defers the first probe: {wait}"
        );
        // Then the cache turns over and plain steps cost 2.5 s: next to the verify timed
        // before, the predictions say a round pays, but the gate stays shut until the probe.
        let mut rounds = Vec::new();
        let mut paid = 0;
        while p.steps <= 2 * WARM_UP + wait {
            if p.draft_now() {
                rounds.push(p.steps);
                p.record(1, 0, &[], 0.05, 1.6);
            } else {
                p.record_plain(2.5);
                paid += usize::from(p.pays());
            }
        }
        assert!(paid > 0, "the scenario: the predictions said a round pays");
        assert_eq!(rounds, [2 * WARM_UP + wait], "only the probe drafts");
    }

    #[test]
    fn acceptance_counts_follow_the_first_rejection() {
        let mut p = Planner::new(Schedule::Adaptive, 4);
        p.record(4, 2, &[0.9, 0.8, 0.7, 0.6], 0.0, 1.0); // 1, 2 accepted, 3 rejected
        assert_eq!(p.reached, vec![1.0, 1.0, 1.0, 0.0]);
        assert_eq!(p.accepted, vec![1.0, 1.0, 0.0, 0.0]);
        assert!((p.predicted[2] - 0.7).abs() < 1e-6 && p.predicted[3] == 0.0);
        p.record(2, 2, &[], 0.0, 1.0); // both verified drafts accepted; the first decays
        let m = MEMORY;
        assert_eq!(p.reached, vec![m + 1.0, m + 1.0, m, 0.0]);
        assert_eq!(p.accepted, vec![m + 1.0, m + 1.0, 0.0, 0.0]);
        // E(2) with c1 = c2 = (m + 2) / (m + 3).
        let c = (m + 2.0) / (m + 3.0);
        assert!((p.expected_tokens(2) - (1.0 + c + c * c)).abs() < 1e-12);
    }

    #[test]
    fn verify_costs_interpolate_between_measured_widths() {
        let mut p = Planner::new(Schedule::Adaptive, 8);
        assert_eq!(p.verify_cost(5), 0.0);
        p.verify[1] = Some(2.0); // m = 2
        p.verify[8] = Some(9.0); // m = 9
                                 // Below the lowest measured width, the line through the two lowest.
        assert!((p.verify_cost(1) - 1.0).abs() < 1e-12);
        assert!((p.verify_cost(5) - 5.0).abs() < 1e-12);
        assert_eq!(p.verify_cost(9), 9.0);
        assert_eq!(p.verify_cost(40), 9.0);
        // A falling line (noise) never makes a narrower forward dearer than a wider one.
        p.verify[8] = Some(1.0);
        assert_eq!(p.verify_cost(1), 2.0);
        p.verify[8] = Some(100.0);
        assert_eq!(p.verify_cost(1), 0.0);
        // Above the widest measured, the line through the two widest (never falling); one
        // width alone prices the others in proportion to their tokens.
        let mut p = Planner::new(Schedule::Adaptive, 8);
        p.verify[0] = Some(2.0);
        assert_eq!(p.verify_cost(3), 6.0);
        p.verify[1] = Some(3.0);
        assert_eq!(p.verify_cost(5), 6.0);
        p.verify[1] = Some(1.5);
        assert_eq!(p.verify_cost(5), 1.5);
    }

    #[test]
    fn sampling_admits_drafts_by_a_causal_scan() {
        // docs/RUNTIME-MATH.md §5.2 (Appendix A): T(1) = 1, T(2) = 2, T(3) = 1/0.45,
        // c = (0.8, 0.9).
        // One draft lowers the rate (1.8 / 2 < 1): the scan stops at 0, where the global
        // argmax (which looks at c_2, a function of the first draft) verifies both.
        let p = planner(2, |m| [1.0, 2.0, 1.0 / 0.45][m - 1], 0.8, 0.0);
        assert_eq!(p.choose(&[0.8, 0.9]).planned, 2);
        assert_eq!(p.choose_causal(&[0.8, 0.9]).planned, 0);
        assert_eq!(p.choose_causal(&[0.8, 0.0]).planned, 0);
        // A flat cost and certain drafts: the scan verifies everything too; a cost per
        // token, the one draft of a probe.
        let p = planner(8, |_| 1.0, 1.0, 0.1);
        assert_eq!(p.choose_causal(&[1.0; 8]).planned, 8);
        let p = planner(8, |m| m as f64, 0.9, 0.0);
        assert_eq!(
            p.choose_causal(&[0.9; 8]).planned,
            1,
            "a probe verifies one"
        );
        // The choice never depends on the confidences after the first one it refused (they
        // see drafts it did not admit).
        let p = planner(8, |m| 1.0 + 0.15 * m as f64, 0.7, 0.2);
        let mut next = unit(12345);
        let mut lengths = [0usize; 9];
        for _ in 0..500 {
            let c: Vec<f32> = (0..8).map(|_| next()).collect();
            let l = p.choose_causal(&c).planned;
            lengths[l] += 1;
            let mut later = c.clone();
            for x in later.iter_mut().skip(l + 1) {
                *x = next();
            }
            assert_eq!(p.choose_causal(&later).planned, l, "{c:?} / {later:?}");
        }
        assert!(
            lengths.iter().filter(|&&n| n > 0).count() >= 3,
            "{lengths:?}"
        );
    }

    #[test]
    fn the_chosen_drafts_are_a_prefix_of_the_block() {
        // Survivals never increase with depth, whatever the confidences and calibration,
        // so the ℓ drafts of largest survival are the first ℓ: a length is a prefix.
        let p = planner(8, |m| 1.0 + 0.2 * m as f64, 0.6, 0.1);
        let mut next = unit(99);
        for _ in 0..300 {
            let c: Vec<f32> = (0..8).map(|_| next()).collect();
            let a = p.survivals(&c);
            assert!(a.windows(2).all(|w| w[1] <= w[0]), "{c:?}: {a:?}");
            assert!(a.iter().all(|&x| (0.0..=1.0).contains(&x)));
            assert!(p.choose(&c).planned <= 8 && p.choose_causal(&c).planned <= 8);
        }
    }

    #[test]
    fn a_probe_verifies_at_least_one_draft() {
        // Drafting never pays (a cost per token): the gate is shut, and a probe round,
        // which would otherwise verify nothing, verifies one draft.
        let p = planner(8, |m| m as f64, 0.9, 0.0);
        assert!(!p.gate_open());
        assert_eq!(p.choose(&[0.9; 8]).planned, 1);
        assert_eq!(p.choose_causal(&[0.9; 8]).planned, 1);
        // With the gate open, a length of 0 stays possible (Appendix A).
        let p = planner(2, |m| [1.0, 2.0, 1.0 / 0.45][m - 1], 0.8, 0.0);
        assert!(p.gate_open());
        assert_eq!(p.choose_causal(&[0.8, 0.9]).planned, 0);
    }

    #[test]
    fn fixed_always_drafts_and_verifies_everything() {
        let p = planner(8, |m| m as f64, 0.1, 1.0);
        let fixed = Planner {
            schedule: Schedule::Fixed,
            ..p
        };
        assert!(fixed.draft_now());
        assert_eq!(fixed.choose(&[0.0; 8]).planned, 8);
    }

    #[test]
    fn one_slow_step_cannot_swing_a_cost() {
        let mut p = Planner::new(Schedule::Adaptive, 8);
        for _ in 0..6 {
            p.record_plain(1.0);
        }
        p.record_plain(50.0); // a neighbour took the core for one step
        assert_eq!(p.verify_cost(1), 1.0);
        // A lasting change moves it within the window.
        for _ in 0..COST_WINDOW / 2 + 1 {
            p.record_plain(2.0);
        }
        assert_eq!(p.verify_cost(1), 2.0);
    }

    #[test]
    fn realised_rounds_slower_than_plain_steps_shut_the_gate() {
        // The forward times say drafting pays handsomely...
        let mut p = planner(8, |_| 1.0, 0.9, 0.1);
        assert!(p.gate_open());
        for _ in 0..REALISED_MIN_ROUNDS {
            p.record_plain_wall(1.0);
        }
        for _ in 0..REALISED_MIN_ROUNDS - 1 {
            p.record_round_wall(10.0, 3);
        }
        assert!(p.gate_open(), "too few rounds to judge");
        // ...but the rounds as realised commit 0.3 tokens/s against plain steps' 1.
        p.record_round_wall(10.0, 3);
        assert!(p.realised_losing() && !p.gate_open());
        // Rounds that realise more than plain steps do reopen it.
        for _ in 0..REALISED_WINDOW {
            p.record_round_wall(1.0, 3);
        }
        assert!(!p.realised_losing() && p.gate_open());
    }

    /// A simulated run of `steps` steps on a machine where a plain step costs 1, a verify
    /// of m tokens `verify(m)`, drafting `draft`, each further draft is accepted with
    /// probability `c`, and one step in `spike` takes 8 times as long (a noisy neighbour);
    /// the rounds' and steps' realised times are recorded as the runtime records them.
    /// Returns tokens per unit of time.
    fn simulate(
        schedule: Schedule,
        verify: impl Fn(usize) -> f64,
        draft: f64,
        c: f32,
        spike: u32,
        seed: u64,
    ) -> f64 {
        let mut u = unit(seed);
        let noisy = |t: f64, u: &mut dyn FnMut() -> f32| {
            if u() < 1.0 / spike as f32 {
                8.0 * t
            } else {
                t
            }
        };
        let mut p = Planner::new(schedule, 8);
        let (mut time, mut tokens) = (0.0, 0usize);
        while tokens < 2000 {
            if p.draft_now() {
                let choice = p.choose(&[]);
                let l = choice.planned;
                let m = (0..l).take_while(|_| u() < c).count();
                let d = noisy(draft, &mut u);
                let v = noisy(verify(l + 1), &mut u);
                p.record(l, m, &[], d, v);
                p.record_round_wall(d + v, m + 1);
                time += d + v;
                tokens += m + 1;
            } else {
                let t = noisy(1.0, &mut u);
                p.record_plain(t);
                p.record_plain_wall(t);
                time += t;
                tokens += 1;
            }
        }
        tokens as f64 / time
    }

    #[test]
    fn on_a_noisy_machine_adaptive_keeps_up_with_the_better_of_plain_and_fixed() {
        // (verify cost, drafter cost, acceptance): drafting that pays, drafting that
        // never pays (a useless drafter), and a verify costing almost a step per token.
        type World<'a> = (&'a dyn Fn(usize) -> f64, f64, f32);
        let worlds: [World; 3] = [
            (&|m| 1.0 + 0.05 * m as f64, 0.2, 0.8),
            (&|m| 1.0 + 0.3 * m as f64, 0.5, 0.05),
            (&|m| 0.9 * m as f64, 0.4, 0.7),
        ];
        for (w, &(verify, draft, c)) in worlds.iter().enumerate() {
            // A plain step: 1, or 8 one time in 10.
            let plain: f64 = 1.0 / (1.0 + 7.0 / 10.0);
            let mut ratios: Vec<f64> = (0..7)
                .map(|seed| {
                    let fixed = simulate(Schedule::Fixed, verify, draft, c, 10, seed);
                    let adaptive = simulate(Schedule::Adaptive, verify, draft, c, 10, seed);
                    adaptive / plain.max(fixed)
                })
                .collect();
            ratios.sort_by(f64::total_cmp);
            assert!(
                ratios[3] >= 0.95 && ratios[0] >= 0.9,
                "world {w}: adaptive / the better of plain and fixed {ratios:?}"
            );
        }
    }
}

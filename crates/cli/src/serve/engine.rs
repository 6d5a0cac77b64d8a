//! The slots: `-np` worker threads, each serving one request at a time with sessions of its
//! own (the target's KV cache, the drafter's context), behind a bounded queue.
//!
//! A request becomes a [`Job`]: its prompt tokens, limits and sampling, a channel for its
//! [`Event`]s and a cancel flag. A slot opens sessions sized from the job (its prompt, its
//! budget and one block), runs `generate`'s own loop on them (plain or speculative, the
//! same functions `dspark generate` runs, so a slot's output at T = 0 is `generate`'s
//! token for token whatever the other slots do: no state is shared but the weights), and
//! streams text as tokens are committed. Between steps the run polls the job's cancel
//! flag (set when its client goes away), its stop strings and the server's abort flag, so a
//! slot is free within one step. A panic inside a job is caught: the job fails with a
//! server error, the slot takes the next one.
//!
//! Each slot runs its steps on its own; one forward over the columns of every active slot
//! (weights read once per step for all of them) is not done yet (docs/SERVER.md).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};

use dspark_runtime::generate::{
    autoregressive, speculative_planned, speculative_with, Observer, PlainStep, Plan, Request,
    Round, Stats, StopReason,
};
use dspark_runtime::models::dspark::Drafter;
use dspark_runtime::sampling::Sampling;
use dspark_runtime::schedule::Planner;
use dspark_runtime::tokenizer::Tokenizer;
use dspark_runtime::{Attention, TargetModel};
use tokio::sync::mpsc::UnboundedSender;

use super::metrics::Metrics;

/// With `DSPARK_FAULT_INJECTION` set in the server's environment, a request whose stop
/// strings hold this one panics inside its slot (the tests' way to show that a panic costs
/// only its own request).
pub const FAULT: &str = "<<dspark: panic here>>";

/// One request for a slot.
pub struct Job {
    /// Prompt tokens (checked: inside the vocabulary, within the slot's context with the
    /// budget).
    pub prompt: Vec<u32>,
    /// Tokens to generate at most.
    pub max_tokens: usize,
    /// How tokens are chosen.
    pub sampling: Sampling,
    /// Texts that end the output (not included in it).
    pub stop: Vec<String>,
    /// Where the job's text and end go.
    pub events: UnboundedSender<Event>,
    /// Set when nobody waits for the job any more (the client went away).
    pub cancel: Arc<AtomicBool>,
}

/// What a job tells its request.
#[derive(Debug)]
pub enum Event {
    /// A slot took the job.
    Started,
    /// Text committed (whole UTF-8 characters; text that may begin a stop string is
    /// held back until it does not).
    Text(Piece),
    /// The job ended.
    Done(Box<Finish>),
    /// The job could not run or was aborted (a server error).
    Failed(String),
}

/// A piece of a reply and where its tokens came from.
#[derive(Debug)]
pub struct Piece {
    pub text: String,
    /// Tokens committed with it.
    pub tokens: usize,
    /// They were drafts the target accepted (else the target's own: a plain step, a round's
    /// bonus or resampled token, the prefill's first token).
    pub drafted: bool,
}

/// How a job ended.
#[derive(Debug)]
pub struct Finish {
    /// `stop` (end of turn, a stop string) or `length` (max_tokens, the context).
    pub reason: &'static str,
    /// Tokens generated (the end-of-turn token included, as llama-server counts).
    pub completion_tokens: usize,
    /// The run's statistics.
    pub stats: Stats,
}

/// What every slot shares: the loaded models and the run's settings.
pub struct Models {
    pub target: Arc<dyn TargetModel>,
    pub target_path: PathBuf,
    pub drafter: Option<(Arc<Drafter>, PathBuf)>,
    pub tokenizer: Arc<Tokenizer>,
    pub attention: Attention,
    pub plan: Plan,
    /// Positions a slot's sessions hold at most (prompt and output).
    pub context: usize,
    /// The end-of-turn token (ends a reply; its text is not part of it).
    pub eos: Option<u32>,
    /// Run each slot's steps from its own thread (several slots: each kernel's work is
    /// handed to the pool, so slots interleave step by step) rather than on a pool worker
    /// (one slot: no hand-over per product; but a worker waiting inside one slot's product
    /// could pick up another slot's whole run and stall the first).
    pub direct: bool,
    /// Where the slots' target forwards meet to run as one (several slots).
    pub batcher: Option<Arc<super::batch::Batcher>>,
}

/// The queue in front of the slots.
pub struct Engine {
    tx: Mutex<Option<SyncSender<Job>>>,
    metrics: Arc<Metrics>,
}

/// Why a job was not queued.
pub enum Refused {
    /// The queue is full (503 with Retry-After).
    Busy,
    /// The server is shutting down.
    Closed,
}

impl Engine {
    /// Starts `slots` worker threads behind a queue of `queue` jobs.
    pub fn start(
        models: Arc<Models>,
        slots: usize,
        queue: usize,
        metrics: Arc<Metrics>,
        abort: Arc<AtomicBool>,
    ) -> std::io::Result<Engine> {
        let (tx, rx) = std::sync::mpsc::sync_channel::<Job>(queue);
        let rx = Arc::new(Mutex::new(rx));
        for i in 0..slots {
            let (models, rx, metrics, abort) = (
                Arc::clone(&models),
                Arc::clone(&rx),
                Arc::clone(&metrics),
                Arc::clone(&abort),
            );
            std::thread::Builder::new()
                .name(format!("slot-{i}"))
                .spawn(move || slot_loop(&models, &rx, &metrics, &abort))?;
        }
        Ok(Engine {
            tx: Mutex::new(Some(tx)),
            metrics,
        })
    }

    /// Queues `job`, or says why not.
    pub fn submit(&self, job: Job) -> Result<(), Refused> {
        let guard = self.tx.lock().unwrap_or_else(|p| p.into_inner());
        let Some(tx) = guard.as_ref() else {
            return Err(Refused::Closed);
        };
        // Counted before it is sent, so a slot's decrement never comes first.
        self.metrics.deferred.inc();
        match tx.try_send(job) {
            Ok(()) => Ok(()),
            Err(e) => {
                self.metrics.deferred.dec();
                self.metrics.rejected.inc();
                Err(match e {
                    TrySendError::Full(_) => Refused::Busy,
                    TrySendError::Disconnected(_) => Refused::Closed,
                })
            }
        }
    }

    /// Takes no more jobs; the slots end when the queue is empty.
    pub fn close(&self) {
        self.tx.lock().unwrap_or_else(|p| p.into_inner()).take();
    }
}

fn slot_loop(models: &Models, rx: &Mutex<Receiver<Job>>, metrics: &Metrics, abort: &AtomicBool) {
    // The schedule's state lives as long as the slot: what it learnt about this pair (the
    // acceptance per depth, the cost of each step, whether drafting pays) carries over from
    // request to request, so the warm-up is paid once.
    let fresh = || {
        models
            .drafter
            .as_ref()
            .map(|(d, _)| models.plan.planner(d.drafts_per_block()))
    };
    let mut planner = fresh();
    loop {
        let job = {
            let rx = rx.lock().unwrap_or_else(|p| p.into_inner());
            match rx.recv() {
                Ok(j) => j,
                Err(_) => return,
            }
        };
        metrics.deferred.dec();
        if job.cancel.load(Ordering::SeqCst) {
            continue;
        }
        if abort.load(Ordering::SeqCst) {
            let _ = job
                .events
                .send(Event::Failed("the server is shutting down".into()));
            continue;
        }
        metrics.processing.inc();
        let _ = job.events.send(Event::Started);
        let events = job.events.clone();
        let busy = Busy::new(models.batcher.as_deref());
        let result = catch_unwind(AssertUnwindSafe(|| {
            run_job(models, &job, planner.as_mut(), metrics, abort)
        }));
        if result.is_err() {
            // A panic may have left the schedule half-updated: start it again.
            planner = fresh();
        }
        drop(busy);
        metrics.processing.dec();
        let event = match result {
            Ok(Ok(Some(finish))) => Event::Done(Box::new(finish)),
            // Cancelled by its client: nobody is listening.
            Ok(Ok(None)) => continue,
            Ok(Err(msg)) => {
                if !abort.load(Ordering::SeqCst) {
                    metrics.failed.inc();
                }
                Event::Failed(msg)
            }
            Err(panic) => {
                let what = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "unknown".into());
                crate::diag!(
                    "dspark: a request failed inside its slot (panic: {what}); the server goes on"
                );
                metrics.failed.inc();
                Event::Failed("internal error while generating".into())
            }
        };
        let _ = events.send(event);
    }
}

/// A slot inside a request, as the batcher counts them (until dropped).
struct Busy<'b>(Option<&'b super::batch::Batcher>);

impl<'b> Busy<'b> {
    fn new(b: Option<&'b super::batch::Batcher>) -> Busy<'b> {
        if let Some(b) = b {
            b.busy(true);
        }
        Busy(b)
    }
}

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        if let Some(b) = self.0 {
            b.busy(false);
        }
    }
}

/// Runs one job on fresh sessions; `Ok(None)` when its client went away.
fn run_job(
    models: &Models,
    job: &Job,
    planner: Option<&mut Planner>,
    metrics: &Metrics,
    abort: &AtomicBool,
) -> Result<Option<Finish>, String> {
    if job.stop.iter().any(|s| s == FAULT) && std::env::var_os("DSPARK_FAULT_INJECTION").is_some() {
        panic!("fault injected by the request (DSPARK_FAULT_INJECTION)");
    }
    let req = Request {
        prompt: &job.prompt,
        max_tokens: job.max_tokens,
        context: models.context,
        stop: &[],
        eos: models.eos,
        sampling: job.sampling,
    };
    let drafts = models
        .drafter
        .as_ref()
        .map_or(0, |(d, _)| d.drafts_per_block());
    let positions = req.positions(drafts).min(models.context);
    let (target, mut draft) = crate::load::open_sessions(
        &models.target,
        &models.target_path,
        models.drafter.as_ref().map(|(d, p)| (d, p.as_path())),
        positions,
        models.attention,
    )
    .map_err(|e| format!("{e:#}"))?;
    let mut target: Box<dyn dspark_runtime::Target + Send> = match &models.batcher {
        Some(b) => Box::new(super::batch::BatchedTarget::new(target, b)),
        None => target,
    };
    let mut out = Streamer {
        stream: TextState::new(&models.tokenizer, models.eos, &job.stop),
        events: &job.events,
        cancel: &job.cancel,
        abort,
        metrics,
        failed: None,
        pending: draft.is_some().then(Vec::new),
    };
    let decode = || match (draft.as_mut(), planner) {
        (Some(d), Some(p)) => speculative_planned(&mut *target, d, &req, models.plan, p, &mut out),
        (Some(d), None) => speculative_with(&mut *target, d, &req, models.plan, &mut out),
        (None, _) => autoregressive(&mut *target, &req, &mut out),
    };
    let outcome = if models.direct {
        decode()
    } else {
        crate::on_pool(decode)
    }
    .map_err(|e| e.to_string())?;
    // Tokens no step reported (a run ended before its round did): the target's.
    out.settle(0, 0);
    if let Some(e) = out.failed.take() {
        return Err(e);
    }
    let stats = outcome.stats;
    metrics.record(&stats);
    let stopped_by_text = out.stream.stopped;
    let rest = out.stream.finish();
    if job.cancel.load(Ordering::SeqCst) {
        return Ok(None);
    }
    if stats.stop_reason == StopReason::Interrupted && !stopped_by_text {
        return Err("the server is shutting down".into());
    }
    if !rest.is_empty() {
        let _ = job.events.send(Event::Text(Piece {
            text: rest,
            tokens: 0,
            drafted: false,
        }));
    }
    let reason = match stats.stop_reason {
        StopReason::MaxTokens | StopReason::Context => "length",
        StopReason::Eos | StopReason::Stop | StopReason::Interrupted => "stop",
    };
    Ok(Some(Finish {
        reason,
        completion_tokens: outcome.tokens.len(),
        stats,
    }))
}

/// The observer of a slot's run: text to the job's channel, the stop rules of the request.
/// A speculative run's tokens wait for their round (or plain step) to say which were
/// accepted drafts, so that each piece says where it came from.
struct Streamer<'a> {
    stream: TextState<'a>,
    events: &'a UnboundedSender<Event>,
    cancel: &'a AtomicBool,
    abort: &'a AtomicBool,
    metrics: &'a Metrics,
    failed: Option<String>,
    /// Speculative: tokens committed whose round has not reported yet.
    pending: Option<Vec<u32>>,
}

impl Streamer<'_> {
    fn send(&mut self, tokens: &[u32], drafted: bool) {
        if tokens.is_empty() {
            return;
        }
        match self.stream.push(tokens) {
            Ok(text) => {
                let piece = Piece {
                    text,
                    tokens: tokens.len(),
                    drafted,
                };
                if self.events.send(Event::Text(piece)).is_err() {
                    // The request is gone: stop at the next poll.
                    self.cancel.store(true, Ordering::SeqCst);
                }
            }
            Err(e) => {
                self.failed.get_or_insert(e);
            }
        }
    }

    /// Sends what is pending: its last `of` tokens a step's, the first `drafted` of those
    /// accepted drafts; anything before them the target's (the prefill's token).
    fn settle(&mut self, of: usize, drafted: usize) {
        let Some(p) = self.pending.as_mut() else {
            return;
        };
        let all = std::mem::take(p);
        let step = all.len().saturating_sub(of);
        let drafted = drafted.min(of);
        self.send(&all[..step], false);
        self.send(&all[step..step + drafted.min(all.len() - step)], true);
        self.send(&all[(step + drafted).min(all.len())..], false);
    }
}

impl Observer for Streamer<'_> {
    fn tokens(&mut self, tokens: &[u32]) {
        match self.pending.as_mut() {
            Some(p) => p.extend_from_slice(tokens),
            None => self.send(tokens, false),
        }
    }

    fn round(&mut self, r: &Round) {
        self.metrics.round(r.verified, r.accepted);
        self.settle(r.committed.len(), r.accepted);
    }

    fn plain_step(&mut self, p: &PlainStep) {
        self.settle(p.committed.len(), 0);
    }

    fn interrupted(&self) -> bool {
        self.stream.stopped
            || self.failed.is_some()
            || self.cancel.load(Ordering::SeqCst)
            || self.abort.load(Ordering::SeqCst)
    }
}

/// The reply's text as tokens come: bytes to whole characters, the end-of-turn token's
/// text left out, stop strings found across token boundaries (the text from the first
/// one on is dropped) and the text that may begin one held back.
pub struct TextState<'t> {
    stream: dspark_runtime::tokenizer::TextStream<'t>,
    eos: Option<u32>,
    stop: &'t [String],
    /// Bytes not yet a whole character.
    bytes: Vec<u8>,
    /// Text decoded but not yet sent (it may begin a stop string).
    held: String,
    /// A stop string was found.
    pub stopped: bool,
}

impl<'t> TextState<'t> {
    pub fn new(tok: &'t Tokenizer, eos: Option<u32>, stop: &'t [String]) -> TextState<'t> {
        TextState {
            stream: tok.stream(),
            eos,
            stop,
            bytes: Vec::new(),
            held: String::new(),
            stopped: false,
        }
    }

    /// The text `tokens` add that can be sent now.
    pub fn push(&mut self, tokens: &[u32]) -> Result<String, String> {
        if self.stopped {
            return Ok(String::new());
        }
        for &t in tokens {
            if Some(t) == self.eos {
                continue;
            }
            let b = self.stream.push(t).map_err(|e| e.to_string())?;
            self.bytes.extend(b);
        }
        let valid = match std::str::from_utf8(&self.bytes) {
            Ok(s) => s.len(),
            Err(e) if e.error_len().is_some() => {
                // Invalid bytes (not an unfinished character): replaced, as a lossy decode.
                let s = String::from_utf8_lossy(&self.bytes).into_owned();
                self.bytes.clear();
                self.held.push_str(&s);
                0
            }
            Err(e) => e.valid_up_to(),
        };
        if valid > 0 {
            let rest = self.bytes.split_off(valid);
            let whole = std::mem::replace(&mut self.bytes, rest);
            self.held
                .push_str(std::str::from_utf8(&whole).expect("checked above"));
        }
        Ok(self.release())
    }

    /// Sends what cannot begin a stop string; on a stop string, what comes before it.
    fn release(&mut self) -> String {
        if let Some(at) = self
            .stop
            .iter()
            .filter_map(|s| self.held.find(s.as_str()))
            .min()
        {
            self.stopped = true;
            self.held.truncate(at);
            return std::mem::take(&mut self.held);
        }
        let keep = self
            .stop
            .iter()
            .map(|s| partial_suffix(&self.held, s))
            .max()
            .unwrap_or(0);
        let cut = self.held.len() - keep;
        let rest = self.held.split_off(cut);
        std::mem::replace(&mut self.held, rest)
    }

    /// The text still held at the end (an unfinished character decoded lossily).
    pub fn finish(&mut self) -> String {
        if self.stopped {
            return String::new();
        }
        let tail = self.stream.finish();
        self.bytes.extend(tail);
        let b = std::mem::take(&mut self.bytes);
        self.held.push_str(&String::from_utf8_lossy(&b));
        std::mem::take(&mut self.held)
    }
}

/// Bytes of the longest end of `text` that is a proper beginning of `stop` (at a character
/// boundary).
fn partial_suffix(text: &str, stop: &str) -> usize {
    let max = stop.len().saturating_sub(1).min(text.len());
    (1..=max)
        .rev()
        .find(|&n| {
            let at = text.len() - n;
            text.is_char_boundary(at) && stop.starts_with(&text[at..])
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_partial_stop_string_is_held_back() {
        assert_eq!(partial_suffix("hello wor", "world"), 3);
        assert_eq!(partial_suffix("hello", "world"), 0);
        assert_eq!(partial_suffix("ab", "abc"), 2);
        assert_eq!(partial_suffix("xab", "abc"), 2);
        assert_eq!(
            partial_suffix("abc", "abc"),
            0,
            "a whole match is found, not held"
        );
        assert_eq!(partial_suffix("é", "éa"), 2);
    }
}

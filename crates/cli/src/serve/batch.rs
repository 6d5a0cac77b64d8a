//! Continuous batching: the slots' target forwards meet here and run as one forward over
//! all their columns (the weights read once per step for every request).
//!
//! Each slot keeps running `generate`'s own loop on its own thread; its target session is a
//! [`BatchedTarget`], whose `forward` hands the tokens to the [`Batcher`] and waits. The
//! batcher's thread takes what the slots have handed in — as soon as every slot inside a
//! request has (they come back together: a batch answers all its slots at once), or
//! [`GATHER`] after the first one (a slot drafting or finishing its round does not hold the
//! others for long) — and runs the decode and verify steps among them as one forward
//! ([`TargetModel::forward_batch`]). Each column's arithmetic is what a forward of that
//! session alone computes (matrix products column by column, attention per row over its
//! own session's cache), so a slot's tokens are the same whatever runs beside it. A prompt's
//! prefill (llama.cpp's prompt order, [`dspark_quant::gemm::prompt_order`]) runs alone.

use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::metrics::Metrics;
use dspark_runtime::{Forward, Logits, Rollback, RuntimeError, Target, TargetModel, TargetShape};

/// How long the batcher waits, after a slot hands in a step, for the other busy slots.
pub const GATHER: Duration = Duration::from_micros(1500);

type Session = Arc<Mutex<Box<dyn Target + Send>>>;

/// One slot's forward, waiting for its batch.
struct Pending {
    session: Session,
    tokens: Vec<u32>,
    capture: Vec<usize>,
    logits: Logits,
    /// Started inside [`dspark_quant::gemm::prompt_order`] (a prefill): runs alone, in that
    /// order.
    prompt: bool,
    reply: SyncSender<dspark_runtime::Result<Forward>>,
}

#[derive(Default)]
struct State {
    /// Slots inside a request.
    busy: usize,
    pending: Vec<Pending>,
    /// When the oldest pending step was handed in.
    since: Option<Instant>,
}

/// The meeting point of the slots' target forwards.
pub struct Batcher {
    model: Arc<dyn TargetModel>,
    state: Mutex<State>,
    wake: Condvar,
    metrics: Arc<Metrics>,
}

impl Batcher {
    /// A batcher for `model`, its thread started (each batch runs on a pool worker, see
    /// [`crate::on_pool`]).
    pub fn start(
        model: Arc<dyn TargetModel>,
        metrics: Arc<Metrics>,
    ) -> std::io::Result<Arc<Batcher>> {
        let b = Arc::new(Batcher {
            model,
            state: Mutex::new(State::default()),
            wake: Condvar::new(),
            metrics,
        });
        let worker = Arc::clone(&b);
        std::thread::Builder::new()
            .name("batcher".into())
            .spawn(move || worker.run())?;
        Ok(b)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A slot starts (`true`) or ends (`false`) a request.
    pub fn busy(&self, starting: bool) {
        let mut s = self.lock();
        if starting {
            s.busy += 1;
        } else {
            s.busy = s.busy.saturating_sub(1);
        }
        drop(s);
        self.wake.notify_all();
    }

    fn submit(&self, p: Pending) {
        let mut s = self.lock();
        s.since.get_or_insert_with(Instant::now);
        s.pending.push(p);
        drop(s);
        self.wake.notify_all();
    }

    fn run(&self) {
        loop {
            let batch = {
                let mut s = self.lock();
                loop {
                    if let Some(since) = s.since {
                        let waited = since.elapsed();
                        if s.pending.len() >= s.busy || waited >= GATHER {
                            break;
                        }
                        s = self
                            .wake
                            .wait_timeout(s, GATHER - waited)
                            .unwrap_or_else(|p| p.into_inner())
                            .0;
                    } else {
                        s = self.wake.wait(s).unwrap_or_else(|p| p.into_inner());
                    }
                }
                s.since = None;
                std::mem::take(&mut s.pending)
            };
            // A panic inside a forward ends that batch only: its slots' replies are dropped
            // (each gets an error: its request fails with a server error), the batcher goes on.
            let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                crate::on_pool(|| self.step(batch))
            }));
            if run.is_err() {
                crate::diag!("dspark: a batched forward failed (panic); its requests fail, the server goes on");
            }
        }
    }

    /// Runs one batch: prefills alone, the rest grouped by what they capture and return.
    fn step(&self, batch: Vec<Pending>) {
        let (prompts, mut steps): (Vec<_>, Vec<_>) = batch.into_iter().partition(|p| p.prompt);
        for p in prompts {
            let t = Instant::now();
            let r = {
                let mut s = p.session.lock().unwrap_or_else(|e| e.into_inner());
                dspark_quant::gemm::prompt_order(|| s.forward(&p.tokens, &p.capture, p.logits))
            };
            self.metrics.prefill(t.elapsed().as_secs_f64());
            let _ = p.reply.send(r);
        }
        while !steps.is_empty() {
            let key = (steps[0].capture.clone(), steps[0].logits);
            let (group, rest): (Vec<_>, Vec<_>) = steps
                .into_iter()
                .partition(|p| p.capture == key.0 && p.logits == key.1);
            steps = rest;
            self.group(group, &key.0, key.1);
        }
    }

    fn group(&self, group: Vec<Pending>, capture: &[usize], logits: Logits) {
        let t = Instant::now();
        let mut guards: Vec<_> = group
            .iter()
            .map(|p| p.session.lock().unwrap_or_else(|e| e.into_inner()))
            .collect();
        let results = {
            let mut batch: Vec<(&mut dyn Target, &[u32])> = guards
                .iter_mut()
                .zip(&group)
                .map(|(g, p)| (&mut ***g as &mut dyn Target, p.tokens.as_slice()))
                .collect();
            self.model.forward_batch(&mut batch, capture, logits)
        };
        drop(guards);
        let columns = group.iter().map(|p| p.tokens.len()).sum();
        self.metrics
            .forward(group.len(), columns, t.elapsed().as_secs_f64());
        for (p, r) in group.into_iter().zip(results) {
            let _ = p.reply.send(r);
        }
    }
}

/// A slot's target session whose forwards go through the [`Batcher`].
pub struct BatchedTarget {
    session: Session,
    batcher: Arc<Batcher>,
}

impl BatchedTarget {
    pub fn new(session: Box<dyn Target + Send>, batcher: &Arc<Batcher>) -> BatchedTarget {
        BatchedTarget {
            session: Arc::new(Mutex::new(session)),
            batcher: Arc::clone(batcher),
        }
    }

    fn with<T>(&self, f: impl FnOnce(&mut (dyn Target + Send)) -> T) -> T {
        let mut s = self.session.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut **s)
    }
}

impl Target for BatchedTarget {
    fn shape(&self) -> TargetShape {
        self.with(|s| s.shape())
    }
    fn capacity(&self) -> usize {
        self.with(|s| s.capacity())
    }
    fn len(&self) -> usize {
        self.with(|s| s.len())
    }
    fn step_bytes(&self, rows: usize, logits: Logits, captures: usize) -> u64 {
        self.with(|s| s.step_bytes(rows, logits, captures))
    }
    fn forward(
        &mut self,
        tokens: &[u32],
        capture: &[usize],
        logits: Logits,
    ) -> dspark_runtime::Result<Forward> {
        let (tx, rx) = sync_channel(1);
        self.batcher.submit(Pending {
            session: Arc::clone(&self.session),
            tokens: tokens.to_vec(),
            capture: capture.to_vec(),
            logits,
            prompt: dspark_quant::gemm::in_prompt_order(),
            reply: tx,
        });
        rx.recv().unwrap_or_else(|_| {
            Err(RuntimeError::Request(
                "the batcher stopped before answering".into(),
            ))
        })
    }
    fn committed(&self) -> usize {
        self.with(|s| s.committed())
    }
    fn commit(&mut self) {
        self.with(|s| s.commit())
    }
    fn rollback(&mut self, to: usize) -> dspark_runtime::Result<()> {
        self.with(|s| s.rollback(to))
    }
    fn recurrent(&self) -> bool {
        self.with(|s| s.recurrent())
    }
    fn set_rollback(&mut self, mode: Rollback) {
        self.with(|s| s.set_rollback(mode))
    }
    fn state_bytes(&self) -> u64 {
        self.with(|s| s.state_bytes())
    }
    fn embed(&self, tokens: &[u32], out: &mut [f32]) -> dspark_runtime::Result<()> {
        self.with(|s| s.embed(tokens, out))
    }
    fn lm_head(&self, hidden: &[f32], logits: &mut [f32]) {
        self.with(|s| s.lm_head(hidden, logits))
    }
}

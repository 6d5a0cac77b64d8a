//! Where a decoder forward's time goes: the wall time of each stage of its layers (the
//! q/k/v products, attention, the FFN's products, …) summed over the forwards a thread
//! runs while its [`Recorder`] is on. `dspark bench` turns one on around its timed decode
//! steps and reports the stages per step (`target.decode.stages_ms`), so a step's excess
//! over its bandwidth bound can be put where it belongs without a profiler.
//!
//! A recorder sees only the forwards started on its own thread (a forward's stages are
//! marked by the thread that called it, whatever its products run on), so forwards on
//! other threads never mix in. Off, a forward pays one thread-local read. The Qwen3 and
//! Llama decoders mark their stages; a Kimi K3 forward marks none (no report).

use std::cell::RefCell;
use std::time::Instant;

/// A stage of a decoder layer (or of the forward's end).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// The embedding lookup and each layer's attention-input norm.
    Norms,
    /// The q, k and v products.
    Qkv,
    /// Per-head norms, the rotation, the keys and values into the cache.
    RopeKv,
    /// Attention over the cache.
    Attention,
    /// The output product and its residual.
    Output,
    /// The FFN: its norm, the gate and up products, SwiGLU, the down product, the
    /// residual (and a captured layer's copy).
    Ffn,
    /// The final norm and the logits' buffer.
    HeadPrep,
    /// The LM head's product.
    Head,
}

impl Stage {
    /// Every stage, in a forward's order (a stage's index is its discriminant).
    pub const ALL: [Stage; 8] = [
        Stage::Norms,
        Stage::Qkv,
        Stage::RopeKv,
        Stage::Attention,
        Stage::Output,
        Stage::Ffn,
        Stage::HeadPrep,
        Stage::Head,
    ];

    /// The stage's name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Stage::Norms => "norms",
            Stage::Qkv => "qkv",
            Stage::RopeKv => "rope_kv",
            Stage::Attention => "attention",
            Stage::Output => "output",
            Stage::Ffn => "ffn",
            Stage::HeadPrep => "head_prep",
            Stage::Head => "lm_head",
        }
    }
}

/// A thread's sums: nanoseconds per stage and forwards counted.
type Sums = ([u64; Stage::ALL.len()], u64);

thread_local! {
    static SUMS: RefCell<Option<Sums>> = const { RefCell::new(None) };
}

/// Sums the stages of every forward this thread starts while it lives.
pub struct Recorder {
    _not_send: std::marker::PhantomData<*const ()>,
}

impl Recorder {
    /// Starts summing from zero (a recorder already on this thread starts over).
    pub fn start() -> Recorder {
        SUMS.with(|s| *s.borrow_mut() = Some(([0; Stage::ALL.len()], 0)));
        Recorder {
            _not_send: std::marker::PhantomData,
        }
    }

    /// Stops, and returns each stage's mean wall time per recorded forward in
    /// milliseconds, in [`Stage::ALL`]'s order; `None` if no forward was recorded.
    pub fn finish(self) -> Option<Vec<(Stage, f64)>> {
        let (nanos, forwards) = SUMS.with(|s| s.borrow_mut().take())?;
        if forwards == 0 {
            return None;
        }
        Some(
            Stage::ALL
                .iter()
                .zip(nanos)
                .map(|(&s, n)| (s, n as f64 / 1e6 / forwards as f64))
                .collect(),
        )
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        SUMS.with(|s| s.borrow_mut().take());
    }
}

/// A forward's clock: each [`Clock::mark`] adds the time since the previous mark (or the
/// clock's start) to a stage. Inert unless a recorder is on on this thread when the
/// forward starts.
pub(crate) struct Clock(Option<Instant>);

impl Clock {
    /// A forward's clock, counting the forward.
    pub(crate) fn start() -> Clock {
        let on = SUMS.with(|s| match s.borrow_mut().as_mut() {
            Some((_, forwards)) => {
                *forwards += 1;
                true
            }
            None => false,
        });
        Clock(on.then(Instant::now))
    }

    /// Adds the time since the last mark to `stage`.
    pub(crate) fn mark(&mut self, stage: Stage) {
        if let Some(last) = self.0.as_mut() {
            let now = Instant::now();
            let i = stage as usize;
            let dt = (now - *last).as_nanos() as u64;
            SUMS.with(|s| {
                if let Some((nanos, _)) = s.borrow_mut().as_mut() {
                    nanos[i] += dt;
                }
            });
            *last = now;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recorder_sums_the_marked_stages_per_forward_and_only_while_on() {
        let mut before = Clock::start();
        std::thread::sleep(std::time::Duration::from_millis(2));
        before.mark(Stage::Qkv);
        let r = Recorder::start();
        for _ in 0..2 {
            let mut c = Clock::start();
            std::thread::sleep(std::time::Duration::from_millis(3));
            c.mark(Stage::Attention);
            c.mark(Stage::Head);
        }
        // A clock started before the recorder stays inert.
        before.mark(Stage::Ffn);
        // Another thread's forward is not this recorder's.
        std::thread::spawn(|| {
            let mut c = Clock::start();
            std::thread::sleep(std::time::Duration::from_millis(1));
            c.mark(Stage::Qkv);
        })
        .join()
        .unwrap();
        let stages = r.finish().expect("two forwards");
        let get = |s: Stage| stages.iter().find(|(t, _)| *t == s).map(|x| x.1).unwrap();
        // Two forwards of at least 3 ms each in attention: a mean of at least 3.
        assert!(get(Stage::Attention) >= 3.0, "{stages:?}");
        assert_eq!(get(Stage::Qkv), 0.0);
        assert_eq!(get(Stage::Ffn), 0.0);
        assert_eq!(stages.len(), Stage::ALL.len());
        // A stage's index is its place in ALL.
        assert!(Stage::ALL.iter().enumerate().all(|(i, &s)| s as usize == i));
        // Off again: nothing recorded, nothing to report.
        let r = Recorder::start();
        assert!(r.finish().is_none());
    }
}

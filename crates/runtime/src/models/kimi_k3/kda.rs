//! KDA (Kimi Delta Attention) state: the per-head delta-rule state, the short-conv
//! window, and what a session keeps to undo positions since its last commit (ReplaySSM,
//! `docs/RUNTIME-MATH.md` §6.2).
//!
//! # The recurrence (`docs/KIMI-K3.md#kda`, step 5)
//! Per head the state is a D×D matrix stored as llama.cpp stores it, transposed:
//! `m[j·D + i] = S[i][j]` (i key dim, j value dim), so every step touches whole rows
//! `m[j]`, each independently of the others:
//! ```text
//! m[j] ⊙= exp(g)                (S[i][:] *= exp(g_i), per key dim)
//! δ_j   = (v_j − m[j]·k) · β
//! m[j] += δ_j · k
//! o_j   = (m[j]·q) / √D         (read-out with the updated state)
//! ```
//! Dots and axpys are the kernel table's (one call per row, a fixed order), so a step
//! gives the same bits whatever runs around it: one token at a time, a verify batch, or
//! a replay (which skips only the read-out).
//!
//! # Undo
//! Since the last commit the layer keeps the state at the commit (`base`, never written
//! between commits), the pre-conv projected inputs of every position (the conv window
//! at the commit then one row per position: the window after any prefix is the last
//! K − 1 of them), and per position the step's inputs `(k, v, g, β)`. Two ways back to a
//! position u after the commit:
//! - **A, snapshots**: the forward wrote the state after each position into its own
//!   buffer (`snaps[u − 1]`); rollback picks it, commit swaps it in. Memory: one state per
//!   position of the rollback window; time: none beyond writing each step's result to a
//!   fresh buffer.
//! - **C, replay**: the forward updated one working buffer (`live`) in place; rollback
//!   replays the recurrence alone for u positions from `base` with the kept inputs (no
//!   projection, no other layer). Memory: one state; time: u steps on rollback.
//!
//! A commit makes the chosen buffer the new `base` by swapping (no copy).

use dspark_quant::kernels;

use crate::error::{Result, RuntimeError};
use rayon::prelude::*;

use crate::memory::zeroed;
pub use crate::target::Rollback;

/// Where a forward's states go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Dest {
    /// Into the base, in place: the positions are committed at once (nothing to undo).
    Commit,
    /// Into the working buffer, in place (option C: the base stays the round's start).
    Replay,
    /// Each position into its own snapshot buffer while they last (option A), then as
    /// [`Dest::Replay`].
    Snapshots,
}

/// Which buffer holds the state at the session's current length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum At {
    Base,
    Live,
    Snap(usize),
}

/// The sizes of a KDA layer's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct KdaDims {
    pub heads: usize,
    pub dim: usize,
    pub kernel: usize,
}

impl KdaDims {
    pub fn inner(&self) -> usize {
        self.heads * self.dim
    }
    /// f32 values of one state (every head's D×D).
    pub fn state_floats(&self) -> usize {
        self.heads * self.dim * self.dim
    }
    /// f32 values of one position's pre-conv inputs (q, k, v projections).
    pub fn input_floats(&self) -> usize {
        3 * self.inner()
    }
    /// f32 values of one position's recurrence inputs (k, v, g, β).
    pub fn step_floats(&self) -> usize {
        3 * self.inner() + self.heads
    }
    /// Rows of the conv window.
    pub fn window(&self) -> usize {
        self.kernel - 1
    }
}

/// One KDA layer's state in a session.
pub(crate) struct KdaState {
    pub dims: KdaDims,
    base: Vec<f32>,
    live: Vec<f32>,
    snaps: Vec<Vec<f32>>,
    snap_valid: Vec<bool>,
    at: At,
    /// Pre-conv inputs: the window at the commit, then one row per position since.
    inputs: Vec<f32>,
    /// Recurrence inputs per position since the commit: `k | v | g | β`.
    steps: Vec<f32>,
}

/// One position's recurrence inputs for one head.
pub(crate) struct StepIn<'a> {
    pub k: &'a [f32],
    pub v: &'a [f32],
    /// `exp(g)` per key dim.
    pub decay: &'a [f32],
    pub beta: f32,
}

/// One step on one head's state `m` (D×D, rows m[j]), from `src` (another buffer) or in
/// place; with `read` = `(q, out)` the read-out `out_j = m[j]·q / √D`.
pub(crate) fn step(
    m: &mut [f32],
    src: Option<&[f32]>,
    s: &StepIn<'_>,
    read: Option<(&[f32], &mut [f32])>,
) {
    let kn = kernels();
    let d = s.k.len();
    let scale = 1.0 / (d as f32).sqrt();
    let mut read = read;
    for j in 0..d {
        let row = &mut m[j * d..(j + 1) * d];
        match src {
            Some(src) => {
                for ((r, &x), &e) in row.iter_mut().zip(&src[j * d..(j + 1) * d]).zip(s.decay) {
                    *r = x * e;
                }
            }
            None => {
                for (r, &e) in row.iter_mut().zip(s.decay) {
                    *r *= e;
                }
            }
        }
        let delta = (s.v[j] - (kn.dot_f32_ggml)(row, s.k)) * s.beta;
        (kn.axpy_f32)(row, delta, s.k);
        if let Some((q, out)) = read.as_mut() {
            out[j] = (kn.dot_f32_ggml)(row, q) * scale;
        }
    }
}

/// State values × positions of one recurrence call above which its heads run in parallel
/// (below, the fork costs more than it saves).
const PARALLEL_STATE: usize = 1 << 17;

/// One head's slice of each state buffer.
struct HeadBufs<'a> {
    base: &'a mut [f32],
    live: &'a mut [f32],
    snaps: Vec<&'a mut [f32]>,
}

impl HeadBufs<'_> {
    /// One step from the state in `src` to `dst` (in place when they are the same).
    fn step(&mut self, src: At, dst: At, s: &StepIn<'_>, read: Option<(&[f32], &mut [f32])>) {
        let (base, live, snaps) = (&mut *self.base, &mut *self.live, &mut self.snaps);
        match (src, dst) {
            (At::Base, At::Base) => step(base, None, s, read),
            (At::Live, At::Base) => step(base, Some(live), s, read),
            (At::Snap(a), At::Base) => step(base, Some(snaps[a]), s, read),
            (At::Live, At::Live) => step(live, None, s, read),
            (At::Base, At::Live) => step(live, Some(base), s, read),
            (At::Snap(a), At::Live) => step(live, Some(snaps[a]), s, read),
            (At::Base, At::Snap(b)) => step(snaps[b], Some(base), s, read),
            (At::Live, At::Snap(b)) => step(snaps[b], Some(live), s, read),
            (At::Snap(a), At::Snap(b)) => {
                debug_assert!(a < b, "snapshots are written in order");
                let (lo, hi) = snaps.split_at_mut(b);
                step(hi[0], Some(lo[a]), s, read)
            }
        }
    }
}

impl KdaState {
    /// A fresh (zero) state for `dims`, keeping up to `undo` positions' inputs; `what`
    /// names it in memory errors.
    pub fn new(dims: KdaDims, undo: usize, what: &str) -> Result<KdaState> {
        let mut inputs = zeroed(dims.window() * dims.input_floats(), what)?;
        inputs.reserve(undo * dims.input_floats());
        let mut steps = Vec::new();
        steps
            .try_reserve(undo * dims.step_floats())
            .map_err(|_| RuntimeError::Request(format!("cannot allocate {what}")))?;
        Ok(KdaState {
            dims,
            base: zeroed(dims.state_floats(), what)?,
            live: Vec::new(),
            snaps: Vec::new(),
            snap_valid: Vec::new(),
            at: At::Base,
            inputs,
            steps,
        })
    }

    /// Allocates `n` snapshot buffers (option A) if fewer are held.
    pub fn ensure_snapshots(&mut self, n: usize, what: &str) -> Result<()> {
        while self.snaps.len() < n {
            self.snaps.push(zeroed(self.dims.state_floats(), what)?);
            self.snap_valid.push(false);
        }
        Ok(())
    }

    /// Positions since the commit.
    pub fn pending(&self) -> usize {
        self.inputs.len() / self.dims.input_floats() - self.dims.window()
    }

    /// The last K − 1 pre-conv input rows (the conv window at the current length).
    pub fn window_rows(&self) -> &[f32] {
        let w = self.dims.window() * self.dims.input_floats();
        &self.inputs[self.inputs.len() - w..]
    }

    /// Appends one forward's pre-conv input rows.
    pub fn push_inputs(&mut self, rows: &[f32]) {
        self.inputs.extend_from_slice(rows);
    }

    /// Replaces the kept inputs by the window alone (`K − 1` rows): after a forward
    /// whose positions are committed at once.
    pub fn replace_window(&mut self, rows: &[f32]) {
        self.inputs.clear();
        self.inputs.extend_from_slice(rows);
    }

    /// Appends one forward's recurrence inputs (rows of `k | v | g | β`).
    pub fn push_steps(&mut self, rows: &[f32]) {
        self.steps.extend_from_slice(rows);
    }

    /// The state at the current length (every head).
    pub fn current(&self) -> &[f32] {
        match self.at {
            At::Base => &self.base,
            At::Live => &self.live,
            At::Snap(u) => &self.snaps[u],
        }
    }

    /// Runs the recurrence over `n` positions for every head from the current state
    /// (`steps`: rows of `k | v | exp(g) | β`); `q` (q rows and the output, `n × inner`)
    /// asks for the read-out. `dest` says where the states go: see [`Dest`].
    pub fn run(&mut self, n: usize, steps: &[f32], q: Option<(&[f32], &mut [f32])>, dest: Dest) {
        let d = self.dims;
        let (inner, sf) = (d.inner(), d.step_floats());
        let u0 = self.pending_steps();
        // Where each position's state comes from and goes (decided before any write).
        let mut plan = Vec::with_capacity(n);
        let mut at = self.at;
        for t in 0..n {
            let u = u0 + t;
            let dst = match dest {
                Dest::Commit => At::Base,
                Dest::Snapshots if u < self.snaps.len() => At::Snap(u),
                Dest::Snapshots | Dest::Replay => At::Live,
            };
            plan.push((at, dst));
            at = dst;
        }
        if plan.iter().any(|&(_, dst)| dst == At::Live) && self.live.is_empty() {
            // The working buffer of option C, made on first use (a session that only
            // decodes never needs it); its bytes were counted when the session was sized.
            self.live = vec![0.0; d.state_floats()];
        }
        let hh = d.dim * d.dim;
        // Each head's slice of every buffer: heads are independent, so they run side by
        // side (each head's positions in order), with the same per-step code either way.
        let heads: Vec<HeadBufs<'_>> = {
            let mut base_h = self.base.chunks_mut(hh);
            let mut live_h = self.live.chunks_mut(hh);
            let mut snaps_h: Vec<Vec<&mut [f32]>> = (0..d.heads).map(|_| Vec::new()).collect();
            for buffer in self.snaps.iter_mut() {
                for (h, c) in buffer.chunks_mut(hh).enumerate() {
                    snaps_h[h].push(c);
                }
            }
            snaps_h
                .into_iter()
                .map(|snaps| HeadBufs {
                    base: base_h.next().expect("a base slice per head"),
                    live: live_h.next().unwrap_or(&mut []),
                    snaps,
                })
                .collect()
        };
        let q_rows = q.as_ref().map(|(qr, _)| *qr);
        let one = |(h, mut b): (usize, HeadBufs<'_>)| -> Vec<f32> {
            let mut out = vec![0.0f32; if q_rows.is_some() { n * d.dim } else { 0 }];
            for (t, &(src, dst)) in plan.iter().enumerate() {
                let row = &steps[t * sf..(t + 1) * sf];
                let at =
                    |part: usize| &row[part * inner + h * d.dim..part * inner + (h + 1) * d.dim];
                let s = StepIn {
                    k: at(0),
                    v: at(1),
                    decay: at(2),
                    beta: row[3 * inner + h],
                };
                let read = q_rows.map(|qr| {
                    (
                        &qr[t * inner + h * d.dim..t * inner + (h + 1) * d.dim],
                        &mut out[t * d.dim..(t + 1) * d.dim],
                    )
                });
                b.step(src, dst, &s, read);
            }
            out
        };
        let work = heads.into_iter().enumerate();
        let outs: Vec<Vec<f32>> = if d.state_floats() * n >= PARALLEL_STATE {
            work.collect::<Vec<_>>().into_par_iter().map(one).collect()
        } else {
            work.map(one).collect()
        };
        if let Some((_, o)) = q {
            for (h, ho) in outs.iter().enumerate() {
                for t in 0..n {
                    o[t * inner + h * d.dim..t * inner + (h + 1) * d.dim]
                        .copy_from_slice(&ho[t * d.dim..(t + 1) * d.dim]);
                }
            }
        }
        for &(_, dst) in &plan {
            if let At::Snap(b) = dst {
                self.snap_valid[b] = true;
            }
        }
        self.at = at;
    }

    /// Positions whose recurrence inputs are kept.
    fn pending_steps(&self) -> usize {
        self.steps.len() / self.dims.step_floats()
    }

    /// Returns to `u` positions after the commit (`u ≤ pending()`), by a snapshot when
    /// one is held, else by replaying `u` steps from the base.
    pub fn rollback(&mut self, u: usize) {
        let d = self.dims;
        let pending = self.pending();
        debug_assert!(u <= pending);
        if u < pending {
            if u == 0 {
                self.at = At::Base;
            } else if self.snap_valid.get(u - 1).copied().unwrap_or(false) {
                self.at = At::Snap(u - 1);
            } else {
                let sf = d.step_floats();
                let steps = std::mem::take(&mut self.steps);
                self.at = At::Base;
                self.run(u, &steps[..u * sf], None, Dest::Replay);
                self.steps = steps;
            }
            for v in self.snap_valid.iter_mut().skip(u) {
                *v = false;
            }
            self.inputs.truncate((d.window() + u) * d.input_floats());
            self.steps.truncate(u * d.step_floats());
        }
    }

    /// Makes the current state the base and forgets what undoing needed.
    pub fn commit(&mut self) {
        match self.at {
            At::Base => {}
            At::Live => std::mem::swap(&mut self.base, &mut self.live),
            At::Snap(u) => std::mem::swap(&mut self.base, &mut self.snaps[u]),
        }
        self.at = At::Base;
        for v in &mut self.snap_valid {
            *v = false;
        }
        let keep = self.dims.window() * self.dims.input_floats();
        let drop = self.inputs.len() - keep;
        self.inputs.drain(..drop);
        self.steps.clear();
    }

    /// Bytes held now (states, snapshot buffers, kept inputs).
    pub fn bytes(&self) -> u64 {
        4 * (self.base.len()
            + self.live.len()
            + self.snaps.len() * self.dims.state_floats()
            + self.inputs.capacity()
            + self.steps.capacity()) as u64
    }
}

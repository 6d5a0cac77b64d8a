//! Weight matrix × activation columns: `y[c] = W · x[c]` for 1 to a few columns (decode,
//! draft block, verify block), with W of any type in the kernel table
//! ([`crate::FORMATS`]), as stored in a GGUF. The driver knows a format only through its
//! table row ([`FormatKernels`]): the activation kind it dots with and its row kernel.
//!
//! **Numerics contract.** Every output element `y[c][r]` is computed by one call of the
//! row kernel on row `r` and column `c`, whatever the number of columns and however the
//! rows are split across threads. So a batched forward (verify B positions at once) gives
//! the same bits per column as B single-column calls — the property speculative decoding
//! needs to be lossless against target-only decoding with the same code.
//!
//! Each column is converted once to the format's activation kind ([`Columns`], as ggml
//! does for its CPU matmul), then every row kernel call reads it.

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::thread::LocalKey;
use std::time::{Duration, Instant};

pub use crate::columns::{Activation, Columns};
use crate::format::FormatKernels;
pub use crate::matrix::{Matrix, Packed, RowKernel};
use crate::Kernels;

/// Relative tolerance between a fast kernel and its scalar reference where they may differ
/// (the attention vector kernels; weight formats agree bit for bit), as a fraction of
/// `Σ |a_k · b_k|` (f32 accumulation over up to ~10^5 terms in different orders).
pub const DOT_TOLERANCE: f32 = 1e-5;

/// Rows of a task are a multiple of this, so a format's packed tiles (up to 16 rows)
/// never straddle two tasks.
pub const TASK_ROW_ALIGN: usize = 16;

/// Rows per task when splitting `rows` rows across threads: about eight tasks per
/// thread (for balance), never fewer than 16 rows (for overhead), a multiple of
/// [`TASK_ROW_ALIGN`].
fn rows_per_task(rows: usize) -> usize {
    rows.div_ceil(8 * rayon::current_num_threads())
        .max(16)
        .next_multiple_of(TASK_ROW_ALIGN)
}

/// Bytes a [`gemm_with`] of `rows` output rows over `cols` inputs and `n` columns
/// allocates besides its input and output, bounded from above: the prepared activations
/// ([`crate::columns::prepared_bytes`]) and each worker's task buffer (`rows per task × n`
/// f32) and accumulators (at most eight 32-byte registers per row). For memory checks
/// made before a run.
pub fn scratch_bytes(rows: usize, cols: usize, n: usize) -> u64 {
    let per = rows_per_task(rows).min(rows.max(1)) as u64;
    let workers = rayon::current_num_threads() as u64;
    let task = per.saturating_mul((4 * n as u64).saturating_add(256));
    workers
        .saturating_mul(task)
        .saturating_add(crate::columns::prepared_bytes(cols, n))
}

thread_local! {
    /// Whether this thread's products are a prompt's ([`prompt_order`]).
    static PROMPT: Cell<bool> = const { Cell::new(false) };
    /// Whether this thread's products may take dspark's own order ([`own_order`]).
    static OWN: Cell<bool> = const { Cell::new(false) };
    /// Whether this thread's products take their row tasks last first ([`last_rows_first`]).
    static LAST_FIRST: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f` with this thread's `flag` set, restoring what it was afterwards (also when
/// `f` panics).
fn with_flag<R>(flag: &'static LocalKey<Cell<bool>>, f: impl FnOnce() -> R) -> R {
    struct Restore(&'static LocalKey<Cell<bool>>, bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            self.0.with(|p| p.set(self.1));
        }
    }
    let _restore = Restore(flag, flag.with(|p| p.replace(true)));
    f()
}

/// Runs `f` with the plain products this thread starts ([`gemm`], [`gemm_many`]) in
/// dspark's own order where the format has one and the matrix its packed copy
/// ([`FormatKernels::own_rows_for`]); elsewhere the llama.cpp orders. For products whose
/// bits need not be llama.cpp's: a drafter's forward, whose proposals decide how fast a
/// run is, never what it outputs. Each column is still computed as it would be alone.
pub fn own_order<R>(f: impl FnOnce() -> R) -> R {
    with_flag(&OWN, f)
}

/// Runs `f` with the products this thread starts ([`gemm`], [`gemm_many`]) handing out
/// their row tasks from the matrix's last rows to its first (each task still walks its own
/// rows forward). For passes repeated over a matrix larger than the last-level cache:
/// alternating the direction, each pass starts on the rows the one before ended with, the
/// ones the cache still holds, where a pass in the same direction would find its first
/// rows evicted by the previous pass's last. Each product's bits are the same either way.
pub fn last_rows_first<R>(f: impl FnOnce() -> R) -> R {
    with_flag(&LAST_FIRST, f)
}

/// Whether this thread is inside [`own_order`].
pub fn in_own_order() -> bool {
    OWN.with(|p| p.get())
}

/// Runs `f` with the products this thread starts in the order llama.cpp gives a prompt's
/// forward: from [`crate::tiled::MIN_COLUMNS`] columns on, the formats with a prompt order
/// ([`FormatKernels::prompt_rows`]) take it. The runtime wraps its prompt prefill in this;
/// decode and verify forwards keep the one-column order (a verify of n columns is still n
/// decode steps, bit for bit). Products started from other threads (a parallel loop's
/// per-head or per-expert products) are not affected.
pub fn prompt_order<R>(f: impl FnOnce() -> R) -> R {
    with_flag(&PROMPT, f)
}

/// Whether this thread is inside [`prompt_order`].
pub fn in_prompt_order() -> bool {
    PROMPT.with(|p| p.get())
}

/// `y[c * w.rows + r] = Σ_k W[r][k] · x[c * w.cols + k]` for each of the `x.len() / w.cols`
/// columns, with the row kernel `kernels` has for the format, on the current rayon pool.
///
/// # Panics
/// If `x` is not whole columns or `y` is not `columns × rows`.
pub fn gemm_with(kernels: &Kernels, w: &Matrix<'_>, x: &[f32], y: &mut [f32]) {
    gemm_many_with(kernels, &[w], x, &mut [y]);
}

/// Several matrices of the same type and input size times the same columns, in one
/// parallel pass (one activation preparation, one fork-join): `ys[i] = ws[i] · x`, each
/// as [`gemm_with`] would compute it, bit for bit.
///
/// # Panics
/// If the matrices differ in type or input size, `x` is not whole columns, or a `ys[i]` is
/// not `columns × ws[i].rows`.
pub fn gemm_many_with(kernels: &Kernels, ws: &[&Matrix<'_>], x: &[f32], ys: &mut [&mut [f32]]) {
    assert_eq!(ws.len(), ys.len(), "one output per matrix");
    let Some(first) = ws.first() else { return };
    assert!(
        ws.iter().all(|w| w.ty == first.ty && w.cols == first.cols),
        "matrices of one call share type and input size"
    );
    let format = table_row(kernels, first);
    let x = Columns::with(kernels, format.activation, x, first.cols);
    let n = x.count();
    let prompt = in_prompt_order();
    let own = in_own_order();
    for (w, y) in ws.iter().zip(ys.iter()) {
        assert_eq!(y.len(), n * w.rows, "y must hold {n} columns of {}", w.rows);
    }
    let per = rows_per_task(ws.iter().map(|w| w.rows).sum());
    // A task: rows first..first + k of one matrix, and those rows' slots in each of the n
    // column-major output columns.
    let mut tasks: Vec<(&Matrix<'_>, RowKernel, usize, Vec<&mut [f32]>)> = Vec::new();
    for (w, y) in ws.iter().zip(ys.iter_mut()) {
        let kernel = own
            .then(|| format.own_rows_for(w))
            .flatten()
            .unwrap_or_else(|| format.rows_for(w, n, prompt));
        let mut columns: Vec<_> = y
            .chunks_mut(w.rows)
            .map(|col| col.chunks_mut(per))
            .collect();
        for t in 0..w.rows.div_ceil(per) {
            let pieces = columns
                .iter_mut()
                .map(|col| col.next().expect("every column has rows / per pieces"))
                .collect();
            tasks.push((w, kernel, t * per, pieces));
        }
    }
    let run = |buf: &mut Vec<f32>, (w, kernel, first, mut pieces): Task<'_, '_>| {
        if n == 1 {
            kernel(w, first, &x, pieces[0]);
            return;
        }
        // The kernel writes rows × columns; scatter into the columns.
        let k = pieces[0].len();
        buf.resize(k * n, 0.0);
        kernel(w, first, &x, &mut buf[..k * n]);
        for (c, piece) in pieces.iter_mut().enumerate() {
            for (r, o) in piece.iter_mut().enumerate() {
                *o = buf[r * n + c];
            }
        }
    };
    run_tasks(handed_out(tasks), run);
}

/// Tasks in the order [`run_tasks`] hands them out: as made (the matrix's first rows
/// first), or last first inside [`last_rows_first`].
fn handed_out<T>(mut tasks: Vec<T>) -> Vec<T> {
    if LAST_FIRST.with(|b| b.get()) {
        tasks.reverse();
    }
    tasks
}

/// A task of [`gemm_many_with`]: rows `first..` of a matrix by its row kernel, and those
/// rows' slots in each output column.
type Task<'m, 'y> = (&'m Matrix<'m>, RowKernel, usize, Vec<&'y mut [f32]>);

/// Runs every task once, on the calling thread and the pool's other workers: each claims
/// the next unclaimed task until none is left, and the caller, once it finds none, waits
/// (spinning, then yielding) for the tasks others are still running — at most one each.
///
/// Why not rayon's parallel iterator: a decode step is ~140 passes of 20–300 µs, and
/// rayon's idle workers sleep after a few microseconds without work. Split in halves up
/// front, a pass waited for a sleeping worker to wake and steal its half, and the caller
/// slept at the end of nearly every pass until the other's last part was done (a futex wake
/// each way; `docs/PERFORMANCE.md`, issue #22). Here a worker that wakes late only finds
/// fewer tasks left, and the caller's wait is never longer than one task.
fn run_tasks<T: Send>(tasks: Vec<T>, run: impl Fn(&mut Vec<f32>, T) + Sync) {
    let count = tasks.len();
    let helpers = rayon::current_num_threads().min(count).saturating_sub(1);
    if helpers == 0 {
        let mut buf = Vec::new();
        tasks.into_iter().for_each(|t| run(&mut buf, t));
        return;
    }
    // Each task is taken out of its slot by the one thread that claimed its index.
    let slots: Vec<Mutex<Option<T>>> = tasks.into_iter().map(|t| Mutex::new(Some(t))).collect();
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let work = || {
        /// Counts a task done when it ends, also by a panic (which the scope then raises),
        /// so the caller's wait below always ends.
        struct Done<'a>(&'a AtomicUsize);
        impl Drop for Done<'_> {
            fn drop(&mut self) {
                self.0.fetch_add(1, Ordering::Release);
            }
        }
        let mut buf = Vec::new();
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            if i >= count {
                return;
            }
            let _done = Done(&done);
            let task = slots[i]
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take()
                .expect("each index is claimed once");
            run(&mut buf, task);
        }
    };
    rayon::in_place_scope(|s| {
        for _ in 0..helpers {
            s.spawn(|_| work());
        }
        work();
        // What others claimed: spin a little (a task is 5–50 µs), then yield the core.
        let start = Instant::now();
        while done.load(Ordering::Acquire) < count {
            if start.elapsed() < SPIN {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    });
}

/// How long [`run_tasks`]'s caller spins for the tasks others run before it yields its core.
const SPIN: Duration = Duration::from_micros(100);

/// [`gemm`] on the calling thread alone, for products too small to share (a head's, an
/// expert's over a few tokens) run from a parallel loop: the same row kernel on every row
/// and column, so the same bits as [`gemm`].
///
/// # Panics
/// As [`gemm_with`].
pub fn gemm_local(w: &Matrix<'_>, x: &[f32], y: &mut [f32]) {
    let format = table_row(crate::kernels(), w);
    let step = format.step_rows(w);
    if x.len() == w.cols {
        let x = Columns::new(format.activation, x, w.cols);
        assert_eq!(y.len(), w.rows, "y must hold 1 column of {}", w.rows);
        step(w, 0, &x, y);
        return;
    }
    // The kernel writes rows × columns; scatter into the columns, a tile of rows at a time.
    local_with(format, step, w, x, y)
}

/// [`gemm_local`] for a plain product run from a parallel loop (a 3-D tensor's per-head
/// slices, llama.cpp's batched `mul_mat`) in a prompt's forward when `prompt`: the order
/// [`gemm_with`] would take inside [`prompt_order`] ([`FormatKernels::rows_for`]), which
/// the loop's threads do not see, so the caller passes the flag.
///
/// # Panics
/// As [`gemm_with`].
pub fn gemm_local_plain(w: &Matrix<'_>, x: &[f32], y: &mut [f32], prompt: bool) {
    local_ordered(w, x, y, |f, n| f.rows_for(w, n, prompt))
}

/// [`gemm_local`] for a matrix of experts' tokens in a prompt's forward when `prompt`
/// (llama.cpp's `mul_mat_id`): from [`crate::tiled::MIN_COLUMNS`] routed tokens a tiled
/// format takes the tiled order, unless llama.cpp re-lays the matrix (its re-laid
/// `mul_mat_id` runs each token alone, the one-column order). Run from the threads of a
/// parallel loop, which [`prompt_order`] does not reach, so the caller passes the flag.
///
/// # Panics
/// As [`gemm_with`].
pub fn gemm_local_routed(w: &Matrix<'_>, x: &[f32], y: &mut [f32], prompt: bool) {
    local_ordered(w, x, y, |f, n| f.routed_rows_for(w, n, prompt))
}

/// [`gemm_local`] for one column, else the kernel `pick` chooses for the column count.
fn local_ordered(
    w: &Matrix<'_>,
    x: &[f32],
    y: &mut [f32],
    pick: impl FnOnce(&FormatKernels, usize) -> RowKernel,
) {
    let format = table_row(crate::kernels(), w);
    let n = x.len() / w.cols.max(1);
    if n <= 1 {
        return gemm_local(w, x, y);
    }
    local_with(format, pick(format, n), w, x, y)
}

/// [`gemm_local`] with row kernel `kernel`.
fn local_with(format: &FormatKernels, kernel: RowKernel, w: &Matrix<'_>, x: &[f32], y: &mut [f32]) {
    let x = Columns::new(format.activation, x, w.cols);
    let n = x.count();
    assert_eq!(y.len(), n * w.rows, "y must hold {n} columns of {}", w.rows);
    let per = TASK_ROW_ALIGN;
    let mut buf = vec![0.0f32; per * n];
    for first in (0..w.rows).step_by(per) {
        let k = per.min(w.rows - first);
        kernel(w, first, &x, &mut buf[..k * n]);
        for c in 0..n {
            for r in 0..k {
                y[c * w.rows + first + r] = buf[r * n + c];
            }
        }
    }
}

/// [`gemm_many_with`] using the fastest row kernel this CPU has.
pub fn gemm_many(ws: &[&Matrix<'_>], x: &[f32], ys: &mut [&mut [f32]]) {
    gemm_many_with(crate::kernels(), ws, x, ys)
}

/// [`gemm_with`] using the fastest row kernel this CPU has.
pub fn gemm(w: &Matrix<'_>, x: &[f32], y: &mut [f32]) {
    gemm_with(crate::kernels(), w, x, y)
}

/// The table row of `w`'s type.
///
/// # Panics
/// If no format module multiplies the type (callers check [`Matrix::format`] when they
/// take a matrix from a file).
fn table_row<'k>(kernels: &'k Kernels, w: &Matrix<'_>) -> &'k FormatKernels {
    kernels
        .format(w.ty)
        .unwrap_or_else(|| panic!("no kernel multiplies {} weights", w.ty))
}

#[cfg(test)]
mod tests {
    use super::{handed_out, last_rows_first, run_tasks};
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn every_task_runs_once_whatever_the_threads() {
        for threads in [1, 2, 3, 8] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            for count in [0, 1, 2, 5, 16, 100] {
                let runs: Vec<AtomicUsize> = (0..count).map(|_| AtomicUsize::new(0)).collect();
                let mut out = vec![0usize; count];
                // Each task owns its output slot, as gemm's own the rows they write.
                let tasks: Vec<(usize, &mut usize)> = out.iter_mut().enumerate().collect();
                pool.install(|| {
                    run_tasks(tasks, |_, (i, slot)| {
                        runs[i].fetch_add(1, Ordering::Relaxed);
                        *slot = i + 1;
                    })
                });
                assert!(runs.iter().all(|r| r.load(Ordering::Relaxed) == 1));
                assert_eq!(out, (1..=count).collect::<Vec<_>>(), "{threads} threads");
                // Also from a thread outside any pool (the global pool's workers help).
                let mut out = vec![0usize; count];
                let tasks: Vec<&mut usize> = out.iter_mut().collect();
                run_tasks(tasks, |_, slot| *slot += 1);
                assert!(out.iter().all(|&v| v == 1));
            }
        }
    }

    #[test]
    fn tasks_are_handed_out_last_first_only_inside_last_rows_first() {
        assert_eq!(handed_out(vec![0, 1, 2]), [0, 1, 2]);
        assert_eq!(last_rows_first(|| handed_out(vec![0, 1, 2])), [2, 1, 0]);
        // The flag is restored afterwards.
        assert_eq!(handed_out(vec![0, 1, 2]), [0, 1, 2]);
    }

    #[test]
    fn a_panicking_task_is_raised_not_waited_for() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(3)
            .build()
            .unwrap();
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            pool.install(|| {
                run_tasks((0..40).collect::<Vec<usize>>(), |_, i| {
                    assert_ne!(i, 17, "task 17 fails");
                })
            })
        }));
        assert!(caught.is_err());
    }
}

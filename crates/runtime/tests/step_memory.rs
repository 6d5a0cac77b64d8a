//! The working memory a run is checked against before it starts is an upper bound: a
//! target forward and a drafted block run under a capped global allocator whose limit is
//! what `step_bytes` claims beyond what is already held. An estimate that fell short
//! would make an allocation fail (an abort, or the logits' typed error), failing the test.

use std::alloc::System;
use std::sync::Arc;

use cap::Cap;
use dspark_runtime::memory::STEP_BOOKKEEPING;
use dspark_runtime::{Logits, Target};
use dspark_testkit::run;
use dspark_testkit::target::{write_pair, Qwen3Geometry};

#[global_allocator]
static ALLOC: Cap<System> = Cap::new(System, usize::MAX);

/// Runs `f` with at most `bytes` more heap than is held now, then lifts the limit.
fn within<T>(bytes: u64, f: impl FnOnce() -> T) -> T {
    ALLOC
        .set_limit(ALLOC.allocated() + bytes as usize)
        .expect("a limit above what is held");
    let out = f();
    ALLOC.set_limit(usize::MAX).unwrap();
    out
}

#[test]
fn step_bytes_bounds_what_a_forward_and_a_draft_allocate() {
    rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build_global()
        .unwrap();
    for g in [
        Qwen3Geometry::micro(),
        Qwen3Geometry::tiny(),
        Qwen3Geometry::small(),
    ] {
        let dir = tempfile::tempdir().unwrap();
        write_pair(&g, dir.path(), 3, &|_, _| true).unwrap();
        let target = run::target(std::fs::read(dir.path().join("target.gguf")).unwrap());
        let drafter = run::drafter(run::convert(&dir.path().join("draft")), &target);
        let captures = drafter.hparams().target_layer_ids.clone();
        let block = drafter.hparams().block_size;
        let capacity = g.context.min(512);
        let mut s = target.session(capacity).unwrap();
        let mut ds = Arc::clone(&drafter).session(capacity).unwrap();
        // Warm up outside the limit (the pool's and kernels' one-time state).
        let f = s.forward(&[1, 2, 3], &captures, Logits::Last).unwrap();
        ds.add_context(&f.captured).unwrap();
        let _ = ds.draft(&s, 3).unwrap();
        for (rows, which) in [
            (1, Logits::Last),
            (16, Logits::Last),
            (block + 1, Logits::All),
            // Many rows: a per-row term that fell short would outgrow the bookkeeping allowance.
            (capacity - 8, Logits::All),
        ] {
            let tokens: Vec<u32> = (0..rows as u32).map(|i| i % 200 + 1).collect();
            let bytes = s.step_bytes(rows, which, captures.len());
            let len = s.len();
            let f = within(bytes, || s.forward(&tokens, &captures, which)).unwrap();
            let logits = match which {
                Logits::All => rows,
                Logits::Last => 1,
            } * target.shape().vocab;
            assert_eq!(f.logits.len(), logits);
            // Not vacuous: the estimate holds the outputs, and is not wildly above them.
            assert!(bytes - STEP_BOOKKEEPING >= 4 * (logits + f.captured.len()) as u64);
            s.rollback(len).unwrap();
        }
        let bytes = drafter.step_bytes(ds.capacity());
        let d = within(bytes, || ds.draft(&s, 5)).unwrap();
        assert!(!d.tokens.is_empty());
        assert!(bytes - STEP_BOOKKEEPING >= 4 * (block * target.shape().vocab) as u64 / 2);
    }
}

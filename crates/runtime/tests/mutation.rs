//! Deterministic mutation test of the runtime loaders (it runs in CI; the coverage-guided
//! fuzzer `fuzz/fuzz_targets/runtime_load.rs` does not): every truncation and thousands
//! of seeded mutants of a micro Qwen3 target and of a drafter that fits it go through
//! parse → contract → load → a short forward (target) or a block draft (drafter). Each
//! gives a model or a typed error — never a panic — and stays under a memory bound enforced
//! by a capped global allocator (an allocation past it aborts the test binary).

use std::alloc::System;
use std::sync::Arc;

use cap::Cap;
use dspark_runtime::{Drafter, Logits, Qwen3, RuntimeError, Target};
use dspark_testkit::mutate::mutants;
use dspark_testkit::target::Qwen3Geometry;

#[global_allocator]
static ALLOC: Cap<System> = Cap::new(System, usize::MAX);

/// What any single load and run may allocate beyond what the test itself holds.
const MEMORY_BOUND: usize = 256 << 20;

fn bounded(f: impl FnOnce()) {
    dspark_testkit::mutate::bounded(&ALLOC, MEMORY_BOUND, f)
}

#[test]
fn mutated_models_load_and_run_or_fail_cleanly() {
    let g = Qwen3Geometry::micro();
    let (target_bytes, draft_bytes) = dspark_testkit::micro_pair();
    // The fuzz seeds are this pair (`cargo run -p dspark-testkit --example fuzz_seeds`).
    let corpus =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/runtime_load");
    assert!(std::fs::read(corpus.join("micro-target.gguf")).unwrap() == target_bytes);
    assert!(std::fs::read(corpus.join("micro-drafter.gguf")).unwrap() == draft_bytes);
    let target =
        Arc::new(Qwen3::open(Arc::new(target_bytes.clone())).expect("a valid micro target"));
    Drafter::open(Arc::new(draft_bytes.clone()), &target.shape()).expect("a valid micro drafter");
    rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build_global()
        .ok();

    let (mut ok, mut err) = (0usize, 0usize);
    mutants(&target_bytes, 3000, 11, |bytes| {
        bounded(|| match Qwen3::open(Arc::new(bytes.to_vec())) {
            Ok(model) => {
                ok += 1;
                let model = Arc::new(model);
                let mut s = model.session(8).expect("8 positions of a checked model");
                // Values are checked by the first forward that reads them.
                match s.forward(&[1, 2], &[0], Logits::Last) {
                    Ok(f) => assert_eq!(f.logits.len(), model.shape().vocab),
                    Err(e) => assert!(
                        matches!(&e, RuntimeError::Tensor { msg, .. } if msg.contains("is not finite")),
                        "a checked model runs or names a non-finite value: {e}"
                    ),
                }
            }
            Err(e) => {
                err += 1;
                assert!(!e.to_string().is_empty());
            }
        })
    });
    assert!(
        err > target_bytes.len() && ok > 0,
        "target: {ok} ok, {err} errors"
    );

    let (mut ok, mut err) = (0usize, 0usize);
    mutants(&draft_bytes, 3000, 12, |bytes| {
        bounded(
            || match Drafter::open(Arc::new(bytes.to_vec()), &target.shape()) {
                Ok(d) => {
                    ok += 1;
                    let d = Arc::new(d);
                    let mut ds = d.session(8).expect("8 positions of a checked drafter");
                    let width = d.hparams().target_layer_ids.len() * d.hparams().hidden;
                    ds.add_context(&vec![0.5; 2 * width])
                        .expect("context rows fit");
                    let t = target.session(8).unwrap();
                    let draft = ds.draft(&t, 3).expect("a checked drafter drafts");
                    assert_eq!(draft.tokens.len(), d.drafts_per_block());
                    assert!(draft.tokens.iter().all(|&x| (x as usize) < g.vocab));
                }
                Err(e) => {
                    err += 1;
                    assert!(!e.to_string().is_empty());
                }
            },
        )
    });
    assert!(
        err > draft_bytes.len() && ok > 0,
        "drafter: {ok} ok, {err} errors"
    );
}

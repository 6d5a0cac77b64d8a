//! Any bytes as a model file, through the runtime loaders: as a target of any
//! architecture (parse → contract → the factory's load → a forward; a recurrent target
//! then rolls back by each ReplaySSM option) and as a drafter (→ a block draft on a
//! head-only stand-in of the shape it records). A checked model must run or name a
//! non-finite value at its first forward (values are checked when first read); anything
//! else must be a typed error.
#![no_main]

use std::sync::Arc;

use dspark_contract::TargetShape;
use dspark_runtime::{
    open_target, Attention, Drafter, Logits, Rollback, RuntimeError, SessionOptions,
};
use dspark_synth::head_only::HeadOnlyTarget;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(opened) = open_target(Arc::new(data.to_vec()), None) {
        let model = opened.model;
        let vocab = model.shape().vocab;
        let positions = 4.min(model.context());
        let mut s = Arc::clone(&model)
            .session(&SessionOptions { positions, undo: 2, attention: Attention::F32 })
            .expect("a few positions");
        // Values are checked by the first forward that reads them.
        let first = s.forward(&[0], &[0], Logits::Last);
        if let Err(e) = &first {
            assert!(
                matches!(e, RuntimeError::Tensor { msg, .. } if msg.contains("is not finite")),
                "a checked target runs: {e}"
            );
            return;
        }
        s.rollback(s.committed()).expect("the commit");
        if s.recurrent() {
            for mode in [Rollback::Snapshots, Rollback::Replay] {
                s.set_rollback(mode);
                let f = s.forward(&[0, 0], &[0], Logits::All).expect("a checked target runs");
                assert_eq!(f.logits.len(), 2 * vocab);
                s.rollback(s.committed() + 1).expect("a kept position");
                s.rollback(s.committed()).expect("the commit");
            }
        } else {
            let f = s.forward(&[0], &[0], Logits::Last).expect("a checked target runs");
            assert_eq!(f.logits.len(), vocab);
        }
    }
    let Ok(file) = dspark_gguf::GgufFile::parse(data) else { return };
    let Ok(d) = dspark_contract::dflash_draft::check(&file, &dspark_quant::matrix_types()) else {
        return;
    };
    let h = d.hparams();
    let vocab = d.markov().map(|m| m.vocab).or(h.target_vocab).unwrap_or(h.mask_token_id as usize + 1);
    let shape = TargetShape {
        hidden: h.hidden,
        layers: h.target_layer_ids.iter().max().map_or(1, |l| l + 1).max(h.target_layers.unwrap_or(0)),
        vocab,
    };
    // The stand-in's table is vocab × hidden bytes: keep the fuzzer's memory small.
    if vocab * h.hidden > 1 << 22 || h.hidden % 32 != 0 {
        return;
    }
    let Ok(drafter) = Drafter::open(Arc::new(data.to_vec()), &shape) else { return };
    let drafter = Arc::new(drafter);
    let mut ds = drafter.session(4).expect("a few positions");
    let width = h.target_layer_ids.len() * h.hidden;
    ds.add_context(&vec![0.25; width]).expect("one context row");
    let head = HeadOnlyTarget::new(vocab, h.hidden, shape.layers, 1);
    let out = ds.draft(&head, 0).expect("a checked drafter drafts");
    assert!(out.tokens.iter().all(|&t| (t as usize) < vocab));
});

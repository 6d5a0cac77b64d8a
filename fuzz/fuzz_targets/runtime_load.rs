//! Any bytes as a model file, through the runtime loaders: as a Qwen3 target (parse →
//! contract → load → a two-token forward), as a Kimi K3 target (the same, then a rollback
//! by each ReplaySSM option) and as a drafter (→ a block draft on a head-only
//! stand-in of the shape it records). A checked model must run; anything else must be a
//! typed error.
#![no_main]

use std::sync::Arc;

use dspark_contract::TargetShape;
use dspark_runtime::{Drafter, KimiK3, Logits, Qwen3, Rollback, Target};
use dspark_testkit::head_only::HeadOnlyTarget;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(model) = Qwen3::open(Arc::new(data.to_vec())) {
        let model = Arc::new(model);
        let mut s = model.session(4.min(model.hparams().context)).expect("a few positions");
        let f = s.forward(&[0], &[0], Logits::Last).expect("a checked target runs");
        assert_eq!(f.logits.len(), model.shape().vocab);
    }
    if let Ok(model) = KimiK3::open(Arc::new(data.to_vec())) {
        let model = Arc::new(model);
        let mut s = model.session(4.min(model.hparams().context), 2).expect("a few positions");
        for mode in [Rollback::Snapshots, Rollback::Replay] {
            s.set_rollback(mode);
            let f = s.forward(&[0, 0], &[0], Logits::All).expect("a checked target runs");
            assert_eq!(f.logits.len(), 2 * model.shape().vocab);
            s.rollback(s.committed() + 1).expect("a kept position");
            s.rollback(s.committed()).expect("the commit");
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

//! The Kimi K3 target: batched forwards equal sequential ones across the architecture's
//! options, both ReplaySSM rollbacks land on the state sequential decoding leaves
//! (conv-window edges included), and speculative decoding equals plain decoding.

use std::sync::Arc;

use dspark_gguf::GgmlType;
use dspark_runtime::generate::{autoregressive, speculative_with, Plan, Quiet, Request};
use dspark_runtime::schedule::Schedule;
use dspark_runtime::{Drafter, KimiK3, Logits, Rollback, Target};
use dspark_testkit::kimi_k3::{kimi_k3_gguf, write_k3_pair, K3Geometry};
use dspark_testkit::rng::SplitMix64;
use dspark_testkit::run;

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// The tiny geometry and variants that switch each option the layout has: no q LoRA,
/// experts at full width without a shared expert, softmax gating with groups, no residual
/// blocks, the softplus gate, a conv of 2, an MLA first layer without its gate.
fn variants() -> Vec<K3Geometry> {
    let t = K3Geometry::tiny();
    let mut plain_q = t.clone();
    plain_q.q_lora_rank = 0;
    plain_q.latent = 0;
    plain_q.shared_experts = 0;
    plain_q.res_block = 3;
    let mut softmax = t.clone();
    softmax.gating = 1;
    softmax.experts = 8;
    softmax.experts_used = 3;
    softmax.expert_groups = 4;
    softmax.expert_groups_used = 2;
    softmax.weights_norm = false;
    softmax.weights_scale = 1.0;
    softmax.routed_norm = false;
    let mut plain = t.clone();
    plain.res_block = 0;
    plain.gate_lower_bound = None;
    plain.conv_kernel = 2;
    plain.mla_layers = vec![0, 4];
    plain.mla_gate = false;
    plain.captures = vec![0, 4];
    plain.dense_layers = 0;
    let mut one_block = t.clone();
    one_block.res_block = 1;
    one_block.gating = 4;
    one_block.situ_linear_beta = 0.0;
    // Heads wide enough that the recurrence runs them in parallel (8 × 64² state values
    // over the 11 positions).
    let mut wide = t.clone();
    wide.heads = 8;
    wide.kda_head_dim = 64;
    // Experts stored as MXFP4, as K3 ships them.
    let mut mxfp4 = t.clone();
    mxfp4.expert_type = Some(GgmlType::MXFP4);
    vec![t, plain_q, softmax, plain, one_block, wide, mxfp4]
}

/// Model bytes that record what the runtime says it is about to read.
struct Recording {
    bytes: Vec<u8>,
    named: std::sync::Mutex<Vec<std::ops::Range<usize>>>,
}

impl AsRef<[u8]> for Recording {
    fn as_ref(&self) -> &[u8] {
        &self.bytes
    }
}

impl dspark_runtime::ModelData for Recording {
    fn will_need(&self, ranges: &[std::ops::Range<usize>]) {
        assert!(
            ranges.windows(2).all(|w| w[0].end < w[1].start),
            "sorted, disjoint and merged: {ranges:?}"
        );
        self.named.lock().unwrap().extend(ranges.iter().cloned());
    }
}

/// A forward names the bytes it is about to read before reading them: the first, every
/// dense matrix (the output head included, the embedding not: its rows are read one by
/// one); each, the experts its tokens route to and no other — so a mapped file larger
/// than memory reads what a step needs and nothing more; and the session reports those
/// experts and bytes as the forward's routed cost.
#[test]
fn a_forward_names_the_experts_it_routes_to_and_no_others() {
    let g = K3Geometry::tiny();
    let bytes = kimi_k3_gguf(&g, 5, GgmlType::Q8_0);
    let file = dspark_gguf::GgufFile::parse(&bytes).unwrap();
    let base = bytes.as_ptr() as usize;
    let range = |name: &str| {
        let t = file.tensor(name).unwrap();
        let start = t.data.as_ptr() as usize - base;
        start..start + t.data.len()
    };
    let covered = |named: &[std::ops::Range<usize>], r: &std::ops::Range<usize>| -> usize {
        named
            .iter()
            .map(|n| n.end.min(r.end).saturating_sub(n.start.max(r.start)))
            .sum()
    };
    let rec = Arc::new(Recording {
        bytes: bytes.clone(),
        named: Default::default(),
    });
    let m = Arc::new(KimiK3::open(rec.clone()).unwrap());
    let mut s = m.session(8, 1).unwrap();
    for (step, tokens) in [&[5u32][..], &[9, 11, 13]].into_iter().enumerate() {
        rec.named.lock().unwrap().clear();
        s.forward_commit(tokens, &[], Logits::Last).unwrap();
        let named = rec.named.lock().unwrap().clone();
        let out = range("output.weight");
        assert_eq!(covered(&named, &out), if step == 0 { out.len() } else { 0 });
        assert_eq!(covered(&named, &range("token_embd.weight")), 0);
        let mut want = dspark_runtime::Routed::default();
        for l in g.dense_layers..g.layers {
            for kind in ["gate", "up", "down"] {
                let r = range(&format!("blk.{l}.ffn_{kind}_exps.weight"));
                let part = r.len() / g.experts;
                let c = covered(&named, &r);
                assert_eq!(c % part, 0, "layer {l} {kind}: whole experts");
                let n = c / part;
                want.bytes += c as u64;
                if kind == "gate" {
                    want.experts += n as u64;
                }
                // One token routes to `experts_used` experts; three to at least as many.
                if step == 0 {
                    assert_eq!(n, g.experts_used, "layer {l} {kind}");
                } else {
                    assert!((g.experts_used..=g.experts).contains(&n), "layer {l}");
                }
            }
        }
        // What the session reports the forward's routed experts cost is what it named.
        assert_eq!(s.routed(), Some(want), "step {step}");
    }
}

fn model(g: &K3Geometry, seed: u64, ty: GgmlType) -> Arc<KimiK3> {
    run::kimi_k3(kimi_k3_gguf(g, seed, ty))
}

fn tokens(n: usize, vocab: usize, seed: u64) -> Vec<u32> {
    let mut r = SplitMix64(seed);
    (0..n)
        .map(|_| (r.next_u64() % vocab as u64) as u32)
        .collect()
}

#[test]
fn batched_forward_equals_sequential_for_every_option() {
    for (gi, g) in variants().iter().enumerate() {
        for ty in [GgmlType::F32, GgmlType::Q8_0] {
            let m = model(g, 3 + gi as u64, ty);
            let (v, e) = (m.shape().vocab, m.shape().hidden);
            let toks = tokens(11, v, gi as u64);
            let capture: Vec<usize> = (0..g.layers).rev().collect();
            let w = capture.len() * e;
            let mut all = m.session(64, 16).unwrap();
            let full = all.forward(&toks, &capture, Logits::All).unwrap();
            assert!(full.logits.iter().all(|x| x.is_finite()));
            // One position at a time, committed as they go.
            let mut one = m.session(64, 16).unwrap();
            for (t, &tok) in toks.iter().enumerate() {
                let f = one.forward_commit(&[tok], &capture, Logits::All).unwrap();
                assert_eq!(
                    bits(&f.logits),
                    bits(&full.logits[t * v..(t + 1) * v]),
                    "{} {ty:?} logits at {t}",
                    g.name
                );
                assert_eq!(
                    bits(&f.captured),
                    bits(&full.captured[t * w..(t + 1) * w]),
                    "{} {ty:?} taps at {t}",
                    g.name
                );
            }
            // Uneven chunks, kept for undo then committed.
            let mut chunked = m.session(64, 16).unwrap();
            let mut at = 0;
            for n in [3, 1, 4, 3] {
                let f = chunked
                    .forward(&toks[at..at + n], &capture, Logits::All)
                    .unwrap();
                chunked.commit();
                assert_eq!(
                    bits(&f.logits),
                    bits(&full.logits[at * v..(at + n) * v]),
                    "{} chunk at {at}",
                    g.name
                );
                at += n;
            }
            all.commit();
            let s = all.recurrent_state();
            assert_eq!(s, one.recurrent_state(), "{} state", g.name);
            assert_eq!(s, chunked.recurrent_state(), "{} state", g.name);
            // Logits::Last is the last row.
            let mut last = m.session(64, 16).unwrap();
            let l = last.forward(&toks, &[], Logits::Last).unwrap();
            assert_eq!(bits(&l.logits), bits(&full.logits[(toks.len() - 1) * v..]));
        }
    }
}

#[test]
fn both_rollbacks_leave_the_state_sequential_decoding_leaves() {
    // K = 4 (a window of 3) and K = 2: keeping 1..=7 positions of a verify of 7 crosses
    // the window's edge either way; keeping 0 returns to the commit.
    let mut k2 = K3Geometry::tiny();
    k2.conv_kernel = 2;
    let mut wide = K3Geometry::tiny();
    wide.heads = 8;
    wide.kda_head_dim = 64;
    for g in [K3Geometry::tiny(), k2, wide] {
        let m = model(&g, 9, GgmlType::Q8_0);
        let v = m.shape().vocab;
        let prefix = tokens(5, v, 1);
        let verify = tokens(7, v, 2);
        let next = tokens(3, v, 3);
        for mode in [Rollback::Snapshots, Rollback::Replay] {
            for keep in 0..=verify.len() {
                let mut s = m.session(64, 8).unwrap();
                s.forward_commit(&prefix, &[], Logits::Last).unwrap();
                s.set_rollback(mode);
                s.forward(&verify, &[], Logits::All).unwrap();
                s.rollback(prefix.len() + keep).unwrap();
                s.commit();
                let mut fresh = m.session(64, 8).unwrap();
                for &t in prefix.iter().chain(&verify[..keep]) {
                    fresh.forward_commit(&[t], &[], Logits::Last).unwrap();
                }
                assert_eq!(s.len(), fresh.len());
                assert_eq!(
                    s.recurrent_state(),
                    fresh.recurrent_state(),
                    "{} {mode:?} keep {keep}",
                    g.name
                );
                let a = s.forward(&next, &[1], Logits::All).unwrap();
                let b = fresh.forward(&next, &[1], Logits::All).unwrap();
                assert_eq!(
                    bits(&a.logits),
                    bits(&b.logits),
                    "{} {mode:?} keep {keep}: logits after",
                    g.name
                );
                assert_eq!(bits(&a.captured), bits(&b.captured));
            }
        }
        // Rolling back twice before a commit, and forward again in between.
        let mut s = m.session(64, 8).unwrap();
        s.forward_commit(&prefix, &[], Logits::Last).unwrap();
        s.set_rollback(Rollback::Snapshots);
        s.forward(&verify[..4], &[], Logits::All).unwrap();
        s.rollback(prefix.len() + 3).unwrap();
        s.set_rollback(Rollback::Replay);
        s.forward(&verify[3..6], &[], Logits::All).unwrap();
        s.rollback(prefix.len() + 5).unwrap();
        s.rollback(prefix.len() + 2).unwrap();
        s.commit();
        let mut fresh = m.session(64, 8).unwrap();
        fresh.forward_commit(&prefix, &[], Logits::Last).unwrap();
        fresh
            .forward_commit(&verify[..2], &[], Logits::Last)
            .unwrap();
        assert_eq!(
            s.recurrent_state(),
            fresh.recurrent_state(),
            "{}: mixed rollbacks",
            g.name
        );
        // Out of range: refused, nothing changed.
        assert!(s.rollback(s.len() + 1).is_err());
        assert!(s.rollback(s.committed().saturating_sub(1)).is_err() || s.committed() == 0);
        assert_eq!(s.recurrent_state(), fresh.recurrent_state());
    }
}

#[test]
fn the_undo_window_is_sized_from_the_request() {
    let m = model(&K3Geometry::tiny(), 1, GgmlType::F32);
    let mut s = m.session(32, 4).unwrap();
    let e = s.forward(&[1, 2, 3, 4, 5], &[], Logits::Last).unwrap_err();
    assert!(
        e.to_string().contains("at most 4 uncommitted positions"),
        "{e}"
    );
    assert_eq!(s.len(), 0);
    // Committed forwards keep nothing to undo: any length.
    s.forward_commit(&[1, 2, 3, 4, 5, 6, 7, 8], &[], Logits::Last)
        .unwrap();
    s.forward(&[1, 2, 3, 4], &[], Logits::Last).unwrap();
    assert!(s.forward(&[1], &[], Logits::Last).is_err());
    assert!(m.session(0, 4).is_err());
    assert!(m.session(m.hparams().context + 1, 4).is_err());
    assert!(s.forward(&[9999], &[], Logits::Last).is_err());
    assert!(s.forward(&[1], &[99], Logits::Last).is_err());
}

/// A synthetic K3 pair (target, converted drafter capturing MLA layers).
fn pair(g: &K3Geometry, seed: u64) -> (Arc<KimiK3>, Arc<Drafter>) {
    let dir = tempfile::tempdir().unwrap();
    write_k3_pair(g, dir.path(), seed, &|_, _| true).unwrap();
    let target = run::kimi_k3(std::fs::read(dir.path().join("target.gguf")).unwrap());
    let drafter = run::drafter_for(run::convert(&dir.path().join("draft")), &target.shape());
    (target, drafter)
}

#[test]
fn speculative_decoding_equals_plain_decoding_on_kimi_k3() {
    for seed in [4u64, 5] {
        let (target, drafter) = pair(&K3Geometry::tiny(), seed);
        let v = target.shape().vocab;
        let drafts = drafter.drafts_per_block();
        for p in 0..6u64 {
            let prompt = tokens(3 + p as usize * 5, v, 100 * seed + p);
            let req = Request {
                prompt: &prompt,
                max_tokens: 40,
                context: 4096,
                stop: &[],
                eos: None,
                sampling: Default::default(),
            };
            let n = req.positions(drafts);
            let mut plain = target.session(n, drafts + 1).unwrap();
            let ar = autoregressive(&mut plain, &req, &mut Quiet).unwrap();
            for (schedule, rollback) in [
                (Schedule::Fixed, Some(Rollback::Replay)),
                (Schedule::Fixed, Some(Rollback::Snapshots)),
                (Schedule::Adaptive, None),
            ] {
                let plan = Plan {
                    schedule,
                    draft_max: None,
                    rollback,
                };
                let mut s = target.session(n, drafts + 1).unwrap();
                let mut d = drafter.session(n).unwrap();
                let sp = speculative_with(&mut s, &mut d, &req, plan, &mut Quiet).unwrap();
                assert_eq!(sp.tokens, ar.tokens, "seed {seed} prompt {p} {plan:?}");
                if schedule == Schedule::Fixed {
                    assert!(sp.stats.rounds > 0);
                }
            }
        }
    }
}

/// llama.cpp's flash-attention numerics (F16 keys, values, query and accumulator) keep
/// the batched = sequential promise, and a rollback under them lands where sequential
/// decoding does. (How far they move a random model's logits from f32 attention says
/// little: Q8_0 rounding and MoE routing amplify a 5e-4 change chaotically.)
#[test]
fn f16_attention_is_batch_invariant_and_rolls_back_exactly() {
    use dspark_runtime::Attention;
    let g = K3Geometry::tiny();
    let m = model(&g, 13, GgmlType::Q8_0);
    let v = m.shape().vocab;
    let toks = tokens(12, v, 8);
    let session = || {
        let mut s = m.session(64, 16).unwrap();
        s.set_attention(Attention::F16);
        s
    };
    let mut all = session();
    let full = all.forward(&toks, &[1, 3], Logits::All).unwrap();
    let mut one = session();
    for (t, &tok) in toks.iter().enumerate() {
        let f = one.forward_commit(&[tok], &[1, 3], Logits::All).unwrap();
        assert_eq!(
            bits(&f.logits),
            bits(&full.logits[t * v..(t + 1) * v]),
            "at {t}"
        );
    }
    let exact = m
        .session(64, 16)
        .unwrap()
        .forward(&toks, &[1, 3], Logits::All)
        .unwrap();
    assert_ne!(
        bits(&exact.logits),
        bits(&full.logits),
        "F16 attention is another computation"
    );
    // Verify 7 after a prefix of 5, keep 3, then 2 more: as decoding the 10 kept tokens.
    let mut s = session();
    s.forward_commit(&toks[..5], &[], Logits::Last).unwrap();
    s.forward(&toks[5..12], &[], Logits::All).unwrap();
    s.rollback(8).unwrap();
    s.commit();
    let a = s.forward(&toks[8..10], &[], Logits::All).unwrap();
    let mut fresh = session();
    fresh.forward_commit(&toks[..8], &[], Logits::Last).unwrap();
    let b = fresh.forward(&toks[8..10], &[], Logits::All).unwrap();
    assert_eq!(bits(&a.logits), bits(&b.logits));
}

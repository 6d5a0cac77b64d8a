//! The runtime's behaviour: batched forwards equal sequential ones, the rollback contract,
//! lossless speculation across geometries and prompts, sessions apart from weights,
//! streaming, stop reasons, interrupts and memory sized from the request.

use std::cell::Cell;
use std::sync::Arc;

use dspark_gguf::GgmlType;
use dspark_runtime::generate::{
    argmax, autoregressive, speculative, Observer, Request, Round, StopReason, PREFILL_CHUNK,
};
use dspark_runtime::{Drafter, Logits, Qwen3, RuntimeError, Target};
use dspark_testkit::rng::SplitMix64;
use dspark_testkit::run::{self, request};
use dspark_testkit::target::{qwen3_gguf, write_pair, Qwen3Geometry};

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// A synthetic target and its converted drafter, loaded.
fn pair(g: &Qwen3Geometry, seed: u64) -> (Arc<Qwen3>, Arc<Drafter>) {
    let dir = tempfile::tempdir().unwrap();
    write_pair(g, dir.path(), seed, &|_, _| true).unwrap();
    let target = run::target(std::fs::read(dir.path().join("target.gguf")).unwrap());
    let drafter = run::drafter(run::convert(&dir.path().join("draft")), &target);
    (target, drafter)
}

#[test]
fn batched_forward_equals_sequential_and_rollback_replays_exactly() {
    // The small geometry's rows are whole groups of eight Q8_0 blocks plus leftovers, so
    // one-token and multi-token forwards run different kernels there: still the same bits.
    for (g, ty) in [
        (Qwen3Geometry::tiny(), GgmlType::Q8_0),
        (Qwen3Geometry::tiny(), GgmlType::F32),
        (Qwen3Geometry::small(), GgmlType::Q8_0),
    ] {
        let model = run::target(qwen3_gguf(&g, 7, ty));
        let tokens = [5u32, 17, 300, 2, 511, 42, 42, 9];
        let capture = [1, 0];
        let mut batched = model.session(64).unwrap();
        let all = batched.forward(&tokens, &capture, Logits::All).unwrap();
        assert_eq!(batched.len(), tokens.len());
        assert!(all.logits.iter().all(|v| v.is_finite()));
        let mut seq = model.session(64).unwrap();
        let (v, hd) = (model.shape().vocab, model.shape().hidden);
        for (t, &tok) in tokens.iter().enumerate() {
            let one = seq.forward(&[tok], &capture, Logits::All).unwrap();
            assert_eq!(
                bits(&one.logits),
                bits(&all.logits[t * v..(t + 1) * v]),
                "{ty:?} logits at {t}"
            );
            assert_eq!(
                bits(&one.captured),
                bits(&all.captured[t * 2 * hd..(t + 1) * 2 * hd]),
                "{ty:?} capture at {t}"
            );
        }
        // Only the last row: the same bits as the last row of all.
        let mut last = model.session(64).unwrap();
        let l = last.forward(&tokens, &capture, Logits::Last).unwrap();
        assert_eq!(bits(&l.logits), bits(&all.logits[7 * v..]));
        // Roll back to 3 positions, replay the rest in two chunks: same bits.
        batched.rollback(3).unwrap();
        let a = batched
            .forward(&tokens[3..5], &capture, Logits::All)
            .unwrap();
        let b = batched
            .forward(&tokens[5..], &capture, Logits::All)
            .unwrap();
        assert_eq!(bits(&a.logits), bits(&all.logits[3 * v..5 * v]));
        assert_eq!(bits(&b.logits), bits(&all.logits[5 * v..]));
    }
}

/// commit / rollback: any position between the last commit and the end is reachable,
/// nothing else, and a refused call changes nothing; requests beyond the session, the
/// vocabulary or the layers are refused.
#[test]
fn the_rollback_contract_and_requests_beyond_the_session() {
    let model = run::target(qwen3_gguf(&Qwen3Geometry::tiny(), 1, GgmlType::Q8_0));
    let mut s = model.session(6).unwrap();
    s.forward(&[1, 2, 3], &[], Logits::Last).unwrap();
    s.commit();
    s.forward(&[4, 5], &[], Logits::Last).unwrap();
    assert_eq!((s.committed(), s.len()), (3, 5));
    assert!(s.rollback(2).is_err(), "below the last commit");
    assert!(s.rollback(6).is_err(), "beyond the end");
    assert_eq!(s.len(), 5);
    s.rollback(4).unwrap();
    assert_eq!(s.len(), 4);
    let err = |r: dspark_runtime::Result<dspark_runtime::Forward>| r.unwrap_err().to_string();
    assert!(err(s.forward(&[1, 2, 3], &[], Logits::All)).contains("the session holds 6 positions"));
    assert!(err(s.forward(&[512], &[], Logits::All)).contains("outside the target's vocabulary"));
    assert!(err(s.forward(&[1], &[4], Logits::All)).contains("cannot capture layer 4"));
    assert_eq!(s.len(), 4, "refused forwards change nothing");
    // Sessions larger than the context (4096) or empty are refused.
    assert!(model.session(4097).is_err());
    assert!(model.session(0).is_err());
}

#[test]
fn memory_is_sized_from_the_request_and_refused_with_its_byte_count() {
    // A legal target claiming a context of 2^32 − 1 positions: a short request is small.
    let mut g = Qwen3Geometry::tiny();
    g.context = u32::MAX as usize;
    let model = run::target(qwen3_gguf(&g, 1, GgmlType::Q8_0));
    let req = Request {
        context: g.context,
        ..request(&[1, 2, 3], 5, &[])
    };
    let out = run::greedy(&model, &req);
    assert_eq!(out.tokens.len(), 5);
    // 4 layers × (keys + values) × 2 KV heads × 16 × 4 bytes per position, 8 positions.
    assert_eq!(
        model.session_bytes(req.positions(0)),
        Some(4 * 2 * 32 * 4 * 8)
    );
    match model.session(g.context) {
        Err(RuntimeError::Memory { bytes, .. }) => {
            assert_eq!(bytes, 4 * 2 * 32 * 4 * u64::from(u32::MAX))
        }
        other => panic!("expected a memory error, got {:?}", other.err()),
    }
}

/// Lossless across geometries: for the tiny target (rows shorter than eight Q8_0 blocks)
/// and the small one (whole eight-block groups plus leftovers, untied LM head, a 6-token
/// block, so decode and verify run different kernels), several seeds and many random
/// prompts, stop tokens and short budgets, speculative greedy decoding gives exactly
/// target-only greedy decoding.
#[test]
fn speculative_equals_greedy_across_geometries_and_prompts() {
    let mut rng = SplitMix64(0x5eed);
    for (g, seeds) in [
        (Qwen3Geometry::tiny(), 0..3u64),
        (Qwen3Geometry::small(), 10..12u64),
    ] {
        for seed in seeds {
            let (target, drafter) = pair(&g, seed);
            let vocab = target.shape().vocab as u64;
            for i in 0..8 {
                let len = 1 + rng.next_u64() as usize % 24;
                let prompt: Vec<u32> = (0..len).map(|_| (rng.next_u64() % vocab) as u32).collect();
                let max_new = 1 + rng.next_u64() as usize % 48;
                let want = run::greedy(&target, &request(&prompt, max_new, &[]));
                let got = run::spec(&target, &drafter, &request(&prompt, max_new, &[]));
                assert_eq!(got.tokens, want.tokens, "seed {seed} prompt {prompt:?}");
                assert_eq!(got.stats.stop_reason, StopReason::MaxTokens);
                assert!(got.stats.rounds <= max_new);
                if i % 2 == 0 && want.tokens.len() > 3 {
                    // A stop token ends both the same way, included in the output.
                    let stop = [want.tokens[want.tokens.len() / 2]];
                    let a = run::greedy(&target, &request(&prompt, max_new, &stop));
                    let b = run::spec(&target, &drafter, &request(&prompt, max_new, &stop));
                    assert_eq!(a.tokens, b.tokens);
                    assert_eq!(a.tokens.last(), Some(&stop[0]));
                    assert_eq!(b.stats.stop_reason, StopReason::Stop);
                }
            }
        }
    }
}

/// One loaded pair serves several sessions: interleaved step by step, each gives what it
/// gives alone.
#[test]
fn sessions_share_weights_and_keep_their_own_state() {
    let (target, drafter) = pair(&Qwen3Geometry::tiny(), 5);
    let prompts = [vec![3u32, 1, 4], vec![100, 200], vec![7; 9]];
    let alone: Vec<Vec<u32>> = prompts
        .iter()
        .map(|p| run::spec(&target, &drafter, &request(p, 20, &[])).tokens)
        .collect();
    // Interleave: each session advances one greedy step in turn, on shared weights.
    let mut sessions: Vec<_> = prompts
        .iter()
        .map(|_| target.session(64).unwrap())
        .collect();
    assert_eq!(Arc::strong_count(&target), 1 + prompts.len());
    let mut outs: Vec<Vec<u32>> = vec![Vec::new(); prompts.len()];
    for (i, p) in prompts.iter().enumerate() {
        let f = sessions[i].forward(p, &[], Logits::Last).unwrap();
        outs[i].push(argmax(&f.logits));
    }
    for _ in 1..20 {
        for i in 0..prompts.len() {
            let last = *outs[i].last().unwrap();
            let f = sessions[i].forward(&[last], &[], Logits::Last).unwrap();
            outs[i].push(argmax(&f.logits));
        }
    }
    assert_eq!(outs, alone);
    drop(sessions);
    assert_eq!(Arc::strong_count(&target), 1);
}

/// Records what the loop hands out, and interrupts after `stop_after` tokens.
struct Recorder {
    tokens: Vec<u32>,
    rounds: Vec<Round>,
    stop_after: usize,
    polled: Cell<usize>,
}

impl Recorder {
    fn new(stop_after: usize) -> Recorder {
        Recorder {
            tokens: Vec::new(),
            rounds: Vec::new(),
            stop_after,
            polled: Cell::new(0),
        }
    }
}

impl Observer for Recorder {
    fn tokens(&mut self, t: &[u32]) {
        self.tokens.extend(t);
    }
    fn round(&mut self, r: &Round) {
        self.rounds.push(r.clone());
    }
    fn interrupted(&self) -> bool {
        self.polled.set(self.polled.get() + 1);
        self.tokens.len() >= self.stop_after
    }
}

/// Tokens reach the observer as they are committed (the same tokens, in order, as the
/// result); an interrupt stops the run at once, keeping what was committed; the context
/// limit stops it with the output kept.
#[test]
fn streaming_interrupts_and_the_context_limit() {
    let (target, drafter) = pair(&Qwen3Geometry::tiny(), 2);
    let prompt = [5u32, 6, 7, 8];
    let full = run::greedy(&target, &request(&prompt, 40, &[])).tokens;
    for spec_mode in [false, true] {
        let mut rec = Recorder::new(10);
        let req = request(&prompt, 40, &[]);
        let n = req.positions(drafter.drafts_per_block());
        let mut s = target.session(n).unwrap();
        let out = if spec_mode {
            let mut d = drafter.session(n).unwrap();
            speculative(&mut s, &mut d, &req, &mut rec).unwrap()
        } else {
            autoregressive(&mut s, &req, &mut rec).unwrap()
        };
        assert_eq!(out.stats.stop_reason, StopReason::Interrupted);
        assert_eq!(
            out.tokens, rec.tokens,
            "the observer saw exactly the output"
        );
        assert!(
            out.tokens.len() >= 10 && out.tokens.len() < 10 + 5,
            "{}",
            out.tokens.len()
        );
        assert_eq!(
            out.tokens[..],
            full[..out.tokens.len()],
            "what was kept is the greedy output"
        );
        assert!(rec.polled.get() > 0);
        if spec_mode {
            let replay: Vec<u32> = std::iter::once(out.tokens[0])
                .chain(rec.rounds.iter().flat_map(|r| r.committed.clone()))
                .collect();
            assert_eq!(replay, out.tokens);
        }
        // The context: 4 prompt tokens + 40 wanted in a context of 20 → 16 generated.
        let req = Request {
            context: 20,
            ..request(&prompt, 40, &[])
        };
        let out = if spec_mode {
            run::spec(&target, &drafter, &req)
        } else {
            run::greedy(&target, &req)
        };
        assert_eq!(out.stats.stop_reason, StopReason::Context);
        assert_eq!(out.tokens, full[..16]);
    }
    // An interrupt before the prompt is evaluated keeps nothing and says so.
    let mut rec = Recorder::new(0);
    let req = request(&prompt, 5, &[]);
    let mut s = target.session(req.positions(0)).unwrap();
    let out = autoregressive(&mut s, &req, &mut rec).unwrap();
    assert_eq!(
        (out.tokens.len(), out.stats.stop_reason),
        (0, StopReason::Interrupted)
    );
}

/// Prefill in chunks gives the same first token as one forward, for prompts longer than
/// a chunk.
#[test]
fn chunked_prefill_is_exact() {
    let model = run::target(qwen3_gguf(&Qwen3Geometry::small(), 3, GgmlType::Q8_0));
    let prompt: Vec<u32> = (0..PREFILL_CHUNK as u32 + 21)
        .map(|i| (i * 37 + 11) % 1000)
        .collect();
    assert!(PREFILL_CHUNK < prompt.len());
    let mut one = model.session(prompt.len() + 8).unwrap();
    let f = one.forward(&prompt, &[], Logits::Last).unwrap();
    let out = run::greedy(&model, &request(&prompt, 3, &[]));
    assert_eq!(out.tokens[0], argmax(&f.logits));
}

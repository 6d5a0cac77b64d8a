//! Speculative sampling is exact in distribution: χ² tests of the tokens it generates
//! against the target's own sampling law, computed exactly by enumerating prefixes of a
//! toy target with a six-token vocabulary, per position and jointly, at several
//! temperatures and truncations, with a random drafter (far from the target) and with
//! every plan; the harness's power; seeds and thread counts.

use std::collections::HashMap;
use std::sync::Arc;

use dspark_runtime::generate::{
    autoregressive, speculative_planned, speculative_with, Observer, Plan, Quiet, Request, Round,
};
use dspark_runtime::sampling::{Sampler, Sampling};
use dspark_runtime::schedule::Schedule;
use dspark_runtime::{Drafter, Forward, Logits, Result, RuntimeError, Target, TargetShape};
use dspark_testkit::drafter::{write_synth, SynthGeometry};
use dspark_testkit::rng::SplitMix64;
use dspark_testkit::run;

const V: usize = 6;
const HIDDEN: usize = 32;
const LAYERS: usize = 4;

/// A target whose next-token logits are a fixed function of the last two tokens (a
/// second-order Markov chain over six tokens), with random embedding and LM head for the
/// drafter to use and deterministic features: its exact sampling law is enumerable.
#[derive(Clone)]
struct Toy {
    bigram: Vec<f32>,
    trigram: Vec<f32>,
    embd: Vec<f32>,
    head: Vec<f32>,
    history: Vec<u32>,
    committed: usize,
    capacity: usize,
}

impl Toy {
    fn new(seed: u64, capacity: usize) -> Toy {
        let mut rng = SplitMix64(seed);
        let mut draw = |n: usize, s: f32| (0..n).map(|_| s * rng.normal()).collect::<Vec<f32>>();
        Toy {
            bigram: draw(V * V, 1.4),
            trigram: draw(V * V, 0.7),
            embd: draw(V * HIDDEN, 1.0),
            head: draw(V * HIDDEN, 0.5),
            history: Vec::new(),
            committed: 0,
            capacity,
        }
    }

    /// Logits of the token after `history` (at least one token).
    fn next(&self, history: &[u32]) -> Vec<f32> {
        let last = *history.last().unwrap() as usize;
        let before = history
            .len()
            .checked_sub(2)
            .map_or(0, |i| history[i] as usize);
        (0..V)
            .map(|x| self.bigram[last * V + x] + self.trigram[before * V + x])
            .collect()
    }
}

impl Target for Toy {
    fn shape(&self) -> TargetShape {
        TargetShape {
            hidden: HIDDEN,
            layers: LAYERS,
            vocab: V,
        }
    }
    fn capacity(&self) -> usize {
        self.capacity
    }
    fn len(&self) -> usize {
        self.history.len()
    }
    fn step_bytes(&self, _rows: usize, _logits: Logits, _captures: usize) -> u64 {
        0
    }
    fn forward(&mut self, tokens: &[u32], capture: &[usize], logits: Logits) -> Result<Forward> {
        if tokens.iter().any(|&t| t as usize >= V) || self.len() + tokens.len() > self.capacity {
            return Err(RuntimeError::Request("toy: bad forward".into()));
        }
        let mut out = Forward {
            logits: Vec::new(),
            captured: Vec::new(),
        };
        for (i, &t) in tokens.iter().enumerate() {
            self.history.push(t);
            if logits == Logits::All || i + 1 == tokens.len() {
                out.logits.extend(self.next(&self.history));
            }
            for &layer in capture {
                let row = &self.embd[t as usize * HIDDEN..][..HIDDEN];
                let pos = self.history.len() as f32;
                out.captured.extend(
                    row.iter()
                        .map(|x| x * (layer as f32 + 1.0) * 0.5 + 0.01 * pos),
                );
            }
        }
        Ok(out)
    }
    fn committed(&self) -> usize {
        self.committed
    }
    fn commit(&mut self) {
        self.committed = self.history.len();
    }
    fn rollback(&mut self, to: usize) -> Result<()> {
        if to < self.committed || to > self.history.len() {
            return Err(RuntimeError::Request("toy: bad rollback".into()));
        }
        self.history.truncate(to);
        Ok(())
    }
    fn embed(&self, tokens: &[u32], out: &mut [f32]) -> Result<()> {
        for (&t, o) in tokens.iter().zip(out.chunks_exact_mut(HIDDEN)) {
            o.copy_from_slice(&self.embd[t as usize * HIDDEN..][..HIDDEN]);
        }
        Ok(())
    }
    fn lm_head(&self, hidden: &[f32], logits: &mut [f32]) {
        for (h, l) in hidden.chunks_exact(HIDDEN).zip(logits.chunks_exact_mut(V)) {
            for (v, x) in l.iter_mut().enumerate() {
                *x = self.head[v * HIDDEN..][..HIDDEN]
                    .iter()
                    .zip(h)
                    .map(|(a, b)| a * b)
                    .sum();
            }
        }
    }
}

/// A random drafter for the toy's shape (block 4: three or four drafts a round).
fn toy_drafter(seed: u64) -> Arc<Drafter> {
    let mut g = SynthGeometry::for_target(
        "toy",
        HIDDEN as u64,
        2,
        1,
        16,
        64,
        V as u64,
        LAYERS as u64,
        vec![1, 2],
    );
    g.block_size = 4;
    let dir = tempfile::tempdir().unwrap();
    write_synth(&g, &dir.path().join("draft"), seed, &|_, _| true).unwrap();
    let bytes = run::convert(&dir.path().join("draft"));
    Arc::new(Drafter::open(Arc::new(bytes), &Toy::new(0, 0).shape()).unwrap())
}

fn request<'a>(prompt: &'a [u32], n: usize, sampling: Sampling) -> Request<'a> {
    Request {
        prompt,
        max_tokens: n,
        context: 256,
        stop: &[],
        eos: None,
        sampling,
    }
}

/// The exact law of the first `k` tokens after `prompt` under target-only sampling, from
/// `logits(history)`, the target's logits after `history`.
fn exact_law(
    prompt: &[u32],
    k: usize,
    s: Sampling,
    mut logits: impl FnMut(&[u32]) -> Vec<f32>,
) -> HashMap<Vec<u32>, f64> {
    let mut sampler = Sampler::new(s).unwrap();
    let mut law = HashMap::from([(Vec::new(), 1.0)]);
    for _ in 0..k {
        let mut next = HashMap::new();
        for (seq, p) in law {
            let mut history = prompt.to_vec();
            history.extend(&seq);
            let d = sampler
                .dist(&logits(&history), &|| "target".into())
                .unwrap();
            for (t, q) in d.iter() {
                let mut longer = seq.clone();
                longer.push(t);
                next.insert(longer, p * q);
            }
        }
        law = next;
    }
    law
}

/// Pearson's χ² of `counts` against `law` (n samples), cells below 5 expected merged into
/// one; returns (statistic, degrees of freedom).
fn chi2(counts: &HashMap<Vec<u32>, usize>, law: &HashMap<Vec<u32>, f64>, n: usize) -> (f64, usize) {
    let (mut stat, mut cells) = (0.0, 0usize);
    let (mut rest_e, mut rest_o) = (0.0, 0usize);
    for (k, &p) in law {
        let e = p * n as f64;
        let o = counts.get(k).copied().unwrap_or(0);
        if e < 5.0 {
            rest_e += e;
            rest_o += o;
        } else {
            stat += (o as f64 - e).powi(2) / e;
            cells += 1;
        }
    }
    let unexpected: usize = counts
        .iter()
        .filter(|(k, _)| !law.contains_key(*k))
        .map(|(_, c)| c)
        .sum();
    assert_eq!(
        unexpected, 0,
        "a sequence the target's law excludes was generated"
    );
    if rest_e > 0.0 {
        stat += (rest_o as f64 - rest_e).powi(2) / rest_e.max(1e-9);
        cells += 1;
    }
    (stat, cells.saturating_sub(1))
}

/// The χ² value a statistic of `df` degrees of freedom exceeds with probability 1e-4
/// (Wilson–Hilferty).
fn critical(df: usize) -> f64 {
    let k = df.max(1) as f64;
    let z = 3.719;
    k * (1.0 - 2.0 / (9.0 * k) + z * (2.0 / (9.0 * k)).sqrt()).powi(3)
}

/// Counts of each position's token and of the first three jointly, over `seeds`.
struct Tally {
    joint: HashMap<Vec<u32>, usize>,
    at: Vec<HashMap<Vec<u32>, usize>>,
}

fn tally(k: usize, outputs: impl Iterator<Item = Vec<u32>>) -> (Tally, usize) {
    let mut t = Tally {
        joint: HashMap::new(),
        at: vec![HashMap::new(); k],
    };
    let mut n = 0;
    for out in outputs {
        assert_eq!(out.len(), k);
        *t.joint.entry(out[..3].to_vec()).or_default() += 1;
        for (i, &x) in out.iter().enumerate() {
            *t.at[i].entry(vec![x]).or_default() += 1;
        }
        n += 1;
    }
    (t, n)
}

/// Marginal of position `i` from the exact law of the first `k` tokens.
fn marginal(law: &HashMap<Vec<u32>, f64>, i: usize) -> HashMap<Vec<u32>, f64> {
    let mut m = HashMap::new();
    for (seq, p) in law {
        *m.entry(vec![seq[i]]).or_default() += p;
    }
    m
}

fn assert_matches(what: &str, t: &Tally, n: usize, law: &HashMap<Vec<u32>, f64>, k: usize) {
    let joint3 = {
        let mut m = HashMap::new();
        for (seq, p) in law {
            *m.entry(seq[..3].to_vec()).or_default() += p;
        }
        m
    };
    let (stat, df) = chi2(&t.joint, &joint3, n);
    assert!(
        stat < critical(df),
        "{what}: joint of positions 1-3: χ² {stat:.1} on {df} df"
    );
    for i in 0..k {
        let (stat, df) = chi2(&t.at[i], &marginal(law, i), n);
        assert!(
            stat < critical(df),
            "{what}: position {}: χ² {stat:.1} on {df} df",
            i + 1
        );
    }
}

const K: usize = 6;

fn settings() -> Vec<Sampling> {
    let s = |temp, top_k, top_p, min_p| Sampling {
        temp,
        top_k,
        top_p,
        min_p,
        seed: 0,
    };
    vec![
        s(1.0, 0, 1.0, 0.0),
        s(0.6, 3, 1.0, 0.0),
        s(1.5, 0, 0.8, 0.0),
        s(1.0, 0, 1.0, 0.2),
        s(0.8, 4, 0.9, 0.05),
    ]
}

fn spec_tokens(
    toy: &Toy,
    drafter: &Arc<Drafter>,
    req: &Request<'_>,
    plan: Plan,
    obs: &mut dyn Observer,
) -> Vec<u32> {
    let mut t = Toy {
        capacity: 256,
        ..toy.clone()
    };
    let mut d = drafter.session(256).unwrap();
    speculative_with(&mut t, &mut d, req, plan, obs)
        .unwrap()
        .tokens
}

#[test]
fn speculative_sampling_has_the_targets_law_per_position_and_jointly() {
    let toy = Toy::new(11, 256);
    let drafter = toy_drafter(5);
    let prompt = [2u32, 4, 1];
    let plans = [
        Plan::FIXED,
        Plan {
            schedule: Schedule::Fixed,
            draft_max: Some(1),
            rollback: None,
        },
        Plan {
            schedule: Schedule::Fixed,
            draft_max: Some(2),
            rollback: None,
        },
        Plan {
            schedule: Schedule::Adaptive,
            draft_max: None,
            rollback: None,
        },
    ];
    let n = 3000;
    for s in settings() {
        let law = exact_law(&prompt, K, s, |h| toy.next(h));
        for (pi, &plan) in plans.iter().enumerate() {
            let outputs = (0..n as u64).map(|seed| {
                let req = request(&prompt, K, Sampling { seed, ..s });
                spec_tokens(&toy, &drafter, &req, plan, &mut Quiet)
            });
            let (t, count) = tally(K, outputs);
            assert_matches(&format!("{s:?}, plan {pi}"), &t, count, &law, K);
        }
        // Adaptive with one schedule state carried from run to run (a server's slot): still
        // the target's law, and the state goes on growing.
        let adaptive = plans[3];
        let mut planner = adaptive.planner(drafter.drafts_per_block());
        let mut steps = 0;
        let outputs: Vec<Vec<u32>> = (0..n as u64)
            .map(|seed| {
                let req = request(&prompt, K, Sampling { seed, ..s });
                let mut t = Toy {
                    capacity: 256,
                    ..toy.clone()
                };
                let mut d = drafter.session(256).unwrap();
                let out =
                    speculative_planned(&mut t, &mut d, &req, adaptive, &mut planner, &mut Quiet)
                        .unwrap()
                        .tokens;
                assert!(planner.steps() > steps, "the state carries over");
                steps = planner.steps();
                out
            })
            .collect();
        let (t, count) = tally(K, outputs.into_iter());
        assert_matches(&format!("{s:?}, carried planner"), &t, count, &law, K);
        // Target-only sampling, through the same harness.
        let outputs = (0..n as u64).map(|seed| {
            let req = request(&prompt, K, Sampling { seed, ..s });
            let mut t = Toy {
                capacity: 256,
                ..toy.clone()
            };
            autoregressive(&mut t, &req, &mut Quiet).unwrap().tokens
        });
        let (t, count) = tally(K, outputs);
        assert_matches(&format!("{s:?}, plain"), &t, count, &law, K);
    }
}

/// Records the first draft of the first round.
struct FirstDraft(Option<u32>, usize);

impl Observer for FirstDraft {
    fn round(&mut self, r: &Round) {
        if self.0.is_none() {
            self.0 = Some(r.drafted[0]);
            self.1 = r.accepted;
        }
    }
}

#[test]
fn the_harness_tells_the_drafters_law_from_the_targets() {
    // The drafts themselves (the law q of the first draft) fail the test the output
    // passes: the harness has the power to see a sampler that emitted drafts unchecked.
    let toy = Toy::new(11, 256);
    let drafter = toy_drafter(5);
    let prompt = [2u32, 4, 1];
    let s = settings()[0];
    let law = exact_law(&prompt, 2, s, |h| toy.next(h));
    let (mut drafts, mut firsts) = (HashMap::new(), HashMap::new());
    let mut rejected = 0;
    let n = 3000;
    for seed in 0..n as u64 {
        let req = request(&prompt, 2, Sampling { seed, ..s });
        let mut obs = FirstDraft(None, 0);
        let out = spec_tokens(&toy, &drafter, &req, Plan::FIXED, &mut obs);
        *firsts.entry(out.clone()).or_insert(0usize) += 1;
        *drafts.entry(vec![out[0], obs.0.unwrap()]).or_insert(0usize) += 1;
        rejected += usize::from(obs.1 == 0);
    }
    let (stat, df) = chi2(&firsts, &law, n);
    assert!(stat < critical(df), "the output: χ² {stat:.1} on {df} df");
    let (stat, df) = chi2(&drafts, &law, n);
    assert!(
        stat > 10.0 * critical(df),
        "the drafts: χ² {stat:.1} on {df} df"
    );
    // A far drafter: many first drafts are rejected.
    assert!(rejected > n / 5, "{rejected} of {n} first drafts rejected");
}

#[test]
fn a_seed_fixes_the_output_and_seeds_differ() {
    let toy = Toy::new(3, 256);
    let drafter = toy_drafter(9);
    let prompt = [1u32, 2];
    let s = Sampling {
        temp: 1.0,
        top_k: 0,
        top_p: 0.95,
        min_p: 0.0,
        seed: 42,
    };
    let req = request(&prompt, 40, s);
    let a = spec_tokens(&toy, &drafter, &req, Plan::FIXED, &mut Quiet);
    let b = spec_tokens(&toy, &drafter, &req, Plan::FIXED, &mut Quiet);
    assert_eq!(a, b);
    let other = request(&prompt, 40, Sampling { seed: 43, ..s });
    assert_ne!(
        a,
        spec_tokens(&toy, &drafter, &other, Plan::FIXED, &mut Quiet)
    );
    // Temperature 0 is greedy whatever the seed and the truncations: speculative equals
    // plain.
    for seed in [0, 1] {
        let g = Sampling {
            temp: 0.0,
            seed,
            ..s
        };
        let req = request(&prompt, 40, g);
        let mut t = Toy {
            capacity: 256,
            ..toy.clone()
        };
        let plain = autoregressive(&mut t, &req, &mut Quiet).unwrap().tokens;
        assert_eq!(
            spec_tokens(&toy, &drafter, &req, Plan::FIXED, &mut Quiet),
            plain
        );
    }
}

/// The trained pair of `examples/code-pair` (a drafter near its target): with top-k 3 the
/// law of the first four tokens is enumerable with the target itself (batched and
/// sequential forwards are the same bits, so it is the law the loop samples).
#[test]
fn the_trained_pair_samples_the_targets_law() {
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/code-pair");
    let target = run::target(std::fs::read(dir.join("target.gguf")).unwrap());
    let drafter = run::drafter(run::convert(&dir.join("draft")), &target);
    // Any ids in the vocabulary make a prompt.
    let prompt: Vec<u32> = vec![381, 1285, 40, 287, 11, 1124, 12, 33, 289, 40];
    let k = 4;
    let mut accepted = 0;
    for s in [
        Sampling {
            temp: 1.0,
            top_k: 3,
            top_p: 1.0,
            min_p: 0.0,
            seed: 0,
        },
        Sampling {
            temp: 0.7,
            top_k: 3,
            top_p: 0.9,
            min_p: 0.1,
            seed: 0,
        },
    ] {
        // The exact law, from the target's own logits after every prefix.
        let law = exact_law(&prompt, k, s, |history| {
            let mut session = target.session(history.len()).unwrap();
            session.forward(history, &[], Logits::Last).unwrap().logits
        });
        let n = 1500;
        let mut counter = CountAccepted(0);
        let outputs: Vec<Vec<u32>> = (0..n as u64)
            .map(|seed| {
                let req = Request {
                    context: 64,
                    ..request(&prompt, k, Sampling { seed, ..s })
                };
                let positions = req.positions(drafter.drafts_per_block());
                let mut t = target.session(positions).unwrap();
                let mut d = drafter.session(positions).unwrap();
                speculative_with(&mut t, &mut d, &req, Plan::FIXED, &mut counter)
                    .unwrap()
                    .tokens
            })
            .collect();
        accepted += counter.0;
        let (t, count) = tally(k, outputs.into_iter());
        assert_matches(&format!("trained pair, {s:?}"), &t, count, &law, k);
    }
    // A near drafter: drafts are accepted, not only resampled.
    assert!(accepted > 500, "{accepted} drafts accepted");
}

/// Kimi K3 (KDA state undone by snapshots or by replay at every rejection): speculative
/// sampling keeps the target's law per position and jointly.
#[test]
fn kimi_k3_samples_the_targets_law_under_both_rollbacks() {
    use dspark_runtime::Rollback;
    use dspark_testkit::kimi_k3::{write_k3_pair, K3Geometry};
    let dir = tempfile::tempdir().unwrap();
    write_k3_pair(&K3Geometry::tiny(), dir.path(), 3, &|_, _| true).unwrap();
    let target = run::kimi_k3(std::fs::read(dir.path().join("target.gguf")).unwrap());
    let drafter = run::drafter_for(run::convert(&dir.path().join("draft")), &target.shape());
    let settings = [
        (
            Sampling {
                temp: 1.0,
                top_k: 3,
                top_p: 1.0,
                min_p: 0.0,
                seed: 0,
            },
            Rollback::Replay,
        ),
        (
            Sampling {
                temp: 1.5,
                top_k: 4,
                top_p: 0.9,
                min_p: 0.0,
                seed: 0,
            },
            Rollback::Snapshots,
        ),
    ];
    let (rounds, _) = assert_k3_law(
        "kimi-k3",
        &target,
        &drafter,
        &[40, 287, 11, 124, 12, 33],
        &settings,
    );
    assert!(rounds > 1500, "{rounds} rounds");
}

/// The trained K3 pair of `examples/k3-pair` (MXFP4 experts, KDA and MLA, a drafter that
/// accepts ~5 tokens a round greedily): speculative sampling keeps the target's law with
/// either rollback, and drafts are accepted, not only resampled.
#[test]
fn the_trained_k3_pair_samples_the_targets_law_under_both_rollbacks() {
    use dspark_runtime::Rollback;
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/k3-pair");
    let target = run::kimi_k3(std::fs::read(dir.join("target.gguf")).unwrap());
    let drafter = run::drafter_for(run::convert(&dir.join("draft")), &target.shape());
    let settings = [
        (
            Sampling {
                temp: 1.0,
                top_k: 3,
                top_p: 1.0,
                min_p: 0.0,
                seed: 0,
            },
            Rollback::Replay,
        ),
        (
            Sampling {
                temp: 0.7,
                top_k: 3,
                top_p: 0.9,
                min_p: 0.1,
                seed: 0,
            },
            Rollback::Snapshots,
        ),
    ];
    // The start of a held-out prompt's tokens.
    let prompt = [260, 350, 746, 388, 297, 64, 46, 829, 48, 83];
    let (_, accepted) = assert_k3_law("k3 pair", &target, &drafter, &prompt, &settings);
    assert!(accepted > 500, "{accepted} drafts accepted");
}

/// For each (settings, rollback): the exact law of the first four tokens after `prompt`
/// from the K3 target's own logits, then 1,500 seeded speculative runs with that rollback
/// fixed, χ²-tested against it per position and jointly. Returns the rounds run and the
/// drafts accepted.
fn assert_k3_law(
    what: &str,
    target: &std::sync::Arc<dspark_runtime::KimiK3>,
    drafter: &std::sync::Arc<dspark_runtime::Drafter>,
    prompt: &[u32],
    settings: &[(Sampling, dspark_runtime::Rollback)],
) -> (usize, usize) {
    let k = 4;
    let drafts = drafter.drafts_per_block();
    let mut counter = CountRounds::default();
    for &(s, rollback) in settings {
        let law = exact_law(prompt, k, s, |history| {
            let mut session = target.session(history.len(), 1).unwrap();
            session
                .forward_commit(history, &[], Logits::Last)
                .unwrap()
                .logits
        });
        let n = 1500;
        let plan = Plan {
            rollback: Some(rollback),
            ..Plan::FIXED
        };
        let outputs: Vec<Vec<u32>> = (0..n as u64)
            .map(|seed| {
                let req = Request {
                    context: 64,
                    ..request(prompt, k, Sampling { seed, ..s })
                };
                let positions = req.positions(drafts);
                let mut t = target.session(positions, drafts + 1).unwrap();
                let mut d = drafter.session(positions).unwrap();
                speculative_with(&mut t, &mut d, &req, plan, &mut counter)
                    .unwrap()
                    .tokens
            })
            .collect();
        let (t, count) = tally(k, outputs.into_iter());
        assert_matches(&format!("{what}, {rollback:?}, {s:?}"), &t, count, &law, k);
    }
    (counter.rounds, counter.accepted)
}

#[derive(Default)]
struct CountRounds {
    rounds: usize,
    accepted: usize,
}

impl Observer for CountRounds {
    fn round(&mut self, r: &Round) {
        self.rounds += 1;
        self.accepted += r.accepted;
    }
}

struct CountAccepted(usize);

impl Observer for CountAccepted {
    fn round(&mut self, r: &Round) {
        self.0 += r.accepted;
    }
}

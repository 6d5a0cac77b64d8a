//! Sampling: llama.cpp's truncations and temperature, seeded uniforms keyed by what they
//! decide, and the lossless acceptance rule of speculative sampling
//! (`docs/RUNTIME-MATH.md` §3.4 and §4.5).
//!
//! A distribution is made from logits as llama.cpp's default sampler chain makes it
//! (`common/sampling.cpp`): `top_k` keeps the K largest logits (0: off), `top_p` the
//! smallest set of the largest whose probabilities at temperature 1 reach P (1: off),
//! `min_p` the logits within `ln P` of the largest (0: off), then the temperature divides
//! what is left. Ties are broken by the lower token id, so the result is a function of the
//! logits alone. Probabilities are kept in f64, over token ids in ascending order.
//!
//! Every uniform a run draws is a function of the seed and of what it decides: a
//! [`Stream`] and the position (and, for drafts, the depth in the block). The uniforms
//! come from ChaCha8 (`rand_chacha`, whose output for a seed is stable across versions)
//! with the stream in ChaCha's stream word and the position in its block counter. So the
//! output for a seed does not depend on the thread count, a speculative run that never
//! drafts draws exactly the tokens plain sampling draws, and no uniform is used twice:
//! a draft's uniforms are keyed by its round's anchor position (which only grows), and an
//! acceptance test, a residual or a target sample decides one position once.
//!
//! Acceptance ([`judge`]): a draft `x ~ q` is accepted with probability
//! `min(1, p(x) / q(x))`; on rejection the position gets a sample of the normalised
//! residual `max(0, p − q)` (of `p` itself when the residual's mass is below
//! [`RESIDUAL_FLOOR`], where rounding, not the distributions, made the rejection). The
//! accepted-or-resampled token is then distributed exactly as `p`, whatever `q` is.

use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::error::{Result, RuntimeError};

/// How tokens are chosen from logits (llama.cpp's names and meanings).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sampling {
    /// Temperature: 0 is greedy (argmax, lowest id among equals).
    pub temp: f32,
    /// Keep the K largest logits (0: all).
    pub top_k: usize,
    /// Keep the smallest set of the largest logits whose probabilities at temperature 1
    /// sum to at least P (1: all).
    pub top_p: f32,
    /// Keep the logits whose probability at temperature 1 is at least P times the
    /// largest's (0: all).
    pub min_p: f32,
    /// Seed of every uniform the run draws.
    pub seed: u64,
}

impl Default for Sampling {
    fn default() -> Sampling {
        Sampling::GREEDY
    }
}

impl Sampling {
    /// Greedy decoding (temperature 0, nothing truncated).
    pub const GREEDY: Sampling = Sampling {
        temp: 0.0,
        top_k: 0,
        top_p: 1.0,
        min_p: 0.0,
        seed: 0,
    };

    /// True at temperature 0: argmax decoding, no uniforms drawn.
    pub fn is_greedy(&self) -> bool {
        self.temp <= 0.0
    }

    /// Refuses values llama.cpp gives no meaning to: a temperature that is negative or not
    /// finite, `top_p` or `min_p` outside [0, 1].
    pub fn check(&self) -> Result<()> {
        let bad = |what: &str, v: f32, range: &str| {
            Err(RuntimeError::Request(format!("{what} {v} is not {range}")))
        };
        if !(self.temp.is_finite() && self.temp >= 0.0) {
            return bad("the temperature", self.temp, "a finite number >= 0");
        }
        if !(0.0..=1.0).contains(&self.top_p) {
            return bad("top-p", self.top_p, "in [0, 1]");
        }
        if !(0.0..=1.0).contains(&self.min_p) {
            return bad("min-p", self.min_p, "in [0, 1]");
        }
        Ok(())
    }
}

/// What a uniform decides (ChaCha's stream word holds it with the position).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    /// A target sample: a plain step's token, the first token, a round's bonus.
    Target = 0,
    /// A draft: keyed by the round's anchor position and the depth.
    Draft = 1,
    /// The acceptance test of the draft for a position.
    Accept = 2,
    /// The residual sample after a rejection at a position.
    Residual = 3,
}

/// Below this mass the residual `max(0, p − q)` is rounding: sample `p` instead.
pub const RESIDUAL_FLOOR: f64 = 1e-12;

/// A probability distribution over token ids (ascending), as [`Sampler::dist`] makes it.
#[derive(Clone, Debug, PartialEq)]
pub struct Dist {
    /// Token ids with a probability above 0, ascending; empty when `probs` covers the
    /// whole vocabulary (id = index).
    ids: Vec<u32>,
    /// Their probabilities (sum 1).
    probs: Vec<f64>,
}

impl Dist {
    /// `(id, probability)` in ascending id order.
    pub fn iter(&self) -> impl Iterator<Item = (u32, f64)> + '_ {
        let dense = self.ids.is_empty();
        self.probs
            .iter()
            .enumerate()
            .map(move |(i, &p)| (if dense { i as u32 } else { self.ids[i] }, p))
    }

    /// Tokens with a probability above 0 (at most; a dense distribution counts all).
    pub fn support(&self) -> usize {
        self.probs.len()
    }

    /// The probability of `id`.
    pub fn prob(&self, id: u32) -> f64 {
        if self.ids.is_empty() {
            self.probs.get(id as usize).copied().unwrap_or(0.0)
        } else {
            self.ids.binary_search(&id).map_or(0.0, |i| self.probs[i])
        }
    }

    /// The token at which the cumulative probability (ascending ids) passes `u` ∈ [0, 1).
    pub fn sample(&self, u: f64) -> u32 {
        sample_from(self.iter(), u)
    }

    /// `Σ_v min(p(v), q(v))`: the probability that a draft from `q` is accepted against
    /// `self`.
    pub fn overlap(&self, q: &Dist) -> f64 {
        let mut sum = 0.0;
        merge(self, q, |_, p, q| sum += p.min(q));
        sum
    }
}

/// The first id at which the running sum of `weights` (whose total is `1`, or the total
/// when they are unnormalised — the caller scales `u`) passes `target`; the last id with
/// a weight above 0 when rounding leaves the sum short.
fn sample_from(weights: impl Iterator<Item = (u32, f64)>, target: f64) -> u32 {
    let mut sum = 0.0;
    let mut last = None;
    for (id, w) in weights {
        if w > 0.0 {
            sum += w;
            last = Some(id);
            if sum > target {
                return id;
            }
        }
    }
    last.expect("a distribution has a token above 0")
}

/// Calls `f(id, p(id), q(id))` for every id in either support, ascending.
fn merge(p: &Dist, q: &Dist, mut f: impl FnMut(u32, f64, f64)) {
    let (mut a, mut b) = (p.iter().peekable(), q.iter().peekable());
    loop {
        match (a.peek().copied(), b.peek().copied()) {
            (Some((i, x)), Some((j, y))) => {
                if i == j {
                    f(i, x, y);
                    a.next();
                    b.next();
                } else if i < j {
                    f(i, x, 0.0);
                    a.next();
                } else {
                    f(j, 0.0, y);
                    b.next();
                }
            }
            (Some((i, x)), None) => {
                f(i, x, 0.0);
                a.next();
            }
            (None, Some((j, y))) => {
                f(j, 0.0, y);
                b.next();
            }
            (None, None) => break,
        }
    }
}

/// The outcome of a draft's acceptance test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The draft is the position's token.
    Accept,
    /// The draft is rejected; the position's token is this residual sample.
    Reject(u32),
}

/// Speculative sampling's test of draft `x` (drawn from `q`) against the target's `p`:
/// accepted when `u_accept < p(x) / q(x)`, else replaced by the residual sample drawn
/// with `u_residual`. Either way the position's token is distributed as `p`.
pub fn judge(p: &Dist, q: &Dist, x: u32, u_accept: f64, u_residual: f64) -> Verdict {
    if u_accept * q.prob(x) < p.prob(x) {
        return Verdict::Accept;
    }
    let mut residual = Vec::new();
    let mut mass = 0.0;
    merge(p, q, |id, p, q| {
        if p > q {
            residual.push((id, p - q));
            mass += p - q;
        }
    });
    if mass < RESIDUAL_FLOOR {
        return Verdict::Reject(p.sample(u_residual));
    }
    Verdict::Reject(sample_from(residual.into_iter(), u_residual * mass))
}

/// `e^x` for `x <= 0` (0 below −87), within 2e-7 of the true value relatively: Cephes'
/// `expf` range reduction (`x = n ln 2 + r`, |r| ≤ ln 2 / 2, ln 2 split in two) and its
/// degree-5 polynomial, with the rounding done by adding 1.5 · 2^23 so that a loop over a
/// slice vectorizes without SSE4.1. Written here because a sampled token needs the
/// exponential of every logit, and libm's scalar `expf` was most of the time sampling took
/// (a vectorizing approximation is a few lines; no maintained crate offers one in safe
/// Rust).
#[inline(always)]
fn exp_neg(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    const ROUND: f32 = 12_582_912.0; // 1.5 · 2^23
    let x = x.max(-87.0);
    let n = (x * LOG2E + ROUND) - ROUND;
    let r = x - n * LN2_HI - n * LN2_LO;
    let mut p = 1.987_569_2e-4;
    p = p * r + 1.398_2e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 0.166_666_65;
    p = p * r + 0.5;
    let y = p * r * r + r + 1.0;
    y * f32::from_bits(((n as i32 + 127) << 23) as u32)
}

/// `exp((l − max) · scale)` of every logit into `out`.
fn exp_all(logits: &[f32], max: f32, scale: f32, out: &mut Vec<f32>) {
    out.resize(logits.len(), 0.0);
    for (o, &l) in out.iter_mut().zip(logits) {
        *o = exp_neg((l - max) * scale);
    }
}

/// The largest of `logits`, or `None` when one is not finite or there are none (in
/// sixteen lanes, so the loop vectorizes).
fn max_finite(logits: &[f32]) -> Option<f32> {
    let mut lanes = [f32::NEG_INFINITY; 16];
    let mut finite = true;
    let mut chunks = logits.chunks_exact(16);
    for c in &mut chunks {
        for (m, &x) in lanes.iter_mut().zip(c) {
            finite &= x.is_finite();
            *m = if x > *m { x } else { *m };
        }
    }
    for &x in chunks.remainder() {
        finite &= x.is_finite();
        lanes[0] = if x > lanes[0] { x } else { lanes[0] };
    }
    let max = lanes
        .iter()
        .copied()
        .fold(f32::NEG_INFINITY, |a, b| if b > a { b } else { a });
    (finite && !logits.is_empty()).then_some(max)
}

/// Buckets of logits [`top_p`] ranks by (each holding a 1/BUCKETS share of the range).
const BUCKETS: usize = 512;

/// Keeps in `c` (candidates at or above `floor`, in ascending id order, the largest
/// logit `max`, `w[id]` = `exp(l − max)`) the smallest set of the largest logits whose
/// weights reach `want`: the prefix of the order "larger logit, then lower id" up to the
/// token whose weight crosses `want`, still in id order. Bucketed by logit: the buckets
/// above the crossing one are kept whole, only the crossing bucket is sorted (a flat
/// distribution has hundreds of candidates).
fn top_p(c: &mut Vec<(u32, f32)>, w: &[f32], max: f32, floor: f32, want: f64) {
    let range = (max - floor).max(f32::MIN_POSITIVE);
    let scale = BUCKETS as f32 / range;
    let bucket = |l: f32| (((max - l) * scale) as usize).min(BUCKETS - 1);
    let mut mass = [0.0f64; BUCKETS];
    for &(id, l) in c.iter() {
        mass[bucket(l)] += f64::from(w[id as usize]);
    }
    let mut before = 0.0;
    let Some(cross) = (0..BUCKETS).find(|&b| {
        let reached = before + mass[b] >= want;
        if !reached {
            before += mass[b];
        }
        reached
    }) else {
        return; // rounding left the candidates short of `want`: keep them all
    };
    let mut edge: Vec<(u32, f32)> = c
        .iter()
        .copied()
        .filter(|&(_, l)| bucket(l) == cross)
        .collect();
    edge.sort_unstable_by(order);
    let mut sum = before;
    let last = edge
        .iter()
        .position(|&(id, _)| {
            sum += f64::from(w[id as usize]);
            sum >= want
        })
        .map_or(edge.len() - 1, |i| i);
    let last = edge[last];
    c.retain(|x| {
        let b = bucket(x.1);
        b < cross || (b == cross && order(x, &last) != std::cmp::Ordering::Greater)
    });
}

/// The order of [`top_p`]: the larger logit first, then the lower id.
fn order(a: &(u32, f32), b: &(u32, f32)) -> std::cmp::Ordering {
    b.1.total_cmp(&a.1).then(a.0.cmp(&b.0))
}

/// The sum of `w` in f64, in eight fixed lanes (the same order for any input).
fn sum_f64(w: &[f32]) -> f64 {
    let mut lanes = [0.0f64; 8];
    let mut chunks = w.chunks_exact(8);
    for c in &mut chunks {
        for (a, &x) in lanes.iter_mut().zip(c) {
            *a += f64::from(x);
        }
    }
    let tail: f64 = chunks.remainder().iter().map(|&x| f64::from(x)).sum();
    lanes.iter().sum::<f64>() + tail
}

/// A run's sampling: the settings, the seeded generator, and scratch space.
pub struct Sampler {
    settings: Sampling,
    rng: ChaCha8Rng,
    candidates: Vec<(u32, f32)>,
    weights: Vec<f32>,
}

impl Sampler {
    /// A sampler for `settings` (checked).
    pub fn new(settings: Sampling) -> Result<Sampler> {
        settings.check()?;
        Ok(Sampler {
            settings,
            rng: ChaCha8Rng::seed_from_u64(settings.seed),
            candidates: Vec::new(),
            weights: Vec::new(),
        })
    }

    /// The settings.
    pub fn settings(&self) -> &Sampling {
        &self.settings
    }

    /// The uniform in [0, 1) that decides `stream` at `position` (and `depth`, for
    /// drafts: 0 otherwise).
    pub fn uniform(&mut self, stream: Stream, position: usize, depth: usize) -> f64 {
        // Two bits of stream, 62 of position; 32 words of 32 bits per depth.
        self.rng
            .set_stream(((stream as u64) << 62) | (position as u64 & ((1 << 62) - 1)));
        self.rng.set_word_pos(depth as u128 * 32);
        (self.rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// The distribution the settings make of `logits` (`what` names them in the error a
    /// logit that is not finite gets). Not for greedy settings (the temperature divides).
    ///
    /// Weights are `exp` in f32 (as llama.cpp computes them; here a vectorizing
    /// approximation within 2e-7), summed in f64. Top-p first drops the tokens whose
    /// weight at temperature 1 is below `(1 − P) / V` of the largest's (as the candidates
    /// are gathered, without top-k): the tokens ranked above any of them hold more than P
    /// of the mass, so none of them can be kept, and on a peaked distribution few tokens
    /// are left to rank.
    pub fn dist(&mut self, logits: &[f32], what: &dyn Fn() -> String) -> Result<Dist> {
        let Some(max) = max_finite(logits) else {
            if let Some(j) = logits.iter().position(|x| !x.is_finite()) {
                let x = logits[j];
                return Err(RuntimeError::NonFinite(format!(
                    "{}: logit {j} is {x}",
                    what()
                )));
            }
            return Err(RuntimeError::Request(format!("{}: no logits", what())));
        };
        let s = self.settings;
        let inv_t = 1.0 / s.temp.max(f32::MIN_POSITIVE);
        let v = logits.len();
        let weight = |l: f32| f64::from(exp_neg((l - max) * inv_t));
        let truncates = (s.top_k > 0 && s.top_k < v) || s.top_p < 1.0 || s.min_p > 0.0;
        if !truncates {
            exp_all(logits, max, inv_t, &mut self.weights);
            let sum = sum_f64(&self.weights);
            let probs = self.weights.iter().map(|&w| f64::from(w) / sum).collect();
            return Ok(Dist {
                ids: Vec::new(),
                probs,
            });
        }
        let c = &mut self.candidates;
        c.clear();
        let top_k = s.top_k > 0 && s.top_k < v;
        // Without top-k, top-p's floor (below) applies as the candidates are gathered.
        let floor = if s.top_p < 1.0 {
            max + ((1.0 - f64::from(s.top_p)) / v as f64).ln() as f32
        } else {
            f32::NEG_INFINITY
        };
        let gather = if top_k { f32::NEG_INFINITY } else { floor };
        c.extend(
            logits
                .iter()
                .enumerate()
                .filter(|&(_, &l)| l >= gather)
                .map(|(i, &l)| (i as u32, l)),
        );
        if top_k {
            c.select_nth_unstable_by(s.top_k - 1, order);
            c.truncate(s.top_k);
            c.sort_unstable_by_key(|&(id, _)| id);
        }
        if s.top_p < 1.0 {
            exp_all(logits, max, 1.0, &mut self.weights);
            let w = &self.weights;
            let total = if top_k {
                c.iter().map(|&(id, _)| f64::from(w[id as usize])).sum()
            } else {
                sum_f64(w)
            };
            let want = f64::from(s.top_p) * total;
            if top_k {
                c.retain(|&(_, l)| l >= floor);
            }
            top_p(c, w, max, floor, want);
        }
        if s.min_p > 0.0 {
            let floor = f64::from(max) + f64::from(s.min_p).ln();
            c.retain(|&(_, l)| f64::from(l) >= floor);
        }
        let mut probs: Vec<f64> = c.iter().map(|&(_, l)| weight(l)).collect();
        let sum: f64 = probs.iter().sum();
        probs.iter_mut().for_each(|p| *p /= sum);
        Ok(Dist {
            ids: c.iter().map(|&(id, _)| id).collect(),
            probs,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(temp: f32, top_k: usize, top_p: f32, min_p: f32) -> Sampling {
        Sampling {
            temp,
            top_k,
            top_p,
            min_p,
            seed: 7,
        }
    }

    fn dist(s: Sampling, logits: &[f32]) -> Dist {
        Sampler::new(s)
            .unwrap()
            .dist(logits, &|| "test".into())
            .unwrap()
    }

    /// The reference: sort everything, apply each rule as llama.cpp's documentation
    /// states it, renormalise at the temperature.
    fn reference(s: Sampling, logits: &[f32]) -> Vec<f64> {
        let mut idx: Vec<usize> = (0..logits.len()).collect();
        idx.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
        if s.top_k > 0 {
            idx.truncate(s.top_k);
        }
        let max = f64::from(logits[idx[0]]);
        let z: f64 = idx
            .iter()
            .map(|&i| (f64::from(logits[i]) - max).exp())
            .sum();
        if s.top_p < 1.0 {
            let mut cum = 0.0;
            let mut keep = idx.len();
            for (n, &i) in idx.iter().enumerate() {
                cum += (f64::from(logits[i]) - max).exp() / z;
                if cum >= f64::from(s.top_p) {
                    keep = n + 1;
                    break;
                }
            }
            idx.truncate(keep);
        }
        if s.min_p > 0.0 {
            idx.retain(|&i| (f64::from(logits[i]) - max).exp() >= f64::from(s.min_p));
        }
        let mut out = vec![0.0; logits.len()];
        for &i in &idx {
            out[i] = ((f64::from(logits[i]) - max) / f64::from(s.temp)).exp();
        }
        let sum: f64 = out.iter().sum();
        out.iter_mut().for_each(|p| *p /= sum);
        out
    }

    fn logits(n: usize, seed: u64) -> Vec<f32> {
        let mut rng = dspark_testkit::rng::SplitMix64(seed);
        (0..n)
            .map(|_| (rng.next_u64() % 2000) as f32 / 250.0 - 4.0)
            .collect()
    }

    #[test]
    fn truncations_and_temperature_follow_the_reference() {
        for (n, seed) in [(5, 1), (40, 2), (300, 3), (4096, 4)] {
            let l = logits(n, seed);
            for s in [
                settings(1.0, 0, 1.0, 0.0),
                settings(0.5, 0, 1.0, 0.0),
                settings(2.0, 3, 1.0, 0.0),
                settings(0.8, 0, 0.95, 0.0),
                settings(0.8, 0, 0.3, 0.0),
                settings(0.8, 0, 1.0, 0.05),
                settings(1.3, 40, 0.95, 0.05),
                settings(0.7, 1, 1.0, 0.0),
                settings(1.0, 0, 0.0, 0.0),
                settings(1.0, 0, 1.0, 1.0),
            ] {
                let d = dist(s, &l);
                let want = reference(s, &l);
                for (id, &w) in want.iter().enumerate() {
                    let got = d.prob(id as u32);
                    assert!(
                        (got - w).abs() < 1e-6 * w.max(1e-3),
                        "{s:?} n {n} id {id}: {got} vs {w}"
                    );
                }
                let total: f64 = d.iter().map(|(_, p)| p).sum();
                assert!((total - 1.0).abs() < 1e-12);
            }
        }
    }

    #[test]
    fn the_exponential_is_within_2e7_of_f64() {
        let mut worst = 0.0f64;
        for i in 0..=200_000 {
            let x = -90.0 * i as f32 / 200_000.0;
            let want = f64::from(x).exp();
            let got = f64::from(exp_neg(x));
            if x >= -87.0 {
                worst = worst.max((got - want).abs() / want);
            } else {
                assert!(got < 1e-37);
            }
        }
        assert!(worst < 2e-7, "{worst}");
        assert_eq!(exp_neg(0.0), 1.0);
    }

    #[test]
    fn ties_keep_the_lower_id_and_top_p_keeps_the_token_that_crosses() {
        // Four equal logits: top-k 2 keeps ids 0 and 1.
        let d = dist(settings(1.0, 2, 1.0, 0.0), &[1.0, 1.0, 1.0, 1.0]);
        assert_eq!(d.iter().collect::<Vec<_>>(), vec![(0, 0.5), (1, 0.5)]);
        // p = (0.5, 0.25, 0.25): top-p 0.5 keeps the first only, 0.6 the first two.
        let l = [2f32.ln(), 0.0, 0.0];
        assert_eq!(dist(settings(1.0, 0, 0.5, 0.0), &l).support(), 1);
        assert_eq!(dist(settings(1.0, 0, 0.6, 0.0), &l).support(), 2);
    }

    #[test]
    fn sampling_inverts_the_cumulative_distribution() {
        let d = dist(settings(1.0, 0, 1.0, 0.0), &[0.0, 0.0, 2f32.ln()]);
        // p = (0.25, 0.25, 0.5)
        assert_eq!(d.sample(0.0), 0);
        assert_eq!(d.sample(0.2499), 0);
        assert_eq!(d.sample(0.2501), 1);
        assert_eq!(d.sample(0.5001), 2);
        assert_eq!(d.sample(0.99999), 2);
    }

    #[test]
    fn uniforms_are_keyed_and_reproducible() {
        let mut a = Sampler::new(settings(1.0, 0, 1.0, 0.0)).unwrap();
        let mut b = Sampler::new(settings(1.0, 0, 1.0, 0.0)).unwrap();
        let x = a.uniform(Stream::Accept, 17, 0);
        let _ = b.uniform(Stream::Target, 3, 0);
        assert_eq!(
            b.uniform(Stream::Accept, 17, 0),
            x,
            "order of draws is irrelevant"
        );
        let others = [
            a.uniform(Stream::Accept, 18, 0),
            a.uniform(Stream::Residual, 17, 0),
            a.uniform(Stream::Draft, 17, 0),
            a.uniform(Stream::Draft, 17, 1),
            a.uniform(Stream::Target, 17, 0),
        ];
        assert!(others.iter().all(|&y| y != x && (0.0..1.0).contains(&y)));
        let mut c = Sampler::new(Sampling {
            seed: 8,
            ..*a.settings()
        })
        .unwrap();
        assert_ne!(c.uniform(Stream::Accept, 17, 0), x);
        // Roughly uniform: the mean of 4000 is within 5 standard errors of 1/2.
        let mean = (0..4000)
            .map(|i| a.uniform(Stream::Target, i, 0))
            .sum::<f64>()
            / 4000.0;
        assert!(
            (mean - 0.5).abs() < 5.0 * (1.0f64 / 12.0 / 4000.0).sqrt(),
            "{mean}"
        );
    }

    /// Exact law of the test: over every draft x and the uniform's CDF, P(token = v)
    /// equals p(v) — computed, not sampled.
    #[test]
    fn judge_yields_the_target_distribution_exactly() {
        let p = dist(settings(1.0, 0, 1.0, 0.0), &[0.3, -1.0, 2.0, 0.0, 0.5]);
        for ql in [
            [0.3f32, -1.0, 2.0, 0.0, 0.5],
            [3.0, 0.0, -2.0, 0.0, 0.0],
            [-5.0, 4.0, -5.0, -5.0, -5.0],
        ] {
            let q = dist(settings(1.0, 0, 1.0, 0.0), &ql);
            let mut law = [0.0f64; 5];
            for (x, qx) in q.iter() {
                let accept = (p.prob(x) / qx).min(1.0);
                law[x as usize] += qx * accept;
                // On rejection the residual's CDF, scanned with many uniforms.
                let n = 20000;
                for k in 0..n {
                    let u = (k as f64 + 0.5) / n as f64;
                    match judge(&p, &q, x, 1.0 - 1e-15, u) {
                        Verdict::Reject(t) => law[t as usize] += qx * (1.0 - accept) / n as f64,
                        Verdict::Accept => assert!(accept >= 1.0 - 1e-15),
                    }
                }
            }
            for (v, &l) in law.iter().enumerate() {
                assert!((l - p.prob(v as u32)).abs() < 1e-4, "{ql:?}: {v}: {l}");
            }
            let overlap: f64 = (0..5).map(|v| p.prob(v).min(q.prob(v))).sum();
            assert!((p.overlap(&q) - overlap).abs() < 1e-15);
        }
    }

    #[test]
    fn settings_outside_their_range_are_refused() {
        for s in [
            settings(-0.1, 0, 1.0, 0.0),
            settings(f32::NAN, 0, 1.0, 0.0),
            settings(f32::INFINITY, 0, 1.0, 0.0),
            settings(1.0, 0, 1.5, 0.0),
            settings(1.0, 0, -0.1, 0.0),
            settings(1.0, 0, 1.0, 1.01),
            settings(1.0, 0, f32::NAN, 0.0),
        ] {
            assert!(Sampler::new(s).is_err(), "{s:?}");
        }
        let mut s = Sampler::new(settings(1.0, 0, 1.0, 0.0)).unwrap();
        let err = s.dist(&[0.0, f32::NAN], &|| "row 3".into()).unwrap_err();
        assert!(err.to_string().contains("row 3: logit 1 is NaN"), "{err}");
    }
}

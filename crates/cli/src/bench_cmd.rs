//! `dspark bench`: how long the speculative loop's steps take on this machine, against the
//! memory-bandwidth bound of the bytes each step must read.
//!
//! Inputs are checked (each file by its contract, the pair by the fit check, the request
//! against the context and the memory it needs) before anything is measured. Then, each
//! step `--runs` times after two warm-up runs (median and minimum reported):
//! - the machine's memory read bandwidth, as a plain multi-threaded read reaches it: the
//!   best of ten passes over the models' own mapped pages (a 1 GiB buffer when they are
//!   small enough to sit in the caches), before and after the steps; the bounds use the
//!   higher reading; with `--paired-reads` also before each timed decode step and block
//!   draft (best of five passes), each run then set against its own read;
//! - with `--target`: one decode step (a 1-token forward after a `--context`-token
//!   prefill) and a `--verify`-token forward, the KV cache rolled back after each run;
//! - with `--draft`: one block draft after `--context` positions of context, by phase
//!   (layers, the LM head, the DSpark heads), and the context append of an accepted
//!   round; without `--target` the drafter runs on a random head-only target of its
//!   vocabulary and hidden size (for drafters whose target is too large to build);
//! - with both: a speculative round (draft, verify of anchor + drafts, context append;
//!   above `--temp 0` the sampled draft and the acceptance step) and the break-even
//!   acceptance length, round time ÷ decode time: the tokens a round
//!   must commit on average for speculation to beat plain decoding.
//!
//! The prompt is deterministic: token i is `(37 i + 11) mod vocab`
//! (`bench/llama_cpp_qwen3.py` uses the same, so llama.cpp runs the same positions).
//! Prints a table, or with `--json` one object (the fields below).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::Args;
use dspark_contract::TargetShape;
use dspark_gguf::GgufFile;
use dspark_runtime::generate::{fit_context, ContextAsk, Contexts};
use dspark_runtime::sampling::{judge, Sampler};
use dspark_runtime::Rollback;
use dspark_runtime::{Drafter, Logits, SessionOptions, Target};
use dspark_synth::head_only::HeadOnlyTarget;
use dspark_synth::rng::SplitMix64;
use rayon::prelude::*;
use serde_json::{json, Value};

use crate::load::{contract_error, load_drafter, load_target, map_model, runtime_error};
use crate::{usage, Outcome};

#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Target model: a llama.cpp GGUF of an architecture dspark runs (`dspark inspect` says which).
    #[arg(short = 'm', long, visible_alias = "model")]
    pub target: Option<PathBuf>,
    /// Drafter (a dflash-draft GGUF; llama.cpp spelling: -md).
    #[arg(long, visible_alias = "model-draft")]
    pub draft: Option<PathBuf>,
    /// Worker threads (default: all cores).
    #[arg(short = 't', long, value_parser = crate::parse_threads)]
    pub threads: Option<usize>,
    /// Positions before the measured step (prefill / drafter context), at most 2^20.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=1 << 20))]
    pub context: u64,
    /// Tokens in the verify forward timed on its own.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..=256))]
    pub verify: u64,
    /// Verify widths timed one by one besides --verify (e.g. `1,2,4,8`): the cost of a
    /// verify forward as its width grows (on a mixture-of-experts target, with the routed
    /// experts its tokens read).
    #[arg(long, value_delimiter = ',', value_parser = clap::value_parser!(u64).range(1..=256))]
    pub widths: Vec<u64>,
    /// Every timed forward of the target reads new tokens (the same positions, the cache
    /// rolled back): on a mixture-of-experts file larger than memory each run then routes
    /// to experts of its own, as decoding does, instead of re-reading what the previous
    /// run left in the page cache.
    #[arg(long)]
    pub fresh: bool,
    /// Also pair each timed decode step and block draft with a read of the probe's bytes
    /// just before it (the best of five passes), and report the median of the runs'
    /// time ÷ the bound at their own read: on a host whose memory bandwidth changes from
    /// minute to minute, a run measured while memory is slow is then not compared with a
    /// read taken while it was fast, nor the other way round.
    #[arg(long)]
    pub paired_reads: bool,
    /// Timed runs of each step (after two warm-up runs).
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub runs: u64,
    /// How attention is computed (llama and qwen3 targets, Kimi K3's MLA layers): `f16` (the default, as llama.cpp's CPU
    /// flash attention) or `f32` (see `generate --help`).
    #[arg(long, default_value = "f16", value_parser = crate::generate_cmd::parse_attention)]
    pub attention: dspark_runtime::Attention,
    /// Sampling: above temperature 0 the block is drafted by sampling the Markov chain,
    /// and with a target the round adds the acceptance step (the target's distribution
    /// of every verify row, rejection sampling of every draft).
    #[command(flatten)]
    pub sampling: crate::SamplingArgs,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Median and minimum of timed runs, in milliseconds.
fn summary(mut ms: Vec<f64>) -> Value {
    ms.sort_by(f64::total_cmp);
    json!({"median_ms": middle(&ms), "min_ms": ms[0]})
}

/// The median of sorted, non-empty `v` (the mean of the middle two when their count is
/// even).
fn middle(v: &[f64]) -> f64 {
    if v.len() % 2 == 1 {
        v[v.len() / 2]
    } else {
        (v[v.len() / 2 - 1] + v[v.len() / 2]) / 2.0
    }
}

/// Runs `f` twice untimed, then `runs` times timed; `f` returns the time it measured.
/// Ctrl-C stops it before the next run ([`crate::Interrupted`]).
fn time_runs(runs: usize, mut f: impl FnMut() -> Result<Duration>) -> Result<Vec<f64>> {
    let mut run = || {
        if crate::CANCEL.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(anyhow::Error::new(crate::Interrupted));
        }
        f()
    };
    run()?;
    run()?;
    (0..runs)
        .map(|_| Ok(run()?.as_secs_f64() * 1e3))
        .collect::<Result<Vec<f64>>>()
}

/// Passes of each paired read (`--paired-reads`).
const PAIRED_PASSES: usize = 5;

/// The paired reads' summary (GB/s) and the median over runs of each run's time ÷ the
/// bound of `bytes` at the read just before it, from the timed runs' `ms` and `reads`
/// (bytes/s; the warm-up runs' reads come first and are dropped).
fn paired(ms: &[f64], reads: &[f64], bytes: u64) -> Value {
    let reads = &reads[reads.len() - ms.len()..];
    let mut ratios: Vec<f64> = ms
        .iter()
        .zip(reads)
        .map(|(t, r)| t / (bytes as f64 / r * 1e3))
        .collect();
    ratios.sort_by(f64::total_cmp);
    let mut gb: Vec<f64> = reads.iter().map(|r| r / 1e9).collect();
    gb.sort_by(f64::total_cmp);
    json!({
        "passes": PAIRED_PASSES,
        "reads_gb_s": {"median": middle(&gb), "min": gb[0], "max": gb[gb.len() - 1]},
        "over_bound": {"median": middle(&ratios), "min": ratios[0], "max": ratios[ratios.len() - 1]},
    })
}

fn median(v: &Value) -> f64 {
    v["median_ms"].as_f64().unwrap_or(f64::NAN)
}

/// The tokens of the target's timed forwards: always the prompt's continuation, or with
/// `fresh` the deterministic sequence from where it left off, never repeating within a
/// run (token i is `(37 i + 11) mod vocab`, as the prompt's).
struct StepTokens {
    fresh: bool,
    next: u64,
    vocab: u64,
    fixed: Vec<u32>,
}

impl StepTokens {
    fn take(&mut self, n: usize) -> Vec<u32> {
        if !self.fresh {
            return self.fixed[..n].to_vec();
        }
        let from = self.next;
        self.next += n as u64;
        (from..from + n as u64)
            .map(|i| ((i * 37 + 11) % self.vocab) as u32)
            .collect()
    }
}

/// The median routed experts and bytes of a step's timed runs (`None` for a target
/// without routed experts).
fn routed_summary(mut r: Vec<dspark_runtime::Routed>) -> Option<Value> {
    if r.is_empty() {
        return None;
    }
    let mid = r.len() / 2;
    r.sort_by_key(|x| x.bytes);
    let bytes = r[mid].bytes;
    r.sort_by_key(|x| x.experts);
    Some(json!({"experts": r[mid].experts, "bytes": bytes}))
}

/// Mapped bytes below which the probe reads its own buffer instead: a model this small
/// is read from the caches, not from memory.
const PROBE_MIN_MAPPED: usize = 512 << 20;

/// The largest part of the mapped models one probe reads (a bigger file adds nothing to
/// the estimate, only time).
const PROBE_MAX_MAPPED: usize = 4 << 30;

/// What the bandwidth probe reads: the models' own mapped pages, the bytes the measured
/// steps stream (the first [`PROBE_MAX_MAPPED`] of them), or, when they are smaller than
/// [`PROBE_MIN_MAPPED`] or larger than half the memory available (they would be read from
/// disk and push the steps' own pages out of the cache), `own`, a 1 GiB buffer
/// ([`probe_buffer`]). Returns the parts and what they are ("mapped models" or "1 GiB
/// buffer").
fn probe_parts<'a>(mapped: &[&'a [u8]], own: &'a Option<Vec<u8>>) -> (Vec<&'a [u8]>, &'static str) {
    if let Some(buf) = own {
        return (vec![&buf[..]], "1 GiB buffer");
    }
    let mut left = PROBE_MAX_MAPPED;
    let parts = mapped
        .iter()
        .map(|m| {
            let take = m.len().min(left);
            left -= take;
            &m[..take]
        })
        .collect();
    (parts, "mapped models")
}

/// The probe's own buffer when the mapped models will not do ([`probe_parts`]), allocated
/// and written once for every probe of the run; `None` when they will.
fn probe_buffer(mapped: &[&[u8]]) -> Result<Option<Vec<u8>>> {
    let total: usize = mapped.iter().map(|m| m.len()).sum();
    let fits = dspark_runtime::memory::available_memory().is_none_or(|m| total as u64 <= m / 2);
    if total >= PROBE_MIN_MAPPED && fits {
        return Ok(None);
    }
    const BYTES: usize = 1 << 30;
    dspark_runtime::memory::check_fits(BYTES as u64, "the bandwidth measurement")?;
    let mut buf: Vec<u8> = Vec::new();
    buf.try_reserve_exact(BYTES)
        .map_err(|_| anyhow::anyhow!("cannot allocate the bandwidth measurement's 1 GiB"))?;
    // Written (a fill per 64 MiB, Ctrl-C heard between them), so every page is backed
    // before the timed passes.
    const PART: usize = 64 << 20;
    for k in 0..BYTES / PART {
        if crate::CANCEL.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(anyhow::Error::new(crate::Interrupted));
        }
        buf.resize((k + 1) * PART, (k as u8) | 1);
    }
    Ok(Some(buf))
}

/// Read bandwidth of `parts` in bytes/s, as a plain multi-threaded read reaches it: the
/// best of ten passes, each summing the bytes as 64-bit words with the widest loads the
/// CPU has ([`dspark_quant::stream::sum_words`]: 16-byte loads, what portable code gets,
/// read ~30 % slower than 64-byte ones on an Emerald Rapids) in one contiguous slice per
/// pool thread, so every thread streams its own part once.
pub fn memory_bandwidth(parts: &[&[u8]]) -> Result<f64> {
    read_bandwidth(parts, 10)
}

/// Read bandwidth of `parts` in bytes/s: the best of `passes` passes, as
/// [`memory_bandwidth`] reads them.
fn read_bandwidth(parts: &[&[u8]], passes: usize) -> Result<f64> {
    // One contiguous slice per thread: the parts cut into equal shares, whole 64-byte
    // lines each.
    let threads = rayon::current_num_threads().max(1);
    let bytes: usize = parts.iter().map(|p| p.len()).sum();
    let share = (bytes / threads).div_ceil(64) * 64;
    let mut slices: Vec<Vec<&[u8]>> = vec![Vec::new(); threads];
    let (mut t, mut room) = (0, share);
    for p in parts {
        let mut rest: &[u8] = p;
        while !rest.is_empty() {
            let take = rest.len().min(room);
            slices[t].push(&rest[..take]);
            rest = &rest[take..];
            room -= take;
            if room == 0 && t + 1 < threads {
                t += 1;
                room = share;
            }
        }
    }
    let mut best = f64::INFINITY;
    for _ in 0..passes {
        if crate::CANCEL.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(anyhow::Error::new(crate::Interrupted));
        }
        let t = Instant::now();
        let s: u64 = slices
            .par_iter()
            .map(|s| {
                s.iter()
                    .map(|b| dspark_quant::stream::sum_words(b))
                    .fold(0, u64::wrapping_add)
            })
            .reduce(|| 0, u64::wrapping_add);
        std::hint::black_box(s);
        best = best.min(t.elapsed().as_secs_f64());
    }
    Ok(bytes as f64 / best)
}

/// A drafter with no target to hand: checked by its contract, loaded against the shape of
/// a head-only stand-in of its vocabulary and hidden size.
fn drafter_alone(path: &Path) -> Result<(Arc<Drafter>, HeadOnlyTarget)> {
    let bytes = map_model(path)?;
    let file = GgufFile::parse((*bytes).as_ref()).with_context(|| path.display().to_string())?;
    let checked = dspark_contract::drafter(&file, &dspark_quant::matrix_types())
        .map_err(|e| contract_error(path, &e))?;
    let h = checked.hparams();
    let Some(vocab) = checked.markov().map(|m| m.vocab).or(h.target_vocab) else {
        usage!(
            "{}: the drafter records no vocabulary (no Markov head, no vocab_size): give --target",
            path.display()
        );
    };
    if !h.hidden.is_multiple_of(32) {
        usage!(
            "{}: a head-only stand-in target is Q8_0, so it needs a hidden size that is a multiple of 32 (this drafter's is {}): give --target",
            path.display(),
            h.hidden
        );
    }
    let layers = h
        .target_layers
        .unwrap_or_else(|| h.target_layer_ids.iter().max().map_or(1, |l| l + 1));
    let shape = TargetShape {
        hidden: h.hidden,
        layers,
        vocab,
    };
    dspark_runtime::memory::check_fits(
        (vocab as u64) * (h.hidden as u64 / 32 * 34),
        "the head-only stand-in target's LM head",
    )
    .map_err(|e| runtime_error(path, e))?;
    let drafter =
        Drafter::load(bytes.clone(), &checked, &shape).map_err(|e| runtime_error(path, e))?;
    Ok((
        Arc::new(drafter),
        HeadOnlyTarget::new(vocab, h.hidden, layers, 1),
    ))
}

pub fn run(a: BenchArgs) -> Result<Outcome> {
    if a.target.is_none() && a.draft.is_none() {
        usage!("give --target, --draft or both");
    }
    let (runs, verify, context) = (a.runs as usize, a.verify as usize, a.context as usize);
    let threads = crate::start_threads(a.threads);

    // 1. Inputs, all checked before anything is measured.
    let target = match &a.target {
        Some(p) => Some(load_target(p, None)?),
        None => None,
    };
    let mut stand_in = None;
    let drafter = match (&a.draft, &target, &a.target) {
        (Some(d), Some(t), Some(tp)) => {
            Some(load_drafter(d, &*t.model, &tp.display().to_string())?)
        }
        (Some(d), None, _) => {
            let (drafter, head) = drafter_alone(d)?;
            stand_in = Some(head);
            Some(drafter)
        }
        _ => None,
    };
    let drafts = drafter.as_ref().map_or(0, |d| d.drafts_per_block());
    let widest = a.widths.iter().max().map_or(0, |&w| w as usize);
    let extra = verify.max(drafts + 1).max(widest);
    // The measured steps need `context` positions and `extra` more, within the target's
    // context and the drafter's (the runtime's one rule; a stand-in has no limit).
    let contexts = Contexts {
        target: target.as_ref().map_or(usize::MAX, |t| t.model.context()),
        drafter: drafter.as_ref().and_then(|d| d.hparams().context),
    };
    let ask = ContextAsk {
        prompt: context,
        max_tokens: extra,
        context: None,
        stop_at_context: false,
    };
    if let Err(e) = fit_context(contexts, &ask) {
        usage!("--context {context} and {extra} measured positions: {e}");
    }
    let positions = context + extra;
    let mut session = match (&target, &a.target) {
        (Some(t), Some(p)) => Some(
            Arc::clone(&t.model)
                .session(&SessionOptions {
                    positions,
                    undo: extra,
                    attention: a.attention,
                })
                .map_err(|e| runtime_error(p, e))?,
        ),
        _ => None,
    };
    let mut draft_session = match (&drafter, &a.draft) {
        (Some(d), Some(p)) => Some(d.session(positions).map_err(|e| runtime_error(p, e))?),
        _ => None,
    };
    // The largest step's working memory (verify with logits for every row, the prefill
    // with captured features, one draft), refused before anything runs.
    if let (Some(s), Some(p)) = (&session, &a.target) {
        let captures = drafter
            .as_ref()
            .map_or(0, |d| d.hparams().target_layer_ids.len());
        let step = s
            .step_bytes(context.max(1), Logits::Last, captures)
            .max(s.step_bytes(verify, Logits::All, captures));
        dspark_runtime::memory::check_fits(step, "the working memory of a measured step")
            .map_err(|e| runtime_error(p, e))?;
    }
    if let (Some(d), Some(p)) = (&drafter, &a.draft) {
        dspark_runtime::memory::check_fits(
            d.step_bytes(positions),
            "the working memory of one drafted block",
        )
        .map_err(|e| runtime_error(p, e))?;
    }

    // 2. Measurements; Ctrl-C stops them between runs, keeping what was measured.
    let mut doc = json!({
        "threads": threads,
        "kernels": dspark_quant::kernels().isa,
        "context": context,
        "sampling": a.sampling.json(),
    });
    let settings = a.sampling.settings(a.sampling.seed);
    let mut sampler = if settings.is_greedy() {
        None
    } else {
        Some(Sampler::new(settings).map_err(anyhow::Error::new)?)
    };
    // On a pool worker, like generate and eval: the steps are timed as they run there.
    // The models' mapped pages again, for the bandwidth probe: the bytes the steps stream.
    let maps = [&a.target, &a.draft]
        .into_iter()
        .flatten()
        .map(|p| map_model(p))
        .collect::<Result<Vec<_>>>()?;
    let mapped: Vec<&[u8]> = maps.iter().map(|m| (**m).as_ref()).collect();
    let measured = crate::on_pool(|| -> Result<()> {
        let own = probe_buffer(&mapped)?;
        let (parts, probe) = probe_parts(&mapped, &own);
        let bandwidth = memory_bandwidth(&parts)?;
        doc["memory_bandwidth_gb_s"] = json!(bandwidth / 1e9);
        doc["memory_bandwidth_probe"] = json!(probe);
        let bound = |b: u64| b as f64 / bandwidth * 1e3;
        let vocab = session
            .as_ref()
            .map(|s| s.shape().vocab)
            .or(stand_in.as_ref().map(|h| h.shape().vocab))
            .unwrap_or(1) as u64;
        let prompt: Vec<u32> = (0..positions as u64)
            .map(|i| ((i * 37 + 11) % vocab) as u32)
            .collect();
        let capture: Vec<usize> = drafter
            .as_ref()
            .map(|d| d.hparams().target_layer_ids.clone())
            .unwrap_or_default();

        let mut decode_ms = None;
        let mut features = Vec::new();
        if let (Some(s), Some(t), Some(p)) = (session.as_mut(), &target, &a.target) {
            let weights = t.model.weight_bytes();
            let pre = s.forward_commit(&prompt[..context], &capture, Logits::Last)?;
            features = pre.captured;
            let p0 = s.len();
            let mut tokens = StepTokens {
                fresh: a.fresh,
                next: positions as u64,
                vocab,
                fixed: prompt[context..].to_vec(),
            };
            // Times a forward of n tokens `runs` times, and what each timed run's routed
            // experts cost.
            let mut step = |n: usize,
                            mut reads: Option<&mut Vec<f64>>|
             -> Result<(Value, Option<Value>, Vec<f64>)> {
                let mut routed = Vec::new();
                let times = time_runs(runs, || {
                    let toks = tokens.take(n);
                    if let Some(r) = reads.as_deref_mut() {
                        r.push(read_bandwidth(&parts, PAIRED_PASSES)?);
                    }
                    let t = Instant::now();
                    s.forward(&toks, &capture, Logits::All)?;
                    let dt = t.elapsed();
                    routed.extend(s.routed());
                    s.rollback(p0)?;
                    Ok(dt)
                })?;
                Ok((
                    summary(times.clone()),
                    routed_summary(routed.split_off(routed.len().min(2))),
                    times,
                ))
            };
            // Where a decode step's time goes, stage by stage (decoder targets).
            let recorder = dspark_runtime::stages::Recorder::start();
            let mut decode_reads = Vec::new();
            let (mut decode, decode_routed, decode_runs) =
                step(1, a.paired_reads.then_some(&mut decode_reads))?;
            if let Some(stages) = recorder.finish() {
                decode["stages_ms"] = stages
                    .into_iter()
                    .map(|(s, ms)| (s.name().to_string(), json!(ms)))
                    .collect::<serde_json::Map<_, _>>()
                    .into();
            }
            let (verify_t, verify_routed, _) = step(verify, None)?;
            let mut widths = Vec::new();
            for &w in &a.widths {
                let (t, r, _) = step(w as usize, None)?;
                widths.push(json!({"tokens": w, "median_ms": median(&t), "min_ms": t["min_ms"], "routed": r}));
            }
            decode_ms = Some(median(&decode));
            // A recurrent target: each rollback option's verify, its rollback to 1, half
            // and all of the verified positions, and the state it holds.
            let mut rollback = serde_json::Map::new();
            if s.recurrent() {
                let verify_toks = &prompt[context..context + verify];
                for mode in [Rollback::Replay, Rollback::Snapshots] {
                    s.set_rollback(mode);
                    let v = summary(time_runs(runs, || {
                        let t = Instant::now();
                        s.forward(verify_toks, &capture, Logits::All)?;
                        let dt = t.elapsed();
                        s.rollback(p0)?;
                        Ok(dt)
                    })?);
                    let mut kept = serde_json::Map::new();
                    for keep in [1, verify.div_ceil(2), verify] {
                        let r = summary(time_runs(runs, || {
                            s.forward(verify_toks, &capture, Logits::All)?;
                            let t = Instant::now();
                            s.rollback(p0 + keep)?;
                            let dt = t.elapsed();
                            s.rollback(p0)?;
                            Ok(dt)
                        })?);
                        kept.insert(keep.to_string(), r["median_ms"].clone());
                    }
                    s.forward(verify_toks, &capture, Logits::All)?;
                    let bytes = s.state_bytes();
                    s.rollback(p0)?;
                    rollback.insert(
                        mode.name().into(),
                        json!({"verify": v, "rollback_ms_by_kept_positions": kept, "state_bytes": bytes}),
                    );
                }
                s.set_rollback(Rollback::Replay);
            }
            doc["target"] = json!({
                "file": p.display().to_string(),
                "architecture": t.model.arch(),
                "tensor_bytes": weights,
                "decode": decode,
                "decode_tokens_per_second": 1e3 / median(&decode),
                "decode_bound_ms": bound(weights),
                "verify": {"tokens": verify, "median_ms": median(&verify_t), "min_ms": verify_t["min_ms"]},
                "fresh_tokens": a.fresh,
            });
            if let Some(r) = decode_routed {
                doc["target"]["decode"]["routed"] = r;
            }
            if a.paired_reads {
                doc["target"]["decode"]["paired"] = paired(&decode_runs, &decode_reads, weights);
            }
            if let Some(r) = verify_routed {
                doc["target"]["verify"]["routed"] = r;
            }
            if !widths.is_empty() {
                doc["target"]["widths"] = Value::Array(widths);
            }
            if !rollback.is_empty() {
                doc["target"]["rollback"] = Value::Object(rollback);
            }
        }

        if let (Some(d), Some(ds), Some(p)) = (&drafter, draft_session.as_mut(), &a.draft) {
            let width = d.hparams().target_layer_ids.len() * d.hparams().hidden;
            if features.is_empty() {
                dspark_runtime::memory::check_fits(
                    (context * width * 4) as u64,
                    "the drafter's random context features",
                )
                .map_err(|e| runtime_error(p, e))?;
                let mut rng = SplitMix64(7);
                features = (0..context * width).map(|_| rng.normal()).collect();
            }
            ds.add_context(&features[..context * width])?;
            let target_ref: &dyn Target = match (&session, &stand_in) {
                (Some(s), _) => &**s,
                (None, Some(h)) => h,
                _ => unreachable!("a drafter has a target or a stand-in"),
            };
            let anchor = prompt[context];
            let mut phases = (Vec::new(), Vec::new(), Vec::new());
            let mut last_draft = None;
            let mut block_reads = Vec::new();
            let block_runs = time_runs(runs, || {
                if a.paired_reads {
                    block_reads.push(read_bandwidth(&parts, PAIRED_PASSES)?);
                }
                let t = Instant::now();
                let out = match sampler.as_mut() {
                    Some(sm) => ds.draft_sampled(target_ref, anchor, sm)?,
                    None => ds.draft(target_ref, anchor)?,
                };
                let dt = t.elapsed();
                phases.0.push(out.times.layers.as_secs_f64() * 1e3);
                phases.1.push(out.times.lm_head.as_secs_f64() * 1e3);
                phases.2.push(out.times.heads.as_secs_f64() * 1e3);
                last_draft = Some(out);
                Ok(dt)
            })?;
            let block = summary(block_runs.clone());
            // Drop the warm-up runs' phases.
            let (l, h, m) = (
                summary(phases.0.split_off(2)),
                summary(phases.1.split_off(2)),
                summary(phases.2.split_off(2)),
            );
            // The context append of a fully accepted round: anchor + drafts positions.
            let append_rows = (drafts + 1).min(context);
            let rows = &features[..append_rows * width];
            let len = ds.len();
            let append = summary(time_runs(runs, || {
                let t = Instant::now();
                ds.add_context(rows)?;
                let dt = t.elapsed();
                ds.truncate(len);
                Ok(dt)
            })?);
            // Bytes one block must stream: every decoder-layer tensor, the final norm, the
            // Markov head's W2 once per draft (each step depends on the previous token), and
            // the LM head once.
            let layer_bytes = d.layer_bytes();
            let w2 = d.markov_w2_bytes() * drafts as u64;
            let drafter_bytes = layer_bytes + w2;
            let shape = target_ref.shape();
            let head_bytes = shape.vocab as u64 * (shape.hidden as u64 / 32 * 34);
            doc["drafter"] = json!({
                "file": p.display().to_string(),
                "block_size": d.hparams().block_size,
                "drafts": drafts,
                "target": if session.is_some() { "the --target model" } else { "random head-only (Q8_0 LM head)" },
                "draft": block,
                "phases": {"layers": l, "lm_head": h, "heads": m},
                "bytes": {"layers": layer_bytes, "markov_w2_per_block": w2, "lm_head": head_bytes},
                "bound_ms": {
                    "drafter": bound(drafter_bytes),
                    "lm_head": bound(head_bytes),
                    "block": bound(drafter_bytes + head_bytes),
                },
                "draft_over_bound": median(&block) / bound(drafter_bytes + head_bytes),
                "drafter_phases_over_bound": (median(&l) + median(&m)) / bound(drafter_bytes),
                "append_context": {"positions": append_rows, "median_ms": median(&append), "min_ms": append["min_ms"]},
            });
            if a.paired_reads {
                doc["drafter"]["paired"] =
                    paired(&block_runs, &block_reads, drafter_bytes + head_bytes);
            }
            if let (Some(dec), Some(s)) = (decode_ms, session.as_mut()) {
                // A round: draft, verify anchor + drafts, append the accepted positions.
                let p0 = s.len();
                let n = drafts + 1;
                let verify_t = summary(time_runs(runs, || {
                    let t = Instant::now();
                    s.forward(&prompt[context..context + n], &capture, Logits::All)?;
                    let dt = t.elapsed();
                    s.rollback(p0)?;
                    Ok(dt)
                })?);
                // Sampling: the target's distribution of every verify row and the test of
                // every draft (as if each were accepted: the most work a round does).
                let accept = match (sampler.as_mut(), &last_draft) {
                    (Some(sm), Some(draft)) => {
                        let out =
                            s.forward(&prompt[context..context + n], &capture, Logits::All)?;
                        s.rollback(p0)?;
                        let vocab = s.shape().vocab;
                        Some(summary(time_runs(runs, || {
                            let t = Instant::now();
                            for (i, row) in out.logits.chunks_exact(vocab).enumerate() {
                                let p = sm.dist(row, &|| format!("verify row {i}"))?;
                                if let (Some(&x), Some(q)) =
                                    (draft.tokens.get(i), draft.proposals.get(i))
                                {
                                    std::hint::black_box(judge(&p, q, x, 0.0, 0.5));
                                }
                            }
                            Ok(t.elapsed())
                        })?))
                    }
                    _ => None,
                };
                let round = median(&block)
                    + median(&verify_t)
                    + median(&append)
                    + accept.as_ref().map_or(0.0, median);
                doc["round"] = json!({
                    "verify_tokens": n,
                    "verify": verify_t,
                    "acceptance": accept,
                    "round_ms": round,
                    "break_even_acceptance_length": round / dec,
                    "max_speedup": n as f64 * dec / round,
                });
            }
        }

        // The probe again after the steps: the machine's bandwidth drifts (a shared host),
        // and the bound is the higher reading (the tighter bound).
        let after = memory_bandwidth(&parts)?;
        doc["memory_bandwidth_after_gb_s"] = json!(after / 1e9);
        if after > bandwidth {
            rebound(&mut doc, bandwidth, after);
        }
        Ok(())
    });
    let interrupted = match measured {
        Ok(()) => false,
        Err(e) if e.downcast_ref::<crate::Interrupted>().is_some() => true,
        Err(e) => return Err(e),
    };
    if interrupted {
        doc["interrupted"] = json!(true);
    }
    if a.json {
        crate::outln!("{doc}")?;
    } else {
        print_table(&doc)?;
    }
    Ok(if interrupted {
        crate::diag!("dspark: interrupted; the steps measured so far are above");
        Outcome::Interrupted
    } else {
        Outcome::Ok
    })
}

/// Restates the bounds of `d`, computed with bandwidth `old`, with the higher reading
/// `new`: bounds shrink by `old / new`, ratios to them grow by `new / old`.
fn rebound(d: &mut Value, old: f64, new: f64) {
    let scale = |v: &mut Value, k: f64| {
        if let Some(x) = v.as_f64() {
            *v = json!(x * k);
        }
    };
    d["memory_bandwidth_gb_s"] = json!(new / 1e9);
    d["memory_bandwidth_before_gb_s"] = json!(old / 1e9);
    if d["target"].is_object() {
        scale(&mut d["target"]["decode_bound_ms"], old / new);
    }
    if d["drafter"].is_object() {
        for k in ["drafter", "lm_head", "block"] {
            scale(&mut d["drafter"]["bound_ms"][k], old / new);
        }
        scale(&mut d["drafter"]["draft_over_bound"], new / old);
        scale(&mut d["drafter"]["drafter_phases_over_bound"], new / old);
    }
}

/// One line of `--paired-reads` figures (nothing without them).
fn paired_line(what: &str, p: &Value) -> Result<()> {
    if !p.is_object() {
        return Ok(());
    }
    let f = |v: &Value| v.as_f64().map_or("-".to_string(), |x| format!("{x:.2}"));
    crate::outln!(
        "{what}: time / bound at each run's read, median {} (min {}, max {}); reads {} GB/s median ({} to {})",
        f(&p["over_bound"]["median"]),
        f(&p["over_bound"]["min"]),
        f(&p["over_bound"]["max"]),
        f(&p["reads_gb_s"]["median"]),
        f(&p["reads_gb_s"]["min"]),
        f(&p["reads_gb_s"]["max"])
    )?;
    Ok(())
}

/// The measurements as a table.
fn print_table(d: &Value) -> Result<()> {
    let f = |v: &Value| v.as_f64().map_or("-".to_string(), |x| format!("{x:.2}"));
    crate::outln!(
        "threads {}, kernels {}, memory bandwidth {} GB/s (read of the {}), context {}",
        d["threads"],
        d["kernels"].as_str().unwrap_or("?"),
        f(&d["memory_bandwidth_gb_s"]),
        d["memory_bandwidth_probe"].as_str().unwrap_or("?"),
        d["context"]
    )?;
    crate::outln!(
        "{:<34} {:>10} {:>10} {:>10}",
        "step",
        "median ms",
        "min ms",
        "bound ms"
    )?;
    let row = |name: String, v: &Value, bound: &Value| -> Result<()> {
        crate::outln!(
            "{name:<34} {:>10} {:>10} {:>10}",
            f(&v["median_ms"]),
            f(&v["min_ms"]),
            f(bound)
        )?;
        Ok(())
    };
    let t = &d["target"];
    if t.is_object() {
        row(
            "target decode (1 token)".into(),
            &t["decode"],
            &t["decode_bound_ms"],
        )?;
        if let Some(stages) = t["decode"]["stages_ms"].as_object() {
            let parts: Vec<String> = stages
                .iter()
                .map(|(name, ms)| format!("{name} {}", f(ms)))
                .collect();
            crate::outln!("  stages, mean ms: {}", parts.join(", "))?;
        }
        paired_line("  paired with reads", &t["decode"]["paired"])?;
        row(
            format!("target verify ({} tokens)", t["verify"]["tokens"]),
            &t["verify"],
            &Value::Null,
        )?;
        if let Some(modes) = t["rollback"].as_object() {
            for (mode, m) in modes {
                row(
                    format!("  verify, rollback {mode}"),
                    &m["verify"],
                    &Value::Null,
                )?;
                let kept: Vec<String> = m["rollback_ms_by_kept_positions"]
                    .as_object()
                    .map(|k| k.iter().map(|(n, v)| format!("{n}: {}", f(v))).collect())
                    .unwrap_or_default();
                crate::outln!(
                    "    rollback ms by kept positions {}; state {} bytes",
                    kept.join(", "),
                    m["state_bytes"]
                )?;
            }
        }
    }
    let k = &d["drafter"];
    if k.is_object() {
        row(
            format!("draft block ({} drafts)", k["drafts"]),
            &k["draft"],
            &k["bound_ms"]["block"],
        )?;
        row(
            "  layers".into(),
            &k["phases"]["layers"],
            &k["bound_ms"]["drafter"],
        )?;
        row(
            "  LM head".into(),
            &k["phases"]["lm_head"],
            &k["bound_ms"]["lm_head"],
        )?;
        row("  DSpark heads".into(), &k["phases"]["heads"], &Value::Null)?;
        row(
            format!(
                "context append ({} positions)",
                k["append_context"]["positions"]
            ),
            &k["append_context"],
            &Value::Null,
        )?;
        crate::outln!(
            "draft / bound: {} (drafter target: {})",
            f(&k["draft_over_bound"]),
            k["target"].as_str().unwrap_or("?")
        )?;
        paired_line("  block paired with reads", &k["paired"])?;
    }
    let r = &d["round"];
    if r.is_object() {
        row(
            format!("target verify ({} tokens)", r["verify_tokens"]),
            &r["verify"],
            &Value::Null,
        )?;
        if r["acceptance"].is_object() {
            row(
                "rejection sampling (every row)".into(),
                &r["acceptance"],
                &Value::Null,
            )?;
        }
        crate::outln!(
            "round {} ms; break-even acceptance length {} tokens per round; at full acceptance {}x",
            f(&r["round_ms"]),
            f(&r["break_even_acceptance_length"]),
            f(&r["max_speedup"])
        )?;
    }
    Ok(())
}

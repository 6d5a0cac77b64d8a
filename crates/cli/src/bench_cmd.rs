//! `dspark bench`: how long the speculative loop's steps take on this machine, against the
//! memory-bandwidth bound of the bytes each step must read.
//!
//! Measured, each `--runs` times after two warm-up runs (median and minimum reported):
//! - the machine's memory read bandwidth (best of ten sums of a 1 GiB buffer, all threads);
//! - with `--target`: one decode step (a 1-token forward after a `--context`-token
//!   prefill) and a `--verify`-token forward, the KV cache rolled back after each run;
//! - with `--draft`: one block draft after `--context` positions of context, by phase
//!   (layers, the target's LM head, the DSpark heads), and the context append of an
//!   accepted round; without `--target` the drafter runs on a random head-only target of
//!   its vocabulary and hidden size (for drafters whose target is too large to build);
//! - with both: a speculative round (draft, verify of anchor + drafts, context append)
//!   and the break-even acceptance length, round time ÷ decode time: the tokens a round
//!   must commit on average for speculation to beat plain decoding.
//!
//! The prompt is deterministic: token i is `(37 i + 11) mod vocab`
//! (`bench/llama_cpp_qwen3.py` uses the same, so llama.cpp runs the same positions).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use dspark_gguf::GgufFile;
use dspark_quant::rng::SplitMix64;
use dspark_runtime::synth::HeadOnlyTarget;
use dspark_runtime::{Drafter, Qwen3, Target};
use rayon::prelude::*;
use serde_json::{json, Value};

use crate::mmap::map_input;
use crate::Outcome;

#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Target model (a llama.cpp qwen3 GGUF).
    #[arg(long)]
    pub target: Option<PathBuf>,
    /// Drafter (a dflash-draft GGUF).
    #[arg(long)]
    pub draft: Option<PathBuf>,
    /// Worker threads (default: all cores).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Positions before the measured step (prefill / drafter context).
    #[arg(long, default_value_t = 64)]
    pub context: usize,
    /// Tokens in the verify forward timed on its own.
    #[arg(long, default_value_t = 8)]
    pub verify: usize,
    /// Timed runs of each step (after two warm-up runs).
    #[arg(long, default_value_t = 20)]
    pub runs: usize,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Median and minimum of timed runs, in milliseconds.
fn summary(mut ms: Vec<f64>) -> Value {
    ms.sort_by(f64::total_cmp);
    let median = if ms.len() % 2 == 1 {
        ms[ms.len() / 2]
    } else {
        (ms[ms.len() / 2 - 1] + ms[ms.len() / 2]) / 2.0
    };
    json!({"median_ms": median, "min_ms": ms[0]})
}

/// Runs `f` twice untimed, then `runs` times timed; `f` returns the time it measured.
fn time_runs(runs: usize, mut f: impl FnMut() -> Result<Duration>) -> Result<Vec<f64>> {
    f()?;
    f()?;
    (0..runs)
        .map(|_| Ok(f()?.as_secs_f64() * 1e3))
        .collect::<Result<Vec<f64>>>()
}

fn median(v: &Value) -> f64 {
    v["median_ms"].as_f64().unwrap_or(f64::NAN)
}

/// Read bandwidth in bytes/s: the best of ten sums over a 1 GiB buffer (far beyond any
/// cache), split across the current rayon pool.
pub fn memory_bandwidth() -> f64 {
    const LEN: usize = 1 << 28; // f32 values: 1 GiB
    let buf: Vec<f32> = (0..LEN).map(|i| (i & 1023) as f32).collect();
    let chunk = LEN / rayon::current_num_threads().max(1) / 4;
    let mut best = f64::INFINITY;
    for _ in 0..10 {
        let t = Instant::now();
        let s: f32 = buf
            .par_chunks(chunk.max(1 << 16))
            .map(|c| {
                let mut acc = [0.0f32; 32];
                for v in c.chunks_exact(32) {
                    for (a, x) in acc.iter_mut().zip(v) {
                        *a += x;
                    }
                }
                acc.iter().sum::<f32>()
            })
            .sum();
        std::hint::black_box(s);
        best = best.min(t.elapsed().as_secs_f64());
    }
    (LEN * 4) as f64 / best
}

/// Bytes of the tensors whose names satisfy `keep`.
fn tensor_bytes(f: &GgufFile<'_>, keep: impl Fn(&str) -> bool) -> u64 {
    f.tensors()
        .filter(|t| keep(&t.info.name))
        .map(|t| t.data.len() as u64)
        .sum()
}

pub fn run(a: BenchArgs) -> Result<Outcome> {
    if a.target.is_none() && a.draft.is_none() {
        bail!("give --target, --draft or both");
    }
    if a.runs == 0 || a.verify == 0 || a.context == 0 {
        bail!("--runs, --verify and --context must be at least 1");
    }
    let threads = crate::threads(a.threads);
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build_global()
        .ok();
    let bandwidth = memory_bandwidth();
    let mut doc = json!({
        "threads": threads,
        "kernels": dspark_quant::kernels().isa,
        "memory_bandwidth_gb_s": bandwidth / 1e9,
        "context": a.context,
    });

    let tbytes = a.target.as_deref().map(map_input).transpose()?;
    let tfile = match (&tbytes, &a.target) {
        (Some(b), Some(p)) => Some(GgufFile::parse(b).with_context(|| format!("{}", p.display()))?),
        _ => None,
    };
    let dbytes = a.draft.as_deref().map(map_input).transpose()?;
    let dfile = match (&dbytes, &a.draft) {
        (Some(b), Some(p)) => Some(GgufFile::parse(b).with_context(|| format!("{}", p.display()))?),
        _ => None,
    };
    let max_context = a.context + a.verify.max(64) + 16;
    let drafter = match (&dfile, &a.draft) {
        (Some(f), Some(p)) => {
            Some(Drafter::load(f, max_context).with_context(|| format!("{}", p.display()))?)
        }
        _ => None,
    };

    // The target: the real one, or a head-only stand-in for the drafter.
    let mut qwen = match (&tfile, &a.target) {
        (Some(f), Some(p)) => {
            Some(Qwen3::load(f, max_context).with_context(|| format!("{}", p.display()))?)
        }
        _ => None,
    };
    let real_target = qwen.is_some();
    let mut head_only = None;
    if !real_target {
        let d = drafter.as_ref().expect("checked above");
        let vocab = draft_vocab(dfile.as_ref().expect("with the drafter"))?;
        head_only = Some(HeadOnlyTarget::new(vocab, d.config.hidden, 1));
    }
    let target: &mut dyn Target = match (&mut qwen, &mut head_only) {
        (Some(q), _) => q,
        (None, Some(h)) => h,
        _ => unreachable!("one of them is set"),
    };
    // (A head-only stand-in is made to fit the drafter; it has no layers to capture.)
    if let (Some(d), Some(p), true) = (&drafter, &a.draft, real_target) {
        d.check_target(&*target)
            .with_context(|| format!("{} does not fit the target", p.display()))?;
    }
    let vocab = target.vocab_size() as u64;
    let prompt: Vec<u32> = (0..(a.context + a.verify.max(64)) as u64)
        .map(|i| ((i * 37 + 11) % vocab) as u32)
        .collect();
    let capture: Vec<usize> = drafter
        .as_ref()
        .map(|d| d.config.target_layer_ids.clone())
        .unwrap_or_default();

    // Target steps.
    let mut decode_ms = None;
    let mut features = Vec::new();
    if let (Some(f), Some(p)) = (&tfile, &a.target) {
        let weights = tensor_bytes(f, |_| true);
        let pre = target.forward(&prompt[..a.context], &capture)?;
        features = pre.captured;
        let p0 = target.len();
        let mut step = |n: usize| -> Result<Vec<f64>> {
            time_runs(a.runs, || {
                let t = Instant::now();
                target.forward(&prompt[a.context..a.context + n], &capture)?;
                let dt = t.elapsed();
                target.truncate(p0);
                Ok(dt)
            })
        };
        let decode = summary(step(1)?);
        let verify = summary(step(a.verify)?);
        decode_ms = Some(median(&decode));
        doc["target"] = json!({
            "file": p.display().to_string(),
            "tensor_bytes": weights,
            "decode": decode,
            "decode_tokens_per_second": 1e3 / median(&decode),
            "decode_bound_ms": weights as f64 / bandwidth * 1e3,
            "verify": {"tokens": a.verify, "median_ms": median(&verify), "min_ms": verify["min_ms"]},
        });
    }

    // Drafter steps.
    if let (Some(mut d), Some(f), Some(p)) = (drafter, &dfile, &a.draft) {
        let width = d.config.target_layer_ids.len() * d.config.hidden;
        if features.is_empty() {
            let mut rng = SplitMix64(7);
            features = (0..a.context * width).map(|_| rng.normal()).collect();
        }
        d.add_context(&features[..a.context * width])?;
        let anchor = prompt[a.context];
        let mut phases = (Vec::new(), Vec::new(), Vec::new());
        let mut drafts = 0;
        let block = summary(time_runs(a.runs, || {
            let t = Instant::now();
            let out = d.draft(&*target, anchor)?;
            let dt = t.elapsed();
            phases.0.push(out.times.layers.as_secs_f64() * 1e3);
            phases.1.push(out.times.lm_head.as_secs_f64() * 1e3);
            phases.2.push(out.times.heads.as_secs_f64() * 1e3);
            drafts = out.tokens.len();
            Ok(dt)
        })?);
        // Drop the warm-up runs' phases.
        let (l, h, m) = (
            summary(phases.0.split_off(2)),
            summary(phases.1.split_off(2)),
            summary(phases.2.split_off(2)),
        );
        // The context append of a fully accepted round: anchor + drafts positions.
        let append_rows = drafts + 1;
        let rows = &features[..append_rows.min(a.context) * width];
        let len = d.len();
        let append = summary(time_runs(a.runs, || {
            let t = Instant::now();
            d.add_context(rows)?;
            let dt = t.elapsed();
            d.truncate(len);
            Ok(dt)
        })?);
        // Bytes one block must stream: every decoder-layer tensor, the final norm, the
        // Markov head's W2 once per draft (each step depends on the previous token), and
        // the target's LM head once.
        let layer_bytes = tensor_bytes(f, |n| n.starts_with("blk.") || n == "output_norm.weight");
        let w2 = tensor_bytes(f, |n| n == "dflash.dspark.markov.w2");
        let drafter_bytes = layer_bytes + w2 * drafts as u64;
        let head_bytes = target.vocab_size() as u64 * (target.hidden_size() as u64 / 32 * 34);
        let bound = |b: u64| b as f64 / bandwidth * 1e3;
        doc["drafter"] = json!({
            "file": p.display().to_string(),
            "block_size": d.config.block_size,
            "drafts": drafts,
            "target": if real_target { "the --target model" } else { "random head-only (Q8_0 LM head)" },
            "draft": block,
            "phases": {"layers": l, "lm_head": h, "heads": m},
            "bytes": {"layers": layer_bytes, "markov_w2_per_block": w2 * drafts as u64, "lm_head": head_bytes},
            "bound_ms": {
                "drafter": bound(drafter_bytes),
                "lm_head": bound(head_bytes),
                "block": bound(drafter_bytes + head_bytes),
            },
            "draft_over_bound": median(&block) / bound(drafter_bytes + head_bytes),
            "drafter_phases_over_bound": (median(&l) + median(&m)) / bound(drafter_bytes),
            "append_context": {"positions": append_rows, "median_ms": median(&append), "min_ms": append["min_ms"]},
        });
        if let (Some(dec), true) = (decode_ms, real_target) {
            // A round: draft, verify anchor + drafts, append the accepted positions.
            let p0 = target.len();
            let n = drafts + 1;
            let verify = summary(time_runs(a.runs, || {
                let t = Instant::now();
                target.forward(&prompt[a.context..a.context + n], &capture)?;
                let dt = t.elapsed();
                target.truncate(p0);
                Ok(dt)
            })?);
            let round = median(&block) + median(&verify) + median(&append);
            doc["round"] = json!({
                "verify_tokens": n,
                "verify": verify,
                "round_ms": round,
                "break_even_acceptance_length": round / dec,
                "max_speedup": n as f64 * dec / round,
            });
        }
    }

    if a.json {
        println!("{doc}");
    } else {
        println!("{}", serde_json::to_string_pretty(&doc)?);
    }
    Ok(Outcome::Ok)
}

/// The drafter's target vocabulary: rows of the Markov head, else `dflash-draft` keys.
fn draft_vocab(f: &GgufFile<'_>) -> Result<usize> {
    if let Ok(t) = f.tensor("dflash.dspark.markov.w2") {
        if let Some(&v) = t.info.dims.get(1) {
            return Ok(v as usize);
        }
    }
    let arch = f
        .get("general.architecture")
        .and_then(|v| v.as_str())
        .unwrap_or("dflash-draft");
    match f.get(&format!("{arch}.vocab_size")) {
        Some(dspark_gguf::Value::U32(v)) => Ok(*v as usize),
        _ => bail!("the drafter has no Markov head nor {arch}.vocab_size: give --target"),
    }
}

//! `dspark generate`: greedy decoding with a Qwen3 target, speculative with a drafter.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;
use dspark_gguf::GgufFile;
use dspark_runtime::spec::{greedy_timed, speculative_traced, Round, Stats};
use dspark_runtime::{Drafter, Qwen3};
use serde_json::json;

use crate::mmap::map_input;
use crate::Outcome;

#[derive(Args, Debug)]
pub struct GenerateArgs {
    /// Target model: a GGUF in llama.cpp's qwen3 layout.
    #[arg(long)]
    pub target: PathBuf,
    /// Drafter: a dflash-draft GGUF. Without it, plain autoregressive decoding.
    #[arg(long)]
    pub draft: Option<PathBuf>,
    /// Prompt as comma-separated token ids.
    #[arg(long, value_delimiter = ',', required = true)]
    pub prompt_tokens: Vec<u32>,
    /// Tokens to generate at most.
    #[arg(long, default_value_t = 64)]
    pub max_tokens: usize,
    /// Stop tokens (comma-separated ids); generation ends after the first one.
    #[arg(long, value_delimiter = ',')]
    pub stop: Vec<u32>,
    /// Worker threads (default: all cores).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Write one JSON line per round to this file.
    #[arg(long)]
    pub trace: Option<PathBuf>,
    /// Print one JSON object: `tokens` (generated ids) and `stats`.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: GenerateArgs) -> Result<Outcome> {
    if a.max_tokens == 0 {
        bail!("--max-tokens must be at least 1");
    }
    rayon::ThreadPoolBuilder::new()
        .num_threads(crate::threads(a.threads))
        .build_global()
        .ok();
    let tbytes = map_input(&a.target)?;
    let tfile = GgufFile::parse(&tbytes).with_context(|| format!("{}", a.target.display()))?;
    let dbytes = a.draft.as_deref().map(map_input).transpose()?;
    let dfile = match (&dbytes, &a.draft) {
        (Some(b), Some(p)) => Some(GgufFile::parse(b).with_context(|| format!("{}", p.display()))?),
        _ => None,
    };
    let context = a.prompt_tokens.len() + a.max_tokens + 64;
    let mut target =
        Qwen3::load(&tfile, context).with_context(|| format!("{}", a.target.display()))?;
    let mut trace = match &a.trace {
        Some(p) => Some(std::io::BufWriter::new(
            std::fs::File::create(p).with_context(|| format!("{}: cannot create", p.display()))?,
        )),
        None => None,
    };
    let mut trace_err = None;
    let (tokens, stats) = match &dfile {
        None => greedy_timed(&mut target, &a.prompt_tokens, a.max_tokens, &a.stop)?,
        Some(f) => {
            let draft_path = a.draft.as_deref().unwrap_or(std::path::Path::new("draft"));
            let mut drafter =
                Drafter::load(f, context).with_context(|| draft_path.display().to_string())?;
            let mut on_round = |r: &Round| {
                if let Some(w) = trace.as_mut() {
                    let line = json!({
                        "position": r.position, "anchor": r.anchor, "drafted": r.drafted,
                        "confidences": r.confidences, "verified": r.verified, "accepted": r.accepted,
                        "committed": r.committed,
                    });
                    if let Err(e) = writeln!(w, "{line}") {
                        trace_err.get_or_insert(e);
                    }
                }
            };
            speculative_traced(
                &mut target,
                &mut drafter,
                &a.prompt_tokens,
                a.max_tokens,
                &a.stop,
                &mut on_round,
            )?
        }
    };
    if let Some(w) = trace.as_mut() {
        w.flush()
            .map_err(|e| trace_err.take().unwrap_or(e))
            .context("cannot write the trace")?;
    }
    if let Some(e) = trace_err {
        return Err(e).context("cannot write the trace");
    }
    let doc = stats_json(&tokens, &stats);
    let mut out = std::io::stdout().lock();
    if a.json {
        writeln!(out, "{}", json!({"tokens": tokens, "stats": doc}))?;
    } else {
        let ids: Vec<String> = tokens.iter().map(|t| t.to_string()).collect();
        writeln!(out, "{}", ids.join(" "))?;
        writeln!(out, "{}", serde_json::to_string_pretty(&doc)?)?;
    }
    Ok(Outcome::Ok)
}

/// The `stats` object of `--json`: rounds, mean acceptance length and its histogram
/// (`acceptance_histogram[m]` = rounds that accepted m drafts), tokens/s, and the split
/// of wall time between target, drafter and the rest (bookkeeping).
fn stats_json(tokens: &[u32], s: &Stats) -> serde_json::Value {
    let total = s.total_time.as_secs_f64();
    let bookkeeping = (total - s.target_time.as_secs_f64() - s.draft_time.as_secs_f64()).max(0.0);
    json!({
        "generated": tokens.len(),
        "rounds": s.rounds,
        "mean_acceptance_length": if s.rounds > 0 { s.mean_acceptance_length() } else { 1.0 },
        "acceptance_histogram": s.accepted,
        "tokens_per_second": tokens.len() as f64 / total.max(1e-9),
        "seconds": { "total": total, "target": s.target_time.as_secs_f64(), "drafter": s.draft_time.as_secs_f64(), "bookkeeping": bookkeeping },
    })
}

//! `dspark generate`: greedy decoding with a Qwen3 target, speculative with a drafter.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use dspark_gguf::{GgufFile, Value};
use dspark_runtime::spec::{greedy_timed, speculative_traced, Round, Stats};
use dspark_runtime::{Drafter, Qwen3, Target};
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
    #[arg(
        long,
        value_delimiter = ',',
        required_unless_present = "prompt",
        conflicts_with = "prompt"
    )]
    pub prompt_tokens: Vec<u32>,
    /// Prompt as text, encoded with --tokenizer (no special tokens are added).
    #[arg(long, requires = "tokenizer")]
    pub prompt: Option<String>,
    /// A Hugging Face tokenizer.json: encodes --prompt and decodes the output to text.
    #[arg(long)]
    pub tokenizer: Option<PathBuf>,
    /// Tokens to generate at most.
    #[arg(long, default_value_t = 64)]
    pub max_tokens: usize,
    /// Stop tokens (comma-separated ids); generation ends after the first one. The target's
    /// end-of-sequence token (`tokenizer.ggml.eos_token_id`) is one unless --ignore-eos.
    #[arg(long, value_delimiter = ',')]
    pub stop: Vec<u32>,
    /// Do not stop at the target's end-of-sequence token.
    #[arg(long)]
    pub ignore_eos: bool,
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
    let tokenizer = match &a.tokenizer {
        Some(p) => Some(Tokenizer::load(p)?),
        None => None,
    };
    let prompt = match (&a.prompt, &tokenizer) {
        (Some(text), Some(tok)) => tok.encode(text)?,
        _ => a.prompt_tokens.clone(),
    };
    if prompt.is_empty() {
        bail!("the prompt is empty: generation needs at least one token");
    }
    let mut stop = a.stop.clone();
    if !a.ignore_eos {
        if let Some(Value::U32(eos)) = tfile.get("tokenizer.ggml.eos_token_id") {
            stop.push(*eos);
        }
    }
    let context = prompt.len() + a.max_tokens + 64;
    let mut target =
        Qwen3::load(&tfile, context).with_context(|| format!("{}", a.target.display()))?;
    let vocab = target.vocab_size();
    if let Some(&bad) = prompt.iter().find(|&&t| t as usize >= vocab) {
        let source = match &a.tokenizer {
            Some(p) if a.prompt.is_some() => format!(" (from {})", p.display()),
            _ => String::new(),
        };
        bail!(
            "prompt token {bad}{source} is outside the vocabulary of {} ({vocab} tokens)",
            a.target.display()
        );
    }
    let mut trace = match &a.trace {
        Some(p) => Some(std::io::BufWriter::new(
            std::fs::File::create(p).with_context(|| format!("{}: cannot create", p.display()))?,
        )),
        None => None,
    };
    let mut trace_err = None;
    let (tokens, stats) = match &dfile {
        None => greedy_timed(&mut target, &prompt, a.max_tokens, &stop)?,
        Some(f) => {
            let draft_path = a.draft.as_deref().unwrap_or(std::path::Path::new("draft"));
            let mut drafter =
                Drafter::load(f, context).with_context(|| draft_path.display().to_string())?;
            drafter.check_target(&target).with_context(|| {
                format!(
                    "{} does not fit the target {}",
                    draft_path.display(),
                    a.target.display()
                )
            })?;
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
                &prompt,
                a.max_tokens,
                &stop,
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
    let text = match &tokenizer {
        Some(t) => Some(t.decode(&tokens)?),
        None => None,
    };
    let mut out = std::io::stdout().lock();
    if a.json {
        let mut obj = json!({"tokens": tokens, "stats": doc});
        if let Some(text) = text {
            obj["prompt_tokens"] = json!(prompt);
            obj["text"] = json!(text);
        }
        writeln!(out, "{obj}")?;
    } else {
        if let Some(text) = text {
            writeln!(out, "{text}")?;
        }
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

/// A Hugging Face `tokenizer.json`, with errors that name the file.
struct Tokenizer {
    inner: tokenizers::Tokenizer,
    path: PathBuf,
}

/// Larger tokenizer files are refused before parsing (real ones are a few MB).
const MAX_TOKENIZER_BYTES: u64 = 256 << 20;

impl Tokenizer {
    fn load(path: &Path) -> Result<Tokenizer> {
        let bytes = read_capped(path, MAX_TOKENIZER_BYTES)?;
        let inner = tokenizers::Tokenizer::from_bytes(&bytes)
            .map_err(|e| anyhow!("{}: not a Hugging Face tokenizer.json: {e}", path.display()))?;
        Ok(Tokenizer {
            inner,
            path: path.to_owned(),
        })
    }

    fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let enc = self
            .inner
            .encode(text, false)
            .map_err(|e| anyhow!("{}: cannot encode the prompt: {e}", self.path.display()))?;
        Ok(enc.get_ids().to_vec())
    }

    fn decode(&self, ids: &[u32]) -> Result<String> {
        self.inner
            .decode(ids, false)
            .map_err(|e| anyhow!("{}: cannot decode the output: {e}", self.path.display()))
    }
}

/// Reads a whole regular file of at most `cap` bytes.
fn read_capped(path: &Path, cap: u64) -> Result<Vec<u8>> {
    let file =
        std::fs::File::open(path).with_context(|| format!("{}: cannot open", path.display()))?;
    let meta = file
        .metadata()
        .with_context(|| format!("{}: cannot read", path.display()))?;
    if !meta.is_file() {
        bail!("{}: not a regular file", path.display());
    }
    let mut bytes = Vec::new();
    file.take(cap + 1)
        .read_to_end(&mut bytes)
        .with_context(|| format!("{}: cannot read", path.display()))?;
    if bytes.len() as u64 > cap {
        bail!(
            "{}: larger than {} MiB; not a tokenizer.json",
            path.display(),
            cap >> 20
        );
    }
    Ok(bytes)
}

//! `dspark eval`: speculation measured over a prompt set, greedy by default or sampled
//! (`--temp` …). Every prompt runs twice on the same sessions' sizes — target-only, then
//! speculative, every draft of every block verified (so τ measures the drafter) — and the
//! figures are pooled: τ, per-position conditional acceptance, the acceptance-length
//! histogram, the confidence head's calibration, both speeds and their ratio, and, greedy,
//! whether every speculative output equals its plain output token for token (sampled
//! outputs differ; their law is the target's, which the tests check).
//!
//! Prompts are JSON lines, each an object with a string `prompt` (other fields are
//! ignored; blank lines are skipped), encoded with the target's tokenizer.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result};
use clap::Args;
use dspark_runtime::eval::Acceptance;
use dspark_runtime::generate::{
    autoregressive, fit_context, speculative, ContextAsk, Contexts, Observer, Request, Round,
};
use dspark_runtime::SessionOptions;
use serde_json::json;

use crate::load::{load_drafter, load_target, runtime_error};
use crate::{usage, Outcome, CANCEL};

/// Largest prompt file read.
const MAX_PROMPTS_BYTES: u64 = 256 << 20;

#[derive(Args, Debug)]
pub struct EvalArgs {
    /// Target model: a llama.cpp GGUF of an architecture dspark runs (`dspark inspect` says which).
    #[arg(short = 'm', long, visible_alias = "model")]
    pub target: PathBuf,
    /// Drafter: a dflash-draft or llama.cpp dflash GGUF.
    #[arg(long, visible_alias = "model-draft")]
    pub draft: PathBuf,
    /// JSON lines, one object each: a `prompt` string (used as it is), or a `messages`
    /// conversation (OpenAI-style messages, rendered with the target's chat template as
    /// `generate --chat` renders it).
    #[arg(long)]
    pub prompts: PathBuf,
    /// A Jinja chat template for `messages` lines instead of the target's own.
    #[arg(long)]
    pub chat_template_file: Option<PathBuf>,
    /// The date a chat template sees, YYYY-MM-DD (default: today).
    #[arg(long, value_parser = crate::generate_cmd::parse_date)]
    pub chat_date: Option<chrono::NaiveDate>,
    /// Tokens to generate per prompt.
    #[arg(short = 'n', long, default_value_t = 128, value_parser = clap::value_parser!(u64).range(1..=1 << 20))]
    pub max_tokens: u64,
    /// A Hugging Face tokenizer.json (default: the target GGUF's own vocabulary).
    #[arg(long)]
    pub tokenizer: Option<PathBuf>,
    /// Draft without the Markov head's bias (an ablation; the file must have the head).
    #[arg(long)]
    pub no_markov: bool,
    /// Stop at the target's end-of-sequence token (default: generate --max-tokens each).
    #[arg(long)]
    pub stop_at_eos: bool,
    /// How attention is computed (llama and qwen3 targets, Kimi K3's MLA layers): `f16` (the default, as llama.cpp's CPU
    /// flash attention) or `f32` (see `generate --help`).
    #[arg(long, default_value = "f16", value_parser = crate::generate_cmd::parse_attention)]
    pub attention: dspark_runtime::Attention,
    /// Sampling (greedy by default); prompt i (from 0) samples with seed `--seed` + i.
    #[command(flatten)]
    pub sampling: crate::SamplingArgs,
    /// Worker threads (default: all cores).
    #[arg(short = 't', long, value_parser = crate::parse_threads)]
    pub threads: Option<usize>,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// Collects a speculative run's rounds into the prompt's figures and the pooled ones;
/// stops on Ctrl-C.
struct Rounds<'a> {
    all: &'a mut Acceptance,
    mine: Acceptance,
}

impl Observer for Rounds<'_> {
    fn round(&mut self, r: &Round) {
        self.all.add(r);
        self.mine.add(r);
    }
    fn interrupted(&self) -> bool {
        CANCEL.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// Stops on Ctrl-C.
struct Plain;

impl Observer for Plain {
    fn interrupted(&self) -> bool {
        CANCEL.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// One prompt of an eval file.
enum Prompt {
    /// Text, encoded as it is.
    Text(String),
    /// A conversation, rendered with the chat template.
    Messages(serde_json::Value),
}

/// The prompts of `path`: each non-blank line a JSON object with a string `prompt` or a
/// `messages` array.
fn read_prompts(path: &Path) -> Result<Vec<Prompt>> {
    let bytes = dspark_runtime::tokenizer::read_capped(path, MAX_PROMPTS_BYTES + 1)
        .map_err(anyhow::Error::new)?;
    if bytes.len() as u64 > MAX_PROMPTS_BYTES {
        usage!(
            "{}: a prompt file holds at most {} MiB",
            path.display(),
            MAX_PROMPTS_BYTES >> 20
        );
    }
    let text = String::from_utf8(bytes).map_err(|e| {
        anyhow::anyhow!(
            "{}: not UTF-8 (byte {})",
            path.display(),
            e.utf8_error().valid_up_to()
        )
    })?;
    let mut prompts = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let v: serde_json::Value = serde_json::from_str(line)
            .with_context(|| format!("{}: line {}: not JSON", path.display(), i + 1))?;
        match (v.get("prompt"), v.get("messages")) {
            (Some(serde_json::Value::String(p)), None) if !p.is_empty() => {
                prompts.push(Prompt::Text(p.clone()))
            }
            (None, Some(m)) => {
                dspark_runtime::chat::check_messages(m).map_err(|e| {
                    anyhow::anyhow!("{}: line {}: {e}", path.display(), i + 1)
                })?;
                prompts.push(Prompt::Messages(m.clone()))
            }
            _ => anyhow::bail!(
                "{}: line {}: expected an object with a non-empty string `prompt` or a `messages` array",
                path.display(),
                i + 1
            ),
        }
    }
    if prompts.is_empty() {
        usage!("{}: no prompts", path.display());
    }
    Ok(prompts)
}

pub fn run(a: EvalArgs) -> Result<Outcome> {
    let threads = crate::start_threads(a.threads);
    let prompts = read_prompts(&a.prompts)?;
    let target = load_target(&a.target, a.tokenizer.as_deref())?;
    let tokenizer = crate::load::require_tokenizer(
        &target,
        &a.target,
        "eval encodes its prompts with a tokenizer",
        "give --tokenizer tokenizer.json",
    )?;
    let renderer = if prompts.iter().any(|p| matches!(p, Prompt::Messages(_))) {
        Some(crate::chat::Renderer::for_target(
            &target,
            &a.target,
            a.chat_template_file.as_deref(),
            a.chat_date,
        )?)
    } else {
        None
    };
    let model = &target.model;
    let drafter = load_drafter(&a.draft, &**model, &a.target.display().to_string())?;
    if a.no_markov && !drafter.has_markov() {
        usage!("--no-markov: {} has no Markov head", a.draft.display());
    }
    let contexts = Contexts {
        target: model.context(),
        drafter: drafter.hparams().context,
    };
    let max_tokens = usize::try_from(a.max_tokens).unwrap_or(usize::MAX);
    let eos = if a.stop_at_eos {
        model.special_tokens().eos
    } else {
        None
    };
    let drafts = drafter.drafts_per_block();
    let greedy = a.sampling.settings(a.sampling.seed).is_greedy();

    let mut acceptance = Acceptance::default();
    let (mut ar_tokens, mut ar_seconds, mut sp_tokens, mut sp_seconds) = (0usize, 0.0, 0usize, 0.0);
    let mut identical = 0usize;
    let mut per_prompt = Vec::new();
    let started = Instant::now();
    for (i, p) in prompts.iter().enumerate() {
        let prompt = match (p, &renderer) {
            (Prompt::Text(text), _) => tokenizer.encode(text),
            // A conversation is tokenized as llama-server tokenizes its rendering.
            (Prompt::Messages(m), Some(r)) => tokenizer.encode_with(&r.render(m)?, true, true),
            (Prompt::Messages(_), None) => unreachable!("a renderer is made for messages"),
        }
        .map_err(anyhow::Error::new)?;
        if prompt.is_empty() {
            usage!(
                "{}: prompt {} encodes to no tokens",
                a.prompts.display(),
                i + 1
            );
        }
        // Each prompt's output stops at the context (eval measures; it does not refuse).
        let ask = ContextAsk {
            prompt: prompt.len(),
            max_tokens,
            context: None,
            stop_at_context: true,
        };
        let context = match fit_context(contexts, &ask) {
            Ok(c) => c,
            Err(e) => usage!("{}: prompt {}: {e}", a.prompts.display(), i + 1),
        };
        let req = Request {
            prompt: &prompt,
            max_tokens,
            context,
            stop: &[],
            eos,
            sampling: a.sampling.settings(a.sampling.seed.wrapping_add(i as u64)),
        };
        let positions = req.positions(drafts).min(context);
        let options = SessionOptions {
            positions,
            undo: drafts + 1,
            attention: a.attention,
        };
        let mut session = Arc::clone(model)
            .session(&options)
            .map_err(|e| runtime_error(&a.target, e))?;
        let t = Instant::now();
        let ar = crate::on_pool(|| autoregressive(&mut *session, &req, &mut Plain))
            .map_err(|e| runtime_error(&a.target, e))?;
        let ar_s = t.elapsed().as_secs_f64();
        if CANCEL.load(std::sync::atomic::Ordering::SeqCst) {
            break;
        }
        let mut session = Arc::clone(model)
            .session(&options)
            .map_err(|e| runtime_error(&a.target, e))?;
        let mut ds = drafter
            .session(positions)
            .map_err(|e| runtime_error(&a.draft, e))?;
        ds.set_markov_bias(!a.no_markov);
        let mut rounds = Rounds {
            all: &mut acceptance,
            mine: Acceptance::default(),
        };
        let t = Instant::now();
        let sp = crate::on_pool(|| speculative(&mut *session, &mut ds, &req, &mut rounds))
            .map_err(|e| runtime_error(&a.target, e))?;
        let sp_s = t.elapsed().as_secs_f64();
        if CANCEL.load(std::sync::atomic::Ordering::SeqCst) {
            break;
        }
        // Sampled runs are compared by their law (the tests), not token by token.
        let same = sp.tokens == ar.tokens;
        identical += usize::from(same);
        ar_tokens += ar.tokens.len();
        ar_seconds += ar_s;
        sp_tokens += sp.tokens.len();
        sp_seconds += sp_s;
        per_prompt.push(json!({
            "prompt_tokens": prompt.len(),
            "generated": sp.tokens.len(),
            "mean_acceptance_length": rounds.mine.mean_acceptance_length(),
            "identical_to_ar": if greedy { json!(same) } else { json!(null) },
        }));
    }
    let done = per_prompt.len();
    let interrupted = done < prompts.len();
    let per = |n: usize, s: f64| if s > 0.0 { n as f64 / s } else { 0.0 };
    let (ar_tps, sp_tps) = (per(ar_tokens, ar_seconds), per(sp_tokens, sp_seconds));
    let calibration = acceptance.calibration();
    let doc = json!({
        "target": a.target.display().to_string(),
        "draft": a.draft.display().to_string(),
        "threads": threads,
        "markov": !a.no_markov && drafter.has_markov(),
        "prompts": done,
        "max_tokens": max_tokens,
        "rounds": acceptance.rounds(),
        "mean_acceptance_length": acceptance.mean_acceptance_length(),
        "acceptance_per_position": acceptance.per_position(),
        "acceptance_histogram": acceptance.histogram(),
        "calibration": calibration,
        "ar_tokens_per_second": ar_tps,
        "spec_tokens_per_second": sp_tps,
        "speedup": if ar_tps > 0.0 { sp_tps / ar_tps } else { 0.0 },
        "sampling": a.sampling.json(),
        "identical_to_ar": if greedy { json!(identical == done) } else { json!(null) },
        "identical_prompts": if greedy { json!(identical) } else { json!(null) },
        "seconds": started.elapsed().as_secs_f64(),
        "per_prompt": per_prompt,
        "interrupted": interrupted,
    });
    let mut out = std::io::stdout().lock();
    if a.json {
        writeln!(out, "{doc}")?;
    } else {
        print_table(&mut out, &doc)?;
    }
    if interrupted {
        crate::diag!(
            "dspark: interrupted after {done} of {} prompts; the figures above cover those",
            prompts.len()
        );
        return Ok(Outcome::Interrupted);
    }
    Ok(if !greedy || identical == done {
        Outcome::Ok
    } else {
        crate::diag!(
            "dspark: speculative output differs from plain decoding on {} of {done} prompts",
            done - identical
        );
        Outcome::Mismatch
    })
}

fn print_table(out: &mut impl Write, d: &serde_json::Value) -> Result<()> {
    let f = |k: &str| d[k].as_f64().unwrap_or(0.0);
    writeln!(
        out,
        "{} prompts, {} rounds, {} threads, Markov head {}",
        d["prompts"],
        d["rounds"],
        d["threads"],
        if d["markov"].as_bool() == Some(true) {
            "on"
        } else {
            "off"
        }
    )?;
    writeln!(
        out,
        "mean acceptance length (tau, bonus included): {:.3}",
        f("mean_acceptance_length")
    )?;
    writeln!(out, "position  reached  accepted  rate   predicted")?;
    let cal = d["calibration"]["per_position"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for p in d["acceptance_per_position"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let i = p["position"].as_u64().unwrap_or(0) as usize;
        let pred = cal
            .get(i)
            .and_then(|c| c["mean_predicted"].as_f64())
            .map_or("-".to_string(), |v| format!("{v:.3}"));
        writeln!(
            out,
            "{:>8}  {:>7}  {:>8}  {:.3}  {pred:>9}",
            i + 1,
            p["reached"].as_u64().unwrap_or(0),
            p["accepted"].as_u64().unwrap_or(0),
            p["rate"].as_f64().unwrap_or(0.0)
        )?;
    }
    writeln!(
        out,
        "acceptance histogram (drafts accepted: rounds): {}",
        d["acceptance_histogram"]
    )?;
    if let Some(e) = d["calibration"]["ece"].as_f64() {
        writeln!(
            out,
            "confidence ECE ({} bins): {e:.4}",
            dspark_runtime::eval::ECE_BINS
        )?;
    }
    let same = if d["identical_to_ar"].is_null() {
        "not compared (sampled)".to_string()
    } else {
        format!(
            "{} ({} of {})",
            d["identical_to_ar"], d["identical_prompts"], d["prompts"]
        )
    };
    writeln!(
        out,
        "AR {:.1} tokens/s, speculative {:.1} tokens/s ({:.2}x); speculative output identical to AR: {same}",
        f("ar_tokens_per_second"),
        f("spec_tokens_per_second"),
        f("speedup"),
    )?;
    Ok(())
}

//! `dspark generate`: decoding with a target (greedy, or sampled with llama.cpp's
//! `--temp`, `--top-k`, `--top-p`, `--min-p`, `--seed`), speculative with a drafter.
//!
//! Text (or ids, without a tokenizer) streams to stdout as tokens are committed;
//! statistics go to stderr, or with `--json` everything goes to stdout as one object.
//! Ctrl-C or SIGTERM stops within one step: what was generated is printed, with the
//! statistics, and the exit code is 130.

use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use anyhow::{Context, Result};
use clap::Args;
use dspark_output::{check_output, AtomicFile};
use dspark_runtime::generate::{
    autoregressive, fit_context, speculative_with, ContextAsk, Contexts, Observer, PlainStep, Plan,
    Request, Round, Stats, StopReason,
};
use dspark_runtime::schedule::Schedule;
use dspark_runtime::tokenizer::{TextStream, Tokenizer};
use dspark_runtime::{Attention, Rollback};
use serde_json::json;

use crate::load::{load_drafter, load_target, runtime_error};
use crate::{usage, Outcome, CANCEL};

/// Largest prompt file read (`-f`).
const MAX_PROMPT_BYTES: u64 = 64 << 20;

#[derive(Args, Debug)]
#[command(group(clap::ArgGroup::new("input").required(true).args(["prompt_tokens", "prompt", "prompt_file", "messages"])))]
pub struct GenerateArgs {
    /// Target model: a llama.cpp GGUF of an architecture dspark runs (`dspark inspect` says which).
    #[arg(short = 'm', long, visible_alias = "model")]
    pub target: PathBuf,
    /// Drafter: a dflash-draft GGUF (llama.cpp spelling: -md). Without it, plain decoding.
    #[arg(long, visible_alias = "model-draft")]
    pub draft: Option<PathBuf>,
    /// Prompt as comma-separated token ids.
    #[arg(long, value_delimiter = ',')]
    pub prompt_tokens: Vec<u32>,
    /// Prompt as text (encoded with the tokenizer; no special tokens are added, except with
    /// --chat, which tokenizes the rendering as llama-server does).
    #[arg(short = 'p', long)]
    pub prompt: Option<String>,
    /// Prompt as the text of a file (`-` reads stdin).
    #[arg(short = 'f', long, visible_alias = "file")]
    pub prompt_file: Option<PathBuf>,
    /// Render the prompt as a conversation with the target's chat template
    /// (`tokenizer.chat_template`, or --chat-template-file): -p / -f text becomes the user
    /// message (after --system), and the rendering ends with the assistant's opening.
    #[arg(long)]
    pub chat: bool,
    /// With --chat: a system message before the user's.
    #[arg(long, requires = "chat")]
    pub system: Option<String>,
    /// A conversation to render with the chat template (implies --chat): a JSON array of
    /// OpenAI-style messages (`{"role": ..., "content": ...}`), or an object holding one
    /// under `messages`.
    #[arg(long)]
    pub messages: Option<PathBuf>,
    /// A Jinja chat template to use instead of the target's own.
    #[arg(long)]
    pub chat_template_file: Option<PathBuf>,
    /// The date a chat template sees (`date_string`, `strftime_now`), as YYYY-MM-DD
    /// (default: today, as llama-server renders): for a reproducible rendering.
    #[arg(long, value_parser = parse_date)]
    pub chat_date: Option<chrono::NaiveDate>,
    /// A Hugging Face tokenizer.json (default: the target GGUF's own tokenizer.ggml keys).
    #[arg(long)]
    pub tokenizer: Option<PathBuf>,
    /// Tokens to generate at most.
    #[arg(short = 'n', long, visible_alias = "n-predict", default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_tokens: u64,
    /// Tokens the prompt and the output may hold together (default: the target's context).
    #[arg(short = 'c', long, visible_alias = "ctx-size", value_parser = clap::value_parser!(u64).range(1..))]
    pub context: Option<u64>,
    /// When the prompt and --max-tokens exceed the context, stop at the context instead of
    /// refusing the request.
    #[arg(long)]
    pub stop_at_context: bool,
    /// Stop tokens (comma-separated ids); generation ends after the first one. The target's
    /// end-of-sequence token (`tokenizer.ggml.eos_token_id`) is one unless --ignore-eos.
    #[arg(long, value_delimiter = ',')]
    pub stop: Vec<u32>,
    /// Do not stop at the target's end-of-sequence token.
    #[arg(long)]
    pub ignore_eos: bool,
    #[command(flatten)]
    pub spec: SpecArgs,
    /// How attention is computed (targets that follow llama.cpp's flash attention: llama,
    /// qwen3, and Kimi K3's MLA layers; others compute in f32): `f16` (the default) as llama.cpp's CPU
    /// flash attention does by default (keys, values, queries and the value accumulator
    /// in F16), so greedy tokens follow llama.cpp's default runs; `f32` in f32 throughout
    /// (closer to exact; follows `llama.cpp -fa off` with an F32 cache).
    #[arg(long, default_value = "f16", value_parser = parse_attention)]
    pub attention: Attention,
    #[command(flatten)]
    pub sampling: crate::SamplingArgs,
    /// Worker threads (default: all cores).
    #[arg(short = 't', long, value_parser = crate::parse_threads)]
    pub threads: Option<usize>,
    /// Write one JSON line per speculative round to this file (new unless --force).
    #[arg(long)]
    pub trace: Option<PathBuf>,
    /// Write the target's logits of every position of the prompt and the output to this file
    /// (new unless --force), evaluated again after the run as one batch in prompt order, as
    /// llama.cpp evaluates token ids: one JSON line per position, `{"position", "token",
    /// "logits"}` (the row after that token), for comparisons with other implementations.
    #[arg(long)]
    pub logits: Option<PathBuf>,
    /// Replace an existing --trace or --logits file.
    #[arg(long)]
    pub force: bool,
    /// Print one JSON object to stdout: `tokens`, `prompt_tokens`, `text` (with a
    /// tokenizer; with --chat, the reply without the end-of-turn token's text, which
    /// `tokens` keeps), `chat_prompt` (the rendered conversation, with --chat) and `stats`
    /// (see `dspark_runtime::generate::Stats`).
    #[arg(long)]
    pub json: bool,
}

/// How a speculative run verifies its drafts (`generate`'s and `chat`'s flags).
#[derive(Args, Debug)]
pub struct SpecArgs {
    /// How many drafts each round verifies: `adaptive` chooses per round from the
    /// acceptance and the forward times measured in the run; `fixed` verifies every draft
    /// (up to --draft-max). Greedy output is the same either way; sampled output has the
    /// same law either way, and for a seed the same tokens with `fixed` (adaptive choices
    /// follow the measured times).
    #[arg(long, default_value = "adaptive", value_parser = parse_schedule)]
    pub schedule: Schedule,
    /// The most drafts a round verifies (default: the drafter's block).
    #[arg(long, visible_alias = "spec-draft-n-max", value_parser = clap::value_parser!(u64).range(1..))]
    pub draft_max: Option<u64>,
    /// How a recurrent target (Kimi K3's KDA layers) undoes rejected drafts: `snapshots`
    /// keeps the state after every verified position (memory: one state per position of a
    /// round), `replay` keeps one state and replays the recurrence of the accepted ones,
    /// `auto` measures both and picks the cheaper per round. Output is the same either
    /// way; attention-only targets ignore it.
    #[arg(long, default_value = "auto", value_parser = parse_rollback)]
    pub rollback: RollbackChoice,
}

impl SpecArgs {
    /// Refuses `--draft-max` without a drafter (a usage error).
    pub fn check(&self, has_draft: bool) -> Result<()> {
        if self.draft_max.is_some() && !has_draft {
            usage!("--draft-max limits the drafts a speculative round verifies: it needs --draft");
        }
        Ok(())
    }

    /// The plan for a drafter of `drafts` drafts per block (0 without one), warning when
    /// `--draft-max` is above them.
    pub fn plan(&self, drafts: usize) -> Plan {
        if let Some(cap) = self.draft_max.filter(|&c| drafts > 0 && c > drafts as u64) {
            crate::diag!(
                "dspark: warning: --draft-max {cap} is above the drafter's {drafts} drafts per block; a round verifies at most {drafts}"
            );
        }
        Plan {
            schedule: self.schedule,
            rollback: self.rollback.0,
            draft_max: self
                .draft_max
                .map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
        }
    }
}

/// `--rollback`: a fixed option, or `None` for the planner's choice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RollbackChoice(pub Option<Rollback>);

pub(crate) fn parse_attention(s: &str) -> Result<Attention, String> {
    match s {
        "f32" => Ok(Attention::F32),
        "f16" => Ok(Attention::F16),
        _ => Err(format!("`{s}`: expected f32 or f16")),
    }
}

pub(crate) fn parse_rollback(s: &str) -> Result<RollbackChoice, String> {
    match s {
        "auto" => Ok(RollbackChoice(None)),
        "snapshots" => Ok(RollbackChoice(Some(Rollback::Snapshots))),
        "replay" => Ok(RollbackChoice(Some(Rollback::Replay))),
        _ => Err(format!("`{s}`: expected auto, snapshots or replay")),
    }
}

pub(crate) fn parse_date(s: &str) -> Result<chrono::NaiveDate, String> {
    chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d")
        .map_err(|e| format!("`{s}`: not a YYYY-MM-DD date ({e})"))
}

pub(crate) fn parse_schedule(s: &str) -> Result<Schedule, String> {
    Schedule::parse(s).ok_or_else(|| format!("`{s}` is not one of adaptive, fixed"))
}

/// Streams committed tokens to stdout and rounds to the trace.
struct Printer<'t> {
    stream: Option<TextStream<'t>>,
    /// A token whose text is not printed (a chat's end of turn).
    silent: Option<u32>,
    stdout: Option<std::io::Stdout>,
    ids: usize,
    trace: Option<BufWriter<&'t std::fs::File>>,
    error: Option<std::io::Error>,
}

impl Printer<'_> {
    fn write(&mut self, bytes: &[u8]) {
        if self.error.is_some() {
            return;
        }
        if let Some(out) = self.stdout.as_mut() {
            if let Err(e) = out.write_all(bytes).and_then(|()| out.flush()) {
                self.error = Some(e);
            }
        }
    }

    fn trace_line(&mut self, line: &str) {
        if let (Some(w), None) = (self.trace.as_mut(), &self.error) {
            if let Err(e) = writeln!(w, "{line}") {
                self.error = Some(e);
            }
        }
    }
}

impl Observer for Printer<'_> {
    fn tokens(&mut self, tokens: &[u32]) {
        if self.stdout.is_none() {
            return;
        }
        let mut bytes = Vec::new();
        for &t in tokens {
            if self.stream.is_some() && Some(t) == self.silent {
                continue;
            }
            match self.stream.as_mut() {
                Some(s) => match s.push(t) {
                    Ok(b) => bytes.extend(b),
                    Err(e) => {
                        self.error
                            .get_or_insert(std::io::Error::other(e.to_string()));
                    }
                },
                None => {
                    if self.ids > 0 {
                        bytes.push(b' ');
                    }
                    bytes.extend(t.to_string().as_bytes());
                }
            }
            self.ids += 1;
        }
        self.write(&bytes);
    }

    fn round(&mut self, r: &Round) {
        if self.trace.is_some() {
            self.trace_line(&serde_json::to_string(r).expect("a round serializes"));
        }
    }

    fn plain_step(&mut self, p: &PlainStep) {
        if self.trace.is_some() {
            self.trace_line(&serde_json::to_string(p).expect("a plain step serializes"));
        }
    }

    fn interrupted(&self) -> bool {
        CANCEL.load(Ordering::SeqCst) || self.error.is_some()
    }

    fn wants_probabilities(&self) -> bool {
        self.trace.is_some()
    }
}

/// Runs `f` on its own thread and waits for it, unless Ctrl-C comes first (then `None`:
/// the thread is left to the process's exit). For work that cannot poll the flag itself:
/// reading a prompt from a pipe that may never close, tokenizing a large one.
pub(crate) fn interruptible<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Option<T> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    loop {
        match rx.recv_timeout(std::time::Duration::from_millis(20)) {
            // An interrupt that came while the work finished still wins (a pipe closed by
            // the same Ctrl-C gives an empty prompt, not a usage error).
            Ok(_) if CANCEL.load(Ordering::SeqCst) => return None,
            Ok(v) => return Some(v),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                if CANCEL.load(Ordering::SeqCst) {
                    return None;
                }
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return None,
        }
    }
}

/// The prompt's text from `-p` or `-f` (`-` = stdin), if given as text; `Err(None)` when
/// interrupted while reading.
fn prompt_text(a: &GenerateArgs) -> Result<Option<String>, Option<anyhow::Error>> {
    if let Some(p) = &a.prompt {
        return Ok(Some(p.clone()));
    }
    let Some(path) = a.prompt_file.clone() else {
        return Ok(None);
    };
    let stdin = path == Path::new("-");
    let name = if stdin {
        "stdin".to_string()
    } else {
        path.display().to_string()
    };
    let read = interruptible(move || -> Result<Vec<u8>> {
        if stdin {
            let mut b = Vec::new();
            std::io::stdin()
                .lock()
                .take(MAX_PROMPT_BYTES + 1)
                .read_to_end(&mut b)
                .context("cannot read the prompt from stdin")?;
            Ok(b)
        } else {
            dspark_runtime::tokenizer::read_capped(&path, MAX_PROMPT_BYTES + 1)
                .map_err(anyhow::Error::new)
        }
    });
    let bytes = read.ok_or(None)?.map_err(Some)?;
    if bytes.len() as u64 > MAX_PROMPT_BYTES {
        return Err(Some(anyhow::Error::new(crate::Usage(format!(
            "{name}: a prompt file holds at most {} MiB",
            MAX_PROMPT_BYTES >> 20
        )))));
    }
    String::from_utf8(bytes).map(Some).map_err(|e| {
        Some(anyhow::anyhow!(
            "{name}: the prompt is not UTF-8 text (byte {})",
            e.utf8_error().valid_up_to()
        ))
    })
}

/// The conversation of `--chat` / `--messages` rendered with the chat template: the
/// messages file, else `--system` and the user's `text`; the template file, else the
/// target's own; the vocabulary's BOS / EOS texts as `bos_token` / `eos_token`.
fn render_chat(
    a: &GenerateArgs,
    target: &dspark_runtime::OpenedTarget,
    text: Option<&str>,
) -> Result<String> {
    let messages = match &a.messages {
        Some(path) => {
            let bytes = dspark_runtime::tokenizer::read_capped(path, MAX_PROMPT_BYTES + 1)
                .map_err(anyhow::Error::new)?;
            if bytes.len() as u64 > MAX_PROMPT_BYTES {
                usage!(
                    "{}: a messages file holds at most {} MiB",
                    path.display(),
                    MAX_PROMPT_BYTES >> 20
                );
            }
            let v: serde_json::Value = serde_json::from_slice(&bytes)
                .with_context(|| format!("{}: not JSON", path.display()))?;
            match v {
                serde_json::Value::Object(mut o) if o.contains_key("messages") => {
                    o.remove("messages").expect("checked above")
                }
                other => other,
            }
        }
        None => {
            let Some(user) = text else {
                usage!("--chat needs the user message as -p or -f, or a --messages file");
            };
            let mut m = Vec::new();
            if let Some(sys) = &a.system {
                m.push(json!({"role": "system", "content": sys}));
            }
            m.push(json!({"role": "user", "content": user}));
            serde_json::Value::Array(m)
        }
    };
    crate::chat::Renderer::for_target(
        target,
        &a.target,
        a.chat_template_file.as_deref(),
        a.chat_date,
    )?
    .render(&messages)
}

pub fn run(a: GenerateArgs) -> Result<Outcome> {
    // 1. Outputs against inputs, before anything is read.
    let mut inputs: Vec<&Path> = vec![&a.target];
    inputs.extend(a.draft.as_deref());
    inputs.extend(a.tokenizer.as_deref());
    inputs.extend(a.prompt_file.as_deref().filter(|p| *p != Path::new("-")));
    inputs.extend(a.messages.as_deref());
    inputs.extend(a.chat_template_file.as_deref());
    let chat = a.chat || a.messages.is_some();
    if (a.chat_template_file.is_some() || a.chat_date.is_some()) && !chat {
        usage!("--chat-template-file and --chat-date render a conversation: they need --chat or --messages");
    }
    if chat && !a.prompt_tokens.is_empty() {
        usage!("--chat renders text: give the user message with -p or -f (or --messages), not --prompt-tokens");
    }
    a.spec.check(a.draft.is_some())?;
    if let Some(t) = &a.trace {
        if a.draft.is_none() {
            usage!("--trace records speculative rounds: it needs --draft");
        }
        check_output(t, &inputs, a.force)?;
    }
    if let Some(l) = &a.logits {
        if a.trace.as_deref() == Some(l.as_path()) {
            usage!("--logits and --trace name the same file");
        }
        check_output(l, &inputs, a.force)?;
    }
    crate::start_threads(a.threads);

    // 2. Models and tokenizer, each checked by its contract.
    let target = load_target(&a.target, a.tokenizer.as_deref())?;
    let model = &target.model;
    let model_vocab = model.shape().vocab;
    let text = match prompt_text(&a) {
        Ok(t) => t,
        Err(Some(e)) => return Err(e),
        Err(None) => {
            crate::diag!("dspark: interrupted before generation started");
            return Ok(Outcome::Interrupted);
        }
    };
    let chat_prompt = if chat {
        Some(render_chat(&a, &target, text.as_deref())?)
    } else {
        None
    };
    let text = chat_prompt.clone().or(text);
    let tokenizer = match (&target.tokenizer, &target.tokenizer_problem, &text) {
        (Some(t), _, _) => Some(t.clone()),
        (None, Some(problem), Some(_)) => {
            anyhow::bail!("{problem}; a text prompt needs a tokenizer")
        }
        (None, None, Some(_)) => usage!(
            "{} carries no tokenizer: give --tokenizer tokenizer.json, or the prompt as --prompt-tokens",
            a.target.display()
        ),
        (None, problem, None) => {
            if let Some(p) = problem {
                crate::diag!("dspark: {p}; printing token ids");
            }
            None
        }
    };
    let prompt = match (text.clone(), tokenizer.clone()) {
        // A rendered conversation is tokenized as llama-server tokenizes it: with the
        // vocabulary's BOS/EOS rule (the BOS text was taken off the rendering for it).
        (Some(t), Some(tok)) => match interruptible(move || tok.encode_with(&t, chat, true)) {
            Some(ids) => ids.map_err(anyhow::Error::new)?,
            None => {
                crate::diag!("dspark: interrupted before generation started");
                return Ok(Outcome::Interrupted);
            }
        },
        _ => a.prompt_tokens.clone(),
    };
    if prompt.is_empty() {
        usage!("the prompt is empty: generation needs at least one token");
    }
    if let Some(&bad) = prompt.iter().find(|&&t| t as usize >= model_vocab) {
        let from = if text.is_some() {
            " (from the tokenizer)"
        } else {
            ""
        };
        usage!(
            "prompt token {bad}{from} is outside the vocabulary of {} ({} tokens)",
            a.target.display(),
            model_vocab
        );
    }
    if let Some(&bad) = a.stop.iter().find(|&&t| t as usize >= model_vocab) {
        usage!(
            "--stop token {bad} is outside the vocabulary of {} ({} tokens)",
            a.target.display(),
            model_vocab
        );
    }
    let drafter = match &a.draft {
        Some(p) => Some(load_drafter(p, &**model, &a.target.display().to_string())?),
        None => None,
    };

    // 3. The request, within the context (the target's, and the drafter's when it records
    //    one): refused before any work, or clipped when asked.
    let max_tokens = usize::try_from(a.max_tokens).unwrap_or(usize::MAX);
    let context = fit_context(
        Contexts {
            target: model.context(),
            drafter: drafter.as_ref().and_then(|d| d.hparams().context),
        },
        &ContextAsk {
            prompt: prompt.len(),
            max_tokens,
            context: a.context.map(|c| usize::try_from(c).unwrap_or(usize::MAX)),
            stop_at_context: a.stop_at_context,
        },
    )
    .map_err(|e| {
        crate::Usage(format!(
            "{e} (--context, --max-tokens; --stop-at-context stops when the context is full)"
        ))
    })?;
    let eos = if a.ignore_eos {
        None
    } else {
        model.special_tokens().eos
    };
    let req = Request {
        prompt: &prompt,
        max_tokens,
        context,
        stop: &a.stop,
        eos,
        sampling: a.sampling.settings(a.sampling.seed),
    };
    let drafts = drafter.as_ref().map_or(0, |d| d.drafts_per_block());
    let plan = a.spec.plan(drafts);
    let positions = req.positions(drafts).min(context);
    let (mut session, mut draft_session) = crate::load::open_sessions(
        model,
        &a.target,
        drafter.as_ref().zip(a.draft.as_deref()),
        positions,
        a.attention,
    )?;

    // 4. Run, streaming.
    let trace_file = match &a.trace {
        Some(p) => Some(AtomicFile::create(p)?),
        None => None,
    };
    let mut printer = Printer {
        stream: tokenizer
            .as_deref()
            .filter(|_| !a.json)
            .map(Tokenizer::stream),
        silent: eos.filter(|_| chat),
        stdout: (!a.json).then(std::io::stdout),
        ids: 0,
        trace: trace_file.as_ref().map(|f| BufWriter::new(f.file())),
        error: None,
    };
    let result = crate::on_pool(|| match draft_session.as_mut() {
        None => autoregressive(&mut *session, &req, &mut printer),
        Some(d) => speculative_with(&mut *session, d, &req, plan, &mut printer),
    });
    if !a.json {
        printer.write(b"\n");
    }
    let trace_flush = printer.trace.take().map(|mut w| w.flush());
    let print_error = printer.error.take();
    drop(printer);
    // The trace keeps whatever rounds ran, even when the run failed or was interrupted.
    if let (Some(f), Some(flushed)) = (trace_file, trace_flush) {
        flushed.context("cannot write the trace")?;
        f.commit()?;
    }
    if let Some(e) = print_error {
        return Err(e).context("cannot write the output");
    }
    let outcome = result.map_err(|e| runtime_error(&a.target, e))?;
    if let Some(path) = &a.logits {
        let all: Vec<u32> = prompt.iter().chain(&outcome.tokens).copied().collect();
        let file = AtomicFile::create(path)?;
        crate::on_pool(|| write_logits(model, &all, a.attention, file.file()))
            .map_err(|e| runtime_error(&a.target, e))
            .and_then(|w| w.context("cannot write the logits"))?;
        file.commit()?;
    }

    // 5. Statistics.
    let stats = &outcome.stats;
    if a.json {
        let mut doc = json!({
            "tokens": outcome.tokens,
            "prompt_tokens": prompt,
            "sampling": a.sampling.json(),
            "stats": stats,
        });
        if let Some(t) = &tokenizer {
            // A chat's reply, as `chat` and `serve` give it: without the end-of-turn text
            // (the token stays in `tokens`).
            let reply = match outcome.tokens.split_last() {
                Some((&last, body)) if chat && Some(last) == eos => body,
                _ => &outcome.tokens[..],
            };
            doc["text"] = json!(t.decode(reply).map_err(anyhow::Error::new)?);
        }
        if let Some(c) = &chat_prompt {
            doc["chat_prompt"] = json!(c);
        }
        let mut out = std::io::stdout().lock();
        writeln!(out, "{doc}")?;
    } else {
        print_stats(stats);
    }
    Ok(if stats.stop_reason == StopReason::Interrupted {
        crate::diag!("dspark: interrupted");
        Outcome::Interrupted
    } else {
        Outcome::Ok
    })
}

/// The target's logits of every position of `tokens`, evaluated in one fresh session in
/// chunks of [`dspark_runtime::generate::PREFILL_CHUNK`] positions in prompt order, each
/// chunk's rows written before the next is evaluated (memory: one chunk's rows), one JSON
/// line per position. The outer error is the model's, the inner the file's.
fn write_logits(
    model: &std::sync::Arc<dyn dspark_runtime::TargetModel>,
    tokens: &[u32],
    attention: Attention,
    file: &std::fs::File,
) -> dspark_runtime::Result<std::io::Result<()>> {
    use dspark_runtime::{Logits, SessionOptions};
    let chunk = tokens.len().min(dspark_runtime::generate::PREFILL_CHUNK);
    let mut session = std::sync::Arc::clone(model).session(&SessionOptions {
        positions: tokens.len(),
        undo: 0,
        attention,
    })?;
    dspark_runtime::memory::check_fits(
        session.step_bytes(chunk, Logits::All, 0),
        "a chunk of the logits' evaluation",
    )?;
    let vocab = session.shape().vocab;
    let mut w = BufWriter::new(file);
    for (c, part) in tokens.chunks(chunk.max(1)).enumerate() {
        let f =
            dspark_quant::gemm::prompt_order(|| session.forward_commit(part, &[], Logits::All))?;
        for (i, (row, &token)) in f.logits.chunks_exact(vocab).zip(part).enumerate() {
            let line = json!({"position": c * chunk + i, "token": token, "logits": row});
            if let Err(e) = writeln!(w, "{line}") {
                return Ok(Err(e));
            }
        }
    }
    Ok(w.flush())
}

/// The statistics, llama.cpp-style, on stderr.
fn print_stats(s: &Stats) {
    let ms = |t: f64| t * 1e3;
    crate::diag!(
        "dspark: prompt eval: {} tokens in {:.2} ms ({:.1} tokens/s)",
        s.prompt_tokens,
        ms(s.seconds.prompt),
        s.prompt_tokens_per_second
    );
    crate::diag!(
        "dspark: eval: {} tokens in {:.2} ms ({:.1} tokens/s); {} generated in {:.2} ms ({:.1} tokens/s)",
        s.generated.saturating_sub(1),
        ms(s.seconds.eval),
        s.eval_tokens_per_second,
        s.generated,
        ms(s.seconds.total),
        s.tokens_per_second
    );
    if s.rounds > 0 {
        let rate = 100.0 * s.drafts_accepted as f64 / s.drafts_verified.max(1) as f64;
        crate::diag!(
            "dspark: speculation: {} rounds, mean acceptance length {:.2}, {} of {} drafts accepted ({rate:.1} %), histogram {:?}",
            s.rounds, s.mean_acceptance_length, s.drafts_accepted, s.drafts_verified, s.acceptance_histogram
        );
    }
    crate::diag!(
        "dspark: time: target {:.2} ms, drafter {:.2} ms, replay {:.2} ms, other {:.2} ms; stop: {}",
        ms(s.seconds.target),
        ms(s.seconds.drafter),
        ms(s.seconds.replay),
        ms(s.seconds.bookkeeping),
        serde_json::to_value(s.stop_reason)
            .ok()
            .and_then(|v| v.as_str().map(String::from))
            .unwrap_or_default()
    );
}

//! `dspark chat`: a conversation in the terminal, as llama-cli's conversation mode has it.
//!
//! Each line read from stdin is a user message (a line ending with `\` goes on to the next
//! line); the conversation is rendered with the chat template (the target's, or
//! `--chat-template-file`) and the reply streams to stdout, speculatively with a drafter.
//! The sessions (the target's KV cache, the drafter's context) live across turns: a turn
//! evaluates only the tokens the earlier ones did not — the template's text between the
//! last reply and the new message, and the message — so the reply tokens stay exactly as
//! generated (llama-cli keeps its tokens the same way). When the new rendering does not
//! extend the old one (a template that rewrites earlier turns), the conversation is
//! evaluated anew. After each reply a line on stderr gives the turn's speed and
//! acceptance. Ctrl-C ends a reply (which is kept) and not the program; at the prompt, or
//! a second time within a reply, it ends the program. `/reset` starts a new conversation,
//! `/exit` (or end of input) ends it.

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use anyhow::{Context, Result};
use clap::Args;
use dspark_runtime::generate::{
    autoregressive, fit_context, speculative_with, ContextAsk, Contexts, Observer, Request, Stats,
    StopReason,
};
use dspark_runtime::models::dspark::{DraftSession, Drafter};
use dspark_runtime::tokenizer::{TextStream, Tokenizer};
use dspark_runtime::{Attention, Target};
use serde_json::json;

use crate::generate_cmd::{parse_attention, parse_date};
use crate::load::{load_drafter, load_target, runtime_error};
use crate::{Outcome, CANCEL};

/// Longest message line read (a message of several lines may hold this much per line).
const MAX_LINE_BYTES: u64 = 1 << 20;

#[derive(Args, Debug)]
pub struct ChatArgs {
    /// Target model: a llama.cpp GGUF with a chat template (or give --chat-template-file).
    #[arg(short = 'm', long, visible_alias = "model")]
    pub target: PathBuf,
    /// Drafter: a dflash-draft GGUF (llama.cpp spelling: -md). Without it, plain decoding.
    #[arg(long, visible_alias = "model-draft")]
    pub draft: Option<PathBuf>,
    /// A system message that opens the conversation.
    #[arg(long)]
    pub system: Option<String>,
    /// A Jinja chat template to use instead of the target's own.
    #[arg(long)]
    pub chat_template_file: Option<PathBuf>,
    /// The date the chat template sees, as YYYY-MM-DD (default: today).
    #[arg(long, value_parser = parse_date)]
    pub chat_date: Option<chrono::NaiveDate>,
    /// Tokens a reply holds at most (it also ends at the end of the model's turn, or
    /// when the context is full).
    #[arg(short = 'n', long, visible_alias = "n-predict", default_value_t = 1024, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_tokens: u64,
    /// Do not end a reply at the end-of-turn token (the target's end-of-sequence): it goes
    /// on to -n or the context.
    #[arg(long)]
    pub ignore_eos: bool,
    /// Tokens the whole conversation may hold (default: the target's context, and the
    /// drafter's when it records a shorter one). The sessions are sized for it at start.
    #[arg(short = 'c', long, visible_alias = "ctx-size", value_parser = clap::value_parser!(u64).range(2..))]
    pub context: Option<u64>,
    #[command(flatten)]
    pub spec: crate::generate_cmd::SpecArgs,
    /// How attention is computed: `f16` (llama.cpp's default) or `f32`.
    #[arg(long, default_value = "f16", value_parser = parse_attention)]
    pub attention: Attention,
    #[command(flatten)]
    pub sampling: crate::SamplingArgs,
    /// Worker threads (default: all cores).
    #[arg(short = 't', long, value_parser = crate::parse_threads)]
    pub threads: Option<usize>,
    /// Print no banner and no per-turn statistics line.
    #[arg(long)]
    pub quiet: bool,
    /// After each reply print one JSON line to stderr (`turn`, `reply`, `tokens`,
    /// `prompt_tokens`, `prompt_cached`, `stats`) instead of the statistics line: for
    /// programs that drive the conversation.
    #[arg(long)]
    pub json_stats: bool,
}

/// Streams a reply's text to stdout (without the end-of-turn token's text).
struct Reply<'t> {
    stream: TextStream<'t>,
    eos: Option<u32>,
    out: std::io::Stdout,
    error: Option<std::io::Error>,
}

impl Observer for Reply<'_> {
    fn tokens(&mut self, tokens: &[u32]) {
        let mut bytes = Vec::new();
        for &t in tokens.iter().filter(|&&t| Some(t) != self.eos) {
            match self.stream.push(t) {
                Ok(b) => bytes.extend(b),
                Err(e) => {
                    self.error
                        .get_or_insert(std::io::Error::other(e.to_string()));
                }
            }
        }
        if self.error.is_none() {
            if let Err(e) = self.out.write_all(&bytes).and_then(|()| self.out.flush()) {
                self.error = Some(e);
            }
        }
    }

    fn interrupted(&self) -> bool {
        CANCEL.load(Ordering::SeqCst) || self.error.is_some()
    }
}

/// The sessions and what they hold.
struct Sessions {
    target: Box<dyn Target + Send>,
    drafter: Option<DraftSession>,
    /// The tokens whose positions the sessions hold (a prefix of the conversation's).
    held: Vec<u32>,
}

/// What the last turn left: the prompt text it rendered, its tokens with the reply's,
/// and how the reply ended.
struct Last {
    rendered: String,
    tokens: Vec<u32>,
    reply: String,
    ended_by_eos: bool,
}

/// Reads one message from stdin (lines ending with `\` continue it); `None` at the end of
/// input or on Ctrl-C.
fn read_message() -> Option<Result<String>> {
    let read = crate::generate_cmd::interruptible(|| -> Result<Option<String>> {
        let mut msg = String::new();
        let stdin = std::io::stdin();
        let mut lock = stdin.lock();
        loop {
            let mut buf = Vec::new();
            let n = std::io::Read::take(&mut lock, MAX_LINE_BYTES + 1)
                .read_until(b'\n', &mut buf)
                .context("cannot read stdin")?;
            if n == 0 {
                return Ok((!msg.is_empty()).then_some(msg));
            }
            if buf.len() as u64 > MAX_LINE_BYTES {
                anyhow::bail!("a message line holds at most {} KiB", MAX_LINE_BYTES >> 10);
            }
            let line = String::from_utf8(buf).map_err(|e| {
                anyhow::anyhow!(
                    "the message is not UTF-8 text (byte {})",
                    e.utf8_error().valid_up_to()
                )
            })?;
            let line = line.strip_suffix('\n').unwrap_or(&line);
            let line = line.strip_suffix('\r').unwrap_or(line);
            match line.strip_suffix('\\') {
                Some(part) => {
                    msg.push_str(part);
                    msg.push('\n');
                }
                None => {
                    msg.push_str(line);
                    return Ok(Some(msg));
                }
            }
        }
    })?;
    read.transpose()
}

/// The tokens of a conversation whose rendering is `rendered`, continuing `last`'s exactly
/// when the rendering extends it: `last`'s prompt text, then its reply, then (when the
/// model ended the reply itself) its end-of-turn text, then the rest, which alone is
/// tokenized. `None` when it does not.
fn continued(
    tok: &Tokenizer,
    rendered: &str,
    last: &Last,
    eos_text: &str,
) -> Result<Option<Vec<u32>>> {
    let Some(rest) = rendered
        .strip_prefix(last.rendered.as_str())
        .and_then(|r| r.strip_prefix(last.reply.as_str()))
    else {
        return Ok(None);
    };
    let rest = if last.ended_by_eos {
        match rest.strip_prefix(eos_text) {
            Some(r) if !eos_text.is_empty() => r,
            _ => return Ok(None),
        }
    } else {
        rest
    };
    let mut ids = last.tokens.clone();
    ids.extend(tok.encode_with(rest, false, true)?);
    Ok(Some(ids))
}

pub fn run(a: ChatArgs) -> Result<Outcome> {
    crate::start_threads(a.threads);
    let target = load_target(&a.target, None)?;
    let model = Arc::clone(&target.model);
    let tok = crate::load::require_tokenizer(
        &target,
        &a.target,
        "chat needs a tokenizer",
        "chat needs one",
    )?;
    let renderer = crate::chat::Renderer::for_target(
        &target,
        &a.target,
        a.chat_template_file.as_deref(),
        a.chat_date,
    )?;
    let drafter: Option<Arc<Drafter>> = match &a.draft {
        Some(p) => Some(load_drafter(p, &*model, &a.target.display().to_string())?),
        None => None,
    };
    a.spec.check(a.draft.is_some())?;
    let context = fit_context(
        Contexts {
            target: model.context(),
            drafter: drafter.as_ref().and_then(|d| d.hparams().context),
        },
        &ContextAsk {
            prompt: 1,
            max_tokens: 1,
            context: a.context.map(|c| usize::try_from(c).unwrap_or(usize::MAX)),
            stop_at_context: true,
        },
    )
    .map_err(|e| crate::Usage(format!("{e} (--context)")))?;
    let drafts = drafter.as_ref().map_or(0, |d| d.drafts_per_block());
    let plan = a.spec.plan(drafts);
    let eos = model.special_tokens().eos.filter(|_| !a.ignore_eos);
    let eos_text = eos.and_then(|e| tok.token_text(e)).unwrap_or_default();
    let new_sessions = || -> Result<Sessions> {
        let (target, drafter) = crate::load::open_sessions(
            &model,
            &a.target,
            drafter.as_ref().zip(a.draft.as_deref()),
            context,
            a.attention,
        )?;
        Ok(Sessions {
            target,
            drafter,
            held: Vec::new(),
        })
    };
    let mut sessions = new_sessions()?;
    let mut messages: Vec<serde_json::Value> = Vec::new();
    if let Some(s) = &a.system {
        messages.push(json!({"role": "system", "content": s}));
    }
    let mut last: Option<Last> = None;
    if !a.quiet {
        crate::diag!(
            "dspark chat: {}{}, a context of {context} tokens. Enter sends a message (end a line with \\ to go on); /reset starts over, /exit or end of input ends; Ctrl-C stops a reply.",
            a.target.display(),
            a.draft
                .as_ref()
                .map(|d| format!(" with drafter {}", d.display()))
                .unwrap_or_default()
        );
    }
    let mut turn = 0usize;
    let mut stdout = std::io::stdout();
    loop {
        write!(stdout, "\n> ")
            .and_then(|()| stdout.flush())
            .context("cannot write the output")?;
        let msg = match read_message() {
            None => {
                // End of input, or Ctrl-C at the prompt: the conversation ends.
                writeln!(stdout).ok();
                return Ok(Outcome::Ok);
            }
            Some(m) => m?,
        };
        match msg.trim() {
            "" => continue,
            "/exit" | "/quit" => return Ok(Outcome::Ok),
            "/reset" => {
                messages.truncate(usize::from(a.system.is_some()));
                last = None;
                sessions = new_sessions()?;
                crate::diag!("dspark chat: a new conversation");
                continue;
            }
            _ => {}
        }
        messages.push(json!({"role": "user", "content": msg}));
        let rendered = match renderer.render(&serde_json::Value::Array(messages.clone())) {
            Ok(r) => r,
            Err(e) => {
                messages.pop();
                crate::diag!("dspark chat: error: {e:#}");
                continue;
            }
        };
        let tokens = match &last {
            Some(l) => continued(&tok, &rendered, l, &eos_text)?,
            None => None,
        };
        let tokens = match tokens {
            Some(t) => t,
            None => tok.encode_with(&rendered, true, true)?,
        };
        if tokens.len() >= context {
            messages.pop();
            crate::diag!(
                "dspark chat: the conversation ({} tokens) fills the context of {context}: /reset starts a new one",
                tokens.len()
            );
            continue;
        }
        if !tokens.starts_with(&sessions.held) || sessions.held.len() >= tokens.len() {
            sessions = new_sessions()?;
        }
        let req = Request {
            prompt: &tokens,
            max_tokens: usize::try_from(a.max_tokens).unwrap_or(usize::MAX),
            context,
            stop: &[],
            eos,
            sampling: a
                .sampling
                .settings(a.sampling.seed.wrapping_add(turn as u64)),
        };
        let mut reply = Reply {
            stream: tok.stream(),
            eos,
            out: std::io::stdout(),
            error: None,
        };
        let Sessions {
            target: ts,
            drafter: ds,
            ..
        } = &mut sessions;
        let result = crate::on_pool(|| match ds.as_mut() {
            None => autoregressive(&mut **ts, &req, &mut reply),
            Some(d) => speculative_with(&mut **ts, d, &req, plan, &mut reply),
        });
        if let Some(e) = reply.error.take() {
            return Err(e).context("cannot write the output");
        }
        drop(reply);
        // A Ctrl-C ended this reply (or came as it ended): the conversation goes on.
        CANCEL.store(false, Ordering::SeqCst);
        let outcome = result.map_err(|e| runtime_error(&a.target, e))?;
        writeln!(stdout).context("cannot write the output")?;
        let out = &outcome.tokens;
        let ended_by_eos = out.last().is_some_and(|&t| Some(t) == eos);
        let body = if ended_by_eos {
            &out[..out.len() - 1]
        } else {
            &out[..]
        };
        let reply_text = tok.decode(body)?;
        let mut all = tokens.clone();
        all.extend(out);
        sessions.held = all[..sessions.target.len()].to_vec();
        let stats = &outcome.stats;
        if a.json_stats {
            crate::diag!(
                "{}",
                json!({
                    "turn": turn,
                    "reply": reply_text,
                    "tokens": out,
                    "prompt_tokens": tokens,
                    "prompt_cached": stats.prompt_cached,
                    "stats": stats,
                })
            );
        } else if !a.quiet {
            crate::diag!("{}", turn_line(stats));
        }
        if out.is_empty() {
            // Interrupted before the reply began: the message is dropped.
            messages.pop();
            last = None;
        } else {
            messages.push(json!({"role": "assistant", "content": reply_text}));
            last = Some(Last {
                rendered,
                tokens: all,
                reply: reply_text,
                ended_by_eos,
            });
        }
        if stats.stop_reason == StopReason::Context {
            crate::diag!("dspark chat: the context is full: /reset starts a new conversation");
        }
        turn += 1;
    }
}

/// The statistics line after a reply.
fn turn_line(s: &Stats) -> String {
    let mut line = format!(
        "[{} tokens in {:.2} s, {:.1} tokens/s",
        s.generated, s.seconds.total, s.tokens_per_second
    );
    if s.rounds > 0 {
        let rate = 100.0 * s.drafts_accepted as f64 / s.drafts_verified.max(1) as f64;
        line += &format!(
            "; {} rounds, {:.2} tokens per round, {} of {} drafts accepted ({rate:.0} %), {} plain steps",
            s.rounds, s.mean_acceptance_length, s.drafts_accepted, s.drafts_verified, s.plain_steps
        );
    } else if s.plain_steps > 0 {
        line += &format!(
            "; {} plain steps (the schedule did not draft)",
            s.plain_steps
        );
    }
    line += &format!(
        "; prompt {} new + {} cached tokens, {:.1} tokens/s",
        s.prompt_tokens, s.prompt_cached, s.prompt_tokens_per_second
    );
    let stop = match s.stop_reason {
        StopReason::Eos | StopReason::Stop => "",
        StopReason::MaxTokens => "; stopped at -n",
        StopReason::Context => "; stopped: context full",
        StopReason::Interrupted => "; interrupted",
    };
    line + stop + "]"
}

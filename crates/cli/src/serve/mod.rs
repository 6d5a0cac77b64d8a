//! `dspark serve`: an OpenAI-compatible HTTP server (llama-server's names and shapes where
//! it has them) over one loaded target and, with `-md`, its drafter: every request is
//! decoded speculatively and losslessly in a slot of its own.
//!
//! - [`api`] holds the endpoints, request checks, responses and errors;
//! - [`engine`] the slots and their queue;
//! - [`batch`] the continuous batching of the slots' target forwards;
//! - [`metrics`] `/metrics`;
//! - [`http`] the connection loop and its limits.
//!
//! The HTTP side runs on tokio (axum); the slots are threads of their own, running the
//! same decoding functions as `dspark generate`. Ctrl-C or SIGTERM: the server stops
//! accepting connections and answers 503 on open ones, lets running requests finish for
//! `--shutdown-timeout` seconds, then ends them (a streamed reply gets an error event),
//! and exits 0.

mod api;
mod batch;
mod engine;
mod http;
mod metrics;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;
use dspark_runtime::memory::check_fits;
use dspark_runtime::Attention;
use sha2::{Digest, Sha256};

use crate::generate_cmd::parse_attention;
use crate::load::{load_drafter, load_target, require_tokenizer, runtime_error};
use crate::{usage, Outcome, CANCEL};

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Target model: a llama.cpp GGUF of an architecture dspark runs.
    #[arg(short = 'm', long, visible_alias = "model")]
    pub target: PathBuf,
    /// Drafter: a dflash-draft GGUF (llama.cpp spelling: -md). Without it, plain decoding.
    #[arg(long, visible_alias = "model-draft")]
    pub draft: Option<PathBuf>,
    /// Address to listen on (loopback unless told otherwise).
    #[arg(long, default_value = "127.0.0.1")]
    pub host: std::net::IpAddr,
    /// Port to listen on (0: any free port; the one chosen is printed).
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// Slots: requests served at once, each with sessions of its own (llama.cpp spelling:
    /// -np).
    #[arg(long, visible_alias = "np", default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=256))]
    pub parallel: u64,
    /// Tokens the slots hold together, split evenly among them as llama-server does (a
    /// slot's prompt and reply within `ctx-size / parallel`; the drafter's context caps it
    /// too). Default: the target's training context for every slot.
    #[arg(short = 'c', long, visible_alias = "ctx-size", value_parser = clap::value_parser!(u64).range(2..))]
    pub context: Option<u64>,
    /// Requests waiting for a slot at most; beyond them a request gets 503 with
    /// Retry-After.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub queue: u64,
    /// Largest request body, in bytes (413 beyond).
    #[arg(long, default_value_t = 8 << 20, value_parser = clap::value_parser!(u64).range(1024..=1 << 30))]
    pub body_limit: u64,
    /// Connections open at once at most; beyond them a connection is answered 503 with
    /// Retry-After and closed.
    #[arg(long, default_value_t = http::MAX_CONNECTIONS as u64, value_parser = clap::value_parser!(u64).range(1..=65_536))]
    pub max_connections: u64,
    /// Require `Authorization: Bearer KEY` on every endpoint but /health.
    #[arg(long)]
    pub api_key: Option<String>,
    /// A Jinja chat template to use instead of the target's own.
    #[arg(long)]
    pub chat_template_file: Option<PathBuf>,
    /// The date chat templates see (`strftime_now`, `date_string`), as YYYY-MM-DD
    /// (default: the day the server started).
    #[arg(long, value_parser = crate::generate_cmd::parse_date)]
    pub chat_date: Option<chrono::NaiveDate>,
    /// Seconds running requests may go on after Ctrl-C / SIGTERM before they are ended.
    #[arg(long, default_value_t = 2.0)]
    pub shutdown_timeout: f64,
    #[command(flatten)]
    pub spec: crate::generate_cmd::SpecArgs,
    /// How attention is computed: `f16` (llama.cpp's default) or `f32`.
    #[arg(long, default_value = "f16", value_parser = parse_attention)]
    pub attention: Attention,
    /// Defaults for requests that do not say (a request's own fields win).
    #[command(flatten)]
    pub sampling: crate::SamplingArgs,
    /// Run each slot's target forwards alone instead of batching the slots' steps into one
    /// forward (for comparison: the output is the same).
    #[arg(long)]
    pub no_batching: bool,
    /// Worker threads of the kernels (default: all cores).
    #[arg(short = 't', long, value_parser = crate::parse_threads)]
    pub threads: Option<usize>,
}

pub fn run(a: ServeArgs) -> Result<Outcome> {
    if !(a.shutdown_timeout.is_finite() && (0.0..=3600.0).contains(&a.shutdown_timeout)) {
        usage!("--shutdown-timeout must be between 0 and 3600 seconds");
    }
    if a.api_key.as_deref().is_some_and(|k| k.trim().is_empty()) {
        usage!("--api-key must not be empty");
    }
    a.spec.check(a.draft.is_some())?;
    crate::start_threads(a.threads);

    // 1. Models, tokenizer, template: each checked by its contract.
    let target = load_target(&a.target, None)?;
    let tokenizer = require_tokenizer(
        &target,
        &a.target,
        "the server tokenizes text",
        "a server needs a target with its tokenizer",
    )?;
    let renderer = match crate::chat::Renderer::for_target(
        &target,
        &a.target,
        a.chat_template_file.as_deref(),
        a.chat_date,
    ) {
        Ok(r) => Some(r),
        Err(e) if a.chat_template_file.is_none() && target.chat_template.is_none() => {
            crate::diag!("dspark: {e:#}; /v1/chat/completions will answer 400");
            None
        }
        Err(e) => return Err(e),
    };
    let model = Arc::clone(&target.model);
    let drafter = match &a.draft {
        Some(p) => Some((
            load_drafter(p, &*model, &a.target.display().to_string())?,
            p.clone(),
        )),
        None => None,
    };
    let slots = usize::try_from(a.parallel).unwrap_or(1);
    let train_ctx = model.context();
    let draft_ctx = drafter.as_ref().and_then(|(d, _)| d.hparams().context);
    let total = a.context.map_or(train_ctx.saturating_mul(slots), |c| {
        usize::try_from(c).unwrap_or(usize::MAX)
    });
    let mut context = total / slots;
    if let Some(d) = draft_ctx {
        context = context.min(d);
    }
    if a.context.is_some() && total / slots > train_ctx {
        crate::diag!(
            "dspark: warning: a slot's context of {} is beyond the target's training context of {train_ctx}",
            total / slots
        );
    }
    if context < 2 {
        usage!("--ctx-size {total} over {slots} slots leaves {context} positions per slot: at least 2 are needed");
    }

    // 2. Memory: every slot full at once must fit, checked now.
    let drafts = drafter.as_ref().map_or(0, |(d, _)| d.drafts_per_block());
    let per_slot = {
        let (t, d) = crate::load::open_sessions(
            &model,
            &a.target,
            drafter.as_ref().map(|(d, p)| (d, p.as_path())),
            context,
            a.attention,
        )?;
        t.state_bytes()
            + d.as_ref()
                .and_then(|s| s.model().session_bytes(context))
                .unwrap_or(0)
    };
    let all = per_slot.saturating_mul(slots as u64);
    check_fits(all, &format!("{slots} slots of {context} positions"))
        .map_err(|e| runtime_error(&a.target, e))?;
    let eos = model.special_tokens().eos;
    let vocab = model.shape().vocab;
    let shared_tokenizer = Arc::clone(&tokenizer);
    let metrics = Arc::new(metrics::Metrics::new(drafts));
    let models = Arc::new(engine::Models {
        target: Arc::clone(&model),
        target_path: a.target.clone(),
        drafter,
        tokenizer,
        attention: a.attention,
        plan: a.spec.plan(drafts),
        context,
        eos,
        direct: slots > 1,
        batcher: if slots > 1 && !a.no_batching {
            Some(
                batch::Batcher::start(Arc::clone(&model), Arc::clone(&metrics))
                    .context("cannot start the batcher")?,
            )
        } else {
            None
        },
    });

    // 3. Slots, then the HTTP server.
    let abort = Arc::new(AtomicBool::new(false));
    let engine = engine::Engine::start(
        Arc::clone(&models),
        slots,
        usize::try_from(a.queue).unwrap_or(usize::MAX),
        Arc::clone(&metrics),
        Arc::clone(&abort),
    )
    .context("cannot start the slots")?;
    let max_token_bytes = {
        let t = &shared_tokenizer;
        (0..vocab as u32)
            .map(|id| {
                let piece = t.token_to_piece(id, true).map_or(0, |p| p.len());
                let text = t.token_text(id).map_or(0, |x| x.len());
                piece.max(text)
            })
            .max()
            .unwrap_or(1)
    };
    let redactions: Vec<(String, String)> = [Some(&a.target), a.chat_template_file.as_ref()]
        .into_iter()
        .flatten()
        .map(|p| {
            let name = p
                .file_name()
                .map_or_else(|| "the file".into(), |n| n.to_string_lossy().into_owned());
            (p.display().to_string(), name)
        })
        .collect();
    let model_id = a.target.file_name().map_or_else(
        || a.target.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    let shared = Arc::new(api::Shared {
        model_id,
        created: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        models,
        renderer,
        engine,
        metrics,
        key: a
            .api_key
            .as_deref()
            .map(|k| Sha256::digest(k.trim().as_bytes()).into()),
        defaults: api::Defaults {
            temp: a.sampling.temp,
            top_k: usize::try_from(a.sampling.top_k).unwrap_or(usize::MAX),
            top_p: a.sampling.top_p,
            min_p: a.sampling.min_p,
            seed: Some(a.sampling.seed),
        },
        draining: AtomicBool::new(false),
        body_limit: usize::try_from(a.body_limit).unwrap_or(usize::MAX),
        slots,
        max_token_bytes,
        redactions,
    });
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the HTTP runtime")?;
    let addr = SocketAddr::new(a.host, a.port);
    let grace = Duration::from_secs_f64(a.shutdown_timeout);
    let max_connections = usize::try_from(a.max_connections).unwrap_or(usize::MAX);
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("cannot listen on {addr}"))?;
        let local = listener
            .local_addr()
            .context("cannot read the bound address")?;
        crate::diag!(
            "dspark: listening on http://{local} ({slots} slot{} of {context} positions{}{})",
            if slots == 1 { "" } else { "s" },
            if shared.models.drafter.is_some() {
                ", speculative"
            } else {
                ""
            },
            if shared.key.is_some() {
                ", API key required"
            } else {
                ""
            },
        );
        let app = api::router(Arc::clone(&shared));
        let stop = {
            let shared = Arc::clone(&shared);
            async move {
                while !CANCEL.load(Ordering::SeqCst) {
                    tokio::time::sleep(Duration::from_millis(25)).await;
                }
                crate::diag!(
                    "dspark: shutting down: no new requests; running ones have {:.1} s",
                    grace.as_secs_f64()
                );
                shared.draining.store(true, Ordering::SeqCst);
                shared.engine.close();
                tokio::spawn(async move {
                    tokio::time::sleep(grace).await;
                    abort.store(true, Ordering::SeqCst);
                    // Ended requests answer within a step; a connection that still hangs
                    // does not hold the exit.
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    crate::diag!("dspark: stopped (connections still open were closed)");
                    std::process::exit(0);
                });
            }
        };
        let drained = {
            let shared = Arc::clone(&shared);
            async move {
                let m = &shared.metrics;
                while m.processing.get() > 0 || m.deferred.get() > 0 {
                    tokio::time::sleep(Duration::from_millis(25)).await;
                }
            }
        };
        http::serve(listener, app, max_connections, stop, drained).await;
        anyhow::Ok(())
    })?;
    crate::diag!("dspark: stopped");
    Ok(Outcome::Ok)
}

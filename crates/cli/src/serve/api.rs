//! The HTTP interface: OpenAI's chat and text completions (streamed as server-sent events
//! or whole), llama-server's `/health`, `/tokenize`, `/detokenize`, `/apply-template`,
//! `/metrics` and `timings`. Every field a request sends is checked before any work: a bad
//! one is a 400 naming it, in OpenAI's error shape
//! (`{"error": {"message", "type", "param", "code"}}`); a body over the limit is a 413, a
//! full queue a 503 with `Retry-After`, a wrong or missing API key a 401.

use std::collections::hash_map::RandomState;
use std::convert::Infallible;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use dspark_runtime::generate::Stats;
use dspark_runtime::sampling::Sampling;
use futures_util::StreamExt;
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tokio::sync::mpsc::UnboundedReceiver;

use super::engine::{Engine, Event, Finish, Job, Models, Refused};
use super::metrics::Metrics;
use crate::chat::Renderer;

/// Stop strings a request may give at most.
pub const MAX_STOP: usize = 16;

/// Bytes of one stop string at most.
pub const MAX_STOP_BYTES: usize = 1024;

/// How long a request's body may take to arrive (a client sending it a byte at a time holds
/// no slot, but a connection: it gets a 400 after this).
pub const BODY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Refuses, before tokenizing it, a text too long to fit a slot's context whatever its
/// tokens: every token spells at least one byte and at most `max_token_bytes`, so a text of
/// more than `context × max_token_bytes` bytes cannot be a prompt (tokenizing megabytes first
/// would cost seconds of CPU and hundreds of MB for a certain refusal).
fn refuse_long_text(s: &Shared, bytes: usize, param: &'static str) -> Result<(), ApiError> {
    if bytes > s.context_bytes() {
        return Err(ApiError::bad(
            param,
            format!(
                "the text ({bytes} bytes) holds more tokens than a slot's context of {} (its tokens spell at most {} bytes each)",
                s.models.context, s.max_token_bytes
            ),
        ));
    }
    Ok(())
}

/// What every handler shares.
pub struct Shared {
    pub model_id: String,
    pub created: u64,
    pub models: Arc<Models>,
    pub renderer: Option<Renderer>,
    pub engine: Engine,
    pub metrics: Arc<Metrics>,
    /// SHA-256 of the API key (compared in constant time), when one is required.
    pub key: Option<[u8; 32]>,
    pub defaults: Defaults,
    /// Set on SIGTERM / Ctrl-C: new requests get 503.
    pub draining: AtomicBool,
    pub body_limit: usize,
    pub slots: usize,
    /// The most bytes one token of the vocabulary spells.
    pub max_token_bytes: usize,
    /// Paths of the server's files as they appear in messages, and what answers show
    /// instead (their file names).
    pub redactions: Vec<(String, String)>,
}

impl Shared {
    /// Bytes a slot's context can hold at most: its positions times the longest token.
    fn context_bytes(&self) -> usize {
        self.models
            .context
            .saturating_mul(self.max_token_bytes.max(1))
    }

    /// Positions every slot holds together: the most tokens one request may have decoded.
    fn all_positions(&self) -> usize {
        self.models.context.saturating_mul(self.slots)
    }

    /// `msg` with the server's file paths replaced by their file names.
    fn redact(&self, mut msg: String) -> String {
        for (path, name) in &self.redactions {
            msg = msg.replace(path.as_str(), name);
        }
        msg
    }
}

/// The server's defaults for what a request does not say (the command line's flags).
#[derive(Clone, Copy, Debug)]
pub struct Defaults {
    pub temp: f32,
    pub top_k: usize,
    pub top_p: f32,
    pub min_p: f32,
    /// `None`: a request without a seed draws a fresh one.
    pub seed: Option<u64>,
}

/// The routes.
pub fn router(shared: Arc<Shared>) -> Router {
    let limit = shared.body_limit;
    Router::new()
        .route("/", get(page))
        .route("/health", get(health))
        .route("/v1/health", get(health))
        .route("/v1/models", get(models))
        .route("/models", get(models))
        .route("/v1/chat/completions", post(chat_completions))
        .route("/chat/completions", post(chat_completions))
        .route("/v1/completions", post(completions))
        .route("/completions", post(completions))
        .route("/tokenize", post(tokenize))
        .route("/detokenize", post(detokenize))
        .route("/apply-template", post(apply_template))
        .route("/metrics", get(metrics))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&shared),
            guard,
        ))
        .layer(axum::extract::DefaultBodyLimit::max(limit))
        .layer(tower_http::timeout::RequestBodyTimeoutLayer::new(
            BODY_TIMEOUT,
        ))
        .with_state(shared)
}

/// An error as OpenAI shapes it.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    kind: &'static str,
    message: String,
    param: Option<&'static str>,
}

impl ApiError {
    fn bad(param: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            kind: "invalid_request_error",
            message: message.into(),
            param: Some(param),
        }
    }

    fn request(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            kind: "invalid_request_error",
            message: message.into(),
            param: None,
        }
    }

    fn server(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            kind: "server_error",
            message: message.into(),
            param: None,
        }
    }

    fn too_large(limit: usize) -> ApiError {
        ApiError {
            status: StatusCode::PAYLOAD_TOO_LARGE,
            kind: "invalid_request_error",
            message: format!("the request body is over {limit} bytes"),
            param: None,
        }
    }

    fn unavailable(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            kind: "unavailable_error",
            message: message.into(),
            param: None,
        }
    }

    fn body(&self) -> Value {
        json!({"error": {
            "message": self.message,
            "type": self.kind,
            "param": self.param,
            "code": self.status.as_u16(),
        }})
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut r = (self.status, Json(self.body())).into_response();
        if self.status == StatusCode::SERVICE_UNAVAILABLE {
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        r
    }
}

/// The API key (every path but the health check) and the count of answers by status. The
/// chat page, which a browser opens without headers, also takes the key as `/?key=KEY`
/// (the page then sends it with each request it makes).
async fn guard(State(s): State<Arc<Shared>>, req: Request, next: Next) -> Response {
    let response = match admit(&s, &req) {
        Ok(()) if sends_oversized(&s, &req) => {
            // A client that sends a declared body over the limit at once reads no answer
            // before it has sent it all: an answer with the rest unread would reach it as a
            // reset connection. So the rest is read through, frame by frame and dropped
            // (at most 4× the limit, see `admit`, under the body timeout), then refused.
            let mut body = req.into_body().into_data_stream();
            while let Some(Ok(_)) = body.next().await {}
            ApiError::too_large(s.body_limit).into_response()
        }
        Ok(()) => next.run(req).await,
        Err(e) => e.into_response(),
    };
    s.metrics
        .requests
        .with_label_values(&[response.status().as_str()])
        .inc();
    response
}

/// Whether `req` declares a body over the limit that its client sends without waiting for
/// an invitation (what `admit` lets through to be read: at most 4× the limit).
fn sends_oversized(s: &Shared, req: &Request) -> bool {
    declared_length(req).is_some_and(|n| n > s.body_limit as u64)
}

/// The body length `req` declares (`Content-Length`), if it declares one that parses.
fn declared_length(req: &Request) -> Option<u64> {
    req.headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
}

/// What is checked before a request reaches its handler: its declared size and its key.
fn admit(s: &Shared, req: &Request) -> Result<(), ApiError> {
    // A declared length over the limit is refused before a byte of the body is read when the
    // client waits to be invited (`Expect: 100-continue`) or declares far more (4×) than
    // the limit; a client that sends its body at once has all of it read (and dropped) by
    // `guard` first (it would not read an answer sent while it writes).
    let declared = declared_length(req);
    let waits = req
        .headers()
        .get(header::EXPECT)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    let limit = s.body_limit as u64;
    if declared.is_some_and(|n| n > limit && (waits || n / 4 > limit)) {
        return Err(ApiError::too_large(s.body_limit));
    }
    let path = req.uri().path();
    let Some(key) = &s.key else { return Ok(()) };
    if matches!(path, "/health" | "/v1/health") {
        return Ok(());
    }
    let header_key = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .or_else(|| req.headers().get("x-api-key").and_then(|v| v.to_str().ok()))
        .map(str::to_string);
    let page_key = (path == "/")
        .then(|| req.uri().query())
        .flatten()
        .and_then(|q| {
            q.split('&')
                .find_map(|kv| kv.strip_prefix("key="))
                .map(percent_decoded)
        });
    let ok = header_key.or(page_key).is_some_and(|g| {
        let d: [u8; 32] = Sha256::digest(g.trim().as_bytes()).into();
        bool::from(d.ct_eq(key))
    });
    if ok {
        return Ok(());
    }
    Err(ApiError {
        status: StatusCode::UNAUTHORIZED,
        kind: "authentication_error",
        message: if path == "/" {
            "invalid or missing API key: open the chat page as /?key=KEY".into()
        } else {
            "invalid or missing API key (Authorization: Bearer KEY)".into()
        },
        param: None,
    })
}

async fn not_found(req: Request) -> ApiError {
    ApiError {
        status: StatusCode::NOT_FOUND,
        kind: "not_found_error",
        message: format!("no such endpoint: {}", req.uri().path()),
        param: None,
    }
}

async fn method_not_allowed(req: Request) -> ApiError {
    ApiError {
        status: StatusCode::METHOD_NOT_ALLOWED,
        kind: "invalid_request_error",
        message: format!("{} does not take {}", req.uri().path(), req.method()),
        param: None,
    }
}

/// `%XX` escapes and `+` of a query value decoded (invalid escapes kept as they are).
fn percent_decoded(v: &str) -> String {
    let b = v.as_bytes();
    let hex = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let escaped = (b[i] == b'%' && i + 2 < b.len())
            .then(|| hex(b[i + 1]).zip(hex(b[i + 2])))
            .flatten();
        match (escaped, b[i]) {
            (Some((h, l)), _) => {
                out.push(h * 16 + l);
                i += 3;
                continue;
            }
            (None, b'+') => out.push(b' '),
            (None, c) => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The chat page: a conversation streamed from `/v1/chat/completions`, each piece marked
/// by where its tokens came from (accepted drafts or the target), with the speed and the
/// acceptance live.
async fn page() -> axum::response::Html<&'static str> {
    axum::response::Html(include_str!("page.html"))
}

async fn health(State(s): State<Arc<Shared>>) -> Response {
    if s.draining.load(Ordering::SeqCst) {
        return ApiError::unavailable("the server is shutting down").into_response();
    }
    Json(json!({"status": "ok"})).into_response()
}

async fn models(State(s): State<Arc<Shared>>) -> Json<Value> {
    let shape = s.models.target.shape();
    Json(json!({
        "object": "list",
        "data": [{
            "id": s.model_id,
            "object": "model",
            "created": s.created,
            "owned_by": "dspark",
            "meta": {
                "n_vocab": shape.vocab,
                "n_ctx": s.models.context,
                "n_ctx_train": s.models.target.context(),
                "n_embd": shape.hidden,
                "slots": s.slots,
                "draft": s.models.drafter.as_ref().map(|(_, p)| p.display().to_string()),
            },
        }],
    }))
}

async fn metrics(State(s): State<Arc<Shared>>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; version=0.0.4"),
        )],
        s.metrics.render(),
    )
        .into_response()
}

/// The body as a JSON object, or the error to answer with.
fn object(
    body: Result<Bytes, BytesRejection>,
    limit: usize,
) -> Result<Map<String, Value>, ApiError> {
    let bytes = body.map_err(|r| {
        if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::too_large(limit)
        } else {
            ApiError::request(format!("cannot read the request body: {}", r.body_text()))
        }
    })?;
    match serde_json::from_slice::<Value>(&bytes) {
        Ok(Value::Object(o)) => Ok(o),
        Ok(_) => Err(ApiError::request("the request body must be a JSON object")),
        Err(e) => Err(ApiError::request(format!(
            "the request body is not JSON: {e}"
        ))),
    }
}

/// A number field within `range`, if present (null counts as absent).
fn number(
    o: &Map<String, Value>,
    name: &'static str,
    range: std::ops::RangeInclusive<f64>,
) -> Result<Option<f64>, ApiError> {
    match o.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match v.as_f64() {
            Some(x) if x.is_finite() && range.contains(&x) => Ok(Some(x)),
            _ => Err(ApiError::bad(
                name,
                format!(
                    "`{name}` must be a number in [{}, {}]",
                    range.start(),
                    range.end()
                ),
            )),
        },
    }
}

/// A non-negative integer field, if present.
fn integer(o: &Map<String, Value>, name: &'static str) -> Result<Option<u64>, ApiError> {
    match o.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .map(Some)
            .ok_or_else(|| ApiError::bad(name, format!("`{name}` must be a non-negative integer"))),
    }
}

fn boolean(o: &Map<String, Value>, name: &'static str) -> Result<bool, ApiError> {
    match o.get(name) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(ApiError::bad(
            name,
            format!("`{name}` must be true or false"),
        )),
    }
}

/// What a completion request asks besides its prompt.
struct Params {
    max_tokens: Option<usize>,
    sampling: Sampling,
    stop: Vec<String>,
    stream: bool,
    include_usage: bool,
}

fn params(o: &Map<String, Value>, d: &Defaults) -> Result<Params, ApiError> {
    if let Some(n) = integer(o, "n")? {
        if n != 1 {
            return Err(ApiError::bad("n", "`n` must be 1 (one choice per request)"));
        }
    }
    if boolean(o, "logprobs")? {
        return Err(ApiError::bad("logprobs", "logprobs are not supported"));
    }
    match o.get("tools") {
        None | Some(Value::Null) => {}
        Some(Value::Array(a)) if a.is_empty() => {}
        Some(Value::Array(_)) => {
            return Err(ApiError::bad("tools", "tool calls are not supported"))
        }
        Some(_) => return Err(ApiError::bad("tools", "`tools` must be an array")),
    }
    let mut max_tokens: Option<(usize, &'static str)> = None;
    for name in ["max_tokens", "max_completion_tokens", "n_predict"] {
        if let Some(n) = integer(o, name)? {
            if n == 0 {
                return Err(ApiError::bad(name, format!("`{name}` must be at least 1")));
            }
            let n = usize::try_from(n).unwrap_or(usize::MAX);
            if let Some((m, first)) = max_tokens.filter(|&(m, _)| m != n) {
                return Err(ApiError::bad(
                    name,
                    format!("`{name}` {n} contradicts `{first}` {m}: give one"),
                ));
            }
            max_tokens = Some((n, name));
        }
    }
    let max_tokens = max_tokens.map(|(n, _)| n);
    let temp = number(o, "temperature", 0.0..=100.0)?.map_or(d.temp, |t| t as f32);
    let top_p = number(o, "top_p", 0.0..=1.0)?.map_or(d.top_p, |t| t as f32);
    if top_p == 0.0 {
        return Err(ApiError::bad("top_p", "`top_p` must be above 0"));
    }
    let min_p = number(o, "min_p", 0.0..=1.0)?.map_or(d.min_p, |t| t as f32);
    let top_k = integer(o, "top_k")?.map_or(d.top_k, |k| usize::try_from(k).unwrap_or(usize::MAX));
    let seed = match o.get("seed") {
        None | Some(Value::Null) => d.seed.unwrap_or_else(fresh_seed),
        Some(v) => match (v.as_u64(), v.as_i64()) {
            (Some(s), _) => s,
            // llama-server's -1: a fresh seed.
            (None, Some(-1)) => fresh_seed(),
            _ => return Err(ApiError::bad("seed", "`seed` must be an integer")),
        },
    };
    let stop = match o.get("stop") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(a)) => a
            .iter()
            .map(|v| v.as_str().map(str::to_string))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| {
                ApiError::bad("stop", "`stop` must be a string or an array of strings")
            })?,
        Some(_) => {
            return Err(ApiError::bad(
                "stop",
                "`stop` must be a string or an array of strings",
            ))
        }
    };
    if stop.len() > MAX_STOP
        || stop
            .iter()
            .any(|s| s.is_empty() || s.len() > MAX_STOP_BYTES)
    {
        return Err(ApiError::bad(
            "stop",
            format!("`stop` holds at most {MAX_STOP} non-empty strings of at most {MAX_STOP_BYTES} bytes"),
        ));
    }
    let stream = boolean(o, "stream")?;
    let include_usage = match o.get("stream_options") {
        None | Some(Value::Null) => false,
        Some(Value::Object(so)) => boolean(so, "include_usage").map_err(|_| {
            ApiError::bad(
                "stream_options",
                "`stream_options.include_usage` must be true or false",
            )
        })?,
        Some(_) => {
            return Err(ApiError::bad(
                "stream_options",
                "`stream_options` must be an object",
            ))
        }
    };
    Ok(Params {
        max_tokens,
        sampling: Sampling {
            temp,
            top_k,
            top_p,
            min_p,
            seed,
        },
        stop,
        stream,
        include_usage,
    })
}

fn fresh_seed() -> u64 {
    static COUNT: AtomicU64 = AtomicU64::new(0);
    let mut h = RandomState::new().build_hasher();
    h.write_u64(COUNT.fetch_add(1, Ordering::Relaxed));
    h.finish()
}

fn new_id(prefix: &str) -> String {
    format!("{prefix}-{:016x}{:08x}", fresh_seed(), fresh_seed() as u32)
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Runs CPU work (rendering, tokenizing) off the async threads.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f)
        .await
        .unwrap_or_else(|_| Err(ApiError::server("internal error while reading the request")))
}

/// The rendered conversation of a chat request.
fn render(s: &Shared, messages: Option<&Value>) -> Result<String, ApiError> {
    let Some(messages) = messages else {
        return Err(ApiError::bad("messages", "`messages` is required"));
    };
    if messages.as_array().is_some_and(Vec::is_empty) {
        return Err(ApiError::bad("messages", "`messages` must not be empty"));
    }
    dspark_runtime::chat::check_messages(messages)
        .map_err(|e| ApiError::bad("messages", e.to_string()))?;
    let Some(r) = &s.renderer else {
        return Err(ApiError::request(
            "the model has no chat template: start the server with --chat-template-file, or use /v1/completions",
        ));
    };
    r.render(messages)
        .map_err(|e| ApiError::bad("messages", s.redact(format!("{e:#}"))))
}

fn tokenize_text(
    s: &Shared,
    text: &str,
    chat: bool,
    param: &'static str,
) -> Result<Vec<u32>, ApiError> {
    refuse_long_text(s, text.len(), param)?;
    s.models
        .tokenizer
        .encode_with(text, chat, true)
        .map_err(|e| ApiError::bad(param, format!("cannot tokenize: {e}")))
}

async fn chat_completions(
    State(s): State<Arc<Shared>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let o = object(body, s.body_limit)?;
    let p = params(&o, &s.defaults)?;
    let s2 = Arc::clone(&s);
    let prompt = blocking(move || {
        let text = render(&s2, o.get("messages"))?;
        tokenize_text(&s2, &text, true, "messages")
    })
    .await?;
    generate(s, prompt, p, Kind::Chat, "messages").await
}

async fn completions(
    State(s): State<Arc<Shared>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let o = object(body, s.body_limit)?;
    let p = params(&o, &s.defaults)?;
    for (name, off) in [("echo", Value::Bool(false)), ("best_of", json!(1))] {
        if o.get(name).is_some_and(|v| !v.is_null() && *v != off) {
            return Err(ApiError::bad(name, format!("`{name}` is not supported")));
        }
    }
    if o.get("suffix").is_some_and(|v| !v.is_null()) {
        return Err(ApiError::bad("suffix", "`suffix` is not supported"));
    }
    let s2 = Arc::clone(&s);
    let prompt = blocking(move || {
        let bad = || {
            ApiError::bad(
                "prompt",
                "`prompt` must be a string, an array of one string, or an array of token ids",
            )
        };
        match o.get("prompt") {
            None => Err(ApiError::bad("prompt", "`prompt` is required")),
            Some(Value::String(t)) => tokenize_text(&s2, t, true, "prompt"),
            Some(Value::Array(a)) if a.len() == 1 && a[0].is_string() => {
                tokenize_text(&s2, a[0].as_str().expect("checked"), true, "prompt")
            }
            Some(Value::Array(a)) => a
                .iter()
                .map(|v| v.as_u64().and_then(|t| u32::try_from(t).ok()))
                .collect::<Option<Vec<u32>>>()
                .ok_or_else(bad),
            Some(_) => Err(bad()),
        }
    })
    .await;
    generate(s, prompt?, p, Kind::Text, "prompt").await
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Chat,
    Text,
}

/// Sets the job's cancel flag when dropped armed: the request's future or its stream was
/// dropped before the end (the client went away).
struct CancelOnDrop {
    flag: Arc<AtomicBool>,
    armed: bool,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if self.armed {
            self.flag.store(true, Ordering::SeqCst);
        }
    }
}

/// Checks the prompt against the vocabulary and the context, queues the job, answers.
async fn generate(
    s: Arc<Shared>,
    prompt: Vec<u32>,
    p: Params,
    kind: Kind,
    prompt_param: &'static str,
) -> Result<Response, ApiError> {
    let closing = || ApiError::unavailable("the server is shutting down");
    if s.draining.load(Ordering::SeqCst) {
        return Err(closing());
    }
    let vocab = s.models.target.shape().vocab;
    let context = s.models.context;
    if prompt.is_empty() {
        return Err(ApiError::bad(prompt_param, "the prompt is empty"));
    }
    if let Some(&t) = prompt.iter().find(|&&t| t as usize >= vocab) {
        return Err(ApiError::bad(
            prompt_param,
            format!("token {t} is outside the vocabulary ({vocab} tokens)"),
        ));
    }
    if prompt.len() >= context {
        return Err(ApiError::bad(
            prompt_param,
            format!(
                "the prompt holds {} tokens; a slot's context holds {context} (prompt and reply)",
                prompt.len()
            ),
        ));
    }
    let room = context - prompt.len();
    let max_tokens = match p.max_tokens {
        Some(n) if n > room => {
            return Err(ApiError::bad(
                "max_tokens",
                format!(
                "max_tokens {n} and the prompt's {} tokens exceed a slot's context of {context}",
                prompt.len()
            ),
            ))
        }
        Some(n) => n,
        None => room,
    };
    let prompt_tokens = prompt.len();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let cancel = Arc::new(AtomicBool::new(false));
    let job = Job {
        prompt,
        max_tokens,
        sampling: p.sampling,
        stop: p.stop,
        events: tx,
        cancel: Arc::clone(&cancel),
    };
    s.engine.submit(job).map_err(|r| match r {
        Refused::Busy => {
            ApiError::unavailable("every slot is busy and the queue is full: retry later")
        }
        Refused::Closed => closing(),
    })?;
    let guard = CancelOnDrop {
        flag: cancel,
        armed: true,
    };
    let reply = Reply {
        id: new_id(if kind == Kind::Chat {
            "chatcmpl"
        } else {
            "cmpl"
        }),
        created: now(),
        model: s.model_id.clone(),
        kind,
        prompt_tokens,
    };
    Ok(if p.stream {
        stream(reply, rx, guard, p.include_usage)
    } else {
        whole(reply, rx, guard).await
    })
}

/// What every response of one request repeats.
struct Reply {
    id: String,
    created: u64,
    model: String,
    kind: Kind,
    prompt_tokens: usize,
}

impl Reply {
    fn object(&self, chunk: bool) -> &'static str {
        match (self.kind, chunk) {
            (Kind::Chat, false) => "chat.completion",
            (Kind::Chat, true) => "chat.completion.chunk",
            (Kind::Text, _) => "text_completion",
        }
    }

    fn envelope(&self, chunk: bool, choices: Value) -> Value {
        json!({
            "id": self.id,
            "object": self.object(chunk),
            "created": self.created,
            "model": self.model,
            "system_fingerprint": concat!("dspark-", env!("CARGO_PKG_VERSION")),
            "choices": choices,
        })
    }

    fn usage(&self, f: &Finish) -> Value {
        json!({
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": f.completion_tokens,
            "total_tokens": self.prompt_tokens + f.completion_tokens,
        })
    }
}

/// llama-server's `timings`, from a run's statistics.
fn timings(s: &Stats) -> Value {
    let ms = |t: f64| t * 1e3;
    let per = |n: usize, t: f64| if n > 0 { ms(t) / n as f64 } else { 0.0 };
    let predicted_ms = ms(s.seconds.total - s.seconds.prompt).max(0.0);
    let mut t = json!({
        "cache_n": s.prompt_cached,
        "prompt_n": s.prompt_tokens,
        "prompt_ms": ms(s.seconds.prompt),
        "prompt_per_token_ms": per(s.prompt_tokens, s.seconds.prompt),
        "prompt_per_second": s.prompt_tokens_per_second,
        "predicted_n": s.generated,
        "predicted_ms": predicted_ms,
        "predicted_per_token_ms": per(s.generated.saturating_sub(1), s.seconds.eval),
        "predicted_per_second": s.eval_tokens_per_second,
    });
    if s.rounds > 0 || s.plain_steps > 0 {
        t["draft_n"] = json!(s.drafts_verified);
        t["draft_n_accepted"] = json!(s.drafts_accepted);
        t["draft_rounds"] = json!(s.rounds);
        t["plain_steps"] = json!(s.plain_steps);
        t["mean_acceptance_length"] = json!(s.mean_acceptance_length);
    }
    t
}

fn failure(msg: String) -> ApiError {
    if msg.contains("shutting down") {
        ApiError::unavailable(msg)
    } else {
        ApiError::server(msg)
    }
}

/// A non-streamed answer: the whole text once the job ends.
async fn whole(
    reply: Reply,
    mut rx: UnboundedReceiver<Event>,
    mut guard: CancelOnDrop,
) -> Response {
    let mut text = String::new();
    while let Some(ev) = rx.recv().await {
        match ev {
            Event::Started => {}
            Event::Text(t) => text.push_str(&t.text),
            Event::Failed(m) => {
                guard.armed = false;
                return failure(m).into_response();
            }
            Event::Done(f) => {
                guard.armed = false;
                let choice = match reply.kind {
                    Kind::Chat => json!({
                        "index": 0,
                        "message": {"role": "assistant", "content": text},
                        "logprobs": null,
                        "finish_reason": f.reason,
                    }),
                    Kind::Text => json!({
                        "index": 0,
                        "text": text,
                        "logprobs": null,
                        "finish_reason": f.reason,
                    }),
                };
                let mut doc = reply.envelope(false, json!([choice]));
                doc["usage"] = reply.usage(&f);
                doc["timings"] = timings(&f.stats);
                return Json(doc).into_response();
            }
        }
    }
    guard.armed = false;
    ApiError::server("the request ended without an answer").into_response()
}

/// Where a streamed answer is.
struct StreamState {
    reply: Reply,
    rx: UnboundedReceiver<Event>,
    guard: CancelOnDrop,
    include_usage: bool,
    /// Events to send before reading more.
    pending: std::collections::VecDeque<String>,
    opened: bool,
    done: bool,
}

/// A streamed answer: server-sent events, one per piece of text, then the finish reason
/// (with `timings`), the usage when asked (`stream_options.include_usage`), `[DONE]`.
fn stream(
    reply: Reply,
    rx: UnboundedReceiver<Event>,
    guard: CancelOnDrop,
    include_usage: bool,
) -> Response {
    let st = StreamState {
        reply,
        rx,
        guard,
        include_usage,
        pending: Default::default(),
        opened: false,
        done: false,
    };
    let events = futures_util::stream::unfold(st, |mut st| async move {
        loop {
            if let Some(data) = st.pending.pop_front() {
                return Some((Ok::<_, Infallible>(SseEvent::default().data(data)), st));
            }
            if st.done {
                return None;
            }
            let chat = st.reply.kind == Kind::Chat;
            match st.rx.recv().await {
                Some(Event::Started) => {
                    if chat && !st.opened {
                        st.opened = true;
                        let c = json!([{"index": 0, "delta": {"role": "assistant", "content": null}, "logprobs": null, "finish_reason": null}]);
                        st.pending.push_back(st.reply.envelope(true, c).to_string());
                    }
                }
                Some(Event::Text(t)) => {
                    if t.text.is_empty() && t.tokens == 0 {
                        continue;
                    }
                    let c = if chat {
                        json!([{"index": 0, "delta": {"content": t.text}, "logprobs": null, "finish_reason": null}])
                    } else {
                        json!([{"index": 0, "text": t.text, "logprobs": null, "finish_reason": null}])
                    };
                    let mut chunk = st.reply.envelope(true, c);
                    // dspark's own: where this piece's tokens came from (the chat page
                    // shows it; clients ignore fields they do not know).
                    chunk["dspark"] = json!({"tokens": t.tokens, "drafted": t.drafted});
                    st.pending.push_back(chunk.to_string());
                }
                Some(Event::Done(f)) => {
                    st.guard.armed = false;
                    st.done = true;
                    let c = if chat {
                        json!([{"index": 0, "delta": {}, "logprobs": null, "finish_reason": f.reason}])
                    } else {
                        json!([{"index": 0, "text": "", "logprobs": null, "finish_reason": f.reason}])
                    };
                    let mut last = st.reply.envelope(true, c);
                    last["timings"] = timings(&f.stats);
                    st.pending.push_back(last.to_string());
                    if st.include_usage {
                        let mut u = st.reply.envelope(true, json!([]));
                        u["usage"] = st.reply.usage(&f);
                        st.pending.push_back(u.to_string());
                    }
                    st.pending.push_back("[DONE]".into());
                }
                Some(Event::Failed(m)) => {
                    st.guard.armed = false;
                    st.done = true;
                    st.pending.push_back(failure(m).body().to_string());
                }
                None => {
                    st.guard.armed = false;
                    st.done = true;
                    st.pending.push_back(
                        ApiError::server("the request ended without an answer")
                            .body()
                            .to_string(),
                    );
                }
            }
        }
    });
    Sse::new(events).into_response()
}

async fn tokenize(
    State(s): State<Arc<Shared>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    let o = object(body, s.body_limit)?;
    let r = blocking(move || {
        let Some(text) = o.get("content").and_then(Value::as_str) else {
            return Err(ApiError::bad("content", "`content` must be a string"));
        };
        let add_special = boolean(&o, "add_special")?;
        let parse_special = match o.get("parse_special") {
            None | Some(Value::Null) => true,
            Some(Value::Bool(b)) => *b,
            Some(_) => {
                return Err(ApiError::bad(
                    "parse_special",
                    "`parse_special` must be true or false",
                ))
            }
        };
        let pieces = boolean(&o, "with_pieces")?;
        // Any text the body holds may be tokenized here, but not more than a context's worth
        // of tokens' bytes times the slots (a bound on the work one request buys).
        let most = s.context_bytes().saturating_mul(s.slots);
        if text.len() > most {
            return Err(ApiError::bad(
                "content",
                format!(
                    "`content` holds {} bytes; at most {most} are tokenized",
                    text.len()
                ),
            ));
        }
        let tok = &s.models.tokenizer;
        let ids = tok
            .encode_with(text, add_special, parse_special)
            .map_err(|e| ApiError::bad("content", format!("cannot tokenize: {e}")))?;
        let tokens: Vec<Value> = if pieces {
            ids.iter()
                .map(|&id| {
                    let bytes = tok.token_to_piece(id, true).unwrap_or_default();
                    let piece = match String::from_utf8(bytes) {
                        Ok(t) => json!(t),
                        Err(e) => json!(e.into_bytes()),
                    };
                    json!({"id": id, "piece": piece})
                })
                .collect()
        } else {
            ids.iter().map(|&id| json!(id)).collect()
        };
        Ok(json!({"tokens": tokens}))
    })
    .await;
    r.map(Json)
}

async fn detokenize(
    State(s): State<Arc<Shared>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    let o = object(body, s.body_limit)?;
    let r = blocking(move || {
        let vocab = s.models.target.shape().vocab;
        let bad = || {
            ApiError::bad(
                "tokens",
                format!("`tokens` must be an array of token ids below {vocab}"),
            )
        };
        let list = o.get("tokens").and_then(Value::as_array).ok_or_else(bad)?;
        if list.len() > s.all_positions() {
            return Err(ApiError::bad(
                "tokens",
                format!(
                    "`tokens` holds {} ids; at most {} are decoded",
                    list.len(),
                    s.all_positions()
                ),
            ));
        }
        let ids = list
            .iter()
            .map(|v| v.as_u64().filter(|&t| t < vocab as u64).map(|t| t as u32))
            .collect::<Option<Vec<u32>>>()
            .ok_or_else(bad)?;
        let text = s
            .models
            .tokenizer
            .decode(&ids)
            .map_err(|e| ApiError::bad("tokens", format!("cannot decode: {e}")))?;
        Ok(json!({"content": text}))
    })
    .await;
    r.map(Json)
}

async fn apply_template(
    State(s): State<Arc<Shared>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    let o = object(body, s.body_limit)?;
    let prompt = blocking(move || render(&s, o.get("messages"))).await?;
    Ok(Json(json!({"prompt": prompt})))
}

#[cfg(test)]
mod tests {
    use super::percent_decoded;

    #[test]
    fn query_values_are_percent_decoded() {
        assert_eq!(percent_decoded("a%20b+c"), "a b c");
        assert_eq!(percent_decoded("k%2Fx%3d"), "k/x=");
        assert_eq!(percent_decoded("100%"), "100%");
        assert_eq!(percent_decoded("%zz%4"), "%zz%4");
        assert_eq!(percent_decoded("%C3%A9"), "é");
    }
}

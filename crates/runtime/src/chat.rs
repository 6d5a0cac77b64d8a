//! Chat templates: a conversation (OpenAI-style messages) rendered into the prompt text a
//! model was trained on, by the Jinja template its GGUF carries (`tokenizer.chat_template`)
//! or one given — as Hugging Face's `apply_chat_template` renders it, which is what
//! llama.cpp's `llama-server` reproduces: trimmed blocks (`trim_blocks`, `lstrip_blocks`),
//! `{% break %}` / `{% continue %}`, Python's string and dict methods (`strip`, `split`,
//! `items`, …), a `tojson` filter that is Python's `json.dumps` (non-ASCII kept,
//! `indent`, `separators`, `sort_keys`), `raise_exception(msg)` (an error naming the
//! template's message) and `strftime_now(fmt)`; `messages`, `add_generation_prompt`,
//! `bos_token` and `eos_token` in the context. The tests hold it to Python's jinja2 with
//! those settings on the templates llama.cpp ships.
//!
//! The engine is minijinja (well kept, made for the job; TGI and mistral.rs render with
//! it); this module only adds Hugging Face's globals and filter.

use minijinja::value::{Kwargs, Value, ValueKind};
use minijinja::{Environment, Error, ErrorKind};

use crate::error::{Result, RuntimeError};

/// Largest template accepted (bytes): real templates are a few KB to ~30 KB.
pub const MAX_TEMPLATE_BYTES: usize = 1 << 20;

/// Jinja instructions a rendering may execute (minijinja's fuel): real templates take a
/// few hundred per message; a template that loops without end stops here with an error
/// (about a second of work) instead of hanging.
pub const MAX_TEMPLATE_STEPS: u64 = 20_000_000;

/// A compiled chat template.
pub struct ChatTemplate {
    env: Environment<'static>,
    /// What the template shows, probed once on first need ([`ChatTemplate::caps`]).
    caps: std::sync::OnceLock<Caps>,
}

/// What a template shows, as llama.cpp's capability probes find it (approximated by
/// rendering markers and looking for them).
#[derive(Clone, Copy, Debug)]
struct Caps {
    /// It renders a string content.
    strings: bool,
    /// It renders content given as typed parts (`[{"type": "text", "text": ...}]`).
    parts: bool,
    /// It shows a system message.
    system: bool,
    /// It is gpt-oss's (`<|channel|>`), which has a `developer` role of its own.
    channels: bool,
}

/// What a rendering adds to the messages.
#[derive(Clone, Debug)]
pub struct ChatOptions {
    /// End with the assistant's opening (`add_generation_prompt`).
    pub add_generation_prompt: bool,
    /// The vocabulary's beginning-of-sequence text (empty when it has none).
    pub bos_token: String,
    /// The vocabulary's end-of-sequence text.
    pub eos_token: String,
    /// The time `strftime_now` formats (`None`: the local time now).
    pub now: Option<chrono::NaiveDateTime>,
    /// More variables for the template (Hugging Face's `apply_chat_template(**kwargs)`,
    /// llama-server's extra context), set after the ones above.
    pub extra: serde_json::Map<String, serde_json::Value>,
}

impl ChatOptions {
    /// No generation prompt, no BOS / EOS texts, no extra variables, today's date.
    pub fn bare() -> ChatOptions {
        ChatOptions {
            add_generation_prompt: false,
            bos_token: String::new(),
            eos_token: String::new(),
            now: None,
            extra: serde_json::Map::new(),
        }
    }

    /// The variables llama-server's `/apply-template` and chat completions add: thinking
    /// enabled, and today's date as `date_string` (`%d %b %Y`) and `datetime`
    /// (`%b %d %Y`), from `now` (the local time when `None`).
    pub fn llama_server(
        bos_token: String,
        eos_token: String,
        now: Option<chrono::NaiveDateTime>,
    ) -> ChatOptions {
        let t = now.unwrap_or_else(|| chrono::Local::now().naive_local());
        let mut extra = serde_json::Map::new();
        extra.insert("enable_thinking".into(), true.into());
        extra.insert(
            "date_string".into(),
            t.format("%d %b %Y").to_string().into(),
        );
        extra.insert("datetime".into(), t.format("%b %d %Y").to_string().into());
        ChatOptions {
            add_generation_prompt: true,
            bos_token,
            eos_token,
            now: Some(t),
            extra,
        }
    }
}

impl ChatTemplate {
    /// Compiles `source`; a syntax error is refused with its line and Jinja's message.
    pub fn new(source: &str) -> Result<ChatTemplate> {
        if source.len() > MAX_TEMPLATE_BYTES {
            return Err(RuntimeError::Request(format!(
                "the chat template has {} bytes; at most {MAX_TEMPLATE_BYTES} are accepted",
                source.len()
            )));
        }
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_keep_trailing_newline(false);
        env.set_fuel(Some(MAX_TEMPLATE_STEPS));
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_filter("tojson", tojson);
        // jinja2's `length` of an undefined value is 0 (templates test `tools|length`).
        env.add_filter("length", |v: Value| -> std::result::Result<Value, Error> {
            if v.is_undefined() {
                Ok(Value::from(0))
            } else {
                minijinja::filters::length(&v).map(Value::from)
            }
        });
        env.add_function(
            "raise_exception",
            |msg: String| -> std::result::Result<Value, Error> {
                Err(Error::new(ErrorKind::InvalidOperation, msg))
            },
        );
        env.add_template_owned("chat", source.to_string())
            .map_err(|e| {
                RuntimeError::Request(format!(
                    "the chat template does not compile: {}",
                    describe(&e)
                ))
            })?;
        Ok(ChatTemplate {
            env,
            caps: std::sync::OnceLock::new(),
        })
    }

    /// Renders `messages` (a JSON array of message objects) with `options`.
    pub fn render(&self, messages: &serde_json::Value, options: &ChatOptions) -> Result<String> {
        check_messages(messages)?;
        let mut env = self.env.clone();
        let now = options
            .now
            .unwrap_or_else(|| chrono::Local::now().naive_local());
        env.add_function("strftime_now", move |fmt: String| -> String {
            now.format(&fmt).to_string()
        });
        let t = env
            .get_template("chat")
            .expect("the template was added at construction");
        let mut ctx = serde_json::Map::new();
        ctx.insert("messages".into(), messages.clone());
        ctx.insert(
            "add_generation_prompt".into(),
            options.add_generation_prompt.into(),
        );
        ctx.insert("bos_token".into(), options.bos_token.clone().into());
        ctx.insert("eos_token".into(), options.eos_token.clone().into());
        for (k, v) in &options.extra {
            ctx.insert(k.clone(), v.clone());
        }
        t.render(Value::from_serialize(&ctx)).map_err(|e| {
            RuntimeError::Request(format!("the chat template failed: {}", describe(&e)))
        })
    }
}

impl ChatTemplate {
    /// The template rendered on a probe conversation with no extra variables, when it
    /// renders at all.
    fn probe(&self, messages: serde_json::Value) -> Option<String> {
        self.render(&messages, &ChatOptions::bare()).ok()
    }

    /// Whether the template shows a system message (llama.cpp's capability probe: a
    /// system and a user message rendered, the system text looked for in the output).
    pub fn supports_system_role(&self) -> bool {
        self.caps().system
    }

    /// The template's capabilities, probed on first use: a string content and one typed
    /// text part each rendered with a marker (the marker alone must appear: a template
    /// that prints a list of parts as it is, its `repr` with the `type` keys, does not
    /// take parts), and a system message before a user's.
    fn caps(&self) -> Caps {
        *self.caps.get_or_init(|| {
            let shows = |content: serde_json::Value| {
                self.probe(serde_json::json!([{"role": "user", "content": content}]))
                    .is_some_and(|text| {
                        text.contains("CONTENT_MARKER")
                            && !text.contains("'type'")
                            && !text.contains("\"type\"")
                    })
            };
            let source = self
                .env
                .get_template("chat")
                .map(|t| t.source().to_string())
                .unwrap_or_default();
            Caps {
                strings: shows("CONTENT_MARKER".into()),
                parts: shows(serde_json::json!([{"type": "text", "text": "CONTENT_MARKER"}])),
                system: self
                    .probe(serde_json::json!([
                        {"role": "system", "content": "System message"},
                        {"role": "user", "content": "User message"},
                    ]))
                    .is_some_and(|text| text.contains("System message")),
                channels: source.contains("<|channel|>"),
            }
        })
    }

    /// The conversation as llama-server hands it to this template: content in the form
    /// the template takes (text parts joined with newlines for a template that renders
    /// only strings, a string wrapped as one text part for one that renders only parts),
    /// the `developer` role
    /// read as `system` (unless the template is gpt-oss's, which has its own), and where
    /// the template shows no system message, a leading one merged into the next message
    /// (`system + "\n" + next`) or dropped when alone.
    pub fn llama_server_messages(&self, messages: &serde_json::Value) -> Result<serde_json::Value> {
        check_messages(messages)?;
        let mut list = messages.as_array().cloned().unwrap_or_default();
        let Caps {
            strings,
            parts,
            system,
            channels,
        } = self.caps();
        for m in &mut list {
            match &m["content"] {
                serde_json::Value::Array(items) if strings && !parts => {
                    let mut text = String::new();
                    for part in items.iter().filter(|p| p["type"] == "text") {
                        if !text.is_empty() {
                            text.push('\n');
                        }
                        text.push_str(part["text"].as_str().unwrap_or_default());
                    }
                    m["content"] = text.into();
                }
                serde_json::Value::String(t) if parts && !strings => {
                    m["content"] = serde_json::json!([{"type": "text", "text": t}]);
                }
                _ => {}
            }
        }
        if !channels {
            for m in &mut list {
                if m["role"] == "developer" {
                    m["role"] = "system".into();
                }
            }
        }
        if list.first().is_some_and(|m| m["role"] == "system") && !system {
            let first = list.remove(0);
            if let Some(next) = list.first_mut() {
                let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_string();
                next["content"] =
                    format!("{}\n{}", text(&first["content"]), text(&next["content"])).into();
            }
        }
        Ok(serde_json::Value::Array(list))
    }
}

/// A Jinja error with its line and detail.
fn describe(e: &Error) -> String {
    let mut s = match e.kind() {
        ErrorKind::InvalidOperation => e.detail().unwrap_or("invalid operation").to_string(),
        _ => e.to_string(),
    };
    if let Some(line) = e.line() {
        s.push_str(&format!(" (template line {line})"));
    }
    s
}

/// The messages a renderer accepts: an array of objects, each with a string `role`, and a
/// `content` that is a string, an array of parts, or null (tool calls).
pub fn check_messages(messages: &serde_json::Value) -> Result<()> {
    let bad = |what: String| Err(RuntimeError::Request(format!("messages: {what}")));
    let Some(list) = messages.as_array() else {
        return bad("expected a JSON array of messages".into());
    };
    for (i, m) in list.iter().enumerate() {
        let Some(obj) = m.as_object() else {
            return bad(format!("message {i} is not an object"));
        };
        match obj.get("role") {
            Some(serde_json::Value::String(_)) => {}
            Some(_) => return bad(format!("message {i}: `role` is not a string")),
            None => return bad(format!("message {i} has no `role`")),
        }
        match obj.get("content") {
            None
            | Some(serde_json::Value::String(_))
            | Some(serde_json::Value::Array(_))
            | Some(serde_json::Value::Null) => {}
            Some(_) => {
                return bad(format!(
                    "message {i}: `content` must be a string, an array of parts or null"
                ))
            }
        }
    }
    Ok(())
}

/// Python's `json.dumps(value, ensure_ascii=False, indent=…, separators=…,
/// sort_keys=…)`, as Hugging Face's `tojson` filter calls it.
fn tojson(value: Value, kwargs: Kwargs) -> std::result::Result<Value, Error> {
    let indent: Option<Value> = kwargs.get("indent")?;
    let sort_keys: Option<bool> = kwargs.get("sort_keys")?;
    let ensure_ascii: Option<bool> = kwargs.get("ensure_ascii")?;
    let separators: Option<Value> = kwargs.get("separators")?;
    kwargs.assert_all_used()?;
    let indent = match indent {
        None => None,
        Some(v) if v.is_none() => None,
        Some(v) => match v.kind() {
            ValueKind::Number => {
                Some(" ".repeat(i64::try_from(v.clone()).unwrap_or(0).max(0) as usize))
            }
            ValueKind::String => Some(v.as_str().unwrap_or("").to_string()),
            _ => {
                return Err(Error::new(
                    ErrorKind::InvalidOperation,
                    "tojson: indent must be a number or a string",
                ))
            }
        },
    };
    let (item_sep, key_sep) = match separators {
        Some(v) if !v.is_none() => {
            let parts: Vec<String> = v
                .try_iter()?
                .map(|p| p.as_str().map(str::to_string))
                .collect::<Option<_>>()
                .ok_or_else(|| {
                    Error::new(
                        ErrorKind::InvalidOperation,
                        "tojson: separators must be two strings",
                    )
                })?;
            match parts.as_slice() {
                [a, b] => (a.clone(), b.clone()),
                _ => {
                    return Err(Error::new(
                        ErrorKind::InvalidOperation,
                        "tojson: separators must be two strings",
                    ))
                }
            }
        }
        _ => (
            if indent.is_some() {
                ",".into()
            } else {
                ", ".into()
            },
            ": ".into(),
        ),
    };
    let opts = DumpOptions {
        indent,
        item_sep,
        key_sep,
        sort_keys: sort_keys.unwrap_or(false),
        ascii: ensure_ascii.unwrap_or(false),
    };
    let mut out = String::new();
    dump(&value, &opts, 0, &mut out)?;
    Ok(Value::from_safe_string(out))
}

struct DumpOptions {
    indent: Option<String>,
    item_sep: String,
    key_sep: String,
    sort_keys: bool,
    ascii: bool,
}

fn dump(
    v: &Value,
    o: &DumpOptions,
    depth: usize,
    out: &mut String,
) -> std::result::Result<(), Error> {
    let newline = |out: &mut String, depth: usize| {
        if let Some(ind) = &o.indent {
            out.push('\n');
            for _ in 0..depth {
                out.push_str(ind);
            }
        }
    };
    match v.kind() {
        ValueKind::Undefined | ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if v.is_true() { "true" } else { "false" }),
        ValueKind::Number => out.push_str(&python_number(v)),
        ValueKind::String => quote(v.as_str().unwrap_or(""), o.ascii, out),
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<Value> = v.try_iter()?.collect();
            if items.is_empty() {
                out.push_str("[]");
                return Ok(());
            }
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(&o.item_sep);
                }
                newline(out, depth + 1);
                dump(item, o, depth + 1, out)?;
            }
            newline(out, depth);
            out.push(']');
        }
        ValueKind::Map => {
            let mut keys: Vec<Value> = v.try_iter()?.collect();
            if keys.is_empty() {
                out.push_str("{}");
                return Ok(());
            }
            if o.sort_keys {
                keys.sort_by_key(|k| k.to_string());
            }
            out.push('{');
            for (i, k) in keys.iter().enumerate() {
                if i > 0 {
                    out.push_str(&o.item_sep);
                }
                newline(out, depth + 1);
                let key = match k.as_str() {
                    Some(s) => s.to_string(),
                    None => python_key(k),
                };
                quote(&key, o.ascii, out);
                out.push_str(&o.key_sep);
                dump(&v.get_item(k)?, o, depth + 1, out)?;
            }
            newline(out, depth);
            out.push('}');
        }
        _ => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                format!("tojson: a {} cannot be written as JSON", v.kind()),
            ))
        }
    }
    Ok(())
}

/// A non-string map key as `json.dumps` writes it (numbers and booleans become strings).
fn python_key(k: &Value) -> String {
    match k.kind() {
        ValueKind::Bool => if k.is_true() { "true" } else { "false" }.into(),
        ValueKind::None | ValueKind::Undefined => "null".into(),
        ValueKind::Number => python_number(k),
        _ => k.to_string(),
    }
}

/// A number as Python's `json.dumps` writes it: integers as they are, floats by `repr`
/// (shortest round trip, at least one fractional digit, exponents from 1e16 and below
/// 1e-4 as `1e+16` / `1e-05`), non-finite as `NaN` / `Infinity`.
fn python_number(v: &Value) -> String {
    if v.is_integer() {
        // An integer (possibly beyond i64: u64 and i128 print as they are).
        return v.to_string();
    }
    let f = f64::try_from(v.clone()).unwrap_or(f64::NAN);
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "Infinity" } else { "-Infinity" }.into();
    }
    if f == 0.0 {
        return if f.is_sign_negative() { "-0.0" } else { "0.0" }.into();
    }
    let a = f.abs();
    if (1e-4..1e16).contains(&a) {
        let s = format!("{f:?}");
        if s.contains('.') || s.contains('e') {
            s
        } else {
            format!("{s}.0")
        }
    } else {
        // Rust's `{:e}` is the shortest round trip too: `1e-5`, `1.5e16`.
        let s = format!("{f:e}");
        let (mant, exp) = s.split_once('e').expect("exponent form");
        let exp: i32 = exp.parse().expect("an exponent");
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mant}e{sign}{:02}", exp.abs())
    }
}

/// A JSON string as `json.dumps` writes it (`ascii`: `ensure_ascii=True`).
fn quote(s: &str, ascii: bool, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c if ascii && !c.is_ascii() => {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts() -> ChatOptions {
        ChatOptions {
            add_generation_prompt: true,
            bos_token: "<s>".into(),
            eos_token: "</s>".into(),
            ..ChatOptions::bare()
        }
    }

    /// Hostile templates and conversations end in errors that say what went wrong: a
    /// syntax error with its line, `raise_exception`'s message, a template that would loop
    /// for ever (out of fuel), and messages that are not a conversation.
    #[test]
    fn bad_templates_and_messages_are_refused() {
        let m = serde_json::json!([{"role": "user", "content": "hi"}]);
        let e = ChatTemplate::new("{% if %}").err().unwrap().to_string();
        assert!(
            e.contains("does not compile") && e.contains("line 1"),
            "{e}"
        );
        let t = ChatTemplate::new("{{ raise_exception('only user turns') }}").unwrap();
        let e = t.render(&m, &opts()).unwrap_err().to_string();
        assert!(e.contains("only user turns"), "{e}");
        let t = ChatTemplate::new(
            "{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}",
        )
        .unwrap();
        let start = std::time::Instant::now();
        let e = t.render(&m, &opts()).unwrap_err().to_string();
        assert!(e.contains("fuel"), "{e}");
        assert!(start.elapsed().as_secs() < 30);
        let t = ChatTemplate::new("{{ messages[0].content }}").unwrap();
        for bad in [
            serde_json::json!({"role": "user"}),
            serde_json::json!([1]),
            serde_json::json!([{"content": "x"}]),
            serde_json::json!([{"role": 3, "content": "x"}]),
            serde_json::json!([{"role": "user", "content": 5}]),
        ] {
            assert!(t.render(&bad, &opts()).is_err(), "{bad}");
        }
        assert!(ChatTemplate::new(&"x".repeat(MAX_TEMPLATE_BYTES + 1)).is_err());
    }

    /// `tojson` writes what Python's `json.dumps` writes: separators, non-ASCII kept (or
    /// escaped with `ensure_ascii`), float reprs, `indent`, `sort_keys`.
    #[test]
    fn tojson_is_python_s_json_dumps() {
        let m = serde_json::json!([{"role": "user", "content": "hi", "x": {"b": 1.0, "a": [1, 2.5, 1e-5, 1e16, "é\"\n", null, true]}}]);
        let render = |src: &str| ChatTemplate::new(src).unwrap().render(&m, &opts()).unwrap();
        assert_eq!(
            render("{{ messages[0].x|tojson }}"),
            r#"{"b": 1.0, "a": [1, 2.5, 1e-05, 1e+16, "é\"\n", null, true]}"#
        );
        assert_eq!(
            render("{{ messages[0].x|tojson(sort_keys=true, ensure_ascii=true) }}"),
            r#"{"a": [1, 2.5, 1e-05, 1e+16, "\u00e9\"\n", null, true], "b": 1.0}"#
        );
        assert_eq!(
            render("{{ messages[0].x.a[:2]|tojson(indent=2) }}"),
            "[\n  1,\n  2.5\n]"
        );
    }
}

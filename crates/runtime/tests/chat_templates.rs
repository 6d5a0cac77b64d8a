//! Chat templates rendered by `dspark_runtime::chat` against Python's jinja2 with Hugging
//! Face's settings (`tests/python/render_chat.py`), on the templates llama.cpp ships
//! (`models/templates/*.jinja` from the llama-cpp-python 0.3.36 sdist, fetched by
//! `scripts/fetch-assets.sh` into `$DSPARK_ASSETS`): the same text for every conversation,
//! or an error from both.

use std::path::PathBuf;

use dspark_runtime::chat::{ChatOptions, ChatTemplate};
use serde_json::json;

fn templates_dir() -> PathBuf {
    let assets = std::env::var("DSPARK_ASSETS")
        .expect("DSPARK_ASSETS: run the README's test command (scripts/test.sh fetches them)");
    PathBuf::from(assets).join("llama.cpp/models/templates")
}

fn python() -> String {
    std::env::var("DSPARK_PYTHON").unwrap_or_else(|_| "python3".into())
}

/// Conversations every template is tried on: a user turn; a system prompt; several turns
/// (with quotes, a backslash, non-ASCII and a newline); a conversation ending with the
/// assistant, without a generation prompt.
fn cases() -> serde_json::Value {
    json!({
        "bos_token": "<s>",
        "eos_token": "</s>",
        "now": "2026-03-07 09:05:00",
        "conversations": [
            {"messages": [{"role": "user", "content": "What is the capital of France?"}],
             "add_generation_prompt": true},
            {"messages": [{"role": "system", "content": "You are a terse assistant."},
                          {"role": "user", "content": "Name three primes."}],
             "add_generation_prompt": true},
            {"messages": [{"role": "system", "content": "Answer in French.\nBe \"polite\"."},
                          {"role": "user", "content": "Hello — how are you? ☕"},
                          {"role": "assistant", "content": "Très bien, merci ! C:\\path"},
                          {"role": "user", "content": "  And the weather?  "}],
             "add_generation_prompt": true},
            {"messages": [{"role": "user", "content": "2 + 2?"},
                          {"role": "assistant", "content": "4"}],
             "add_generation_prompt": false}
        ]
    })
}

/// Renders `name` with both engines: per conversation (ours, theirs), each `Ok(text)` or
/// `Err(message)`.
fn both(name: &str) -> Vec<(Result<String, String>, Result<String, String>)> {
    let path = templates_dir().join(name);
    let source =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let cases = cases();
    let dir = tempfile::tempdir().unwrap();
    let cases_path = dir.path().join("cases.json");
    std::fs::write(&cases_path, cases.to_string()).unwrap();
    let out = std::process::Command::new(python())
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../tests/python/render_chat.py"
        ))
        .arg(&path)
        .arg(&cases_path)
        .output()
        .expect("run tests/python/render_chat.py");
    assert!(
        out.status.success(),
        "render_chat.py: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let theirs: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    let now =
        chrono::NaiveDateTime::parse_from_str(cases["now"].as_str().unwrap(), "%Y-%m-%d %H:%M:%S")
            .unwrap();
    let template = ChatTemplate::new(&source);
    cases["conversations"]
        .as_array()
        .unwrap()
        .iter()
        .zip(theirs)
        .map(|(c, t)| {
            let opts = ChatOptions {
                add_generation_prompt: c["add_generation_prompt"].as_bool().unwrap(),
                bos_token: "<s>".into(),
                eos_token: "</s>".into(),
                now: Some(now),
                extra: serde_json::Map::new(),
            };
            let ours = match &template {
                Ok(t) => t.render(&c["messages"], &opts).map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            };
            let theirs = match (t.get("text"), t.get("error")) {
                (Some(s), _) => Ok(s.as_str().unwrap().to_string()),
                (_, Some(e)) => Err(e.as_str().unwrap().to_string()),
                _ => panic!("render_chat.py printed {t}"),
            };
            (ours, theirs)
        })
        .collect()
}

/// The templates of the model families llama.cpp and its users run most: every
/// conversation renders to jinja2's text, byte for byte (or both refuse it).
#[test]
fn templates_render_as_hugging_face_renders_them() {
    let names = [
        "Qwen-Qwen3-0.6B.jinja",
        "Qwen3-Coder.jinja",
        "HuggingFaceTB-SmolLM3-3B.jinja",
        "Kimi-K3.jinja",
        "meta-llama-Llama-3.1-8B-Instruct.jinja",
        "meta-llama-Llama-3.2-3B-Instruct.jinja",
        "meta-llama-Llama-3.3-70B-Instruct.jinja",
        "mistralai-Mistral-Nemo-Instruct-2407.jinja",
        "Mistral-Small-3.2-24B-Instruct-2506.jinja",
        "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja",
        "deepseek-ai-DeepSeek-V3.1.jinja",
        "google-gemma-2-2b-it.jinja",
        "openai-gpt-oss-120b.jinja",
    ];
    let mut failed = Vec::new();
    for name in names {
        let pairs = both(name);
        assert!(
            pairs[0].1.is_ok(),
            "{name}: jinja2 does not render a single user turn: {:?}",
            pairs[0].1
        );
        for (i, (ours, theirs)) in pairs.into_iter().enumerate() {
            match (&ours, &theirs) {
                (Ok(a), Ok(b)) if a == b => {}
                (Err(_), Err(_)) => {}
                _ => failed.push(format!(
                    "{name} conversation {i}:\n  dspark: {ours:?}\n  jinja2: {theirs:?}"
                )),
            }
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

/// Every template llama.cpp ships (70): each conversation renders alike.
#[test]
fn every_shipped_template_is_tried() {
    let mut names: Vec<String> = std::fs::read_dir(templates_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".jinja"))
        .collect();
    names.sort();
    let (mut same, mut total) = (0, 0);
    for name in &names {
        let pairs = both(name);
        let alike = pairs
            .iter()
            .filter(|(a, b)| match (a, b) {
                (Ok(a), Ok(b)) => a == b,
                (Err(_), Err(_)) => true,
                _ => false,
            })
            .count();
        if alike < pairs.len() {
            eprintln!("{name}: {alike} of {} alike", pairs.len());
        }
        same += alike;
        total += pairs.len();
    }
    eprintln!(
        "{same} of {total} conversations render alike over {} templates",
        names.len()
    );
    assert!(names.len() >= 60, "{} templates found", names.len());
    assert_eq!(
        same, total,
        "conversations that render differently (listed above)"
    );
}

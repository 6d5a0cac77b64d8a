//! The real SmolLM2-135M-Instruct (Q4_1, llama.cpp's `llama` architecture, fetched by
//! `scripts/fetch-assets.sh` into `$DSPARK_ASSETS`) against llama.cpp's greedy continuations
//! of eight ChatML prompts (`testdata/llama/smollm2-greedy.json`, made by
//! `bench/smollm2_greedy_fixture.py` with llama.cpp's CPU defaults: flash attention, F16
//! K/V cache).
//!
//! dspark computes this model as llama.cpp's CPU backend does, operation by operation
//! (ggml's vectorised `expf` in SwiGLU, its RMSNorm rounding, the fused RoPE products, its
//! Q4_1 and Q8_0 lane orders, its flash attention's F16 dot products and fused sum), so
//! `dspark generate -p PROMPT --json` must give llama-tokenize's prompt ids and exactly
//! llama.cpp's greedy tokens, every step of every prompt — no near-tie allowance.

use std::fs;
use std::path::{Path, PathBuf};

use crate::common::*;

fn smollm2() -> PathBuf {
    let dir = std::env::var_os("DSPARK_ASSETS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.cache/assets"));
    let p = dir.join("SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(
        p.is_file(),
        "{}: missing; run scripts/fetch-assets.sh (or point DSPARK_ASSETS at its output)",
        p.display()
    );
    p
}

struct Case {
    message: String,
    prompt: String,
    prompt_tokens: Vec<u32>,
    greedy: Vec<u32>,
}

fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array()
        .expect("an id list")
        .iter()
        .map(|x| x.as_u64().expect("an id") as u32)
        .collect()
}

fn fixture(model: &Path) -> Vec<Case> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/llama/smollm2-greedy.json");
    let v: serde_json::Value = serde_json::from_slice(&fs::read(&path).unwrap()).unwrap();
    assert_eq!(
        sha256_file(model),
        v["model_sha256"].as_str().unwrap(),
        "{}: not the file the fixture was made with",
        model.display()
    );
    v["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| Case {
            message: c["message"].as_str().unwrap().into(),
            prompt: c["prompt"].as_str().unwrap().into(),
            prompt_tokens: ids(&c["prompt_tokens"]),
            greedy: ids(&c["greedy"]),
        })
        .collect()
}

#[test]
fn smollm2_greedy_follows_llama_cpp() {
    let path = smollm2();
    let cases = fixture(&path);
    assert_eq!(cases.len(), 8);
    for c in &cases {
        let n = c.greedy.len().to_string();
        let o = dspark(&[
            "generate",
            "-m",
            s(&path),
            "-p",
            &c.prompt,
            "-n",
            &n,
            "--ignore-eos",
            "--json",
        ]);
        assert_ok(&o);
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(
            ids(&v["prompt_tokens"]),
            c.prompt_tokens,
            "{:?}: the prompt's ids are not llama-tokenize's",
            c.message
        );
        assert_eq!(
            ids(&v["tokens"]),
            c.greedy,
            "{:?}: greedy tokens differ from llama.cpp's",
            c.message
        );
    }
}

/// `generate --chat`: each fixture message rendered by the GGUF's own chat template is the
/// prompt llama.cpp was given (its default system message included), tokenized to the
/// same ids, decoded to the same greedy tokens; `--system` replaces the default system
/// message; `--messages` renders a multi-turn conversation as the template does; the
/// flags that make no sense together are usage errors, and a malformed conversation is
/// refused naming the message.
#[test]
fn chat_renders_with_the_gguf_s_template() {
    let model = smollm2();
    let cases = fixture(&model);
    for c in cases.iter().take(3) {
        let o = dspark(&[
            "generate",
            "-m",
            s(&model),
            "--chat",
            "-p",
            &c.message,
            "-n",
            "8",
            "--ignore-eos",
            "--json",
            "-t",
            "2",
        ]);
        assert_ok(&o);
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(
            v["chat_prompt"].as_str().unwrap(),
            c.prompt,
            "{}",
            c.message
        );
        assert_eq!(ids(&v["prompt_tokens"]), c.prompt_tokens, "{}", c.message);
        assert_eq!(ids(&v["tokens"]), c.greedy[..8], "{}", c.message);
    }
    let o = dspark(&[
        "generate",
        "-m",
        s(&model),
        "--chat",
        "--system",
        "Be terse.",
        "-p",
        "Hi",
        "-n",
        "1",
        "--json",
    ]);
    assert_ok(&o);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        v["chat_prompt"].as_str().unwrap(),
        "<|im_start|>system\nBe terse.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    );
    let t = Tmp::new();
    let conv = t.path("conv.json");
    fs::write(
        &conv,
        r#"{"messages": [{"role": "user", "content": "2 + 2?"}, {"role": "assistant", "content": "4"}, {"role": "user", "content": "And 3 + 3?"}]}"#,
    )
    .unwrap();
    let o = dspark(&[
        "generate",
        "-m",
        s(&model),
        "--messages",
        s(&conv),
        "-n",
        "1",
        "--json",
    ]);
    assert_ok(&o);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        v["chat_prompt"].as_str().unwrap(),
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\n2 + 2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n<|im_start|>user\nAnd 3 + 3?<|im_end|>\n<|im_start|>assistant\n"
    );
    // A template file replaces the GGUF's.
    let tpl = t.path("plain.jinja");
    fs::write(&tpl, "{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}{% if add_generation_prompt %}[assistant]{% endif %}").unwrap();
    let o = dspark(&[
        "generate",
        "-m",
        s(&model),
        "--chat",
        "--chat-template-file",
        s(&tpl),
        "-p",
        "Hi",
        "-n",
        "1",
        "--json",
    ]);
    assert_ok(&o);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["chat_prompt"].as_str().unwrap(), "[user] Hi\n[assistant]");
    // Refusals.
    let usage = |args: &[&str], says: &str| {
        let o = dspark(args);
        assert_eq!(
            o.status.code(),
            Some(2),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(says), "{args:?}: {err}");
    };
    usage(
        &[
            "generate",
            "-m",
            s(&model),
            "--chat",
            "--prompt-tokens",
            "1,2",
        ],
        "--prompt-tokens",
    );
    usage(
        &[
            "generate",
            "-m",
            s(&model),
            "--chat-template-file",
            s(&tpl),
            "-p",
            "Hi",
        ],
        "--chat",
    );
    fs::write(&conv, r#"[{"content": "no role"}]"#).unwrap();
    let o = dspark(&[
        "generate",
        "-m",
        s(&model),
        "--messages",
        s(&conv),
        "-n",
        "1",
    ]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("message 0 has no `role`"));
    fs::write(&tpl, "{% if %}").unwrap();
    let o = dspark(&[
        "generate",
        "-m",
        s(&model),
        "--chat",
        "--chat-template-file",
        s(&tpl),
        "-p",
        "Hi",
    ]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("plain.jinja") && err.contains("does not compile"),
        "{err}"
    );
}

/// `generate --chat` renders as llama-server's `/apply-template` does
/// (`testdata/chat/apply-template.json`, made by `bench/chat_template_fixture.py` with
/// llama-server on this model): 11 templates llama.cpp ships × 4 conversations (one turn,
/// a system message, several turns with non-ASCII and quotes, content as typed parts) —
/// its context variables (`enable_thinking`, today's `date_string`), its message
/// adjustments (typed parts joined for string-only templates, Gemma's system message
/// merged into the user's) and the model's BOS / EOS texts — byte for byte.
#[test]
fn chat_renders_as_llama_server_renders() {
    let model = smollm2();
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/chat/apply-template.json");
    let v: serde_json::Value = serde_json::from_slice(&fs::read(&path).unwrap()).unwrap();
    assert_eq!(sha256_file(&model), v["model_sha256"].as_str().unwrap());
    let templates = std::env::var_os("DSPARK_ASSETS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.cache/assets"))
        .join("llama.cpp/models/templates");
    let t = Tmp::new();
    let conv = t.path("conv.json");
    let date = v["date"].as_str().unwrap();
    let mut failed = Vec::new();
    for c in v["cases"].as_array().unwrap() {
        let name = c["template"].as_str().unwrap();
        fs::write(&conv, c["messages"].to_string()).unwrap();
        let o = dspark(&[
            "generate",
            "-m",
            s(&model),
            "--messages",
            s(&conv),
            "--chat-template-file",
            s(&templates.join(name)),
            "--chat-date",
            date,
            "-n",
            "1",
            "--json",
        ]);
        assert_ok(&o);
        let got: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        if got["chat_prompt"] != c["prompt"] {
            failed.push(format!(
                "{name} {}:\n  dspark:       {:?}\n  llama-server: {:?}",
                c["messages"], got["chat_prompt"], c["prompt"]
            ));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

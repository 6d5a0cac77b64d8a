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

/// SmolLM2-135M-Instruct Q4_1, fetched by the test command into `$DSPARK_ASSETS`.
pub fn smollm2() -> PathBuf {
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

/// A random drafter at SmolLM2's shape (`synth --geometry llama-smollm2`), as a GGUF: it
/// drafts for the real target (acceptance aside, which these tests do not need).
fn random_drafter(t: &Tmp) -> PathBuf {
    let dir = t.path("synth");
    assert_ok(&dspark(&[
        "synth",
        "--geometry",
        "llama-smollm2",
        "--out",
        s(&dir),
        "-q",
    ]));
    let gguf = t.path("draft.gguf");
    assert_ok(&dspark(&["convert", s(&dir.join("draft")), "-o", s(&gguf)]));
    gguf
}

/// `generate --chat --json` of one user message: (prompt ids, output ids).
fn generate_chat(model: &Path, message: &str, n: &str) -> (Vec<u32>, Vec<u32>) {
    let o = dspark(&[
        "generate",
        "-m",
        s(model),
        "--chat",
        "-p",
        message,
        "-n",
        n,
        "--json",
        "-t",
        "1",
        "--chat-date",
        "2026-12-03",
    ]);
    assert_ok(&o);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    (ids(&v["prompt_tokens"]), ids(&v["tokens"]))
}

#[test]
fn chat_keeps_the_cache_across_turns_and_speculation_changes_nothing() {
    let model = smollm2();
    let t = Tmp::new();
    let draft = random_drafter(&t);
    let input = "What is the capital of France?\nAnd of Germany?\n/reset\nHi\\\nthere\n";
    let m = s(&model);
    let (plain_out, plain) = chat(&["-m", m, "-n", "24", "-t", "1"], input);
    assert_eq!(plain.len(), 3, "{plain:?}");
    // Turn 0 is `generate --chat` of the same message, token for token.
    let (p0, o0) = generate_chat(&model, "What is the capital of France?", "24");
    assert_eq!(ids(&plain[0]["prompt_tokens"]), p0);
    assert_eq!(ids(&plain[0]["tokens"]), o0);
    assert_eq!(plain[0]["prompt_cached"], 0);
    // Turn 1 continues turn 0's tokens exactly (its reply as generated, not re-tokenized)
    // and evaluates only what follows them: the sessions held all but the last token.
    let p1 = ids(&plain[1]["prompt_tokens"]);
    let mut before = p0.clone();
    before.extend(&o0);
    assert!(p1.starts_with(&before), "{p1:?}");
    assert!(p1.len() > before.len());
    assert_eq!(plain[1]["prompt_cached"], before.len() - 1);
    assert_eq!(
        plain[1]["stats"]["prompt_tokens"].as_u64().unwrap() as usize,
        p1.len() - (before.len() - 1)
    );
    // After /reset the conversation starts anew; a `\` line end joins the lines.
    assert_eq!(plain[2]["prompt_cached"], 0);
    let (p2, o2) = generate_chat(&model, "Hi\nthere", "24");
    assert_eq!(ids(&plain[2]["prompt_tokens"]), p2);
    assert_eq!(ids(&plain[2]["tokens"]), o2);
    // Replies stream to stdout (without the end-of-turn token's text).
    for turn in &plain {
        assert!(plain_out.contains(turn["reply"].as_str().unwrap()));
    }
    assert!(!plain_out.contains("<|im_end|>"), "{plain_out}");
    // With a drafter, fixed or adaptive, every turn's tokens are the same.
    for schedule in ["fixed", "adaptive"] {
        let (_, spec) = chat(
            &[
                "-m",
                m,
                "-md",
                s(&draft),
                "-n",
                "24",
                "--schedule",
                schedule,
                "-t",
                "1",
            ],
            input,
        );
        assert_eq!(spec.len(), 3);
        for (a, b) in plain.iter().zip(&spec) {
            assert_eq!(a["tokens"], b["tokens"], "{schedule}");
            assert_eq!(a["prompt_tokens"], b["prompt_tokens"], "{schedule}");
            assert_eq!(a["prompt_cached"], b["prompt_cached"], "{schedule}");
        }
        assert!(spec[0]["stats"]["rounds"].as_u64().unwrap() > 0 || schedule == "adaptive");
    }
}

#[test]
fn chat_ctrl_c_ends_the_reply_not_the_conversation() {
    use std::io::{Read, Write};
    let model = smollm2();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_dspark"))
        .args([
            "chat",
            "-m",
            s(&model),
            "-n",
            "100000",
            "--ignore-eos",
            "-c",
            "1024",
        ])
        .args(["--json-stats", "-t", "1"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = child.stdout.take().unwrap();
    stdin.write_all(b"Tell me a long story.\n").unwrap();
    // The prompt marker, then reply bytes while it runs.
    let mut first = [0u8; 40];
    stdout.read_exact(&mut first).unwrap();
    assert!(
        child.try_wait().unwrap().is_none(),
        "it ended before streaming"
    );
    let ok = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(ok.success());
    // The conversation goes on: a second message gets its reply.
    stdin.write_all(b"Thanks!\n").unwrap();
    drop(stdin);
    let mut rest = Vec::new();
    stdout.read_to_end(&mut rest).unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{:?}", o.status);
    let err = String::from_utf8(o.stderr).unwrap();
    let turns: Vec<serde_json::Value> = err
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(turns.len(), 2, "{err}");
    assert_eq!(turns[0]["stats"]["stop_reason"], "interrupted");
    let n0 = turns[0]["tokens"].as_array().unwrap().len();
    assert!(n0 > 0 && n0 < 900, "{n0}");
    // The second turn continued the first's sessions, interrupted reply included, and
    // ended on its own (the context: -n is beyond it).
    assert!(turns[1]["prompt_cached"].as_u64().unwrap() as usize >= n0);
    assert_eq!(turns[1]["stats"]["stop_reason"], "context");
}

//! `dspark tokenize`: llama-tokenize's output (expected texts taken from llama.cpp's
//! `llama-tokenize` on the same files), its flags and defaults, any GGUF with a vocabulary
//! (a target, a vocabulary-only file), and refusals naming the key or the input.

use std::fs;
use std::path::PathBuf;

use dspark_gguf::{Array, Value};

use crate::common::*;

/// The Kimi K2 (`kimi-k2`) vocabulary the runtime's tokenizer tests use.
fn kimi() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../runtime/testdata/tokenizer/kimi-k2.gguf")
}

fn run(args: &[&str]) -> (Option<i32>, Vec<u8>, String) {
    let o = dspark(args);
    (
        o.status.code(),
        o.stdout,
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn prints_tokens_as_llama_tokenize_does() {
    let k = kimi();
    // llama-tokenize -m kimi-k2.gguf -p 'DON'\''T<|im_end|>中文\n' --show-count
    let (code, out, err) = run(&[
        "tokenize",
        "-m",
        s(&k),
        "-p",
        "DON'T<|im_end|>中文\\n",
        "--show-count",
    ]);
    assert_eq!(code, Some(0), "{err}");
    let want = "   428 -> '[BOS]'\n   332 -> 'DON'T'\n   430 -> '<|im_end|>'\n   260 -> '中文'\n    10 -> '\n'\nTotal number of tokens: 5\n";
    assert_eq!(String::from_utf8(out).unwrap(), want);
    // llama-tokenize ... -p '<|im_end|>x' --ids --no-bos --no-parse-special
    let (code, out, _) = run(&[
        "tokenize",
        "-m",
        s(&k),
        "-p",
        "<|im_end|>x",
        "--ids",
        "--no-bos",
        "--no-parse-special",
    ]);
    assert_eq!(code, Some(0));
    assert_eq!(
        out,
        b"[60, 124, 105, 109, 95, 101, 110, 100, 124, 62, 120]\n"
    );
    // With the defaults: BOS, the special token matched.
    let (_, out, _) = run(&["tokenize", "-m", s(&k), "-p", "<|im_end|>x", "--ids"]);
    assert_eq!(out, b"[428, 430, 120]\n");
}

#[test]
fn text_from_a_file_or_stdin_escapes_processed_unless_told() {
    let t = Tmp::new();
    let k = kimi();
    let f = t.path("text");
    fs::write(&f, "x\\ny\n").unwrap();
    let (_, escaped, _) = run(&["tokenize", "-m", s(&k), "-f", s(&f), "--ids", "--no-bos"]);
    assert_eq!(escaped, b"[120, 10, 121, 10]\n");
    let (_, raw, _) = run(&[
        "tokenize",
        "-m",
        s(&k),
        "-f",
        s(&f),
        "--ids",
        "--no-bos",
        "--no-escape",
    ]);
    assert_eq!(raw, b"[120, 92, 110, 121, 10]\n");
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_dspark"))
        .args(["tokenize", "-m", s(&k), "--stdin", "--ids", "--no-bos"])
        .stdin(fs::File::open(&f).unwrap())
        .output()
        .unwrap();
    assert_eq!(o.stdout, escaped);
    // An empty text is no tokens (but BOS).
    fs::write(&f, "").unwrap();
    let (code, out, _) = run(&["tokenize", "-m", s(&k), "-f", s(&f), "--ids"]);
    assert_eq!((code, out), (Some(0), b"[428]\n".to_vec()));
}

#[test]
fn a_target_gguf_tokenizes_with_its_own_vocabulary() {
    let t = Tmp::new();
    let dir = t.path("pair");
    synth_qwen3(&dir, 1);
    let target = dir.join("target.gguf");
    let (code, out, err) = run(&[
        "tokenize",
        "-m",
        s(&target),
        "-p",
        "ab ab<|im_end|>",
        "--ids",
    ]);
    assert_eq!(code, Some(0), "{err}");
    // llama-tokenize -m target.gguf -p 'ab ab<|im_end|>' --ids (the synthetic vocabulary:
    // qwen2 pre-tokenizer, no BOS, merges up to " a" + "b" left out): "ab" " a" "b" <|im_end|>.
    assert_eq!(out, b"[283, 256, 98, 511]\n");
}

#[test]
fn vocab_only_files_as_llama_tokenize() {
    let assets = std::env::var_os("DSPARK_ASSETS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.cache/assets"));
    let spm = assets.join("llama.cpp/models/ggml-vocab-llama-spm.gguf");
    assert!(
        spm.is_file(),
        "{}: missing; run scripts/fetch-assets.sh (or point DSPARK_ASSETS at its output)",
        spm.display()
    );
    // llama-tokenize -m ggml-vocab-llama-spm.gguf -p 'Hello\nworld\xe2\x82\xac'
    let (code, out, err) = run(&[
        "tokenize",
        "-m",
        s(&spm),
        "-p",
        "Hello\\nworld\\xe2\\x82\\xac",
    ]);
    assert_eq!(code, Some(0), "{err}");
    let want =
        "     1 -> '<s>'\n 15043 -> ' Hello'\n    13 -> '\n'\n 11526 -> 'world'\n 30181 -> '€'\n";
    assert_eq!(String::from_utf8(out).unwrap(), want);
}

#[test]
fn refusals_name_the_key_or_the_input() {
    let t = Tmp::new();
    let k = kimi();
    let bytes = fs::read(&k).unwrap();
    let parts = dspark_testkit::craft::Parts::of(&bytes);
    let bad = t.path("bad.gguf");
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "unknown pre-tokenizer",
            parts.clone().set("tokenizer.ggml.pre", Value::String("no-such".into())).bytes(),
            "tokenizer.ggml.pre `no-such` is not a pre-tokenizer llama.cpp knows (supported: default, llama3",
        ),
        (
            "pre-tokenizer dspark does not run",
            parts.clone().set("tokenizer.ggml.pre", Value::String("deepseek-v3".into())).bytes(),
            "tokenizer.ggml.pre `deepseek-v3` is a llama.cpp pre-tokenizer dspark does not run",
        ),
        (
            "unknown model",
            parts.clone().set("tokenizer.ggml.model", Value::String("bert".into())).bytes(),
            "tokenizer.ggml.model `bert` is not supported (supported: gpt2",
        ),
        (
            "no vocabulary",
            parts.clone().set("tokenizer.ggml.model", Value::String("none".into())).remove("tokenizer.ggml.tokens").bytes(),
            "key `tokenizer.ggml.model`: is `none`: the file has no vocabulary",
        ),
        (
            "bos outside",
            parts.clone().set("tokenizer.ggml.bos_token_id", Value::U32(1 << 20)).bytes(),
            "key `tokenizer.ggml.bos_token_id`: is 1048576, outside the vocabulary",
        ),
        (
            "merge naming a missing token",
            parts.clone().set("tokenizer.ggml.merges", Value::Array(Array::String(vec!["q z".into()]))).bytes(),
            "key `tokenizer.ggml.merges`: merge 0 (\"q z\") names \"qz\", which is not a token",
        ),
    ];
    for (what, b, want) in cases {
        fs::write(&bad, b).unwrap();
        let (code, _, err) = run(&["tokenize", "-m", s(&bad), "-p", "x"]);
        assert_eq!(code, Some(1), "{what}: {err}");
        assert!(err.contains(want), "{what}: expected `{want}` in {err}");
        assert!(!err.contains("panicked"), "{what}: {err}");
    }
    // The text: not UTF-8 (after escapes), a missing file, no text at all (usage).
    let (code, _, err) = run(&["tokenize", "-m", s(&k), "-p", "a\\xff"]);
    assert_eq!(code, Some(1));
    assert!(
        err.contains("the prompt: the text is not UTF-8 (byte 1)"),
        "{err}"
    );
    let (code, _, err) = run(&["tokenize", "-m", s(&k), "-f", s(&t.path("nope"))]);
    assert_eq!(code, Some(1));
    assert!(err.contains("nope: cannot open"), "{err}");
    let (code, _, _) = run(&["tokenize", "-m", s(&k)]);
    assert_eq!(code, Some(2));
}

/// SmolLM2's own vocabulary (`scripts/fetch-assets.sh`) through the command, on every
/// fifth text of the fixture the runtime's tokenizer test checks in full
/// (`crates/runtime/testdata/tokenizer/smollm2.jsonl`, llama-tokenize's ids): with the
/// defaults, and with `--no-bos --no-parse-special`.
#[test]
fn smollm2_as_llama_tokenize() {
    let assets = std::env::var_os("DSPARK_ASSETS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.cache/assets"));
    let model = assets.join("SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(
        model.is_file(),
        "{}: missing; run scripts/fetch-assets.sh (or point DSPARK_ASSETS at its output)",
        model.display()
    );
    let fixture = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../runtime/testdata/tokenizer/smollm2.jsonl");
    let t = Tmp::new();
    let text_file = t.path("text");
    let lines: Vec<serde_json::Value> = fs::read_to_string(&fixture)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(lines.len() >= 40, "{} texts", lines.len());
    for row in lines.iter().step_by(5) {
        fs::write(&text_file, row["text"].as_str().unwrap()).unwrap();
        for (flags, key) in [
            (&[][..], "ids"),
            (&["--no-bos", "--no-parse-special"][..], "ids_plain"),
        ] {
            let mut args = vec!["tokenize", "-m", s(&model), "-f", s(&text_file)];
            args.extend_from_slice(&["--ids", "--no-escape"]);
            args.extend_from_slice(flags);
            let (code, out, err) = run(&args);
            assert_eq!(code, Some(0), "{err}");
            let got: serde_json::Value = serde_json::from_slice(&out).unwrap();
            assert_eq!(got, row[key], "{:?} {flags:?}", row["text"]);
        }
    }
}

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

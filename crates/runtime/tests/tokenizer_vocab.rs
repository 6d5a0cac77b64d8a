//! Tokenizers rebuilt from GGUF vocabularies against llama.cpp's own vocabulary tests:
//! for each `ggml-vocab-*.gguf` with texts (`.inp`, separated by `__ggml_vocab_test__`
//! lines) and the ids llama.cpp must give them (`.out`, encoded without special tokens
//! and without parsing them), every text must give exactly those ids, and decode back to
//! itself. The files (MIT, from llama.cpp via the llama-cpp-python sdist) are fetched by
//! `scripts/fetch-assets.sh` into `$DSPARK_ASSETS` (default `<repo>/.cache/assets`).
//!
//! Also: SmolLM2's own vocabulary on texts whose ids `llama-tokenize` gave
//! (`tests/data/tokenizer/`), a Kimi K2 (`kimi-k2`) vocabulary built here, and the
//! build time of the largest vocabularies.

use std::path::{Path, PathBuf};

use dspark_runtime::tokenizer::Tokenizer;

/// Where `scripts/fetch-assets.sh` put the assets.
fn assets() -> PathBuf {
    let dir = std::env::var_os("DSPARK_ASSETS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.cache/assets"));
    assert!(
        dir.join("llama.cpp/models").is_dir(),
        "{}: no llama.cpp vocabulary files; run scripts/fetch-assets.sh (or point DSPARK_ASSETS at its output)",
        dir.display()
    );
    dir
}

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path)
        .unwrap_or_else(|e| panic!("{}: {e}; run scripts/fetch-assets.sh", path.display()))
}

/// The tokenizer of a GGUF file, through the contract's check of its tokenizer keys.
fn tokenizer_of(path: &Path) -> Tokenizer {
    let bytes = read(path);
    let file = dspark_contract::vocab_file(&bytes).expect("parses");
    let vocab = dspark_contract::tokenizer(&file).unwrap_or_else(|e| panic!("{e}"));
    Tokenizer::from_gguf_named(&vocab, &path.display().to_string())
        .unwrap_or_else(|e| panic!("{e}"))
}

/// `(text, ids)` pairs of a `.inp`/`.out` test.
fn cases(inp: &[u8], out: &[u8]) -> Vec<(String, Vec<u32>)> {
    let inp = String::from_utf8(inp.to_vec()).expect("UTF-8 texts");
    let sep = "\n__ggml_vocab_test__\n";
    let mut texts = Vec::new();
    let mut rest = inp.as_str();
    while !rest.is_empty() {
        match rest.find(sep) {
            Some(i) => {
                texts.push(rest[..i].to_string());
                rest = &rest[i + sep.len()..];
            }
            None => {
                texts.push(rest.to_string());
                rest = "";
            }
        }
    }
    let outs: Vec<Vec<u32>> = String::from_utf8(out.to_vec())
        .expect("UTF-8 ids")
        .lines()
        .map(|l| {
            l.split_whitespace()
                .map(|t| t.parse().expect("an id"))
                .collect()
        })
        .collect();
    assert_eq!(texts.len(), outs.len(), "as many texts as id lines");
    texts.into_iter().zip(outs).collect()
}

/// Checks every text of `ggml-vocab-{name}.gguf.inp`.
fn vocab_test(name: &str) {
    let dir = assets().join("llama.cpp/models");
    let gguf = dir.join(format!("ggml-vocab-{name}.gguf"));
    let tok = tokenizer_of(&gguf);
    let pairs = cases(
        &read(&dir.join(format!("ggml-vocab-{name}.gguf.inp"))),
        &read(&dir.join(format!("ggml-vocab-{name}.gguf.out"))),
    );
    assert!(pairs.len() >= 40, "{name}: {} texts", pairs.len());
    let mut bad = Vec::new();
    for (text, want) in &pairs {
        let got = tok.encode_with(text, false, false).unwrap();
        if &got != want {
            bad.push(format!("{text:?}\n    got  {got:?}\n    want {want:?}"));
            continue;
        }
        // Decoding gives the text back (SentencePiece with its space prefix).
        let back = tok.decode(&got).unwrap();
        let spm_prefix = back.len() == text.len() + 1 && back.strip_prefix(' ') == Some(text);
        assert!(
            &back == text || spm_prefix,
            "{name}: {text:?} decodes to {back:?}"
        );
    }
    assert!(
        bad.is_empty(),
        "{name}: {} of {} texts differ:\n  {}",
        bad.len(),
        pairs.len(),
        bad.join("\n  ")
    );
}

#[test]
fn vocab_qwen2() {
    vocab_test("qwen2");
}

#[test]
fn vocab_qwen35() {
    vocab_test("qwen35");
}

#[test]
fn vocab_llama_bpe() {
    vocab_test("llama-bpe");
}

#[test]
fn vocab_gpt_2() {
    vocab_test("gpt-2");
}

#[test]
fn vocab_deepseek_llm() {
    vocab_test("deepseek-llm");
}

#[test]
fn vocab_deepseek_coder() {
    vocab_test("deepseek-coder");
}

#[test]
fn vocab_starcoder() {
    vocab_test("starcoder");
}

#[test]
fn vocab_falcon() {
    vocab_test("falcon");
}

#[test]
fn vocab_refact() {
    vocab_test("refact");
}

#[test]
fn vocab_command_r() {
    vocab_test("command-r");
}

#[test]
fn vocab_mpt() {
    vocab_test("mpt");
}

#[test]
fn vocab_llama_spm() {
    vocab_test("llama-spm");
}

#[test]
fn vocab_phi_3() {
    vocab_test("phi-3");
}

/// `testdata/tokenizer/NAME.jsonl`: `(text, ids with llama-tokenize's defaults, ids
/// without BOS or special-token parsing)`.
fn fixture(name: &str) -> Vec<(String, Vec<u32>, Vec<u32>)> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("testdata/tokenizer")
        .join(name);
    let text = String::from_utf8(read(&path)).unwrap();
    text.lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            let ids = |k: &str| -> Vec<u32> {
                v[k].as_array()
                    .unwrap()
                    .iter()
                    .map(|x| x.as_u64().unwrap() as u32)
                    .collect()
            };
            (
                v["text"].as_str().unwrap().to_string(),
                ids("ids"),
                ids("ids_plain"),
            )
        })
        .collect()
}

/// Every fixture text gives llama-tokenize's ids, with its defaults and without (and, for
/// byte-level vocabularies, decodes back).
fn fixture_test(tok: &Tokenizer, name: &str) {
    fixture_test_with(tok, name, true);
}

fn fixture_test_with(tok: &Tokenizer, name: &str, round_trip: bool) {
    let rows = fixture(name);
    assert!(!rows.is_empty());
    for (text, ids, plain) in rows {
        let add = tok.adds_bos();
        assert_eq!(
            tok.encode_with(&text, add, true).unwrap(),
            ids,
            "{name}: {text:?}"
        );
        assert_eq!(
            tok.encode_with(&text, false, false).unwrap(),
            plain,
            "{name}: {text:?} (plain)"
        );
        if round_trip {
            let back = tok.decode(&ids[usize::from(add)..]).unwrap();
            assert_eq!(back, text, "{name}: {text:?} decodes back");
        }
    }
}

#[test]
fn smollm2_own_vocabulary_as_llama_tokenize() {
    let tok = tokenizer_of(&assets().join("SmolLM2-135M-Instruct.Q4_1.gguf"));
    assert!(!tok.adds_bos());
    fixture_test(&tok, "smollm2.jsonl");
}

#[test]
fn kimi_k2_split_as_llama_tokenize() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/tokenizer/kimi-k2.gguf");
    let tok = tokenizer_of(&path);
    assert!(tok.adds_bos());
    fixture_test(&tok, "kimi-k2.jsonl");
}

/// Texts of `bench/tokenizer_corpus.py` kept for the edges they hit (white-space kinds,
/// upper-case contractions, digits of other scripts, combining marks, ZWJ sequences,
/// special tokens amid spaces, BOM, full-width forms, control bytes), on llama.cpp's test
/// vocabularies.
#[test]
fn handmade_texts_as_llama_tokenize() {
    let dir = assets().join("llama.cpp/models");
    for (name, byte_level) in [("qwen2", true), ("llama-bpe", true), ("llama-spm", false)] {
        let tok = tokenizer_of(&dir.join(format!("ggml-vocab-{name}.gguf")));
        fixture_test_with(&tok, &format!("handmade-{name}.jsonl"), byte_level);
    }
}

//! llama.cpp's `dflash` layout both ways: `convert --layout llama.cpp --vocab-from`
//! writes it (proved by `verify --source`, the independent gguf-py checker
//! `tests/python/check_llama_layout.py` and reproducibility), every runtime command
//! reads it and generates exactly what the `dflash-draft` file of the same source does,
//! and files llama.cpp could carry but dspark does not run are refused by name.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use dspark_gguf::{Array, GgmlType, GgufFile, TensorInfo, Value};
use dspark_testkit::craft::Parts;

use crate::common::*;

fn python() -> String {
    std::env::var("DSPARK_PYTHON").unwrap_or_else(|_| "python3".into())
}

/// Runs the independent llama-layout checker; fails the test if it fails.
pub fn check_llama_layout(draft: &Path, target: &Path, dflash_draft: &Path) {
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/python/check_llama_layout.py");
    let o = Command::new(python())
        .arg(&script)
        .arg(draft)
        .arg("--target")
        .arg(target)
        .arg("--dflash-draft")
        .arg(dflash_draft)
        .output()
        .expect("run the llama-layout checker (the README's test command installs gguf-py)");
    assert!(
        o.status.success(),
        "check_llama_layout.py failed:\n{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Converts the checkpoint `src` in both layouts under `tmp`: dspark's `dflash-draft` file
/// (proved by `verify`) and llama.cpp's layout with `target`'s vocabulary (proved by
/// `verify --source` and the independent checker, and the same bytes when converted
/// again). Returns `(dflash_draft, llama_layout)`.
pub fn convert_both_layouts(tmp: &Tmp, src: &Path, target: &Path) -> (PathBuf, PathBuf) {
    let dd = tmp.path("dd/draft.gguf");
    let ll = tmp.path("ll/draft.gguf");
    fs::create_dir_all(dd.parent().unwrap()).unwrap();
    fs::create_dir_all(ll.parent().unwrap()).unwrap();
    convert_and_prove(src, &dd, &[]);
    let args = ["--layout", "llama.cpp", "--vocab-from", s(target)];
    let mut conv = vec!["convert", s(src), "-o", s(&ll), "-q"];
    conv.extend_from_slice(&args);
    assert_ok(&dspark(&conv));
    let report = ll.with_file_name("conversion-report.json");
    assert_ok(&dspark(&[
        "verify",
        s(&ll),
        "--report",
        s(&report),
        "--source",
        s(src),
    ]));
    check_llama_layout(&ll, target, &dd);
    let again = tmp.path("again.gguf");
    let mut conv = vec!["convert", s(src), "-o", s(&again), "-q", "--force"];
    conv.extend_from_slice(&args);
    assert_ok(&dspark(&conv));
    assert_eq!(fs::read(&again).unwrap(), fs::read(&ll).unwrap());
    (dd, ll)
}

fn tokens_of(out: &std::process::Output) -> Vec<u64> {
    assert_ok(out);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("generate --json");
    v["tokens"]
        .as_array()
        .expect("tokens")
        .iter()
        .map(|t| t.as_u64().unwrap())
        .collect()
}

#[test]
fn llama_layout_is_written_exactly_read_everywhere_and_generates_the_same() {
    let tmp = Tmp::new();
    let dir = tmp.path("pair");
    qwen3_pair(&dir, 5);
    let (target, src) = (dir.join("target.gguf"), dir.join("draft"));
    let (ours, llama) = (dir.join("draft.gguf"), tmp.path("draft-llama.gguf"));
    let report = tmp.path("llama.json");
    assert_ok(&dspark(&[
        "convert",
        s(&src),
        "--layout",
        "llama.cpp",
        "--vocab-from",
        s(&target),
        "-o",
        s(&llama),
        "--report",
        s(&report),
        "-q",
    ]));
    // Proved like the default layout, and by the independent checker.
    let v = dspark(&[
        "verify",
        s(&llama),
        "--report",
        s(&report),
        "--source",
        s(&src),
    ]);
    assert_ok(&v);
    assert!(String::from_utf8_lossy(&v.stdout).contains("llama.cpp dflash drafter contract"));
    check_llama_layout(&llama, &target, &ours);
    // Reproducible: a second conversion is byte-identical.
    let again = tmp.path("again.gguf");
    assert_ok(&dspark(&[
        "convert",
        s(&src),
        "--layout",
        "llama.cpp",
        "--vocab-from",
        s(&target),
        "-o",
        s(&again),
        "--report",
        s(&tmp.path("again.json")),
        "-q",
    ]));
    assert!(fs::read(&again).unwrap() == fs::read(&llama).unwrap());

    // The header: llama.cpp's keys, the target's vocabulary, 1-based layer inputs.
    let bytes = fs::read(&llama).unwrap();
    let file = GgufFile::parse(&bytes).unwrap();
    let tbytes = fs::read(&target).unwrap();
    let tfile = GgufFile::parse(&tbytes).unwrap();
    assert_eq!(
        file.get("general.architecture").and_then(Value::as_str),
        Some("dflash")
    );
    assert_eq!(
        file.get("dflash.target_layers"),
        Some(&Value::Array(Array::I32(vec![2, 3])))
    );
    assert_eq!(
        file.get("dflash.sample_from_anchor"),
        Some(&Value::Bool(true))
    );
    assert_eq!(
        file.get("dflash.has_confidence_head"),
        Some(&Value::Bool(true))
    );
    for (k, v) in tfile
        .kvs()
        .iter()
        .filter(|(k, _)| k.starts_with("tokenizer."))
    {
        assert_eq!(file.get(k), Some(v), "{k} is the target's");
    }
    assert!(file
        .kvs()
        .iter()
        .all(|(k, _)| !k.starts_with("dflash-draft.")));
    assert!(file.tensor("fc.weight").is_ok() && file.tensor("conf_proj.weight").is_ok());

    // inspect names the layout; generate and bench read it; speculation is lossless and
    // the two layouts of one source draft the same tokens.
    let i = dspark(&["inspect", s(&llama), "--json"]);
    assert_ok(&i);
    let doc: serde_json::Value = serde_json::from_slice(&i.stdout).unwrap();
    assert_eq!(doc["contract"]["layout"], "llama.cpp", "{doc}");
    let gen = |draft: Option<&Path>| {
        let mut args = vec![
            "generate",
            "-m",
            s(&target),
            "-p",
            "the quick brown fox",
            "-n",
            "48",
            "--json",
            "--ignore-eos",
        ];
        if let Some(d) = draft {
            // A fixed schedule: the adaptive one follows measured times, so two runs may
            // draft different blocks (the same tokens come out either way).
            args.extend(["-md", s(d), "--schedule", "fixed"]);
        }
        dspark(&args)
    };
    let ar = tokens_of(&gen(None));
    let with_ours = gen(Some(&ours));
    let with_llama = gen(Some(&llama));
    assert_eq!(tokens_of(&with_ours), ar);
    assert_eq!(tokens_of(&with_llama), ar);
    let stats = |o: &std::process::Output| {
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        v["stats"]["mean_acceptance_length"].as_f64()
    };
    assert_eq!(stats(&with_ours), stats(&with_llama));
    assert_ok(&dspark(&["bench", "-md", s(&llama), "--runs", "1"]));
    assert_ok(&dspark(&[
        "bench",
        "-m",
        s(&target),
        "-md",
        s(&llama),
        "--runs",
        "1",
    ]));
}

#[test]
fn llama_layout_usage_and_target_checks() {
    let tmp = Tmp::new();
    let dir = tmp.path("pair");
    qwen3_pair(&dir, 6);
    let (target, src) = (dir.join("target.gguf"), dir.join("draft"));
    let out = tmp.path("x.gguf");
    // The layout needs the target's vocabulary.
    let o = dspark(&["convert", s(&src), "--layout", "llama.cpp", "-o", s(&out)]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--vocab-from"));
    assert!(!out.exists());
    let o = dspark(&["convert", s(&src), "--layout", "llama", "-o", s(&out)]);
    assert_eq!(o.status.code(), Some(2));
    // A target with another vocabulary is refused, naming both.
    let other = tmp.path("other");
    synth_qwen3_geometry("qwen3-small", &other, 1);
    let o = dspark(&[
        "convert",
        s(&src),
        "--layout",
        "llama.cpp",
        "--vocab-from",
        s(&other.join("target.gguf")),
        "-o",
        s(&out),
    ]);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("tokens") && err.contains("vocab_size"),
        "{err}"
    );
    assert!(!out.exists());
    // --vocab-from is an input: never an output.
    let o = dspark(&[
        "convert",
        s(&src),
        "--layout",
        "llama.cpp",
        "--vocab-from",
        s(&target),
        "-o",
        s(&target),
        "--force",
    ]);
    assert!(!o.status.success());
    assert!(GgufFile::parse(&fs::read(&target).unwrap()).is_ok());
    // Capturing the target's last layer works here but not in llama.cpp: a warning.
    let cfg_path = src.join("config.json");
    let mut cfg: serde_json::Value = serde_json::from_slice(&fs::read(&cfg_path).unwrap()).unwrap();
    cfg["dflash_config"]["target_layer_ids"] = serde_json::json!([1, 3]);
    fs::write(&cfg_path, serde_json::to_vec(&cfg).unwrap()).unwrap();
    let o = dspark(&[
        "convert",
        s(&src),
        "--layout",
        "llama.cpp",
        "--vocab-from",
        s(&target),
        "-o",
        s(&out),
        "-q",
    ]);
    assert_ok(&o);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("captured layer 3") && err.contains("llama.cpp cannot tap"),
        "{err}"
    );
}

#[test]
fn llama_layout_files_dspark_cannot_run_are_refused_by_name() {
    let tmp = Tmp::new();
    let dir = tmp.path("pair");
    qwen3_pair(&dir, 7);
    let target = dir.join("target.gguf");
    let llama = tmp.path("l.gguf");
    assert_ok(&dspark(&[
        "convert",
        s(&dir.join("draft")),
        "--layout",
        "llama.cpp",
        "--vocab-from",
        s(&target),
        "-o",
        s(&llama),
        "-q",
    ]));
    let good = fs::read(&llama).unwrap();
    let f32_info = |name: &str, n: u64| {
        (
            TensorInfo {
                name: name.into(),
                dims: vec![n],
                ty: GgmlType::F32,
            },
            vec![0u8; n as usize * 4],
        )
    };
    let (d2t, d2t_data) = f32_info("d2t", 512);
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "value scale",
            Parts::of(&good)
                .set("dflash.attention.value_scale", Value::F32(2.0))
                .bytes(),
            "dflash.attention.value_scale",
        ),
        (
            "causal block",
            Parts::of(&good)
                .set("dflash.attention.causal", Value::Bool(true))
                .bytes(),
            "causal draft block",
        ),
        (
            "embeddings as a feature",
            Parts::of(&good)
                .set("dflash.target_layers", Value::Array(Array::I32(vec![0, 3])))
                .bytes(),
            "token embeddings",
        ),
        (
            "shared KV",
            Parts::of(&good)
                .remove_tensor("blk.0.attn_v.weight")
                .bytes(),
            "shared-KV",
        ),
        (
            "reduced vocabulary",
            Parts::of(&good).add_tensor(d2t, d2t_data).bytes(),
            "d2t",
        ),
        (
            "no mask",
            Parts::of(&good)
                .remove("tokenizer.ggml.mask_token_id")
                .bytes(),
            "tokenizer.ggml.mask_token_id",
        ),
        (
            "confidence flag",
            Parts::of(&good)
                .set("dflash.has_confidence_head", Value::Bool(false))
                .bytes(),
            "dflash.has_confidence_head",
        ),
        (
            "target_layers type",
            Parts::of(&good)
                .set("dflash.target_layers", Value::Array(Array::F32(vec![2.0])))
                .bytes(),
            "ARRAY[INT32] or ARRAY[UINT32]",
        ),
    ];
    for (what, bytes, words) in cases {
        let path = tmp.path("bad.gguf");
        fs::write(&path, &bytes).unwrap();
        let before = fs::read(&path).unwrap();
        let o = dspark(&[
            "generate",
            "-m",
            s(&target),
            "-md",
            s(&path),
            "-p",
            "hi",
            "-n",
            "4",
        ]);
        assert_eq!(
            o.status.code(),
            Some(1),
            "{what}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(words), "{what}: `{words}` not in {err}");
        let v = dspark(&["verify", s(&path)]);
        assert!(!v.status.success(), "{what}: verify passed");
        assert!(
            String::from_utf8_lossy(&v.stdout).contains(words),
            "{what}: verify"
        );
        assert!(fs::read(&path).unwrap() == before);
    }
    // UINT32 layer inputs are accepted, as llama.cpp's loader accepts them.
    let u32s = Parts::of(&good)
        .set("dflash.target_layers", Value::Array(Array::U32(vec![2, 3])))
        .bytes();
    let path = tmp.path("u32.gguf");
    fs::write(&path, &u32s).unwrap();
    assert_ok(&dspark(&[
        "generate",
        "-m",
        s(&target),
        "-md",
        s(&path),
        "-p",
        "hi",
        "-n",
        "4",
    ]));
}

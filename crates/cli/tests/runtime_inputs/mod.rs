//! The runtime commands (`generate`, `bench`, `verify`, `inspect`) on crafted model files
//! and out-of-range values: each is refused with exit 1 or 2 and a message naming the key
//! or tensor, within 20 s and 4 GiB of address space, never a panic, abort or signal; no
//! input file ever changes; `generate` streams, stops on SIGINT with what it made, and
//! keeps its output or refuses the request at the context limit.

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use dspark_gguf::{GgmlType, TensorInfo, Value};
use dspark_testkit::craft::Parts;

use crate::common::*;

/// Runs dspark under the limits the issue sets: 4 GiB of address space, 20 s.
fn limited(args: &[&str]) -> (Option<i32>, String, String) {
    let bin = env!("CARGO_BIN_EXE_dspark");
    let quoted: Vec<String> = args
        .iter()
        .map(|a| format!("'{}'", a.replace('\'', "'\\''")))
        .collect();
    let o = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "ulimit -v 4194304; exec timeout -s KILL 20 {bin} {}",
            quoted.join(" ")
        ))
        .output()
        .expect("bash");
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// A synthetic pair: `target.gguf`, `draft.gguf`, `tokenizer.json` in `dir`.
fn pair(dir: &Path) -> (PathBuf, PathBuf, Vec<u8>, Vec<u8>) {
    let (t, d) = qwen3_pair(dir, 3);
    (dir.join("target.gguf"), dir.join("draft.gguf"), t, d)
}

fn f32_tensor(name: &str, dims: Vec<u64>) -> (TensorInfo, Vec<u8>) {
    let n: u64 = dims.iter().product();
    (
        TensorInfo {
            name: name.into(),
            dims,
            ty: GgmlType::F32,
        },
        vec![0u8; n as usize * 4],
    )
}

/// Crafted targets: one edit of a valid synthetic target each, and the words the refusal
/// must contain. Every one runs through `generate` (alone and with the drafter) and
/// `bench`, and `inspect` reports the same finding.
#[test]
fn crafted_targets_are_refused_naming_the_key_or_tensor() {
    let t = Tmp::new();
    let (_, draft, tb, _) = pair(&t.path("pair"));
    let p = || Parts::of(&tb);
    let q = |k: &str| format!("qwen3.{k}");
    let tokens = |n: usize| {
        Value::Array(dspark_gguf::Array::String(
            (0..n).map(|i| format!("t{i}")).collect(),
        ))
    };
    // A vector must be F32, F16 or BF16 (read elementwise), a matrix a type some kernel
    // multiplies: an integer type is neither.
    let norm_i32 = {
        let (mut info, _) = f32_tensor("blk.0.attn_norm.weight", vec![64]);
        info.ty = GgmlType::I32;
        (info, vec![0u8; 256])
    };
    let q4 = {
        let info = TensorInfo {
            name: "blk.1.ffn_up.weight".into(),
            dims: vec![64, 128],
            ty: GgmlType::I8,
        };
        (info, vec![0u8; 128 * 64])
    };
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "block_count 2^32-1",
            p().set(&q("block_count"), Value::U32(u32::MAX)).bytes(),
            "key `qwen3.block_count`: is 4294967295, expected 1..=1024",
        ),
        (
            "block_count 3 of 4 layers",
            p().set(&q("block_count"), Value::U32(3)).bytes(),
            "tensor `blk.3.attn_norm.weight`: layer 3 is beyond the file's block_count",
        ),
        (
            "block_count 5 of 4 layers",
            p().set(&q("block_count"), Value::U32(5)).bytes(),
            "tensor `blk.4.attn_norm.weight`: missing",
        ),
        (
            "extra tensor",
            {
                let (i, d) = f32_tensor("blk.99.foo.weight", vec![4]);
                p().add_tensor(i, d).bytes()
            },
            "tensor `blk.99.foo.weight`: not a tensor of a qwen3 target",
        ),
        (
            "rope base NaN",
            p().set(&q("rope.freq_base"), Value::F32(f32::NAN)).bytes(),
            "key `qwen3.rope.freq_base`: is NaN, expected a finite value above 0",
        ),
        (
            "rope base 0",
            p().set(&q("rope.freq_base"), Value::F32(0.0)).bytes(),
            "key `qwen3.rope.freq_base`: is 0",
        ),
        (
            "rope base inf",
            p().set(&q("rope.freq_base"), Value::F32(f32::INFINITY))
                .bytes(),
            "key `qwen3.rope.freq_base`: is inf",
        ),
        (
            "eps NaN",
            p().set(&q("attention.layer_norm_rms_epsilon"), Value::F32(f32::NAN))
                .bytes(),
            "key `qwen3.attention.layer_norm_rms_epsilon`: is NaN",
        ),
        (
            "eps -1",
            p().set(&q("attention.layer_norm_rms_epsilon"), Value::F32(-1.0))
                .bytes(),
            "key `qwen3.attention.layer_norm_rms_epsilon`: is -1",
        ),
        (
            "eps missing",
            p().remove(&q("attention.layer_norm_rms_epsilon")).bytes(),
            "key `qwen3.attention.layer_norm_rms_epsilon`: missing",
        ),
        (
            "eps as UINT32",
            p().set(&q("attention.layer_norm_rms_epsilon"), Value::U32(1))
                .bytes(),
            "is UINT32, expected FLOAT32",
        ),
        (
            "head_count_kv 0",
            p().set(&q("attention.head_count_kv"), Value::U32(0))
                .bytes(),
            "key `qwen3.attention.head_count_kv`: is 0, expected 1..=1024",
        ),
        (
            "head_count_kv 3",
            p().set(&q("attention.head_count_kv"), Value::U32(3))
                .bytes(),
            "key `qwen3.attention.head_count_kv`: is 3, which must divide the 4 query heads",
        ),
        (
            "head_count 0",
            p().set(&q("attention.head_count"), Value::U32(0)).bytes(),
            "key `qwen3.attention.head_count`: is 0",
        ),
        (
            "odd head size",
            p().set(&q("attention.key_length"), Value::U32(15)).bytes(),
            "key `qwen3.attention.key_length`: is 15, expected an even head size",
        ),
        (
            "value length differs",
            p().set(&q("attention.value_length"), Value::U32(8)).bytes(),
            "key `qwen3.attention.value_length`: is 8",
        ),
        (
            "context 0",
            p().set(&q("context_length"), Value::U32(0)).bytes(),
            "key `qwen3.context_length`: is 0",
        ),
        (
            "block_count as FLOAT32",
            p().set(&q("block_count"), Value::F32(4.0)).bytes(),
            "key `qwen3.block_count`: is FLOAT32, expected UINT32",
        ),
        (
            "hidden missing",
            p().remove(&q("embedding_length")).bytes(),
            "key `qwen3.embedding_length`: missing",
        ),
        (
            "hidden 2^31",
            p().set(&q("embedding_length"), Value::U32(1 << 31)).bytes(),
            "key `qwen3.embedding_length`: is 2147483648",
        ),
        (
            "ffn wrong",
            p().set(&q("feed_forward_length"), Value::U32(256)).bytes(),
            "tensor `blk.0.ffn_gate.weight`: has ne [64, 128], expected [64, 256]",
        ),
        (
            "architecture",
            p().set("general.architecture", Value::String("mamba".into()))
                .bytes(),
            "general.architecture",
        ),
        (
            "rope scaling",
            p().set(&q("rope.scaling.type"), Value::String("yarn".into()))
                .bytes(),
            "key `qwen3.rope.scaling.type`: is `yarn`",
        ),
        (
            "tokens short",
            p().set("tokenizer.ggml.tokens", tokens(256)).bytes(),
            "key `tokenizer.ggml.tokens`: has 256 tokens, but the embedding has 512 rows",
        ),
        (
            "tokens long",
            p().set("tokenizer.ggml.tokens", tokens(1024)).bytes(),
            "key `tokenizer.ggml.tokens`: has 1024 tokens, but the embedding has 512 rows",
        ),
        (
            "token types short",
            p().set(
                "tokenizer.ggml.token_type",
                Value::Array(dspark_gguf::Array::I32(vec![1; 10])),
            )
            .bytes(),
            "key `tokenizer.ggml.token_type`: has 10 entries for 512 tokens",
        ),
        (
            "eos 100000",
            p().set("tokenizer.ggml.eos_token_id", Value::U32(100_000))
                .bytes(),
            "key `tokenizer.ggml.eos_token_id`: is 100000, outside the vocabulary of 512 tokens",
        ),
        (
            "bos as INT32",
            p().set("tokenizer.ggml.bos_token_id", Value::I32(1))
                .bytes(),
            "key `tokenizer.ggml.bos_token_id`: is INT32, expected UINT32",
        ),
        (
            "merge malformed",
            p().set(
                "tokenizer.ggml.merges",
                Value::Array(dspark_gguf::Array::String(vec!["ab".into()])),
            )
            .bytes(),
            "key `tokenizer.ggml.merges`: merge 0",
        ),
        (
            "tokens without model",
            p().remove("tokenizer.ggml.model").bytes(),
            "key `tokenizer.ggml.tokens`: given without tokenizer.ggml.model",
        ),
        (
            "norm as I32",
            p().replace_tensor(
                "blk.0.attn_norm.weight",
                norm_i32.0.clone(),
                norm_i32.1.clone(),
            )
            .bytes(),
            "tensor `blk.0.attn_norm.weight`: has type I32, expected F32, F16 or BF16",
        ),
        (
            "matrix as I8",
            p().replace_tensor("blk.1.ffn_up.weight", q4.0.clone(), q4.1.clone())
                .bytes(),
            "tensor `blk.1.ffn_up.weight`: has type I8, expected one of F32, F16, BF16",
        ),
        (
            "tensor missing",
            p().remove_tensor("blk.2.attn_k.weight").bytes(),
            "tensor `blk.2.attn_k.weight`: missing",
        ),
        (
            "output norm missing",
            p().remove_tensor("output_norm.weight").bytes(),
            "tensor `output_norm.weight`: missing",
        ),
        (
            "embedding 1-D",
            {
                let (i, d) = f32_tensor("token_embd.weight", vec![64]);
                p().replace_tensor("token_embd.weight", i, d).bytes()
            },
            "tensor `token_embd.weight`: has ne [64], expected [64, vocab]",
        ),
        (
            "LM head wrong vocab",
            {
                let (i, d) = f32_tensor("output.weight", vec![64, 500]);
                p().add_tensor(i, d).bytes()
            },
            "tensor `output.weight`: has ne [64, 500], expected [64, 512]",
        ),
        // Found by the hostile sweep of 2026-12-01: keys llama.cpp honours that change
        // the model, values the weights hold, and loose tokenizer keys.
        (
            "partial rotary",
            p().set(&q("rope.dimension_count"), Value::U32(8)).bytes(),
            "key `qwen3.rope.dimension_count`: is 8: partial rotary",
        ),
        (
            "linear scaling factor",
            p().set(&q("rope.scaling.factor"), Value::F32(4.0)).bytes(),
            "key `qwen3.rope.scaling.factor`: is 4: linear RoPE scaling",
        ),
        (
            "scale_linear",
            p().set(&q("rope.scale_linear"), Value::F32(2.0)).bytes(),
            "key `qwen3.rope.scale_linear`: is 2",
        ),
        (
            "not causal",
            p().set(&q("attention.causal"), Value::Bool(false)).bytes(),
            "key `qwen3.attention.causal`: is false",
        ),
        (
            "NaN norm",
            {
                let (i, mut d) = f32_tensor("output_norm.weight", vec![64]);
                d[..4].copy_from_slice(&f32::NAN.to_le_bytes());
                p().replace_tensor("output_norm.weight", i, d).bytes()
            },
            "tensor `output_norm.weight`: value 0 is not finite",
        ),
        (
            "Q8_0 scale NaN",
            {
                let mut parts = p();
                let e = parts
                    .tensors
                    .iter_mut()
                    .find(|t| t.0.name == "blk.1.attn_q.weight")
                    .unwrap();
                e.1[34 * 5..34 * 5 + 2].copy_from_slice(&0x7e00u16.to_le_bytes());
                parts.bytes()
            },
            "tensor `blk.1.attn_q.weight`: value 160 is not finite",
        ),
        (
            "token type 99",
            {
                let mut tt = vec![1i32; 512];
                tt[7] = 99;
                p().set(
                    "tokenizer.ggml.token_type",
                    Value::Array(dspark_gguf::Array::I32(tt)),
                )
                .bytes()
            },
            "key `tokenizer.ggml.token_type`: token 7 has type 99",
        ),
        (
            "empty token",
            {
                let mut parts = p();
                if let Some((_, Value::Array(dspark_gguf::Array::String(v)))) = parts
                    .kvs
                    .iter_mut()
                    .find(|(k, _)| k == "tokenizer.ggml.tokens")
                {
                    v[300] = String::new();
                }
                parts.bytes()
            },
            "key `tokenizer.ggml.tokens`: token 300 is empty",
        ),
        (
            "repeated token",
            {
                let mut parts = p();
                if let Some((_, Value::Array(dspark_gguf::Array::String(v)))) = parts
                    .kvs
                    .iter_mut()
                    .find(|(k, _)| k == "tokenizer.ggml.tokens")
                {
                    v[300] = v[299].clone();
                }
                parts.bytes()
            },
            "key `tokenizer.ggml.tokens`: token 300",
        ),
        (
            "byte token not <0xXX>",
            {
                let mut tt = vec![1i32; 512];
                tt[7] = 6;
                p().set(
                    "tokenizer.ggml.token_type",
                    Value::Array(dspark_gguf::Array::I32(tt)),
                )
                .bytes()
            },
            "key `tokenizer.ggml.token_type`: token 7",
        ),
        (
            "merges missing",
            p().remove("tokenizer.ggml.merges").bytes(),
            "key `tokenizer.ggml.merges`: missing or empty",
        ),
        (
            "merge of unknown tokens",
            p().set(
                "tokenizer.ggml.merges",
                Value::Array(dspark_gguf::Array::String(vec!["Z Z".into()])),
            )
            .bytes(),
            "key `tokenizer.ggml.merges`: merge 0 (\"Z Z\") names \"ZZ\", which is not a token",
        ),
    ];
    let file = t.path("bad.gguf");
    for (what, bytes, want) in &cases {
        fs::write(&file, bytes).unwrap();
        let runs: [Vec<&str>; 4] = [
            vec![
                "generate",
                "-m",
                s(&file),
                "--prompt-tokens",
                "1,2",
                "-n",
                "2",
            ],
            vec![
                "generate",
                "-m",
                s(&file),
                "-md",
                s(&draft),
                "--prompt-tokens",
                "1,2",
                "-n",
                "2",
            ],
            vec!["bench", "-m", s(&file), "--runs", "1", "--context", "4"],
            vec!["verify", s(&file)],
        ];
        for args in runs {
            let (code, stdout, err) = limited(&args);
            let out = if args[0] == "verify" {
                stdout
            } else {
                err.clone()
            };
            assert!(
                matches!(code, Some(1) | Some(2)),
                "{what}: {args:?} exit {code:?}: {err}"
            );
            assert!(
                out.contains(want),
                "{what}: {args:?}: expected `{want}` in:\n{out}{err}"
            );
            assert!(!err.contains("panicked"), "{what}: {err}");
        }
        let (code, out, _) = limited(&["inspect", s(&file)]);
        assert_eq!(code, Some(0), "{what}: inspect reports, it does not fail");
        assert!(out.contains(want), "{what}: inspect:\n{out}");
    }
}

/// Crafted drafters: `generate` and `verify` accept exactly the same files, refusing each
/// of these naming the key or tensor; pair mismatches are refused by `generate` and
/// `bench`, naming both files.
#[test]
fn crafted_drafters_are_refused_naming_the_key_or_tensor() {
    let t = Tmp::new();
    let (target, draft, _, db) = pair(&t.path("pair"));
    let p = || Parts::of(&db);
    let k = |s: &str| format!("dflash-draft.{s}");
    let ids = |v: Vec<i32>| Value::Array(dspark_gguf::Array::I32(v));
    let file_only: Vec<(&str, Vec<u8>, &str)> = vec![
        ("block size 2^31-1", p().set(&k("dflash.block_size"), Value::U32((1 << 31) - 1)).bytes(), "key `dflash-draft.dflash.block_size`: is 2147483647, expected 2..=256"),
        ("block size 10^6", p().set(&k("dflash.block_size"), Value::U32(1_000_000)).bytes(), "key `dflash-draft.dflash.block_size`: is 1000000"),
        ("block size 1", p().set(&k("dflash.block_size"), Value::U32(1)).bytes(), "key `dflash-draft.dflash.block_size`: is 1"),
        ("markov rank 2^32-1", p().set(&k("dflash.dspark.markov_rank"), Value::U32(u32::MAX)).bytes(), "key `dflash-draft.dflash.dspark.markov_rank`: is 4294967295"),
        ("markov rank wrong", p().set(&k("dflash.dspark.markov_rank"), Value::U32(16)).bytes(), "tensor `dflash.dspark.markov.w1`: has ne [32, 512], expected [16, 512]"),
        ("confidence weight [1]", { let (i, d) = f32_tensor("dflash.dspark.confidence.weight", vec![1]); p().remove(&k("dflash.dspark.confidence_dim")).replace_tensor("dflash.dspark.confidence.weight", i, d).bytes() }, "tensor `dflash.dspark.confidence.weight`: width 1 is neither hidden (64) nor hidden + Markov rank (96)"),
        ("confidence weight 2-D", { let (i, d) = f32_tensor("dflash.dspark.confidence.weight", vec![96, 2]); p().remove(&k("dflash.dspark.confidence_dim")).replace_tensor("dflash.dspark.confidence.weight", i, d).bytes() }, "tensor `dflash.dspark.confidence.weight`: has ne [96, 2], expected [width]"),
        ("confidence bias missing", p().remove_tensor("dflash.dspark.confidence.bias").bytes(), "tensor `dflash.dspark.confidence.bias`: missing"),
        ("mask missing", p().remove(&k("dflash.mask_token_id")).bytes(), "key `dflash-draft.dflash.mask_token_id`: missing"),
        ("mask beyond vocab_size", p().set(&k("dflash.mask_token_id"), Value::U32(600)).bytes(), "key `dflash-draft.dflash.mask_token_id`: is 600, outside the vocabulary of 512"),
        ("negative layer id", p().set(&k("dflash.target_layer_ids"), ids(vec![1, -2])).bytes(), "has layer id -2"),
        ("duplicate layer id", p().set(&k("dflash.target_layer_ids"), ids(vec![1, 1])).bytes(), "captures layer 1 twice"),
        ("layer id beyond target depth", p().set(&k("dflash.target_layer_ids"), ids(vec![1, 7])).bytes(), "captures layer 7, outside the target's 4 layers"),
        ("ids vs count", p().set(&k("dflash.target_layer_ids"), ids(vec![1])).bytes(), "key `dflash-draft.dflash.n_target_layers`: is 2, but dflash-draft.dflash.target_layer_ids has 1 ids"),
        ("eps NaN", p().set(&k("attention.layer_norm_rms_epsilon"), Value::F32(f32::NAN)).bytes(), "key `dflash-draft.attention.layer_norm_rms_epsilon`: is NaN"),
        ("rope base 0", p().set(&k("rope.freq_base"), Value::F32(0.0)).bytes(), "key `dflash-draft.rope.freq_base`: is 0"),
        ("rope scaling linear", p().set(&k("rope.scaling.type"), Value::String("linear".into())).bytes(), "key `dflash-draft.rope.scaling.type`: is `linear`"),
        ("yarn factor NaN", p().set(&k("rope.scaling.type"), Value::String("yarn".into())).set(&k("rope.scaling.factor"), Value::F32(f32::NAN)).set(&k("rope.scaling.original_context_length"), Value::U32(4096)).bytes(), "key `dflash-draft.rope.scaling.factor`: is NaN"),
        ("markov head gated", p().set(&k("dflash.dspark.markov_head_type"), Value::String("gated".into())).bytes(), "key `dflash-draft.dflash.dspark.markov_head_type`: is `gated`"),
        ("head_count_kv 0", p().set(&k("attention.head_count_kv"), Value::U32(0)).bytes(), "key `dflash-draft.attention.head_count_kv`: is 0"),
        ("extra tensor", { let (i, d) = f32_tensor("dflash.foo.weight", vec![4]); p().add_tensor(i, d).bytes() }, "tensor `dflash.foo.weight`: not a tensor of a dflash-draft drafter"),
        ("layer tensor beyond block_count", { let (i, d) = f32_tensor("blk.1.attn_norm.weight", vec![64]); p().add_tensor(i, d).bytes() }, "tensor `blk.1.attn_norm.weight`: layer 1 is beyond the file's block_count"),
        ("fc wrong width", p().set(&k("dflash.target_layer_ids"), ids(vec![1, 2, 3])).set(&k("dflash.n_target_layers"), Value::U32(3)).remove(&k("dflash.n_target_features")).bytes(), "tensor `dflash.fc.weight`: has ne [128, 64], expected [192, 64]"),
        ("target vocabulary", p().set(&k("vocab_size"), Value::U32(600)).bytes(), "key `dflash-draft.vocab_size`: is 600, but the Markov head covers 512 tokens"),
        ("heads present, DSpark disabled", p().set(&k("dflash.dspark.enabled"), Value::U32(0)).bytes(), "key `dflash-draft.dflash.dspark.enabled`: is 0, but the Markov head's tensors are present"),
        ("DSpark enabled 2", p().set(&k("dflash.dspark.enabled"), Value::U32(2)).bytes(), "key `dflash-draft.dflash.dspark.enabled`: is 2, expected 0 or 1"),
        ("drafter partial rotary", p().set(&k("rope.dimension_count"), Value::U32(8)).bytes(), "key `dflash-draft.rope.dimension_count`: is 8"),
        ("NaN Markov head", { let mut parts = p(); let e = parts.tensors.iter_mut().find(|t| t.0.name == "dflash.dspark.markov.w2").unwrap(); e.1[0..2].copy_from_slice(&0x7c00u16.to_le_bytes()); parts.bytes() }, "tensor `dflash.dspark.markov.w2`: value 0 is not finite"),
    ];
    // Sound files that do not fit this target: verify (which sees one file) accepts them.
    let fit_only: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "target depth",
            p().set(&k("dflash.target_block_count"), Value::U32(28))
                .set(&k("dflash.target_layer_ids"), ids(vec![1, 20]))
                .bytes(),
            "captures target layer 20, but the target has 4 layers",
        ),
        (
            "mask beyond the target",
            p().remove(&k("vocab_size"))
                .set(&k("dflash.mask_token_id"), Value::U32(600))
                .bytes(),
            "the drafter's mask token 600 is outside the target's vocabulary of 512",
        ),
        (
            "not a drafter",
            p().set("general.architecture", Value::String("qwen3".into()))
                .bytes(),
            "key `general.architecture`: is `qwen3`",
        ),
    ];
    let file = t.path("bad-draft.gguf");
    for (what, bytes, want) in file_only.iter().chain(&fit_only) {
        fs::write(&file, bytes).unwrap();
        let (code, _, err) = limited(&[
            "generate",
            "-m",
            s(&target),
            "-md",
            s(&file),
            "--prompt-tokens",
            "1,2",
            "-n",
            "2",
        ]);
        assert_eq!(code, Some(1), "{what}: {err}");
        assert!(
            err.contains(want) && err.contains("bad-draft.gguf"),
            "{what}: expected `{want}` in:\n{err}"
        );
        let (code, _, err) = limited(&[
            "bench",
            "-m",
            s(&target),
            "-md",
            s(&file),
            "--runs",
            "1",
            "--context",
            "4",
        ]);
        assert_eq!(code, Some(1), "{what}: bench: {err}");
        assert!(err.contains(want), "{what}: bench: {err}");
        let (vcode, vout, verr) = limited(&["verify", s(&file)]);
        if file_only.iter().any(|c| c.0 == *what) {
            assert_eq!(
                vcode,
                Some(1),
                "{what}: verify must refuse what generate refuses:\n{vout}{verr}"
            );
            assert!(vout.contains(want), "{what}: verify:\n{vout}");
        } else if *what != "not a drafter" {
            assert_eq!(
                vcode,
                Some(0),
                "{what}: the file alone is sound:\n{vout}{verr}"
            );
        }
        assert!(
            !err.contains("panicked") && !verr.contains("panicked"),
            "{what}"
        );
    }
    // The valid drafter: both accept it.
    assert_eq!(limited(&["verify", s(&draft)]).0, Some(0));
    let (code, out, err) = limited(&[
        "generate",
        "-m",
        s(&target),
        "-md",
        s(&draft),
        "--prompt-tokens",
        "1,2",
        "-n",
        "3",
        "--json",
    ]);
    assert_eq!(code, Some(0), "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["tokens"].as_array().unwrap().len(), 3, "{out}");
}

/// Out-of-range command-line values: exit 2 with the value named; a request beyond the
/// context is refused before any work, naming both numbers.
#[test]
fn out_of_range_values_are_usage_errors() {
    let t = Tmp::new();
    let (target, draft, _, _) = pair(&t.path("pair"));
    let (ts, ds) = (s(&target), s(&draft));
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["generate", "-m", ts, "--prompt-tokens", "1", "-n", "0"],
            "--max-tokens",
        ),
        (
            vec![
                "generate",
                "-m",
                ts,
                "--prompt-tokens",
                "1",
                "-n",
                "1000000000",
            ],
            "need 1000000001 positions, beyond the context of 4096 tokens",
        ),
        (
            vec![
                "generate",
                "-m",
                ts,
                "--prompt-tokens",
                "1",
                "-n",
                "18446744073709551615",
            ],
            "beyond the context of 4096 tokens",
        ),
        (
            vec!["generate", "-m", ts, "--prompt-tokens", "1", "-t", "0"],
            "thread count",
        ),
        (
            vec!["generate", "-m", ts, "--prompt-tokens", "1", "-t", "100000"],
            "thread count",
        ),
        (
            vec!["generate", "-m", ts, "--prompt-tokens", "1", "-c", "0"],
            "--context",
        ),
        (
            vec!["generate", "-m", ts, "--prompt-tokens", "1", "-c", "5000"],
            "exceeds the target's context of 4096",
        ),
        (
            vec!["generate", "-m", ts, "--prompt-tokens", "1,9999"],
            "prompt token 9999",
        ),
        (
            vec![
                "generate",
                "-m",
                ts,
                "--prompt-tokens",
                "1",
                "--stop",
                "70000",
            ],
            "--stop token 70000",
        ),
        (
            vec![
                "generate",
                "-m",
                ts,
                "--prompt-tokens",
                "1",
                "--trace",
                "x.jsonl",
            ],
            "needs --draft",
        ),
        (
            vec![
                "generate",
                "-m",
                ts,
                "--prompt-tokens",
                "1",
                "--draft-max",
                "2",
            ],
            "--draft-max limits",
        ),
        (
            vec![
                "generate",
                "-m",
                ts,
                "-md",
                ds,
                "--prompt-tokens",
                "1",
                "--draft-max",
                "0",
            ],
            "--draft-max",
        ),
        (
            vec![
                "generate",
                "-m",
                ts,
                "-md",
                ds,
                "--prompt-tokens",
                "1",
                "--schedule",
                "greedy",
            ],
            "--schedule",
        ),
        (vec!["generate", "-m", ts], "required"),
        (
            vec!["generate", "-m", ts, "--prompt-tokens", "1", "--temp", "-1"],
            "not a temperature",
        ),
        (
            vec![
                "generate",
                "-m",
                ts,
                "--prompt-tokens",
                "1",
                "--temp",
                "nan",
            ],
            "not a temperature",
        ),
        (
            vec![
                "generate",
                "-m",
                ts,
                "--prompt-tokens",
                "1",
                "--temp",
                "inf",
            ],
            "not a temperature",
        ),
        (
            vec![
                "generate",
                "-m",
                ts,
                "--prompt-tokens",
                "1",
                "--top-p",
                "1.5",
            ],
            "not a probability",
        ),
        (
            vec![
                "generate",
                "-m",
                ts,
                "--prompt-tokens",
                "1",
                "--min-p",
                "-0.1",
            ],
            "not a probability",
        ),
        (
            vec![
                "generate",
                "-m",
                ts,
                "--prompt-tokens",
                "1",
                "--top-k",
                "-3",
            ],
            "--top-k",
        ),
        (
            vec!["generate", "-m", ts, "--prompt-tokens", "1", "--seed", "x"],
            "--seed",
        ),
        (
            vec!["eval", "-m", ts, "-md", ds, "--prompts", ts, "--top-p", "2"],
            "not a probability",
        ),
        (
            vec!["bench", "-m", ts, "--temp", "-0.5"],
            "not a temperature",
        ),
        (
            vec!["generate", "-m", ts, "-md", ds, "-p", ""],
            "prompt is empty",
        ),
        (
            vec!["bench", "-m", ts, "--context", "1000000000"],
            "--context",
        ),
        (
            vec!["bench", "-m", ts, "--context", "5000"],
            "beyond the context of 4096 tokens (the target's)",
        ),
        (vec!["bench", "-m", ts, "--verify", "100000"], "--verify"),
        (vec!["bench", "-m", ts, "--runs", "0"], "--runs"),
        (vec!["convert", "x", "--threads", "0"], "thread count"),
    ];
    for (args, want) in cases {
        let (code, _, err) = limited(&args);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: expected `{want}` in {err}");
    }
    // A prompt filling the context is refused; --stop-at-context keeps what fits.
    let long: Vec<String> = (0..4090).map(|i| (i % 500).to_string()).collect();
    let long = long.join(",");
    let (code, _, err) = limited(&["generate", "-m", ts, "--prompt-tokens", &long, "-n", "10"]);
    assert_eq!(code, Some(2));
    assert!(
        err.contains("the prompt (4090 tokens) and the 10 tokens asked for need 4100 positions"),
        "{err}"
    );
    let (code, out, err) = limited(&[
        "generate",
        "-m",
        ts,
        "-md",
        ds,
        "--prompt-tokens",
        &long,
        "-n",
        "10",
        "--stop-at-context",
        "--json",
    ]);
    assert_eq!(code, Some(0), "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["tokens"].as_array().unwrap().len(), 6);
    assert_eq!(v["stats"]["stop_reason"], "context");
}

/// A legal target whose context length is 2^32 − 1 runs a short request in small memory.
#[test]
fn a_huge_context_length_costs_nothing_until_used() {
    let t = Tmp::new();
    let (target, draft, tb, _) = pair(&t.path("pair"));
    let big = t.path("big-context.gguf");
    fs::write(
        &big,
        Parts::of(&tb)
            .set("qwen3.context_length", Value::U32(u32::MAX))
            .bytes(),
    )
    .unwrap();
    let (code, out, err) = limited(&[
        "generate",
        "-m",
        s(&big),
        "-md",
        s(&draft),
        "--prompt-tokens",
        "1,2,3",
        "-n",
        "8",
        "--json",
    ]);
    assert_eq!(code, Some(0), "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let (_, plain, _) = limited(&[
        "generate",
        "-m",
        s(&target),
        "--prompt-tokens",
        "1,2,3",
        "-n",
        "8",
        "--json",
    ]);
    let p: serde_json::Value = serde_json::from_str(&plain).unwrap();
    assert_eq!(v["tokens"], p["tokens"]);
    // Asking for most of it is refused with the byte count, not attempted.
    let (code, _, err) = limited(&[
        "generate",
        "-m",
        s(&big),
        "--prompt-tokens",
        "1",
        "-n",
        "4000000000",
    ]);
    assert_eq!(
        code,
        Some(2),
        "a request beyond the machine is a usage error: {err}"
    );
    // 4 layers × (keys + values) × 32 values × 2 bytes (the default F16 attention stores
    // F16) per position, 4·10^9 + 1 positions.
    assert!(
        err.contains("KV cache for 4000000001 positions needs 2048000000512 bytes of memory"),
        "{err}"
    );
}

/// No command writes onto one of its inputs: `--trace` at the target, the drafter, the
/// tokenizer or the prompt file (also through a symbolic or hard link) is refused, an
/// existing trace needs --force, and `convert` never replaces its source or writes the
/// report where the GGUF goes. Every input is unchanged afterwards.
#[test]
fn inputs_are_never_outputs() {
    let t = Tmp::new();
    let dir = t.path("pair");
    let (target, draft, _, _) = pair(&dir);
    let tok = dir.join("tokenizer.json");
    let prompt = t.path("prompt.txt");
    fs::write(&prompt, "the fox").unwrap();
    let sym = t.path("link.gguf");
    std::os::unix::fs::symlink(&target, &sym).unwrap();
    let hard = t.path("hard.gguf");
    fs::hard_link(&draft, &hard).unwrap();
    let src = dir.join("draft");
    let st = src.join("model.safetensors");
    let inputs = [
        &target,
        &draft,
        &tok,
        &prompt,
        &st,
        &src.join("config.json"),
    ];
    let before: Vec<Vec<u8>> = inputs.iter().map(|p| fs::read(p).unwrap()).collect();
    for out in [&target, &draft, &tok, &prompt, &sym, &hard] {
        for force in [false, true] {
            let mut args = vec![
                "generate",
                "-m",
                s(&target),
                "-md",
                s(&draft),
                "--tokenizer",
                s(&tok),
                "-f",
                s(&prompt),
                "-n",
                "2",
                "--trace",
                s(out),
            ];
            if force {
                args.push("--force");
            }
            let (code, _, err) = limited(&args);
            assert_eq!(code, Some(1), "{out:?}: {err}");
            assert!(err.contains("is also an input of this command"), "{err}");
        }
    }
    let trace = t.path("trace.jsonl");
    fs::write(&trace, "old").unwrap();
    let (code, _, err) = limited(&[
        "generate",
        "-m",
        s(&target),
        "-md",
        s(&draft),
        "--prompt-tokens",
        "1",
        "-n",
        "2",
        "--trace",
        s(&trace),
    ]);
    assert_eq!(code, Some(1));
    assert!(err.contains("already exists"), "{err}");
    assert_eq!(fs::read_to_string(&trace).unwrap(), "old");
    let (code, _, err) = limited(&[
        "generate",
        "-m",
        s(&target),
        "-md",
        s(&draft),
        "--prompt-tokens",
        "1",
        "-n",
        "2",
        "--trace",
        s(&trace),
        "--force",
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert!(fs::read_to_string(&trace)
        .unwrap()
        .starts_with("{\"position\""));
    // convert onto its own source, with --force, directly and through a link; the report
    // where the GGUF goes.
    let st_link = t.path("st-link");
    std::os::unix::fs::symlink(&st, &st_link).unwrap();
    for out in [&st, &src.join("config.json"), &st_link] {
        let (code, _, err) = limited(&["convert", s(&src), "-o", s(out), "--force", "-q"]);
        assert_eq!(code, Some(1), "{out:?}: {err}");
        assert!(err.contains("is also an input of this command"), "{err}");
        let (code, _, err) = limited(&[
            "convert",
            s(&src),
            "-o",
            s(&t.path("ok.gguf")),
            "--report",
            s(out),
            "--force",
            "-q",
        ]);
        assert_eq!(code, Some(1), "report {out:?}: {err}");
    }
    let x = t.path("x.gguf");
    let (code, _, err) = limited(&["convert", s(&src), "-o", s(&x), "--report", s(&x), "-q"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("x.gguf"), "{err}");
    assert!(!x.exists());
    let after: Vec<Vec<u8>> = inputs.iter().map(|p| fs::read(p).unwrap()).collect();
    assert!(before == after, "an input changed");
    let leftovers: Vec<_> = fs::read_dir(&src)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(leftovers.len(), 2, "{leftovers:?}");
}

/// Spawns `dspark generate` on a long run, its stdout and stderr piped (a target without
/// a vocabulary, so ids stream).
fn spawn_long_generate(target: &Path, draft: &Path) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_dspark"))
        .args([
            "generate",
            "-m",
            s(target),
            "-md",
            s(draft),
            "--prompt-tokens",
            "1,2,3",
            "-n",
            "4000",
            "--ignore-eos",
            "-t",
            "1",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn dspark")
}

/// `generate` streams (its first tokens arrive long before it ends), SIGINT and SIGTERM
/// stop it within a second with exit 130, the tokens so far on stdout and the statistics
/// on stderr; and what it printed is the greedy output's beginning.
#[test]
fn generate_streams_and_stops_on_a_signal() {
    let t = Tmp::new();
    let (_, draft, tb, _) = pair(&t.path("pair"));
    let target = t.path("ids-only.gguf");
    let mut parts = Parts::of(&tb);
    parts.kvs.retain(|(k, _)| !k.starts_with("tokenizer."));
    fs::write(&target, parts.bytes()).unwrap();
    // The whole run, for reference (no time limit: the machine may be busy), on the
    // interrupted runs' one thread: past 256 positions F16 attention splits a decode
    // step's keys among the threads as llama.cpp does, so the thread count is part of
    // the request.
    let o = dspark(&[
        "generate",
        "-m",
        s(&target),
        "--prompt-tokens",
        "1,2,3",
        "-n",
        "4000",
        "--ignore-eos",
        "--json",
        "-t",
        "1",
    ]);
    assert_ok(&o);
    let full: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let full: Vec<String> = full["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.to_string())
        .collect();
    for sig in ["INT", "TERM"] {
        let mut child = spawn_long_generate(&target, &draft);
        let mut stdout = child.stdout.take().unwrap();
        // The first bytes arrive while it is still running.
        let mut first = [0u8; 8];
        stdout.read_exact(&mut first).unwrap();
        assert!(
            child.try_wait().unwrap().is_none(),
            "it ended before streaming"
        );
        std::thread::sleep(Duration::from_millis(200));
        let sent = Instant::now();
        let ok = Command::new("kill")
            .args([&format!("-{sig}"), &child.id().to_string()])
            .status()
            .unwrap();
        assert!(ok.success());
        let mut rest = Vec::new();
        stdout.read_to_end(&mut rest).unwrap();
        let status = child.wait().unwrap();
        let took = sent.elapsed();
        let mut err = String::new();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        assert!(
            took < Duration::from_secs(1),
            "{sig}: stopped after {took:?}"
        );
        assert_eq!(status.code(), Some(130), "{sig}: {err}");
        assert!(
            err.contains("stop: interrupted") && err.contains("prompt eval:"),
            "{sig}: {err}"
        );
        let mut text = first.to_vec();
        text.extend(rest);
        let got: Vec<String> = String::from_utf8(text)
            .unwrap()
            .split_whitespace()
            .map(String::from)
            .collect();
        assert!(
            !got.is_empty() && got.len() < full.len(),
            "{sig}: {} tokens",
            got.len()
        );
        assert_eq!(
            got[..],
            full[..got.len()],
            "{sig}: the tokens so far are the greedy output's"
        );
    }
}

/// What the hostile sweep of 2026-12-01 found, each now refused or survived: a 70,000-byte
/// key, a 64-million-element array (text and `--json`, in 4 GiB), non-finite metadata in
/// JSON, a full stderr, Ctrl-C while the prompt is read from a pipe that stays open, and
/// `bench` interrupted mid-measurement.
#[test]
fn issue_8_sweep_crashes_and_hangs() {
    let t = Tmp::new();
    let (target, draft, tb, _) = pair(&t.path("pair"));
    let long_key = t.path("long-key.gguf");
    fs::write(
        &long_key,
        Parts::of(&tb)
            .set(&"k".repeat(70_000), Value::U32(1))
            .bytes(),
    )
    .unwrap();
    let (code, out, err) = limited(&["inspect", s(&long_key)]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.len() < 400_000,
        "every line padded to the longest key: {} bytes",
        out.len()
    );
    // 64 M elements: formatting each would take 4.6 GB; the text view formats eight.
    let big = t.path("big-array.gguf");
    let huge = Value::Array(dspark_gguf::Array::U8(vec![7u8; 64 << 20]));
    fs::write(&big, Parts::of(&tb).set("x.huge", huge).bytes()).unwrap();
    let (code, out, err) = limited(&["inspect", s(&big)]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.contains("[7, 7, 7, 7, 7, 7, 7, 7, … (67108864 items)]"),
        "{}",
        &out[..out.len().min(3000)]
    );
    // --json streams every element (4 M here: a 40 MB document) without building it.
    let mid = t.path("mid-array.gguf");
    let many = Value::Array(dspark_gguf::Array::U8(vec![7u8; 4 << 20]));
    let nan = Value::Array(dspark_gguf::Array::F32(vec![
        f32::NAN,
        f32::INFINITY,
        -f32::INFINITY,
        1.5,
    ]));
    fs::write(
        &mid,
        Parts::of(&tb).set("x.huge", many).set("x.nan", nan).bytes(),
    )
    .unwrap();
    let (code, out, err) = limited(&["inspect", s(&mid), "--json"]);
    assert_eq!(code, Some(0), "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let meta = v["metadata"].as_array().unwrap();
    let value = |k: &str| meta.iter().find(|m| m["key"] == k).unwrap()["value"].clone();
    assert_eq!(value("x.huge").as_array().unwrap().len(), 4 << 20);
    assert_eq!(
        value("x.nan"),
        serde_json::json!(["NaN", "inf", "-inf", 1.5])
    );
    // A full stderr does not end a run.
    let bin = env!("CARGO_BIN_EXE_dspark");
    let o = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "{bin} generate -m '{}' --prompt-tokens 1,2 -n 3 --json 2>/dev/full",
            s(&target)
        ))
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    // Ctrl-C while the prompt pipe stays open: exit 130 at once.
    let mut child = Command::new(bin)
        .args(["generate", "-m", s(&target), "-f", "-", "-n", "3"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let held_open = child.stdin.take();
    std::thread::sleep(Duration::from_millis(700));
    let sent = Instant::now();
    Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    let status = child.wait().unwrap();
    drop(held_open);
    assert!(sent.elapsed() < Duration::from_secs(1));
    assert_eq!(status.code(), Some(130));
    // bench: the first Ctrl-C stops it, printing what was measured.
    let child = Command::new(bin)
        .args([
            "bench",
            "-m",
            s(&target),
            "-md",
            s(&draft),
            "--runs",
            "100000",
            "--json",
            "-t",
            "1",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let sent = Instant::now();
    Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(
        sent.elapsed() < Duration::from_secs(2),
        "{:?}",
        sent.elapsed()
    );
    assert_eq!(o.status.code(), Some(130));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["interrupted"], true);
}

/// What the hostile sweep found accepted: `synth` over an earlier one, `convert` writing
/// files its own `verify` refuses, a `--tokenizer` that encodes otherwise than the
/// target's own, a drafter made for a shorter context, a file whose tensor types
/// contradict its `general.file_type`.
#[test]
fn issue_8_sweep_silent_acceptances() {
    let t = Tmp::new();
    let (target, draft, _, db) = pair(&t.path("pair"));
    // synth never replaces an earlier one without --force.
    let ck = t.path("ckpt");
    assert_ok(&dspark(&[
        "synth",
        "--geometry",
        "tiny",
        "--out",
        s(&ck),
        "-q",
    ]));
    let before = fs::read(ck.join("model.safetensors")).unwrap();
    let (code, _, err) = limited(&[
        "synth",
        "--geometry",
        "tiny",
        "--out",
        s(&ck),
        "--seed",
        "9",
        "-q",
    ]);
    assert_eq!(code, Some(1));
    assert!(err.contains("already exists"), "{err}");
    assert!(fs::read(ck.join("model.safetensors")).unwrap() == before);
    assert_ok(&dspark(&[
        "synth",
        "--geometry",
        "tiny",
        "--out",
        s(&ck),
        "--seed",
        "9",
        "-q",
        "--force",
    ]));
    assert!(fs::read(ck.join("model.safetensors")).unwrap() != before);
    // convert refuses configs whose result the contract refuses, naming the config key.
    for (edit, want) in [
        (
            serde_json::json!({"rms_norm_eps": 0.0}),
            "rms_norm_eps: the dflash-draft contract refuses the result",
        ),
        (serde_json::json!({"rms_norm_eps": 3.0}), "rms_norm_eps"),
        (
            serde_json::json!({"rope_parameters": {"rope_type": "default", "rope_theta": 1e300}}),
            "rope_parameters.rope_theta",
        ),
        (
            serde_json::json!({"hidden_act": "gelu"}),
            "hidden_act: `gelu` is not supported",
        ),
        (
            serde_json::json!({"rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}}),
            "rope.scaling.type`: is `linear`",
        ),
    ] {
        let src = t.path("edit");
        let _ = fs::remove_dir_all(&src);
        assert_ok(&dspark(&[
            "synth",
            "--geometry",
            "tiny",
            "--out",
            s(&src),
            "-q",
        ]));
        let cfg_path = src.join("config.json");
        let mut cfg: serde_json::Value =
            serde_json::from_slice(&fs::read(&cfg_path).unwrap()).unwrap();
        for (k, v) in edit.as_object().unwrap() {
            cfg[k] = v.clone();
        }
        fs::write(&cfg_path, serde_json::to_vec(&cfg).unwrap()).unwrap();
        let out = t.path("edit.gguf");
        let (code, _, err) = limited(&["convert", s(&src), "-o", s(&out), "-q", "--force"]);
        assert_eq!(code, Some(1), "{edit}: {err}");
        assert!(err.contains(want), "{edit}: expected `{want}` in {err}");
        assert!(!out.exists());
    }
    let src = t.path("edit");
    let cfg_path = src.join("config.json");
    let mut cfg: serde_json::Value = serde_json::from_slice(&fs::read(&cfg_path).unwrap()).unwrap();
    cfg["dflash_config"]
        .as_object_mut()
        .unwrap()
        .remove("mask_token_id");
    cfg["rope_parameters"] = serde_json::json!({"rope_type": "default", "rope_theta": 10000.0});
    fs::write(&cfg_path, serde_json::to_vec(&cfg).unwrap()).unwrap();
    let (code, _, err) = limited(&["convert", s(&src), "-o", s(&t.path("m.gguf")), "-q"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("dflash.mask_token_id`: missing"), "{err}");
    // A tokenizer.json with the same vocabulary but another normalizer is refused.
    let tok = t.path("pair").join("tokenizer.json");
    let mut j: serde_json::Value = serde_json::from_slice(&fs::read(&tok).unwrap()).unwrap();
    j["normalizer"] = serde_json::json!({"type": "Lowercase"});
    let lower = t.path("lower.json");
    fs::write(&lower, serde_json::to_vec(&j).unwrap()).unwrap();
    let (code, _, err) = limited(&[
        "generate",
        "-m",
        s(&target),
        "--tokenizer",
        s(&lower),
        "-p",
        "Hi",
        "-n",
        "1",
    ]);
    assert_eq!(code, Some(1));
    assert!(err.contains("the two tokenizers disagree"), "{err}");
    // A drafter made for a context of 8 positions: requests beyond it are refused.
    let short = t.path("short-draft.gguf");
    fs::write(
        &short,
        Parts::of(&db)
            .set("dflash-draft.context_length", Value::U32(8))
            .bytes(),
    )
    .unwrap();
    let (code, _, err) = limited(&[
        "generate",
        "-m",
        s(&target),
        "-md",
        s(&short),
        "--prompt-tokens",
        "1,2,3",
        "-n",
        "20",
    ]);
    assert_eq!(code, Some(2));
    assert!(err.contains("beyond the context of 8 tokens"), "{err}");
    // verify holds every tensor of a dspark file to the type its file type gives it.
    let mut parts = Parts::of(&db);
    let e = parts
        .tensors
        .iter_mut()
        .find(|t| t.0.name == "dflash.dspark.markov.w1")
        .unwrap();
    let n: u64 = e.0.dims.iter().product();
    e.0.ty = GgmlType::F32;
    e.1 = vec![0u8; n as usize * 4];
    let relabelled = t.path("relabelled.gguf");
    fs::write(&relabelled, parts.bytes()).unwrap();
    let (code, out, _) = limited(&["verify", s(&relabelled)]);
    assert_eq!(code, Some(1));
    assert!(
        out.contains("tensor `dflash.dspark.markov.w1` (markov) should be Q8_0, but it is F32"),
        "{out}"
    );
    let _ = draft;
}

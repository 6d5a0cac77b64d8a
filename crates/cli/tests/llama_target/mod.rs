//! llama targets (llama.cpp's `llama` architecture) against the independent float64 numpy
//! reference `tests/reference/llama_ref.py`: logits and captured hidden states within the
//! Qwen3 test's rule (1e-4 of each position's largest magnitude, argmax equal outside
//! near-ties) for every option the layout carries, on files `dspark synth` writes, on the
//! synth crate's single-option variants, on files the reference's own generator writes
//! (`make_tiny_llama.py`, which also sets `rope.scaling.attn_factor`), for Q8_0, Q4_K and F32
//! matrices (the reference rounds each product's activations as ggml does:
//! `--ggml-activations`). The rule holds because both sides round the same f32 activations
//! to 8 bits; one quant flipped by an ulp of difference would move a row by ~1e-2
//! (`tests/reference/README.md`), which is why real quantized models are compared by tokens
//! (`crate::smollm2`). F16 attention is compared with llama.cpp's own logits. And
//! speculative decoding equals greedy decoding token for token on llama targets with the
//! drafters `synth` pairs them with.

use std::fs;
use std::path::Path;
use std::sync::Arc;

use dspark_gguf::GgmlType;
use dspark_runtime::{Attention, Llama, Logits, Target};
use dspark_synth::llama::{llama_gguf, LlamaGeometry, SynthRopeScaling};

use crate::common::*;
use crate::{json_rows, reference_json};

/// The Qwen3 test's tolerance: scale-relative, per position row.
const TOL: f64 = 1e-4;

const TOKENS: [u32; 12] = [7, 8, 9, 300, 42, 5, 511, 0, 77, 3, 250, 19];

/// The worst error / allowed ratio of `got` (`n × width`, position-major) against the
/// reference rows, where per row (and per captured layer slice of `width / slices`) the
/// allowed error is tol · max(1, max |ref|); with where it is.
fn worst(got: &[f32], want: &[Vec<f64>], slices: usize, tol: f64) -> (f64, String) {
    let width = want.first().map_or(0, Vec::len);
    assert_eq!(got.len(), want.len() * width, "sizes");
    let part = width / slices;
    let mut w = (0.0f64, String::new());
    for (p, row) in want.iter().enumerate() {
        for s in 0..slices {
            let r = &row[s * part..(s + 1) * part];
            let g = &got[p * width + s * part..p * width + (s + 1) * part];
            let scale = r.iter().fold(1.0f64, |m, v| m.max(v.abs()));
            let err = g
                .iter()
                .zip(r)
                .fold(0.0f64, |m, (g, r)| m.max((f64::from(*g) - r).abs()));
            let ratio = if err.is_finite() {
                err / (tol * scale)
            } else {
                f64::INFINITY
            };
            if ratio >= w.0 {
                w = (
                    ratio,
                    format!(
                        "position {p}, slice {s}: max error {err:e}, allowed {tol:e} × {scale}"
                    ),
                );
            }
        }
    }
    w
}

/// Asserts `got` is within the rule ([`worst`]); returns the worst ratio.
fn within(what: &str, got: &[f32], want: &[Vec<f64>], slices: usize, tol: f64) -> f64 {
    let (ratio, at) = worst(got, want, slices, tol);
    assert!(ratio <= 1.0, "{what}: {at}");
    ratio
}

/// The argmax of each logit row equals the reference's, except inside a near-tie (the
/// reference's top-two margin within twice the allowed error).
fn same_argmax(what: &str, got: &[f32], want: &[Vec<f64>], tol: f64) {
    for (p, row) in want.iter().enumerate() {
        let v = row.len();
        let g = &got[p * v..(p + 1) * v];
        let best = |it: &mut dyn Iterator<Item = f64>| {
            it.enumerate().fold(
                (0, f64::NEG_INFINITY),
                |b, (i, x)| if x > b.1 { (i, x) } else { b },
            )
        };
        let (r, top) = best(&mut row.iter().copied());
        let (o, _) = best(&mut g.iter().map(|&x| f64::from(x)));
        let second = row
            .iter()
            .enumerate()
            .filter(|&(i, _)| i != r)
            .fold(f64::NEG_INFINITY, |m, (_, &x)| m.max(x));
        let allowed = tol * row.iter().fold(1.0f64, |m, x| m.max(x.abs()));
        assert!(
            o == r || top - second <= 2.0 * allowed,
            "{what}: argmax at position {p} is {o}, the reference's {r} (margin {})",
            top - second
        );
    }
}

/// Runs our forward (F32 attention) and the reference on `path`, and checks every logit and
/// captured row. Returns the worst error / allowed ratio.
fn matches_reference(t: &Tmp, path: &Path, name: &str, ggml_activations: bool) -> f64 {
    let tol = TOL;
    let capture = [1usize, 0];
    let model = Arc::new(
        Llama::open(Arc::new(fs::read(path).unwrap()))
            .unwrap_or_else(|e| panic!("{name}: the llama target loads: {e}")),
    );
    let hidden = model.hparams().hidden;
    let ours = model
        .session(64, Attention::F32)
        .unwrap()
        .forward(&TOKENS, &capture, Logits::All)
        .unwrap_or_else(|e| panic!("{name}: forward: {e}"));
    let toks: Vec<String> = TOKENS.iter().map(u32::to_string).collect();
    let toks = toks.join(",");
    let mut args = vec![s(path), "--tokens", &toks, "--capture", "1,0"];
    if ggml_activations {
        args.push("--ggml-activations");
    }
    let r = reference_json("llama_ref.py", &args, &t.path(&format!("{name}.json")));
    let (logits, captured) = (json_rows(&r, "logits"), json_rows(&r, "captured"));
    assert_eq!(logits.len(), TOKENS.len());
    assert_eq!(captured[0].len(), capture.len() * hidden);
    let what = name.to_string();
    let a = within(&format!("{what} logits"), &ours.logits, &logits, 1, tol);
    let b = within(
        &format!("{what} captured"),
        &ours.captured,
        &captured,
        capture.len(),
        tol,
    );
    same_argmax(&what, &ours.logits, &logits, tol);
    a.max(b)
}

/// Every llama option on its own, and all together, as `dspark synth` and the synth crate
/// write them; Q8_0, Q4_K and F32 matrices.
#[test]
fn llama_targets_match_the_numpy_reference() {
    let t = Tmp::new();
    let tiny = LlamaGeometry::tiny;
    let mut files: Vec<(String, std::path::PathBuf, bool)> = Vec::new();
    // What `dspark synth` writes (Q8_0 matrices).
    for geometry in ["llama-tiny", "llama-tiny-options", "llama-small"] {
        let dir = t.path(geometry);
        synth_qwen3_geometry(geometry, &dir, 4);
        files.push((geometry.into(), dir.join("target.gguf"), true));
    }
    // One option at a time.
    let variants: Vec<(&str, LlamaGeometry, GgmlType)> = vec![
        ("plain-f32", tiny(), GgmlType::F32),
        (
            "biases",
            LlamaGeometry {
                biases: true,
                ..tiny()
            },
            GgmlType::Q8_0,
        ),
        (
            "fused-qkv",
            LlamaGeometry {
                fused_qkv: true,
                ..tiny()
            },
            GgmlType::Q8_0,
        ),
        (
            "fused-qkv-biases-f32",
            LlamaGeometry {
                fused_qkv: true,
                biases: true,
                ..tiny()
            },
            GgmlType::F32,
        ),
        (
            "rope-freqs",
            LlamaGeometry {
                rope_freqs: true,
                ..tiny()
            },
            GgmlType::Q8_0,
        ),
        (
            "linear",
            LlamaGeometry {
                rope_scaling: SynthRopeScaling::Linear(4.0),
                ..tiny()
            },
            GgmlType::Q8_0,
        ),
        (
            "yarn",
            LlamaGeometry {
                rope_scaling: SynthRopeScaling::Yarn(8.0, 512),
                ..tiny()
            },
            GgmlType::F32,
        ),
        (
            "untied",
            LlamaGeometry {
                untied_output: true,
                ..tiny()
            },
            GgmlType::Q8_0,
        ),
        ("small-q4_k", LlamaGeometry::small(), GgmlType::Q4_K),
        (
            "options-q4_k",
            LlamaGeometry {
                biases: true,
                fused_qkv: true,
                rope_freqs: true,
                rope_scaling: SynthRopeScaling::Yarn(4.0, 1024),
                ..LlamaGeometry::small()
            },
            GgmlType::Q4_K,
        ),
    ];
    for (name, g, ty) in variants {
        let path = t.path(&format!("{name}.gguf"));
        fs::write(&path, llama_gguf(&g, 9, ty)).unwrap();
        files.push((name.into(), path, ty != GgmlType::F32));
    }
    // Files the reference's own generator writes: no vocabulary (`tokenizer.ggml.model =
    // none`), and `rope.scaling.attn_factor`, which synth never writes.
    let generator =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/reference/make_tiny_llama.py");
    for (name, args) in [
        (
            "gen-linear-attn-factor",
            &[
                "--scaling",
                "linear",
                "--factor",
                "2",
                "--attn-factor",
                "1.25",
                "--biases",
            ][..],
        ),
        (
            "gen-yarn-attn-factor-q8_0",
            &[
                "--wtype",
                "q8_0",
                "--scaling",
                "yarn",
                "--factor",
                "8",
                "--orig-ctx",
                "512",
                "--attn-factor",
                "0.8",
                "--freq-factors",
                "--fused-qkv",
                "--tied",
            ][..],
        ),
        (
            "gen-scaling-none-q8_0",
            &["--wtype", "q8_0", "--scaling", "none", "--factor", "4"][..],
        ),
    ] {
        let path = t.path(&format!("{name}.gguf"));
        let o = std::process::Command::new(python())
            .arg(&generator)
            .arg(&path)
            .args(args)
            .args(["--seed", "6"])
            .output()
            .expect("python (see README)");
        assert!(
            o.status.success(),
            "make_tiny_llama.py failed: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        files.push((name.into(), path, args.contains(&"q8_0")));
    }
    for (name, path, quantized) in &files {
        let worst = matches_reference(&t, path, name, *quantized);
        eprintln!("{name}: worst error / allowed {worst:.3}");
    }
}

/// llama.cpp's own logits with its CPU defaults (flash attention, F16 K/V cache), on the
/// target `synth --geometry llama-tiny-options --seed 4` writes
/// (`testdata/llama/llama-tiny-options-logits.json`, made by
/// `bench/llama_cpp_logits_fixture.py`): our F16 attention gives them within the rule
/// above, and the argmax of every position. (Against the float64 reference an F16 cache
/// is 10x outside it: this file's attention logits are large.)
#[test]
fn f16_attention_gives_llama_cpp_default_logits() {
    let fixture: serde_json::Value = serde_json::from_slice(
        &fs::read(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("testdata/llama/llama-tiny-options-logits.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let t = Tmp::new();
    let dir = t.path("pair");
    let (geometry, seed) = (
        fixture["geometry"].as_str().unwrap(),
        fixture["seed"].as_u64().unwrap(),
    );
    synth_qwen3_geometry(geometry, &dir, seed);
    let target = dir.join("target.gguf");
    assert_eq!(
        sha256_file(&target),
        fixture["target_sha256"].as_str().unwrap(),
        "`synth --geometry {geometry} --seed {seed}` no longer writes the file the fixture was made on: remake it (bench/llama_cpp_logits_fixture.py)"
    );
    let tokens: Vec<u32> = fixture["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as u32)
        .collect();
    let want = json_rows(&fixture, "logits");
    assert_eq!(want.len(), tokens.len());
    let model = Arc::new(Llama::open(Arc::new(fs::read(&target).unwrap())).unwrap());
    for attention in [Attention::F16, Attention::F32] {
        let got = model
            .session(64, attention)
            .unwrap()
            .forward(&tokens, &[], Logits::All)
            .unwrap();
        if attention == Attention::F16 {
            within("F16 attention vs llama.cpp", &got.logits, &want, 1, TOL);
            same_argmax("F16 attention vs llama.cpp", &got.logits, &want, TOL);
        } else {
            // The check can fail: F32 attention is far from llama.cpp's F16 cache here.
            let (ratio, _) = worst(&got.logits, &want, 1, TOL);
            assert!(
                ratio > 10.0,
                "F32 attention within {ratio} of llama.cpp's F16 cache"
            );
        }
    }
}

fn python() -> String {
    std::env::var("DSPARK_PYTHON").unwrap_or_else(|_| "python3".into())
}

/// `generate --json` tokens.
fn tokens_of(o: &std::process::Output) -> (Vec<u64>, serde_json::Value) {
    assert_ok(o);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("generate --json");
    let tokens = v["tokens"]
        .as_array()
        .expect("tokens")
        .iter()
        .map(|t| t.as_u64().unwrap())
        .collect();
    (tokens, v["stats"].clone())
}

/// Speculative decoding with the drafter `synth` pairs a llama target with gives greedy
/// decoding's tokens exactly, with either attention, with fixed and adaptive schedules.
#[test]
fn speculative_equals_greedy_on_llama_targets() {
    let t = Tmp::new();
    for (geometry, prompt) in [
        ("llama-tiny", "7,8,9"),
        ("llama-tiny-options", "300,42,5,77,3"),
    ] {
        let dir = t.path(geometry);
        qwen3_pair_of(geometry, &dir, 2);
        let (target, draft) = (dir.join("target.gguf"), dir.join("draft.gguf"));
        for attention in ["f16", "f32"] {
            let run = |extra: &[&str]| {
                let mut args = vec![
                    "generate",
                    "-m",
                    s(&target),
                    "--prompt-tokens",
                    prompt,
                    "-n",
                    "40",
                    "--ignore-eos",
                    "--attention",
                    attention,
                    "--json",
                ];
                args.extend_from_slice(extra);
                tokens_of(&dspark(&args))
            };
            let (greedy, _) = run(&[]);
            assert_eq!(greedy.len(), 40, "{geometry}");
            assert!(
                greedy
                    .iter()
                    .collect::<std::collections::BTreeSet<_>>()
                    .len()
                    > 1,
                "{geometry}: a constant output proves little: {greedy:?}"
            );
            for schedule in ["fixed", "adaptive"] {
                let (spec, stats) = run(&["--draft", s(&draft), "--schedule", schedule]);
                assert_eq!(
                    spec, greedy,
                    "{geometry}, {attention} attention, {schedule} schedule: speculative differs from greedy"
                );
                assert!(
                    stats["rounds"].as_u64().unwrap() > 0,
                    "{geometry}: no speculative round ran: {stats}"
                );
            }
        }
    }
}

//! Helpers for the end-to-end tests: temp folders, running the binary, small
//! safetensors reader/writer (any tensor order), and the Python checker.

#![allow(dead_code)]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use sha2::{Digest, Sha256};

/// A temporary folder removed on drop.
pub struct Tmp(tempfile::TempDir);

impl Tmp {
    pub fn new() -> Tmp {
        Tmp(tempfile::tempdir().expect("temp dir"))
    }
    pub fn path(&self, name: &str) -> PathBuf {
        self.0.path().join(name)
    }
}

pub fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

pub fn dspark(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dspark"))
        .args(args)
        .output()
        .expect("run dspark")
}

/// Runs `dspark ARGS` (which must print one JSON object), checks it succeeded, parses it.
pub fn dspark_json(args: &[&str]) -> serde_json::Value {
    let o = dspark(args);
    assert_ok(&o);
    serde_json::from_slice(&o.stdout).expect("dspark printed one JSON object")
}

pub fn assert_ok(o: &Output) {
    assert!(
        o.status.success(),
        "exit {:?}\nstdout: {}\nstderr: {}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Converts `src` to `out` with `extra` options, then proves the result three ways:
/// `dspark verify` against the report and the source, and the gguf-py checker.
/// Returns the report's path (beside `out`).
pub fn convert_and_prove(src: &Path, out: &Path, extra: &[&str]) -> PathBuf {
    let mut args = vec!["convert", s(src), "-o", s(out), "-q"];
    args.extend_from_slice(extra);
    assert_ok(&dspark(&args));
    let report = out.with_file_name("conversion-report.json");
    assert_ok(&dspark(&[
        "verify",
        s(out),
        "--report",
        s(&report),
        "--source",
        s(src),
    ]));
    python_check(out, Some(src), Some(&report));
    report
}

/// `synth --geometry qwen3-tiny --seed seed` into `dir` (`target.gguf`, `draft/`).
pub fn synth_qwen3(dir: &Path, seed: u64) {
    synth_qwen3_geometry("qwen3-tiny", dir, seed);
}

/// `synth --geometry <geometry> --seed seed` into `dir`.
pub fn synth_qwen3_geometry(geometry: &str, dir: &Path, seed: u64) {
    assert_ok(&dspark(&[
        "synth",
        "--geometry",
        geometry,
        "--out",
        s(dir),
        "--seed",
        &seed.to_string(),
        "-q",
    ]));
}

/// [`synth_qwen3`], then the drafter converted to `dir/draft.gguf`; returns the target's
/// and the drafter's GGUF bytes.
pub fn qwen3_pair(dir: &Path, seed: u64) -> (Vec<u8>, Vec<u8>) {
    qwen3_pair_of("qwen3-tiny", dir, seed)
}

/// [`qwen3_pair`] of another target geometry.
pub fn qwen3_pair_of(geometry: &str, dir: &Path, seed: u64) -> (Vec<u8>, Vec<u8>) {
    synth_qwen3_geometry(geometry, dir, seed);
    let draft = dir.join("draft.gguf");
    assert_ok(&dspark(&[
        "convert",
        s(&dir.join("draft")),
        "-o",
        s(&draft),
        "-q",
    ]));
    (
        fs::read(dir.join("target.gguf")).unwrap(),
        fs::read(&draft).unwrap(),
    )
}

pub fn synth_tiny(dir: &Path, seed: u64) -> PathBuf {
    assert_ok(&dspark(&[
        "synth",
        "--geometry",
        "tiny",
        "--out",
        s(dir),
        "--seed",
        &seed.to_string(),
        "-q",
    ]));
    dir.to_path_buf()
}

pub fn sha256_file(p: &Path) -> String {
    Sha256::digest(fs::read(p).unwrap())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

pub fn names_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

pub fn edit_config(dir: &Path, f: impl FnOnce(&mut serde_json::Value)) {
    let p = dir.join("config.json");
    let mut c: serde_json::Value = serde_json::from_slice(&fs::read(&p).unwrap()).unwrap();
    f(&mut c);
    fs::write(&p, serde_json::to_string_pretty(&c).unwrap()).unwrap();
}

/// Data offset of a GGUF, read with the project's own parser.
pub fn f_data_offset(bytes: &[u8]) -> u64 {
    dspark_gguf::GgufFile::parse(bytes)
        .expect("valid gguf")
        .data_offset()
}

#[derive(Clone, Debug)]
pub struct StTensor {
    pub name: String,
    pub dtype: &'static str,
    pub shape: Vec<u64>,
    pub data: Vec<u8>,
}

impl StTensor {
    pub fn n_elements(&self) -> usize {
        self.shape.iter().product::<u64>() as usize
    }
    pub fn f32(name: &str, shape: Vec<u64>, values: &[f32]) -> StTensor {
        StTensor {
            name: name.into(),
            dtype: "F32",
            shape,
            data: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        }
    }
}

pub fn read_safetensors(p: &Path) -> Vec<StTensor> {
    let bytes = fs::read(p).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut v: Vec<StTensor> = st
        .tensors()
        .into_iter()
        .map(|(name, t)| StTensor {
            name,
            dtype: match t.dtype() {
                safetensors::Dtype::BF16 => "BF16",
                safetensors::Dtype::F16 => "F16",
                safetensors::Dtype::F32 => "F32",
                d => panic!("unexpected {d:?}"),
            },
            shape: t.shape().iter().map(|&d| d as u64).collect(),
            data: t.data().to_vec(),
        })
        .collect();
    v.sort_by(|a, b| a.name.cmp(&b.name));
    v
}

/// Writes tensors in the given order (header and data), unlike the crate's writer.
pub fn write_safetensors(p: &Path, tensors: &[StTensor]) {
    let mut header = serde_json::Map::new();
    let mut offset = 0usize;
    for t in tensors {
        header.insert(t.name.clone(), serde_json::json!({"dtype": t.dtype, "shape": t.shape, "data_offsets": [offset, offset + t.data.len()]}));
        offset += t.data.len();
    }
    let mut text = serde_json::to_vec(&serde_json::Value::Object(header)).unwrap();
    while !text.len().is_multiple_of(8) {
        text.push(b' ');
    }
    let mut out = (text.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&text);
    for t in tensors {
        out.extend_from_slice(&t.data);
    }
    fs::write(p, out).unwrap();
}

fn values(t: &StTensor) -> Vec<f32> {
    match t.dtype {
        "BF16" => t
            .data
            .chunks(2)
            .map(|b| f32::from_bits(u32::from(u16::from_le_bytes([b[0], b[1]])) << 16))
            .collect(),
        "F16" => t
            .data
            .chunks(2)
            .map(|b| half::f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32())
            .collect(),
        _ => t
            .data
            .chunks(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect(),
    }
}

pub fn to_f32(t: &StTensor) -> StTensor {
    StTensor::f32(&t.name, t.shape.clone(), &values(t))
}

/// F16 copy of a tensor whose values are all exactly representable (asserted).
pub fn to_f16_exact(t: &StTensor) -> StTensor {
    let v = values(t);
    let data: Vec<u8> = v
        .iter()
        .flat_map(|&x| {
            let h = half::f16::from_f32(x);
            assert_eq!(
                h.to_f32(),
                x,
                "{} holds a value F16 cannot represent",
                t.name
            );
            h.to_bits().to_le_bytes()
        })
        .collect();
    StTensor {
        name: t.name.clone(),
        dtype: "F16",
        shape: t.shape.clone(),
        data,
    }
}

pub fn next(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

pub fn shuffle<T>(v: &mut [T], state: &mut u64) {
    for i in (1..v.len()).rev() {
        let j = (next(state) % (i as u64 + 1)) as usize;
        v.swap(i, j);
    }
}

/// `n` values made of blocks that stress Q8_0: exact ties, ±0, subnormals, zero blocks,
/// tiny and huge amax, and ordinary Gaussian-like blocks between them.
pub fn edge_values(n: usize) -> Vec<f32> {
    let mut blocks: Vec<[f32; 32]> = Vec::new();
    blocks.push([0.0; 32]);
    blocks.push([-0.0; 32]);
    let mut ties = [0.0f32; 32];
    ties[0] = 127.0;
    for (i, v) in ties.iter_mut().enumerate().skip(1) {
        *v = i as f32 - 16.5;
    }
    ties[1] = 0.5;
    ties[2] = -0.5;
    ties[3] = 126.5;
    ties[4] = -2.5;
    blocks.push(ties);
    let mut ties2 = ties;
    ties2.iter_mut().for_each(|v| *v *= 2.0);
    blocks.push(ties2);
    for amax in [
        1e-45f32, 1e-40, 3e-39, 1e-30, 1e-10, 3.79e-6, 6e-5, 1.0, 65504.0, 1e7, 1e20, 3.4e38,
    ] {
        let mut b = [0.0f32; 32];
        for (i, v) in b.iter_mut().enumerate() {
            *v = amax * ((i as f32 - 15.5) / 16.0);
        }
        b[31] = -amax;
        blocks.push(b);
    }
    let mut state = 99u64;
    let mut out = Vec::with_capacity(n);
    let mut k = 0;
    while out.len() < n {
        if k % 2 == 0 {
            out.extend_from_slice(&blocks[(k / 2) % blocks.len()]);
        } else {
            for _ in 0..32 {
                out.push(((next(&mut state) >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.04);
            }
        }
        k += 1;
    }
    out.truncate(n);
    out
}

pub fn python() -> String {
    std::env::var("DSPARK_PYTHON").unwrap_or_else(|_| "python3".into())
}

/// Runs the independent gguf-py checker; fails the test if it fails or is unavailable.
pub fn python_check(gguf: &Path, source: Option<&Path>, report: Option<&Path>) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/python/check_gguf.py");
    let mut cmd = Command::new(python());
    cmd.arg(&script).arg(gguf);
    if let Some(src) = source {
        cmd.arg("--source").arg(src);
    }
    if let Some(r) = report {
        cmd.arg("--report").arg(r);
    }
    let o = cmd.output().unwrap_or_else(|e| {
        panic!(
            "cannot run {} ({e}): run the README's test command, which installs gguf-py in .venv",
            python()
        )
    });
    assert!(
        o.status.success(),
        "gguf-py checker failed (exit {:?}; is gguf installed? see README):\n{}\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Runs `dspark chat ARGS --json-stats --chat-date 2026-12-03` on `input`; returns stdout
/// and the `--json-stats` lines (one per turn).
pub fn chat(args: &[&str], input: &str) -> (String, Vec<serde_json::Value>) {
    use std::io::Write;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_dspark"))
        .arg("chat")
        .args(args)
        .args(["--json-stats", "--chat-date", "2026-12-03"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let o = child.wait_with_output().unwrap();
    assert_ok(&o);
    let err = String::from_utf8(o.stderr).unwrap();
    let turns = err
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    (String::from_utf8(o.stdout).unwrap(), turns)
}

/// Two `eval --json` outputs made the same speculation: the same rounds and acceptance,
/// prompt by prompt.
pub fn assert_same_speculation(a: &serde_json::Value, b: &serde_json::Value) {
    for key in [
        "mean_acceptance_length",
        "acceptance_per_position",
        "acceptance_histogram",
        "rounds",
        "per_prompt",
    ] {
        assert_eq!(a[key], b[key], "{key}");
    }
}

/// The Markov head carries at least `margin` of the acceptance `tau`: `plain`, the same
/// `eval --json` with `--no-markov`, is still lossless and accepts less by that much.
pub fn assert_markov_gain(tau: f64, plain: &serde_json::Value, margin: f64) {
    assert_eq!(plain["identical_to_ar"], true);
    let tau_plain = plain["mean_acceptance_length"].as_f64().unwrap();
    assert!(
        tau > tau_plain + margin,
        "tau {tau} vs {tau_plain} without the Markov head"
    );
}

/// The fields every `eval --json` report of a lossless pair holds: `prompts` prompts all
/// identical to plain decoding, the per-position, histogram and per-prompt arrays, and
/// positive speeds.
pub fn assert_eval_report(d: &serde_json::Value, prompts: usize) {
    assert_eq!(d["prompts"], prompts);
    assert_eq!(d["identical_to_ar"], true, "{d}");
    for key in [
        "acceptance_per_position",
        "acceptance_histogram",
        "per_prompt",
    ] {
        assert!(d[key].is_array(), "{key} in {d}");
    }
    for key in ["ar_tokens_per_second", "spec_tokens_per_second", "speedup"] {
        assert!(d[key].as_f64().is_some_and(|v| v > 0.0), "{key} in {d}");
    }
}

//! The committed trained pair (`examples/code-pair/`, made by `train/`): its SpecForge
//! checkpoint converts in both layouts (each proved by `verify --source` and an
//! independent gguf-py checker, reproducibly), both files run the same speculation, whose
//! output equals plain decoding, with the acceptance a trained drafter has and the Markov
//! head's share of it; and plain decoding reproduces llama.cpp's greedy text on the
//! target (`llama-greedy.jsonl`, written by `train/llama_greedy.py`).

use std::fs;
use std::path::PathBuf;

use crate::common::*;
use crate::llama_layout::convert_both_layouts;

fn pair() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/code-pair")
}

/// The pair's drafter converted (default options) into `tmp`.
fn converted_drafter(tmp: &Tmp) -> PathBuf {
    let draft = tmp.path("draft.gguf");
    assert_ok(&dspark(&[
        "convert",
        s(&pair().join("draft")),
        "-o",
        s(&draft),
        "-q",
    ]));
    draft
}

/// `dspark generate --json` of `n` tokens (past EOS) after the text of `prompt`, on 2
/// threads, with `extra` options.
fn generate(target: &str, prompt: &str, n: &str, extra: &[&str]) -> serde_json::Value {
    generate_on("2", target, prompt, n, extra)
}

/// [`generate`] on `threads` threads.
fn generate_on(
    threads: &str,
    target: &str,
    prompt: &str,
    n: &str,
    extra: &[&str],
) -> serde_json::Value {
    let mut args = vec![
        "generate",
        "-m",
        target,
        "-f",
        prompt,
        "-n",
        n,
        "--ignore-eos",
        "-t",
        threads,
        "--json",
    ];
    args.extend_from_slice(extra);
    let o = dspark(&args);
    assert_ok(&o);
    serde_json::from_slice(&o.stdout).expect("generate --json")
}

/// `dspark eval --json` over `prompts` with `extra` options.
fn eval(target: &str, draft: &str, prompts: &str, extra: &[&str]) -> serde_json::Value {
    eval_env(target, draft, prompts, extra, &[])
}

/// [`eval`] with environment variables `env` set.
fn eval_env(
    target: &str,
    draft: &str,
    prompts: &str,
    extra: &[&str],
    env: &[(&str, &str)],
) -> serde_json::Value {
    let mut args = vec![
        "eval",
        "-m",
        target,
        "--draft",
        draft,
        "--prompts",
        prompts,
        "-n",
        "48",
        "-t",
        "2",
        "--json",
    ];
    args.extend_from_slice(extra);
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_dspark"))
        .args(&args)
        .envs(env.iter().copied())
        .output()
        .expect("run dspark");
    assert_ok(&o);
    serde_json::from_slice(&o.stdout).expect("eval --json")
}

#[test]
fn trained_pair_converts_in_both_layouts_and_speculates_losslessly() {
    let tmp = Tmp::new();
    let (src, target) = (pair().join("draft"), pair().join("target.gguf"));
    let (dd, ll) = convert_both_layouts(&tmp, &src, &target);

    // The first 6 held-out prompts.
    let prompts = tmp.path("prompts.jsonl");
    let text = fs::read_to_string(pair().join("heldout.jsonl")).unwrap();
    let lines: Vec<&str> = text.lines().take(6).collect();
    assert_eq!(lines.len(), 6);
    fs::write(&prompts, lines.join("\n") + "\n").unwrap();

    let a = eval(s(&target), s(&dd), s(&prompts), &[]);
    let b = eval(s(&target), s(&ll), s(&prompts), &[]);
    for d in [&a, &b] {
        assert_eval_report(d, 6);
        assert_eq!(d["acceptance_per_position"].as_array().unwrap().len(), 8);
        let cal = &d["calibration"];
        assert!(
            cal["ece"]
                .as_f64()
                .is_some_and(|e| (0.0..0.25).contains(&e)),
            "{cal}"
        );
        assert_eq!(cal["per_position"].as_array().unwrap().len(), 8);
    }
    // Both layouts are the same drafter: the same rounds and acceptance, prompt by prompt;
    // only the confidence differs a little (llama.cpp's layout stores `conf_proj.weight`
    // at the matrix type, Q8_0, where dflash-draft keeps it F32).
    assert_same_speculation(&a, &b);
    let per_position = |d: &serde_json::Value| -> Vec<f64> {
        d["calibration"]["per_position"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["mean_predicted"].as_f64().unwrap())
            .collect()
    };
    for (x, y) in per_position(&a).iter().zip(per_position(&b)) {
        assert!((x - y).abs() < 0.01, "confidence {x} vs {y}");
    }
    // A trained drafter (random weights accept about 1 token a round), and the Markov
    // head carries much of it: without its bias the same checkpoint accepts far less.
    let tau = a["mean_acceptance_length"].as_f64().unwrap();
    assert!(tau > 1.9, "tau {tau}");
    // Packed weight tiles (on CPUs whose kernels read them) change no target product. The
    // drafter's products take dspark's own order where its matrices are packed (AVX-512
    // VNNI), so its confidences may move in the last bits; on this pair no proposal does.
    let unpacked = eval_env(
        s(&target),
        s(&dd),
        s(&prompts),
        &[],
        &[("DSPARK_PACK", "0")],
    );
    assert_eq!(unpacked["identical_to_ar"], true);
    for key in ["per_prompt", "acceptance_histogram"] {
        assert_eq!(a[key], unpacked[key], "{key} with DSPARK_PACK=0");
    }
    for (x, y) in per_position(&a).iter().zip(per_position(&unpacked)) {
        assert!(
            (x - y).abs() < 1e-3,
            "confidence {x} vs {y} with DSPARK_PACK=0"
        );
    }
    let plain = eval(s(&target), s(&dd), s(&prompts), &["--no-markov"]);
    assert_markov_gain(tau, &plain, 0.4);
}

#[test]
fn plain_decoding_reproduces_llama_cpp_greedy_text() {
    let tmp = Tmp::new();
    let target = pair().join("target.gguf");
    let fixture = fs::read_to_string(pair().join("llama-greedy.jsonl")).unwrap();
    let rows: Vec<serde_json::Value> = fixture
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(rows.len() >= 12);
    for (i, row) in rows.iter().enumerate() {
        let prompt = tmp.path(&format!("p{i}.txt"));
        fs::write(&prompt, row["prompt"].as_str().unwrap()).unwrap();
        let d = generate(s(&target), s(&prompt), "64", &[]);
        let ours = d["text"].as_str().unwrap();
        let theirs = row["llama_text"].as_str().unwrap();
        // The fixture records how far dspark agreed when it was written; a near-tie
        // (its top-2 margin recorded) may end the agreement early, nothing else may.
        let agree = row["dspark_agrees_chars"].as_u64().unwrap() as usize;
        if row.get("near_tie").is_none() {
            assert_eq!(
                agree,
                ours.len(),
                "prompt {i}: fixture and run disagree on length"
            );
        }
        assert!(
            ours.len() >= agree && theirs.len() >= agree,
            "prompt {i}: {ours:?}"
        );
        assert_eq!(
            ours.as_bytes()[..agree],
            theirs.as_bytes()[..agree],
            "prompt {i}: dspark's greedy text left llama.cpp's\n ours:   {ours:?}\n theirs: {theirs:?}"
        );
    }
}

/// `generate` on the trained pair: the adaptive schedule (the default, which trims blocks
/// and takes plain steps by measured cost) and fixed blocks of any cap give the plain
/// greedy tokens, and the trace replays the output step by step.
#[test]
fn every_schedule_generates_the_plain_greedy_tokens() {
    let tmp = Tmp::new();
    let target = pair().join("target.gguf");
    let draft = converted_drafter(&tmp);
    let text = fs::read_to_string(pair().join("heldout.jsonl")).unwrap();
    for (i, line) in text.lines().take(3).enumerate() {
        let row: serde_json::Value = serde_json::from_str(line).unwrap();
        let prompt = tmp.path(&format!("p{i}.txt"));
        fs::write(&prompt, row["prompt"].as_str().unwrap()).unwrap();
        let run = |extra: &[&str]| generate(s(&target), s(&prompt), "96", extra);
        let plain = run(&[]);
        let trace = tmp.path(&format!("t{i}.jsonl"));
        let adaptive = run(&["--draft", s(&draft), "--trace", s(&trace)]);
        assert_eq!(adaptive["tokens"], plain["tokens"], "prompt {i}, adaptive");
        let stats = &adaptive["stats"];
        // The warm-up takes one plain step, so every run has at least one.
        assert!(stats["plain_steps"].as_u64().unwrap() >= 1, "{stats}");
        let mut replay = vec![adaptive["tokens"][0].clone()];
        for l in fs::read_to_string(&trace).unwrap().lines() {
            let l: serde_json::Value = serde_json::from_str(l).unwrap();
            replay.extend(l["committed"].as_array().unwrap().iter().cloned());
        }
        assert_eq!(serde_json::Value::Array(replay), adaptive["tokens"]);
        for cap in ["1", "3", "8"] {
            for schedule in ["fixed", "adaptive"] {
                let o = run(&[
                    "--draft",
                    s(&draft),
                    "--schedule",
                    schedule,
                    "--draft-max",
                    cap,
                ]);
                assert_eq!(o["tokens"], plain["tokens"], "prompt {i}, {schedule} {cap}");
                if schedule == "fixed" {
                    let st = &o["stats"];
                    let (rounds, verified) = (
                        st["rounds"].as_u64().unwrap(),
                        st["drafts_verified"].as_u64().unwrap(),
                    );
                    assert_eq!(st["plain_steps"], 0);
                    assert!(verified <= rounds * cap.parse::<u64>().unwrap(), "{st}");
                }
            }
        }
    }
    // A cap above the block is clamped to it, with a warning.
    let o = dspark(&[
        "generate",
        "-m",
        s(&target),
        "-md",
        s(&draft),
        "-p",
        "def f(x):",
        "-n",
        "8",
        "--draft-max",
        "50",
    ]);
    assert_ok(&o);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("--draft-max 50 is above the drafter's 8"),
        "{err}"
    );
}

#[test]
fn sampled_generation_is_seeded_thread_invariant_and_traced() {
    let tmp = Tmp::new();
    let target = pair().join("target.gguf");
    let draft = converted_drafter(&tmp);
    let prompt = pair().join("prompt.txt");
    let sample = |threads: &str, seed: &str, extra: &[&str]| {
        let mut args = vec!["--temp", "0.8", "--top-p", "0.95", "--seed", seed];
        args.extend_from_slice(extra);
        generate_on(threads, s(&target), s(&prompt), "48", &args)
    };
    // A seed fixes the output for any thread count, plain and speculative (fixed
    // schedule); another seed gives other tokens.
    let plain = sample("1", "7", &[]);
    assert_eq!(sample("2", "7", &[])["tokens"], plain["tokens"]);
    assert_ne!(sample("1", "8", &[])["tokens"], plain["tokens"]);
    assert_eq!(
        plain["sampling"],
        serde_json::json!({"temp": 0.8f32, "top_k": 0, "top_p": 0.95f32, "min_p": 0.0, "seed": 7})
    );
    let trace = tmp.path("trace.jsonl");
    let spec = sample(
        "1",
        "7",
        &[
            "--draft",
            s(&draft),
            "--schedule",
            "fixed",
            "--trace",
            s(&trace),
        ],
    );
    let spec2 = sample("2", "7", &["--draft", s(&draft), "--schedule", "fixed"]);
    assert_eq!(spec["tokens"], spec2["tokens"]);
    assert!(spec["stats"]["rounds"].as_u64().unwrap() > 0);
    // The trace: q and p of every verified draft, probabilities, q above 0 (it was drawn
    // from q); the committed tokens replay the output.
    let mut replay = vec![spec["tokens"][0].clone()];
    for l in fs::read_to_string(&trace).unwrap().lines() {
        let l: serde_json::Value = serde_json::from_str(l).unwrap();
        let verified = l["verified"].as_u64().unwrap() as usize;
        let (q, p) = (l["q"].as_array().unwrap(), l["p"].as_array().unwrap());
        assert_eq!((q.len(), p.len()), (verified, verified), "{l}");
        for (q, p) in q.iter().zip(p) {
            let (q, p) = (q.as_f64().unwrap(), p.as_f64().unwrap());
            assert!(q > 0.0 && q <= 1.0 && (0.0..=1.0).contains(&p), "{l}");
        }
        replay.extend(l["committed"].as_array().unwrap().iter().cloned());
    }
    assert_eq!(serde_json::Value::Array(replay), spec["tokens"]);
    // The adaptive schedule samples too (its tokens follow its choices).
    let adaptive = sample("2", "7", &["--draft", s(&draft)]);
    assert_eq!(adaptive["tokens"].as_array().unwrap().len(), 48);
    // Greedy ignores the seed and the truncations: speculative equals plain.
    let greedy = |extra: &[&str]| {
        let mut args = vec!["--temp", "0", "--top-k", "5", "--seed", "3"];
        args.extend_from_slice(extra);
        generate(s(&target), s(&prompt), "48", &args)["tokens"].clone()
    };
    assert_eq!(greedy(&["--draft", s(&draft)]), greedy(&[]));
    assert_eq!(
        greedy(&[]),
        generate(s(&target), s(&prompt), "48", &[])["tokens"]
    );
}

#[test]
fn eval_and_bench_sample_when_asked() {
    let tmp = Tmp::new();
    let target = pair().join("target.gguf");
    let draft = converted_drafter(&tmp);
    let prompts = tmp.path("prompts.jsonl");
    let text = fs::read_to_string(pair().join("heldout.jsonl")).unwrap();
    fs::write(
        &prompts,
        text.lines().take(3).collect::<Vec<_>>().join("\n"),
    )
    .unwrap();
    let e = eval(
        s(&target),
        s(&draft),
        s(&prompts),
        &["--temp", "1", "--top-k", "20", "--seed", "4"],
    );
    assert_eq!(e["prompts"], 3);
    assert!(
        e["identical_to_ar"].is_null(),
        "sampled outputs are not compared: {e}"
    );
    assert_eq!(e["sampling"]["top_k"], 20);
    let tau = e["mean_acceptance_length"].as_f64().unwrap();
    assert!((1.0..=9.0).contains(&tau), "{tau}");
    // The same seed, the same figures (but the times).
    let again = eval(
        s(&target),
        s(&draft),
        s(&prompts),
        &["--temp", "1", "--top-k", "20", "--seed", "4"],
    );
    assert_eq!(again["acceptance_histogram"], e["acceptance_histogram"]);
    let o = dspark(&[
        "bench",
        "-m",
        s(&target),
        "--draft",
        s(&draft),
        "--runs",
        "3",
        "--temp",
        "0.8",
        "--top-p",
        "0.95",
        "--json",
    ]);
    assert_ok(&o);
    let b: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(
        b["round"]["acceptance"]["median_ms"].as_f64().unwrap() > 0.0,
        "{b}"
    );
    assert_eq!(b["sampling"]["temp"], 0.8f32);
}

/// `generate --logits` writes the target's logits of every position of the prompt and the
/// output, evaluated again as one batch: one line per position with its token, the greedy
/// output is each row's argmax from the prompt's last position on, and the file's bytes do
/// not depend on the thread count. An existing file needs --force.
#[test]
fn generate_writes_the_logits_of_every_position() {
    let t = Tmp::new();
    let target = pair().join("target.gguf");
    let out = |threads: &str, name: &str| -> (serde_json::Value, Vec<u8>) {
        let path = t.path(name);
        let o = dspark(&[
            "generate",
            "-m",
            s(&target),
            "-p",
            "def main(argv):",
            "-n",
            "12",
            "-t",
            threads,
            "--json",
            "--logits",
            s(&path),
        ]);
        assert_ok(&o);
        (
            serde_json::from_slice(&o.stdout).unwrap(),
            fs::read(&path).unwrap(),
        )
    };
    let (g, bytes) = out("2", "a.jsonl");
    let prompt: Vec<u64> = g["prompt_tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap())
        .collect();
    let tokens: Vec<u64> = g["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap())
        .collect();
    let rows: Vec<serde_json::Value> = String::from_utf8(bytes.clone())
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), prompt.len() + tokens.len());
    for (i, (r, &tok)) in rows.iter().zip(prompt.iter().chain(&tokens)).enumerate() {
        assert_eq!(r["position"].as_u64(), Some(i as u64));
        assert_eq!(r["token"].as_u64(), Some(tok));
        assert_eq!(r["logits"].as_array().unwrap().len(), 4096);
    }
    let argmax = |r: &serde_json::Value| {
        let l: Vec<f64> = r["logits"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect();
        (0..l.len()).fold(0, |b, i| if l[i] > l[b] { i } else { b }) as u64
    };
    let greedy: Vec<u64> = rows[prompt.len() - 1..rows.len() - 1]
        .iter()
        .map(argmax)
        .collect();
    assert_eq!(greedy, tokens);
    assert_eq!(out("1", "b.jsonl").1, bytes, "the same bytes on one thread");
    let o = dspark(&[
        "generate",
        "-m",
        s(&target),
        "-p",
        "x",
        "-n",
        "1",
        "--logits",
        s(&t.path("a.jsonl")),
    ]);
    assert_eq!(o.status.code(), Some(1), "an existing file without --force");
    assert!(String::from_utf8_lossy(&o.stderr).contains("--force"));
}

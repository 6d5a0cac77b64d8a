//! The committed trained Kimi-K3-architecture pair (`examples/k3-pair/`, made by
//! `train/k3/`): its SpecForge checkpoint converts, and on held-out code prompts the
//! speculative output equals plain decoding with the acceptance the drafter was trained
//! for (τ ≥ 2.5 greedily), most of it the Markov head's, under either KDA rollback.

use std::fs;
use std::path::PathBuf;

use crate::common::*;

fn pair() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/k3-pair")
}

/// `dspark eval --json` of the first `prompts` held-out prompts, 64 tokens each.
fn eval(tmp: &Tmp, draft: &str, prompts: usize, extra: &[&str]) -> serde_json::Value {
    let file = tmp.path(&format!("heldout{prompts}.jsonl"));
    let all = fs::read_to_string(pair().join("heldout.jsonl")).unwrap();
    let lines: Vec<&str> = all.lines().take(prompts).collect();
    assert_eq!(lines.len(), prompts);
    fs::write(&file, lines.join("\n") + "\n").unwrap();
    let target = pair().join("target.gguf");
    let mut args = vec![
        "eval",
        "-m",
        s(&target),
        "--draft",
        draft,
        "--prompts",
        s(&file),
        "-n",
        "64",
        "-t",
        "2",
        "--json",
    ];
    args.extend_from_slice(extra);
    let o = dspark(&args);
    assert_ok(&o);
    serde_json::from_slice(&o.stdout).expect("eval --json")
}

#[test]
fn trained_k3_pair_speculates_losslessly_with_its_trained_acceptance() {
    let tmp = Tmp::new();
    let draft = tmp.path("draft.gguf");
    assert_ok(&dspark(&[
        "convert",
        s(&pair().join("draft")),
        "-o",
        s(&draft),
        "-q",
    ]));
    let a = eval(&tmp, s(&draft), 8, &[]);
    assert_eval_report(&a, 8);
    let tau = a["mean_acceptance_length"].as_f64().unwrap();
    assert!(tau >= 2.5, "tau {tau}");
    // The planner's rollback is free (auto) above; each fixed one is lossless too.
    let first = fs::read_to_string(pair().join("heldout.jsonl")).unwrap();
    let first: serde_json::Value = serde_json::from_str(first.lines().next().unwrap()).unwrap();
    let prompt = tmp.path("p0.txt");
    fs::write(&prompt, first["prompt"].as_str().unwrap()).unwrap();
    let target = pair().join("target.gguf");
    let generate = |extra: &[&str]| -> serde_json::Value {
        let mut args = vec![
            "generate",
            "-m",
            s(&target),
            "-f",
            s(&prompt),
            "-n",
            "64",
            "--ignore-eos",
            "-t",
            "2",
            "--json",
        ];
        args.extend_from_slice(extra);
        let o = dspark(&args);
        assert_ok(&o);
        serde_json::from_slice(&o.stdout).expect("generate --json")
    };
    let plain = generate(&[]);
    for rollback in ["snapshots", "replay"] {
        let r = generate(&["--draft", s(&draft), "--rollback", rollback]);
        assert_eq!(r["tokens"], plain["tokens"], "--rollback {rollback}");
        assert!(
            r["stats"]["rounds"].as_u64().unwrap() > 0,
            "{rollback}: it drafted"
        );
    }
    // Trained with the Markov head: without its bias the drafter accepts far less.
    let plain = eval(&tmp, s(&draft), 8, &["--no-markov"]);
    assert_markov_gain(tau, &plain, 1.0);
}

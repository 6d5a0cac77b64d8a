//! `dspark eval`: the figures over a prompt set follow their definitions (τ from the
//! histogram, per-position rates within their counts, calibration bounded), speculative
//! output equals plain output with and without the Markov head, and prompt files are
//! checked line by line.

use std::fs;

use crate::common::*;

#[test]
fn eval_measures_speculation_over_a_prompt_set() {
    let tmp = Tmp::new();
    let dir = tmp.path("pair");
    qwen3_pair(&dir, 8);
    let (target, draft) = (dir.join("target.gguf"), dir.join("draft.gguf"));
    let prompts = tmp.path("prompts.jsonl");
    fs::write(
        &prompts,
        "{\"prompt\": \"def main():\\n    return\"}\n\n{\"prompt\": \"the quick brown fox\", \"id\": 2}\n{\"prompt\": \"import os\"}\n",
    )
    .unwrap();
    let run = |extra: &[&str]| {
        let mut args = vec![
            "eval",
            "--target",
            s(&target),
            "--draft",
            s(&draft),
            "--prompts",
            s(&prompts),
            "--max-tokens",
            "40",
            "--json",
        ];
        args.extend_from_slice(extra);
        let o = dspark(&args);
        assert_ok(&o);
        serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()
    };
    let d = run(&[]);
    assert_eq!(d["prompts"], 3);
    assert_eq!(d["identical_to_ar"], true);
    let tau = d["mean_acceptance_length"].as_f64().unwrap();
    assert!((1.0..=5.0).contains(&tau), "{tau}");
    // τ from the histogram: rounds that accepted m drafts commit m + 1 tokens.
    let hist: Vec<u64> = d["acceptance_histogram"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    let rounds: u64 = hist.iter().sum();
    let committed: u64 = hist
        .iter()
        .enumerate()
        .map(|(m, n)| (m as u64 + 1) * n)
        .sum();
    assert_eq!(rounds, d["rounds"].as_u64().unwrap());
    assert!((committed as f64 / rounds as f64 - tau).abs() < 1e-9);
    let per = d["acceptance_per_position"].as_array().unwrap();
    // Every round reaches the first draft but a prompt's last, which may verify none.
    let first = per[0]["reached"].as_u64().unwrap();
    assert!(
        first <= rounds && first + 3 >= rounds,
        "{first} of {rounds}"
    );
    for p in per {
        let (r, a) = (
            p["reached"].as_u64().unwrap(),
            p["accepted"].as_u64().unwrap(),
        );
        assert!(a <= r);
    }
    let cal = &d["calibration"];
    assert!(cal["ece"].as_f64().unwrap() >= 0.0 && cal["ece"].as_f64().unwrap() <= 1.0);
    assert!(!cal["per_position"].as_array().unwrap().is_empty());
    assert!(d["ar_tokens_per_second"].as_f64().unwrap() > 0.0);
    assert!(d["spec_tokens_per_second"].as_f64().unwrap() > 0.0);
    // The ablation drafts differently but is just as lossless.
    let n = run(&["--no-markov"]);
    assert_eq!(n["markov"], false);
    assert_eq!(n["identical_to_ar"], true);
    // The table form, and bad prompt files named by line.
    let table = |extra: &[&str]| {
        let mut args = vec![
            "eval",
            "-m",
            s(&target),
            "-md",
            s(&draft),
            "--prompts",
            s(&prompts),
        ];
        args.extend_from_slice(extra);
        dspark(&args)
    };
    assert_ok(&table(&["-n", "8"]));
    fs::write(&prompts, "{\"prompt\": \"a\"}\nnot json\n").unwrap();
    let o = table(&[]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("line 2"));
    fs::write(&prompts, "\n").unwrap();
    let o = table(&[]);
    assert_eq!(o.status.code(), Some(2));
}

/// `eval` reads `{"messages": [...]}` lines too, rendered with the chat template (here a
/// template file: the synthetic target has none) as `generate --chat` renders them: the
/// same figures as the rendered text given as `prompt` lines, tokenized alike; a malformed
/// conversation names its line, and messages without a template are refused.
#[test]
fn eval_renders_conversations_with_the_chat_template() {
    let tmp = Tmp::new();
    let dir = tmp.path("pair");
    qwen3_pair(&dir, 8);
    let (target, draft) = (dir.join("target.gguf"), dir.join("draft.gguf"));
    let tpl = tmp.path("t.jinja");
    fs::write(
        &tpl,
        "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}",
    )
    .unwrap();
    let chat = tmp.path("chat.jsonl");
    fs::write(
        &chat,
        "{\"messages\": [{\"role\": \"user\", \"content\": \"def main():\"}]}\n{\"messages\": [{\"role\": \"system\", \"content\": \"py\"}, {\"role\": \"user\", \"content\": \"import os\"}]}\n",
    )
    .unwrap();
    let plain = tmp.path("plain.jsonl");
    fs::write(
        &plain,
        "{\"prompt\": \"user: def main():\\nassistant:\"}\n{\"prompt\": \"system: py\\nuser: import os\\nassistant:\"}\n",
    )
    .unwrap();
    let run = |prompts: &std::path::Path, extra: &[&str]| {
        let mut args = vec![
            "eval",
            "--target",
            s(&target),
            "--draft",
            s(&draft),
            "--prompts",
            s(prompts),
            "--max-tokens",
            "24",
            "--json",
        ];
        args.extend_from_slice(extra);
        dspark(&args)
    };
    let o = run(&chat, &["--chat-template-file", s(&tpl)]);
    assert_ok(&o);
    let c: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let o = run(&plain, &[]);
    assert_ok(&o);
    let p: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(c["prompts"], 2);
    assert_eq!(c["identical_to_ar"], true);
    for key in ["acceptance_histogram", "rounds", "mean_acceptance_length"] {
        assert_eq!(c[key], p[key], "{key}");
    }
    let o = run(&chat, &[]);
    assert_eq!(
        o.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains("carries no chat template"));
    fs::write(&chat, "{\"messages\": [{\"content\": \"x\"}]}\n").unwrap();
    let o = run(&chat, &["--chat-template-file", s(&tpl)]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("line 1") && err.contains("no `role`"), "{err}");
}

//! The contracts on real files and on every documented bound: a valid synthetic target and
//! drafter pass; each bounded key just inside its bound raises no finding about it, just
//! outside it raises one naming it; a huge `block_count` is refused without enumerating
//! layers (a fuzzer-found OOM).

use dspark_contract::{bounds, dflash_draft, fit, identify, qwen3, FileKind, Subject};
use dspark_gguf::{GgmlType, GgufFile, Value};
use dspark_testkit::craft::Parts;
use dspark_testkit::target::{qwen3_gguf, write_pair, Qwen3Geometry};

fn types() -> Vec<GgmlType> {
    dspark_quant::matrix_types().to_vec()
}

fn pair() -> (Vec<u8>, Vec<u8>) {
    let dir = tempfile::tempdir().unwrap();
    let g = Qwen3Geometry::tiny();
    write_pair(&g, dir.path(), 1, &|_, _| true).unwrap();
    (
        qwen3_gguf(&g, 1, GgmlType::Q8_0),
        dspark_testkit::run::convert(&dir.path().join("draft")),
    )
}

/// Findings about `key`, when `bytes` is checked as a drafter (`draft`) or a target.
fn findings_about(bytes: &[u8], key: &str, draft: bool) -> Vec<String> {
    let file = GgufFile::parse(bytes).unwrap();
    let err = if draft {
        dflash_draft::check(&file, &types()).err()
    } else {
        qwen3::check(&file, &types()).err()
    };
    err.map_or(Vec::new(), |e| {
        e.findings
            .iter()
            .filter(|f| f.subject == Subject::Key(key.to_string()))
            .map(|f| f.to_string())
            .collect()
    })
}

#[test]
fn valid_files_pass_and_are_identified() {
    let (t, d) = pair();
    let (tf, df) = (GgufFile::parse(&t).unwrap(), GgufFile::parse(&d).unwrap());
    assert_eq!(identify(&tf), FileKind::Target("qwen3"));
    assert_eq!(identify(&df), FileKind::DflashDraft);
    let target = qwen3::check(&tf, &types()).unwrap();
    let draft = dflash_draft::check(&df, &types()).unwrap();
    assert_eq!(target.layers().len(), 4);
    assert_eq!(target.vocab().unwrap().tokens.len(), 512);
    assert_eq!(draft.hparams().target_layer_ids, [1, 2]);
    fit::check(&draft, &target.shape()).unwrap();
    // Each checked as the other kind: refused at the architecture key.
    assert!(dflash_draft::check(&tf, &types()).is_err());
    assert!(qwen3::check(&df, &types()).is_err());
    // Without the Q8_0 kernel, every Q8_0 matrix is a finding.
    let e = qwen3::check(&tf, &[GgmlType::F32]).unwrap_err();
    assert!(e
        .findings
        .iter()
        .all(|f| f.msg.contains("has type Q8_0, expected one of F32")));
}

#[test]
fn every_documented_bound_is_enforced_at_its_edge() {
    let (t, d) = pair();
    let cases: [(&str, bool, std::ops::RangeInclusive<u64>); 9] = [
        ("qwen3.embedding_length", false, bounds::EMBEDDING_LENGTH),
        ("qwen3.block_count", false, bounds::BLOCK_COUNT),
        (
            "qwen3.feed_forward_length",
            false,
            bounds::FEED_FORWARD_LENGTH,
        ),
        ("qwen3.attention.head_count", false, bounds::HEAD_COUNT),
        ("qwen3.attention.key_length", false, bounds::HEAD_DIM),
        ("qwen3.context_length", false, bounds::CONTEXT_LENGTH),
        ("dflash-draft.dflash.block_size", true, bounds::BLOCK_SIZE),
        (
            "dflash-draft.dflash.dspark.markov_rank",
            true,
            bounds::MARKOV_RANK,
        ),
        (
            "dflash-draft.attention.head_count_kv",
            true,
            bounds::HEAD_COUNT,
        ),
    ];
    for (key, draft, range) in cases {
        let base = if draft { &d } else { &t };
        for (v, inside) in [
            (*range.start(), true),
            (*range.end(), true),
            (range.start() - 1, false),
            (range.end().saturating_add(1), false),
        ] {
            let Ok(v32) = u32::try_from(v) else { continue };
            let bytes = Parts::of(base).set(key, Value::U32(v32)).bytes();
            let f = findings_about(&bytes, key, draft);
            let bound_finding = f
                .iter()
                .any(|m| m.contains("expected") && m.contains(&format!("is {v}")));
            if inside {
                assert!(
                    !f.iter()
                        .any(|m| m.contains(&format!("{}..={}", range.start(), range.end()))),
                    "{key} = {v}: {f:?}"
                );
            } else {
                assert!(bound_finding, "{key} = {v} must be refused: {f:?}");
            }
        }
    }
    // Floats: finite and positive, eps at most 1.
    for (key, draft) in [
        ("qwen3.attention.layer_norm_rms_epsilon", false),
        ("qwen3.rope.freq_base", false),
        ("dflash-draft.rope.freq_base", true),
    ] {
        let base = if draft { &d } else { &t };
        for v in [f32::NAN, f32::INFINITY, -1.0, 0.0, f32::NEG_INFINITY] {
            let bytes = Parts::of(base).set(key, Value::F32(v)).bytes();
            assert_eq!(findings_about(&bytes, key, draft).len(), 1, "{key} = {v}");
        }
    }
    let bytes = Parts::of(&t)
        .set("qwen3.attention.layer_norm_rms_epsilon", Value::F32(2.0))
        .bytes();
    assert_eq!(
        findings_about(&bytes, "qwen3.attention.layer_norm_rms_epsilon", false).len(),
        1
    );
}

/// Found by `cargo fuzz run gguf_parse` (2026-11-30): a valid GGUF whose `block_count` is
/// 4294967295 made the old contract check list ~47 billion missing tensors. Out-of-bounds
/// geometry ends the check at the bound finding.
#[test]
fn fuzz_oom_huge_block_count() {
    let bytes = include_bytes!("../testdata/fuzz-gguf-oom-block-count.gguf");
    let file = GgufFile::parse(bytes).unwrap();
    let e = dflash_draft::check(&file, &types()).unwrap_err();
    assert!(
        e.findings.iter().any(|f| f
            .to_string()
            .contains("block_count`: is 4294967295, expected 1..=1024")),
        "{e:?}"
    );
    assert!(e.findings.len() < 10, "{e:?}");
}

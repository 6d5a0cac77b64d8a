//! Kimi K3 files that break the layout: every required key and tensor missing, values out
//! of range or inconsistent, tensors llama.cpp cannot run, extra tensors — each refused
//! with a finding naming it; and every truncation and thousands of seeded mutants of a
//! micro file checked and loaded without a panic, under a memory bound.

use std::alloc::System;

use cap::Cap;
use dspark_contract::kimi_k3::{self, KIND};
use dspark_contract::Subject;
use dspark_gguf::{Array, GgmlType, GgufFile, TensorInfo, Value};
use dspark_runtime::{KimiK3, Logits, Target};
use dspark_testkit::craft::Parts;
use dspark_testkit::kimi_k3::{kimi_k3_gguf, K3Geometry};
use dspark_testkit::mutate::mutants;

#[global_allocator]
static ALLOC: Cap<System> = Cap::new(System, usize::MAX);

mod hostile_common;
use hostile_common::{about, types};

/// Every finding of `bytes` checked as a kimi-k3 target (empty when it passes).
fn findings(bytes: &[u8]) -> Vec<(Subject, String)> {
    hostile_common::findings_by(bytes, KIND, |f, t| kimi_k3::check(f, t).map(drop))
}

#[test]
fn the_synthetic_targets_pass_with_their_geometry() {
    for g in [K3Geometry::tiny(), K3Geometry::small()] {
        let bytes = kimi_k3_gguf(&g, 1, GgmlType::Q8_0);
        let file = GgufFile::parse(&bytes).unwrap();
        assert_eq!(
            dspark_contract::identify(&file),
            dspark_contract::FileKind::Target("kimi-k3")
        );
        let k = kimi_k3::check(&file, &types()).unwrap();
        let h = k.hparams();
        assert_eq!((h.hidden, h.layers, h.vocab), (g.hidden, g.layers, g.vocab));
        let mla: Vec<usize> = (0..h.layers).filter(|&i| h.mla[i]).collect();
        assert_eq!(mla, g.mla_layers);
        assert_eq!(
            (h.res_block, h.experts, h.experts_used),
            (g.res_block, g.experts, g.experts_used)
        );
        assert_eq!(h.gate_lower_bound, g.gate_lower_bound);
        assert_eq!(h.q_lora_rank, g.q_lora_rank);
        // Without the Q8_0 kernel every Q8_0 matrix is a finding, named.
        let e = kimi_k3::check(&file, &[GgmlType::F32]).unwrap_err();
        assert!(e.findings.iter().all(|f| f.msg.contains("has type Q8_0")));
    }
}

#[test]
fn every_required_key_and_tensor_is_named_when_missing() {
    let bytes = kimi_k3_gguf(&K3Geometry::tiny(), 2, GgmlType::F32);
    let file = GgufFile::parse(&bytes).unwrap();
    let required = [
        "context_length",
        "embedding_length",
        "block_count",
        "attention.layer_norm_rms_epsilon",
        "attention.head_count",
        "attention.kv_lora_rank",
        "attention.key_length_mla",
        "attention.value_length_mla",
        "rope.dimension_count",
        "ssm.conv_kernel",
        "kda.head_dim",
        "expert_feed_forward_length",
        "expert_shared_count",
        "expert_gating_func",
        "attn_res.block_size",
        "activation.situ_beta",
        "activation.situ_linear_beta",
    ];
    for k in required {
        let key = format!("kimi-k3.{k}");
        let f = findings(&Parts::of(&bytes).remove(&key).bytes());
        assert!(about(&f, &key), "{key}: {f:?}");
    }
    // Optional keys: the file stays valid (or, for the MoE and LoRA keys, the tensors
    // that need them are named).
    // key_length sizes llama.cpp's MLA cache row: missing, it would be hidden / heads.
    let f = findings(
        &Parts::of(&bytes)
            .remove("kimi-k3.attention.key_length")
            .bytes(),
    );
    assert!(about(&f, "kimi-k3.attention.key_length"), "{f:?}");
    for k in ["attention.value_length", "vocab_size"] {
        let f = findings(&Parts::of(&bytes).remove(&format!("kimi-k3.{k}")).bytes());
        assert!(f.is_empty(), "{k}: {f:?}");
    }
    for t in file.tensor_infos() {
        let f = findings(&Parts::of(&bytes).remove_tensor(&t.name).bytes());
        let optional = ["attn_gate.weight", "ffn_routed_norm.weight"]
            .iter()
            .any(|s| t.name.ends_with(s))
            || t.name.contains("shexp");
        if optional {
            // Dropping one of the three shared-expert tensors names the other two's
            // partner; dropping an optional gate or norm leaves a valid file.
            if t.name.contains("shexp") {
                assert!(!f.is_empty(), "{}", t.name);
            } else {
                assert!(f.is_empty(), "{}: {f:?}", t.name);
            }
        } else if t.name.ends_with("attn_q_a_norm.weight") {
            // Without the norm the layer is a plain-query one: attn_q is missing, and
            // attn_q_a / attn_q_b are extra.
            assert!(!f.is_empty(), "{}", t.name);
        } else {
            assert!(about(&f, &t.name), "{}: {f:?}", t.name);
        }
    }
}

#[test]
fn bad_values_are_refused_by_name() {
    let bytes = kimi_k3_gguf(&K3Geometry::tiny(), 3, GgmlType::F32);
    let k = |s: &str| format!("kimi-k3.{s}");
    let cases: Vec<(String, Value)> = vec![
        (
            k("attention.head_count_kv"),
            Value::Array(Array::I32(vec![0, 2, 0, 1, 0, 1])),
        ),
        (
            k("attention.head_count_kv"),
            Value::Array(Array::I32(vec![0, 1, 0])),
        ),
        (
            k("attention.head_count_kv"),
            Value::Array(Array::I32(vec![0, 1, 0, 1, 0, -1])),
        ),
        (
            k("attention.head_count_kv"),
            Value::Array(Array::F32(vec![0.0; 6])),
        ),
        (
            k("attention.head_count"),
            Value::Array(Array::U32(vec![2, 2, 3, 0, 2, 2])),
        ),
        (k("attention.head_count"), Value::U32(0)),
        (k("activation.situ_beta"), Value::F32(0.0)),
        (k("activation.situ_beta"), Value::F32(f32::NAN)),
        (k("activation.situ_linear_beta"), Value::F32(f32::INFINITY)),
        (k("kda.gate_lower_bound"), Value::F32(f32::NAN)),
        (k("expert_gating_func"), Value::U32(5)),
        (k("expert_gating_func"), Value::U32(0)),
        (k("expert_used_count"), Value::U32(5)),
        (k("expert_used_count"), Value::U32(0)),
        (
            k("expert_used_count"),
            Value::Array(Array::U32(vec![2, 2, 3, 2, 2, 2])),
        ),
        (k("expert_group_count"), Value::U32(3)),
        (k("expert_weights_scale"), Value::F32(f32::NAN)),
        (k("expert_weights_norm"), Value::U32(1)),
        (k("rope.dimension_count"), Value::U32(24)),
        (k("attention.key_length"), Value::U32(41)),
        (k("attention.layer_norm_rms_epsilon"), Value::F32(0.0)),
        (k("block_count"), Value::U32(513)),
        (k("block_count"), Value::U32(u32::MAX)),
        (k("kda.head_dim"), Value::U32(0)),
        (k("ssm.conv_kernel"), Value::U32(0)),
        (k("vocab_size"), Value::U32(511)),
        (k("context_length"), Value::U32(0)),
        (k("attention.causal"), Value::Bool(false)),
        (k("embedding_length"), Value::F32(64.0)),
    ];
    for (key, v) in cases {
        let shown = format!("{v:?}");
        let f = findings(&Parts::of(&bytes).set(&key, v).bytes());
        assert!(!f.is_empty(), "{key} = {shown}: accepted");
        // The key is named (or, when it changes the geometry, a tensor that no longer
        // fits it is).
        let named = about(&f, &key) || f.iter().any(|(s, _)| matches!(s, Subject::Tensor(_)));
        assert!(named, "{key} = {shown}: {f:?}");
    }
}

#[test]
fn tensors_llama_cpp_cannot_run_and_extra_tensors_are_refused() {
    let bytes = kimi_k3_gguf(&K3Geometry::tiny(), 4, GgmlType::F32);
    let f32s = |n: usize| vec![0u8; 4 * n];
    for (name, dims, why) in [
        (
            "blk.1.attn_kv_b.weight",
            vec![32u64, 2 * 32],
            "non-absorbed",
        ),
        (
            "blk.0.attn_qkv.weight",
            vec![64, 192],
            "fused KDA projection",
        ),
        ("blk.0.attn_q.bias", vec![64], "never applies"),
        ("blk.0.ffn_gate_inp.bias", vec![4], "not a tensor"),
        (
            "blk.6.attn_norm.weight",
            vec![64],
            "beyond the file's block_count",
        ),
        ("rope_freqs.weight", vec![4], "not a tensor"),
    ] {
        let n = dims.iter().product::<u64>() as usize;
        let info = TensorInfo {
            name: name.into(),
            dims,
            ty: GgmlType::F32,
        };
        let f = findings(&Parts::of(&bytes).add_tensor(info, f32s(n)).bytes());
        assert!(
            f.iter()
                .any(|(s, m)| matches!(s, Subject::Tensor(t) if t == name) && m.contains(why)),
            "{name}: {f:?}"
        );
    }
    // A wrong shape and a wrong type are named.
    let info = TensorInfo {
        name: "blk.0.ssm_a".into(),
        dims: vec![3],
        ty: GgmlType::F32,
    };
    let f = findings(
        &Parts::of(&bytes)
            .replace_tensor("blk.0.ssm_a", info, f32s(3))
            .bytes(),
    );
    assert!(about(&f, "blk.0.ssm_a"), "{f:?}");
    let info = TensorInfo {
        name: "blk.0.ssm_norm.weight".into(),
        dims: vec![32],
        ty: GgmlType::Q8_0,
    };
    let f = findings(
        &Parts::of(&bytes)
            .replace_tensor("blk.0.ssm_norm.weight", info, vec![0; 34])
            .bytes(),
    );
    assert!(about(&f, "blk.0.ssm_norm.weight"), "{f:?}");
}

/// A matrix holding NaN loads (values are not read at load: a file larger than memory
/// starts at once), and the first forward that uses it fails naming it and the value;
/// a routed expert is checked when a token is first routed to it, and named with its index.
#[test]
fn non_finite_weights_are_refused_at_first_use() {
    let g = K3Geometry::tiny();
    let bytes = kimi_k3_gguf(&g, 5, GgmlType::F32);
    for name in [
        "blk.0.ssm_conv1d_k.weight",
        "blk.1.attn_k_b.weight",
        "blk.2.ffn_up_exps.weight",
        "blk.0.ssm_a",
    ] {
        let file = GgufFile::parse(&bytes).unwrap();
        let t = file.tensor(name).unwrap();
        let mut data = t.data.to_vec();
        // Value 1 of every expert (or of the tensor): whichever expert a token routes to.
        let experts = if name.contains("_exps") { g.experts } else { 1 };
        let part = data.len() / experts;
        for e in 0..experts {
            data[e * part + 4..e * part + 8].copy_from_slice(&f32::NAN.to_le_bytes());
        }
        let info = t.info.clone();
        let bad = Parts::of(&bytes).replace_tensor(name, info, data).bytes();
        let e = match KimiK3::open(std::sync::Arc::new(bad)) {
            // Conv kernels and vectors are decoded at load, and refused there.
            Err(e) => e,
            Ok(m) => std::sync::Arc::new(m)
                .session(8, 1)
                .unwrap()
                .forward_commit(&[1, 2, 3], &[], Logits::Last)
                .expect_err("refused at the first forward"),
        };
        let msg = e.to_string();
        assert!(
            msg.contains(name) && msg.contains("value 1 is not finite"),
            "{name}: {msg}"
        );
        if experts > 1 {
            assert!(msg.contains("(expert "), "{msg}");
        }
    }
}

/// A matrix is not read at load: NaN in an expert no token routes to never stops a run.
#[test]
fn an_expert_no_token_routes_to_is_never_read() {
    let g = K3Geometry::tiny();
    let bytes = kimi_k3_gguf(&g, 5, GgmlType::F32);
    let tokens = [1u32];
    // Which experts do these tokens route to? Poison each expert in turn and see
    // which runs fail: one token routes to 2 of tiny's 4, so some pass and some fail.
    let name = "blk.2.ffn_up_exps.weight";
    let (mut failed, mut passed) = (0, 0);
    for poisoned in 0..g.experts {
        let file = GgufFile::parse(&bytes).unwrap();
        let t = file.tensor(name).unwrap();
        let mut data = t.data.to_vec();
        let part = data.len() / g.experts;
        data[poisoned * part..poisoned * part + 4].copy_from_slice(&f32::NAN.to_le_bytes());
        let bad = Parts::of(&bytes)
            .replace_tensor(name, t.info.clone(), data)
            .bytes();
        let m = std::sync::Arc::new(KimiK3::open(std::sync::Arc::new(bad)).unwrap());
        match m
            .session(8, 1)
            .unwrap()
            .forward_commit(&tokens, &[], Logits::Last)
        {
            Ok(_) => passed += 1,
            Err(e) => {
                assert!(
                    e.to_string()
                        .contains(&format!("{name} (expert {poisoned})")),
                    "{e}"
                );
                failed += 1;
            }
        }
    }
    assert!(failed > 0 && passed > 0, "failed {failed}, passed {passed}");
}

/// Embedding rows are checked as they are looked up, not all at the first forward: NaN
/// in a row no token uses never stops a run, and a token whose row holds one is refused,
/// naming the tensor and the value.
#[test]
fn an_embedding_row_is_checked_when_looked_up() {
    let g = K3Geometry::tiny();
    let bytes = kimi_k3_gguf(&g, 5, GgmlType::F32);
    let name = "token_embd.weight";
    let file = GgufFile::parse(&bytes).unwrap();
    let t = file.tensor(name).unwrap();
    let mut data = t.data.to_vec();
    let at = 7 * g.hidden + 3;
    data[4 * at..4 * at + 4].copy_from_slice(&f32::INFINITY.to_le_bytes());
    let bad = Parts::of(&bytes)
        .replace_tensor(name, t.info.clone(), data)
        .bytes();
    let m = std::sync::Arc::new(KimiK3::open(std::sync::Arc::new(bad)).unwrap());
    let mut s = m.session(8, 1).unwrap();
    s.forward_commit(&[1, 2, 3], &[], Logits::Last)
        .expect("row 7 is not read");
    let e = s
        .forward_commit(&[4, 7], &[], Logits::Last)
        .expect_err("row 7 is read");
    let msg = e.to_string();
    assert!(
        msg.contains(name) && msg.contains(&format!("value {at} is not finite")),
        "{msg}"
    );
}

/// A micro geometry for the mutation sweep: two layers (KDA, MLA), the smallest vocabulary.
fn micro() -> K3Geometry {
    K3Geometry {
        name: "kimi-k3-micro",
        hidden: 32,
        layers: 2,
        heads: 2,
        kda_head_dim: 8,
        conv_kernel: 3,
        mla_layers: vec![1],
        q_lora_rank: 8,
        kv_lora_rank: 8,
        rope_dim: 4,
        nope_dim: 4,
        v_dim: 4,
        ffn: 16,
        expert_ffn: 8,
        latent: 8,
        vocab: 300,
        context: 64,
        captures: vec![1],
        ..K3Geometry::tiny()
    }
}

#[test]
fn mutated_files_never_panic_and_stay_bounded() {
    let valid = kimi_k3_gguf(&micro(), 6, GgmlType::F32);
    let (mut ok, mut refused) = (0usize, 0usize);
    mutants(&valid, 3000, 7, |bytes| {
        dspark_testkit::mutate::bounded(&ALLOC, 256 << 20, || {
            let Ok(file) = GgufFile::parse(bytes) else {
                refused += 1;
                return;
            };
            match kimi_k3::check(&file, &types()) {
                Err(e) => {
                    refused += 1;
                    assert!(e.findings.iter().all(|f| !f.to_string().is_empty()));
                }
                Ok(_) => match KimiK3::open(std::sync::Arc::new(bytes.to_vec())) {
                    Err(_) => refused += 1,
                    Ok(m) => {
                        ok += 1;
                        let m = std::sync::Arc::new(m);
                        let mut s = m.session(16, 4).unwrap();
                        let _ = s.forward(&[1, 2, 3], &[0, 1], Logits::All);
                    }
                },
            }
        })
    });
    assert!(
        refused > valid.len() && ok > 0,
        "{ok} ok, {refused} refused"
    );
}

/// Files with llama.cpp's token-id-only vocabularies load and run: `tokenizer.ggml.model
/// = "none"` without tokens (the size from `kimi-k3.vocab_size`), and the `test`
/// tokenizer its own architecture tests write (`tok_i` strings, zero scores).
#[test]
fn token_id_only_vocabularies_are_accepted() {
    use dspark_contract::names::tokenizer as tk;
    let bytes = kimi_k3_gguf(&K3Geometry::tiny(), 8, GgmlType::F32);
    let strip = |p: Parts| {
        [tk::TOKENS, tk::TOKEN_TYPE, tk::MERGES, tk::PRE, tk::ADD_BOS]
            .iter()
            .fold(p, |p, k| p.remove(k))
    };
    let none = strip(Parts::of(&bytes))
        .set(tk::MODEL, Value::String("none".into()))
        .bytes();
    assert!(findings(&none).is_empty(), "{:?}", findings(&none));
    let test = strip(Parts::of(&bytes))
        .set(tk::MODEL, Value::String("test".into()))
        .set(
            tk::TOKENS,
            Value::Array(Array::String(
                (0..512).map(|i| format!("tok_{i}")).collect(),
            )),
        )
        .set(tk::SCORES, Value::Array(Array::F32(vec![0.0; 512])))
        .bytes();
    assert!(findings(&test).is_empty(), "{:?}", findings(&test));
    for b in [none, test] {
        let m = std::sync::Arc::new(KimiK3::open(std::sync::Arc::new(b)).unwrap());
        let f = m
            .session(8, 1)
            .unwrap()
            .forward_commit(&[1, 2, 3], &[], Logits::Last)
            .unwrap();
        assert_eq!(f.logits.len(), 512);
    }
    // Tokens beside "none" contradict it.
    let bad = Parts::of(&bytes)
        .set(tk::MODEL, Value::String("none".into()))
        .bytes();
    assert!(about(&findings(&bad), tk::TOKENS));
}

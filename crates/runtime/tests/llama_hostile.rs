//! llama targets (llama.cpp's `llama` architecture) that break the layout, and ones that
//! stretch it: every required key and tensor missing, values out of range, what llama.cpp
//! would run differently (experts, LongRoPE, per-tensor scales, per-layer widths) — each
//! refused with a finding naming it; F16 norm weights and mixed weight types accepted and
//! run; a NaN in a matrix reported at the first forward naming the tensor (matrices are
//! checked at first use, vectors at load); and every truncation and thousands of seeded
//! mutants of a micro llama file checked, loaded and run without a panic, under a memory
//! bound.

use std::alloc::System;
use std::sync::Arc;

use cap::Cap;
use dspark_contract::llama::{self, Qkv, RopeScalingKind, KIND};
use dspark_contract::Subject;
use dspark_gguf::{Array, GgmlType, GgufFile, TensorInfo, Value};
use dspark_runtime::{Attention, Llama, Logits, RuntimeError, Target};
use dspark_testkit::craft::Parts;
use dspark_testkit::llama::{llama_gguf, LlamaGeometry, SynthRopeScaling};
use dspark_testkit::mutate::mutants;

#[global_allocator]
static ALLOC: Cap<System> = Cap::new(System, usize::MAX);

mod hostile_common;
use hostile_common::{about, types};

/// Every finding of `bytes` checked as a llama target (empty when it passes).
fn findings(bytes: &[u8]) -> Vec<(Subject, String)> {
    hostile_common::findings_by(bytes, KIND, |f, t| llama::check(f, t).map(drop))
}

fn said(f: &[(Subject, String)], what: &str, words: &str) -> bool {
    f.iter().any(|(s, m)| {
        matches!(s, Subject::Key(k) | Subject::Tensor(k) if k == what) && m.contains(words)
    })
}

/// Logits of `tokens` (all positions) on a file that must load.
fn run(bytes: Vec<u8>, tokens: &[u32], attention: Attention) -> Vec<f32> {
    let m = Arc::new(Llama::open(Arc::new(bytes)).expect("a valid llama target"));
    m.session(16, attention)
        .unwrap()
        .forward(tokens, &[], Logits::All)
        .expect("a forward")
        .logits
}

fn with_options() -> LlamaGeometry {
    LlamaGeometry {
        rope_scaling: SynthRopeScaling::Linear(2.0),
        ..LlamaGeometry::tiny_options()
    }
}

#[test]
fn the_synthetic_targets_pass_with_their_geometry() {
    for g in [
        LlamaGeometry::tiny(),
        LlamaGeometry::tiny_options(),
        LlamaGeometry::small(),
        with_options(),
    ] {
        let bytes = llama_gguf(&g, 1, GgmlType::Q8_0);
        let file = GgufFile::parse(&bytes).unwrap();
        assert_eq!(
            dspark_contract::identify(&file),
            dspark_contract::FileKind::Target("llama")
        );
        let l = llama::check(&file, &types()).unwrap();
        let h = l.hparams();
        assert_eq!(
            (h.hidden, h.layers, h.heads, h.kv_heads, h.head_dim, h.ffn),
            (g.hidden, g.layers, g.heads, g.kv_heads, g.head_dim, g.ffn)
        );
        assert_eq!((h.vocab, h.context), (g.vocab, g.context));
        let s = h.rope_scaling;
        match g.rope_scaling {
            SynthRopeScaling::None => {
                assert_eq!((s.kind, s.factor), (RopeScalingKind::Linear, 1.0))
            }
            SynthRopeScaling::Linear(f) => {
                assert_eq!((s.kind, s.factor), (RopeScalingKind::Linear, f))
            }
            SynthRopeScaling::Yarn(f, orig) => assert_eq!(
                (s.kind, s.factor, s.original_context),
                (RopeScalingKind::Yarn, f, orig)
            ),
        }
        assert_eq!(s.attn_factor, 1.0);
        assert_eq!(l.output().is_some(), g.untied_output);
        assert_eq!(l.rope_freqs().is_some(), g.rope_freqs);
        for layer in l.layers() {
            match &layer.qkv {
                Qkv::Fused { bias, .. } => {
                    assert!(g.fused_qkv);
                    assert_eq!(bias.is_some(), g.biases);
                }
                Qkv::Separate { q_bias, .. } => {
                    assert!(!g.fused_qkv);
                    assert_eq!(q_bias.is_some(), g.biases);
                }
            }
            assert_eq!(layer.ffn_down_bias.is_some(), g.biases);
        }
        // Without the Q8_0 kernel every Q8_0 matrix is a finding, named.
        let e = llama::check(&file, &[GgmlType::F32]).unwrap_err();
        assert!(e.findings.iter().all(|f| f.msg.contains("has type Q8_0")));
        let per_layer = if g.fused_qkv { 5 } else { 7 };
        assert_eq!(
            e.findings.len(),
            per_layer * g.layers + 1 + usize::from(g.untied_output)
        );
    }
}

#[test]
fn every_required_key_and_tensor_is_named_when_missing() {
    for g in [LlamaGeometry::tiny(), with_options()] {
        let bytes = llama_gguf(&g, 2, GgmlType::F32);
        let file = GgufFile::parse(&bytes).unwrap();
        for k in [
            "context_length",
            "embedding_length",
            "block_count",
            "feed_forward_length",
            "attention.head_count",
            "attention.layer_norm_rms_epsilon",
        ] {
            let key = format!("llama.{k}");
            let f = findings(&Parts::of(&bytes).remove(&key).bytes());
            assert!(about(&f, &key), "{key}: {f:?}");
        }
        let f = findings(&Parts::of(&bytes).remove("general.architecture").bytes());
        assert!(about(&f, "general.architecture"), "{f:?}");
        // Optional keys take llama.cpp's defaults: the file stays valid, or (the KV heads
        // default to the query heads) the tensors sized for the real count are named.
        for k in ["rope.dimension_count", "rope.freq_base"] {
            let f = findings(&Parts::of(&bytes).remove(&format!("llama.{k}")).bytes());
            assert!(f.is_empty(), "{k}: {f:?}");
        }
        let f = findings(
            &Parts::of(&bytes)
                .remove("llama.attention.head_count_kv")
                .bytes(),
        );
        let kv = if g.fused_qkv { "attn_qkv" } else { "attn_k" };
        assert!(about(&f, &format!("blk.0.{kv}.weight")), "{f:?}");
        for t in file.tensor_infos() {
            let bad = Parts::of(&bytes).remove_tensor(&t.name).bytes();
            let f = findings(&bad);
            let optional = t.name.ends_with(".bias")
                || t.name == "output.weight"
                || t.name == "rope_freqs.weight";
            if optional {
                // A tied head, no frequency factors, one bias fewer: still a llama target,
                // and it runs.
                assert!(f.is_empty(), "{}: {f:?}", t.name);
                let logits = run(bad, &[1, 2, 3], Attention::F32);
                assert!(logits.iter().all(|v| v.is_finite()));
            } else if t.name.ends_with("attn_qkv.weight") {
                // Without the fused matrix, the separate ones it replaces are missing, and
                // its bias has nothing to belong to.
                let l = t.name.trim_end_matches("attn_qkv.weight");
                assert!(about(&f, &format!("{l}attn_q.weight")), "{f:?}");
            } else {
                assert!(about(&f, &t.name), "{}: {f:?}", t.name);
            }
        }
    }
}

#[test]
fn bad_values_are_refused_by_name() {
    let bytes = llama_gguf(&LlamaGeometry::tiny(), 3, GgmlType::F32);
    let k = |s: &str| format!("llama.{s}");
    let cases: Vec<(String, Value)> = vec![
        (k("attention.head_count"), Value::U32(0)),
        (k("attention.head_count"), Value::U32(3)),
        (k("attention.head_count_kv"), Value::U32(3)),
        (k("attention.head_count_kv"), Value::U32(8)),
        (k("attention.head_count_kv"), Value::U32(0)),
        (k("attention.key_length"), Value::U32(15)),
        (k("attention.key_length"), Value::U32(0)),
        (k("attention.value_length"), Value::U32(8)),
        (k("rope.dimension_count"), Value::U32(8)),
        (k("attention.layer_norm_rms_epsilon"), Value::F32(0.0)),
        (k("attention.layer_norm_rms_epsilon"), Value::F32(-1e-5)),
        (k("attention.layer_norm_rms_epsilon"), Value::F32(f32::NAN)),
        (k("rope.freq_base"), Value::F32(0.0)),
        (k("rope.freq_base"), Value::F32(f32::INFINITY)),
        (k("rope.scaling.type"), Value::String("longrope".into())),
        (k("rope.scaling.type"), Value::String("dynamic".into())),
        (k("rope.scaling.factor"), Value::F32(f32::NAN)),
        (k("rope.scaling.factor"), Value::F32(-2.0)),
        (k("rope.scaling.factor"), Value::F32(4096.0)),
        (k("rope.scale_linear"), Value::F32(f32::NAN)),
        (k("rope.scaling.original_context_length"), Value::U32(0)),
        (k("rope.scaling.attn_factor"), Value::F32(0.0)),
        (k("rope.scaling.attn_factor"), Value::F32(f32::NAN)),
        (k("expert_count"), Value::U32(8)),
        (k("expert_count"), Value::String("8".into())),
        (
            k("feed_forward_length"),
            Value::Array(Array::U32(vec![128; 4])),
        ),
        (
            k("attention.head_count"),
            Value::Array(Array::U32(vec![4; 4])),
        ),
        (
            k("attention.head_count_kv"),
            Value::Array(Array::U32(vec![2; 4])),
        ),
        (k("context_length"), Value::U32(0)),
        (k("block_count"), Value::U32(0)),
        (k("block_count"), Value::U32(5)),
        (k("block_count"), Value::U32(u32::MAX)),
        (k("embedding_length"), Value::F32(64.0)),
        (k("embedding_length"), Value::U32(65)),
        (k("feed_forward_length"), Value::U32(0)),
        (k("vocab_size"), Value::U32(511)),
        (k("attention.causal"), Value::Bool(false)),
        (
            "general.architecture".into(),
            Value::String("llama2".into()),
        ),
    ];
    for (key, v) in cases {
        let shown = format!("{v:?}");
        let f = findings(&Parts::of(&bytes).set(&key, v).bytes());
        assert!(!f.is_empty(), "{key} = {shown}: accepted");
        // The key is named (or, when it changes the geometry, a tensor that no longer fits
        // it is, or the key it leaves undetermined, naming it).
        let short = key.rsplit('.').next().unwrap();
        let named = about(&f, &key)
            || f.iter()
                .any(|(s, m)| matches!(s, Subject::Tensor(_)) || m.contains(short));
        assert!(named, "{key} = {shown}: {f:?}");
    }
    // What llama.cpp runs differently is refused with the reason.
    for (key, v, words) in [
        (k("expert_count"), Value::U32(8), "Mixtral-style MoE"),
        (
            k("rope.scaling.type"),
            Value::String("longrope".into()),
            "longrope",
        ),
        (
            k("feed_forward_length"),
            Value::Array(Array::U32(vec![128; 4])),
            "per-layer FFN widths",
        ),
        (
            k("attention.head_count"),
            Value::Array(Array::U32(vec![4; 4])),
            "per-layer head counts",
        ),
        (
            k("attention.value_length"),
            Value::U32(8),
            "llama.cpp refuses",
        ),
        (
            k("rope.dimension_count"),
            Value::U32(8),
            "llama.cpp refuses",
        ),
        (k("attention.key_length"), Value::U32(15), "even head size"),
        (k("attention.head_count_kv"), Value::U32(3), "must divide"),
    ] {
        let f = findings(&Parts::of(&bytes).set(&key, v).bytes());
        assert!(said(&f, &key, words), "{key}: expected `{words}` in {f:?}");
    }
    // Values llama.cpp takes as "unset": a factor of 0 is 1; the old key stands in for the
    // new one; an attention factor anywhere in (0, 1024].
    for (key, v) in [
        (k("rope.scaling.factor"), Value::F32(0.0)),
        (k("rope.scale_linear"), Value::F32(2.0)),
        (k("rope.scaling.attn_factor"), Value::F32(0.5)),
        (k("rope.scaling.type"), Value::String("none".into())),
        (k("expert_count"), Value::U32(0)),
        (k("attention.causal"), Value::Bool(true)),
    ] {
        let f = findings(&Parts::of(&bytes).set(&key, v).bytes());
        assert!(f.is_empty(), "{key}: {f:?}");
    }
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

#[test]
fn tensors_llama_cpp_runs_differently_and_extra_tensors_are_refused() {
    let g = LlamaGeometry::tiny();
    let bytes = llama_gguf(&g, 4, GgmlType::F32);
    let add = |b: &[u8], name: &str, dims: Vec<u64>| {
        let n = dims.iter().product::<u64>() as usize;
        let info = TensorInfo {
            name: name.into(),
            dims,
            ty: GgmlType::F32,
        };
        findings(
            &Parts::of(b)
                .add_tensor(info, f32_bytes(&vec![0.5; n]))
                .bytes(),
        )
    };
    for (name, dims, why) in [
        (
            "blk.0.ffn_gate_inp.weight",
            vec![64u64, 8],
            "Mixtral-style MoE",
        ),
        ("blk.1.attn_q.scale", vec![1], "per-tensor scale factors"),
        ("blk.2.attn_k.scale", vec![1], "per-tensor scale factors"),
        ("blk.0.attn_v.scale", vec![1], "per-tensor scale factors"),
        (
            "blk.3.attn_output.scale",
            vec![1],
            "per-tensor scale factors",
        ),
        ("blk.0.ffn_down.scale", vec![1], "per-tensor scale factors"),
        (
            "blk.4.attn_norm.weight",
            vec![64],
            "beyond the file's block_count",
        ),
        (
            "rope_factors_long.weight",
            vec![8],
            "not a tensor of a llama target",
        ),
        (
            "blk.0.ffn_gate_exps.weight",
            vec![64, 128, 8],
            "not a tensor",
        ),
    ] {
        let f = add(&bytes, name, dims);
        assert!(said(&f, name, why), "{name}: expected `{why}` in {f:?}");
    }
    // A fused QKV beside the separate matrices: one or the other.
    let fused = llama_gguf(
        &LlamaGeometry {
            fused_qkv: true,
            ..g.clone()
        },
        4,
        GgmlType::F32,
    );
    for name in ["blk.1.attn_q.weight", "blk.1.attn_v.bias"] {
        let n = if name.ends_with("weight") {
            vec![64, 64]
        } else {
            vec![32]
        };
        let f = add(&fused, name, n);
        assert!(said(&f, name, "beside the fused attn_qkv.weight"), "{f:?}");
    }
    // Wrong shapes and types are named.
    let info = |name: &str, dims: Vec<u64>, ty| TensorInfo {
        name: name.into(),
        dims,
        ty,
    };
    for (name, i, data) in [
        (
            "blk.0.attn_norm.weight",
            info("blk.0.attn_norm.weight", vec![63], GgmlType::F32),
            f32_bytes(&[1.0; 63]),
        ),
        (
            "blk.0.ffn_norm.weight",
            info("blk.0.ffn_norm.weight", vec![64], GgmlType::Q8_0),
            vec![0; 68],
        ),
        (
            "blk.1.attn_k.weight",
            info("blk.1.attn_k.weight", vec![64, 16], GgmlType::F32),
            f32_bytes(&[0.1; 64 * 16]),
        ),
        (
            "output_norm.weight",
            info("output_norm.weight", vec![64, 2], GgmlType::F32),
            f32_bytes(&[1.0; 128]),
        ),
    ] {
        let f = findings(&Parts::of(&bytes).replace_tensor(name, i, data).bytes());
        assert!(about(&f, name), "{name}: {f:?}");
    }
    // Llama 3's frequency factors: llama.cpp reads them as F32 only, [head size / 2].
    let freqs = llama_gguf(
        &LlamaGeometry {
            rope_freqs: true,
            ..g.clone()
        },
        4,
        GgmlType::F32,
    );
    let f = findings(
        &Parts::of(&freqs)
            .replace_tensor(
                "rope_freqs.weight",
                info("rope_freqs.weight", vec![8], GgmlType::F16),
                vec![0x3c; 16],
            )
            .bytes(),
    );
    assert!(said(&f, "rope_freqs.weight", "F32"), "{f:?}");
    let f = findings(
        &Parts::of(&freqs)
            .replace_tensor(
                "rope_freqs.weight",
                info("rope_freqs.weight", vec![16], GgmlType::F32),
                f32_bytes(&[1.0; 16]),
            )
            .bytes(),
    );
    assert!(about(&f, "rope_freqs.weight"), "{f:?}");
}

/// A tensor of a layer the file has, in another architecture's layout (Qwen3's per-head
/// q/k norms), is refused with a reason that is true of it.
#[test]
fn a_foreign_tensor_of_an_existing_layer_is_named_for_what_it_is() {
    let bytes = llama_gguf(&LlamaGeometry::tiny(), 4, GgmlType::F32);
    let info = TensorInfo {
        name: "blk.0.attn_q_norm.weight".into(),
        dims: vec![16],
        ty: GgmlType::F32,
    };
    let f = findings(
        &Parts::of(&bytes)
            .add_tensor(info, f32_bytes(&[1.0; 16]))
            .bytes(),
    );
    assert!(about(&f, "blk.0.attn_q_norm.weight"), "{f:?}");
    assert!(
        !f.iter()
            .any(|(_, m)| m.contains("beyond the file's block_count")),
        "layer 0 of a 4-layer file is not beyond its block_count: {f:?}"
    );
}

/// `bytes` with tensor `name` re-encoded as `ty` (from its F32 values).
fn retyped(bytes: &[u8], name: &str, ty: GgmlType) -> Vec<u8> {
    let file = GgufFile::parse(bytes).unwrap();
    let t = file.tensor(name).unwrap();
    assert_eq!(t.info.ty, GgmlType::F32);
    let values: Vec<f32> = t
        .data
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    let f = dspark_quant::format_of(ty).expect("a kernel type");
    let data = match f.quantize_ref {
        Some(q) => {
            let mut out = vec![0u8; values.len() / f.block_len() * f.block_bytes()];
            q(&values, &mut out);
            out
        }
        None => f.sample(values.len(), 7),
    };
    let info = TensorInfo {
        ty,
        ..t.info.clone()
    };
    Parts::of(bytes).replace_tensor(name, info, data).bytes()
}

/// `bytes` with tensor `name` (F32) rounded to F16 values but kept F32.
fn rounded_to_f16(bytes: &[u8], name: &str) -> Vec<u8> {
    let f16 = retyped(bytes, name, GgmlType::F16);
    let file = GgufFile::parse(&f16).unwrap();
    let t = file.tensor(name).unwrap();
    let values: Vec<f32> = t
        .data
        .chunks_exact(2)
        .map(|b| half_to_f32(u16::from_le_bytes([b[0], b[1]])))
        .collect();
    let info = TensorInfo {
        ty: GgmlType::F32,
        ..t.info.clone()
    };
    Parts::of(bytes)
        .replace_tensor(name, info, f32_bytes(&values))
        .bytes()
}

fn half_to_f32(h: u16) -> f32 {
    let mut out = [0.0f32; 1];
    (dspark_quant::format_of(GgmlType::F16)
        .unwrap()
        .dequantize_ref)(&h.to_le_bytes(), &mut out);
    out[0]
}

/// Norm weights and biases stored as F16 are read as the F32 values they hold (the same
/// logits, bit for bit, as an F32 file of those values); a file mixing matrix types
/// (F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K, IQ4_NL) in one layer loads and runs.
#[test]
fn f16_norms_and_mixed_weight_types_are_accepted_and_run() {
    let g = LlamaGeometry {
        biases: true,
        ..LlamaGeometry::small()
    };
    let base = llama_gguf(&g, 5, GgmlType::F32);
    let vectors: Vec<String> = GgufFile::parse(&base)
        .unwrap()
        .tensor_infos()
        .iter()
        .filter(|t| t.dims.len() == 1 && t.name != "rope_freqs.weight")
        .map(|t| t.name.clone())
        .collect();
    assert!(vectors.len() > 2 * g.layers);
    let (mut as_f16, mut as_f32) = (base.clone(), base.clone());
    for name in &vectors {
        as_f16 = retyped(&as_f16, name, GgmlType::F16);
        as_f32 = rounded_to_f16(&as_f32, name);
    }
    assert!(findings(&as_f16).is_empty());
    let tokens = [5u32, 300, 7, 1000, 42];
    let (a, b) = (
        run(as_f16.clone(), &tokens, Attention::F32),
        run(as_f32, &tokens, Attention::F32),
    );
    assert!(a
        .iter()
        .map(|v| v.to_bits())
        .eq(b.iter().map(|v| v.to_bits())));
    assert!(
        a != run(base.clone(), &tokens, Attention::F32),
        "F16 rounding changed nothing?"
    );

    let mut mixed = as_f16;
    for (name, ty) in [
        ("blk.0.attn_q.weight", GgmlType::F16),
        ("blk.0.attn_k.weight", GgmlType::BF16),
        ("blk.0.attn_v.weight", GgmlType::Q8_0),
        ("blk.0.attn_output.weight", GgmlType::Q4_K),
        ("blk.0.ffn_gate.weight", GgmlType::Q6_K),
        ("blk.0.ffn_up.weight", GgmlType::Q4_0),
        ("blk.0.ffn_down.weight", GgmlType::IQ4_NL),
        ("blk.1.attn_q.weight", GgmlType::Q5_K),
        ("token_embd.weight", GgmlType::Q8_0),
        ("output.weight", GgmlType::Q4_K),
    ] {
        mixed = retyped(&mixed, name, ty);
    }
    assert!(findings(&mixed).is_empty(), "{:?}", findings(&mixed));
    for attention in [Attention::F32, Attention::F16] {
        let logits = run(mixed.clone(), &tokens, attention);
        assert_eq!(logits.len(), tokens.len() * g.vocab);
        assert!(logits.iter().all(|v| v.is_finite()));
    }
}

/// A matrix holding NaN loads (values are not read at load: a file larger than memory
/// starts at once); the first forward that uses it fails naming it and the value. Vectors
/// (norms, biases, frequency factors) are decoded at load and refused there.
#[test]
fn non_finite_weights_are_refused_at_first_use() {
    let g = LlamaGeometry {
        untied_output: true,
        ..LlamaGeometry::tiny_options()
    };
    let bytes = llama_gguf(&g, 6, GgmlType::F32);
    let poisoned = |name: &str, at: usize, v: f32| {
        let file = GgufFile::parse(&bytes).unwrap();
        let t = file.tensor(name).unwrap();
        let mut data = t.data.to_vec();
        data[4 * at..4 * at + 4].copy_from_slice(&v.to_le_bytes());
        Parts::of(&bytes)
            .replace_tensor(name, t.info.clone(), data)
            .bytes()
    };
    for name in [
        "blk.1.attn_qkv.weight",
        "blk.0.attn_output.weight",
        "blk.3.ffn_down.weight",
        "token_embd.weight",
        "output.weight",
    ] {
        for v in [f32::NAN, f32::INFINITY] {
            let m = Arc::new(
                Llama::open(Arc::new(poisoned(name, 1, v)))
                    .unwrap_or_else(|e| panic!("{name}: a matrix is not read at load: {e}")),
            );
            let e = m
                .session(8, Attention::F32)
                .unwrap()
                .forward(&[1, 2, 3], &[], Logits::Last)
                .expect_err("refused at the first forward");
            let msg = e.to_string();
            assert!(
                matches!(&e, RuntimeError::Tensor { .. })
                    && msg.contains(name)
                    && msg.contains("value 1 is not finite"),
                "{name}: {msg}"
            );
        }
    }
    for name in [
        "blk.2.attn_norm.weight",
        "blk.0.attn_qkv.bias",
        "blk.1.ffn_up.bias",
        "output_norm.weight",
        "rope_freqs.weight",
    ] {
        let e = Llama::open(Arc::new(poisoned(name, 3, f32::NAN)))
            .err()
            .unwrap_or_else(|| panic!("{name}: NaN accepted at load"));
        let msg = e.to_string();
        assert!(
            msg.contains(name) && msg.contains("value 3 is not finite"),
            "{msg}"
        );
    }
    // A frequency factor of 0 would divide an angle by zero.
    let e = Llama::open(Arc::new(poisoned("rope_freqs.weight", 2, 0.0)))
        .err()
        .expect("a zero frequency factor refused");
    assert!(
        e.to_string().contains("rope_freqs.weight") && e.to_string().contains("value 2 is 0"),
        "{e}"
    );
}

/// A micro llama with every option (biases, fused QKV, frequency factors, YaRN, a separate
/// head), two layers, the smallest vocabulary.
fn micro() -> LlamaGeometry {
    LlamaGeometry {
        hidden: 32,
        layers: 2,
        heads: 2,
        kv_heads: 1,
        head_dim: 16,
        ffn: 32,
        vocab: 260,
        context: 64,
        rope_scaling: SynthRopeScaling::Yarn(4.0, 16),
        ..LlamaGeometry::tiny_options()
    }
}

#[test]
fn mutated_files_never_panic_and_stay_bounded() {
    let valid = llama_gguf(&micro(), 6, GgmlType::Q8_0);
    assert!(findings(&valid).is_empty(), "{:?}", findings(&valid));
    rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build_global()
        .ok();
    let (mut ok, mut refused, mut ran) = (0usize, 0usize, 0usize);
    mutants(&valid, 3000, 8, |bytes| {
        dspark_testkit::mutate::bounded(&ALLOC, 256 << 20, || {
            match Llama::open(Arc::new(bytes.to_vec())) {
                Err(e) => {
                    refused += 1;
                    assert!(!e.to_string().is_empty());
                }
                Ok(m) => {
                    ok += 1;
                    let m = Arc::new(m);
                    let vocab = m.hparams().vocab;
                    for attention in [Attention::F32, Attention::F16] {
                        let mut s = m
                            .session(8, attention)
                            .expect("8 positions of a checked model");
                        match s.forward(&[1, 2, 3], &[0, 1], Logits::All) {
                            Ok(f) => {
                                ran += 1;
                                assert_eq!(f.logits.len(), 3 * vocab);
                            }
                            Err(e) => assert!(
                                matches!(&e, RuntimeError::Tensor { msg, .. } if msg.contains("is not finite")),
                                "a checked model runs or names a non-finite value: {e}"
                            ),
                        }
                    }
                }
            }
        })
    });
    assert!(
        refused > valid.len() && ok > 0 && ran > 0,
        "{ok} ok ({ran} forwards ran), {refused} refused"
    );
}

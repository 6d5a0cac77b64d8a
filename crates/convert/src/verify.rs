//! Proofs about a GGUF file: the `dflash-draft` contract, agreement with its report, and
//! bit-exact agreement with a fresh conversion of its source.
//!
//! Each check returns findings (one sentence each, naming the key or tensor, found vs
//! expected); an empty list means the property holds. I/O and parse failures are errors.

use std::collections::BTreeSet;

use dspark_gguf::{Array, GgmlType, GgufFile, Value};
use rayon::prelude::*;
use sha2::{Digest, Sha256};

use crate::config::DraftConfig;
use crate::error::Result;
use crate::names::{LayerDims, LAYER_TENSORS};
use crate::plan::{Geometry, Options, OutType, Plan};
use crate::report::{same_figure, value_json, Report};
use crate::source::Checkpoint;
use crate::write::{chunks, compute_chunk, hex};

/// Architecture names the generic `dflash-draft` loader accepts (`gguf-and-contract.md` §5.1).
pub const ACCEPTED_ARCHS: [&str; 3] =
    ["dflash-draft", "qwen35-dflash-draft", "gemma4-dflash-draft"];

/// Loader bounds (`gguf-and-contract.md` §5.2).
const HPARAM_BOUNDS: [(&str, u32); 6] = [
    ("embedding_length", 131_072),
    ("block_count", 1024),
    ("feed_forward_length", 524_288),
    ("attention.head_count", 1024),
    ("attention.head_count_kv", 1024),
    ("attention.key_length", 1024),
];

/// Tensor types the runtime and this tool implement.
const SUPPORTED_TYPES: [GgmlType; 4] =
    [GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0];

/// What the contract check learned about the file (valid only when it found nothing).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ContractSummary {
    /// `general.architecture`.
    pub arch: String,
    /// The geometry read from the keys and shapes (`vocab` from `vocab_size`, 0 if absent).
    pub geometry: Geometry,
}

fn ne(file: &GgufFile<'_>, name: &str) -> Option<Vec<u64>> {
    file.tensor(name).ok().map(|t| {
        let mut d = t.info.dims.clone();
        while d.len() > 1 && d.last() == Some(&1) {
            d.pop();
        }
        d
    })
}

/// Checks every rule of the `dflash-draft` loader (§5.4) and the types and values of
/// the geometry keys this project writes: presence, types, values and shapes.
pub fn check_contract(file: &GgufFile<'_>) -> (ContractSummary, Vec<String>) {
    let mut f: Vec<String> = Vec::new();
    let mut s = ContractSummary::default();
    let arch = match file.get("general.architecture") {
        Some(Value::String(a)) => a.clone(),
        Some(v) => {
            f.push(format!(
                "general.architecture is {}, expected STRING",
                v.type_name()
            ));
            return (s, f);
        }
        None => {
            f.push("general.architecture is missing".into());
            return (s, f);
        }
    };
    if !ACCEPTED_ARCHS.contains(&arch.as_str()) {
        f.push(format!(
            "general.architecture is `{arch}`, expected one of {ACCEPTED_ARCHS:?}"
        ));
        return (s, f);
    }
    s.arch = arch.clone();
    let key = |k: &str| format!("{arch}.{k}");
    // Runtimes read integers with strict UINT32 getters that abort on any other type.
    let u32_key = |f: &mut Vec<String>, k: &str, required: bool| -> Option<u32> {
        match file.get(k) {
            Some(Value::U32(v)) => Some(*v),
            Some(v) => {
                f.push(format!(
                    "{k} is {}, expected UINT32 (runtimes abort on other types)",
                    v.type_name()
                ));
                None
            }
            None => {
                if required {
                    f.push(format!("{k} is missing"));
                }
                None
            }
        }
    };
    let mut hp = [0u64; 6];
    for (i, (k, max)) in HPARAM_BOUNDS.iter().enumerate() {
        match u32_key(&mut f, &key(k), true) {
            Some(v) if v == 0 || v > *max => {
                f.push(format!("{} is {v}, expected 1..={max}", key(k)))
            }
            Some(v) => hp[i] = u64::from(v),
            None => {}
        }
    }
    if hp.contains(&0) {
        // Without a sound geometry no shape can be judged; what was found is enough.
        return (s, f);
    }
    let [h, n_layers, n_ff, n_head, n_head_kv, hd] = hp;
    if n_head_kv > 0 && (n_head_kv > n_head || n_head % n_head_kv != 0) {
        f.push(format!(
            "{n_head_kv} KV heads must divide {n_head} query heads"
        ));
    }
    match file.get(&key("rope.freq_base")) {
        Some(Value::F32(_)) => {}
        Some(v) => f.push(format!(
            "{} is {}, expected FLOAT32",
            key("rope.freq_base"),
            v.type_name()
        )),
        None => f.push(format!("{} is missing", key("rope.freq_base"))),
    }
    let block_size = u32_key(&mut f, &key("dflash.block_size"), true).unwrap_or(0);
    if block_size == 0 {
        f.push(format!("{} must be at least 1", key("dflash.block_size")));
    }
    let n_cap_key = u32_key(&mut f, &key("dflash.n_target_layers"), true).unwrap_or(0) as u64;
    let ids = match file.get(&key("dflash.target_layer_ids")) {
        Some(Value::Array(Array::I32(ids))) => ids.clone(),
        Some(v) => {
            f.push(format!(
                "{} is {}, expected ARRAY[INT32]",
                key("dflash.target_layer_ids"),
                v.type_name()
            ));
            Vec::new()
        }
        None => {
            f.push(format!("{} is missing", key("dflash.target_layer_ids")));
            Vec::new()
        }
    };
    if ids.iter().any(|&i| i < 0) {
        f.push(format!(
            "{} has a negative layer id: {ids:?}",
            key("dflash.target_layer_ids")
        ));
    }
    if !ids.is_empty() && ids.len() as u64 != n_cap_key {
        f.push(format!(
            "{} has {} ids, but dflash.n_target_layers is {n_cap_key}",
            key("dflash.target_layer_ids"),
            ids.len()
        ));
    }
    if let Some(depth) = u32_key(&mut f, &key("dflash.target_block_count"), false) {
        if let Some(bad) = ids.iter().find(|&&i| i as i64 >= i64::from(depth)) {
            f.push(format!(
                "captured layer {bad} is outside the target's {depth} layers"
            ));
        }
    }
    if let Some(feat) = u32_key(&mut f, &key("dflash.n_target_features"), false) {
        if u64::from(feat) != n_cap_key * h {
            f.push(format!(
                "{} is {feat}, expected n_target_layers × embedding_length = {}",
                key("dflash.n_target_features"),
                n_cap_key * h
            ));
        }
    }
    for k in [
        "context_length",
        "vocab_size",
        "attention.value_length",
        "dflash.target_hidden_size",
        "dflash.mask_token_id",
    ] {
        u32_key(&mut f, &key(k), false);
    }
    if let Some(v) = file.get(&key("dflash.sample_from_anchor")) {
        if v.as_bool().is_none() {
            f.push(format!(
                "{} is {}, expected BOOL",
                key("dflash.sample_from_anchor"),
                v.type_name()
            ));
        }
    }
    for k in ["general.file_type", "general.quantization_version"] {
        u32_key(&mut f, k, false);
    }
    s.geometry = Geometry {
        hidden: h,
        n_layers,
        n_head,
        n_head_kv,
        head_dim: hd,
        n_ff,
        vocab: file
            .get(&key("vocab_size"))
            .and_then(Value::as_u32)
            .map_or(0, u64::from),
        n_cap: n_cap_key,
        ..Geometry::default()
    };

    // Tensors: presence and shapes.
    let need = |f: &mut Vec<String>, name: &str, shape: Option<&[u64]>| -> Option<Vec<u64>> {
        match ne(file, name) {
            None => {
                f.push(format!("tensor `{name}` is missing"));
                None
            }
            Some(d) => {
                if let Some(want) = shape {
                    if d != want {
                        f.push(format!("tensor `{name}` has ne {d:?}, expected {want:?}"));
                    }
                }
                Some(d)
            }
        }
    };
    need(&mut f, "dflash.fc.weight", Some(&[n_cap_key * h, h]));
    need(&mut f, "dflash.hidden_norm.weight", Some(&[h]));
    need(&mut f, "output_norm.weight", Some(&[h]));
    let dims = LayerDims {
        hidden: h,
        heads: n_head,
        kv_heads: n_head_kv,
        head_dim: hd,
        ffn: n_ff,
    };
    for i in 0..n_layers {
        for (_, suffix, _, shape) in LAYER_TENSORS {
            let ne: Vec<u64> = shape.torch(&dims).into_iter().rev().collect();
            need(&mut f, &format!("blk.{i}.{suffix}"), Some(&ne));
        }
    }
    let dspark_enabled = u32_key(&mut f, &key("dflash.dspark.enabled"), false).unwrap_or(0);
    let has = |n: &str| file.tensor(n).is_ok();
    if dspark_enabled != 0 || has("dflash.dspark.markov.w1") || has("dflash.dspark.markov.w2") {
        let w1 = need(&mut f, "dflash.dspark.markov.w1", None);
        let r_key = u32_key(&mut f, &key("dflash.dspark.markov_rank"), false).map(u64::from);
        let v_key = u32_key(&mut f, &key("dflash.dspark.vocab_size"), false).map(u64::from);
        if let Some(w1) = w1 {
            let r = r_key.filter(|&r| r > 0).unwrap_or(w1[0]);
            let v = v_key.filter(|&v| v > 0).unwrap_or(*w1.get(1).unwrap_or(&1));
            need(&mut f, "dflash.dspark.markov.w1", Some(&[r, v]));
            need(&mut f, "dflash.dspark.markov.w2", Some(&[r, v]));
            s.geometry.markov_rank = Some(r);
            s.geometry.markov_vocab = Some(v);
        }
    }
    let conf_dim = u32_key(&mut f, &key("dflash.dspark.confidence_dim"), false).unwrap_or(0);
    if conf_dim != 0
        || has("dflash.dspark.confidence.weight")
        || has("dflash.dspark.confidence.bias")
    {
        if let Some(w) = need(&mut f, "dflash.dspark.confidence.weight", None) {
            let c = if conf_dim != 0 {
                u64::from(conf_dim)
            } else {
                w[0]
            };
            need(&mut f, "dflash.dspark.confidence.weight", Some(&[c]));
            if c != h && Some(c) != s.geometry.markov_rank.map(|r| h + r) {
                f.push(format!(
                    "confidence width {c} is neither hidden ({h}) nor hidden + Markov rank"
                ));
            }
            s.geometry.confidence_dim = Some(c);
        }
        need(&mut f, "dflash.dspark.confidence.bias", Some(&[1]));
    }

    // Types: only implemented ones; norms and the confidence head F32.
    for t in file.tensor_infos() {
        if !SUPPORTED_TYPES.contains(&t.ty) {
            f.push(format!(
                "tensor `{}` has type {}, expected one of F32, F16, BF16, Q8_0",
                t.name, t.ty
            ));
        }
        let elementwise =
            t.name.ends_with("_norm.weight") || t.name.starts_with("dflash.dspark.confidence.");
        if elementwise && t.ty != GgmlType::F32 {
            f.push(format!(
                "tensor `{}` has type {}, expected F32 (it feeds elementwise ops)",
                t.name, t.ty
            ));
        }
    }
    (s, f)
}

/// True when the file says dspark wrote it (`provenance.converter` = `dspark …`).
pub fn written_by_dspark(file: &GgufFile<'_>) -> bool {
    file.get("provenance.converter")
        .and_then(Value::as_str)
        .is_some_and(|c| c.starts_with("dspark "))
}

/// Checks this project's own output contract (`output-contract.md`) beyond what
/// runtimes read: provenance keys, quantization keys, `general.file_type`, canonical
/// tensor order. Meant for files [`written_by_dspark`].
pub fn check_output_contract(file: &GgufFile<'_>) -> Vec<String> {
    let mut f = Vec::new();
    check_own_keys(file, &mut f);
    f
}

fn check_own_keys(file: &GgufFile<'_>, f: &mut Vec<String>) {
    let files = match file.get("provenance.source.files") {
        Some(Value::Array(Array::String(v))) => v.len(),
        _ => {
            f.push("provenance.source.files is missing or not ARRAY[STRING]".into());
            0
        }
    };
    match file.get("provenance.source.sha256") {
        Some(Value::Array(Array::String(v))) => {
            if v.len() != files
                || v.iter().any(|h| {
                    h.len() != 64
                        || !h
                            .bytes()
                            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
                })
            {
                f.push("provenance.source.sha256 must hold one lowercase 64-digit hash per source file".into());
            }
        }
        _ => f.push("provenance.source.sha256 is missing or not ARRAY[STRING]".into()),
    }
    match file.get("provenance.source.parameters") {
        Some(Value::U64(p)) => {
            let total: u64 = file.tensor_infos().iter().map(|t| t.n_elements()).sum();
            if *p != total {
                f.push(format!(
                    "provenance.source.parameters is {p}, but the tensors hold {total}"
                ));
            }
        }
        _ => f.push("provenance.source.parameters is missing or not UINT64".into()),
    }
    for k in [
        "provenance.source.repository",
        "provenance.source.revision",
        "provenance.policy",
        "general.name",
    ] {
        if file.get(k).and_then(Value::as_str).is_none() {
            f.push(format!("{k} is missing or not STRING"));
        }
    }
    let quantized = file.tensor_infos().iter().any(|t| t.ty == GgmlType::Q8_0);
    if quantized && file.get("general.quantization_version") != Some(&Value::U32(2)) {
        f.push("general.quantization_version must be UINT32 2 when tensors are quantized".into());
    }
    // file_type must describe the matrices.
    if let Some(Value::U32(ft)) = file.get("general.file_type") {
        let want = [OutType::Q8_0, OutType::F16, OutType::BF16, OutType::F32]
            .into_iter()
            .find(|o| o.file_type() == *ft);
        match want {
            None => f.push(format!(
                "general.file_type {ft} is not one this tool writes"
            )),
            Some(o) => {
                if let Ok(t) = file.tensor("dflash.fc.weight") {
                    if t.info.ty != o.matrix_type() && t.info.ty != GgmlType::F16 {
                        f.push(format!(
                            "general.file_type says {} but dflash.fc.weight is {}",
                            o.file_type_name(),
                            t.info.ty
                        ));
                    }
                }
            }
        }
    }
    // Canonical order.
    let order: Vec<(u32, u64, u32)> = file
        .tensor_infos()
        .iter()
        .map(|t| canonical_rank(&t.name))
        .collect();
    if order.windows(2).any(|w| w[0] > w[1]) {
        f.push("tensors are not in the canonical order of output-contract.md §1".into());
    }
}

fn canonical_rank(gguf: &str) -> (u32, u64, u32) {
    use crate::names::{HEAD_TENSORS, TAIL_TENSORS};
    if let Some(i) = HEAD_TENSORS.iter().position(|t| t.1 == gguf) {
        return (0, 0, i as u32);
    }
    if let Some(rest) = gguf.strip_prefix("blk.") {
        if let Some((l, suffix)) = rest.split_once('.') {
            if let (Ok(l), Some(j)) = (
                l.parse::<u64>(),
                LAYER_TENSORS.iter().position(|t| t.1 == suffix),
            ) {
                return (1, l, j as u32);
            }
        }
    }
    if let Some(i) = TAIL_TENSORS.iter().position(|t| t.1 == gguf) {
        return (2, 0, i as u32);
    }
    (3, 0, 0)
}

/// Lowercase hex SHA256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// Checks that `bytes` (the whole GGUF) is the file `report` describes: size, SHA256,
/// every tensor's name, type, offset, size and hash, and every metadata value.
pub fn check_report(file: &GgufFile<'_>, bytes: &[u8], report: &Report) -> Vec<String> {
    let mut f = Vec::new();
    if report.output.size_bytes != bytes.len() as u64 {
        f.push(format!(
            "size is {} bytes, the report says {}",
            bytes.len(),
            report.output.size_bytes
        ));
    }
    let sha = sha256_hex(bytes);
    if sha != report.output.sha256 {
        f.push(format!(
            "SHA256 is {sha}, the report says {}",
            report.output.sha256
        ));
    }
    let infos = file.tensor_infos();
    if infos.len() != report.tensors.len() {
        f.push(format!(
            "{} tensors, the report lists {}",
            infos.len(),
            report.tensors.len()
        ));
    }
    for (t, r) in file.tensors().zip(&report.tensors) {
        if t.info.name != r.name
            || t.info.ty.name() != r.ty
            || t.offset != r.offset
            || t.data.len() as u64 != r.bytes
        {
            f.push(format!(
                "tensor `{}` ({}, offset {}, {} bytes) differs from the report's `{}` ({}, offset {}, {} bytes)",
                t.info.name, t.info.ty, t.offset, t.data.len(), r.name, r.ty, r.offset, r.bytes
            ));
            continue;
        }
        let got = sha256_hex(t.data);
        if got != r.sha256 {
            f.push(format!(
                "tensor `{}`: SHA256 {got}, the report says {}",
                r.name, r.sha256
            ));
        }
    }
    let kvs = file.kvs();
    if kvs.len() != report.metadata.len() {
        f.push(format!(
            "{} metadata keys, the report lists {}",
            kvs.len(),
            report.metadata.len()
        ));
    }
    for ((k, v), m) in kvs.iter().zip(&report.metadata) {
        if *k != m.key || v.type_name() != m.ty || value_json(v) != m.value {
            f.push(format!(
                "metadata `{k}` ({}) differs from the report's `{}` ({})",
                v.type_name(),
                m.key,
                m.ty
            ));
        }
    }
    f
}

/// Options that reproduce `file` from its source, read back from its metadata.
pub fn options_from_file(file: &GgufFile<'_>) -> Options {
    let s = |k: &str| file.get(k).and_then(Value::as_str).map(String::from);
    let outtype = match file.get("general.file_type") {
        Some(Value::U32(1)) => OutType::F16,
        Some(Value::U32(32)) => OutType::BF16,
        Some(Value::U32(0)) => OutType::F32,
        _ => OutType::Q8_0,
    };
    let source_repo = file
        .get("general.source.repo_url")
        .and(s("provenance.source.repository"));
    Options {
        outtype,
        name: s("general.name"),
        source_repo,
        source_revision: s("provenance.source.revision").filter(|r| r != "unknown"),
        allow_extra: true,
        allow_nonfinite: true,
    }
}

/// Re-derives every tensor of `file` from its source and compares: the header must be
/// byte-identical to the one a fresh conversion writes (which proves every metadata key
/// and the source hashes), every tensor's bytes identical to a fresh quantization, and,
/// when a report is given, every recorded error identical to the recomputed one.
pub fn check_source(
    file: &GgufFile<'_>,
    file_bytes: &[u8],
    config: DraftConfig,
    ckpt: &Checkpoint,
    report: Option<&Report>,
    threads: usize,
) -> Result<Vec<String>> {
    let mut f = Vec::new();
    let plan = Plan::new(config, ckpt, options_from_file(file))?;
    let never = std::sync::atomic::AtomicBool::new(false);
    let hashes = (0..ckpt.files.len())
        .map(|i| ckpt.hash_file(i, &never).map(|h| h.expect("never stopped")))
        .collect::<Result<Vec<String>>>()?;
    let header = plan.header(&hashes).to_bytes();
    let data_offset = file.data_offset() as usize;
    if header.len() != data_offset || header[..] != file_bytes[..data_offset] {
        let first = header
            .iter()
            .zip(file_bytes)
            .position(|(a, b)| a != b)
            .unwrap_or(header.len().min(data_offset));
        f.push(format!(
            "header differs from a fresh conversion of the source (first difference at byte {first}; header {} bytes, fresh {})",
            data_offset,
            header.len()
        ));
    }
    let names_file: Vec<&str> = file
        .tensor_infos()
        .iter()
        .map(|t| t.name.as_str())
        .collect();
    let names_plan: Vec<&str> = plan.tensors.iter().map(|t| t.name.as_str()).collect();
    if names_file != names_plan {
        f.push(format!("tensor list differs from a fresh conversion: file {names_file:?}, fresh {names_plan:?}"));
        return Ok(f);
    }
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads.max(1))
        .build()
        .map_err(|e| crate::error::ConvertError::Output {
            path: "(verify)".into(),
            msg: format!("cannot start threads: {e}"),
        })?;
    let all = chunks(&plan);
    // Per chunk: (tensor, first differing byte in the chunk) and error sums, in order.
    let results: Vec<Result<(usize, Option<u64>, dspark_quant::ErrorSums)>> = pool.install(|| {
        all.par_iter()
            .map(|&c| {
                let t = &plan.tensors[c.tensor];
                let out = compute_chunk(t, ckpt, c, true)?;
                let view = file.tensor(&t.name).expect("names compared above");
                let start = t.ty.bytes_for(c.start).expect("whole blocks") as usize;
                let got = view.data.get(start..start + out.bytes.len());
                let diff = match got {
                    Some(g) => g
                        .iter()
                        .zip(&out.bytes)
                        .position(|(a, b)| a != b)
                        .map(|p| (start + p) as u64),
                    None => Some(start as u64),
                };
                Ok((c.tensor, diff, out.errors))
            })
            .collect()
    });
    let mut sums = vec![dspark_quant::ErrorSums::default(); plan.tensors.len()];
    let mut reported = BTreeSet::new();
    for r in results {
        let (ti, diff, e) = r?;
        sums[ti].add(&e);
        if let Some(at) = diff {
            if reported.insert(ti) {
                f.push(format!(
                    "tensor `{}`: byte {at} differs from a fresh {} quantization of `{}`",
                    plan.tensors[ti].name, plan.tensors[ti].ty, plan.tensors[ti].source_name
                ));
            }
        }
    }
    if let Some(report) = report {
        for ((t, s), r) in plan.tensors.iter().zip(&sums).zip(&report.tensors) {
            let e = s.relative_rmse();
            if !same_figure(e, r.relative_rmse)
                || !same_figure(f64::from(s.max_abs), r.max_abs_error)
            {
                f.push(format!(
                    "tensor `{}`: recomputed relative RMSE {e} / max error {}, the report says {} / {}",
                    t.name, s.max_abs, r.relative_rmse, r.max_abs_error
                ));
            }
        }
    }
    Ok(f)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by `cargo fuzz run gguf_parse` (2026-11-30): a valid GGUF whose
    /// `block_count` is 4294967295 made the contract check list ~47 billion missing
    /// tensors. Out-of-bounds geometry now ends the check at the bound finding.
    #[test]
    fn fuzz_oom_huge_block_count() {
        let bytes = include_bytes!("../testdata/fuzz-gguf-oom-block-count.gguf");
        let file = GgufFile::parse(bytes).unwrap();
        let (_, findings) = check_contract(&file);
        assert!(
            findings
                .iter()
                .any(|f| f.contains("block_count is 4294967295, expected 1..=1024")),
            "{findings:?}"
        );
        assert!(findings.len() < 10, "{findings:?}");
    }
}

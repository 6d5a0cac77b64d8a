//! Proofs about a GGUF file beyond the `dflash-draft` contract (which the contract crate
//! checks, for `verify` and the runtime alike): this project's own output contract,
//! agreement with its report, and bit-exact agreement with a fresh conversion of its
//! source.
//!
//! Each check returns findings (one sentence each, naming the key or tensor, found vs
//! expected); an empty list means the property holds. I/O and parse failures are errors.

use std::collections::BTreeSet;

use dspark_gguf::{Array, GgmlType, GgufFile, Value};
use rayon::prelude::*;
use sha2::{Digest, Sha256};

use crate::config::DraftConfig;
use crate::error::Result;
use crate::names::LAYER_TENSORS;
use crate::plan::{CarriedVocab, FileLayout, Options, OutType, Plan};
use crate::report::{same_figure, value_json, Report};
use crate::source::Checkpoint;
use crate::write::{chunks, compute_chunk, hex};
use dspark_contract::names::general as G;
use dspark_contract::names::tensors::LayerTensor;

/// True when the file says dspark wrote it (`provenance.converter` = `dspark …`).
pub fn written_by_dspark(file: &GgufFile<'_>) -> bool {
    file.get(crate::plan::PROVENANCE_CONVERTER)
        .and_then(Value::as_str)
        .is_some_and(|c| c.starts_with("dspark "))
}

/// Checks this project's own output contract (`docs/OUTPUT-CONTRACT.md`) beyond what
/// runtimes read: provenance keys, quantization keys, `general.file_type`, canonical
/// tensor order. Meant for files [`written_by_dspark`].
pub fn check_output_contract(file: &GgufFile<'_>) -> Vec<String> {
    let mut f = Vec::new();
    check_own_keys(file, &mut f);
    f
}

fn check_own_keys(file: &GgufFile<'_>, f: &mut Vec<String>) {
    let layout = options_from_file(file).layout;
    let files = match file.get(crate::plan::PROVENANCE_FILES) {
        Some(Value::Array(Array::String(v))) => v.len(),
        _ => {
            f.push("provenance.source.files is missing or not ARRAY[STRING]".into());
            0
        }
    };
    match file.get(crate::plan::PROVENANCE_SHA256) {
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
    match file.get(crate::plan::PROVENANCE_PARAMETERS) {
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
        crate::plan::PROVENANCE_REPOSITORY,
        crate::plan::PROVENANCE_REVISION,
        crate::plan::PROVENANCE_POLICY,
        G::NAME,
    ] {
        if file.get(k).and_then(Value::as_str).is_none() {
            f.push(format!("{k} is missing or not STRING"));
        }
    }
    let quantized = file.tensor_infos().iter().any(|t| t.ty == GgmlType::Q8_0);
    if quantized && file.get(G::QUANTIZATION_VERSION) != Some(&Value::U32(2)) {
        f.push("general.quantization_version must be UINT32 2 when tensors are quantized".into());
    }
    // file_type must describe the matrices.
    if let Some(Value::U32(ft)) = file.get(G::FILE_TYPE) {
        let want = [OutType::Q8_0, OutType::F16, OutType::BF16, OutType::F32]
            .into_iter()
            .find(|o| o.file_type() == *ft);
        match want {
            None => f.push(format!(
                "general.file_type {ft} is not one this tool writes"
            )),
            Some(o) => {
                // Every tensor has the type the policy gives its role under that file type.
                for t in file.tensor_infos() {
                    let Some(role) = crate::names::role_of_gguf(&t.name) else {
                        continue;
                    };
                    let ne0 = t.dims.first().copied().unwrap_or(1);
                    let (want, _) = crate::plan::layout_policy_type(layout, role, o, ne0);
                    if t.ty != want {
                        f.push(format!(
                            "general.file_type says {}, so tensor `{}` ({}) should be {want}, but it is {}",
                            o.file_type_name(),
                            t.name,
                            role.name(),
                            t.ty
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
        f.push("tensors are not in the canonical order of docs/OUTPUT-CONTRACT.md §1".into());
    }
}

fn canonical_rank(gguf: &str) -> (u32, u64, u32) {
    use crate::names::{HEAD_TENSORS, TAIL_TENSORS};
    let gguf = crate::names::dflash_draft_name(gguf);
    if let Some(i) = HEAD_TENSORS.iter().position(|t| t.1 == gguf) {
        return (0, 0, i as u32);
    }
    if let Some((l, tensor)) = LayerTensor::parse(gguf) {
        if let Some(j) = LAYER_TENSORS.iter().position(|t| t.1 == tensor) {
            return (1, l, j as u32);
        }
    }
    if let Some(i) = TAIL_TENSORS.iter().position(|t| t.1 == gguf) {
        return (2, 0, i as u32);
    }
    (3, 0, 0)
}

/// Checks that every tensor's values are finite (the runtime's loaders refuse NaN and
/// infinity): one finding per tensor, naming the first such value. Tensors of types no
/// kernel reads are left to the contract check.
pub fn check_finite(file: &GgufFile<'_>) -> Vec<String> {
    file.tensors()
        .filter_map(|t| {
            let f = dspark_quant::format_of(t.info.ty)?;
            let at = (f.first_non_finite)(t.data)?;
            Some(format!(
                "tensor `{}`: value {at} is not finite",
                t.info.name
            ))
        })
        .collect()
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
    let outtype = match file.get(G::FILE_TYPE) {
        Some(Value::U32(1)) => OutType::F16,
        Some(Value::U32(32)) => OutType::BF16,
        Some(Value::U32(0)) => OutType::F32,
        _ => OutType::Q8_0,
    };
    let source_repo = file
        .get(G::SOURCE_REPO_URL)
        .and(s(crate::plan::PROVENANCE_REPOSITORY));
    let layout = match file
        .get(dspark_contract::names::ARCHITECTURE)
        .and_then(Value::as_str)
    {
        Some(dspark_contract::llama_dflash::ARCH) => FileLayout::LlamaCpp,
        _ => FileLayout::DflashDraft,
    };
    // The carried vocabulary is part of the file: a fresh conversion copies it back.
    let vocab = (layout == FileLayout::LlamaCpp).then(|| CarriedVocab {
        keys: file
            .kvs()
            .iter()
            .filter(|(k, _)| {
                k.starts_with("tokenizer.")
                    && k.as_str() != dspark_contract::names::tokenizer::MASK_ID
            })
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        sha256: s(crate::plan::PROVENANCE_VOCAB_SHA256).unwrap_or_default(),
    });
    Options {
        outtype,
        layout,
        vocab,
        name: s(G::NAME),
        source_repo,
        source_revision: s(crate::plan::PROVENANCE_REVISION).filter(|r| r != "unknown"),
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

//! `dspark inspect`.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use dspark_convert::report::value_json;
use dspark_convert::verify::{check_contract, check_output_contract, written_by_dspark};
use dspark_gguf::{Array, GgufFile, Value};
use serde_json::json;

use crate::mmap::map_input;
use crate::Outcome;

#[derive(Args, Debug)]
pub struct InspectArgs {
    /// The GGUF file.
    pub file: PathBuf,
    /// Print one JSON object with everything, arrays in full.
    #[arg(long)]
    pub json: bool,
}

/// Longest array printed in full in the text view.
const SHOW_ITEMS: usize = 8;

fn short(v: &Value) -> String {
    let list = |items: Vec<String>, n: usize| {
        let more = if n > items.len() {
            format!(", … ({n} items)")
        } else {
            String::new()
        };
        format!("[{}{more}]", items.join(", "))
    };
    match v {
        Value::String(s) if s.chars().count() > 80 => {
            format!("{:?}…", s.chars().take(80).collect::<String>())
        }
        Value::String(s) => format!("{s:?}"),
        Value::Array(a) => {
            let n = a.len();
            let items: Vec<String> = match value_json(v) {
                serde_json::Value::Array(items) => items
                    .iter()
                    .take(SHOW_ITEMS)
                    .map(|x| x.to_string())
                    .collect(),
                _ => Vec::new(),
            };
            if let Array::String(_) = a {
                list(items, n)
            } else {
                list(items, n)
            }
        }
        other => value_json(other).to_string(),
    }
}

pub fn run(a: InspectArgs) -> Result<Outcome> {
    let bytes = map_input(&a.file)?;
    let file = GgufFile::parse(&bytes).with_context(|| format!("{}", a.file.display()))?;
    let (summary, mut findings) = check_contract(&file);
    if written_by_dspark(&file) {
        findings.extend(check_output_contract(&file));
    }
    let mut out = std::io::stdout().lock();
    if a.json {
        let doc = json!({
            "file": a.file.display().to_string(),
            "version": file.version(),
            "size_bytes": file.file_size(),
            "alignment": file.alignment(),
            "data_offset": file.data_offset(),
            "metadata": file.kvs().iter().map(|(k, v)| json!({"key": k, "type": v.type_name(), "value": value_json(v)})).collect::<Vec<_>>(),
            "tensors": file.tensors().map(|t| json!({
                "name": t.info.name, "type": t.info.ty.name(), "ne": t.info.dims, "offset": t.offset, "bytes": t.data.len()
            })).collect::<Vec<_>>(),
            "contract": {
                "architecture": summary.arch,
                "ok": findings.is_empty(),
                "findings": findings,
                "embedding_length": summary.geometry.hidden,
                "block_count": summary.geometry.n_layers,
                "n_target_layers": summary.geometry.n_cap,
                "markov_rank": summary.geometry.markov_rank,
                "markov_vocab": summary.geometry.markov_vocab,
                "confidence_dim": summary.geometry.confidence_dim,
                "tensor_counts": counts(&file),
            }
        });
        writeln!(out, "{}", serde_json::to_string_pretty(&doc)?)?;
        return Ok(Outcome::Ok);
    }
    writeln!(
        out,
        "{}: GGUF v{}, {} bytes, {} keys, {} tensors, alignment {}, data at {}",
        a.file.display(),
        file.version(),
        file.file_size(),
        file.kvs().len(),
        file.tensor_infos().len(),
        file.alignment(),
        file.data_offset()
    )?;
    writeln!(out, "\nmetadata:")?;
    let kw = file.kvs().iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    for (k, v) in file.kvs() {
        writeln!(out, "  {k:<kw$}  {:<14} {}", v.type_name(), short(v))?;
    }
    writeln!(out, "\ntensors:")?;
    let nw = file
        .tensor_infos()
        .iter()
        .map(|t| t.name.len())
        .max()
        .unwrap_or(0);
    writeln!(
        out,
        "  {:<nw$}  {:<5} {:<22} {:>12} {:>12}",
        "name", "type", "ne", "offset", "bytes"
    )?;
    for t in file.tensors() {
        writeln!(
            out,
            "  {:<nw$}  {:<5} {:<22} {:>12} {:>12}",
            t.info.name,
            t.info.ty.name(),
            format!("{:?}", t.info.dims),
            t.offset,
            t.data.len()
        )?;
    }
    writeln!(out, "\ncontract:")?;
    let c: Vec<String> = counts(&file)
        .iter()
        .map(|(k, v)| format!("{v} {k}"))
        .collect();
    writeln!(
        out,
        "  architecture {}; hidden {}, {} draft layers, {} captured target layers; tensors: {}",
        if summary.arch.is_empty() {
            "?"
        } else {
            &summary.arch
        },
        summary.geometry.hidden,
        summary.geometry.n_layers,
        summary.geometry.n_cap,
        c.join(", ")
    )?;
    match (
        summary.geometry.markov_rank,
        summary.geometry.confidence_dim,
    ) {
        (Some(r), conf) => writeln!(
            out,
            "  DSpark heads: Markov rank {r}, vocabulary {}; confidence {}",
            summary.geometry.markov_vocab.unwrap_or(0),
            conf.map_or("absent".to_string(), |c| format!("width {c}"))
        )?,
        (None, _) => writeln!(out, "  DSpark heads: absent (plain DFlash)")?,
    }
    if findings.is_empty() {
        writeln!(out, "  dflash-draft contract: satisfied")?;
    } else {
        for f in &findings {
            writeln!(out, "  contract: {f}")?;
        }
    }
    Ok(Outcome::Ok)
}

fn counts(file: &GgufFile<'_>) -> serde_json::Map<String, serde_json::Value> {
    let mut m: Vec<(u32, &str, u64)> = Vec::new();
    for t in file.tensor_infos() {
        match m.iter_mut().find(|e| e.1 == t.ty.name()) {
            Some(e) => e.2 += 1,
            None => m.push((t.ty.id(), t.ty.name(), 1)),
        }
    }
    m.sort();
    m.into_iter()
        .map(|(_, k, v)| (k.to_string(), json!(v)))
        .collect()
}

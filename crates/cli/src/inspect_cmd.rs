//! `dspark inspect`.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use dspark_contract::{identify, FileKind, Finding};
use dspark_convert::report::value_json;
use dspark_convert::verify::{check_output_contract, written_by_dspark};
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

/// What the file is, by its contract: a summary (JSON) and the findings, if any.
fn summarize(file: &GgufFile<'_>) -> (serde_json::Value, Vec<String>, &'static str) {
    let types = dspark_quant::matrix_types();
    let list = |f: &[Finding]| f.iter().map(|f| f.to_string()).collect::<Vec<_>>();
    match identify(file) {
        FileKind::DflashDraft => {
            let kind = dspark_contract::dflash_draft::KIND;
            match dspark_contract::dflash_draft::check(file, &types) {
                Ok(d) => {
                    let h = d.hparams();
                    let mut own = Vec::new();
                    if written_by_dspark(file) {
                        own = check_output_contract(file);
                    }
                    (
                        json!({
                            "kind": "drafter",
                            "architecture": d.arch(),
                            "embedding_length": h.hidden,
                            "block_count": h.layers,
                            "head_count": h.heads,
                            "head_count_kv": h.kv_heads,
                            "head_dim": h.head_dim,
                            "feed_forward_length": h.ffn,
                            "block_size": h.block_size,
                            "target_layer_ids": h.target_layer_ids,
                            "n_target_layers": h.target_layer_ids.len(),
                            "target_block_count": h.target_layers,
                            "target_vocab": h.target_vocab,
                            "mask_token_id": h.mask_token_id,
                            "sample_from_anchor": h.sample_from_anchor,
                            "rope_scaling": h.yarn.map(|y| json!({"type": "yarn", "factor": y.factor, "original_context": y.original_context})),
                            "markov_rank": d.markov().map(|m| m.rank),
                            "markov_vocab": d.markov().map(|m| m.vocab),
                            "confidence_dim": d.confidence().map(|c| c.weight.cols),
                        }),
                        own,
                        kind,
                    )
                }
                Err(e) => (json!({"kind": "drafter"}), list(&e.findings), kind),
            }
        }
        FileKind::Qwen3 => {
            let kind = dspark_contract::qwen3::KIND;
            match dspark_contract::qwen3::check(file, &types) {
                Ok(t) => {
                    let h = t.hparams();
                    let sp = t.special_tokens();
                    (
                        json!({
                            "kind": "target",
                            "architecture": dspark_contract::qwen3::ARCH,
                            "embedding_length": h.hidden,
                            "block_count": h.layers,
                            "head_count": h.heads,
                            "head_count_kv": h.kv_heads,
                            "head_dim": h.head_dim,
                            "feed_forward_length": h.ffn,
                            "vocab": h.vocab,
                            "context_length": h.context,
                            "rms_eps": h.eps,
                            "rope_freq_base": h.rope_base,
                            "tied_lm_head": t.output().is_none(),
                            "tokenizer": t.vocab().map(|v| json!({"model": v.model, "pre": v.pre, "tokens": v.tokens.len(), "merges": v.merges.len()})),
                            "bos_token_id": sp.bos,
                            "eos_token_id": sp.eos,
                        }),
                        Vec::new(),
                        kind,
                    )
                }
                Err(e) => (json!({"kind": "target"}), list(&e.findings), kind),
            }
        }
        FileKind::Unknown(arch) => (
            json!({"kind": "unknown", "architecture": arch}),
            vec![format!(
                "general.architecture is {}: not a kind dspark knows (dflash-draft drafters, qwen3 targets)",
                arch.map_or("missing".to_string(), |a| format!("`{a}`"))
            )],
            "model file",
        ),
    }
}

pub fn run(a: InspectArgs) -> Result<Outcome> {
    let bytes = map_input(&a.file)?;
    let file = GgufFile::parse(&bytes).with_context(|| format!("{}", a.file.display()))?;
    let (mut summary, findings, kind) = summarize(&file);
    let mut out = std::io::stdout().lock();
    if a.json {
        summary["ok"] = json!(findings.is_empty());
        summary["findings"] = json!(findings);
        summary["tensor_counts"] = json!(counts(&file));
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
            "contract": summary,
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
    let c: Vec<String> = counts(&file)
        .iter()
        .map(|(k, v)| format!("{v} {k}"))
        .collect();
    writeln!(out, "\nsummary ({}): tensors: {}", kind, c.join(", "))?;
    let g = |k: &str| summary[k].to_string();
    match summary["kind"].as_str() {
        Some("drafter") if findings.is_empty() || summary.get("embedding_length").is_some() => {
            writeln!(
                out,
                "  drafter ({}): hidden {}, {} draft layers, {}/{} heads of {}, FFN {}, block {}; captures target layers {} of {}",
                g("architecture"), g("embedding_length"), g("block_count"), g("head_count"), g("head_count_kv"),
                g("head_dim"), g("feed_forward_length"), g("block_size"), g("target_layer_ids"),
                summary["target_block_count"].as_u64().map_or("?".into(), |n| n.to_string())
            )?;
            match summary["markov_rank"].as_u64() {
                Some(r) => writeln!(
                    out,
                    "  DSpark heads: Markov rank {r}, vocabulary {}; confidence {}",
                    g("markov_vocab"),
                    summary["confidence_dim"]
                        .as_u64()
                        .map_or("absent".into(), |c| format!("width {c}"))
                )?,
                None => writeln!(out, "  DSpark heads: absent (plain DFlash)")?,
            }
        }
        Some("target") if summary.get("embedding_length").is_some() => {
            writeln!(
                out,
                "  target (qwen3): hidden {}, {} layers, {}/{} heads of {}, FFN {}, vocabulary {}, context {}, LM head {}",
                g("embedding_length"), g("block_count"), g("head_count"), g("head_count_kv"), g("head_dim"),
                g("feed_forward_length"), g("vocab"), g("context_length"),
                if summary["tied_lm_head"].as_bool() == Some(true) { "tied to the embedding" } else { "separate" }
            )?;
            match summary["tokenizer"].as_object() {
                Some(t) => writeln!(
                    out,
                    "  tokenizer: {} ({} pre-tokenizer), {} tokens, {} merges; eos {}",
                    t["model"],
                    t["pre"],
                    t["tokens"],
                    t["merges"],
                    g("eos_token_id")
                )?,
                None => writeln!(out, "  tokenizer: none in the file")?,
            }
        }
        _ => {}
    }
    if findings.is_empty() {
        writeln!(out, "  {kind} contract: satisfied")?;
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

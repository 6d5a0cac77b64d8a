//! `dspark inspect`.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use dspark_contract::{identify, FileKind, Finding};
use dspark_convert::report::value_json;
use dspark_convert::verify::{check_finite, check_output_contract, written_by_dspark};
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

/// Element `i` of an array, as the text view shows it.
fn item(a: &Array, i: usize) -> String {
    match a {
        Array::U8(v) => v[i].to_string(),
        Array::I8(v) => v[i].to_string(),
        Array::U16(v) => v[i].to_string(),
        Array::I16(v) => v[i].to_string(),
        Array::U32(v) => v[i].to_string(),
        Array::I32(v) => v[i].to_string(),
        Array::U64(v) => v[i].to_string(),
        Array::I64(v) => v[i].to_string(),
        Array::F32(v) => v[i].to_string(),
        Array::F64(v) => v[i].to_string(),
        Array::Bool(v) => v[i].to_string(),
        Array::String(v) => format!("{:?}", v[i]),
    }
}

/// A value in one line: strings cut at 80 characters, arrays at [`SHOW_ITEMS`] items
/// (only those are formatted, so a huge array costs nothing).
fn short(v: &Value) -> String {
    match v {
        Value::String(s) if s.chars().count() > 80 => {
            format!("{:?}…", s.chars().take(80).collect::<String>())
        }
        Value::String(s) => format!("{s:?}"),
        Value::Array(a) => {
            let n = a.len();
            let items: Vec<String> = (0..n.min(SHOW_ITEMS)).map(|i| item(a, i)).collect();
            let more = if n > SHOW_ITEMS {
                format!(", … ({n} items)")
            } else {
                String::new()
            };
            format!("[{}{more}]", items.join(", "))
        }
        Value::F32(x) => x.to_string(),
        Value::F64(x) => x.to_string(),
        other => value_json(other).to_string(),
    }
}

/// A float for JSON: a number, or the strings `"NaN"`, `"inf"`, `"-inf"` (JSON has no
/// such numbers, and `null` would hide which one the file holds).
fn float_json<S: serde::Serializer>(x: f64, s: S) -> Result<S::Ok, S::Error> {
    if x.is_finite() {
        s.serialize_f64(x)
    } else if x.is_nan() {
        s.serialize_str("NaN")
    } else if x > 0.0 {
        s.serialize_str("inf")
    } else {
        s.serialize_str("-inf")
    }
}

/// A metadata value serialized as it is read: arrays element by element, so a huge array
/// is written without building it in memory first.
struct JsonValue<'a>(&'a Value);

impl serde::Serialize for JsonValue<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq;
        macro_rules! seq {
            ($v:expr, $f:expr) => {{
                let mut q = s.serialize_seq(Some($v.len()))?;
                for x in $v {
                    q.serialize_element(&$f(x))?;
                }
                q.end()
            }};
        }
        struct F(f64);
        impl serde::Serialize for F {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                float_json(self.0, s)
            }
        }
        match self.0 {
            Value::F32(x) => float_json(f64::from(*x), s),
            Value::F64(x) => float_json(*x, s),
            Value::Array(a) => match a {
                Array::U8(v) => seq!(v, |x: &u8| *x),
                Array::I8(v) => seq!(v, |x: &i8| *x),
                Array::U16(v) => seq!(v, |x: &u16| *x),
                Array::I16(v) => seq!(v, |x: &i16| *x),
                Array::U32(v) => seq!(v, |x: &u32| *x),
                Array::I32(v) => seq!(v, |x: &i32| *x),
                Array::U64(v) => seq!(v, |x: &u64| *x),
                Array::I64(v) => seq!(v, |x: &i64| *x),
                Array::F32(v) => seq!(v, |x: &f32| F(f64::from(*x))),
                Array::F64(v) => seq!(v, |x: &f64| F(*x)),
                Array::Bool(v) => seq!(v, |x: &bool| *x),
                Array::String(v) => seq!(v, String::as_str),
            },
            scalar => value_json(scalar).serialize(s),
        }
    }
}

#[derive(serde::Serialize)]
struct KeyDoc<'a> {
    key: &'a str,
    #[serde(rename = "type")]
    ty: String,
    value: JsonValue<'a>,
}

#[derive(serde::Serialize)]
struct TensorDoc<'a> {
    name: &'a str,
    #[serde(rename = "type")]
    ty: &'static str,
    ne: &'a [u64],
    offset: u64,
    bytes: usize,
}

/// `inspect --json`, written as a stream.
#[derive(serde::Serialize)]
struct InspectDoc<'a> {
    file: String,
    version: u32,
    size_bytes: u64,
    alignment: u64,
    data_offset: u64,
    metadata: Vec<KeyDoc<'a>>,
    tensors: Vec<TensorDoc<'a>>,
    contract: serde_json::Value,
}

/// What the file is, by its contract: a summary (JSON) and the findings, if any.
fn summarize(file: &GgufFile<'_>) -> (serde_json::Value, Vec<String>, &'static str) {
    let types = dspark_quant::matrix_types();
    let list = |f: &[Finding]| f.iter().map(|f| f.to_string()).collect::<Vec<_>>();
    match identify(file) {
        FileKind::DflashDraft | FileKind::LlamaDflash => {
            let kind = if identify(file) == FileKind::LlamaDflash {
                dspark_contract::llama_dflash::KIND
            } else {
                dspark_contract::dflash_draft::KIND
            };
            match dspark_contract::drafter(file, &types) {
                Ok(d) => {
                    let h = d.hparams();
                    let mut own = check_finite(file);
                    if written_by_dspark(file) {
                        own.extend(check_output_contract(file));
                    }
                    (
                        json!({
                            "kind": "drafter",
                            "architecture": d.arch(),
                            "layout": if d.arch() == dspark_contract::llama_dflash::ARCH { "llama.cpp" } else { "dflash-draft" },
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
                            "context_length": h.context,
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
                        check_finite(file),
                        kind,
                    )
                }
                Err(e) => (json!({"kind": "target"}), list(&e.findings), kind),
            }
        }
        FileKind::KimiK3 => {
            let kind = dspark_contract::kimi_k3::KIND;
            match dspark_contract::kimi_k3::check(file, &types) {
                Ok(t) => {
                    let h = t.hparams();
                    let sp = t.special_tokens();
                    let mla: Vec<usize> = (0..h.layers).filter(|&i| h.mla[i]).collect();
                    (
                        json!({
                            "kind": "target",
                            "architecture": dspark_contract::kimi_k3::ARCH,
                            "embedding_length": h.hidden,
                            "block_count": h.layers,
                            "head_count": h.heads,
                            "mla_layers": mla,
                            "kda_head_dim": h.kda_head_dim,
                            "conv_kernel": h.conv_kernel,
                            "gate_lower_bound": h.gate_lower_bound,
                            "q_lora_rank": h.q_lora_rank,
                            "kv_lora_rank": h.kv_lora_rank,
                            "rope_dim": h.rope_dim,
                            "key_length_mla": h.key_length_mla,
                            "value_length_mla": h.value_length_mla,
                            "leading_dense_block_count": h.dense_layers,
                            "feed_forward_length": h.ffn,
                            "expert_count": h.experts,
                            "expert_used_count": h.experts_used,
                            "expert_shared_count": h.shared_experts,
                            "expert_feed_forward_length": h.expert_ffn,
                            "expert_latent_length": h.expert_latent,
                            "expert_gating": format!("{:?}", h.gating).to_lowercase(),
                            "attn_res_block_size": h.res_block,
                            "vocab": h.vocab,
                            "context_length": h.context,
                            "rms_eps": h.eps,
                            "tokenizer": t.vocab().map(|v| json!({"model": v.model, "pre": v.pre, "tokens": v.tokens.len(), "merges": v.merges.len()})),
                            "bos_token_id": sp.bos,
                            "eos_token_id": sp.eos,
                        }),
                        check_finite(file),
                        kind,
                    )
                }
                Err(e) => (json!({"kind": "target"}), list(&e.findings), kind),
            }
        }
        FileKind::Unknown(arch) => (
            json!({"kind": "unknown", "architecture": arch}),
            vec![format!(
                "general.architecture is {}: not a kind dspark knows (dflash-draft and llama.cpp dflash drafters, qwen3 and kimi-k3 targets)",
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
        let doc = InspectDoc {
            file: a.file.display().to_string(),
            version: file.version(),
            size_bytes: file.file_size(),
            alignment: file.alignment(),
            data_offset: file.data_offset(),
            metadata: file
                .kvs()
                .iter()
                .map(|(k, v)| KeyDoc {
                    key: k,
                    ty: v.type_name(),
                    value: JsonValue(v),
                })
                .collect(),
            tensors: file
                .tensors()
                .map(|t| TensorDoc {
                    name: &t.info.name,
                    ty: t.info.ty.name(),
                    ne: &t.info.dims,
                    offset: t.offset,
                    bytes: t.data.len(),
                })
                .collect(),
            contract: summary,
        };
        serde_json::to_writer_pretty(&mut out, &doc)?;
        writeln!(out)?;
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
    // Key column at most 56 wide; longer keys push their own line's value right.
    let kw = file
        .kvs()
        .iter()
        .map(|(k, _)| k.len())
        .max()
        .unwrap_or(0)
        .min(56);
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

//! `dspark inspect`.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use dspark_contract::{FileKind, Finding};
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

/// Files up to this size get every tensor value scanned for NaN and infinity by
/// `inspect`; larger ones (a 600 GB Kimi K3) are described from their header alone, and
/// the text says `verify` scans them.
const SCAN_LIMIT: u64 = 4 << 30;

/// What the file is, by its contract: the summary (JSON), a description for a person, the
/// findings, and the kind's name for messages.
fn summarize(
    file: &GgufFile<'_>,
) -> (serde_json::Value, Option<String>, Vec<String>, &'static str) {
    let kind = dspark_contract::kind_of(file);
    match dspark_contract::check(file, &dspark_quant::matrix_types()) {
        Ok(m) => {
            let summary = m.summary();
            let mut own = if file.file_size() <= SCAN_LIMIT {
                check_finite(file)
            } else {
                Vec::new()
            };
            if written_by_dspark(file) {
                own.extend(check_output_contract(file));
            }
            let json = serde_json::to_value(&summary).unwrap_or_else(|_| json!({}));
            (json, Some(summary.describe()), own, kind)
        }
        Err(e) => {
            let what = match dspark_contract::identify(file) {
                FileKind::DflashDraft | FileKind::LlamaDflash => "drafter",
                FileKind::Target(_) => "target",
                FileKind::Unknown(_) => "unknown",
            };
            let findings = e.findings.iter().map(Finding::to_string).collect();
            (json!({"kind": what}), None, findings, kind)
        }
    }
}

pub fn run(a: InspectArgs) -> Result<Outcome> {
    let bytes = map_input(&a.file)?;
    let file = GgufFile::parse(&bytes).with_context(|| format!("{}", a.file.display()))?;
    let (mut summary, description, findings, kind) = summarize(&file);
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
    for line in description.iter().flat_map(|d| d.lines()) {
        writeln!(out, "  {line}")?;
    }
    if file.file_size() > SCAN_LIMIT {
        writeln!(
            out,
            "  values: not scanned ({} bytes; `dspark verify` scans every value)",
            file.file_size()
        )?;
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

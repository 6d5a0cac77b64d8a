//! `conversion-report.json` (`docs/OUTPUT-CONTRACT.md` §4): what was converted, how well, and
//! the hashes that prove it. Deterministic: no timestamps, no absolute paths, keys in a
//! fixed order, floats printed as their shortest round-trip form.

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Number, Value as Json};

use dspark_gguf::{Array, GgmlType, Value};

use crate::plan::{converter_version, Plan, ARCH};
use crate::write::WriteResult;

/// The report's format tag.
pub const REPORT_FORMAT: &str = "dspark-conversion-report/1";

/// The whole report.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[allow(missing_docs)]
pub struct Report {
    pub format: String,
    pub converter: String,
    pub source: SourceSection,
    pub output: OutputSection,
    pub output_to_source_ratio: f64,
    pub tensor_counts: Map<String, Json>,
    pub error: ErrorSection,
    pub geometry: Map<String, Json>,
    pub metadata: Vec<MetaRecord>,
    pub tensors: Vec<TensorRecord>,
    /// Source tensors left out with `--allow-extra` (absent when none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<String>,
}

/// `source`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[allow(missing_docs)]
pub struct SourceSection {
    pub repository: String,
    pub revision: String,
    pub format: String,
    pub dtypes: Map<String, Json>,
    pub files: Vec<SourceFile>,
    pub size_bytes: u64,
    pub parameters: u64,
}

/// One source weight file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[allow(missing_docs)]
pub struct SourceFile {
    pub name: String,
    pub size_bytes: u64,
    pub sha256: String,
}

/// `output`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[allow(missing_docs)]
pub struct OutputSection {
    pub file: String,
    pub format: String,
    pub gguf_version: u32,
    pub file_type: String,
    pub size_bytes: u64,
    pub sha256: String,
}

/// `error`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[allow(missing_docs)]
pub struct ErrorSection {
    pub metric: String,
    pub elements: String,
    #[serde(deserialize_with = "nullable_f64")]
    pub rms: f64,
    #[serde(deserialize_with = "nullable_f64")]
    pub max: f64,
    pub max_tensor: Option<String>,
}

/// One metadata key as written.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[allow(missing_docs)]
pub struct MetaRecord {
    pub key: String,
    #[serde(rename = "type")]
    pub ty: String,
    pub value: Json,
    pub from: String,
}

/// One tensor as written.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[allow(missing_docs)]
pub struct TensorRecord {
    pub name: String,
    pub source_name: String,
    pub source_shape: Vec<u64>,
    pub source_dtype: String,
    #[serde(rename = "type")]
    pub ty: String,
    pub role: String,
    pub offset: u64,
    pub bytes: u64,
    pub sha256: String,
    /// Non-finite figures (a Q8_0 scale that overflows f16) are written as `null`.
    #[serde(deserialize_with = "nullable_f64")]
    pub relative_rmse: f64,
    #[serde(deserialize_with = "nullable_f64")]
    pub max_abs_error: f64,
    /// Why the policy's type was not used (absent when it was).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback: Option<String>,
}

/// JSON has no NaN or infinity: serde_json writes them as `null`; read `null` back as NaN.
fn nullable_f64<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

/// True when a recomputed figure equals a recorded one: same bits, or both non-finite
/// (the report stores every non-finite figure as `null`).
pub fn same_figure(a: f64, b: f64) -> bool {
    a.to_bits() == b.to_bits() || (!a.is_finite() && !b.is_finite())
}

/// An f32 as the JSON number that prints like the f32 (1e-5, not 9.99999974e-6).
pub fn f32_json(x: f32) -> Json {
    format!("{x}")
        .parse::<f64>()
        .ok()
        .and_then(Number::from_f64)
        .map_or(Json::Null, Json::Number)
}

fn f64_json(x: f64) -> Json {
    Number::from_f64(x).map_or(Json::Null, Json::Number)
}

/// A metadata value as JSON.
pub fn value_json(v: &Value) -> Json {
    match v {
        Value::U8(x) => json!(x),
        Value::I8(x) => json!(x),
        Value::U16(x) => json!(x),
        Value::I16(x) => json!(x),
        Value::U32(x) => json!(x),
        Value::I32(x) => json!(x),
        Value::U64(x) => json!(x),
        Value::I64(x) => json!(x),
        Value::F32(x) => f32_json(*x),
        Value::F64(x) => f64_json(*x),
        Value::Bool(x) => json!(x),
        Value::String(s) => json!(s),
        Value::Array(a) => Json::Array(match a {
            Array::U8(v) => v.iter().map(|x| json!(x)).collect(),
            Array::I8(v) => v.iter().map(|x| json!(x)).collect(),
            Array::U16(v) => v.iter().map(|x| json!(x)).collect(),
            Array::I16(v) => v.iter().map(|x| json!(x)).collect(),
            Array::U32(v) => v.iter().map(|x| json!(x)).collect(),
            Array::I32(v) => v.iter().map(|x| json!(x)).collect(),
            Array::U64(v) => v.iter().map(|x| json!(x)).collect(),
            Array::I64(v) => v.iter().map(|x| json!(x)).collect(),
            Array::F32(v) => v.iter().map(|x| f32_json(*x)).collect(),
            Array::F64(v) => v.iter().map(|x| f64_json(*x)).collect(),
            Array::Bool(v) => v.iter().map(|x| json!(x)).collect(),
            Array::String(v) => v.iter().map(|x| json!(x)).collect(),
        }),
    }
}

/// Per-tensor figures and the RMS over quantized tensors: (rms, max, max tensor).
pub fn error_summary(plan: &Plan, result: &WriteResult) -> (f64, f64, Option<String>) {
    let mut sum = 0.0f64;
    let mut n = 0usize;
    let mut max = 0.0f64;
    let mut max_tensor = None;
    for (t, r) in plan.tensors.iter().zip(&result.tensors) {
        if t.ty == GgmlType::F32 {
            continue;
        }
        let e = r.errors.relative_rmse();
        sum += e * e;
        n += 1;
        if max_tensor.is_none() || e > max {
            max = e;
            max_tensor = Some(t.name.clone());
        }
    }
    let rms = if n == 0 { 0.0 } else { (sum / n as f64).sqrt() };
    (rms, max, max_tensor)
}

impl Report {
    /// Builds the report of a finished conversion.
    pub fn new(
        plan: &Plan,
        result: &WriteResult,
        source_sizes: &[u64],
        output_file: &str,
    ) -> Report {
        let layout = plan.layout();
        let source_size: u64 = source_sizes.iter().sum();
        let metadata = plan.metadata(&result.source_sha256);
        let geometry: Map<String, Json> = metadata
            .iter()
            .filter_map(|m| {
                m.key
                    .strip_prefix(&format!("{ARCH}."))
                    .map(|k| (k.to_string(), value_json(&m.value)))
            })
            .collect();
        let (rms, max, max_tensor) = error_summary(plan, result);
        Report {
            format: REPORT_FORMAT.into(),
            converter: converter_version(),
            source: SourceSection {
                repository: plan.repository.clone(),
                revision: plan
                    .options
                    .source_revision
                    .clone()
                    .unwrap_or_else(|| "unknown".into()),
                format: "safetensors".into(),
                dtypes: plan
                    .source_dtypes
                    .iter()
                    .map(|(k, &n)| (k.clone(), json!(n)))
                    .collect(),
                files: plan
                    .source_files
                    .iter()
                    .zip(source_sizes)
                    .zip(&result.source_sha256)
                    .map(|((name, &size_bytes), sha)| SourceFile {
                        name: name.clone(),
                        size_bytes,
                        sha256: sha.clone(),
                    })
                    .collect(),
                size_bytes: source_size,
                parameters: plan.source_parameters,
            },
            output: OutputSection {
                file: output_file.to_string(),
                format: "GGUF".into(),
                gguf_version: dspark_gguf::GGUF_VERSION,
                file_type: plan.options.outtype.file_type_name().into(),
                size_bytes: result.output_size,
                sha256: result.output_sha256.clone(),
            },
            output_to_source_ratio: if source_size == 0 {
                0.0
            } else {
                result.output_size as f64 / source_size as f64
            },
            tensor_counts: plan
                .type_counts()
                .into_iter()
                .map(|(ty, n)| (ty.name().to_string(), json!(n)))
                .collect(),
            error: ErrorSection {
                metric: "relative_rmse".into(),
                elements: "all".into(),
                rms,
                max,
                max_tensor,
            },
            geometry,
            metadata: metadata
                .iter()
                .map(|m| MetaRecord {
                    key: m.key.clone(),
                    ty: m.value.type_name(),
                    value: value_json(&m.value),
                    from: m.from.clone(),
                })
                .collect(),
            tensors: plan
                .tensors
                .iter()
                .zip(&result.tensors)
                .zip(&layout.tensors)
                .map(|((t, r), &(offset, bytes))| TensorRecord {
                    name: t.name.clone(),
                    source_name: t.source_name.clone(),
                    source_shape: t.source_shape.clone(),
                    source_dtype: t.source_dtype.name().into(),
                    ty: t.ty.name().into(),
                    role: t.role.name().into(),
                    offset,
                    bytes,
                    sha256: r.sha256.clone(),
                    relative_rmse: r.errors.relative_rmse(),
                    max_abs_error: f64::from(r.errors.max_abs),
                    fallback: t.fallback.clone(),
                })
                .collect(),
            skipped: plan.skipped.clone(),
        }
    }

    /// Pretty JSON with a trailing newline.
    pub fn to_json(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).expect("report serializes");
        s.push('\n');
        s
    }
}

//! The checker every contract is written with: typed key reads that record a finding
//! instead of failing, tensor lookups that check type and shape and mark the tensor as
//! consumed, and a last pass that reports every tensor nobody consumed.

use std::collections::BTreeSet;
use std::ops::RangeInclusive;

use dspark_gguf::{Array, GgmlType, GgufFile, Value};

use crate::finding::{ContractError, Finding};

/// A tensor the contract checked: its name, type, dims and bytes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TensorRef<'f> {
    /// GGUF name.
    pub name: &'f str,
    /// Storage type.
    pub ty: GgmlType,
    /// Columns: `ne[0]`, the input size of a matrix (the length of a vector).
    pub cols: usize,
    /// Rows: the product of the other dims, a matrix's output size (1 for a vector).
    pub rows: usize,
    /// The data (exactly `rows` rows of `cols` values of `ty`, checked by the parser).
    pub data: &'f [u8],
}

impl TensorRef<'_> {
    /// The values of an F32, F16 or BF16 tensor (a vector the contract checked), decoded.
    ///
    /// # Panics
    /// For other types (the contract admits only these for vectors).
    pub fn f32_values(&self) -> Vec<f32> {
        match self.ty {
            GgmlType::F32 => self
                .data
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect(),
            GgmlType::F16 => self
                .data
                .chunks_exact(2)
                .map(|b| f16_to_f32(u16::from_le_bytes([b[0], b[1]])))
                .collect(),
            GgmlType::BF16 => self
                .data
                .chunks_exact(2)
                .map(|b| f32::from_bits(u32::from(u16::from_le_bytes([b[0], b[1]])) << 16))
                .collect(),
            other => panic!("f32_values of a {other} tensor"),
        }
    }
}

/// IEEE binary16 → f32 (exact).
fn f16_to_f32(h: u16) -> f32 {
    let negative = h >> 15 == 1;
    let exp = u32::from((h >> 10) & 0x1f);
    let mant = u32::from(h & 0x3ff);
    let magnitude = match exp {
        // Zero and subnormals: mant · 2^-24, exact in f32.
        0 => mant as f32 / 16_777_216.0,
        31 if mant == 0 => f32::INFINITY,
        31 => f32::from_bits(0x7fc0_0000 | (mant << 13)),
        e => f32::from_bits(((e + 112) << 23) | (mant << 13)),
    };
    if negative {
        -magnitude
    } else {
        magnitude
    }
}

/// What a tensor is, for its type rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    /// Multiplied as a matrix (or gathered by rows): any type the caller's kernels run.
    Matrix,
    /// Read elementwise (norm weights, biases, the confidence head): F32, or F16 / BF16
    /// decoded to f32 once.
    Vector,
    /// Read elementwise where llama.cpp requires F32 (RoPE frequency factors).
    F32Vector,
}

/// Collects findings about one file.
pub(crate) struct Checker<'f, 'k> {
    pub file: &'f GgufFile<'f>,
    pub findings: Vec<Finding>,
    used: BTreeSet<&'f str>,
    matrix_types: &'k [GgmlType],
}

fn type_list(types: &[GgmlType]) -> String {
    types
        .iter()
        .map(|t| t.name())
        .collect::<Vec<_>>()
        .join(", ")
}

/// `dims` without trailing 1s (ggml pads shapes with them).
fn trimmed(dims: &[u64]) -> &[u64] {
    let mut n = dims.len();
    while n > 1 && dims[n - 1] == 1 {
        n -= 1;
    }
    &dims[..n]
}

impl<'f, 'k> Checker<'f, 'k> {
    pub fn new(file: &'f GgufFile<'f>, matrix_types: &'k [GgmlType]) -> Checker<'f, 'k> {
        Checker {
            file,
            findings: Vec::new(),
            used: BTreeSet::new(),
            matrix_types,
        }
    }

    pub fn key_finding(&mut self, key: &str, msg: impl Into<String>) {
        self.findings.push(Finding::key(key, msg));
    }

    /// Whether `value`, the `what` of tensor `name`, lies within `range`; a finding
    /// naming the tensor if not.
    pub fn tensor_dim_in(
        &mut self,
        name: &str,
        what: &str,
        value: u64,
        range: RangeInclusive<u64>,
    ) -> bool {
        let ok = range.contains(&value);
        if !ok {
            self.findings.push(Finding::tensor(
                name,
                format!(
                    "has {what} {value}, expected {}..={}",
                    range.start(),
                    range.end()
                ),
            ));
        }
        ok
    }

    fn get(&self, key: &str) -> Option<&'f Value> {
        self.file.get(key)
    }

    /// A UINT32 key (runtimes read integers with strict typed getters).
    pub fn u32(&mut self, key: &str, required: bool) -> Option<u32> {
        match self.get(key) {
            Some(Value::U32(v)) => Some(*v),
            Some(v) => {
                self.key_finding(key, format!("is {}, expected UINT32", v.type_name()));
                None
            }
            None => {
                if required {
                    self.key_finding(key, "missing");
                }
                None
            }
        }
    }

    /// A UINT32 key within `range`.
    pub fn u32_in(&mut self, key: &str, range: RangeInclusive<u64>, required: bool) -> Option<u64> {
        let v = u64::from(self.u32(key, required)?);
        if !range.contains(&v) {
            self.key_finding(
                key,
                format!("is {v}, expected {}..={}", range.start(), range.end()),
            );
            return None;
        }
        Some(v)
    }

    /// A FLOAT32 key.
    pub fn f32(&mut self, key: &str, required: bool) -> Option<f32> {
        match self.get(key) {
            Some(Value::F32(v)) => Some(*v),
            Some(v) => {
                self.key_finding(key, format!("is {}, expected FLOAT32", v.type_name()));
                None
            }
            None => {
                if required {
                    self.key_finding(key, "missing");
                }
                None
            }
        }
    }

    /// A finite FLOAT32 key in `(0, max]`; `default` when absent (or a finding when there
    /// is none).
    pub fn positive_f32(&mut self, key: &str, default: Option<f32>, max: f32) -> Option<f32> {
        let v = match self.f32(key, default.is_none()) {
            Some(v) => v,
            None if self.get(key).is_none() => return default,
            None => return None,
        };
        if !(v.is_finite() && v > 0.0 && v <= max) {
            let limit = if max == f32::MAX {
                String::new()
            } else {
                format!(" at most {max}")
            };
            self.key_finding(
                key,
                format!("is {v}, expected a finite value above 0{limit}"),
            );
            return None;
        }
        Some(v)
    }

    /// `general.architecture` is `arch` (a finding otherwise): the first check of every
    /// target contract.
    pub fn architecture_is(&mut self, arch: &str) -> Option<()> {
        match self.string(crate::names::ARCHITECTURE, true) {
            Some(a) if a == arch => Some(()),
            Some(other) => {
                self.key_finding(
                    crate::names::ARCHITECTURE,
                    format!("is `{other}`, expected `{arch}`"),
                );
                None
            }
            None => None,
        }
    }

    /// The attention head size of `arch`: `attention.key_length`, or when absent
    /// `hidden / heads` (a finding when that does not divide), within the head-size bounds.
    pub fn head_dim(&mut self, arch: &str, hidden: Option<u64>, heads: Option<u64>) -> Option<u64> {
        use crate::names::{key, keys};
        let kl = key(arch, keys::KEY_LENGTH);
        if self.get(&kl).is_some() {
            return self.u32_in(&kl, crate::bounds::HEAD_DIM, true);
        }
        match (hidden, heads) {
            (Some(h), Some(n)) if h % n == 0 => {
                Some(h / n).filter(|d| crate::bounds::HEAD_DIM.contains(d))
            }
            (Some(_), Some(_)) => {
                self.key_finding(
                    &kl,
                    "missing, and embedding_length is not a multiple of head_count",
                );
                None
            }
            _ => None,
        }
    }

    /// The vocabulary size: the row count of `token_embd.weight`, whose rows must be
    /// `hidden` wide (a finding when it is missing or shaped otherwise); `ARCH.vocab_size`,
    /// when present, must agree.
    pub fn vocab_rows(&mut self, arch: &str, hidden: u64) -> Option<u64> {
        use crate::bounds::VOCAB;
        use crate::names::{key, keys, tensors::TOKEN_EMBD};
        let vocab = match self.dims(TOKEN_EMBD) {
            Some(d) if d.len() == 2 && d[0] == hidden && VOCAB.contains(&d[1]) => d[1],
            Some(d) => {
                self.findings.push(crate::Finding::tensor(
                    TOKEN_EMBD,
                    format!(
                        "has ne {d:?}, expected [{hidden}, vocab] with a vocabulary of {}..={}",
                        VOCAB.start(),
                        VOCAB.end()
                    ),
                ));
                return None;
            }
            None => {
                self.findings
                    .push(crate::Finding::tensor(TOKEN_EMBD, "missing"));
                return None;
            }
        };
        let vk = key(arch, keys::VOCAB_SIZE);
        if self.get(&vk).is_some() {
            if let Some(n) = self.u32(&vk, true).filter(|&n| u64::from(n) != vocab) {
                self.key_finding(&vk, format!("is {n}, but token_embd has {vocab} rows"));
            }
        }
        Some(vocab)
    }

    /// Keys llama.cpp honours that change RoPE or attention in ways these models do not
    /// implement: `rope.dimension_count` other than the head size (partial rotary), a
    /// `rope.scaling.factor` other than 1 without a scaling type (linear scaling),
    /// `rope.scale_linear` other than 1, `attention.causal` other than `causal` (how the
    /// model attends). `scaled` is true when a scaling type the caller supports is present
    /// (its factor is the caller's to check).
    pub fn unsupported_rope_keys(&mut self, arch: &str, head_dim: u64, scaled: bool, causal: bool) {
        use crate::names::{key, keys};
        let k = |s: &str| key(arch, s);
        if let Some(d) = self.u32(&k(keys::ROPE_DIMENSION_COUNT), false) {
            if u64::from(d) != head_dim {
                self.key_finding(
                    &k(keys::ROPE_DIMENSION_COUNT),
                    format!("is {d}: partial rotary embeddings (fewer than the {head_dim} dims of a head) are not supported"),
                );
            }
        }
        let unit = |c: &mut Self, key: String| {
            if let Some(f) = c.f32(&key, false) {
                if f != 1.0 {
                    c.key_finding(
                        &key,
                        format!("is {f}: linear RoPE scaling is not supported"),
                    );
                }
            }
        };
        if !scaled {
            unit(self, k(keys::ROPE_SCALING_FACTOR));
        }
        unit(self, k(keys::ROPE_SCALE_LINEAR));
        match self.bool(&k(keys::CAUSAL)) {
            Some(false) if causal => {
                self.key_finding(&k(keys::CAUSAL), "is false: these models attend causally")
            }
            Some(true) if !causal => self.key_finding(
                &k(keys::CAUSAL),
                "is true: a causal draft block is not supported (blocks attend bidirectionally)",
            ),
            _ => {}
        }
    }

    /// Keys whose settings change what a model computes in ways the runtime does not
    /// implement: refused when present, with `why`.
    pub fn unsupported_keys(&mut self, keys: &[(&str, &str)]) {
        for (key, why) in keys {
            if let Some(v) = self.get(key) {
                let shown = match v {
                    Value::Array(a) => format!("an ARRAY[{}]", a.elem_type().name()),
                    Value::String(s) => format!("`{}`", s.chars().take(64).collect::<String>()),
                    other => format!("{other:?}"),
                };
                self.key_finding(key, format!("is {shown}: {why}"));
            }
        }
    }

    /// A STRING key.
    pub fn string(&mut self, key: &str, required: bool) -> Option<&'f str> {
        match self.get(key) {
            Some(Value::String(s)) => Some(s),
            Some(v) => {
                self.key_finding(key, format!("is {}, expected STRING", v.type_name()));
                None
            }
            None => {
                if required {
                    self.key_finding(key, "missing");
                }
                None
            }
        }
    }

    /// A BOOL key.
    pub fn bool(&mut self, key: &str) -> Option<bool> {
        match self.get(key) {
            Some(Value::Bool(b)) => Some(*b),
            Some(v) => {
                self.key_finding(key, format!("is {}, expected BOOL", v.type_name()));
                None
            }
            None => None,
        }
    }

    /// An array key of the element type `want` (`ARRAY[INT32]`, …), through `pick`.
    pub fn array<T: ?Sized>(
        &mut self,
        key: &str,
        want: &str,
        required: bool,
        pick: impl Fn(&'f Array) -> Option<&'f T>,
    ) -> Option<&'f T> {
        match self.get(key) {
            Some(Value::Array(a)) => match pick(a) {
                Some(v) => Some(v),
                None => {
                    self.key_finding(
                        key,
                        format!("is ARRAY[{}], expected {want}", a.elem_type().name()),
                    );
                    None
                }
            },
            Some(v) => {
                self.key_finding(key, format!("is {}, expected {want}", v.type_name()));
                None
            }
            None => {
                if required {
                    self.key_finding(key, "missing");
                }
                None
            }
        }
    }

    /// Counts tensor `name` as judged (a finding about it was already made), so
    /// [`Checker::no_other_tensors`] does not report it again.
    pub fn judged(&mut self, name: &'f str) {
        self.used.insert(name);
    }

    /// Whether the file has a tensor of this name.
    pub fn has(&self, name: &str) -> bool {
        self.file.tensor(name).is_ok()
    }

    /// The tensor `name`, required, with `ne` (trailing 1s ignored) and the type its role
    /// allows. Marks it consumed.
    pub fn tensor(&mut self, name: &str, role: Role, ne: &[u64]) -> Option<TensorRef<'f>> {
        let Ok(t) = self.file.tensor(name) else {
            self.findings.push(Finding::tensor(name, "missing"));
            return None;
        };
        self.used.insert(&t.info.name);
        let dims = trimmed(&t.info.dims);
        if dims != trimmed(ne) {
            self.findings.push(Finding::tensor(
                name,
                format!("has ne {dims:?}, expected {:?}", trimmed(ne)),
            ));
            return None;
        }
        let type_ok = match role {
            Role::Vector => matches!(t.info.ty, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16),
            Role::F32Vector => t.info.ty == GgmlType::F32,
            Role::Matrix => self.matrix_types.contains(&t.info.ty),
        };
        if !type_ok {
            let want = match role {
                Role::Vector => "F32, F16 or BF16 (it is read elementwise)".to_string(),
                Role::F32Vector => "F32 (llama.cpp reads it as F32 only)".to_string(),
                Role::Matrix => format!("one of {}", type_list(self.matrix_types)),
            };
            self.findings.push(Finding::tensor(
                name,
                format!("has type {}, expected {want}", t.info.ty),
            ));
            return None;
        }
        // The parser proved dims ≥ 1, the product fits and data is exactly that size.
        let cols = t.info.dims[0] as usize;
        let rows = t.info.dims[1..].iter().product::<u64>() as usize;
        Some(TensorRef {
            name: &t.info.name,
            ty: t.info.ty,
            cols,
            rows,
            data: t.data,
        })
    }

    /// The tensor `name` if the file has it (checked as [`Checker::tensor`]).
    pub fn optional_tensor(&mut self, name: &str, role: Role, ne: &[u64]) -> Option<TensorRef<'f>> {
        if self.has(name) {
            self.tensor(name, role, ne)
        } else {
            None
        }
    }

    /// The dims of tensor `name` (trailing 1s dropped), without consuming it.
    pub fn dims(&self, name: &str) -> Option<Vec<u64>> {
        self.file
            .tensor(name)
            .ok()
            .map(|t| trimmed(&t.info.dims).to_vec())
    }

    /// A finding for every tensor no rule consumed: a file holds what its kind reads,
    /// nothing else.
    pub fn no_other_tensors(&mut self, kind: &str) {
        // A layer the file has is one some tensor of it was taken from (collected once:
        // a file may hold any number of stray tensors).
        let layers: BTreeSet<u64> = self
            .used
            .iter()
            .filter_map(|n| n.strip_prefix("blk.")?.split_once('.')?.0.parse().ok())
            .collect();
        for t in self.file.tensor_infos() {
            if !self.used.contains(t.name.as_str()) {
                let why = match crate::names::tensors::LayerTensor::parse(&t.name) {
                    Some((l, _)) if !layers.contains(&l) => {
                        format!("layer {l} is beyond the file's block_count")
                    }
                    _ => format!("not a tensor of a {kind}"),
                };
                self.findings.push(Finding::tensor(&t.name, why));
            }
        }
    }

    /// The value, or every finding.
    pub fn finish<T>(self, kind: &'static str, value: Option<T>) -> Result<T, ContractError> {
        match value {
            Some(v) if self.findings.is_empty() => Ok(v),
            _ => Err(ContractError {
                kind,
                findings: if self.findings.is_empty() {
                    vec![Finding::file("incomplete")]
                } else {
                    self.findings
                },
            }),
        }
    }
}

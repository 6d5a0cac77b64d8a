//! Building a GGUF header and laying out its data section.
//!
//! Written by hand because no crate writes GGUF as a stream: the converter knows every
//! tensor's type and shape before it has a single quantized byte, so it builds the
//! [`Header`] first, takes the [`Layout`] (where each tensor's bytes go), and then streams
//! the data into place itself. The bytes follow gguf-py's `GGUFWriter` conventions
//! (`docs/GGUF.md` §4): KVs and tensors in insertion order, counts as u64, zero
//! padding after the tensor infos and after every tensor blob, the last one included.

use std::io::{self, Write};

use crate::error::WriteError;
use crate::types::{pad_to, Array, GgmlType, Value};
use crate::{DEFAULT_ALIGNMENT, GGUF_MAGIC, GGUF_VERSION, MAX_DIMS, MAX_NAME_LEN};

/// One tensor's entry in the header: name, dims in ggml order (`ne`, fastest first), type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    /// Tensor name, at most 63 bytes.
    pub name: String,
    /// Dimensions in ggml order (`ne[0]` is the row length), 1 to 4 of them, each ≥ 1.
    pub dims: Vec<u64>,
    /// Storage type.
    pub ty: GgmlType,
}

impl TensorInfo {
    /// Number of elements (the product of the dims).
    pub fn n_elements(&self) -> u64 {
        self.dims.iter().product()
    }

    /// Bytes of the tensor's data (without padding).
    pub fn n_bytes(&self) -> u64 {
        // Checked when the info was pushed into a header or parsed from a file.
        self.ty.bytes_for(self.n_elements()).unwrap_or(0)
    }
}

/// A GGUF header under construction: metadata and tensor infos, in insertion order.
#[derive(Clone, Debug, Default)]
pub struct Header {
    kvs: Vec<(String, Value)>,
    tensors: Vec<TensorInfo>,
}

/// Where everything goes in the file a [`Header`] describes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Alignment of the data section and of every tensor blob.
    pub alignment: u64,
    /// Absolute offset of the data section.
    pub data_offset: u64,
    /// Per tensor: offset relative to the data section, and data bytes without padding.
    pub tensors: Vec<(u64, u64)>,
    /// Total file size (the data section ends with the last tensor's padding).
    pub file_size: u64,
}

impl Header {
    /// An empty header.
    pub fn new() -> Header {
        Header::default()
    }

    /// The metadata so far.
    pub fn kvs(&self) -> &[(String, Value)] {
        &self.kvs
    }

    /// The tensor infos so far.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// Appends a key/value pair. Refuses empty or duplicate keys, and a
    /// `general.alignment` that is not a non-zero power-of-two `UINT32`.
    pub fn push_kv(&mut self, key: impl Into<String>, value: Value) -> Result<(), WriteError> {
        let key = key.into();
        if key.is_empty() {
            return Err(WriteError::EmptyKey);
        }
        if self.kvs.iter().any(|(k, _)| *k == key) {
            return Err(WriteError::DuplicateKey(key));
        }
        if key == "general.alignment" {
            match value {
                Value::U32(a) if a.is_power_of_two() => {}
                _ => return Err(WriteError::BadAlignment(value.type_name())),
            }
        }
        self.kvs.push((key, value));
        Ok(())
    }

    /// Appends a tensor info, checking what every GGUF reader checks: name length and
    /// uniqueness, 1 to 4 dims each ≥ 1, row length a multiple of the block size, and a
    /// byte size that fits in u64.
    pub fn push_tensor(&mut self, info: TensorInfo) -> Result<(), WriteError> {
        let bad = |why: String| WriteError::BadTensor {
            tensor: info.name.clone(),
            why,
        };
        if info.name.is_empty() || info.name.len() > MAX_NAME_LEN {
            return Err(bad(format!(
                "name must be 1 to {MAX_NAME_LEN} bytes, is {}",
                info.name.len()
            )));
        }
        if self.tensors.iter().any(|t| t.name == info.name) {
            return Err(WriteError::DuplicateTensor(info.name));
        }
        if info.dims.is_empty() || info.dims.len() > MAX_DIMS {
            return Err(bad(format!(
                "has {} dims, must have 1 to {MAX_DIMS}",
                info.dims.len()
            )));
        }
        if info.dims.contains(&0) {
            return Err(bad(format!("has a zero dim in {:?}", info.dims)));
        }
        let n = info
            .dims
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d))
            .ok_or_else(|| bad("element count overflows u64".into()))?;
        if !info.dims[0].is_multiple_of(info.ty.block_size()) {
            return Err(bad(format!(
                "row length {} is not a multiple of {}'s block size {}",
                info.dims[0],
                info.ty,
                info.ty.block_size()
            )));
        }
        info.ty
            .bytes_for(n)
            .ok_or_else(|| bad("byte size overflows u64".into()))?;
        self.tensors.push(info);
        Ok(())
    }

    /// The alignment in force: `general.alignment` when present, else 32.
    pub fn alignment(&self) -> u64 {
        self.kvs
            .iter()
            .find(|(k, _)| k == "general.alignment")
            .and_then(|(_, v)| v.as_u32())
            .map_or(DEFAULT_ALIGNMENT, u64::from)
    }

    /// Serialized size of the header before the alignment padding.
    fn unpadded_len(&self) -> u64 {
        let mut n = 4 + 4 + 8 + 8;
        for (k, v) in &self.kvs {
            n += 8 + k.len() as u64 + 4 + value_len(v);
        }
        for t in &self.tensors {
            n += 8 + t.name.len() as u64 + 4 + 8 * t.dims.len() as u64 + 4 + 8;
        }
        n
    }

    /// Where the data section and each tensor go.
    pub fn layout(&self) -> Layout {
        let alignment = self.alignment();
        // Sizes were checked in push_tensor; a sum past u64 would need 2^64 bytes of input.
        let data_offset = pad_to(self.unpadded_len(), alignment).expect("header size fits u64");
        let mut offset = 0u64;
        let mut tensors = Vec::with_capacity(self.tensors.len());
        for t in &self.tensors {
            let nbytes = t.n_bytes();
            tensors.push((offset, nbytes));
            offset = pad_to(offset + nbytes, alignment).expect("data size fits u64");
        }
        Layout {
            alignment,
            data_offset,
            tensors,
            file_size: data_offset + offset,
        }
    }

    /// The header bytes, padded with zeros up to the data section.
    pub fn to_bytes(&self) -> Vec<u8> {
        let layout = self.layout();
        let mut out = Vec::with_capacity(layout.data_offset as usize);
        out.extend_from_slice(&GGUF_MAGIC);
        out.extend_from_slice(&GGUF_VERSION.to_le_bytes());
        out.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        out.extend_from_slice(&(self.kvs.len() as u64).to_le_bytes());
        for (k, v) in &self.kvs {
            put_str(&mut out, k);
            out.extend_from_slice(&v.value_type().id().to_le_bytes());
            put_value(&mut out, v);
        }
        for (t, (offset, _)) in self.tensors.iter().zip(&layout.tensors) {
            put_str(&mut out, &t.name);
            out.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
            for d in &t.dims {
                out.extend_from_slice(&d.to_le_bytes());
            }
            out.extend_from_slice(&t.ty.id().to_le_bytes());
            out.extend_from_slice(&offset.to_le_bytes());
        }
        out.resize(layout.data_offset as usize, 0);
        out
    }

    /// Writes a whole file: the header, then each tensor's bytes followed by its padding.
    /// `data[i]` must hold exactly tensor `i`'s bytes. Meant for small files and tests;
    /// the converter streams data into the [`Layout`] itself.
    pub fn write_file<W: Write>(&self, mut w: W, data: &[&[u8]]) -> io::Result<()> {
        let layout = self.layout();
        if data.len() != self.tensors.len() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{} data blobs for {} tensors",
                    data.len(),
                    self.tensors.len()
                ),
            ));
        }
        w.write_all(&self.to_bytes())?;
        for ((t, (_, nbytes)), bytes) in self.tensors.iter().zip(&layout.tensors).zip(data) {
            if bytes.len() as u64 != *nbytes {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "tensor `{}`: {} data bytes given, {} expected",
                        t.name,
                        bytes.len(),
                        nbytes
                    ),
                ));
            }
            w.write_all(bytes)?;
            let pad = pad_to(*nbytes, layout.alignment).expect("checked") - nbytes;
            w.write_all(&vec![0u8; pad as usize])?;
        }
        Ok(())
    }
}

fn value_len(v: &Value) -> u64 {
    match v {
        Value::String(s) => 8 + s.len() as u64,
        Value::Array(a) => {
            4 + 8
                + match a {
                    Array::String(items) => items.iter().map(|s| 8 + s.len() as u64).sum(),
                    a => a.len() as u64 * a.elem_type().fixed_size().unwrap_or(0),
                }
        }
        v => v.value_type().fixed_size().unwrap_or(0),
    }
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn put_value(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::U8(x) => out.push(*x),
        Value::I8(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::U16(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I16(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::U32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::F32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::Bool(x) => out.push(u8::from(*x)),
        Value::String(s) => put_str(out, s),
        Value::U64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::F64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::Array(a) => {
            out.extend_from_slice(&a.elem_type().id().to_le_bytes());
            out.extend_from_slice(&(a.len() as u64).to_le_bytes());
            fn each<T: Copy>(out: &mut Vec<u8>, items: &[T], f: impl Fn(T) -> Value) {
                for &x in items {
                    put_value(out, &f(x));
                }
            }
            match a {
                Array::U8(v) => out.extend_from_slice(v),
                Array::I8(v) => each(out, v, Value::I8),
                Array::U16(v) => each(out, v, Value::U16),
                Array::I16(v) => each(out, v, Value::I16),
                Array::U32(v) => each(out, v, Value::U32),
                Array::I32(v) => each(out, v, Value::I32),
                Array::F32(v) => each(out, v, Value::F32),
                Array::Bool(v) => each(out, v, Value::Bool),
                Array::U64(v) => each(out, v, Value::U64),
                Array::I64(v) => each(out, v, Value::I64),
                Array::F64(v) => each(out, v, Value::F64),
                Array::String(v) => {
                    for s in v {
                        put_str(out, s);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_length_matches_prediction() {
        let mut h = Header::new();
        h.push_kv("general.architecture", Value::String("x".into()))
            .unwrap();
        h.push_kv(
            "a.ids",
            Value::Array(Array::String(vec!["ab".into(), "".into()])),
        )
        .unwrap();
        h.push_kv("a.n", Value::U32(3)).unwrap();
        h.push_tensor(TensorInfo {
            name: "t".into(),
            dims: vec![32, 2],
            ty: GgmlType::Q8_0,
        })
        .unwrap();
        let bytes = h.to_bytes();
        assert_eq!(bytes.len() as u64, h.layout().data_offset);
        assert_eq!(bytes.len() % 32, 0);
        assert!(
            bytes.len() as u64 - h.unpadded_len() < 32,
            "padding is minimal"
        );
        assert_eq!(h.layout().file_size, h.layout().data_offset + 68 + 28);
    }

    #[test]
    fn refuses_bad_tensors_and_keys() {
        let mut h = Header::new();
        assert_eq!(h.push_kv("", Value::U8(1)), Err(WriteError::EmptyKey));
        h.push_kv("k", Value::U8(1)).unwrap();
        assert_eq!(
            h.push_kv("k", Value::U8(1)),
            Err(WriteError::DuplicateKey("k".into()))
        );
        assert!(h.push_kv("general.alignment", Value::U32(24)).is_err());
        let t = |dims: Vec<u64>, ty| TensorInfo {
            name: "w".into(),
            dims,
            ty,
        };
        assert!(h.push_tensor(t(vec![33], GgmlType::Q8_0)).is_err());
        assert!(h.push_tensor(t(vec![0, 4], GgmlType::F32)).is_err());
        assert!(h.push_tensor(t(vec![1; 5], GgmlType::F32)).is_err());
        assert!(h.push_tensor(t(vec![u64::MAX, 2], GgmlType::F32)).is_err());
        h.push_tensor(t(vec![4], GgmlType::F32)).unwrap();
        assert_eq!(
            h.push_tensor(t(vec![4], GgmlType::F32)),
            Err(WriteError::DuplicateTensor("w".into()))
        );
    }
}

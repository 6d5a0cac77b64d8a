//! The strict reader: one gate, [`GgufFile::parse`], then borrowed views.
//!
//! Every count and length is checked against a named cap and against the bytes left
//! before anything is allocated; every product and sum is checked for overflow; the data
//! section must be laid out exactly as ggml's loader expects (dense, aligned, in info
//! order) and end at the end of the file. The checks are those of ggml's
//! `gguf_init_from_file_ptr` (`docs/GGUF.md` §1.6) plus the crash paths it
//! leaves open (zero dims, empty keys, wrongly typed alignment, bool bytes other than 0/1).

use std::collections::{BTreeMap, BTreeSet};

use crate::error::{GgufError, Malformed};
use crate::types::{pad_to, Array, GgmlType, Value, ValueType};
use crate::writer::TensorInfo;
use crate::{DEFAULT_ALIGNMENT, GGUF_MAGIC, MAX_ARRAY_LEN, MAX_DIMS, MAX_NAME_LEN, MAX_STRING_LEN};

/// Smallest possible key/value record: u64 length, a 1-byte key, u32 type, a 1-byte value.
const MIN_KV_BYTES: u64 = 8 + 1 + 4 + 1;
/// Smallest possible tensor info: u64 length, a 1-byte name, u32 n_dims, u32 type, u64 offset.
const MIN_TENSOR_INFO_BYTES: u64 = 8 + 1 + 4 + 4 + 8;

/// Capacity to reserve for `n` declared items. Counts are already bounded by the bytes
/// left, but an item can take more memory than its minimum size on disk (a string's
/// 8-byte length becomes a 24-byte `String`), so large counts grow the vector as items
/// actually parse instead of reserving up front.
fn prealloc(n: u64) -> usize {
    n.min(1024) as usize
}

/// A bounds-checked cursor over the file's bytes. No decoder indexes the slice itself.
struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn left(&self) -> u64 {
        (self.bytes.len() - self.pos) as u64
    }

    fn err(&self, kind: Malformed) -> GgufError {
        GgufError::Malformed {
            at: self.pos as u64,
            kind,
        }
    }

    fn take(&mut self, n: u64, what: &'static str) -> Result<&'a [u8], GgufError> {
        if n > self.left() {
            return Err(self.err(Malformed::UnexpectedEof {
                what,
                need: n,
                left: self.left(),
            }));
        }
        // n <= left, so the range is inside the slice.
        let s = &self.bytes[self.pos..self.pos + n as usize];
        self.pos += n as usize;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], GgufError> {
        let s = self.take(N as u64, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    fn u32(&mut self, what: &'static str) -> Result<u32, GgufError> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    fn u64(&mut self, what: &'static str) -> Result<u64, GgufError> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    fn string(&mut self, what: &'static str) -> Result<String, GgufError> {
        let at = self.pos;
        let len = self.u64(what)?;
        if len > MAX_STRING_LEN || len > self.left() {
            self.pos = at;
            return Err(self.err(Malformed::StringTooLong {
                len,
                limit: MAX_STRING_LEN.min(self.left().saturating_sub(8)),
            }));
        }
        let start = self.pos;
        let raw = self.take(len, what)?;
        String::from_utf8(raw.to_vec()).map_err(|_| GgufError::Malformed {
            at: start as u64,
            kind: Malformed::InvalidUtf8 { what },
        })
    }

    fn scalar(&mut self, ty: ValueType, key: &str) -> Result<Value, GgufError> {
        Ok(match ty {
            ValueType::U8 => Value::U8(self.array::<1>("value")?[0]),
            ValueType::I8 => Value::I8(i8::from_le_bytes(self.array("value")?)),
            ValueType::U16 => Value::U16(u16::from_le_bytes(self.array("value")?)),
            ValueType::I16 => Value::I16(i16::from_le_bytes(self.array("value")?)),
            ValueType::U32 => Value::U32(u32::from_le_bytes(self.array("value")?)),
            ValueType::I32 => Value::I32(i32::from_le_bytes(self.array("value")?)),
            ValueType::F32 => Value::F32(f32::from_le_bytes(self.array("value")?)),
            ValueType::U64 => Value::U64(u64::from_le_bytes(self.array("value")?)),
            ValueType::I64 => Value::I64(i64::from_le_bytes(self.array("value")?)),
            ValueType::F64 => Value::F64(f64::from_le_bytes(self.array("value")?)),
            ValueType::Bool => {
                let at = self.pos;
                match self.array::<1>("value")?[0] {
                    0 => Value::Bool(false),
                    1 => Value::Bool(true),
                    byte => {
                        self.pos = at;
                        return Err(self.err(Malformed::BadBool {
                            key: key.to_string(),
                            byte,
                        }));
                    }
                }
            }
            ValueType::String => Value::String(self.string("string value")?),
            ValueType::Array => unreachable!("arrays are read by Cursor::value"),
        })
    }

    /// A value type id (0–12) for `key`'s value or array elements.
    fn value_type(&mut self, key: &str, what: &'static str) -> Result<ValueType, GgufError> {
        let at = self.pos;
        let id = self.u32(what)?;
        ValueType::from_id(id).ok_or_else(|| GgufError::Malformed {
            at: at as u64,
            kind: Malformed::UnknownValueType {
                key: key.to_string(),
                id,
            },
        })
    }

    fn value(&mut self, ty: ValueType, key: &str) -> Result<Value, GgufError> {
        if ty != ValueType::Array {
            return self.scalar(ty, key);
        }
        let at = self.pos;
        let elem = self.value_type(key, "array element type")?;
        if elem == ValueType::Array {
            return Err(GgufError::Malformed {
                at: at as u64,
                kind: Malformed::NestedArray {
                    key: key.to_string(),
                },
            });
        }
        let count_at = self.pos;
        let count = self.u64("array count")?;
        // Strings need at least their 8-byte length each.
        let min = elem.fixed_size().unwrap_or(8);
        if count > MAX_ARRAY_LEN || count.saturating_mul(min) > self.left() {
            return Err(GgufError::Malformed {
                at: count_at as u64,
                kind: Malformed::ArrayTooLong {
                    key: key.to_string(),
                    count,
                },
            });
        }
        let n = count as usize;
        macro_rules! collect {
            ($variant:ident, $ty:ty) => {{
                let mut v: Vec<$ty> = Vec::with_capacity(prealloc(count));
                for _ in 0..n {
                    match self.scalar(elem, key)? {
                        Value::$variant(x) => v.push(x),
                        _ => unreachable!("scalar returns the requested type"),
                    }
                }
                Array::$variant(v)
            }};
        }
        let array = match elem {
            ValueType::U8 => Array::U8(self.take(count, "array")?.to_vec()),
            ValueType::I8 => collect!(I8, i8),
            ValueType::U16 => collect!(U16, u16),
            ValueType::I16 => collect!(I16, i16),
            ValueType::U32 => collect!(U32, u32),
            ValueType::I32 => collect!(I32, i32),
            ValueType::F32 => collect!(F32, f32),
            ValueType::Bool => collect!(Bool, bool),
            ValueType::String => collect!(String, String),
            ValueType::U64 => collect!(U64, u64),
            ValueType::I64 => collect!(I64, i64),
            ValueType::F64 => collect!(F64, f64),
            ValueType::Array => unreachable!("refused above"),
        };
        Ok(Value::Array(array))
    }
}

/// A tensor of a parsed file: its info, where its data lives, and the data itself.
#[derive(Clone, Copy, Debug)]
pub struct TensorView<'a> {
    /// Name, dims and type.
    pub info: &'a TensorInfo,
    /// Offset of the data relative to the data section.
    pub offset: u64,
    /// The data bytes (without padding); empty for a header-only file.
    pub data: &'a [u8],
}

/// A GGUF file that passed every check; views borrow the caller's bytes.
#[derive(Clone, Debug)]
pub struct GgufFile<'a> {
    version: u32,
    kvs: Vec<(String, Value)>,
    tensors: Vec<TensorInfo>,
    offsets: Vec<u64>,
    alignment: u64,
    data_offset: u64,
    bytes: &'a [u8],
    file_len: u64,
    header_only: bool,
    /// Tensor name → index, for lookups in O(log n).
    by_name: BTreeMap<String, usize>,
}

impl<'a> GgufFile<'a> {
    /// Parses and validates a whole GGUF file held in memory (or mapped by the caller).
    pub fn parse(bytes: &'a [u8]) -> Result<GgufFile<'a>, GgufError> {
        GgufFile::parse_impl(bytes, bytes.len() as u64, false)
    }

    /// Parses and validates the header of a GGUF file of `file_len` bytes from a prefix
    /// holding at least the header: every check [`GgufFile::parse`] makes but reading the
    /// data. Tensor views of the result have empty `data` (a writer uses this to hold the
    /// header it is about to write to the same rules as any file it reads).
    pub fn parse_header(prefix: &'a [u8], file_len: u64) -> Result<GgufFile<'a>, GgufError> {
        GgufFile::parse_impl(prefix, file_len, true)
    }

    /// Whether the tensors' data is absent ([`GgufFile::parse_header`]).
    pub fn is_header_only(&self) -> bool {
        self.header_only
    }

    fn parse_impl(
        bytes: &'a [u8],
        file_len: u64,
        header_only: bool,
    ) -> Result<GgufFile<'a>, GgufError> {
        let mut c = Cursor { bytes, pos: 0 };
        let magic: [u8; 4] = c.array("magic")?;
        if magic != GGUF_MAGIC {
            c.pos = 0;
            return Err(c.err(Malformed::BadMagic(magic)));
        }
        let version = c.u32("version")?;
        if version != 2 && version != 3 {
            c.pos = 4;
            return Err(c.err(Malformed::UnsupportedVersion(version)));
        }
        let n_tensors = c.u64("tensor count")?;
        let n_kvs = c.u64("key/value count")?;
        if n_tensors > c.left() / MIN_TENSOR_INFO_BYTES {
            c.pos = 8;
            return Err(c.err(Malformed::TooManyTensors {
                count: n_tensors,
                left: c.left(),
            }));
        }
        if n_kvs > c.left() / MIN_KV_BYTES {
            c.pos = 16;
            return Err(c.err(Malformed::TooManyKvs {
                count: n_kvs,
                left: c.left(),
            }));
        }

        let mut kvs: Vec<(String, Value)> = Vec::with_capacity(prealloc(n_kvs));
        let mut alignment = DEFAULT_ALIGNMENT;
        let mut seen_keys = BTreeSet::new();
        for _ in 0..n_kvs {
            let key_at = c.pos;
            let key = c.string("key")?;
            let at_key = |kind| GgufError::Malformed {
                at: key_at as u64,
                kind,
            };
            if key.is_empty() {
                return Err(at_key(Malformed::EmptyKey));
            }
            if !seen_keys.insert(key.clone()) {
                return Err(at_key(Malformed::DuplicateKey(key)));
            }
            let ty = c.value_type(&key, "value type")?;
            let value = c.value(ty, &key)?;
            if key == "general.alignment" {
                match value {
                    Value::U32(a) if a.is_power_of_two() => alignment = u64::from(a),
                    ref v => {
                        return Err(at_key(Malformed::BadAlignment(format!(
                            "{} {:?}",
                            v.type_name(),
                            v
                        ))))
                    }
                }
            }
            kvs.push((key, value));
        }

        let mut tensors: Vec<TensorInfo> = Vec::with_capacity(prealloc(n_tensors));
        let mut offsets = Vec::with_capacity(prealloc(n_tensors));
        let mut by_name: BTreeMap<String, usize> = BTreeMap::new();
        for _ in 0..n_tensors {
            let name_at = c.pos;
            let name = c.string("tensor name")?;
            let at_name = |kind| GgufError::Malformed {
                at: name_at as u64,
                kind,
            };
            if name.is_empty() || name.len() > MAX_NAME_LEN {
                return Err(at_name(Malformed::BadTensorName(name)));
            }
            if by_name.insert(name.clone(), tensors.len()).is_some() {
                return Err(at_name(Malformed::DuplicateTensor(name)));
            }
            let n_dims = c.u32("n_dims")?;
            if n_dims as usize > MAX_DIMS {
                return Err(at_name(Malformed::TooManyDims {
                    tensor: name,
                    n_dims,
                }));
            }
            let mut dims = Vec::with_capacity(n_dims as usize);
            for dim in 0..n_dims as usize {
                let d = c.u64("tensor dim")?;
                if d == 0 {
                    return Err(at_name(Malformed::ZeroDim { tensor: name, dim }));
                }
                dims.push(d);
            }
            let ty_id = c.u32("tensor type")?;
            let Some(ty) = GgmlType::from_id(ty_id) else {
                return Err(at_name(Malformed::UnknownGgmlType {
                    tensor: name,
                    id: ty_id,
                }));
            };
            // ggml keeps element counts in i64; refuse anything it could not hold.
            let n = dims
                .iter()
                .try_fold(1u64, |acc, &d| acc.checked_mul(d))
                .filter(|&n| n <= i64::MAX as u64);
            let Some(n) = n else {
                return Err(at_name(Malformed::SizeOverflow(name)));
            };
            let ne0 = dims.first().copied().unwrap_or(1);
            if ne0 % ty.block_size() != 0 {
                return Err(at_name(Malformed::RowNotBlockMultiple {
                    tensor: name,
                    ne0,
                    ty: ty.name(),
                    block: ty.block_size(),
                }));
            }
            if ty.bytes_for(n).is_none() {
                return Err(at_name(Malformed::SizeOverflow(name)));
            }
            offsets.push(c.u64("tensor offset")?);
            tensors.push(TensorInfo { name, dims, ty });
        }

        // The data section starts at the next multiple of the alignment.
        let header_end = c.pos as u64;
        let data_offset = pad_to(header_end, alignment).unwrap_or(u64::MAX);
        if data_offset > file_len {
            return Err(c.err(Malformed::UnexpectedEof {
                what: "padding before the data section",
                need: data_offset - header_end,
                left: c.left(),
            }));
        }
        let available = file_len - data_offset;
        let mut expected = 0u64;
        for (t, &offset) in tensors.iter().zip(&offsets) {
            let info_err = |kind| GgufError::Malformed {
                at: data_offset.saturating_add(offset),
                kind,
            };
            if offset != expected {
                return Err(info_err(Malformed::BadOffset {
                    tensor: t.name.clone(),
                    offset,
                    expected,
                }));
            }
            let len = t.n_bytes();
            let end = offset
                .checked_add(len)
                .ok_or_else(|| info_err(Malformed::SizeOverflow(t.name.clone())))?;
            if end > available {
                return Err(info_err(Malformed::TensorOutOfBounds {
                    tensor: t.name.clone(),
                    offset,
                    len,
                    available,
                }));
            }
            expected = pad_to(end, alignment)
                .ok_or_else(|| info_err(Malformed::SizeOverflow(t.name.clone())))?;
        }
        if expected > available {
            // The last tensor's padding is missing.
            return Err(GgufError::Malformed {
                at: file_len,
                kind: Malformed::UnexpectedEof {
                    what: "padding after the last tensor",
                    need: expected - available,
                    left: 0,
                },
            });
        }
        if expected < available {
            return Err(GgufError::Malformed {
                at: data_offset + expected,
                kind: Malformed::TrailingBytes {
                    extra: available - expected,
                },
            });
        }
        Ok(GgufFile {
            by_name,
            version,
            kvs,
            tensors,
            offsets,
            alignment,
            data_offset,
            bytes,
            file_len,
            header_only,
        })
    }

    /// The format version (2 or 3).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// Every key/value pair, in file order.
    pub fn kvs(&self) -> &[(String, Value)] {
        &self.kvs
    }

    /// The value of `key`, if present.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.kvs.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// The alignment in force.
    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// Absolute offset of the data section.
    pub fn data_offset(&self) -> u64 {
        self.data_offset
    }

    /// Size of the whole file.
    pub fn file_size(&self) -> u64 {
        self.file_len
    }

    /// The tensor infos, in file order.
    pub fn tensor_infos(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// Every tensor, in file order.
    pub fn tensors(&self) -> impl ExactSizeIterator<Item = TensorView<'_>> + '_ {
        (0..self.tensors.len()).map(|i| self.view(i))
    }

    /// The tensor called `name`.
    pub fn tensor(&self, name: &str) -> Result<TensorView<'_>, GgufError> {
        self.by_name
            .get(name)
            .map(|&i| self.view(i))
            .ok_or_else(|| GgufError::TensorNotFound(name.to_string()))
    }

    fn view(&self, i: usize) -> TensorView<'_> {
        let info = &self.tensors[i];
        let offset = self.offsets[i];
        // parse() proved data_offset + offset + n_bytes <= bytes.len() (a header-only file
        // holds no data).
        let start = (self.data_offset + offset) as usize;
        let data = if self.header_only {
            &[]
        } else {
            &self.bytes[start..start + info.n_bytes() as usize]
        };
        TensorView { info, offset, data }
    }
}

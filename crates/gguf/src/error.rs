//! Errors: what is wrong with a file, and where.

use thiserror::Error;

/// A GGUF file could not be read.
#[derive(Clone, Debug, PartialEq, Error)]
#[non_exhaustive]
pub enum GgufError {
    /// The bytes are not a valid GGUF file; `at` is the byte offset of the broken field.
    #[error("malformed GGUF at byte {at}: {kind}")]
    Malformed {
        /// Byte offset of the field that broke the rule.
        at: u64,
        /// Which rule, with the names and numbers involved.
        kind: Malformed,
    },
    /// A lookup by name found nothing (a caller's question, never a fault in the file).
    #[error("no tensor named `{0}`")]
    TensorNotFound(String),
}

/// The rule a malformed file broke.
#[derive(Clone, Debug, PartialEq, Error)]
#[non_exhaustive]
pub enum Malformed {
    /// The first four bytes are not `GGUF`.
    #[error("bad magic {0:02x?}, expected \"GGUF\"")]
    BadMagic([u8; 4]),
    /// Version other than 2 or 3 (or a byte-swapped file).
    #[error("unsupported GGUF version {0} (this reader takes little-endian v2 and v3)")]
    UnsupportedVersion(u32),
    /// A field runs past the end of the file.
    #[error("{what} needs {need} bytes but only {left} remain")]
    UnexpectedEof {
        /// The field being read.
        what: &'static str,
        /// Bytes it needs.
        need: u64,
        /// Bytes left in the file.
        left: u64,
    },
    /// More tensors declared than the file could hold.
    #[error("tensor count {count} cannot fit in the {left} bytes left")]
    TooManyTensors {
        /// Declared count.
        count: u64,
        /// Bytes left after the header counts.
        left: u64,
    },
    /// More key/value pairs declared than the file could hold.
    #[error("key/value count {count} cannot fit in the {left} bytes left")]
    TooManyKvs {
        /// Declared count.
        count: u64,
        /// Bytes left after the header counts.
        left: u64,
    },
    /// A string longer than the cap or the bytes left.
    #[error("string of {len} bytes is longer than the limit ({limit}) or the file")]
    StringTooLong {
        /// Declared length.
        len: u64,
        /// The cap in force.
        limit: u64,
    },
    /// A key, tensor name or string value is not UTF-8.
    #[error("{what} is not valid UTF-8")]
    InvalidUtf8 {
        /// What was being read.
        what: &'static str,
    },
    /// A zero-length key.
    #[error("empty metadata key")]
    EmptyKey,
    /// The same key twice.
    #[error("duplicate key `{0}`")]
    DuplicateKey(String),
    /// A value type id outside 0–12.
    #[error("key `{key}`: unknown value type {id}")]
    UnknownValueType {
        /// The key.
        key: String,
        /// The id found.
        id: u32,
    },
    /// An array of arrays (ggml's loader refuses them).
    #[error("key `{key}`: nested arrays are not supported")]
    NestedArray {
        /// The key.
        key: String,
    },
    /// An array with more elements than the cap or the bytes left.
    #[error("key `{key}`: array of {count} elements is longer than the limit or the file")]
    ArrayTooLong {
        /// The key.
        key: String,
        /// Declared count.
        count: u64,
    },
    /// A bool byte other than 0 or 1.
    #[error("key `{key}`: bool byte {byte}, expected 0 or 1")]
    BadBool {
        /// The key.
        key: String,
        /// The byte found.
        byte: u8,
    },
    /// `general.alignment` not a non-zero power-of-two UINT32.
    #[error("general.alignment must be a non-zero power-of-two UINT32, found {0}")]
    BadAlignment(String),
    /// A tensor name longer than 63 bytes or empty.
    #[error("tensor name `{0}` must be 1 to 63 bytes")]
    BadTensorName(String),
    /// The same tensor name twice.
    #[error("duplicate tensor `{0}`")]
    DuplicateTensor(String),
    /// More than four dims.
    #[error("tensor `{tensor}`: {n_dims} dims, at most 4 allowed")]
    TooManyDims {
        /// The tensor.
        tensor: String,
        /// Declared dims.
        n_dims: u32,
    },
    /// A zero dimension.
    #[error("tensor `{tensor}`: dim {dim} is zero")]
    ZeroDim {
        /// The tensor.
        tensor: String,
        /// Which dim.
        dim: usize,
    },
    /// A ggml type id that is removed or unknown.
    #[error("tensor `{tensor}`: unknown ggml type {id}")]
    UnknownGgmlType {
        /// The tensor.
        tensor: String,
        /// The id found.
        id: u32,
    },
    /// Row length not a multiple of the type's block size.
    #[error("tensor `{tensor}`: row length {ne0} is not a multiple of {ty}'s block size {block}")]
    RowNotBlockMultiple {
        /// The tensor.
        tensor: String,
        /// Its `ne[0]`.
        ne0: u64,
        /// Type name.
        ty: &'static str,
        /// The block size.
        block: u64,
    },
    /// Element count or byte size overflows.
    #[error("tensor `{0}`: element count or byte size overflows")]
    SizeOverflow(String),
    /// A tensor offset that is not where the dense, in-order layout puts it.
    #[error("tensor `{tensor}`: offset {offset}, expected {expected} (blobs are dense, aligned and in info order)")]
    BadOffset {
        /// The tensor.
        tensor: String,
        /// Offset found (relative to the data section).
        offset: u64,
        /// Offset the layout requires.
        expected: u64,
    },
    /// Tensor data past the end of the file.
    #[error("tensor `{tensor}`: data at {offset}+{len} ends past the end of the data section ({available} bytes)")]
    TensorOutOfBounds {
        /// The tensor.
        tensor: String,
        /// Offset relative to the data section.
        offset: u64,
        /// Data bytes.
        len: u64,
        /// Bytes in the data section.
        available: u64,
    },
    /// Bytes after the last tensor's padding.
    #[error("{extra} trailing bytes after the data section")]
    TrailingBytes {
        /// How many.
        extra: u64,
    },
}

/// A header could not be built.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum WriteError {
    /// Empty metadata key.
    #[error("empty metadata key")]
    EmptyKey,
    /// The key was already added.
    #[error("duplicate key `{0}`")]
    DuplicateKey(String),
    /// `general.alignment` given with a wrong type or value.
    #[error("general.alignment must be a non-zero power-of-two UINT32, got {0}")]
    BadAlignment(String),
    /// The tensor name was already added.
    #[error("duplicate tensor `{0}`")]
    DuplicateTensor(String),
    /// A tensor info that no reader would accept.
    #[error("tensor `{tensor}`: {why}")]
    BadTensor {
        /// The tensor.
        tensor: String,
        /// What is wrong.
        why: String,
    },
}

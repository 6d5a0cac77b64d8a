//! GGUF v3: the format's type tables, a header builder for streaming writers, and a strict
//! reader over borrowed bytes.
//!
//! # Brief overview
//! - [`Header`] collects metadata ([`Value`]) and [`TensorInfo`]s in order and gives the
//!   header bytes and the [`Layout`] of the data section, so a writer can stream tensor
//!   data into place (the converter does) or write a small file in one go
//!   ([`Header::write_file`]).
//! - [`GgufFile::parse`] is the one gate for reading: it validates every count, length,
//!   type, dim, offset and the file size, then lends [`TensorView`]s that borrow the
//!   caller's bytes. The crate maps no files and has no `unsafe`; callers pass a `&[u8]`
//!   (a `Vec` or a memory map).
//! - [`GgmlType`] and [`ValueType`] are the format's fact tables (ids, block sizes).
//!
//! What `parse` does not judge: tensor values (NaN, Inf) and what the metadata means;
//! those belong to the contract checks in `dspark-contract`.
//!
//! # Example
//! ```
//! use dspark_gguf::{GgmlType, GgufFile, Header, TensorInfo, Value};
//!
//! let mut header = Header::new();
//! header.push_kv("general.architecture", Value::String("dflash-draft".into()))?;
//! header.push_kv("dflash-draft.block_count", Value::U32(5))?;
//! header.push_tensor(TensorInfo { name: "output_norm.weight".into(), dims: vec![4], ty: GgmlType::F32 })?;
//! let data: Vec<u8> = [1.0f32, 2.0, 3.0, 4.0].iter().flat_map(|x| x.to_le_bytes()).collect();
//! let mut file = Vec::new();
//! header.write_file(&mut file, &[&data])?;
//!
//! let gguf = GgufFile::parse(&file)?;
//! assert_eq!(gguf.get("dflash-draft.block_count"), Some(&Value::U32(5)));
//! let t = gguf.tensor("output_norm.weight")?;
//! assert_eq!((t.info.ty, t.data), (GgmlType::F32, &data[..]));
//! assert_eq!(gguf.file_size() % 32, 0);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod error;
mod reader;
mod types;
mod writer;

pub use error::{GgufError, Malformed, WriteError};
pub use reader::{GgufFile, TensorView};
pub use types::{pad_to, Array, GgmlType, Value, ValueType};
pub use writer::{Header, Layout, TensorInfo};

/// The four magic bytes at the start of every GGUF file.
pub const GGUF_MAGIC: [u8; 4] = *b"GGUF";
/// The version this crate writes.
pub const GGUF_VERSION: u32 = 3;
/// Alignment when `general.alignment` is absent (`GGUF_DEFAULT_ALIGNMENT` in `gguf.h`).
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// Most dims a tensor may have (`GGML_MAX_DIMS` in `ggml.h`).
pub const MAX_DIMS: usize = 4;
/// Longest tensor name in bytes (`GGML_MAX_NAME` = 64 in `ggml.h`, less the NUL).
pub const MAX_NAME_LEN: usize = 63;
/// Longest string (`GGUF_MAX_STRING_LENGTH` = 2^30 in ggml `gguf.cpp`).
pub const MAX_STRING_LEN: u64 = 1 << 30;
/// Most array elements (`GGUF_MAX_ARRAY_ELEMENTS` = 2^30 in ggml `gguf.cpp`).
pub const MAX_ARRAY_LEN: u64 = 1 << 30;

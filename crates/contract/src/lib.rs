//! What each model file kind must contain, checked in one place: key names and types, the
//! expected tensor set with shapes derived from the geometry, hyper-parameter bounds, and
//! cross-checks. Every tool reads these tables: `convert` writes by them, `verify` and
//! `inspect` judge by them, and the runtime loaders accept only the proof values the
//! checks return, so no loader reads an unchecked file.
//!
//! # Brief overview
//! - [`dflash_draft::check`]: the generic `dflash-draft` drafter → a [`DraftFile`].
//! - [`llama_dflash::check`]: llama.cpp's `dflash` drafter → the same [`DraftFile`].
//! - [`drafter`]: either drafter layout, chosen by `general.architecture`.
//! - [`qwen3::check`]: llama.cpp's `qwen3` target → a [`Qwen3File`].
//! - [`llama::check`]: llama.cpp's `llama` target → a [`LlamaFile`].
//! - [`kimi_k3::check`]: llama.cpp's `kimi-k3` target → a [`KimiK3File`].
//! - [`check`]: any model file → a [`ModelFile`] (a drafter, or a [`TargetFile`] of any
//!   architecture in [`TARGETS`]), whose [`Summary`] `inspect` and `verify` print;
//!   [`check_target`]: any target; [`TargetContract`]: what every target tells.
//! - [`fit::check`]: a drafter against its target's [`TargetShape`].
//! - [`identify`]: which kind a file says it is.
//! - [`tokenizer`]: the `tokenizer.ggml.*` keys of any GGUF → a [`GgufVocab`] (targets
//!   check theirs as part of their contract); [`vocab_file`] also parses llama.cpp's
//!   vocabulary-only files.
//! - [`names`]: every key and tensor name; [`bounds`]: every limit, with its reason.
//! - [`ContractError`]: all the [`Finding`]s, each naming its key or tensor.
//!
//! A check collects every finding it can (so `verify` lists them all) and returns the
//! proof value only when there are none. Proof values have no public constructor.
//!
//! # Example
//! ```
//! use dspark_contract::{qwen3, names};
//! use dspark_gguf::{GgmlType, GgufFile, Header, Value};
//!
//! let mut h = Header::new();
//! h.push_kv(names::ARCHITECTURE, Value::String("qwen3".into()))?;
//! h.push_kv("qwen3.block_count", Value::U32(u32::MAX))?;
//! let mut bytes = Vec::new();
//! h.write_file(&mut bytes, &[])?;
//! let file = GgufFile::parse(&bytes)?;
//! let err = qwen3::check(&file, &[GgmlType::F32]).unwrap_err();
//! assert!(err.findings.iter().any(|f| f.to_string()
//!     == "key `qwen3.block_count`: is 4294967295, expected 1..=1024"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod bounds;
mod check;
pub mod dflash_draft;
mod finding;
pub mod fit;
pub mod kimi_k3;
mod layer;
pub mod llama;
pub mod llama_dflash;
mod model;
pub mod names;
pub mod qwen3;
mod vocab;

pub use check::TensorRef;
pub use dflash_draft::DraftFile;
pub use finding::{ContractError, Finding, Subject};
pub use fit::TargetShape;
pub use kimi_k3::KimiK3File;
pub use layer::LayerRefs;
pub use llama::LlamaFile;
pub use model::{
    check, check_target, identify, kind_of, known_architectures, DrafterSummary, FileKind,
    ModelFile, Summary, TargetContract, TargetFile, TargetKind, TargetSummary, TokenizerSummary,
    TARGETS,
};
pub use qwen3::Qwen3File;
pub use vocab::{
    byte_char, byte_token_value, char_byte, tokenizer, vocab_file, GgufVocab, SpecialIds,
    SpecialTokens, MAX_TOKEN_BYTES, TOKEN_TYPES, TOKEN_TYPE_BYTE, TOKEN_TYPE_CONTROL,
    TOKEN_TYPE_NORMAL, TOKEN_TYPE_UNDEFINED, TOKEN_TYPE_UNKNOWN, TOKEN_TYPE_UNUSED,
    TOKEN_TYPE_USER_DEFINED,
};

use dspark_gguf::GgufFile;

/// Checks a drafter in either layout (`dflash-draft` or llama.cpp's `dflash`), chosen by
/// its `general.architecture`; any other architecture is judged as a `dflash-draft`.
pub fn drafter<'f>(
    file: &'f GgufFile<'f>,
    matrix_types: &[dspark_gguf::GgmlType],
) -> Result<DraftFile<'f>, ContractError> {
    match identify(file) {
        FileKind::LlamaDflash => llama_dflash::check(file, matrix_types),
        _ => dflash_draft::check(file, matrix_types),
    }
}

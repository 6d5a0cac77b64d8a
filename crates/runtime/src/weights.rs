//! Weights a model owns: the file's bytes behind an `Arc` (a memory map or a buffer,
//! shared by every session), and where each checked tensor lies in them.

use std::sync::Arc;

use dspark_contract::TensorRef;
use dspark_gguf::GgmlType;
use dspark_quant::gemm::{Matrix, Packed};

use crate::error::{Result, RuntimeError};

/// A model file's bytes, shared: a memory map, or a buffer.
pub type ModelBytes = Arc<dyn AsRef<[u8]> + Send + Sync>;

/// Where a checked matrix lies in its model's bytes, and its packed tiles when this CPU's
/// kernel reads them ([`Packed`]: the same results, faster; as many bytes again).
#[derive(Clone, Debug)]
pub(crate) struct WeightRef {
    ty: GgmlType,
    pub rows: usize,
    pub cols: usize,
    offset: usize,
    len: usize,
    packed: Option<Arc<Packed>>,
}

impl WeightRef {
    /// Locates `t` in `bytes`. The contract checked `t` in a file parsed from `bytes`; a
    /// tensor that does not lie inside them (a proof from another file) is an error.
    /// With `pack`, the matrix also gets packed tiles when this CPU's kernel reads them
    /// (see [`packs`]).
    pub fn locate(bytes: &[u8], t: &TensorRef<'_>, pack: bool) -> Result<WeightRef> {
        let base = bytes.as_ptr() as usize;
        let at = (t.data.as_ptr() as usize).checked_sub(base);
        let inside = at.filter(|&o| {
            o.checked_add(t.data.len())
                .is_some_and(|e| e <= bytes.len())
        });
        let Some(offset) = inside else {
            return Err(RuntimeError::tensor(
                t.name,
                "was checked in another file than the one being loaded",
            ));
        };
        let Some(m) = Matrix::new(t.ty, t.rows, t.cols, t.data) else {
            return Err(RuntimeError::tensor(
                t.name,
                format!("type {} has no kernel", t.ty),
            ));
        };
        check_finite(t.name, &m)?;
        let packed = if pack {
            Packed::of(&m)
                .map_err(|_| {
                    RuntimeError::tensor(
                        t.name,
                        format!(
                            "cannot allocate {} bytes for its packed copy (DSPARK_PACK=0 runs from the file's layout)",
                            t.data.len()
                        ),
                    )
                })?
                .map(Arc::new)
        } else {
            None
        };
        Ok(WeightRef {
            ty: t.ty,
            rows: t.rows,
            cols: t.cols,
            offset,
            len: t.data.len(),
            packed,
        })
    }

    /// The matrix, viewed in its model's bytes (with its packed tiles, if any).
    #[inline]
    pub fn matrix<'b>(&'b self, bytes: &'b [u8]) -> Matrix<'b> {
        let m = Matrix::new(
            self.ty,
            self.rows,
            self.cols,
            &bytes[self.offset..self.offset + self.len],
        )
        .expect("located and checked at load");
        match &self.packed {
            Some(p) => m.with_packed(p),
            None => m,
        }
    }

    /// Bytes of the tensor.
    pub fn bytes(&self) -> u64 {
        self.len as u64
    }
}

/// Rows `tokens` of an embedding matrix of `vocab` rows into `out` (`tokens.len()` rows);
/// a token outside the vocabulary is an error that writes nothing.
///
/// # Panics
/// If `out` is not `tokens.len()` rows of the matrix's width.
pub(crate) fn embed_rows(
    m: &Matrix<'_>,
    vocab: usize,
    tokens: &[u32],
    out: &mut [f32],
) -> Result<()> {
    assert_eq!(out.len(), tokens.len() * m.cols, "embed output size");
    if let Some(&t) = tokens.iter().find(|&&t| t as usize >= vocab) {
        return Err(RuntimeError::Request(format!(
            "token {t} is outside the target's vocabulary of {vocab}"
        )));
    }
    for (&t, o) in tokens.iter().zip(out.chunks_exact_mut(m.cols)) {
        m.row_f32(t as usize, o);
    }
    Ok(())
}

/// Model files up to this size get packed tiles by default: where they pay. A small model
/// is compute-bound, and packed tiles cut a Q8_0 product's instructions by half or more
/// (the 7 MB trained target decodes 1.6x faster); a large one is bound by memory bandwidth,
/// where they gain nothing measurable (decode and verify of the 477 MB widened pair and
/// the synthetic Qwen3-0.6B, `docs/PERFORMANCE.md`) and would hold its matrices twice (the
/// packed copy beside the file's pages).
pub const PACK_LIMIT: u64 = 256 << 20;

/// Whether a model file of `file_bytes` gets packed tiles: `DSPARK_PACK=1` always, `=0`
/// never, otherwise when the file is at most [`PACK_LIMIT`].
pub(crate) fn packs(file_bytes: u64) -> bool {
    match std::env::var("DSPARK_PACK").as_deref() {
        Ok("0") => false,
        Ok("1") => true,
        _ => file_bytes <= PACK_LIMIT,
    }
}

/// Refuses a matrix holding NaN or infinity, naming the tensor and the first such value
/// (a model that computes with them only ever produces token 0).
fn check_finite(name: &str, m: &Matrix<'_>) -> Result<()> {
    use rayon::prelude::*;
    let f = m.format();
    let rows_per_chunk = (1 << 20) / m.row_bytes().max(1) + 1;
    let first = m
        .data
        .par_chunks(rows_per_chunk * m.row_bytes())
        .enumerate()
        .find_map_first(|(i, chunk)| {
            (f.first_non_finite)(chunk).map(|j| i * rows_per_chunk * m.cols + j)
        });
    match first {
        Some(at) => Err(RuntimeError::tensor(
            name,
            format!("value {at} is not finite"),
        )),
        None => Ok(()),
    }
}

/// The values of a checked F32 vector (norm weights, the confidence head), refused when
/// one is not finite.
pub(crate) fn vector(t: &TensorRef<'_>) -> Result<Vec<f32>> {
    let v = t.f32_values();
    match v.iter().position(|x| !x.is_finite()) {
        Some(i) => Err(RuntimeError::tensor(
            t.name,
            format!("value {i} is not finite"),
        )),
        None => Ok(v),
    }
}

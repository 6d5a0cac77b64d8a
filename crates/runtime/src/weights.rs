//! Weights a model owns: the file's bytes behind an `Arc` (a memory map or a buffer,
//! shared by every session), and where each checked tensor lies in them.

use std::sync::Arc;

use dspark_contract::TensorRef;
use dspark_gguf::GgmlType;
use dspark_quant::gemm::Matrix;

use crate::error::{Result, RuntimeError};

/// A model file's bytes, shared: a memory map, or a buffer.
pub type ModelBytes = Arc<dyn AsRef<[u8]> + Send + Sync>;

/// Where a checked matrix lies in its model's bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct WeightRef {
    ty: GgmlType,
    pub rows: usize,
    pub cols: usize,
    offset: usize,
    len: usize,
}

impl WeightRef {
    /// Locates `t` in `bytes`. The contract checked `t` in a file parsed from `bytes`; a
    /// tensor that does not lie inside them (a proof from another file) is an error.
    pub fn locate(bytes: &[u8], t: &TensorRef<'_>) -> Result<WeightRef> {
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
        Ok(WeightRef {
            ty: t.ty,
            rows: t.rows,
            cols: t.cols,
            offset,
            len: t.data.len(),
        })
    }

    /// The matrix, viewed in its model's bytes.
    #[inline]
    pub fn matrix<'b>(&self, bytes: &'b [u8]) -> Matrix<'b> {
        Matrix::new(
            self.ty,
            self.rows,
            self.cols,
            &bytes[self.offset..self.offset + self.len],
        )
        .expect("located and checked at load")
    }

    /// Bytes of the tensor.
    pub fn bytes(&self) -> u64 {
        self.len as u64
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

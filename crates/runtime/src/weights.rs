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
        if Matrix::new(t.ty, t.rows, t.cols, t.data).is_none() {
            return Err(RuntimeError::tensor(
                t.name,
                format!("type {} has no kernel", t.ty),
            ));
        }
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

/// The values of a checked F32 vector (norm weights, the confidence head).
pub(crate) fn vector(t: &TensorRef<'_>) -> Vec<f32> {
    t.f32_values()
}

//! Tensors of a parsed GGUF as typed views, looked up by name with their shape checked.

use dspark_gguf::{GgmlType, GgufFile, TensorView, Value};
use dspark_quant::gemm::{Matrix, WeightType};

use crate::error::{Result, RuntimeError};

/// Named access to a model file's tensors and keys.
pub struct Weights<'a> {
    file: &'a GgufFile<'a>,
}

impl<'a> Weights<'a> {
    /// Wraps a parsed file.
    pub fn new(file: &'a GgufFile<'a>) -> Weights<'a> {
        Weights { file }
    }

    /// A UINT32 key, required.
    pub fn u32(&self, key: &str) -> Result<u32> {
        match self.file.get(key) {
            Some(Value::U32(v)) => Ok(*v),
            Some(v) => Err(RuntimeError::Key {
                key: key.into(),
                msg: format!("is {}, expected UINT32", v.type_name()),
            }),
            None => Err(RuntimeError::Key {
                key: key.into(),
                msg: "missing".into(),
            }),
        }
    }

    /// A FLOAT32 key, or `default` when absent.
    pub fn f32_or(&self, key: &str, default: f32) -> Result<f32> {
        match self.file.get(key) {
            Some(Value::F32(v)) => Ok(*v),
            Some(v) => Err(RuntimeError::Key {
                key: key.into(),
                msg: format!("is {}, expected FLOAT32", v.type_name()),
            }),
            None => Ok(default),
        }
    }

    /// Whether a tensor exists.
    pub fn has(&self, name: &str) -> bool {
        self.file.tensor(name).is_ok()
    }

    /// A tensor by name; an error naming it when absent.
    pub fn tensor(&self, name: &str) -> Result<TensorView<'a>> {
        self.file.tensor(name).map_err(|_| RuntimeError::Tensor {
            tensor: name.into(),
            msg: "missing".into(),
        })
    }

    /// A matrix with `rows` outputs and `cols` inputs (ggml `ne = [cols, rows]`).
    pub fn matrix(&self, name: &str, rows: usize, cols: usize) -> Result<Matrix<'a>> {
        let t = self.tensor(name)?;
        let ty = match t.info.ty {
            GgmlType::F32 => WeightType::F32,
            GgmlType::F16 => WeightType::F16,
            GgmlType::BF16 => WeightType::BF16,
            GgmlType::Q8_0 => WeightType::Q8_0,
            other => {
                return Err(RuntimeError::Tensor {
                    tensor: name.into(),
                    msg: format!("type {other} is not supported (F32, F16, BF16, Q8_0)"),
                })
            }
        };
        let dims = trimmed(&t.info.dims);
        if dims != [cols as u64, rows as u64] {
            return Err(RuntimeError::Tensor {
                tensor: name.into(),
                msg: format!("ne {dims:?}, expected [{cols}, {rows}]"),
            });
        }
        Matrix::new(ty, rows, cols, t.data).ok_or_else(|| RuntimeError::Tensor {
            tensor: name.into(),
            msg: "data size does not match its shape".into(),
        })
    }

    /// An F32 vector of `len` values (norm weights).
    pub fn vector(&self, name: &str, len: usize) -> Result<Vec<f32>> {
        let t = self.tensor(name)?;
        if t.info.ty != GgmlType::F32 || trimmed(&t.info.dims) != [len as u64] {
            return Err(RuntimeError::Tensor {
                tensor: name.into(),
                msg: format!("{} {:?}, expected F32 [{len}]", t.info.ty, t.info.dims),
            });
        }
        Ok(t.data
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect())
    }
}

fn trimmed(dims: &[u64]) -> Vec<u64> {
    let mut d = dims.to_vec();
    while d.len() > 1 && d.last() == Some(&1) {
        d.pop();
    }
    d
}

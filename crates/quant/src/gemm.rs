//! Weight matrix × activation columns: `y[c] = W · x[c]` for 1 to a few columns (decode,
//! draft block, verify block), with W in F32, F16, BF16 or Q8_0 rows as stored in a GGUF.
//!
//! **Numerics contract.** Every output element `y[c][r]` is computed by one call of the
//! row kernel on row `r` and column `c`, whatever the number of columns and however the
//! rows are split across threads. So a batched forward (verify B positions at once) gives
//! the same bits per column as B single-column calls — the property speculative decoding
//! needs to be lossless against target-only decoding with the same code.
//!
//! Q8_0 weights multiply Q8_0 activations (each column is quantized once with
//! [`crate::q8_0::quantize_ref`], as ggml does for its CPU matmul): per block an exact
//! integer dot, scaled by `d_w · d_x`. Plain weights multiply f32 activations. The AVX2 row
//! kernel (in `gemm/x86_64.rs`) sums in a different order than the scalar reference here,
//! so they agree within [`DOT_TOLERANCE`] of `Σ|w·x|`, not bit for bit. It processes a few
//! columns per pass over a row, with per-column work identical to a single column's.

use half::{bf16, f16};
use rayon::prelude::*;

use crate::q8_0::{quantize_ref, BLOCK_BYTES, QK8_0};

/// Relative tolerance between a fast dot product and its scalar reference, as a fraction
/// of `Σ |w_k · x_k|` (f32 accumulation over up to ~10^5 terms in different orders).
pub const DOT_TOLERANCE: f32 = 1e-5;

/// Rows handed to one task when splitting across threads.
const ROWS_PER_TASK: usize = 16;

/// Storage type of a weight matrix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WeightType {
    /// f32 little-endian.
    F32,
    /// IEEE binary16.
    F16,
    /// bfloat16.
    BF16,
    /// Q8_0 blocks of 32.
    Q8_0,
}

impl WeightType {
    /// Bytes of one row of `cols` values (`cols` a multiple of 32 for Q8_0).
    pub fn row_bytes(self, cols: usize) -> usize {
        match self {
            WeightType::F32 => cols * 4,
            WeightType::F16 | WeightType::BF16 => cols * 2,
            WeightType::Q8_0 => cols / QK8_0 * BLOCK_BYTES,
        }
    }
}

/// A row-major weight matrix: `rows` rows of `cols` values (GGUF `ne = [cols, rows]`).
#[derive(Clone, Copy, Debug)]
pub struct Matrix<'a> {
    /// Storage type.
    pub ty: WeightType,
    /// Output size.
    pub rows: usize,
    /// Input size (a multiple of 32 for Q8_0).
    pub cols: usize,
    /// `rows × row_bytes(cols)` bytes.
    pub data: &'a [u8],
}

impl<'a> Matrix<'a> {
    /// Checks the sizes; `None` if `data` does not hold exactly `rows` rows of `cols`.
    pub fn new(ty: WeightType, rows: usize, cols: usize, data: &'a [u8]) -> Option<Matrix<'a>> {
        let whole_blocks = ty != WeightType::Q8_0 || cols.is_multiple_of(QK8_0);
        (whole_blocks && data.len() == rows.checked_mul(ty.row_bytes(cols))?).then_some(Matrix {
            ty,
            rows,
            cols,
            data,
        })
    }

    fn row(&self, r: usize) -> &'a [u8] {
        let n = self.ty.row_bytes(self.cols);
        &self.data[r * n..(r + 1) * n]
    }
}

impl Matrix<'_> {
    /// Row `r` as f32 (an embedding lookup).
    ///
    /// # Panics
    /// If `r` is out of range or `out.len() != cols`.
    pub fn row_f32(&self, r: usize, out: &mut [f32]) {
        assert!(r < self.rows && out.len() == self.cols, "row_f32 bounds");
        let row = self.row(r);
        match self.ty {
            WeightType::F32 => crate::float::decode(crate::SourceDtype::F32, row, out),
            WeightType::F16 => crate::float::decode(crate::SourceDtype::F16, row, out),
            WeightType::BF16 => crate::float::decode(crate::SourceDtype::BF16, row, out),
            WeightType::Q8_0 => crate::q8_0::dequantize_ref(row, out),
        }
    }
}

/// One row · n columns: `(type, row, x: n columns of cols f32, xq: their Q8_0 blocks
/// (Q8_0 rows only), cols, out: n results)`.
pub type RowKernel = fn(WeightType, &[u8], &[f32], &[u8], usize, &mut [f32]);

/// The scalar row kernel: [`dot_ref`] for each column.
pub fn row_ref(ty: WeightType, row: &[u8], x: &[f32], xq: &[u8], cols: usize, out: &mut [f32]) {
    let qbytes = row.len();
    for (c, o) in out.iter_mut().enumerate() {
        let xqc = if ty == WeightType::Q8_0 {
            &xq[c * qbytes..(c + 1) * qbytes]
        } else {
            &[][..]
        };
        *o = dot_ref(ty, row, &x[c * cols..(c + 1) * cols], xqc);
    }
}

/// Scalar reference of one row · one column (`xq` is the column's Q8_0 blocks, used for
/// Q8_0 rows; `x` the f32 column, used otherwise).
pub fn dot_ref(ty: WeightType, row: &[u8], x: &[f32], xq: &[u8]) -> f32 {
    match ty {
        WeightType::F32 => row
            .chunks_exact(4)
            .zip(x)
            .map(|(b, &v)| f32::from_le_bytes([b[0], b[1], b[2], b[3]]) * v)
            .sum(),
        WeightType::F16 => row
            .chunks_exact(2)
            .zip(x)
            .map(|(b, &v)| f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32() * v)
            .sum(),
        WeightType::BF16 => row
            .chunks_exact(2)
            .zip(x)
            .map(|(b, &v)| bf16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32() * v)
            .sum(),
        WeightType::Q8_0 => {
            let mut acc = 0.0f32;
            for (wb, xb) in row
                .chunks_exact(BLOCK_BYTES)
                .zip(xq.chunks_exact(BLOCK_BYTES))
            {
                let dw = f16::from_bits(u16::from_le_bytes([wb[0], wb[1]])).to_f32();
                let dx = f16::from_bits(u16::from_le_bytes([xb[0], xb[1]])).to_f32();
                let isum: i32 = wb[2..]
                    .iter()
                    .zip(&xb[2..])
                    .map(|(&a, &b)| i32::from(a as i8) * i32::from(b as i8))
                    .sum();
                acc += dw * dx * isum as f32;
            }
            acc
        }
    }
}

/// `y[c * w.rows + r] = Σ_k W[r][k] · x[c * w.cols + k]` for each of the `x.len() / w.cols`
/// columns, with `kernel` for every element, on the current rayon pool.
///
/// # Panics
/// If `x` is not whole columns or `y` is not `columns × rows`.
pub fn gemm_with(kernel: RowKernel, w: &Matrix<'_>, x: &[f32], y: &mut [f32]) {
    assert!(
        w.cols > 0 && x.len().is_multiple_of(w.cols),
        "x must hold whole columns of {}",
        w.cols
    );
    let n = x.len() / w.cols;
    assert_eq!(y.len(), n * w.rows, "y must hold {n} columns of {}", w.rows);
    // Q8_0 weights take each column as Q8_0 blocks, quantized once here.
    let qbytes = w.ty.row_bytes(w.cols);
    let xq: Vec<u8> = if w.ty == WeightType::Q8_0 {
        let mut q = vec![0u8; n * qbytes];
        for (xc, qc) in x.chunks_exact(w.cols).zip(q.chunks_exact_mut(qbytes)) {
            quantize_ref(xc, qc);
        }
        q
    } else {
        Vec::new()
    };
    // Compute row-major into a scratch (rows × n), so each task owns whole rows, then
    // transpose into the column-major output.
    let mut scratch = vec![0.0f32; w.rows * n];
    scratch
        .par_chunks_mut(ROWS_PER_TASK * n)
        .enumerate()
        .for_each(|(task, out)| {
            let first = task * ROWS_PER_TASK;
            for (i, row_out) in out.chunks_exact_mut(n).enumerate() {
                kernel(w.ty, w.row(first + i), x, &xq, w.cols, row_out);
            }
        });
    for r in 0..w.rows {
        for c in 0..n {
            y[c * w.rows + r] = scratch[r * n + c];
        }
    }
}

/// [`gemm_with`] using the fastest row kernel this CPU has.
pub fn gemm(w: &Matrix<'_>, x: &[f32], y: &mut [f32]) {
    gemm_with(crate::kernels().dot, w, x, y)
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod x86_64;

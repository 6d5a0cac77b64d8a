//! x86-64 row kernels for the plain formats F32 and F16 (AVX2 + FMA + F16C; BF16 has its
//! own order, in `bf16.rs`): one weight load converted once and shared by up to [`GROUP`]
//! columns, each column's instruction sequence the same whatever its group holds. Reached
//! only through the kernel-table rows of `fp32.rs` and `fp16.rs`; the tests hold them to
//! the formats' `dot_ref` ([`crate::plain`]'s order) bit for bit.

// The kernels walk several per-column arrays by one index.
#![allow(clippy::needless_range_loop)]

use std::arch::x86_64::*;

use half::f16;

use crate::columns::Columns;
use crate::matrix::{group_size, Matrix};
use crate::x86_64::hsum;

/// How a plain (one value per element) weight format loads into f32 lanes.
pub(crate) trait PlainLoad {
    /// Bytes per value.
    const WIDTH: usize;
    /// Eight weights from element `k` of `row`, as f32.
    ///
    /// # Safety
    /// The CPU must support AVX2 and F16C, and `row` must hold at least `k + 8` values.
    unsafe fn load8(row: &[u8], k: usize) -> __m256;
    /// Weight `j` of `row`, as f32.
    fn one(row: &[u8], j: usize) -> f32;
}

/// F32 weights.
pub(crate) struct LoadF32;
/// F16 weights.
pub(crate) struct LoadF16;

impl PlainLoad for LoadF32 {
    const WIDTH: usize = 4;
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn load8(row: &[u8], k: usize) -> __m256 {
        // SAFETY: the caller guarantees k + 8 values are in bounds.
        unsafe { _mm256_loadu_ps(row.as_ptr().add(4 * k).cast()) }
    }
    fn one(row: &[u8], j: usize) -> f32 {
        f32::from_le_bytes([row[4 * j], row[4 * j + 1], row[4 * j + 2], row[4 * j + 3]])
    }
}

impl PlainLoad for LoadF16 {
    const WIDTH: usize = 2;
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn load8(row: &[u8], k: usize) -> __m256 {
        // SAFETY: the caller guarantees k + 8 values are in bounds.
        unsafe { _mm256_cvtph_ps(_mm_loadu_si128(row.as_ptr().add(2 * k).cast())) }
    }
    fn one(row: &[u8], j: usize) -> f32 {
        f16::from_bits(u16::from_le_bytes([row[2 * j], row[2 * j + 1]])).to_f32()
    }
}

/// F32 / F16 row · G columns (`x[c]` = column c). Column c's operations do not
/// depend on G.
#[target_feature(enable = "avx2,fma,f16c")]
fn plain_group<L: PlainLoad, const G: usize>(row: &[u8], x: [&[f32]; G], out: &mut [f32]) {
    let cols = x[0].len();
    assert_eq!(row.len(), cols * L::WIDTH);
    let mut acc = [[_mm256_setzero_ps(); 2]; G];
    let mut k = 0;
    while k + 8 <= cols {
        // SAFETY: k + 8 <= cols and the row holds cols values.
        let w = unsafe { L::load8(row, k) };
        let p = (k / 8) % 2;
        for c in 0..G {
            let xc = &x[c][k..k + 8];
            // SAFETY: xc has exactly 8 values.
            let xv = unsafe { _mm256_loadu_ps(xc.as_ptr()) };
            acc[c][p] = _mm256_fmadd_ps(w, xv, acc[c][p]);
        }
        k += 8;
    }
    for c in 0..G {
        let mut s = hsum(_mm256_add_ps(acc[c][0], acc[c][1]));
        for (j, &xv) in x[c].iter().enumerate().skip(k) {
            s += L::one(row, j) * xv;
        }
        out[c] = s;
    }
}

/// A row of F16 values as f32 (exact), eight at a time by F16C.
///
/// # Safety
/// The CPU must support AVX2 and F16C.
#[target_feature(enable = "avx2,f16c")]
pub(crate) unsafe fn decode_f16(row: &[u8], out: &mut [f32]) {
    assert_eq!(row.len(), 2 * out.len(), "decode length");
    let whole = out.len() / 8 * 8;
    let mut k = 0;
    while k < whole {
        // SAFETY: k + 8 <= out.len(), and the row holds 2 bytes per value.
        unsafe {
            let v = LoadF16::load8(row, k);
            _mm256_storeu_ps(out.as_mut_ptr().add(k), v);
        }
        k += 8;
    }
    for (j, o) in out.iter_mut().enumerate().skip(whole) {
        *o = LoadF16::one(row, j);
    }
}

/// Columns sharing one pass over a row.
pub(crate) const GROUP: usize = 4;

/// Plain rows `first..first + out.len() / n` · all n columns, row-major into `out`.
/// Columns go in groups of up to four; each column's result is the same bits whatever its
/// group.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn rows_plain<L: PlainLoad>(
    w: &Matrix<'_>,
    first: usize,
    x: &Columns<'_>,
    out: &mut [f32],
) {
    let n = x.count();
    for (i, row_out) in out.chunks_exact_mut(n).enumerate() {
        let row = w.row(first + i);
        let mut done = 0;
        while done < n {
            let g = group_size(n, done, GROUP);
            let o = &mut row_out[done..done + g];
            let f = |c: usize| x.f32(done + c);
            match g {
                4 => plain_group::<L, 4>(row, [f(0), f(1), f(2), f(3)], o),
                3 => plain_group::<L, 3>(row, [f(0), f(1), f(2)], o),
                2 => plain_group::<L, 2>(row, [f(0), f(1)], o),
                _ => plain_group::<L, 1>(row, [f(0)], o),
            }
            done += g;
        }
    }
}

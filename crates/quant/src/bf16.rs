//! BF16: bfloat16 values, the top half of a binary32 (block length 1, 2 bytes). Decoding
//! is exact; encoding rounds as ggml's `ggml_compute_fp32_to_bf16` (NaN quieted).
//!
//! # Products
//! llama.cpp's AVX-512 BF16 build dots BF16 weights with BF16-rounded activations by
//! `VDPBF16PS`: each f32 lane takes one pair of values, the odd one's product first,
//! `acc = (acc + a₁b₁) + a₀b₀` (products of BF16 values are exact in f32; checked against
//! llama.cpp's products bit for bit). Two orders use it:
//! - a prompt's plain products (two columns or more, rows a multiple of 4, columns of 32:
//!   llamafile's `tinyBLAS`): 16 lanes over runs of 32 values, lane l taking pair l of each
//!   run, reduced as `_mm512_reduce_add_ps` ([`crate::lanes::hsum16`]) — [`dot_tinyblas`],
//!   the format's `dot_ref` and `rows`;
//! - every other product (`ggml_vec_dot_bf16`): two such 16-lane accumulators over runs of
//!   64 (the first 32 values to one, the next 32 to the other), each reduced, the two sums
//!   and the leftover products added in f64 — [`dot_vec`], `vec_rows`.
//!
//! `VDPBF16PS` also treats subnormal inputs and results as zero; these references do not
//! (BF16 weights and activations of a model are normal numbers).

use dspark_gguf::GgmlType;
use half::bf16;

use crate::columns::{Activation, Columns};
use crate::cpu::Detected;
use crate::float::{decode, encode_bf16};
use crate::format::{BlockFormat, FormatKernels, Scale};
use crate::SourceDtype;

/// The BF16 format.
pub struct Bf16;

impl BlockFormat for Bf16 {
    const TYPE: GgmlType = GgmlType::BF16;
    const ACTIVATION: Activation = Activation::Bf16;

    const SCALES: &'static [Scale] = &[];
    const QUANTIZE_REF: Option<crate::format::QuantizeFn> = Some(encode_bf16);

    fn dequantize_ref(q: &[u8], y: &mut [f32]) {
        decode(SourceDtype::BF16, q, y)
    }

    /// llamafile `tinyBLAS`'s order ([`dot_tinyblas`]).
    fn dot_ref(row: &[u8], x: &Columns<'_>, c: usize) -> f32 {
        dot_tinyblas(&weights(row), x.f32(c))
    }

    fn first_non_finite(bytes: &[u8]) -> Option<usize> {
        // bfloat16: all-ones exponent (0x7F80) is infinity or NaN.
        bytes
            .chunks_exact(2)
            .position(|b| u16::from_le_bytes([b[0], b[1]]) & 0x7F80 == 0x7F80)
    }

    fn kernels(cpu: Detected) -> FormatKernels {
        let mut k = FormatKernels::reference::<Bf16>();
        k.tinyblas_cols = TINYBLAS_COLS;
        k.vec_rows =
            Some(|w, first, x, out| crate::format::rows_by_dot(w, first, x, out, vec_dot_ref));
        k.vec_dot_ref = Some(vec_dot_ref);
        #[cfg(target_arch = "x86_64")]
        if cpu.has_avx2() {
            k.rows = |w, first, x, out| {
                // SAFETY: this row is built only from a `Detected` with AVX2.
                unsafe { x86_64::rows::<false>(w, first, x, out) }
            };
            k.vec_rows = Some(|w, first, x, out| {
                // SAFETY: this row is built only from a `Detected` with AVX2.
                unsafe { x86_64::rows::<true>(w, first, x, out) }
            });
        }
        let _ = cpu;
        k
    }
}

/// The column multiple of llamafile's `tinyBLAS` for BF16 (its AVX-512 BF16 build: 32
/// values a register).
const TINYBLAS_COLS: usize = 32;

/// A row's weights as f32 (exact).
fn weights(row: &[u8]) -> Vec<f32> {
    row.chunks_exact(2)
        .map(|b| bf16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32())
        .collect()
}

/// One `VDPBF16PS` step over a run of 32 values: lane l takes pair l, the odd product first.
#[inline]
fn dp_run(acc: &mut [f32; 16], a: &[f32], b: &[f32]) {
    for (l, lane) in acc.iter_mut().enumerate() {
        *lane = (*lane + a[2 * l + 1] * b[2 * l + 1]) + a[2 * l] * b[2 * l];
    }
}

/// The dot product in llamafile `tinyBLAS`'s BF16 order (see the module doc): runs of 32
/// into 16 lanes, [`crate::lanes::hsum16`]; a tail of `len mod 32` values (which tinyBLAS
/// never has) added one by one.
///
/// # Panics
/// If the lengths differ.
pub fn dot_tinyblas(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "dot lengths");
    let whole = a.len() / 32 * 32;
    let mut acc = [0.0f32; 16];
    for (ra, rb) in a[..whole].chunks_exact(32).zip(b[..whole].chunks_exact(32)) {
        dp_run(&mut acc, ra, rb);
    }
    let mut s = crate::lanes::hsum16(acc);
    for (x, y) in a[whole..].iter().zip(&b[whole..]) {
        s += x * y;
    }
    s
}

/// The dot product in `ggml_vec_dot_bf16`'s order (see the module doc).
///
/// # Panics
/// If the lengths differ.
pub fn dot_vec(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "dot lengths");
    let whole = a.len() / 64 * 64;
    let (mut c1, mut c2) = ([0.0f32; 16], [0.0f32; 16]);
    for (ra, rb) in a[..whole].chunks_exact(64).zip(b[..whole].chunks_exact(64)) {
        dp_run(&mut c1, &ra[..32], &rb[..32]);
        dp_run(&mut c2, &ra[32..], &rb[32..]);
    }
    let mut sum = f64::from(crate::lanes::hsum16(c1)) + f64::from(crate::lanes::hsum16(c2));
    for (x, y) in a[whole..].iter().zip(&b[whole..]) {
        sum += f64::from(x * y);
    }
    sum as f32
}

/// [`dot_vec`] of a row and a column.
fn vec_dot_ref(row: &[u8], x: &Columns<'_>, c: usize) -> f32 {
    dot_vec(&weights(row), x.f32(c))
}

#[cfg(target_arch = "x86_64")]
mod x86_64 {
    //! [`super::dot_tinyblas`] and [`super::dot_vec`] on AVX2 (the same bits): each 16-lane
    //! accumulator as two 8-lane halves; a run's pairs split into even and odd values
    //! (a weight word's low half, its high half; the columns split once per call).

    use std::arch::x86_64::*;

    use crate::columns::Columns;
    use crate::matrix::Matrix;
    use crate::x86_64::hsum;

    /// `acc = (acc + odd_w · odd_x) + even_w · even_x` for eight pairs: `w` eight words of
    /// two BF16 values, `xe` / `xo` the column's even and odd values of those pairs.
    #[target_feature(enable = "avx2")]
    #[inline]
    fn dp8(acc: __m256, w: __m256i, xe: __m256, xo: __m256) -> __m256 {
        let we = _mm256_castsi256_ps(_mm256_slli_epi32::<16>(w));
        let wo = _mm256_castsi256_ps(_mm256_and_si256(w, _mm256_set1_epi32(-65536)));
        _mm256_add_ps(
            _mm256_add_ps(acc, _mm256_mul_ps(wo, xo)),
            _mm256_mul_ps(we, xe),
        )
    }

    /// Eight weight words (16 BF16 values) from value `k` of `row`.
    ///
    /// # Safety
    /// The CPU must support AVX2 and the row must hold `k + 16` values.
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn words(row: &[u8], k: usize) -> __m256i {
        // SAFETY: the caller guarantees k + 16 values (32 bytes) are in bounds.
        unsafe { _mm256_loadu_si256(row.as_ptr().add(2 * k).cast()) }
    }

    /// Rows `first..` · every column of `x` into `out` (row-major): `VEC` false in
    /// [`super::dot_tinyblas`]'s order, true in [`super::dot_vec`]'s.
    ///
    /// # Safety
    /// The CPU must support AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn rows<const VEC: bool>(
        w: &Matrix<'_>,
        first: usize,
        x: &Columns<'_>,
        out: &mut [f32],
    ) {
        let (n, cols) = (x.count(), x.len());
        let step = if VEC { 64 } else { 32 };
        let whole = cols / step * step;
        // Each column's even and odd values, once.
        let split: Vec<(Vec<f32>, Vec<f32>)> = (0..n)
            .map(|c| {
                let v = x.f32(c);
                let even = v[..whole].iter().step_by(2).copied().collect();
                let odd = v[..whole].iter().skip(1).step_by(2).copied().collect();
                (even, odd)
            })
            .collect();
        for (i, row_out) in out.chunks_exact_mut(n).enumerate() {
            let row = w.row(first + i);
            for (c, o) in row_out.iter_mut().enumerate() {
                let (xe, xo) = (&split[c].0, &split[c].1);
                // Accumulator halves: [c1 lanes 0..8, c1 lanes 8..16, c2 .., c2 ..].
                let mut acc = [_mm256_setzero_ps(); 4];
                let mut k = 0;
                while k < whole {
                    for (h, a) in acc.iter_mut().enumerate().take(step / 16) {
                        let at = k + 16 * h;
                        // SAFETY: at + 16 <= whole <= cols values of the row; the split
                        // columns hold whole / 2 values, at / 2 + 8 <= whole / 2.
                        unsafe {
                            let wv = words(row, at);
                            let e = _mm256_loadu_ps(xe.as_ptr().add(at / 2));
                            let od = _mm256_loadu_ps(xo.as_ptr().add(at / 2));
                            *a = dp8(*a, wv, e, od);
                        }
                    }
                    k += step;
                }
                let tail = x.f32(c)[whole..]
                    .iter()
                    .enumerate()
                    .map(|(j, &xv)| (super::weight(row, whole + j), xv));
                *o = if VEC {
                    let mut sum = f64::from(hsum(_mm256_add_ps(acc[0], acc[1])))
                        + f64::from(hsum(_mm256_add_ps(acc[2], acc[3])));
                    for (wv, xv) in tail {
                        sum += f64::from(wv * xv);
                    }
                    sum as f32
                } else {
                    let mut s = hsum(_mm256_add_ps(acc[0], acc[1]));
                    for (wv, xv) in tail {
                        s += wv * xv;
                    }
                    s
                };
            }
        }
    }
}

/// Weight `j` of a row, as f32.
#[cfg(target_arch = "x86_64")]
fn weight(row: &[u8], j: usize) -> f32 {
    bf16::from_bits(u16::from_le_bytes([row[2 * j], row[2 * j + 1]])).to_f32()
}

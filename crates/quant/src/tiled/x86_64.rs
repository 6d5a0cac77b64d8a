//! The AVX2 integer sums of the prompt orders ([`super::sums_ref`]'s integers): per run of
//! 32 values `vpmaddubsw(|w|, sign(q, w))` (pairs at most 2 · 127 · 127, exact), then
//! `vpmaddwd` by the runs of sixteen's scales, eight i32 lanes summed at the end; the mins'
//! part as the reference takes it.

use std::arch::x86_64::*;
use std::ops::Range;

use super::{Decoded, Sums, TiledOrder};
use crate::columns::Columns;
use crate::matrix::Matrix;

/// [`sums_avx2`] as a [`Sums`].
pub(crate) struct Avx2Sums;

impl Sums for Avx2Sums {
    #[inline(always)]
    unsafe fn sums(dec: &Decoded, xq: &[i8], bs: &[i16], range: Range<usize>) -> (i32, i32) {
        // SAFETY: the caller's kernel enables AVX2.
        unsafe { sums_avx2(dec, xq, bs, range) }
    }
}

/// [`super::rows_tiled`] with AVX2 sums and FMA float steps.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn rows_tiled_avx2<F: TiledOrder>(
    w: &Matrix<'_>,
    first: usize,
    x: &Columns<'_>,
    out: &mut [f32],
) {
    // SAFETY: the features are this function's.
    unsafe { super::rows_tiled::<F, Avx2Sums>(w, first, x, out) }
}

/// [`super::rows_relaid`] with AVX2 sums and FMA float steps.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn rows_relaid_avx2<F: TiledOrder>(
    w: &Matrix<'_>,
    first: usize,
    x: &Columns<'_>,
    out: &mut [f32],
    chunk: usize,
) {
    // SAFETY: the features are this function's.
    unsafe { super::rows_relaid::<F, Avx2Sums>(w, first, x, out, chunk) }
}

/// [`super::sums_ref`] with AVX2 (the same integers): `range` is whole runs of 32.
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
#[inline]
pub(crate) unsafe fn sums_avx2(
    dec: &Decoded,
    xq: &[i8],
    bs: &[i16],
    range: Range<usize>,
) -> (i32, i32) {
    assert!(
        range.start.is_multiple_of(32) && range.end.is_multiple_of(32) && range.end <= super::QK_K
    );
    assert!(xq.len() >= range.end);
    let mut acc = _mm256_setzero_si256();
    for r in range.start / 32..range.end / 32 {
        // SAFETY: run r lies inside `dec.w` and `xq` (asserted above).
        let (w, x) = unsafe {
            (
                _mm256_loadu_si256(dec.w.as_ptr().add(32 * r).cast()),
                _mm256_loadu_si256(xq.as_ptr().add(32 * r).cast()),
            )
        };
        let pairs = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
        let scales = _mm256_setr_m128i(
            _mm_set1_epi16(dec.sc[2 * r]),
            _mm_set1_epi16(dec.sc[2 * r + 1]),
        );
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, scales));
    }
    let isum = crate::x86_64::hsum_i32(acc);
    let msum = (range.start / 16..range.end / 16).fold(0i32, |a, t| {
        a.wrapping_add(i32::from(dec.min[t]) * i32::from(bs[t]))
    });
    (isum, msum)
}

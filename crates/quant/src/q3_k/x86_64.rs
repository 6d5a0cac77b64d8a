//! The x86-64 Q3_K row kernel ([`rows_avx2`]), reached only through the Q3_K kernel-table
//! row (`q3_k.rs`) and held to [`super::Q3K`]'s `dot_ref` bit for bit by the tests: a row
//! at a time, each super-block's low bits and high-bit offsets unpacked once and shared by
//! up to four columns; per run of 32 `vpmaddubsw(low, q) − vpmaddubsw(4 · (1 − high), q)`
//! in i16, `vpmaddwd` by the sixteen-value scales: ggml's eight lanes
//! (`ggml_vec_dot_q3_K_q8_K`), fused with `d_x · d_w` into eight f32 lanes per column,
//! one horizontal sum at the end.

// The kernels walk several per-column arrays (scales, quants, sums, accumulators) by one
// index.
#![allow(clippy::needless_range_loop)]

use std::arch::x86_64::*;

use half::f16;

use super::BLOCK_BYTES;
use crate::columns::Columns;
use crate::kquant::x86_64::{self as x86k, KColumns};
use crate::kquant::QK_K;
use crate::matrix::Matrix;

/// Bit `b` (0..8) of each byte of `hm` moved to bit 2 (the file's high bits of one
/// register of quants, or the packed high bits of register b of a line).
#[target_feature(enable = "avx2")]
#[inline]
fn high_bit(hm: __m256i, b: usize) -> __m256i {
    let m = _mm256_set1_epi8(4);
    // 16-bit shifts: the bit that lands on bit 2 of each byte comes from the same byte.
    let moved = match b {
        0 => _mm256_slli_epi16::<2>(hm),
        1 => _mm256_slli_epi16::<1>(hm),
        2 => hm,
        3 => _mm256_srli_epi16::<1>(hm),
        4 => _mm256_srli_epi16::<2>(hm),
        5 => _mm256_srli_epi16::<3>(hm),
        6 => _mm256_srli_epi16::<4>(hm),
        _ => _mm256_srli_epi16::<5>(hm),
    };
    _mm256_and_si256(moved, m)
}

/// The sixteen scales of the block at `b` (-32..32) as i16 lanes.
///
/// # Safety
/// The CPU must support AVX2; `b` points to a whole block.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn scales16(b: *const u8) -> __m256i {
    // SAFETY: the caller guarantees a whole block: its 110 bytes are readable.
    let block = unsafe { std::slice::from_raw_parts(b, BLOCK_BYTES) };
    let sc = super::scales(block);
    // SAFETY: `sc` holds 16 bytes.
    _mm256_cvtepi8_epi16(unsafe { _mm_loadu_si128(sc.as_ptr().cast()) })
}

/// A Q3_K row · G columns with AVX2, into `out`.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C; every column covers the row's super-blocks
/// (checked).
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q3k_group<const G: usize>(row: &[u8], x: &KColumns<'_, G>, out: &mut [f32]) {
    let nb = row.len() / BLOCK_BYTES;
    x.check(nb);
    let w = row.as_ptr();
    let m3 = _mm256_set1_epi8(3);
    let four = _mm256_set1_epi8(4);
    let masks = x86k::half_masks();
    let mut acc = [_mm256_setzero_ps(); G];
    for i in 0..nb {
        // SAFETY: (and every "see above" below) i < nb, so the block's 110 bytes are in the row,
        // and every column holds nb blocks (checked above).
        let b = unsafe { w.add(i * BLOCK_BYTES) };
        x86k::prefetch_ahead(b);
        // SAFETY: see above.
        let sc16 = unsafe { scales16(b) };
        // SAFETY: see above (hmask at 0).
        let hm = unsafe { _mm256_loadu_si256(b.cast()) };
        let mut isum = [_mm256_setzero_si256(); G];
        for n in 0..2 {
            // SAFETY: see above (qs at 32).
            let bits = unsafe { _mm256_loadu_si256(b.add(32 + 32 * n).cast()) };
            let sc = x86k::half_scales(sc16, n);
            let low = [
                _mm256_and_si256(bits, m3),
                _mm256_and_si256(_mm256_srli_epi16::<2>(bits), m3),
                _mm256_and_si256(_mm256_srli_epi16::<4>(bits), m3),
                _mm256_and_si256(_mm256_srli_epi16::<6>(bits), m3),
            ];
            for j in 0..4 {
                // 4 where the high bit is clear: the value is `low − 4` there.
                let off = _mm256_andnot_si256(high_bit(hm, 4 * n + j), four);
                let s = _mm256_shuffle_epi8(sc, masks[j]);
                for c in 0..G {
                    // SAFETY: see above.
                    let xv = unsafe {
                        _mm256_loadu_si256(x.q[c].as_ptr().add(i * QK_K + 128 * n + 32 * j).cast())
                    };
                    let p = _mm256_sub_epi16(
                        _mm256_maddubs_epi16(low[j], xv),
                        _mm256_maddubs_epi16(off, xv),
                    );
                    isum[c] = _mm256_add_epi32(isum[c], _mm256_madd_epi16(s, p));
                }
            }
        }
        // SAFETY: see above (d at 108).
        let d = f16::from_bits(unsafe { b.add(108).cast::<u16>().read_unaligned() }).to_f32();
        for c in 0..G {
            let scale = _mm256_set1_ps(x.d[c][i] * d);
            acc[c] = _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(isum[c]), acc[c]);
        }
    }
    for c in 0..G {
        out[c] = crate::x86_64::hsum(acc[c]);
    }
}

/// Q3_K rows `first..first + out.len() / n` · all n columns with AVX2, row-major
/// into `out` ([`x86k::rows_avx2`] with [`q3k_group`]).
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn rows_avx2(w: &Matrix<'_>, first: usize, x: &Columns<'_>, out: &mut [f32]) {
    // SAFETY: the caller guarantees AVX2, FMA and F16C.
    unsafe { x86k::rows_avx2::<Rows>(w, first, x, out) }
}

/// This format's AVX2 row kernel ([`x86k::RowGroup`]).
pub(crate) struct Rows;

impl x86k::RowGroup for Rows {
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn group<const G: usize>(row: &[u8], x: &KColumns<'_, G>, out: &mut [f32]) {
        // SAFETY: the caller guarantees AVX2, FMA and F16C; the kernel checks sizes.
        unsafe { q3k_group::<G>(row, x, out) }
    }
}

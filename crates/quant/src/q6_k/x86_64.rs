//! The AVX2 Q6_K row kernel, in ggml's order ([`super::Q6K`]'s `dot_ref`): per
//! super-block and column, the four runs of 32 of each half assembled from `ql` and `qh`
//! as unsigned bytes (once per row, shared by up to four columns), `vpmaddubsw` with the
//! activation quants, `vpmaddwd` with the sub-blocks' scales, eight i32 lanes summed over
//! the runs; the -32 through the Q8_K sums of sixteen; one fused multiply-add of the lanes
//! per super-block; one horizontal sum per row and column.

// The kernel walks several per-column arrays by one index.
#![allow(clippy::needless_range_loop)]

use std::arch::x86_64::*;

use super::{BLOCK_BYTES, D, QH, SCALES};
use crate::kquant::x86_64::{self as x86k, KColumns};
use crate::kquant::QK_K;
use crate::x86_64::f16_at;

/// One row · G columns.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C; every column covers the row's super-blocks
/// (checked).
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn group<const G: usize>(row: &[u8], x: &KColumns<'_, G>, out: &mut [f32]) {
    let nb = row.len() / BLOCK_BYTES;
    x.check(nb);
    let m15 = _mm256_set1_epi8(15);
    let m3 = _mm256_set1_epi8(3);
    let mut acc = [_mm256_setzero_ps(); G];
    for (i, b) in row.chunks_exact(BLOCK_BYTES).enumerate() {
        let p = b.as_ptr();
        // The matrix is streamed once: ask for the super-block 4 KiB ahead.
        for line in 0..BLOCK_BYTES.div_ceil(64) {
            _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(4096 + 64 * line).cast());
        }
        let sc: [i8; 16] = std::array::from_fn(|t| b[SCALES + t] as i8);
        // The eight runs of 32 unsigned quants, in value order.
        let mut runs = [_mm256_setzero_si256(); 8];
        for n in 0..2 {
            // SAFETY: the block is 210 bytes: ql at 64n.. 64n + 64, qh at QH + 32n.. + 32.
            let (l1, l2, h) = unsafe {
                (
                    _mm256_loadu_si256(p.add(64 * n).cast()),
                    _mm256_loadu_si256(p.add(64 * n + 32).cast()),
                    _mm256_loadu_si256(p.add(QH + 32 * n).cast()),
                )
            };
            let h0 = _mm256_slli_epi16::<4>(_mm256_and_si256(h, m3));
            let h1 = _mm256_slli_epi16::<2>(_mm256_and_si256(h, _mm256_set1_epi8(12)));
            let h2 = _mm256_and_si256(h, _mm256_set1_epi8(48));
            let h3 = _mm256_srli_epi16::<2>(_mm256_and_si256(h, _mm256_set1_epi8(-64)));
            runs[4 * n] = _mm256_or_si256(_mm256_and_si256(l1, m15), h0);
            runs[4 * n + 1] = _mm256_or_si256(_mm256_and_si256(l2, m15), h1);
            runs[4 * n + 2] =
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16::<4>(l1), m15), h2);
            runs[4 * n + 3] =
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16::<4>(l2), m15), h3);
        }
        let scales: [__m256i; 8] = std::array::from_fn(|r| x86k::split_run_scales(&sc, r));
        // SAFETY: the 16 scales are bytes SCALES..SCALES + 16 of the block.
        let sc16 = _mm256_cvtepi8_epi16(unsafe { _mm_loadu_si128(p.add(SCALES).cast()) });
        let dw = f16_at(b, D);
        for c in 0..G {
            let (d, q, s) = (x.d[c], x.q[c], x.bs[c]);
            // SAFETY: super-block i's 256 quants and 16 sums lie inside the column.
            let (qx, bs) = unsafe {
                (
                    q.as_ptr().add(i * QK_K),
                    _mm256_loadu_si256(s.as_ptr().add(16 * i).cast()),
                )
            };
            // SAFETY: super-block i's 256 quants (see above).
            let mut sumi = unsafe { x86k::scaled_run_sums(&runs, &scales, qx) };
            let msum = _mm256_slli_epi32::<5>(_mm256_madd_epi16(bs, sc16));
            sumi = _mm256_sub_epi32(sumi, msum);
            // SAFETY: see above.
            let dx = unsafe { *d.get_unchecked(i) };
            acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(dx * dw), _mm256_cvtepi32_ps(sumi), acc[c]);
        }
    }
    for c in 0..G {
        out[c] = crate::x86_64::hsum(acc[c]);
    }
}

/// This format's AVX2 row kernel ([`x86k::RowGroup`]), run by [`x86k::rows_avx2`]: columns
/// in groups of up to four, a column's bits never depending on its group.
pub(crate) struct Rows;

impl x86k::RowGroup for Rows {
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn group<const G: usize>(row: &[u8], x: &KColumns<'_, G>, out: &mut [f32]) {
        // SAFETY: the caller guarantees AVX2, FMA and F16C; the kernel checks sizes.
        unsafe { group::<G>(row, x, out) }
    }
}

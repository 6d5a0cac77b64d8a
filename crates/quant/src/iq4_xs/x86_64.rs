//! The AVX2 IQ4_XS row kernel, in ggml's order ([`super::Iq4Xs`]'s `dot_ref`): per
//! superblock the eight runs of 32 table values looked up once per row (`vpshufb`), shared
//! by up to four columns; per column the sign trick, `vpmaddubsw`, `vpmaddwd` by the
//! sub-block's scale, eight i32 lanes summed over the runs and fused with `d_w · d_x`; one
//! horizontal sum per row and column.

// The kernel walks several per-column arrays by one index.
#![allow(clippy::needless_range_loop)]

use std::arch::x86_64::*;

use super::{sub_scale, BLOCK_BYTES, KVALUES_IQ4NL};
use crate::columns::Columns;
use crate::matrix::{for_each_group, Matrix};
use crate::superblock::QK_K;
use crate::x86_64::f16_at;

/// Columns sharing one pass over a row.
const GROUP: usize = 4;

/// One row · G columns (`cols[c]`: column c's superblock scales and quants).
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C; every column covers the row's superblocks
/// (checked).
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn group<const G: usize>(row: &[u8], cols: [(&[f32], &[i8]); G], out: &mut [f32]) {
    let nb = row.len() / BLOCK_BYTES;
    for (d, q) in &cols {
        assert!(d.len() >= nb && q.len() >= nb * QK_K);
    }
    // SAFETY: the table is 16 bytes.
    let table = unsafe { _mm_loadu_si128(KVALUES_IQ4NL.as_ptr().cast()) };
    let m4 = _mm_set1_epi8(0x0F);
    let mut acc = [_mm256_setzero_ps(); G];
    for (b, blk) in row.chunks_exact(BLOCK_BYTES).enumerate() {
        let p = blk.as_ptr();
        // The matrix is streamed once: ask for the superblock 4 KiB ahead.
        for line in 0..BLOCK_BYTES.div_ceil(64) {
            _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(4096 + 64 * line).cast());
        }
        let mut runs = [_mm256_setzero_si256(); 8];
        for (ib, run) in runs.iter_mut().enumerate() {
            // SAFETY: sub-block ib's 16 bytes are bytes 8 + 16·ib.. of the 136-byte block.
            let bytes = unsafe { _mm_loadu_si128(p.add(8 + 16 * ib).cast()) };
            let lo = _mm_shuffle_epi8(table, _mm_and_si128(bytes, m4));
            let hi = _mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16::<4>(bytes), m4));
            *run = _mm256_set_m128i(hi, lo);
        }
        let scales: [__m256i; 8] =
            std::array::from_fn(|ib| _mm256_set1_epi16(sub_scale(blk, ib) as i16));
        let dw = f16_at(blk, 0);
        for c in 0..G {
            let (d, q) = cols[c];
            let mut sumi = _mm256_setzero_si256();
            for ib in 0..8 {
                // SAFETY: sub-block ib's 32 quants of superblock b lie inside the column.
                let xv = unsafe { _mm256_loadu_si256(q.as_ptr().add(b * QK_K + 32 * ib).cast()) };
                let w = runs[ib];
                let p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(xv, w));
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p16, scales[ib]));
            }
            acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(dw * d[b]), _mm256_cvtepi32_ps(sumi), acc[c]);
        }
    }
    for c in 0..G {
        out[c] = crate::x86_64::hsum(acc[c]);
    }
}

/// IQ4_XS rows `first..first + out.len() / n` · all n columns, row-major into `out`,
/// columns in groups of up to four; a column's bits never depend on its group.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn rows_lanes_avx2(
    w: &Matrix<'_>,
    first: usize,
    x: &Columns<'_>,
    out: &mut [f32],
) {
    let n = x.count();
    let cols: Vec<(&[f32], &[i8])> = (0..n).map(|c| x.q8(c)).collect();
    for_each_group(out, n, GROUP, |i, done, o| {
        let row = w.row(first + i);
        let c = |k: usize| cols[done + k];
        // SAFETY: the caller guarantees AVX2, FMA and F16C; the kernel checks sizes.
        unsafe {
            match o.len() {
                4 => group::<4>(row, [c(0), c(1), c(2), c(3)], o),
                3 => group::<3>(row, [c(0), c(1), c(2)], o),
                2 => group::<2>(row, [c(0), c(1)], o),
                _ => group::<1>(row, [c(0)], o),
            }
        }
    });
}

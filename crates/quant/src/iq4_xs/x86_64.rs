//! The AVX2 IQ4_XS row kernel, in ggml's order ([`super::Iq4Xs`]'s `dot_ref`): per
//! superblock the eight runs of 32 table values looked up once per row (`vpshufb`), shared
//! by up to four columns; per column the sign trick, `vpmaddubsw`, `vpmaddwd` by the
//! sub-block's scale, eight i32 lanes summed over the runs and fused with `d_w · d_x`; one
//! horizontal sum per row and column.

// The kernel walks several per-column arrays by one index.
#![allow(clippy::needless_range_loop)]

use std::arch::x86_64::*;

use super::{sub_scale, BLOCK_BYTES, KVALUES_IQ4NL};
use crate::kquant::x86_64::{self as x86k, KColumns};
use crate::superblock::QK_K;
use crate::x86_64::f16_at;

/// One row · G columns of `x`.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C; every column covers the row's superblocks
/// (checked).
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn group<const G: usize>(row: &[u8], x: &KColumns<'_, G>, out: &mut [f32]) {
    let nb = row.len() / BLOCK_BYTES;
    x.check(nb);
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
            let (d, q) = (x.d[c], x.q[c]);
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

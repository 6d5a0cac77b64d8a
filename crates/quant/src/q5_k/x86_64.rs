//! The AVX2 Q5_K row kernel, in ggml's order ([`super::Q5K`]'s `dot_ref`): per super-block
//! the eight runs of 32 unsigned 5-bit quants assembled once per row (shared by up to four
//! columns); per column `vpmaddubsw` with the activation quants, `vpmaddwd` with the run's
//! scale, eight i32 lanes summed over the runs and fused with `d_x · d_w`; the min sum from
//! the Q8_K sums of sixteen, fused into a scalar.

// The kernel walks several per-column arrays by one index.
#![allow(clippy::needless_range_loop)]

use std::arch::x86_64::*;

use super::{BLOCK_BYTES, D, DMIN, QH, QS, SCALES};
use crate::kquant::x86_64::{self as x86k, KColumns};
use crate::kquant::{min_sum, scales_mins_k4, QK_K};
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
    let m4 = _mm256_set1_epi8(0xF);
    let one = _mm256_set1_epi8(1);
    let mut acc = [_mm256_setzero_ps(); G];
    let mut summs = [0.0f32; G];
    for (i, b) in row.chunks_exact(BLOCK_BYTES).enumerate() {
        let p = b.as_ptr();
        // The matrix is streamed once: ask for the super-block 4 KiB ahead.
        for line in 0..BLOCK_BYTES.div_ceil(64) {
            _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(4096 + 64 * line).cast());
        }
        let (sc, m) = scales_mins_k4(&b[SCALES..QH]);
        // SAFETY: the block is 176 bytes: qh at QH..QH + 32, qs at QS..QS + 128.
        let hbits = unsafe { _mm256_loadu_si256(p.add(QH).cast()) };
        let mut runs = [_mm256_setzero_si256(); 8];
        for s in 0..8 {
            // SAFETY: see above (32 (s / 2) + 32 <= 128).
            let bytes = unsafe { _mm256_loadu_si256(p.add(QS + 32 * (s / 2)).cast()) };
            let lo = if s % 2 == 0 {
                _mm256_and_si256(bytes, m4)
            } else {
                _mm256_and_si256(_mm256_srli_epi16::<4>(bytes), m4)
            };
            let hi = _mm256_and_si256(_mm256_srl_epi16(hbits, _mm_cvtsi32_si128(s as i32)), one);
            runs[s] = _mm256_or_si256(lo, _mm256_slli_epi16::<4>(hi));
        }
        let scales: [__m256i; 8] = std::array::from_fn(|s| _mm256_set1_epi16(i16::from(sc[s])));
        let (dw, dminw) = (f16_at(b, D), f16_at(b, DMIN));
        for c in 0..G {
            let (d, q, bs) = (x.d[c], x.q[c], x.bs[c]);
            // SAFETY: super-block i's 256 quants lie inside the column.
            let sumi = unsafe { x86k::scaled_run_sums(&runs, &scales, q.as_ptr().add(i * QK_K)) };
            let dx = d[i];
            acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(dx * dw), _mm256_cvtepi32_ps(sumi), acc[c]);
            let msum = min_sum(&m, 2, &bs[16 * i..16 * i + 16]);
            summs[c] = (-(dx * dminw)).mul_add(msum as f32, summs[c]);
        }
    }
    for c in 0..G {
        out[c] = crate::x86_64::hsum(acc[c]) + summs[c];
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

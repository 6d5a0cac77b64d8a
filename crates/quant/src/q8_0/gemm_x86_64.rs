//! x86-64 Q8_0 row kernel, reached only through the Q8_0 kernel-table row (`q8_0.rs`),
//! held to [`super::Q8_0`]'s `dot_ref` bit for bit by the tests.
//!
//! [`rows_q8_0_avx2`] sums as ggml's x86 `vec_dot_q8_0_q8_0` does: per block, `|w|` as
//! unsigned bytes times `x` with w's sign, pairs summed by `vpmaddubsw`, then `vpmaddwd`
//! into eight i32 lanes (lane `l`: values `4l..4l + 4`), converted and fused into eight f32
//! accumulators with the block's scale product; one horizontal sum per row and column at
//! the end. A row is multiplied with up to four columns at once: each weight block is
//! loaded and sign-split once, then each column runs its own accumulators, so one column
//! alone and the same column among others give the same bits.

// The kernel walks several per-column arrays (scales, quants, accumulators) by one index.
#![allow(clippy::needless_range_loop)]

use std::arch::x86_64::*;

use super::{BLOCK_BYTES, QK8_0};
use crate::columns::Columns;
use crate::matrix::{for_each_group, Matrix};
use crate::plain::x86_64::GROUP;
use crate::x86_64::hsum;

/// How far ahead of the Q8_0 kernel's loads the weights are prefetched, in bytes.
const PREFETCH: usize = 4096;

/// Q8_0 row · G columns (`d[c]`, `q[c]`: column c's block scales and quants), in
/// [`super::Q8_0`]'s order.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C; `row` holds whole blocks and every column's
/// scales and quants cover as many blocks (checked).
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q8_group<const G: usize>(row: &[u8], d: [&[f32]; G], q: [&[i8]; G], out: &mut [f32]) {
    let nb = row.len() / BLOCK_BYTES;
    for c in 0..G {
        assert!(d[c].len() >= nb && q[c].len() >= nb * QK8_0);
    }
    let ones = _mm256_set1_epi16(1);
    let w = row.as_ptr();
    let mut acc = [_mm256_setzero_ps(); G];
    for b in 0..nb {
        if b % 2 == 0 {
            // The matrix is streamed once: ask for the bytes PREFETCH ahead (rows of a task
            // are contiguous, so this runs into the next rows).
            let ahead = w.wrapping_add(b * BLOCK_BYTES + PREFETCH);
            _mm_prefetch::<_MM_HINT_T0>(ahead.cast());
        }
        // SAFETY: b < nb, so the block's 34 bytes lie inside `row`.
        let (bits, qw) = unsafe {
            (
                w.add(b * BLOCK_BYTES).cast::<u16>().read_unaligned(),
                _mm256_loadu_si256(w.add(b * BLOCK_BYTES + 2).cast()),
            )
        };
        let dw = crate::x86_64::f16_to_f32(u16::from_le(bits));
        let aw = _mm256_sign_epi8(qw, qw);
        for c in 0..G {
            // SAFETY: each column holds nb scales and nb·32 quants (asserted above).
            let (dx, qx) = unsafe {
                (
                    *d[c].get_unchecked(b),
                    _mm256_loadu_si256(q[c].as_ptr().add(b * QK8_0).cast()),
                )
            };
            let lanes = _mm256_madd_epi16(_mm256_maddubs_epi16(aw, _mm256_sign_epi8(qx, qw)), ones);
            acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(dw * dx), _mm256_cvtepi32_ps(lanes), acc[c]);
        }
    }
    for c in 0..G {
        out[c] = hsum(acc[c]);
    }
}

/// Q8_0 rows `first..first + out.len() / n` · all n columns, row-major into `out`.
/// Columns go in groups of up to four; each column's result is the same bits whatever its
/// group.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn rows_q8_0_avx2(
    w: &Matrix<'_>,
    first: usize,
    x: &Columns<'_>,
    out: &mut [f32],
) {
    let n = x.count();
    let cols: Vec<(&[f32], &[i8])> = (0..n).map(|c| x.q8(c)).collect();
    for_each_group(out, n, GROUP, |i, done, o| {
        let row = w.row(first + i);
        let d = |c: usize| cols[done + c].0;
        let q = |c: usize| cols[done + c].1;
        // SAFETY: the caller guarantees AVX2, FMA and F16C; the kernel checks sizes.
        unsafe {
            match o.len() {
                4 => q8_group::<4>(row, [d(0), d(1), d(2), d(3)], [q(0), q(1), q(2), q(3)], o),
                3 => q8_group::<3>(row, [d(0), d(1), d(2)], [q(0), q(1), q(2)], o),
                2 => q8_group::<2>(row, [d(0), d(1)], [q(0), q(1)], o),
                _ => q8_group::<1>(row, [d(0)], [q(0)], o),
            }
        }
    });
}

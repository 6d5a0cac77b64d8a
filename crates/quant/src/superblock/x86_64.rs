//! The row-kernel skeleton of the ternary superblock formats ([`crate::superblock`]):
//! columns in groups of up to [`GROUP`], each superblock decoded once per group and its
//! eight integer lanes taken for every column of the group ([`Superblock::isums`], the
//! format's part), then ggml's float steps per column on those lanes. Column c's operations
//! do not depend on the group, so one column alone and the same column among others give
//! the same bits.

// The kernels walk several per-column arrays by one index.
#![allow(clippy::needless_range_loop)]

use std::arch::x86_64::*;

use super::QK_K;
use crate::columns::Columns;
use crate::matrix::{group_size, Matrix};

/// Columns sharing one pass over a row.
pub(crate) const GROUP: usize = 8;

/// How far ahead of the kernel's loads the weights are prefetched, in bytes.
const PREFETCH: usize = 2048;

/// A Q8_K activation column's superblock `b`: its quants and sums of sixteen.
#[derive(Clone, Copy)]
pub(crate) struct Q8kBlock {
    /// 256 quants.
    pub q: *const i8,
    /// Sixteen i16 sums, one per run of sixteen quants.
    pub bsums: *const i16,
}

/// A superblock format's part of a row kernel: where its scale is, and the integer sums of
/// one superblock with G columns.
///
/// Implementations are `#[inline(always)]` functions without `#[target_feature]` (Rust
/// forbids the pair), compiled into the skeleton's target-feature functions by inlining;
/// they must not wrap intrinsics in closures, which inherit no target features and would
/// turn every intrinsic inside into a call.
pub(crate) trait Superblock {
    /// Bytes per superblock.
    const BYTES: usize;
    /// The f16 bits of the superblock scale `d_w`.
    ///
    /// # Safety
    /// `block` points at a whole superblock.
    unsafe fn d_bits(block: *const u8) -> u16;
    /// For each column c, the eight i32 lanes of ggml's `vec_dot` for this superblock (as
    /// the format's `dot_ref` defines them: lane l holds the products of the values
    /// `(v mod 32) / 4 == l`, less the format's correction).
    ///
    /// # Safety
    /// The CPU must have the instruction sets of the kernel table that reaches this
    /// implementation (AVX2, FMA and F16C at least); `block` points at a whole superblock
    /// and every column at a whole Q8_K block.
    unsafe fn isums<const G: usize>(block: *const u8, x: [Q8kBlock; G]) -> [__m256i; G];
}

/// One row · G columns (`d[c]`, `q[c]`, `s[c]`: column c's block scales, quants and
/// sums), in ggml's order: per superblock and column, the eight lanes converted and fused
/// into eight f32 accumulators with `d_x · d_w` (`acc_l = fma(lane_l, d, acc_l)`), one
/// [`crate::lanes::hsum8`] per column at the end. Column c's operations do not depend on
/// the group, so one column alone and among others give the same bits.
///
/// # Safety
/// The CPU must support the instruction sets `F` needs (AVX2, FMA and F16C at least);
/// `row` is whole superblocks and every column covers as many (checked).
#[inline(always)]
unsafe fn group<F: Superblock, const G: usize>(
    row: &[u8],
    d: [&[f32]; G],
    q: [&[i8]; G],
    s: [&[i16]; G],
    out: &mut [f32],
) {
    let nb = row.len() / F::BYTES;
    for c in 0..G {
        assert!(d[c].len() >= nb && q[c].len() >= nb * QK_K && s[c].len() >= nb * 16);
    }
    assert!(out.len() >= G);
    let w = row.as_ptr();
    // SAFETY: the caller guarantees AVX2, FMA and F16C.
    let mut acc = unsafe { [_mm256_setzero_ps(); G] };
    for b in 0..nb {
        // The matrix is streamed once (rows of a task are contiguous): ask for the bytes
        // PREFETCH ahead, into the next rows.
        let ahead = w.wrapping_add(b * F::BYTES + PREFETCH);
        for line in 0..F::BYTES.div_ceil(64) {
            // SAFETY: a prefetch never faults; SSE is part of x86-64.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(64 * line).cast()) };
        }
        // SAFETY: b < nb, so the superblock lies in `row` and block b in every column
        // (asserted above); the caller guarantees the CPU features.
        unsafe {
            let blk = w.add(b * F::BYTES);
            let x = std::array::from_fn(|c| Q8kBlock {
                q: q[c].as_ptr().add(b * QK_K),
                bsums: s[c].as_ptr().add(b * 16),
            });
            let v = F::isums::<G>(blk, x);
            let dw = crate::x86_64::f16_to_f32(F::d_bits(blk));
            for c in 0..G {
                let scale = _mm256_set1_ps(d[c][b] * dw);
                acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(v[c]), scale, acc[c]);
            }
        }
    }
    for c in 0..G {
        // SAFETY: the caller guarantees AVX2.
        out[c] = unsafe { crate::x86_64::hsum(acc[c]) };
    }
}

/// Rows `first..first + out.len() / n` · all n columns, row-major into `out`, columns in
/// groups of up to [`GROUP`].
///
/// # Safety
/// The CPU must support the instruction sets `F` needs.
#[inline(always)]
unsafe fn rows<F: Superblock>(w: &Matrix<'_>, first: usize, x: &Columns<'_>, out: &mut [f32]) {
    let n = x.count();
    for (i, row_out) in out.chunks_exact_mut(n).enumerate() {
        let row = w.row(first + i);
        let mut done = 0;
        while done < n {
            let g = group_size(n, done, GROUP);
            let o = &mut row_out[done..done + g];
            let d = |c: usize| x.q8(done + c).0;
            let q = |c: usize| x.q8(done + c).1;
            let s = |c: usize| x.q8_bsums(done + c);
            macro_rules! go {
                ($g:literal) => {
                    group::<F, $g>(
                        row,
                        std::array::from_fn(d),
                        std::array::from_fn(q),
                        std::array::from_fn(s),
                        o,
                    )
                };
            }
            // SAFETY: the caller guarantees the CPU features; `group` checks sizes.
            unsafe {
                match g {
                    8 => go!(8),
                    7 => go!(7),
                    6 => go!(6),
                    5 => go!(5),
                    4 => go!(4),
                    3 => go!(3),
                    2 => go!(2),
                    _ => go!(1),
                }
            }
            done += g;
        }
    }
}

/// [`rows`] compiled for AVX2, FMA and F16C.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C, and `F::isums` must need no more.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn rows_avx2<F: Superblock>(
    w: &Matrix<'_>,
    first: usize,
    x: &Columns<'_>,
    out: &mut [f32],
) {
    // SAFETY: the features are this function's.
    unsafe { rows::<F>(w, first, x, out) }
}

/// [`rows`] compiled for AVX-512 F, VL, BW and VNNI plus AVX2, FMA and F16C.
///
/// # Safety
/// The CPU must support those sets, and `F::isums` must need no more.
#[target_feature(enable = "avx512f,avx512vl,avx512bw,avx512vnni,avx2,fma,f16c")]
pub(crate) unsafe fn rows_avx512<F: Superblock>(
    w: &Matrix<'_>,
    first: usize,
    x: &Columns<'_>,
    out: &mut [f32],
) {
    // SAFETY: the features are this function's.
    unsafe { rows::<F>(w, first, x, out) }
}

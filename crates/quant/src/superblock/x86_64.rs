//! The row-kernel skeleton of the superblock formats ([`crate::superblock`]): columns in
//! groups of up to [`GROUP`], each superblock decoded once per group and its integer sums
//! taken for every column of the group ([`Superblock::isums`], the format's part), reduced
//! exactly to one i32 per column, then the float steps of [`crate::superblock::dot`] per
//! column in scalar registers. Column c's operations do not depend on the group, so one
//! column alone and the same column among others give the same bits.

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
    /// The factor applied to the f32 sum at the end (1 or IQ1's 1/8).
    const FINAL: f32;
    /// The f16 bits of the superblock scale `d_w`.
    ///
    /// # Safety
    /// `block` points at a whole superblock.
    unsafe fn d_bits(block: *const u8) -> u16;
    /// For each column c, eight i32 lanes whose sum is the column's exact `isum` of this
    /// superblock (as the format's `dot_ref` defines it).
    ///
    /// # Safety
    /// The CPU must have the instruction sets of the kernel table that reaches this
    /// implementation (AVX2, FMA and F16C at least); `block` points at a whole superblock
    /// and every column at a whole Q8_K block.
    unsafe fn isums<const G: usize>(block: *const u8, x: [Q8kBlock; G]) -> [__m256i; G];
}

/// The sums of the eight i32 lanes of four vectors, in the four lanes of one (exact while
/// they fit in i32): a `vphaddd` tree.
///
/// # Safety
/// The CPU must support AVX2.
#[inline(always)]
unsafe fn tree4(v: [__m256i; 4]) -> __m128i {
    // SAFETY: the caller guarantees AVX2.
    unsafe {
        let h = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
        _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256::<1>(h))
    }
}

/// One row · G columns (`d[c]`, `q[c]`, `s[c]`: column c's block scales, quants and sums).
/// The float steps run for four columns at a time in the lanes of one register (lane c:
/// `fma(d_w · d_x[c], isum[c], acc[c])`, then the final factor), each lane the scalar
/// reference's operations, so the same bits whatever the group.
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
    assert!(G <= 8 && out.len() >= G);
    let w = row.as_ptr();
    // SAFETY: the caller guarantees AVX2, FMA and F16C.
    let mut acc = unsafe { [_mm_setzero_ps(); 2] };
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
            let dw = _mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(F::d_bits(blk))));
            let dw = _mm_broadcastss_ps(dw);
            for (j, a) in acc.iter_mut().enumerate().take(G.div_ceil(4)) {
                let mut quad = [_mm256_setzero_si256(); 4];
                let mut dx = [0.0f32; 4];
                for k in 0..4 {
                    if 4 * j + k < G {
                        quad[k] = v[4 * j + k];
                        dx[k] = d[4 * j + k][b];
                    }
                }
                let sums = _mm_cvtepi32_ps(tree4(quad));
                let scale = _mm_mul_ps(dw, _mm_setr_ps(dx[0], dx[1], dx[2], dx[3]));
                *a = _mm_fmadd_ps(scale, sums, *a);
            }
        }
    }
    // SAFETY: the caller guarantees AVX2; `lanes` holds eight f32.
    unsafe {
        let mut lanes = [0.0f32; 8];
        for (j, a) in acc.iter().enumerate() {
            let mut v = *a;
            if F::FINAL != 1.0 {
                v = _mm_mul_ps(v, _mm_set1_ps(F::FINAL));
            }
            _mm_storeu_ps(lanes.as_mut_ptr().add(4 * j), v);
        }
        out[..G].copy_from_slice(&lanes[..G]);
    }
}

/// Four rows · one column (`d`, `q`, `s`: its block scales, quants and sums): the rows'
/// integer sums of a superblock reduced in one tree and their float steps in the four
/// lanes of one register, each lane the same operations as [`group`]'s for one column
/// (`fma(d_w · d_x, isum, acc)`, then the final factor), so the same bits.
///
/// # Safety
/// The CPU must support the instruction sets `F` needs (AVX2, FMA and F16C at least);
/// every row is whole superblocks, as many as the column covers (checked).
#[inline(always)]
unsafe fn four_rows<F: Superblock>(
    rows: [&[u8]; 4],
    d: &[f32],
    q: &[i8],
    s: &[i16],
    out: &mut [f32; 4],
) {
    let nb = rows[0].len() / F::BYTES;
    assert!(rows.iter().all(|r| r.len() == rows[0].len()));
    assert!(d.len() >= nb && q.len() >= nb * QK_K && s.len() >= nb * 16);
    let w = rows.map(|r| r.as_ptr());
    // SAFETY: the caller guarantees AVX2, FMA and F16C.
    let mut acc = unsafe { _mm_setzero_ps() };
    for b in 0..nb {
        for r in w {
            let ahead = r.wrapping_add(b * F::BYTES + PREFETCH);
            // SAFETY: a prefetch never faults; SSE is part of x86-64.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(ahead.cast()) };
        }
        // SAFETY: b < nb, so superblock b lies in every row and block b in the column
        // (asserted above); the caller guarantees the CPU features.
        unsafe {
            let x = [Q8kBlock {
                q: q.as_ptr().add(b * QK_K),
                bsums: s.as_ptr().add(b * 16),
            }];
            let blk = w.map(|r| r.add(b * F::BYTES));
            // No closures around intrinsics here: a closure would not inherit the target
            // features of the function this is inlined into.
            let v = [
                F::isums::<1>(blk[0], x)[0],
                F::isums::<1>(blk[1], x)[0],
                F::isums::<1>(blk[2], x)[0],
                F::isums::<1>(blk[3], x)[0],
            ];
            let sums = tree4(v);
            let bits = blk.map(|p| F::d_bits(p) as i16);
            let dw = _mm_cvtph_ps(_mm_setr_epi16(
                bits[0], bits[1], bits[2], bits[3], 0, 0, 0, 0,
            ));
            let scale = _mm_mul_ps(dw, _mm_set1_ps(d[b]));
            acc = _mm_fmadd_ps(scale, _mm_cvtepi32_ps(sums), acc);
        }
    }
    // SAFETY: the caller guarantees AVX2; `out` holds four f32.
    unsafe {
        if F::FINAL != 1.0 {
            acc = _mm_mul_ps(acc, _mm_set1_ps(F::FINAL));
        }
        _mm_storeu_ps(out.as_mut_ptr(), acc);
    }
}

/// Rows `first..first + out.len() / n` · all n columns, row-major into `out`: one column
/// four rows at a time ([`four_rows`]), several columns in groups of up to [`GROUP`].
///
/// # Safety
/// The CPU must support the instruction sets `F` needs.
#[inline(always)]
unsafe fn rows<F: Superblock>(w: &Matrix<'_>, first: usize, x: &Columns<'_>, out: &mut [f32]) {
    let n = x.count();
    let mut i0 = 0;
    if n == 1 {
        let (d, q) = x.q8(0);
        let s = x.q8_bsums(0);
        for (i, o) in out.chunks_exact_mut(4).enumerate() {
            let rows = std::array::from_fn(|r| w.row(first + 4 * i + r));
            let o: &mut [f32; 4] = o.try_into().expect("four outputs");
            // SAFETY: the caller guarantees the CPU features; `four_rows` checks sizes.
            unsafe { four_rows::<F>(rows, d, q, s, o) };
        }
        i0 = out.len() / 4 * 4;
    }
    for (i, row_out) in out.chunks_exact_mut(n).enumerate().skip(i0) {
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

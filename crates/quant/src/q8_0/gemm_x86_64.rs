//! x86-64 Q8_0 row kernels, reached only through the Q8_0 kernel-table row
//! (`q8_0.rs`), each held to [`super::Q8_0`]'s `dot_ref` bit for bit by the tests:
//! - [`rows_q8_0_avx2`]: `vpmaddubsw` + `vpmaddwd` integer dots, eight blocks reduced at
//!   once; rows shorter than eight blocks eight rows at a time.
//! - [`rows_q8_0_vnni`] (AVX-512 VNNI, two or more columns): eight weight blocks transposed
//!   once and shared by up to 16 columns, `vpdpbusd` leaving each block's sum in its own
//!   lane. It gives the same bits as the AVX2 kernel (tested), so the choice by column
//!   count never changes a result.
//! - packed tiles ([`super::pack`], AVX-512 VNNI, any number of columns): sixteen rows in
//!   the lanes of one register, so a block's sum needs no reduction; rows outside whole
//!   tiles go to the kernels above. The same bits again (tested).
//!
//! (Inside the one-column AVX2 kernel, `vpdpbusd` in place of `vpmaddubsw` + `vpmaddwd`
//! gives the same bits but measured 1.5× slower on the AMD EPYC this project benchmarks on
//! — 3.03 vs 2.05 ms for a 14336 × 7168 matrix — so that variant is not kept.)
//!
//! A row is multiplied with several columns at once: the weight block is loaded and
//! converted once, then each column runs its own accumulators. Column `c`'s instruction
//! sequence is the same whatever the group holds, so one column alone and the same column
//! among others give the same bits.

// The kernels walk several per-column arrays (scales, quants, accumulators) by one index.
#![allow(clippy::needless_range_loop)]

use std::arch::x86_64::*;

use half::f16;

use super::{BLOCK_BYTES, PACK_BLOCK_BYTES, PACK_ROWS, QK8_0};
use crate::columns::Columns;
use crate::matrix::{group_size, Matrix};
use crate::plain::x86_64::GROUP;
use crate::x86_64::{hsum, hsum_i32};

/// The f16 scales of blocks `b..b + 8` of the Q8_0 row at `w`, as f32.
///
/// # Safety
/// The CPU must support AVX2 and F16C, and the row must hold at least `b + 8` blocks.
#[target_feature(enable = "avx2,f16c")]
unsafe fn scales8(w: *const u8, b: usize) -> __m256 {
    let mut bits = [0u16; 8];
    for (j, s) in bits.iter_mut().enumerate() {
        // SAFETY: block b + j < b + 8 is in the row, as the caller guarantees.
        *s = unsafe { w.add((b + j) * BLOCK_BYTES).cast::<u16>().read_unaligned() };
    }
    // SAFETY: `bits` is 16 bytes.
    _mm256_cvtph_ps(unsafe { _mm_loadu_si128(bits.as_ptr().cast()) })
}

/// How far ahead of the Q8_0 kernel's loads the weights are prefetched, in bytes.
const PREFETCH: usize = 4096;

/// Q8_0 row · G columns (`d[c]`, `q[c]`: column c's block scales and quants).
///
/// Each block's integer dot product is exact (`|w|` as u8 × `x` with w's sign, pairs
/// summed by `vpmaddubsw`, then `vpmaddwd`), so the per-block term `(d_w · d_x) · isum`
/// equals the scalar reference's; only the order of the final f32 sum differs. Blocks go
/// eight at a time: the eight 8-lane integer vectors are reduced to one vector of eight
/// block sums (a `vphaddd` tree), converted, and multiplied by the eight scale products at
/// once, so scales cost one conversion per eight blocks instead of one per block. Blocks
/// left over (`nb mod 8`) are summed one by one into a scalar. Column c's operations do not
/// depend on G.
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
    // SAFETY (every block below): block index < nb, so its 34 bytes lie inside `row`, and
    // each column holds nb scales and nb·32 quants (asserted above).
    let dot = |b: usize, aw: __m256i, qw: __m256i, c: usize| -> __m256i {
        // SAFETY: see above.
        let qx = unsafe { _mm256_loadu_si256(q[c].as_ptr().add(b * QK8_0).cast()) };
        _mm256_madd_epi16(_mm256_maddubs_epi16(aw, _mm256_sign_epi8(qx, qw)), ones)
    };
    let weights = |b: usize| -> (__m256i, __m256i) {
        // SAFETY: see above.
        let qw = unsafe { _mm256_loadu_si256(w.add(b * BLOCK_BYTES + 2).cast()) };
        (_mm256_sign_epi8(qw, qw), qw)
    };
    let mut acc = [_mm256_setzero_ps(); G];
    let mut b = 0;
    while b + 8 <= nb {
        // The matrix is streamed once: ask for the bytes PREFETCH ahead (rows of a task are
        // contiguous, so this runs into the next rows) so the loads below find them cached.
        for line in 0..5 {
            let ahead = w.wrapping_add(b * BLOCK_BYTES + PREFETCH + 64 * line);
            _mm_prefetch::<_MM_HINT_T0>(ahead.cast());
        }
        let mut half = [[_mm256_setzero_si256(); 2]; G];
        for (h, slot) in [0usize, 4].into_iter().enumerate() {
            let mut pairs = [[_mm256_setzero_si256(); 2]; G];
            for (p, j) in [slot, slot + 2].into_iter().enumerate() {
                let (a0, q0) = weights(b + j);
                let (a1, q1) = weights(b + j + 1);
                for (c, pair) in pairs.iter_mut().enumerate() {
                    pair[p] = _mm256_hadd_epi32(dot(b + j, a0, q0, c), dot(b + j + 1, a1, q1, c));
                }
            }
            for (hc, pair) in half.iter_mut().zip(&pairs) {
                hc[h] = _mm256_hadd_epi32(pair[0], pair[1]);
            }
        }
        // SAFETY: blocks b..b + 8 are in the row (see above).
        let dw = unsafe { scales8(w, b) };
        for c in 0..G {
            let (lo, hi) = (half[c][0], half[c][1]);
            let sums = _mm256_add_epi32(
                _mm256_permute2x128_si256::<0x20>(lo, hi),
                _mm256_permute2x128_si256::<0x31>(lo, hi),
            );
            // SAFETY: see above (b + 8 <= nb).
            let dx = unsafe { _mm256_loadu_ps(d[c].as_ptr().add(b)) };
            acc[c] = _mm256_fmadd_ps(_mm256_mul_ps(dw, dx), _mm256_cvtepi32_ps(sums), acc[c]);
        }
        b += 8;
    }
    // SAFETY: the features are this function's; the tail checks the sizes.
    let tail = unsafe { q8_tail::<G>(row, b, d, q) };
    for c in 0..G {
        out[c] = hsum(acc[c]) + tail[c];
    }
}

/// Rows of fewer than eight Q8_0 blocks (a Markov head's rank-32 rows, tiny test models),
/// eight rows at a time per column; returns how many rows it did (a multiple of eight, the
/// rest go row by row).
///
/// Row by row, [`q8_group`] leaves such a row entirely to [`q8_tail`]: `0 + Σ_b (d_w · d_x)
/// · isum_b` in block order, added to the horizontal sum of untouched accumulators (+0).
/// Here lane i of one register is row i: the eight rows' integer sums of block b come from
/// the same `vphaddd` tree as [`q8_group`]'s, their scales from one conversion, and the
/// f32 operations are the same in the same order, so the bits are the same (tested).
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q8_short_rows(w: &Matrix<'_>, first: usize, x: &Columns<'_>, out: &mut [f32]) -> usize {
    let n = x.count();
    let k = out.len() / n;
    let nb = w.cols / QK8_0;
    let ones = _mm256_set1_epi16(1);
    let groups = k / 8;
    for c in 0..n {
        let (d, q) = x.q8(c);
        assert!(d.len() >= nb && q.len() >= nb * QK8_0);
        for g in 0..groups {
            let rows: [&[u8]; 8] = std::array::from_fn(|i| w.row(first + 8 * g + i));
            let mut tail = _mm256_setzero_ps();
            for b in 0..nb {
                // SAFETY: b < nb, so the column's block b and each row's block b exist.
                let qx = unsafe { _mm256_loadu_si256(q.as_ptr().add(b * QK8_0).cast()) };
                let v = |i: usize| {
                    // SAFETY: as above.
                    let qw = unsafe {
                        _mm256_loadu_si256(rows[i].as_ptr().add(b * BLOCK_BYTES + 2).cast())
                    };
                    let aw = _mm256_sign_epi8(qw, qw);
                    _mm256_madd_epi16(_mm256_maddubs_epi16(aw, _mm256_sign_epi8(qx, qw)), ones)
                };
                let p01 = _mm256_hadd_epi32(v(0), v(1));
                let p23 = _mm256_hadd_epi32(v(2), v(3));
                let p45 = _mm256_hadd_epi32(v(4), v(5));
                let p67 = _mm256_hadd_epi32(v(6), v(7));
                let (lo, hi) = (_mm256_hadd_epi32(p01, p23), _mm256_hadd_epi32(p45, p67));
                let sums = _mm256_add_epi32(
                    _mm256_permute2x128_si256::<0x20>(lo, hi),
                    _mm256_permute2x128_si256::<0x31>(lo, hi),
                );
                let scales: [u16; 8] = std::array::from_fn(|i| {
                    u16::from_le_bytes([rows[i][b * BLOCK_BYTES], rows[i][b * BLOCK_BYTES + 1]])
                });
                // SAFETY: `scales` is 16 bytes.
                let dw = _mm256_cvtph_ps(unsafe { _mm_loadu_si128(scales.as_ptr().cast()) });
                let scale = _mm256_mul_ps(dw, _mm256_set1_ps(d[b]));
                tail = _mm256_add_ps(tail, _mm256_mul_ps(scale, _mm256_cvtepi32_ps(sums)));
            }
            let mut lanes = [0.0f32; 8];
            // SAFETY: `lanes` holds 8 f32.
            unsafe {
                _mm256_storeu_ps(lanes.as_mut_ptr(), _mm256_add_ps(_mm256_setzero_ps(), tail))
            };
            for (i, v) in lanes.into_iter().enumerate() {
                out[(8 * g + i) * n + c] = v;
            }
        }
    }
    groups * 8
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
    let mut i0 = 0;
    if w.cols / QK8_0 < 8 {
        // SAFETY: the caller guarantees AVX2, FMA and F16C; the kernel checks sizes.
        i0 = unsafe { q8_short_rows(w, first, x, out) };
    }
    for (i, row_out) in out.chunks_exact_mut(n).enumerate().skip(i0) {
        let row = w.row(first + i);
        let mut done = 0;
        while done < n {
            let g = group_size(n, done, GROUP);
            let o = &mut row_out[done..done + g];
            let d = |c: usize| x.q8(done + c).0;
            let q = |c: usize| x.q8(done + c).1;
            // SAFETY: the caller guarantees AVX2, FMA and F16C; the kernel checks sizes.
            unsafe {
                match g {
                    4 => q8_group::<4>(row, [d(0), d(1), d(2), d(3)], [q(0), q(1), q(2), q(3)], o),
                    3 => q8_group::<3>(row, [d(0), d(1), d(2)], [q(0), q(1), q(2)], o),
                    2 => q8_group::<2>(row, [d(0), d(1)], [q(0), q(1)], o),
                    _ => q8_group::<1>(row, [d(0)], [q(0)], o),
                }
            }
            done += g;
        }
    }
}

/// G columns as the VNNI kernel reads them: scales, quants (for the blocks left over),
/// transposed quants and `-128 · Σ q` of the whole groups of eight blocks.
struct VnniColumns<'c, const G: usize> {
    d: [&'c [f32]; G],
    q: [&'c [i8]; G],
    qt: [&'c [i8]; G],
    bsum: [&'c [i32]; G],
}

impl<'c, const G: usize> VnniColumns<'c, G> {
    fn new(x: &'c Columns<'_>, first: usize) -> VnniColumns<'c, G> {
        VnniColumns {
            d: std::array::from_fn(|c| x.q8(first + c).0),
            q: std::array::from_fn(|c| x.q8(first + c).1),
            qt: std::array::from_fn(|c| x.q8_transposed(first + c).0),
            bsum: std::array::from_fn(|c| x.q8_transposed(first + c).1),
        }
    }
}

/// Blocks `blocks` (whole groups of eight) of a Q8_0 row · G columns with VNNI, added to
/// `acc`; together with [`q8_tail`] this gives the same bits as [`q8_group`].
///
/// [`q8_group`] computes each block's integer sum in its own register, then reduces eight
/// of them to one vector of eight block sums. Here the eight weight blocks are transposed
/// once (shared by every column) so that lane l of register k holds bytes 4k..4k+4 of
/// block l, and the columns were prepared the same way ([`Columns::q8_transposed`]): eight
/// `vpdpbusd` then leave block l's whole sum in lane l, with no reduction per column.
/// `vpdpbusd` multiplies unsigned by signed bytes, so the weights go in as `w + 128`
/// (`w XOR 0x80`) and each lane starts from `-128 · Σ x` of its block: the sums are exact,
/// for every weight byte including -128. From there, scales, lanes and accumulation order
/// are those of [`q8_group`], so the results are bit-identical (tested).
///
/// # Safety
/// The CPU must support AVX-512 F, VL and VNNI plus AVX2, FMA and F16C; `blocks` lies
/// within the row's whole groups of eight and every column covers them (checked).
#[target_feature(enable = "avx512f,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn q8_span_vnni<const G: usize>(
    row: &[u8],
    blocks: std::ops::Range<usize>,
    x: &VnniColumns<'_, G>,
    acc: &mut [__m256; G],
    prefetch: *const u8,
) {
    assert!(blocks.start.is_multiple_of(8) && blocks.end.is_multiple_of(8));
    assert!(blocks.end * BLOCK_BYTES <= row.len());
    for c in 0..G {
        assert!(x.d[c].len() >= blocks.end && x.bsum[c].len() >= blocks.end);
        assert!(x.qt[c].len() >= blocks.end * QK8_0);
    }
    let w = row.as_ptr();
    let flip = _mm256_set1_epi8(-128);
    // SAFETY (every access below): block indices stay below blocks.end, inside the row and
    // every column (asserted above).
    let mut b = blocks.start;
    while b < blocks.end {
        if b.is_multiple_of(16) && b + 16 <= blocks.end {
            // Two groups at once (the columns hold them interleaved).
            for line in 0..10 {
                let ahead = prefetch.wrapping_add(b * BLOCK_BYTES + 64 * line);
                _mm_prefetch::<_MM_HINT_T0>(ahead.cast());
            }
            // SAFETY: b + 16 <= blocks.end, checked above for the row and the columns.
            unsafe { q8_pair_vnni512::<G>(row, b, x, acc) };
            b += 16;
            continue;
        }
        for line in 0..5 {
            let ahead = prefetch.wrapping_add(b * BLOCK_BYTES + 64 * line);
            _mm_prefetch::<_MM_HINT_T0>(ahead.cast());
        }
        // SAFETY: see above.
        let blk = |j: usize| unsafe {
            _mm256_xor_si256(
                _mm256_loadu_si256(w.add((b + j) * BLOCK_BYTES + 2).cast()),
                flip,
            )
        };
        // 8 × 8 transpose of 32-bit groups: r[k] lane l = group k of block b + l.
        let (w0, w1, w2, w3) = (blk(0), blk(1), blk(2), blk(3));
        let (w4, w5, w6, w7) = (blk(4), blk(5), blk(6), blk(7));
        let (t0, t1) = (_mm256_unpacklo_epi32(w0, w1), _mm256_unpackhi_epi32(w0, w1));
        let (t2, t3) = (_mm256_unpacklo_epi32(w2, w3), _mm256_unpackhi_epi32(w2, w3));
        let (t4, t5) = (_mm256_unpacklo_epi32(w4, w5), _mm256_unpackhi_epi32(w4, w5));
        let (t6, t7) = (_mm256_unpacklo_epi32(w6, w7), _mm256_unpackhi_epi32(w6, w7));
        let (u0, u1) = (_mm256_unpacklo_epi64(t0, t2), _mm256_unpackhi_epi64(t0, t2));
        let (u2, u3) = (_mm256_unpacklo_epi64(t1, t3), _mm256_unpackhi_epi64(t1, t3));
        let (u4, u5) = (_mm256_unpacklo_epi64(t4, t6), _mm256_unpackhi_epi64(t4, t6));
        let (u6, u7) = (_mm256_unpacklo_epi64(t5, t7), _mm256_unpackhi_epi64(t5, t7));
        let r = [
            _mm256_permute2x128_si256::<0x20>(u0, u4),
            _mm256_permute2x128_si256::<0x20>(u1, u5),
            _mm256_permute2x128_si256::<0x20>(u2, u6),
            _mm256_permute2x128_si256::<0x20>(u3, u7),
            _mm256_permute2x128_si256::<0x31>(u0, u4),
            _mm256_permute2x128_si256::<0x31>(u1, u5),
            _mm256_permute2x128_si256::<0x31>(u2, u6),
            _mm256_permute2x128_si256::<0x31>(u3, u7),
        ];
        // SAFETY: blocks b..b + 8 are in the row (see above).
        let dw = unsafe { scales8(w, b) };
        for c in 0..G {
            // SAFETY: see above (b + 8 <= blocks.end).
            unsafe {
                let xt = x.qt[c].as_ptr().add(b * QK8_0);
                let mut sums = _mm256_loadu_si256(x.bsum[c].as_ptr().add(b).cast());
                for (k, &rk) in r.iter().enumerate() {
                    let xk = _mm256_loadu_si256(xt.add(32 * k).cast());
                    sums = _mm256_dpbusd_epi32(sums, rk, xk);
                }
                let dx = _mm256_loadu_ps(x.d[c].as_ptr().add(b));
                acc[c] = _mm256_fmadd_ps(_mm256_mul_ps(dw, dx), _mm256_cvtepi32_ps(sums), acc[c]);
            }
        }
        b += 8;
    }
}

/// Blocks `b..b + 16` (two groups of eight, the first starting at a multiple of 16) of a
/// Q8_0 row · G columns: [`q8_span_vnni`]'s work in 512-bit registers, block `b + j` in the
/// low half and `b + 8 + j` in the high half, so one `vpdpbusd` serves both groups. The
/// columns hold such pairs interleaved (register k of the first group, then of the
/// second), so each half reads what the 256-bit code would. Lane by lane the integer sums,
/// scales and products are the same, and the two halves are added to the accumulators in
/// block order, first group first: the bits are those of the 256-bit code.
///
/// # Safety
/// The CPU must support AVX-512 F, VL and VNNI plus AVX2, FMA and F16C; the row holds
/// blocks `..b + 16` and every column covers them.
#[target_feature(enable = "avx512f,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn q8_pair_vnni512<const G: usize>(
    row: &[u8],
    b: usize,
    x: &VnniColumns<'_, G>,
    acc: &mut [__m256; G],
) {
    let flip = _mm512_set1_epi8(-128);
    let w = row.as_ptr();
    // SAFETY: the caller guarantees blocks b..b + 16 exist in the row (j < 8).
    let blk = |j: usize| unsafe {
        let lo = _mm256_loadu_si256(w.add((b + j) * BLOCK_BYTES + 2).cast());
        let hi = _mm256_loadu_si256(w.add((b + 8 + j) * BLOCK_BYTES + 2).cast());
        _mm512_xor_si512(
            _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi),
            flip,
        )
    };
    let (w0, w1, w2, w3) = (blk(0), blk(1), blk(2), blk(3));
    let (w4, w5, w6, w7) = (blk(4), blk(5), blk(6), blk(7));
    let (t0, t1) = (_mm512_unpacklo_epi32(w0, w1), _mm512_unpackhi_epi32(w0, w1));
    let (t2, t3) = (_mm512_unpacklo_epi32(w2, w3), _mm512_unpackhi_epi32(w2, w3));
    let (t4, t5) = (_mm512_unpacklo_epi32(w4, w5), _mm512_unpackhi_epi32(w4, w5));
    let (t6, t7) = (_mm512_unpacklo_epi32(w6, w7), _mm512_unpackhi_epi32(w6, w7));
    let (u0, u1) = (_mm512_unpacklo_epi64(t0, t2), _mm512_unpackhi_epi64(t0, t2));
    let (u2, u3) = (_mm512_unpacklo_epi64(t1, t3), _mm512_unpackhi_epi64(t1, t3));
    let (u4, u5) = (_mm512_unpacklo_epi64(t4, t6), _mm512_unpackhi_epi64(t4, t6));
    let (u6, u7) = (_mm512_unpacklo_epi64(t5, t7), _mm512_unpackhi_epi64(t5, t7));
    // 128-bit lanes [a0, b0 | a2, b2] and [a1, b1 | a3, b3]: each 256-bit half as
    // `vperm2i128` 0x20 / 0x31 would make it.
    let low = _mm512_set_epi64(13, 12, 5, 4, 9, 8, 1, 0);
    let high = _mm512_set_epi64(15, 14, 7, 6, 11, 10, 3, 2);
    let r = [
        _mm512_permutex2var_epi64(u0, low, u4),
        _mm512_permutex2var_epi64(u1, low, u5),
        _mm512_permutex2var_epi64(u2, low, u6),
        _mm512_permutex2var_epi64(u3, low, u7),
        _mm512_permutex2var_epi64(u0, high, u4),
        _mm512_permutex2var_epi64(u1, high, u5),
        _mm512_permutex2var_epi64(u2, high, u6),
        _mm512_permutex2var_epi64(u3, high, u7),
    ];
    // SAFETY: blocks b..b + 16 are in the row, as the caller guarantees.
    let (lo, hi) = unsafe { (scales8(w, b), scales8(w, b + 8)) };
    let dw = _mm512_insertf64x4::<1>(
        _mm512_castpd256_pd512(_mm256_castps_pd(lo)),
        _mm256_castps_pd(hi),
    );
    let dw = _mm512_castpd_ps(dw);
    for c in 0..G {
        // SAFETY: every column covers blocks b..b + 16 (scales, transposed quants, sums),
        // as the caller guarantees.
        unsafe {
            let xt = x.qt[c].as_ptr().add(b * QK8_0);
            let mut sums = _mm512_loadu_si512(x.bsum[c].as_ptr().add(b).cast());
            for (k, &rk) in r.iter().enumerate() {
                let xk = _mm512_loadu_si512(xt.add(64 * k).cast());
                sums = _mm512_dpbusd_epi32(sums, rk, xk);
            }
            let dx = _mm512_loadu_ps(x.d[c].as_ptr().add(b));
            let scale = _mm512_mul_ps(dw, dx);
            let ints = _mm512_cvtepi32_ps(sums);
            let half = |v: __m512, hi: bool| {
                let d = _mm512_castps_pd(v);
                _mm256_castpd_ps(if hi {
                    _mm512_extractf64x4_pd::<1>(d)
                } else {
                    _mm512_castpd512_pd256(d)
                })
            };
            acc[c] = _mm256_fmadd_ps(half(scale, false), half(ints, false), acc[c]);
            acc[c] = _mm256_fmadd_ps(half(scale, true), half(ints, true), acc[c]);
        }
    }
}

/// Blocks `from..` of a Q8_0 row · G columns, one by one into a scalar per column: the
/// blocks the eight-at-a-time loops leave over, summed the same way by both kernels.
///
/// # Safety
/// The CPU must support AVX2 and F16C; every column covers the row's blocks (checked).
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q8_tail<const G: usize>(
    row: &[u8],
    from: usize,
    d: [&[f32]; G],
    q: [&[i8]; G],
) -> [f32; G] {
    let nb = row.len() / BLOCK_BYTES;
    for c in 0..G {
        assert!(d[c].len() >= nb && q[c].len() >= nb * QK8_0);
    }
    let ones = _mm256_set1_epi16(1);
    let mut tail = [0.0f32; G];
    for b in from..nb {
        // SAFETY: b < nb, so the block is inside `row`.
        let (bits, qw) = unsafe {
            let wb = row.as_ptr().add(b * BLOCK_BYTES);
            (
                wb.cast::<u16>().read_unaligned(),
                _mm256_loadu_si256(wb.add(2).cast()),
            )
        };
        let aw = _mm256_sign_epi8(qw, qw);
        let dw = f16::from_bits(bits).to_f32();
        for c in 0..G {
            // SAFETY: each column holds nb blocks (asserted above).
            let qx = unsafe { _mm256_loadu_si256(q[c].as_ptr().add(b * QK8_0).cast()) };
            let i = _mm256_madd_epi16(_mm256_maddubs_epi16(aw, _mm256_sign_epi8(qx, qw)), ones);
            tail[c] += dw * d[c][b] * hsum_i32(i) as f32;
        }
    }
    tail
}

/// Bytes of the columns' prepared quants one chunk of the VNNI kernel may span: a chunk of
/// blocks is walked over every row of a task while those bytes stay in L1 (32 blocks for
/// 16 columns, 64 for 8, up to whole rows for 2).
const VNNI_CHUNK_BYTES: usize = 16 << 10;

/// Rows `first..first + k` · G columns `at..at + G` with VNNI into `out` (row-major, n
/// columns per row). The blocks are walked in chunks (see [`VNNI_CHUNK_BYTES`]), each over all k
/// rows, with each row's accumulators kept in `accs` between chunks: every lane still
/// accumulates its blocks in order, so the bits are those of [`q8_group`].
///
/// # Safety
/// As [`q8_span_vnni`].
#[target_feature(enable = "avx512f,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn q8_rows_vnni<const G: usize>(
    w: &Matrix<'_>,
    first: usize,
    x: &Columns<'_>,
    at: usize,
    out: &mut [f32],
) {
    let n = x.count();
    let k = out.len() / n;
    let cols = VnniColumns::<G>::new(x, at);
    let nb = w.cols / QK8_0;
    let full = nb / 8 * 8;
    let row_bytes = nb * BLOCK_BYTES;
    let mut accs = vec![[_mm256_setzero_ps(); G]; k];
    // Blocks per chunk: the G columns' share of a chunk stays within 16 KiB of L1.
    let chunk = (VNNI_CHUNK_BYTES / (QK8_0 * G)).max(32) / 16 * 16;
    for start in (0..full).step_by(chunk) {
        let end = (start + chunk).min(full);
        for (i, acc) in accs.iter_mut().enumerate() {
            let row = w.row(first + i);
            // Prefetch the same blocks of the next row, which comes next in this chunk.
            let next = row.as_ptr().wrapping_add(row_bytes);
            // SAFETY: the caller guarantees the CPU features; the span checks the sizes.
            unsafe { q8_span_vnni::<G>(row, start..end, &cols, acc, next) };
        }
    }
    for (i, acc) in accs.iter().enumerate() {
        // SAFETY: as above.
        let tail = unsafe { q8_tail::<G>(w.row(first + i), full, cols.d, cols.q) };
        for c in 0..G {
            out[i * n + at + c] = hsum(acc[c]) + tail[c];
        }
    }
}

/// Where a tile kernel prefetches while it walks its blocks: at block b, the lines of
/// `start + b · step .. start + (b + 1) · step` (a share of the next tile). Prefetching
/// never faults, so `start` may point past the matrix.
#[derive(Clone, Copy)]
struct Ahead {
    start: *const u8,
    step: usize,
}

impl Ahead {
    #[inline(always)]
    fn block(self, b: usize) {
        for off in (0..self.step).step_by(64) {
            let p = self.start.wrapping_add(b * self.step + off);
            // SAFETY: a prefetch is a hint: it reads nothing and never faults.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(p.cast()) };
        }
    }
}

/// One packed tile ([`super::Packed`]: 16 rows, `nb` blocks) · G columns, with VNNI:
/// lane r of each register is row r. A block's integer sum is `-128 · Σ x` (`bias`) plus
/// eight `vpdpbusd` of the tile's `w + 128` bytes with four of the column's quants
/// broadcast: exact, as [`q8_group`]'s. Each weight register is loaded once and fed to
/// the G columns. The f32 steps of each column are [`q8_group`]'s, lane for lane: eight
/// accumulators (blocks b ≡ j mod 8 of the whole groups of eight, `fma(d_w · d_x, isum,
/// acc)` in block order), the blocks left over added one by one from +0 as [`q8_tail`]
/// does (`tail + (d_w · d_x) · isum`), then `((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 +
/// a7)) + tail`, [`hsum`]'s order. So each row's result is the bits the row-by-row
/// kernels give, whatever G (tested).
///
/// # Safety
/// The CPU must support AVX-512 F, VL and VNNI plus AVX2, FMA and F16C; `tile` is one
/// whole packed tile of `nb` blocks and every column covers `nb` blocks (checked).
#[target_feature(enable = "avx512f,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn q8_tile_vnni<const G: usize>(
    tile: &[u8],
    nb: usize,
    d: [&[f32]; G],
    q: [&[i8]; G],
    bias: [&[i32]; G],
    ahead: Ahead,
) -> [[f32; 16]; G] {
    assert_eq!(tile.len(), nb * PACK_BLOCK_BYTES);
    for c in 0..G {
        assert!(d[c].len() >= nb && bias[c].len() >= nb && q[c].len() >= nb * QK8_0);
    }
    let quants = tile.as_ptr();
    // SAFETY: the scales follow the nb · 512 bytes of quants inside the tile.
    let scales = unsafe { quants.add(nb * 512) };
    let full = nb / 8 * 8;
    let mut acc = [[_mm512_setzero_ps(); 8]; G];
    let mut tail = [_mm512_setzero_ps(); G];
    // Block b's integer sums (as f32) and scale products for every column; b < nb only.
    macro_rules! blocks {
        ($b:expr) => {{
            let b = $b;
            ahead.block(b);
            let mut sums: [__m512i; G] = std::array::from_fn(|c| _mm512_set1_epi32(bias[c][b]));
            for k in 0..8 {
                // SAFETY: block b < nb: register k of its 512 quant bytes is in the tile
                // and quants 4k..4k + 4 of each column's block b are in the column
                // (asserted above).
                unsafe {
                    let w = _mm512_loadu_si512(quants.add(b * 512 + k * 64).cast());
                    for c in 0..G {
                        let x = q[c]
                            .as_ptr()
                            .add(b * QK8_0 + 4 * k)
                            .cast::<i32>()
                            .read_unaligned();
                        sums[c] = _mm512_dpbusd_epi32(sums[c], w, _mm512_set1_epi32(x));
                    }
                }
            }
            // SAFETY: block b < nb: its 32 scale bytes are in the tile.
            let dw = unsafe { _mm512_cvtph_ps(_mm256_loadu_si256(scales.add(b * 32).cast())) };
            let scale: [__m512; G] =
                std::array::from_fn(|c| _mm512_mul_ps(dw, _mm512_set1_ps(d[c][b])));
            (sums.map(|s| _mm512_cvtepi32_ps(s)), scale)
        }};
    }
    let mut b = 0;
    while b < full {
        for j in 0..8 {
            let (sums, scale) = blocks!(b + j);
            for c in 0..G {
                acc[c][j] = _mm512_fmadd_ps(scale[c], sums[c], acc[c][j]);
            }
        }
        b += 8;
    }
    for b in full..nb {
        let (sums, scale) = blocks!(b);
        for c in 0..G {
            tail[c] = _mm512_add_ps(tail[c], _mm512_mul_ps(scale[c], sums[c]));
        }
    }
    std::array::from_fn(|c| {
        let a = &acc[c];
        let lo = _mm512_add_ps(_mm512_add_ps(a[0], a[4]), _mm512_add_ps(a[2], a[6]));
        let hi = _mm512_add_ps(_mm512_add_ps(a[1], a[5]), _mm512_add_ps(a[3], a[7]));
        let mut out = [0.0f32; 16];
        // SAFETY: `out` holds 16 f32.
        unsafe {
            _mm512_storeu_ps(
                out.as_mut_ptr(),
                _mm512_add_ps(_mm512_add_ps(lo, hi), tail[c]),
            )
        };
        out
    })
}

/// The rows of a task that lie in whole packed tiles (when the matrix has them and the
/// task starts on a tile), every column, into `out`; returns how many rows it did.
///
/// # Safety
/// As [`q8_tile_vnni`].
#[target_feature(enable = "avx512f,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn q8_packed_rows(w: &Matrix<'_>, first: usize, x: &Columns<'_>, out: &mut [f32]) -> usize {
    let Some(packed) = w.packed().map(|p| p.as_bytes()) else {
        return 0;
    };
    if !first.is_multiple_of(PACK_ROWS) {
        return 0;
    }
    let n = x.count();
    let k = out.len() / n;
    let nb = w.cols / QK8_0;
    let tile_bytes = nb * PACK_BLOCK_BYTES;
    let tiled = packed.len() / tile_bytes * PACK_ROWS;
    let tiles = k.min(tiled.saturating_sub(first)) / PACK_ROWS;
    for t in 0..tiles {
        let at = (first / PACK_ROWS + t) * tile_bytes;
        let tile = &packed[at..at + tile_bytes];
        // The next tile (this task's, or the rows after it), fetched while the first
        // column group walks this one.
        let next = packed.as_ptr().wrapping_add(at + tile_bytes);
        // Each column group fetches its share of the next tile while it walks this one
        // (the later groups find this tile cached), so memory and compute overlap.
        let groups = n.div_ceil(PACK_GROUP);
        let share = (tile_bytes / groups).next_multiple_of(64);
        let mut c = 0;
        while c < n {
            let g = (n - c).min(PACK_GROUP);
            let ahead = Ahead {
                start: next.wrapping_add(c / PACK_GROUP * share),
                step: share.div_ceil(nb).next_multiple_of(64),
            };
            let rows = &mut out[t * PACK_ROWS * n..(t + 1) * PACK_ROWS * n];
            // SAFETY: the caller guarantees the CPU features; the kernel checks sizes.
            unsafe {
                match g {
                    1 => tile_columns::<1>(tile, nb, x, c, ahead, rows),
                    2 => tile_columns::<2>(tile, nb, x, c, ahead, rows),
                    _ => tile_columns::<3>(tile, nb, x, c, ahead, rows),
                }
            }
            c += g;
        }
    }
    tiles * PACK_ROWS
}

/// [`q8_tile_vnni`] on columns `c..c + G` of `x`, into the tile's 16 rows of `out`
/// (row-major, all of `x`'s columns per row).
///
/// # Safety
/// As [`q8_tile_vnni`].
#[target_feature(enable = "avx512f,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn tile_columns<const G: usize>(
    tile: &[u8],
    nb: usize,
    x: &Columns<'_>,
    c: usize,
    ahead: Ahead,
    out: &mut [f32],
) {
    let n = x.count();
    let d = std::array::from_fn(|j| x.q8(c + j).0);
    let q = std::array::from_fn(|j| x.q8(c + j).1);
    let bias = std::array::from_fn(|j| x.q8_bias(c + j));
    // SAFETY: the caller guarantees the CPU features; the kernel checks sizes.
    let r = unsafe { q8_tile_vnni::<G>(tile, nb, d, q, bias, ahead) };
    for (j, col) in r.iter().enumerate() {
        for (i, &v) in col.iter().enumerate() {
            out[i * n + c + j] = v;
        }
    }
}

/// Columns sharing one pass over a packed tile (their accumulators fill the registers).
const PACK_GROUP: usize = 3;

/// Columns sharing one pass over a row in the VNNI kernel.
const GROUP_VNNI: usize = 16;

/// Fewest columns for which the VNNI kernel beats [`q8_group`]: its weight transpose is
/// shared by the columns, so one column alone is faster without it. Both give the same
/// bits, so the choice never changes a result.
const VNNI_MIN_COLUMNS: usize = 2;

/// [`rows_q8_0_avx2`] with the VNNI kernel for two or more columns (same bits).
///
/// # Safety
/// The CPU must support AVX-512 F, VL and VNNI, AVX2, FMA and F16C.
#[target_feature(enable = "avx512f,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(crate) unsafe fn rows_q8_0_vnni(
    w: &Matrix<'_>,
    first: usize,
    x: &Columns<'_>,
    out: &mut [f32],
) {
    let n = x.count();
    // SAFETY: the caller guarantees the CPU features; the kernel checks sizes.
    let tiled = unsafe { q8_packed_rows(w, first, x, out) };
    let (first, out) = (first + tiled, &mut out[tiled * n..]);
    if out.is_empty() {
        return;
    }
    if n < VNNI_MIN_COLUMNS {
        // SAFETY: AVX2, FMA and F16C are among this function's requirements.
        return unsafe { rows_q8_0_avx2(w, first, x, out) };
    }
    let mut done = 0;
    while done < n {
        let g = group_size(n, done, GROUP_VNNI);
        // SAFETY: the caller guarantees the CPU features; the kernels check sizes.
        unsafe {
            match g {
                16 => q8_rows_vnni::<16>(w, first, x, done, out),
                15 => q8_rows_vnni::<15>(w, first, x, done, out),
                14 => q8_rows_vnni::<14>(w, first, x, done, out),
                13 => q8_rows_vnni::<13>(w, first, x, done, out),
                12 => q8_rows_vnni::<12>(w, first, x, done, out),
                11 => q8_rows_vnni::<11>(w, first, x, done, out),
                10 => q8_rows_vnni::<10>(w, first, x, done, out),
                9 => q8_rows_vnni::<9>(w, first, x, done, out),
                8 => q8_rows_vnni::<8>(w, first, x, done, out),
                7 => q8_rows_vnni::<7>(w, first, x, done, out),
                6 => q8_rows_vnni::<6>(w, first, x, done, out),
                5 => q8_rows_vnni::<5>(w, first, x, done, out),
                4 => q8_rows_vnni::<4>(w, first, x, done, out),
                3 => q8_rows_vnni::<3>(w, first, x, done, out),
                2 => q8_rows_vnni::<2>(w, first, x, done, out),
                _ => q8_rows_vnni::<1>(w, first, x, done, out),
            }
        }
        done += g;
    }
}

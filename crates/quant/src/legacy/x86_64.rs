//! The AVX2 row kernel of the formats of 32-value runs, on the file's layout: eight rows
//! at a time, lane i of every register holding row i, so each run's integer sum lands in
//! its row's lane and the float steps of [`super::dot_ref`] run on eight rows at once,
//! in its order (one fused multiply-add per run, `d_w · d_x` rounded first). Each run
//! of the eight rows is decoded once (by the format's [`Avx2Runs::codes`]) and shared
//! by a group of up to [`GROUP`] columns; column c's instruction sequence is the same
//! whatever the group holds, so a column alone and among others gives the same bits.
//! Reached only through the kernel-table rows the format modules build from a `Detected`.
//!
//! A run's integer sum: `vpmaddubsw` (unsigned codes times signed activation quants, pairs
//! added in i16) then `vpmaddwd` by ones (i32), then a `vphaddd` tree turning the eight
//! rows' vectors into one vector of eight row sums. `vpmaddubsw` saturates its pair
//! sums, so the codes a format feeds it are at most 127: the unsigned quants themselves
//! (Q4_1, Q5_1), or the signed values plus an offset (`w + OFFSET`: Q4_0 8, Q5_0 16, MXFP4
//! 12), corrected by `-OFFSET · Σq` per block (from [`Columns::q8_bias`]); IQ4_NL's
//! values reach ±127, so it multiplies `|q|` by its values with `q`'s sign instead
//! ([`Avx2Runs::SIGNED`]), which is exact for every quant including -128. Every integer
//! sum is exact, so only the float steps decide the bits, and they are the reference's.

// The kernels walk several per-column arrays by one index.
#![allow(clippy::needless_range_loop)]

use std::arch::x86_64::*;

use super::{Runs32, RUN};
use crate::columns::Columns;
use crate::matrix::{for_each_group, group_size, Matrix};
use crate::x86_64::{Dpbusd, LaneDot, Maddubs};

/// How far ahead of the block in use [`lanes_block`] asks for a row's bytes with
/// `vpdpbusd` and two or more columns (a verify's), by `prefetcht0`. A decode step's products
/// stream every weight once, so a core's reads must be in flight well ahead of its
/// arithmetic: measured against a plain read of the same 633 MB (the products of a
/// Qwen3-0.6B-shaped decode step, two threads, alternated, on Zen 4, then with two
/// adjacent rows a pass), 8 KiB took 1.09–1.11× the read's time where 4 KiB took 1.20× and
/// none 4×.
const PREFETCH: usize = 8192;

/// [`PREFETCH`] of one column (a decode step's products) and of every pass on AVX2 without
/// VNNI, whose lines are asked for non-temporally (`prefetchnta`: into L1 without
/// displacing the L2 the next pass may want) and whose single column pairs rows k/2 apart
/// ([`rows_lanes`]): two adjacent rows a pass make each of a pass's two streams jump a row
/// at every pass, which AMD's prefetchers follow badly (on Zen 2 with no software
/// prefetch, one row a pass read 9.0 GB/s on one core, two adjacent rows 4.7). A
/// Qwen3-0.6B-shaped Q8_0 decode step, 2 threads, alternated runs (`docs/PERFORMANCE.md`
/// issue #22): on Zen 2 (AVX2) two adjacent rows with 8 KiB `prefetcht0` 36.5–38.5 ms,
/// one row a pass with this 4 KiB 32.1–35.4, rows k/2 apart with it 27.9–30.8; on Zen 4
/// (`vpdpbusd`) two adjacent rows with 8 KiB `prefetcht0` 38.7–47.1 ms, rows k/2 apart
/// with it 25.3–30.5 and with this 21.5–29.6 (since then [`lanes_one`] asks for nothing
/// with `vpdpbusd`: the same from memory, faster from the caches).
const PREFETCH_ONE: usize = 4096;

/// Rows per pass (the lanes of an AVX2 register).
pub(crate) const ROWS: usize = 8;

/// Columns sharing one pass over eight rows.
pub(crate) const GROUP: usize = 4;

/// What the AVX2 kernel needs of a format: its runs as bytes and its scales as lanes.
pub(crate) trait Avx2Runs: Runs32 {
    /// Whether [`Avx2Runs::codes`] gives signed values (|v| ≤ 127, met as `|q| · sign(v,
    /// q)`) rather than unsigned codes `v + OFFSET` ≤ 127 (met as `code · q`).
    const SIGNED: bool = false;
    /// What the codes add to the values (unsigned codes only).
    const OFFSET: i32 = 0;

    /// Run `sub` of the block at `p`, its 32 codes in element order.
    ///
    /// # Safety
    /// The CPU must support AVX2; `p` points at a whole block.
    unsafe fn codes(p: *const u8, sub: usize) -> __m256i;

    /// The scales `d_w` and mins `m_w` (zero without a min) of eight blocks, lane i the
    /// block at `ps[i]`.
    ///
    /// # Safety
    /// The CPU must support AVX2 and F16C; every pointer points at a whole block.
    unsafe fn scales8(ps: &[*const u8; ROWS]) -> (__m256, __m256);
}

/// The f16 at byte `at` of each of eight blocks, as f32 lanes.
///
/// # Safety
/// The CPU must support AVX2 and F16C; `ps[i] + at` holds two readable bytes.
#[target_feature(enable = "avx2,f16c")]
#[inline]
pub(crate) unsafe fn f16x8(ps: &[*const u8; ROWS], at: usize) -> __m256 {
    // SAFETY: the caller guarantees two readable bytes at each `ps[i] + at`.
    let h = |i: usize| unsafe { ps[i].add(at).cast::<i16>().read_unaligned() };
    _mm256_cvtph_ps(_mm_setr_epi16(
        h(0),
        h(1),
        h(2),
        h(3),
        h(4),
        h(5),
        h(6),
        h(7),
    ))
}

/// The f16 pairs `(d, m)` at the start of eight blocks (Q4_1, Q5_1), as f32 lanes.
///
/// # Safety
/// The CPU must support AVX2 and F16C; each `ps[i]` holds four readable bytes.
#[target_feature(enable = "avx2,f16c")]
#[inline]
pub(crate) unsafe fn f16_pairs8(ps: &[*const u8; ROWS]) -> (__m256, __m256) {
    // SAFETY: the caller guarantees four readable bytes at each `ps[i]`.
    let w = |i: usize| unsafe { ps[i].cast::<i32>().read_unaligned() };
    let v = _mm256_setr_epi32(w(0), w(1), w(2), w(3), w(4), w(5), w(6), w(7));
    // Per 128-bit lane: the four d's to bytes 0..8, the four m's to bytes 8..16; then the
    // quadwords in the order d0-3, d4-7, m0-3, m4-7.
    let split = _mm256_setr_epi8(
        0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15, 0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7,
        10, 11, 14, 15,
    );
    let t = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_shuffle_epi8(v, split));
    (
        _mm256_cvtph_ps(_mm256_castsi256_si128(t)),
        _mm256_cvtph_ps(_mm256_extracti128_si256::<1>(t)),
    )
}

/// The 32 nibbles of the 16 bytes at `p` in element order (low nibbles first), one per
/// byte.
///
/// # Safety
/// The CPU must support AVX2; `p` holds 16 readable bytes.
#[target_feature(enable = "avx2")]
#[inline]
pub(crate) unsafe fn nibbles32(p: *const u8) -> __m256i {
    // SAFETY: the caller guarantees 16 readable bytes.
    let q = unsafe { _mm_loadu_si128(p.cast()) };
    let v = _mm256_inserti128_si256::<1>(_mm256_castsi128_si256(q), _mm_srli_epi16::<4>(q));
    _mm256_and_si256(v, _mm256_set1_epi8(0x0F))
}

/// The 32 bits of the little-endian u32 at `p` as bytes, 0xFF where bit j is set.
///
/// # Safety
/// The CPU must support AVX2; `p` holds 4 readable bytes.
#[target_feature(enable = "avx2")]
#[inline]
pub(crate) unsafe fn bits32(p: *const u8) -> __m256i {
    // SAFETY: the caller guarantees 4 readable bytes.
    let v = _mm256_set1_epi32(unsafe { p.cast::<i32>().read_unaligned() });
    let spread = _mm256_setr_epi8(
        0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3,
        3, 3,
    );
    let bit = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
    _mm256_cmpeq_epi8(_mm256_and_si256(_mm256_shuffle_epi8(v, spread), bit), bit)
}

/// The 32 five-bit quants of a Q5 block in element order: nibbles from the 16 bytes at
/// `qs`, bit 4 from the little-endian u32 at `qh` (bit j for quant j).
///
/// # Safety
/// The CPU must support AVX2; `qh` holds 4 readable bytes and `qs` 16.
#[target_feature(enable = "avx2")]
#[inline]
pub(crate) unsafe fn five_bits32(qh: *const u8, qs: *const u8) -> __m256i {
    // SAFETY: the caller guarantees the readable bytes.
    let (hi, lo) = unsafe { (bits32(qh), nibbles32(qs)) };
    _mm256_or_si256(lo, _mm256_and_si256(hi, _mm256_set1_epi8(0x10)))
}

/// The 16-entry byte table `t` in both 128-bit lanes, for `vpshufb` lookups.
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
#[inline]
pub(crate) unsafe fn table32(t: &[i8; 16]) -> __m256i {
    // SAFETY: `t` is 16 bytes.
    _mm256_broadcastsi128_si256(unsafe { _mm_loadu_si128(t.as_ptr().cast()) })
}

/// Columns `at..at + G` as the kernels read them: per run the scales, quants and (for the
/// offset codes) `-128 · Σq`; per block the Q8_1 sums (formats with a min).
pub(crate) struct RunColumns<'c, const G: usize> {
    pub d: [&'c [f32]; G],
    pub q: [&'c [i8]; G],
    pub s: [&'c [f32]; G],
    pub bias: [&'c [i32]; G],
}

impl<'c, const G: usize> RunColumns<'c, G> {
    /// Columns `at..at + G` of `x` for a row of `nb` blocks of `F`, checked to cover them.
    ///
    /// # Panics
    /// If a column holds fewer runs than the row (or lacks the sums the format reads).
    pub fn new<F: Runs32>(x: &'c Columns<'_>, at: usize, nb: usize, offset: bool) -> Self {
        let runs = nb * F::SUBS;
        let c = RunColumns {
            d: std::array::from_fn(|c| x.q8(at + c).0),
            q: std::array::from_fn(|c| x.q8(at + c).1),
            s: std::array::from_fn(|c| if F::HAS_MIN { x.q8_sums(at + c) } else { &[] }),
            bias: std::array::from_fn(|c| if offset { x.q8_bias(at + c) } else { &[] }),
        };
        for i in 0..G {
            assert!(c.d[i].len() >= runs && c.q[i].len() >= runs * RUN);
            assert!(
                !F::HAS_MIN || c.s[i].len() >= nb,
                "the format reads Q8_1 sums"
            );
            assert!(
                !offset || c.bias[i].len() >= runs,
                "offset codes read Q8_0 sums"
            );
        }
        c
    }

    /// Quants 4k..4k + 4 of column c's run j as one i32 (the four bytes a kernel
    /// broadcasts to every lane).
    ///
    /// # Safety
    /// Column c holds run j ([`RunColumns::new`] checked the row's runs) and `k < 8`.
    #[inline(always)]
    pub unsafe fn quants4(&self, c: usize, j: usize, k: usize) -> i32 {
        debug_assert!(k < 8 && (j + 1) * RUN <= self.q[c].len());
        // SAFETY: the caller's guarantee: bytes 4k..4k + 4 of run j lie in the column.
        unsafe {
            self.q[c]
                .as_ptr()
                .add(j * RUN + 4 * k)
                .cast::<i32>()
                .read_unaligned()
        }
    }

    /// `-offset · Σq` of column c's run j (`bias` is `-128 · Σq`, a multiple of 128).
    #[inline(always)]
    pub fn correction(&self, c: usize, j: usize, offset: i32) -> i32 {
        (self.bias[c][j] >> 7) * offset
    }
}

/// Eight rows (`rows`, each `nb` blocks) · G columns of `x` from column `at`: lane i of
/// the result for column c is row i's dot product with column at + c, the bits of
/// [`super::dot_ref`].
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C; the rows hold `nb` whole blocks (checked).
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn eight_rows<F: Avx2Runs, const G: usize>(
    rows: &[&[u8]; ROWS],
    nb: usize,
    x: &RunColumns<'_, G>,
    next: *const u8,
) -> [__m256; G] {
    for r in rows {
        assert_eq!(r.len(), nb * F::BLOCK_BYTES);
    }
    let offset = !F::SIGNED && F::OFFSET != 0;
    let ptr: [*const u8; ROWS] = rows.map(|r| r.as_ptr());
    let ones = _mm256_set1_epi16(1);
    let share = ROWS * F::BLOCK_BYTES;
    let mut acc = [_mm256_setzero_ps(); G];
    let mut macc = [_mm256_setzero_ps(); G];
    for b in 0..nb {
        // The next eight rows (contiguous in the file), a block's share at a time.
        for line in (0..share).step_by(64) {
            let ahead = next.wrapping_add(b * share + line);
            _mm_prefetch::<_MM_HINT_T0>(ahead.cast());
        }
        // SAFETY: b < nb, so block b of each row is whole (asserted above).
        let at: [*const u8; ROWS] =
            std::array::from_fn(|i| unsafe { ptr[i].add(b * F::BLOCK_BYTES) });
        // SAFETY: as above; the CPU features are this function's.
        let (dw, mw) = unsafe { F::scales8(&at) };
        for sub in 0..F::SUBS {
            let j = b * F::SUBS + sub;
            // Row code `w` times column c's run j, as eight i32 partial sums.
            let dot = |w: __m256i, c: usize| -> __m256i {
                // SAFETY: every column covers the row's runs (RunColumns::new checked).
                let q = unsafe { _mm256_loadu_si256(x.q[c].as_ptr().add(j * RUN).cast()) };
                let p = if F::SIGNED {
                    _mm256_maddubs_epi16(_mm256_abs_epi8(q), _mm256_sign_epi8(w, q))
                } else {
                    _mm256_maddubs_epi16(w, q)
                };
                _mm256_madd_epi16(p, ones)
            };
            let mut half = [[_mm256_setzero_si256(); 2]; G];
            for h in 0..2 {
                let mut pairs = [[_mm256_setzero_si256(); 2]; G];
                for p in 0..2 {
                    let i = 4 * h + 2 * p;
                    // SAFETY: block b of rows i and i + 1 is whole; the features are ours.
                    let (w0, w1) = unsafe { (F::codes(at[i], sub), F::codes(at[i + 1], sub)) };
                    for c in 0..G {
                        pairs[c][p] = _mm256_hadd_epi32(dot(w0, c), dot(w1, c));
                    }
                }
                for c in 0..G {
                    half[c][h] = _mm256_hadd_epi32(pairs[c][0], pairs[c][1]);
                }
            }
            for c in 0..G {
                let (lo, hi) = (half[c][0], half[c][1]);
                let mut sums = _mm256_add_epi32(
                    _mm256_permute2x128_si256::<0x20>(lo, hi),
                    _mm256_permute2x128_si256::<0x31>(lo, hi),
                );
                if offset {
                    sums = _mm256_add_epi32(sums, _mm256_set1_epi32(x.correction(c, j, F::OFFSET)));
                }
                let scale = _mm256_mul_ps(dw, _mm256_set1_ps(x.d[c][j]));
                acc[c] = _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(sums), acc[c]);
            }
        }
        if F::HAS_MIN {
            for c in 0..G {
                macc[c] = _mm256_fmadd_ps(mw, _mm256_set1_ps(x.s[c][b]), macc[c]);
            }
        }
    }
    if F::HAS_MIN {
        std::array::from_fn(|c| _mm256_add_ps(acc[c], macc[c]))
    } else {
        acc
    }
}

/// Rows `first..first + out.len() / n` of a matrix of `F` · all n columns, row-major into
/// `out`: columns in groups of up to [`GROUP`] (each group's columns prepared once),
/// eight rows at a time (a last group of fewer rows repeats its last row in the spare
/// lanes and keeps only its own).
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn rows_avx2<F: Avx2Runs>(
    w: &Matrix<'_>,
    first: usize,
    x: &Columns<'_>,
    out: &mut [f32],
) {
    let n = x.count();
    let k = out.len() / n;
    if k == 0 {
        return;
    }
    assert!(first + k <= w.rows, "rows out of range");
    let nb = w.row_bytes() / F::BLOCK_BYTES;
    let offset = !F::SIGNED && F::OFFSET != 0;
    let mut done = 0;
    while done < n {
        let g = group_size(n, done, GROUP);
        macro_rules! run {
            ($g:literal) => {{
                let cols = RunColumns::<$g>::new::<F>(x, done, nb, offset);
                for g0 in (0..k).step_by(ROWS) {
                    let valid = (k - g0).min(ROWS);
                    let rows: [&[u8]; ROWS] =
                        std::array::from_fn(|i| w.row(first + g0 + i.min(valid - 1)));
                    let next = rows[0].as_ptr().wrapping_add(ROWS * w.row_bytes());
                    // SAFETY: the caller guarantees the CPU features; the kernel checks
                    // the sizes.
                    let r = unsafe { eight_rows::<F, $g>(&rows, nb, &cols, next) };
                    let mut lanes = [0.0f32; ROWS];
                    for (c, v) in r.into_iter().enumerate() {
                        // SAFETY: `lanes` holds eight f32.
                        unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), v) };
                        for (i, &l) in lanes.iter().take(valid).enumerate() {
                            out[(g0 + i) * n + done + c] = l;
                        }
                    }
                }
            }};
        }
        match g {
            4 => run!(4),
            3 => run!(3),
            2 => run!(2),
            _ => run!(1),
        }
        done += g;
    }
}

/// A run's codes as the lane kernels meet them: `(u, v)`, `u` the unsigned operand of `D`
/// (signed values as `v + 128` with a [`LaneDot::WIDE`] `D`, else `|v|`; unsigned codes as
/// they are) and `v` the signed values whose signs the sign trick puts on the quants (see
/// [`lane_quants`]).
///
/// # Safety
/// The CPU must support AVX2.
#[inline(always)]
unsafe fn lane_codes<F: Avx2Runs, D: LaneDot>(codes: __m256i) -> (__m256i, __m256i) {
    // SAFETY: the caller enables AVX2.
    unsafe {
        if !(F::SIGNED || F::OFFSET != 0) {
            return (codes, codes);
        }
        let v = if F::SIGNED {
            codes
        } else {
            _mm256_sub_epi8(codes, _mm256_set1_epi8(F::OFFSET as i8))
        };
        if D::WIDE {
            (_mm256_xor_si256(v, _mm256_set1_epi8(i8::MIN)), v)
        } else {
            (_mm256_sign_epi8(v, v), v)
        }
    }
}

/// The quants `qx` as [`lane_codes`]' `u` meets them: with `v`'s signs under the sign trick,
/// as they are otherwise.
///
/// # Safety
/// The CPU must support AVX2.
#[inline(always)]
unsafe fn lane_quants<F: Avx2Runs, D: LaneDot>(qx: __m256i, v: __m256i) -> __m256i {
    if (F::SIGNED || F::OFFSET != 0) && !D::WIDE {
        // SAFETY: the caller enables AVX2.
        unsafe { _mm256_sign_epi8(qx, v) }
    } else {
        qx
    }
}

/// Where a run's lane sums start: with signed values met as `v + 128` (a WIDE `D`), -128
/// times each lane's four quants' sum (`128 · q` by the same instruction, negated), so that
/// added to the `(v + 128) · q` of a row's codes it is exactly the lane's `v · q`; else 0.
///
/// # Safety
/// The CPU must support AVX2 and what `D` runs.
#[inline(always)]
unsafe fn lane_start<F: Avx2Runs, D: LaneDot>(qx: __m256i) -> __m256i {
    // SAFETY: the caller enables AVX2 and D's instruction set.
    unsafe {
        let zero = _mm256_setzero_si256();
        if D::WIDE && (F::SIGNED || F::OFFSET != 0) {
            _mm256_sub_epi32(zero, D::dot(zero, _mm256_set1_epi8(i8::MIN), qx))
        } else {
            zero
        }
    }
}

/// R rows of a format that sums in ggml's lane order ([`super::dot_lanes_ref`]) · G
/// columns: each row's runs decoded once (by [`Avx2Runs::codes`]), then per column the
/// eight lanes' exact integer sums by `D` (signed values met as `|v| · sign(q, v)`, or with
/// a [`LaneDot::WIDE`] `D`, `vpdpbusd`, as `(v + 128) · q` from a start of `-128 ·` the
/// lane's quants' sum: one XOR per row where the sign trick takes two `vpsignb`, and on Zen
/// 4 the one-column kernel computed 5–7 % more bytes a second from cache, a decode step
/// 20.1–28.1 ms against 22.4–25.0, alternated; unsigned codes met as `code · q`), converted
/// and fused into eight f32 lanes with the run's scale product; the mins' products fused
/// into a scalar per row and column. Row r · column c is the same instruction sequence
/// whatever else the pass holds: the bits of the reference. Two rows in one pass give a single column two independent chains of
/// fused adds (a decode step is otherwise bound by one chain's latency, with `vpdpbusd`).
/// With `NTA` the rows are prefetched [`PREFETCH_ONE`] ahead by `prefetchnta`, else
/// [`PREFETCH`] ahead by `prefetcht0`.
///
/// `rows[r]` may hold several rows one after the other (`out.len()` of them, the same
/// count in each): they are done in turn in one call, `out[i][r][c]` row i of `rows[r]`
/// with column c.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C and what `D` runs; every column's scales, quants
/// and (with a min) sums cover the rows' runs ([`rows_lanes`] checks them).
#[inline(always)]
unsafe fn lanes_block<
    F: Avx2Runs,
    D: LaneDot,
    const NTA: bool,
    const P: bool,
    const R: usize,
    const G: usize,
>(
    rows: [&[u8]; R],
    cols: &[LaneCol; G],
    out: &mut [[[f32; G]; R]],
) {
    let row_bytes = rows[0].len() / out.len().max(1);
    for r in rows {
        assert_eq!(r.len(), out.len() * row_bytes);
    }
    for (i, out) in out.iter_mut().enumerate() {
        let rows = rows.map(|r| &r[i * row_bytes..(i + 1) * row_bytes]);
        // SAFETY: the caller's guarantees, for each of the rows.
        unsafe { lanes_row::<F, D, NTA, P, R, G>(rows, cols, out) }
    }
}

/// One row of each of [`lanes_block`]'s R streams · its G columns.
///
/// # Safety
/// As [`lanes_block`].
#[inline(always)]
unsafe fn lanes_row<
    F: Avx2Runs,
    D: LaneDot,
    const NTA: bool,
    const P: bool,
    const R: usize,
    const G: usize,
>(
    rows: [&[u8]; R],
    cols: &[LaneCol; G],
    out: &mut [[f32; G]; R],
) {
    // SAFETY: the caller enables the instruction sets (AVX2, FMA, F16C and D's) and
    // guarantees whole blocks in every row and runs in every column: every pointer below
    // stays inside them (the scale lookups clamp to the last block).
    unsafe {
        let nb = rows[0].len() / F::BLOCK_BYTES;
        let base: [*const u8; R] = rows.map(|r| r.as_ptr());
        let zero = _mm256_setzero_si256();
        let mut acc = [[_mm256_setzero_ps(); G]; R];
        let mut acc2 = [[_mm256_setzero_ps(); G]; R];
        // With P, an odd last block's scale product and exact sum, fused last.
        let mut tail = [[(0.0f32, 0i32); G]; R];
        let tail_block = if P && nb % 2 == 1 { nb - 1 } else { usize::MAX };
        let mut macc = [[0.0f32; G]; R];
        // Per row, the mins of blocks b..b + 8, and per row and column the products of
        // those blocks' scales with the column's run scales (one run a block).
        const { assert!(F::SUBS == 1, "the scale products take one run a block") };
        let mut mws = [[0.0f32; ROWS]; R];
        let mut dprod = [[[0.0f32; ROWS]; G]; R];
        // Block b (the k-th of its group of eight, whose scales are in `dprod` and `mws`);
        // `$whole`: the group is whole, so the loop over it has a fixed count (unrolled,
        // its branches gone), every block asks for its stream's next bytes, and the odd
        // last block of P (nb odd: in a partial group) is not among them.
        macro_rules! block {
            ($b:expr, $k:expr, $whole:expr) => {{
                let (b, k): (usize, usize) = ($b, $k);
                // The matrix is streamed once: ask for the bytes a fixed distance ahead (a
                // task's rows are contiguous, so this runs into the next rows), one cache
                // line per 64 bytes (in a whole group a prefetch per block: redundant ones
                // cost a slot, not a read).
                let at = b * F::BLOCK_BYTES;
                if $whole || at % 64 < F::BLOCK_BYTES {
                    for r in 0..R {
                        if NTA {
                            let p = base[r].wrapping_add(at + PREFETCH_ONE);
                            _mm_prefetch::<_MM_HINT_NTA>(p.cast());
                        } else {
                            let p = base[r].wrapping_add(at + PREFETCH);
                            _mm_prefetch::<_MM_HINT_T0>(p.cast());
                        }
                    }
                }
                if F::HAS_MIN {
                    for c in 0..G {
                        // the columns cover nb blocks (the caller's guarantee).
                        let s = *cols[c].s.add(b);
                        for r in 0..R {
                            macc[r][c] = mws[r][k].mul_add(s, macc[r][c]);
                        }
                    }
                }
                for sub in 0..F::SUBS {
                    let j = b * F::SUBS + sub;
                    let mut unsigned = [zero; R];
                    let mut signed = [zero; R];
                    for r in 0..R {
                        // block b < nb is a whole block of the row; the caller enables the
                        // features.
                        let codes = F::codes(base[r].add(at), sub);
                        (unsigned[r], signed[r]) = lane_codes::<F, D>(codes);
                    }
                    for c in 0..G {
                        // run j's 32 quants lie inside the column (the caller's guarantee).
                        let qx = _mm256_loadu_si256(cols[c].q.add(j * RUN).cast());
                        let start = lane_start::<F, D>(qx);
                        for r in 0..R {
                            let s = lane_quants::<F, D>(qx, signed[r]);
                            // the caller enables D's instruction set.
                            let sums = D::dot(start, unsigned[r], s);
                            let d = dprod[r][c][k];
                            if !$whole && b == tail_block {
                                let mut lanes = [0i32; 8];
                                // `lanes` holds eight i32.
                                _mm256_storeu_si256(lanes.as_mut_ptr().cast(), sums);
                                tail[r][c] = (d, lanes.iter().sum());
                                continue;
                            }
                            // groups start at multiples of eight: b and k have one parity.
                            let a = if P && k % 2 == 1 {
                                &mut acc2[r][c]
                            } else {
                                &mut acc[r][c]
                            };
                            *a = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sums), *a);
                        }
                    }
                }
            }};
        }
        let mut b0 = 0;
        while b0 < nb {
            for r in 0..R {
                // The scales (and mins) of blocks b0..b0 + 8 in one conversion; past the
                // row's end the last block stands in (its lanes are never read).
                let ps: [*const u8; ROWS] = if b0 + ROWS <= nb {
                    // blocks b0..b0 + 8 lie in the row.
                    let p = base[r].add(b0 * F::BLOCK_BYTES);
                    std::array::from_fn(|k| p.add(k * F::BLOCK_BYTES))
                } else {
                    std::array::from_fn(|k| {
                        // the index is clamped to the row's last block.
                        base[r].add((b0 + k).min(nb - 1) * F::BLOCK_BYTES)
                    })
                };
                // every pointer points at a whole block of the row; the caller enables the
                // features.
                let (d8, m8) = F::scales8(&ps);
                // `mws[r]` holds eight f32.
                _mm256_storeu_ps(mws[r].as_mut_ptr(), m8);
                // The scale products with each column's run scales, one multiply of eight
                // lanes each (the products a scalar multiply per block gives, bit for
                // bit); past the row's end (a column holds nb runs) the lanes are never
                // read.
                for c in 0..G {
                    let dx = if b0 + ROWS <= nb {
                        // the column holds runs b0..b0 + 8.
                        _mm256_loadu_ps(cols[c].d.add(b0))
                    } else {
                        let mut part = [0.0f32; ROWS];
                        for (k, v) in part.iter_mut().enumerate().take(nb - b0) {
                            // run b0 + k < nb lies in the column.
                            *v = *cols[c].d.add(b0 + k);
                        }
                        _mm256_loadu_ps(part.as_ptr())
                    };
                    // `dprod[r][c]` holds eight f32.
                    _mm256_storeu_ps(dprod[r][c].as_mut_ptr(), _mm256_mul_ps(d8, dx));
                }
            }
            if b0 + ROWS <= nb {
                for k in 0..ROWS {
                    block!(b0 + k, k, true);
                }
            } else {
                for k in 0..nb - b0 {
                    block!(b0 + k, k, false);
                }
            }
            b0 += ROWS;
        }
        for r in 0..R {
            for c in 0..G {
                if P {
                    let sum = crate::x86_64::hsum(_mm256_add_ps(acc[r][c], acc2[r][c]));
                    let (d, isum) = tail[r][c];
                    out[r][c] = if tail_block < nb {
                        sum + d * isum as f32
                    } else {
                        sum
                    };
                    continue;
                }
                let sum = crate::x86_64::hsum(acc[r][c]);
                out[r][c] = if F::HAS_MIN { sum + macc[r][c] } else { sum };
            }
        }
    }
}

/// [`lanes_block`] for one column and two streams of rows (a decode step's products), as
/// one straight loop over each pair of rows' blocks: the same instruction sequence per
/// block, row and column, so the same bits, with a pair's scale products and mins held
/// for a group of eight blocks and nothing else kept across blocks. With `PF` the rows
/// are asked for [`PREFETCH_ONE`] ahead by `prefetchnta` (on AVX2); with `vpdpbusd` they
/// are not: the prefetches cost issue slots, and on Zen 4 the products read memory as
/// fast without them (measured at reads of ~31 GB/s). On Zen 4, from the caches (6 MB of 1,024- or 3,072-value rows,
/// alternated in one process, `docs/PERFORMANCE.md` issue #22): one thread 37.0 GB/s as
/// a [`lanes_block`] pass, 42.4 as this, 43.5 as a bare loop of the same instructions;
/// two threads on 3,072-value rows 57.2 → 75.1 GB/s; from memory the same as before.
///
/// `rows[r]` holds `out.len()` rows one after the other; `out[i][r]` is row i of `rows[r]`
/// with the column.
///
/// # Safety
/// As [`lanes_block`].
#[inline(always)]
unsafe fn lanes_one<F: Avx2Runs, D: LaneDot, const PF: bool, const P: bool>(
    rows: [&[u8]; 2],
    col: &LaneCol,
    out: &mut [[f32; 2]],
) {
    const { assert!(F::SUBS == 1, "the scale products take one run a block") };
    let row_bytes = rows[0].len() / out.len().max(1);
    for r in rows {
        assert_eq!(r.len(), out.len() * row_bytes);
    }
    let nb = row_bytes / F::BLOCK_BYTES;
    // SAFETY: the caller enables the instruction sets (AVX2, FMA, F16C and D's) and
    // guarantees whole blocks in every row and nb runs in the column: every pointer below
    // stays inside them (the scale lookups of a partial group clamp to the last block).
    unsafe {
        let tail_block = if P && nb % 2 == 1 { nb - 1 } else { usize::MAX };
        for (i, out) in out.iter_mut().enumerate() {
            let base = rows.map(|r| r.as_ptr().add(i * row_bytes));
            let mut acc = [_mm256_setzero_ps(); 2];
            let mut acc2 = [_mm256_setzero_ps(); 2];
            // With P, an odd last block's scale product and exact sum, fused last.
            let mut tail = [(0.0f32, 0i32); 2];
            let mut macc = [0.0f32; 2];
            // Block b of both rows, `$d[r]` its scale product for row r and `$m[r]` its
            // min.
            macro_rules! block {
                ($b:expr, $d:expr, $m:expr, $whole:expr) => {{
                    let b: usize = $b;
                    let d: [f32; 2] = $d;
                    let at = b * F::BLOCK_BYTES;
                    if F::HAS_MIN {
                        let m: [f32; 2] = $m;
                        // the column covers nb blocks (the caller's guarantee).
                        let s = *col.s.add(b);
                        for r in 0..2 {
                            macc[r] = m[r].mul_add(s, macc[r]);
                        }
                    }
                    // In a whole group a prefetch per block (redundant ones cost a slot,
                    // not a read), else one per line.
                    if PF && ($whole || at % 64 < F::BLOCK_BYTES) {
                        for p in base {
                            _mm_prefetch::<_MM_HINT_NTA>(p.wrapping_add(at + PREFETCH_ONE).cast());
                        }
                    }
                    // run b's 32 quants lie inside the column (the caller's guarantee).
                    let qx = _mm256_loadu_si256(col.q.add(b * RUN).cast());
                    let start = lane_start::<F, D>(qx);
                    for r in 0..2 {
                        // block b < nb is a whole block of the row.
                        let (u, v) = lane_codes::<F, D>(F::codes(base[r].add(at), 0));
                        let s = lane_quants::<F, D>(qx, v);
                        let sums = D::dot(start, u, s);
                        if !$whole && b == tail_block {
                            let mut lanes = [0i32; 8];
                            // `lanes` holds eight i32.
                            _mm256_storeu_si256(lanes.as_mut_ptr().cast(), sums);
                            tail[r] = (d[r], lanes.iter().sum());
                            continue;
                        }
                        let a = if P && b % 2 == 1 {
                            &mut acc2[r]
                        } else {
                            &mut acc[r]
                        };
                        *a = _mm256_fmadd_ps(_mm256_set1_ps(d[r]), _mm256_cvtepi32_ps(sums), *a);
                    }
                }};
            }
            let mut b0 = 0;
            while b0 + ROWS <= nb {
                // blocks b0..b0 + 8 lie in the rows and their runs in the column: the
                // scale products of eight blocks in one multiply a row (a scalar
                // multiply's bits).
                let dx = _mm256_loadu_ps(col.d.add(b0));
                let mut dprod = [[0.0f32; ROWS]; 2];
                let mut mws = [[0.0f32; ROWS]; 2];
                for r in 0..2 {
                    let p = base[r].add(b0 * F::BLOCK_BYTES);
                    let (d8, m8) = F::scales8(&std::array::from_fn(|k| p.add(k * F::BLOCK_BYTES)));
                    // `dprod[r]` and `mws[r]` hold eight f32.
                    _mm256_storeu_ps(dprod[r].as_mut_ptr(), _mm256_mul_ps(d8, dx));
                    _mm256_storeu_ps(mws[r].as_mut_ptr(), m8);
                }
                for k in 0..ROWS {
                    block!(
                        b0 + k,
                        [dprod[0][k], dprod[1][k]],
                        [mws[0][k], mws[1][k]],
                        true
                    );
                }
                b0 += ROWS;
            }
            if b0 < nb {
                // A partial group: its pointers clamp to the last block (lanes past the
                // row's end are never read), its column scales copied in.
                let mut part = [0.0f32; ROWS];
                for (k, v) in part.iter_mut().enumerate().take(nb - b0) {
                    // run b0 + k < nb lies in the column.
                    *v = *col.d.add(b0 + k);
                }
                let dx = _mm256_loadu_ps(part.as_ptr());
                let mut dprod = [[0.0f32; ROWS]; 2];
                let mut mws = [[0.0f32; ROWS]; 2];
                for r in 0..2 {
                    let ps =
                        std::array::from_fn(|k| base[r].add((b0 + k).min(nb - 1) * F::BLOCK_BYTES));
                    let (d8, m8) = F::scales8(&ps);
                    // `dprod[r]` and `mws[r]` hold eight f32.
                    _mm256_storeu_ps(dprod[r].as_mut_ptr(), _mm256_mul_ps(d8, dx));
                    _mm256_storeu_ps(mws[r].as_mut_ptr(), m8);
                }
                for k in 0..nb - b0 {
                    block!(
                        b0 + k,
                        [dprod[0][k], dprod[1][k]],
                        [mws[0][k], mws[1][k]],
                        false
                    );
                }
            }
            for r in 0..2 {
                out[r] = if P {
                    let sum = crate::x86_64::hsum(_mm256_add_ps(acc[r], acc2[r]));
                    let (d, isum) = tail[r];
                    if tail_block < nb {
                        sum + d * isum as f32
                    } else {
                        sum
                    }
                } else if F::HAS_MIN {
                    crate::x86_64::hsum(acc[r]) + macc[r]
                } else {
                    crate::x86_64::hsum(acc[r])
                };
            }
        }
    }
}

/// [`lanes_one`] on AVX2.
///
/// # Safety
/// As [`lanes_one`]; the CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn lanes_one_avx2<F: Avx2Runs, const P: bool>(
    rows: [&[u8]; 2],
    col: &LaneCol,
    out: &mut [[f32; 2]],
) {
    // SAFETY: the caller's guarantees; the features are this function's.
    unsafe { lanes_one::<F, Maddubs, true, P>(rows, col, out) }
}

/// [`lanes_one`] with `vpdpbusd`.
///
/// # Safety
/// As [`lanes_one`]; the CPU must support AVX2, FMA, F16C and AVX-512 F, VL and VNNI.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512vnni")]
unsafe fn lanes_one_vnni<F: Avx2Runs, const P: bool>(
    rows: [&[u8]; 2],
    col: &LaneCol,
    out: &mut [[f32; 2]],
) {
    // SAFETY: the caller's guarantees; the features are this function's.
    unsafe { lanes_one::<F, Dpbusd, false, P>(rows, col, out) }
}

/// [`lanes_block`] on AVX2.
///
/// # Safety
/// As [`lanes_block`]; the CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn lanes_block_avx2<F: Avx2Runs, const P: bool, const R: usize, const G: usize>(
    rows: [&[u8]; R],
    cols: &[LaneCol; G],
    out: &mut [[[f32; G]; R]],
) {
    // SAFETY: the caller's guarantees; the features are this function's.
    unsafe { lanes_block::<F, Maddubs, true, P, R, G>(rows, cols, out) }
}

/// [`lanes_block`] with `vpdpbusd`.
///
/// # Safety
/// As [`lanes_block`]; the CPU must support AVX2, FMA, F16C and AVX-512 F, VL and VNNI.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512vnni")]
unsafe fn lanes_block_vnni<F: Avx2Runs, const P: bool, const R: usize, const G: usize>(
    rows: [&[u8]; R],
    cols: &[LaneCol; G],
    out: &mut [[[f32; G]; R]],
) {
    // SAFETY: the caller's guarantees; the features are this function's.
    unsafe {
        if G == 1 {
            // One column (an odd last row; the others go to `lanes_one`): asked for by
            // `prefetchnta` (see PREFETCH_ONE).
            lanes_block::<F, Dpbusd, true, P, R, G>(rows, cols, out)
        } else {
            lanes_block::<F, Dpbusd, false, P, R, G>(rows, cols, out)
        }
    }
}

/// Columns sharing one pass of [`lanes_block`] over a row (a verify's eight in one).
const LANE_GROUP: usize = 8;

/// Rows per stream in one call of [`lanes_one`] (rows i and k/2 + i of a task): the
/// kernel's entry and exit cost as much as a few blocks, paid once per call.
const SPLIT_RUN: usize = 32;

/// A column as [`lanes_block`] reads it: its run scales, quants and (Q8_1) block sums.
#[derive(Clone, Copy)]
struct LaneCol {
    d: *const f32,
    q: *const i8,
    s: *const f32,
}

/// Rows `first..first + out.len() / n` of a lane-order format · all n columns, row-major
/// into `out`: one or two columns two rows per pass (for one column rows i and k/2 + i of
/// the task's k, [`PREFETCH_ONE`]), more in groups of up to
/// [`LANE_GROUP`] one row per pass; a product's bits never depend on its pass.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C, and with `vnni` AVX-512 F, VL and VNNI.
unsafe fn rows_lanes<F: Avx2Runs, const P: bool>(
    w: &Matrix<'_>,
    first: usize,
    x: &Columns<'_>,
    out: &mut [f32],
    vnni: bool,
) {
    let n = x.count();
    let nb = w.cols / RUN / F::SUBS;
    let cols: Vec<LaneCol> = (0..n)
        .map(|c| {
            let (d, q) = x.q8(c);
            let s = x.q8_sums(c);
            assert!(d.len() >= nb * F::SUBS && q.len() >= nb * F::SUBS * RUN);
            assert!(!F::HAS_MIN || s.len() >= nb);
            LaneCol {
                d: d.as_ptr(),
                q: q.as_ptr(),
                s: s.as_ptr(),
            }
        })
        .collect();
    let row = |i: usize| {
        let r = w.row(first + i);
        assert_eq!(r.len(), nb * F::BLOCK_BYTES);
        r
    };
    macro_rules! block {
        ($r:literal, $g:literal, $rows:expr, $cols:expr, $o:expr) => {
            // SAFETY: the caller guarantees the features; the columns cover nb blocks
            // (asserted above) and every row is nb whole blocks.
            unsafe {
                if vnni {
                    lanes_block_vnni::<F, P, $r, $g>($rows, $cols, $o)
                } else {
                    lanes_block_avx2::<F, P, $r, $g>($rows, $cols, $o)
                }
            }
        };
    }
    if n <= 2 {
        // Two rows a pass: for one column rows p and k/2 + p (each row then streams
        // through its own half of the task's rows, see PREFETCH_ONE), for two rows 2p and
        // 2p + 1; an odd last row alone.
        let k = out.len() / n;
        if n == 1 {
            // Both halves' rows run on in one call of `lanes_one`, up to SPLIT_RUN rows
            // each, so the kernel's entry and exit are not paid per pair of rows.
            let half = k / 2;
            let rb = w.row_bytes();
            let rows_from = |i: usize, m: usize| {
                let from = (first + i) * rb;
                &w.data[from..from + m * rb]
            };
            let mut p = 0;
            while p < half {
                let m = SPLIT_RUN.min(half - p);
                let pair = [rows_from(p, m), rows_from(half + p, m)];
                let mut o = [[0.0f32; 2]; SPLIT_RUN];
                // SAFETY: the caller guarantees the features; the column covers nb blocks
                // (asserted above) and every row is nb whole blocks.
                unsafe {
                    if vnni {
                        lanes_one_vnni::<F, P>(pair, &cols[0], &mut o[..m])
                    } else {
                        lanes_one_avx2::<F, P>(pair, &cols[0], &mut o[..m])
                    }
                }
                for (i, o) in o[..m].iter().enumerate() {
                    out[p + i] = o[0];
                    out[half + p + i] = o[1];
                }
                p += m;
            }
        } else {
            for p in 0..k / 2 {
                let (a, b) = (2 * p, 2 * p + 1);
                let mut o = [[[0.0f32; 2]; 2]];
                block!(2, 2, [row(a), row(b)], &[cols[0], cols[1]], &mut o);
                out[2 * a..2 * a + 2].copy_from_slice(&o[0][0]);
                out[2 * b..2 * b + 2].copy_from_slice(&o[0][1]);
            }
        }
        if k % 2 == 1 {
            let last = k - 1;
            if n == 1 {
                let mut o = [[[0.0f32; 1]; 1]];
                block!(1, 1, [row(last)], &[cols[0]], &mut o);
                out[last] = o[0][0][0];
            } else {
                let mut o = [[[0.0f32; 2]; 1]];
                block!(1, 2, [row(last)], &[cols[0], cols[1]], &mut o);
                out[2 * last..2 * last + 2].copy_from_slice(&o[0][0]);
            }
        }
        return;
    }
    for_each_group(out, n, LANE_GROUP, |i, done, o| {
        macro_rules! group {
            ($g:literal) => {{
                let mut r = [[[0.0f32; $g]; 1]];
                let c: &[LaneCol; $g] = cols[done..done + $g].try_into().expect("a group");
                block!(1, $g, [row(i)], c, &mut r);
                o.copy_from_slice(&r[0][0]);
            }};
        }
        match o.len() {
            8 => group!(8),
            7 => group!(7),
            6 => group!(6),
            5 => group!(5),
            4 => group!(4),
            3 => group!(3),
            _ => unreachable!("groups of three to eight columns when n > 2"),
        }
    });
}

/// [`rows_lanes`] with the AVX2 lane sums.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
pub(crate) unsafe fn rows_lanes_avx2<F: Avx2Runs, const P: bool>(
    w: &Matrix<'_>,
    first: usize,
    x: &Columns<'_>,
    out: &mut [f32],
) {
    // SAFETY: the caller's guarantee.
    unsafe { rows_lanes::<F, P>(w, first, x, out, false) }
}

/// [`rows_lanes`] with `vpdpbusd` lane sums.
///
/// # Safety
/// The CPU must support AVX2, FMA, F16C and AVX-512 F, VL and VNNI.
pub(crate) unsafe fn rows_lanes_vnni<F: Avx2Runs, const P: bool>(
    w: &Matrix<'_>,
    first: usize,
    x: &Columns<'_>,
    out: &mut [f32],
) {
    // SAFETY: the caller's guarantee.
    unsafe { rows_lanes::<F, P>(w, first, x, out, true) }
}

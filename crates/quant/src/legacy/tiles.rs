//! Packed tiles for the formats of 32-value runs, and their AVX-512 VNNI and AVX2 kernels.
//!
//! In the file each row's blocks follow one another, so a kernel reading it must gather
//! eight rows' runs into one register's lanes with a reduction per run and column (see
//! [`super::x86_64`]). A packed tile holds 16 rows with their codes already in lanes:
//! block `b` of tile `t` (rows 16t..16t + 16) is [`TileRuns::TILE_BLOCK_BYTES`] bytes at
//! `(t · nb + b) · TILE_BLOCK_BYTES`, laid out by the format ([`TileRuns::pack_block`]) so
//! that its decoder ([`TileRuns::tile_codes`]) yields, per run, eight 64-byte registers
//! whose 32-bit lane r holds four consecutive codes of row r. Eight `vpdpbusd` with four
//! activation quants broadcast then leave each row's whole run sum in its own lane, exact
//! (unsigned codes times signed quants; codes `v + OFFSET`, corrected by `-OFFSET · Σq`).
//! The float steps are [`super::dot_ref`]'s, lane for lane: so a packed row gives the bits
//! the file's layout gives (tested). Each tile block is decoded once and shared by up to
//! [`GROUP`] columns; a column's instruction sequence does not depend on its group.
//!
//! The AVX2 kernel ([`tile_avx2`]) reads the same tiles as two halves of eight rows (the
//! 32-byte halves of each 64-byte register): per run and column eight `vpmaddubsw` of a
//! code register by four broadcast quants, added in i16 as far as the format's codes allow
//! ([`TileRuns::I16_SUMS`]), widened once by `vpmaddwd` — again each row's run sum in its
//! lane, with no reduction. `vpmaddubsw` saturates pair sums beyond ±32767, so only
//! formats whose codes are at most 127 pack for it ([`TileRuns::AVX2`]; not IQ4_NL).
//!
//! Tiles are whole: rows past the last multiple of 16 stay in the file's layout only and
//! go to the AVX2 kernel. Tasks of the product driver start on multiples of 16 rows
//! (`gemm::TASK_ROW_ALIGN`), so a tile never straddles two tasks.

// The kernels walk several per-column arrays by one index.
#![allow(clippy::needless_range_loop)]

use std::arch::x86_64::*;

use super::x86_64::{rows_avx2, Avx2Runs, RunColumns};
use super::Runs32;
use crate::columns::Columns;
use crate::matrix::{group_size, packed_tiles, Matrix, Packed};

/// Rows per packed tile (the 32-bit lanes of an AVX-512 register).
pub(crate) const TILE_ROWS: usize = 16;

const _: () = assert!(crate::gemm::TASK_ROW_ALIGN.is_multiple_of(TILE_ROWS));

/// Columns sharing one pass over a tile.
pub(crate) const GROUP: usize = 8;

/// How far ahead of the block in use the AVX2 own-order tile kernel
/// ([`packed_rows_avx2`]) asks for the packed bytes, by `prefetcht0` (a task's tiles are
/// contiguous, so this runs into the next tile). Measured first with the `vpdpbusd` kernel
/// on a Zen 4 host with fast memory (the seed drafter's block, 2.03 GB of Q8_0 layers, 8
/// columns, 2 threads, alternated runs): 4 and 8 KiB took 103–108 ms where the same block
/// of the next tile (122–313 KB ahead, past the 32 KiB L1) took 115–117 and 16–32 KiB
/// 112–121.
const TILE_PREFETCH: usize = 8192;

/// How far ahead the `vpdpbusd` run-order kernel ([`packed_rows`]) asks for the packed
/// bytes, by `prefetcht1` (into the L2, not the L1). On a Zen 4 host whose memory answered
/// slowly (a plain two-thread read 30–45 GB/s), the seed drafter's block with 8 KiB
/// `prefetcht0` took 155–188 ms (median of six 170), with `prefetcht1` 121–144 at 8 KiB
/// (median of five 137) and 121–154 at 16 KiB (126); `prefetcht2` 117–151, `prefetchnta`
/// 190–203, none 230–259 (alternated runs, `docs/PERFORMANCE.md` issue #22). A line asked
/// for into the L1 holds one of the L1's few miss buffers until memory answers, one asked
/// for into the L2 one of the L2's many, so more of the stream is in flight while the core
/// computes.
const TILE_PREFETCH_L2: usize = 16384;

/// Up to how many columns a pass shifts the integer sums rather than the code registers
/// (formats with [`TileRuns::HIGH_X16`]): one shift per column against four per run.
const X16_SUMS_UP_TO: usize = 2;

/// What the packed kernel needs of a format: how 16 rows' blocks are re-laid, and how a
/// re-laid block decodes.
pub(crate) trait TileRuns: Runs32 {
    /// Bytes of one block of a tile (16 rows).
    const TILE_BLOCK_BYTES: usize;
    /// What the codes add to the values (`code = v + OFFSET`, unsigned).
    const TILE_OFFSET: i32 = 0;

    /// Re-lays block b of 16 rows (`blocks[r]` is row r's) into `out`
    /// (`TILE_BLOCK_BYTES`).
    fn pack_block(blocks: &[&[u8]; TILE_ROWS], out: &mut [u8]);

    /// Run `sub` of the tile block at `p`: register k, lane r = codes 4k..4k + 4 of row
    /// r's run.
    ///
    /// # Safety
    /// The CPU must support AVX-512 F and BW; `p` points at a whole tile block.
    unsafe fn tile_codes(p: *const u8, sub: usize) -> [__m512i; 8];

    /// The 16 rows' scales `d_w` and mins `m_w` (zero without a min).
    ///
    /// # Safety
    /// The CPU must support AVX-512 F; `p` points at a whole tile block.
    unsafe fn tile_scales(p: *const u8) -> (__m512, __m512);

    /// Whether [`TileRuns::tile_codes`] gives registers 4..8 as sixteen times the codes
    /// (high nibbles masked in place, not shifted down): the kernel then shifts either the
    /// integer sums of those registers (few columns: one shift per column) or the
    /// registers themselves (many columns: four shifts per run), the same sums exactly.
    const HIGH_X16: bool = false;

    /// Whether [`TileRuns::tile_codes`] gives the signed values themselves (Q8_0), met as
    /// `|w| · ±q` with the sign of `w` by the lane-order kernel (the AVX2 sign trick's
    /// products, its 8-bit wrap included), and as codes `w + 128` corrected by `-128 · Σq`
    /// (exact) by the run-order one, [`rows_own_vnni`].
    const TILE_SIGNED: bool = false;

    /// Whether the AVX2 kernel reads the tiles: its `vpmaddubsw` saturates pair sums, so
    /// every code must be at most 127.
    const AVX2: bool = true;
    /// How many `vpmaddubsw` results (pair sums, `|·| ≤ 2 · 128 · max code`) the AVX2
    /// kernel may add in i16 before widening: 8 for codes up to 15, 4 up to 31, …
    const I16_SUMS: usize = 1;

    /// Half `half` of run `sub` of the tile block at `p` (rows 8 half..8 half + 8):
    /// register k, lane i = codes 4k..4k + 4 of row 8 half + i.
    ///
    /// # Safety
    /// The CPU must support AVX2; `p` points at a whole tile block.
    unsafe fn tile_codes8(p: *const u8, sub: usize, half: usize) -> [__m256i; 8];

    /// Register `k` of [`TileRuns::tile_codes8`]`(p, 0, half)` alone (formats of one run a
    /// block read it straight from the tile).
    ///
    /// # Safety
    /// As [`TileRuns::tile_codes8`]; `k < 8`.
    #[inline(always)]
    unsafe fn tile_code8(p: *const u8, k: usize, half: usize) -> __m256i {
        // SAFETY: the caller's guarantees are tile_codes8's.
        unsafe { Self::tile_codes8(p, 0, half)[k] }
    }

    /// The scales and mins of rows 8 half..8 half + 8.
    ///
    /// # Safety
    /// The CPU must support AVX2 and F16C; `p` points at a whole tile block.
    unsafe fn tile_scales8(p: *const u8, half: usize) -> (__m256, __m256);
}

/// Packs bytes `at..at + 16` of each of 16 blocks (nibbles) into `out` (256 bytes):
/// register k (64 bytes at 64k) lane r = bytes at + 4k..at + 4k + 4 of block r, so that
/// [`tile_nibbles`] finds codes 4k..4k + 4 (low nibbles) and 16 + 4k.. (high) in lanes.
pub(crate) fn pack_nibbles(blocks: &[&[u8]; TILE_ROWS], at: usize, out: &mut [u8]) {
    for (r, b) in blocks.iter().enumerate() {
        for k in 0..4 {
            out[64 * k + 4 * r..64 * k + 4 * r + 4].copy_from_slice(&b[at + 4 * k..at + 4 * k + 4]);
        }
    }
}

/// Packs the 16 f16 at byte `at` of each block into `out` (32 bytes, row order).
pub(crate) fn pack_f16(blocks: &[&[u8]; TILE_ROWS], at: usize, out: &mut [u8]) {
    for (r, b) in blocks.iter().enumerate() {
        out[2 * r..2 * r + 2].copy_from_slice(&b[at..at + 2]);
    }
}

/// Packs 32 bits per row (`words[r]`, bit j for element j) into eight 64-bit masks in
/// `out` (64 bytes): mask k bit 4r + e = bit 4k + e of row r, the byte mask of register k
/// of [`TileRuns::tile_codes`].
pub(crate) fn pack_bits(words: &[u32; TILE_ROWS], out: &mut [u8]) {
    for k in 0..8 {
        let mut mask = 0u64;
        for (r, &w) in words.iter().enumerate() {
            mask |= u64::from((w >> (4 * k)) & 0xF) << (4 * r);
        }
        out[8 * k..8 * k + 8].copy_from_slice(&mask.to_le_bytes());
    }
}

/// Byte mask k of the eight packed by [`pack_bits`] at `p`.
///
/// # Safety
/// The CPU must support AVX-512 BW; `p` holds 64 readable bytes.
#[target_feature(enable = "avx512bw")]
#[inline]
pub(crate) unsafe fn tile_mask(p: *const u8, k: usize) -> __mmask64 {
    // SAFETY: the caller guarantees 64 readable bytes; k < 8.
    _cvtu64_mask64(unsafe { p.add(8 * k).cast::<u64>().read_unaligned() })
}

/// The nibbles packed by [`pack_nibbles`] at `p`, one per byte: register k < 4 the low
/// nibbles of packed register k, register k + 4 its high nibbles.
///
/// # Safety
/// The CPU must support AVX-512 F and BW; `p` holds 256 readable bytes.
#[target_feature(enable = "avx512f,avx512bw")]
#[inline]
pub(crate) unsafe fn tile_nibbles(p: *const u8) -> [__m512i; 8] {
    let low = _mm512_set1_epi8(0x0F);
    // SAFETY: the caller guarantees 256 readable bytes.
    let n: [__m512i; 4] =
        std::array::from_fn(|k| unsafe { _mm512_loadu_si512(p.add(64 * k).cast()) });
    std::array::from_fn(|k| {
        if k < 4 {
            _mm512_and_si512(n[k], low)
        } else {
            _mm512_and_si512(_mm512_srli_epi16::<4>(n[k - 4]), low)
        }
    })
}

/// [`tile_nibbles`] with registers 4..8 left as sixteen times the high nibbles (`n &
/// 0xF0`, no shift; see [`TileRuns::HIGH_X16`]).
///
/// # Safety
/// The CPU must support AVX-512 F and BW; `p` holds 256 readable bytes.
#[target_feature(enable = "avx512f,avx512bw")]
#[inline]
pub(crate) unsafe fn tile_nibbles_x16(p: *const u8) -> [__m512i; 8] {
    let low = _mm512_set1_epi8(0x0F);
    // SAFETY: the caller guarantees 256 readable bytes.
    let n: [__m512i; 4] =
        std::array::from_fn(|k| unsafe { _mm512_loadu_si512(p.add(64 * k).cast()) });
    std::array::from_fn(|k| {
        if k < 4 {
            _mm512_and_si512(n[k], low)
        } else {
            _mm512_andnot_si512(low, n[k - 4])
        }
    })
}

/// Five-bit codes from the nibbles packed by [`pack_nibbles`] at `nib` and the fifth
/// bits packed by [`pack_bits`] at `masks`: [`tile_nibbles`] plus 16 where the bit is set.
///
/// # Safety
/// The CPU must support AVX-512 F and BW; `nib` holds 256 readable bytes, `masks` 64.
#[target_feature(enable = "avx512f,avx512bw")]
#[inline]
pub(crate) unsafe fn tile_fifth_bits(nib: *const u8, masks: *const u8) -> [__m512i; 8] {
    let sixteen = _mm512_set1_epi8(16);
    // SAFETY: the caller guarantees the readable bytes.
    let lo = unsafe { tile_nibbles(nib) };
    std::array::from_fn(|k| {
        // SAFETY: as above.
        let high = unsafe { tile_mask(masks, k) };
        _mm512_mask_add_epi8(lo[k], high, lo[k], sixteen)
    })
}

/// The 16 f16 packed by [`pack_f16`] at `p`, as f32 lanes.
///
/// # Safety
/// The CPU must support AVX-512 F; `p` holds 32 readable bytes.
#[target_feature(enable = "avx512f")]
#[inline]
pub(crate) unsafe fn tile_f16(p: *const u8) -> __m512 {
    // SAFETY: the caller guarantees 32 readable bytes.
    _mm512_cvtph_ps(unsafe { _mm256_loadu_si256(p.cast()) })
}

/// Half `half` of the nibbles packed by [`pack_nibbles`] at `p` (rows 8 half.. 8 half +
/// 8), one per byte, as [`tile_nibbles`] orders them.
///
/// # Safety
/// The CPU must support AVX2; `p` holds 256 readable bytes; `half < 2`.
#[target_feature(enable = "avx2")]
#[inline]
pub(crate) unsafe fn tile_nibbles8(p: *const u8, half: usize) -> [__m256i; 8] {
    let low = _mm256_set1_epi8(0x0F);
    // SAFETY: the caller guarantees 256 readable bytes and half < 2.
    let n: [__m256i; 4] =
        std::array::from_fn(|k| unsafe { _mm256_loadu_si256(p.add(64 * k + 32 * half).cast()) });
    std::array::from_fn(|k| {
        if k < 4 {
            _mm256_and_si256(n[k], low)
        } else {
            _mm256_and_si256(_mm256_srli_epi16::<4>(n[k - 4]), low)
        }
    })
}

/// Half `half` of byte mask k packed by [`pack_bits`] at `p`, as bytes: 0xFF where set.
///
/// # Safety
/// The CPU must support AVX2; `p` holds 64 readable bytes; `k < 8`, `half < 2`.
#[target_feature(enable = "avx2")]
#[inline]
pub(crate) unsafe fn tile_mask8(p: *const u8, k: usize, half: usize) -> __m256i {
    // SAFETY: the caller guarantees the readable bytes: mask k's half is 4 bytes at 8k + 4
    // half.
    unsafe { super::x86_64::bits32(p.add(8 * k + 4 * half)) }
}

/// Half `half` of [`tile_fifth_bits`]: nibbles at `nib`, fifth bits' masks at `masks`.
///
/// # Safety
/// The CPU must support AVX2; `nib` holds 256 readable bytes, `masks` 64; `half < 2`.
#[target_feature(enable = "avx2")]
#[inline]
pub(crate) unsafe fn tile_fifth_bits8(
    nib: *const u8,
    masks: *const u8,
    half: usize,
) -> [__m256i; 8] {
    let sixteen = _mm256_set1_epi8(16);
    // SAFETY: the caller guarantees the readable bytes and half < 2.
    let lo = unsafe { tile_nibbles8(nib, half) };
    std::array::from_fn(|k| {
        // SAFETY: as above.
        let high = unsafe { tile_mask8(masks, k, half) };
        _mm256_or_si256(lo[k], _mm256_and_si256(high, sixteen))
    })
}

/// Half `half` of the 16 f16 packed by [`pack_f16`] at `p`, as f32 lanes.
///
/// # Safety
/// The CPU must support AVX2 and F16C; `p` holds 32 readable bytes; `half < 2`.
#[target_feature(enable = "avx2,f16c")]
#[inline]
pub(crate) unsafe fn tile_f16_8(p: *const u8, half: usize) -> __m256 {
    // SAFETY: the caller guarantees 32 readable bytes and half < 2.
    _mm256_cvtph_ps(unsafe { _mm_loadu_si128(p.add(16 * half).cast()) })
}

/// Whole tiles of a matrix of `F`, re-laid (see the module documentation); `None` when
/// the matrix is of another type or has no whole tile. Fails, without allocating, if the
/// memory cannot be reserved.
pub(crate) fn pack<F: TileRuns>(
    m: &Matrix<'_>,
) -> Result<Option<Packed>, std::collections::TryReserveError> {
    let tiles = m.rows / TILE_ROWS;
    if m.ty != F::TYPE || tiles == 0 {
        return Ok(None);
    }
    let nb = m.row_bytes() / F::BLOCK_BYTES;
    let tile_bytes = nb * F::TILE_BLOCK_BYTES;
    Packed::build(m, tiles * tile_bytes, |out| {
        for (t, tile) in out.chunks_exact_mut(tile_bytes).enumerate() {
            let rows: [&[u8]; TILE_ROWS] = std::array::from_fn(|r| m.row(t * TILE_ROWS + r));
            for (b, chunk) in tile.chunks_exact_mut(F::TILE_BLOCK_BYTES).enumerate() {
                let blocks = rows.map(|r| &r[b * F::BLOCK_BYTES..(b + 1) * F::BLOCK_BYTES]);
                F::pack_block(&blocks, chunk);
            }
        }
    })
    .map(Some)
}

/// One packed tile (16 rows of `nb` blocks) · G columns: lane r of column c's result is
/// row r's dot product with column c, the bits of [`super::dot_runs_ref`] (`dot_ref`
/// itself but for Q8_0, whose signed tiles are read as `v + 128`). While it walks the tile
/// it prefetches as `ahead` says, block by block.
///
/// # Safety
/// The CPU must support AVX-512 F, VL, BW and VNNI plus AVX2, FMA and F16C; `tile` is one
/// whole tile of `nb` blocks (checked).
#[target_feature(enable = "avx512f,avx512vl,avx512bw,avx512vnni,avx2,fma,f16c")]
unsafe fn tile<F: TileRuns, const G: usize>(
    tile: &[u8],
    nb: usize,
    x: &RunColumns<'_, G>,
    ahead: Ahead,
) -> [__m512; G] {
    assert_eq!(tile.len(), nb * F::TILE_BLOCK_BYTES);
    let offset = F::TILE_OFFSET != 0;
    let flip = _mm512_set1_epi8(i8::MIN);
    let mut acc = [_mm512_setzero_ps(); G];
    let mut macc = [_mm512_setzero_ps(); G];
    for b in 0..nb {
        ahead.block::<F>(b);
        // SAFETY: b < nb, so the block lies inside the tile (asserted above).
        let p = unsafe { tile.as_ptr().add(b * F::TILE_BLOCK_BYTES) };
        // SAFETY: p is a whole tile block; the features are this function's.
        let (dw, mw) = unsafe { F::tile_scales(p) };
        for sub in 0..F::SUBS {
            let j = b * F::SUBS + sub;
            // SAFETY: as above.
            let mut codes = unsafe { F::tile_codes(p, sub) };
            if F::TILE_SIGNED {
                // Signed values as unsigned codes `v + 128` (the top bit flipped), met as
                // `code · q` and corrected by `-128 · Σq` below: exact for every value.
                for code in &mut codes {
                    *code = _mm512_xor_si512(*code, flip);
                }
            }
            let shift_sums = F::HIGH_X16 && G <= X16_SUMS_UP_TO;
            if F::HIGH_X16 && !shift_sums {
                for code in &mut codes[4..] {
                    // Per byte: (16 q) >> 4 within each 16-bit lane moves no bit across bytes,
                    // as the low four bits of every byte are clear.
                    *code = _mm512_srli_epi16::<4>(*code);
                }
            }
            for c in 0..G {
                // SAFETY: every column covers the row's runs (RunColumns::new checked), and
                // the calls below take k < 8.
                let x4 = |k: usize| _mm512_set1_epi32(unsafe { x.quants4(c, j, k) });
                let start = if F::TILE_SIGNED {
                    _mm512_set1_epi32(x.bias[c][j])
                } else if offset {
                    _mm512_set1_epi32(x.correction(c, j, F::TILE_OFFSET))
                } else {
                    _mm512_setzero_si512()
                };
                let mut s0 = _mm512_dpbusd_epi32(start, codes[0], x4(0));
                let mut s1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), codes[4], x4(4));
                for k in 1..4 {
                    s0 = _mm512_dpbusd_epi32(s0, codes[k], x4(k));
                    s1 = _mm512_dpbusd_epi32(s1, codes[k + 4], x4(k + 4));
                }
                // With sixteen times the codes, s1 is exactly 16 times its sum.
                let s1 = if shift_sums {
                    _mm512_srai_epi32::<4>(s1)
                } else {
                    s1
                };
                let sums = _mm512_add_epi32(s0, s1);
                let scale = _mm512_mul_ps(dw, _mm512_set1_ps(x.d[c][j]));
                acc[c] = _mm512_fmadd_ps(scale, _mm512_cvtepi32_ps(sums), acc[c]);
            }
        }
        if F::HAS_MIN {
            for c in 0..G {
                macc[c] = _mm512_fmadd_ps(mw, _mm512_set1_ps(x.s[c][b]), macc[c]);
            }
        }
    }
    if F::HAS_MIN {
        std::array::from_fn(|c| _mm512_add_ps(acc[c], macc[c]))
    } else {
        acc
    }
}

/// Where a tile kernel prefetches while it walks its blocks: at block b, the lines of
/// `start + b · TILE_BLOCK_BYTES ..` (a fixed distance ahead, or the same block of the next
/// tile), or nothing.
/// Prefetching never faults, so `start` may point past the matrix.
#[derive(Clone, Copy)]
struct Ahead {
    start: *const u8,
    on: bool,
    hint: Hint,
}

/// Where a prefetch asks for its lines.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Hint {
    /// `prefetcht0`: into the L1.
    L1,
    /// `prefetcht1`: into the L2 ([`TILE_PREFETCH_L2`]).
    L2,
    /// `prefetchnta`: close to the core without displacing the L2 (a pass that reads each
    /// line once: the one-column own kernel on AVX2).
    Once,
}

impl Ahead {
    #[inline(always)]
    fn block<F: TileRuns>(self, b: usize) {
        if !self.on {
            return;
        }
        for off in (0..F::TILE_BLOCK_BYTES).step_by(64) {
            let p = self.start.wrapping_add(b * F::TILE_BLOCK_BYTES + off);
            // SAFETY: a prefetch is a hint: it reads nothing and never faults.
            unsafe {
                match self.hint {
                    Hint::L1 => _mm_prefetch::<_MM_HINT_T0>(p.cast()),
                    Hint::L2 => _mm_prefetch::<_MM_HINT_T1>(p.cast()),
                    Hint::Once => _mm_prefetch::<_MM_HINT_NTA>(p.cast()),
                }
            }
        }
    }
}

/// The rows of a task that lie in whole packed tiles (when the matrix has them and the
/// task starts on a tile), every column, into `out`; returns how many rows it did.
/// Column groups go outside, tiles inside, so a group's columns are prepared once per
/// task; the first group prefetches [`TILE_PREFETCH_L2`] ahead while it walks a tile (the
/// later groups find the task's tiles cached).
///
/// # Safety
/// As [`tile`].
#[target_feature(enable = "avx512f,avx512vl,avx512bw,avx512vnni,avx2,fma,f16c")]
unsafe fn packed_rows<F: TileRuns>(
    w: &Matrix<'_>,
    first: usize,
    x: &Columns<'_>,
    out: &mut [f32],
) -> usize {
    let n = x.count();
    let nb = w.row_bytes() / F::BLOCK_BYTES;
    let tile_bytes = nb * F::TILE_BLOCK_BYTES;
    let Some((packed, tiles)) = packed_tiles(w, first, out.len() / n, TILE_ROWS, tile_bytes) else {
        return 0;
    };
    // Signed tiles read `-128 · Σq` per run too.
    let offset = F::TILE_OFFSET != 0 || F::TILE_SIGNED;
    let mut done = 0;
    while done < n {
        let g = group_size(n, done, GROUP);
        macro_rules! run {
            ($g:literal) => {{
                let cols = RunColumns::<$g>::new::<F>(x, done, nb, offset);
                for t in 0..tiles {
                    let at = (first / TILE_ROWS + t) * tile_bytes;
                    let ahead = Ahead {
                        start: packed.as_ptr().wrapping_add(at + TILE_PREFETCH_L2),
                        on: done == 0,
                        hint: Hint::L2,
                    };
                    let tile_at = &packed[at..at + tile_bytes];
                    // SAFETY: the caller guarantees the CPU features; the kernel checks
                    // the sizes.
                    let r = unsafe { tile::<F, $g>(tile_at, nb, &cols, ahead) };
                    let mut lanes = [0.0f32; TILE_ROWS];
                    for (c, v) in r.into_iter().enumerate() {
                        // SAFETY: `lanes` holds sixteen f32.
                        unsafe { _mm512_storeu_ps(lanes.as_mut_ptr(), v) };
                        for (i, &l) in lanes.iter().enumerate() {
                            out[(t * TILE_ROWS + i) * n + done + c] = l;
                        }
                    }
                }
            }};
        }
        match g {
            8 => run!(8),
            7 => run!(7),
            6 => run!(6),
            5 => run!(5),
            4 => run!(4),
            3 => run!(3),
            2 => run!(2),
            _ => run!(1),
        }
        done += g;
    }
    tiles * TILE_ROWS
}

/// Columns sharing one pass over half a tile in the AVX2 kernel.
pub(crate) const GROUP_AVX2: usize = 4;

/// Half `half` of one packed tile (rows 8 half..8 half + 8 of `nb` blocks) · G columns
/// with AVX2: lane i of column c's result is row 8 half + i's dot product with column
/// c, the bits of [`super::dot_ref`]. Per run and column: eight `vpmaddubsw` of a code
/// register by four broadcast activation quants, added in i16 by [`TileRuns::I16_SUMS`]
/// (no overflow for the format's codes), widened by `vpmaddwd`: each row's whole run sum
/// in its lane, exact; then the reference's float steps.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C; `tile` is one whole tile of `nb` blocks
/// (checked); `half < 2`.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn tile_avx2<F: TileRuns, const G: usize>(
    tile: &[u8],
    nb: usize,
    x: &RunColumns<'_, G>,
    half: usize,
    ahead: Ahead,
) -> [__m256; G] {
    assert_eq!(tile.len(), nb * F::TILE_BLOCK_BYTES);
    assert!(half < 2 && F::AVX2 && F::I16_SUMS >= 1 && 8 % F::I16_SUMS == 0);
    let offset = F::TILE_OFFSET != 0;
    let ones = _mm256_set1_epi16(1);
    let mut acc = [_mm256_setzero_ps(); G];
    let mut macc = [_mm256_setzero_ps(); G];
    for b in 0..nb {
        ahead.block::<F>(b);
        // SAFETY: b < nb, so the block lies inside the tile (asserted above).
        let p = unsafe { tile.as_ptr().add(b * F::TILE_BLOCK_BYTES) };
        // SAFETY: p is a whole tile block; the features are this function's.
        let (dw, mw) = unsafe { F::tile_scales8(p, half) };
        for sub in 0..F::SUBS {
            let j = b * F::SUBS + sub;
            // SAFETY: as above.
            let codes = unsafe { F::tile_codes8(p, sub, half) };
            let mut sums = [_mm256_setzero_si256(); G];
            let mut part = [_mm256_setzero_si256(); G];
            for k in 0..8 {
                for c in 0..G {
                    // SAFETY: every column covers the row's runs (RunColumns::new checked);
                    // k < 8.
                    let q = unsafe { x.quants4(c, j, k) };
                    let p = _mm256_maddubs_epi16(codes[k], _mm256_set1_epi32(q));
                    part[c] = if k % F::I16_SUMS == 0 {
                        p
                    } else {
                        _mm256_add_epi16(part[c], p)
                    };
                    if k % F::I16_SUMS == F::I16_SUMS - 1 {
                        sums[c] = _mm256_add_epi32(sums[c], _mm256_madd_epi16(part[c], ones));
                    }
                }
            }
            for c in 0..G {
                if offset {
                    let corr = _mm256_set1_epi32(x.correction(c, j, F::TILE_OFFSET));
                    sums[c] = _mm256_add_epi32(sums[c], corr);
                }
                let scale = _mm256_mul_ps(dw, _mm256_set1_ps(x.d[c][j]));
                acc[c] = _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(sums[c]), acc[c]);
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

/// [`packed_rows`] with an AVX2 kernel, each tile in two halves of eight rows: the
/// llama.cpp order's [`tile_avx2`] in groups of [`GROUP_AVX2`] columns, or with `OWN`
/// dspark's own order's [`tile_own_avx2`] in groups of [`GROUP_OWN_AVX2`] (a drafter's
/// block of eight in one). A tile's second half follows its first and finds the tile's
/// lines in the L2; the first half of the first group prefetches as it walks (the same
/// block of the next tile, or with `OWN` [`TILE_PREFETCH`] ahead).
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn packed_rows_avx2<F: TileRuns, const OWN: bool>(
    w: &Matrix<'_>,
    first: usize,
    x: &Columns<'_>,
    out: &mut [f32],
) -> usize {
    let n = x.count();
    let nb = w.row_bytes() / F::BLOCK_BYTES;
    let tile_bytes = nb * F::TILE_BLOCK_BYTES;
    let Some((packed, tiles)) = packed_tiles(w, first, out.len() / n, TILE_ROWS, tile_bytes) else {
        return 0;
    };
    let offset = !OWN && F::TILE_OFFSET != 0;
    let (group, ahead_by) = if OWN {
        (GROUP_OWN_AVX2, TILE_PREFETCH)
    } else {
        (GROUP_AVX2, tile_bytes)
    };
    // One column in the own order walks each tile once, both halves in one pass, its
    // lines asked for by `prefetchnta`: on Zen 2 one core then reads 16 GB/s, against 11
    // with a half a pass or with `prefetcht0`.
    let one_pass = OWN && n == 1;
    let mut done = 0;
    while done < n {
        let g = group_size(n, done, group);
        macro_rules! run {
            ($g:literal) => {{
                let cols = RunColumns::<$g>::new::<F>(x, done, nb, offset);
                for t in 0..tiles {
                    let at = (first / TILE_ROWS + t) * tile_bytes;
                    let tile_at = &packed[at..at + tile_bytes];
                    let mut half = 0;
                    while half < 2 {
                        let ahead = Ahead {
                            start: packed.as_ptr().wrapping_add(at + ahead_by),
                            on: done == 0 && half == 0,
                            hint: if one_pass { Hint::Once } else { Hint::L1 },
                        };
                        // SAFETY: the caller guarantees the CPU features; the kernels
                        // check the sizes.
                        let r: [[__m256; $g]; 2] = unsafe {
                            if one_pass {
                                tile_own_avx2::<F, $g, 2>(tile_at, nb, &cols, half, ahead)
                            } else if OWN {
                                let [r] =
                                    tile_own_avx2::<F, $g, 1>(tile_at, nb, &cols, half, ahead);
                                [r; 2]
                            } else {
                                [tile_avx2::<F, $g>(tile_at, nb, &cols, half, ahead); 2]
                            }
                        };
                        let halves = if one_pass { 2 } else { 1 };
                        for (h, r) in r.iter().take(halves).enumerate() {
                            let mut lanes = [0.0f32; 8];
                            for (c, &v) in r.iter().enumerate() {
                                // SAFETY: `lanes` holds eight f32.
                                unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), v) };
                                for (i, &l) in lanes.iter().enumerate() {
                                    out[(t * TILE_ROWS + 8 * (half + h) + i) * n + done + c] = l;
                                }
                            }
                        }
                        half += halves;
                    }
                }
            }};
        }
        match g {
            8 => run!(8),
            7 => run!(7),
            6 => run!(6),
            5 => run!(5),
            4 => run!(4),
            3 => run!(3),
            2 => run!(2),
            _ => run!(1),
        }
        done += g;
    }
    tiles * TILE_ROWS
}

/// The AVX2 row kernel with packed tiles: rows in whole tiles by [`tile_avx2`], the
/// others by the AVX2 kernel on the file's layout (the same bits).
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn rows_avx2_tiles<F: TileRuns + Avx2Runs>(
    w: &Matrix<'_>,
    first: usize,
    x: &Columns<'_>,
    out: &mut [f32],
) {
    let n = x.count();
    // SAFETY: the caller guarantees the CPU features; the kernel checks sizes.
    let tiled = unsafe { packed_rows_avx2::<F, false>(w, first, x, out) };
    if tiled * n < out.len() {
        // SAFETY: as above.
        unsafe { rows_avx2::<F>(w, first + tiled, x, &mut out[tiled * n..]) };
    }
}

/// The AVX-512 VNNI row kernel: rows in whole packed tiles by [`tile`], the others by the
/// AVX2 kernel (the same bits).
///
/// # Safety
/// The CPU must support AVX-512 F, VL, BW and VNNI plus AVX2, FMA and F16C.
#[target_feature(enable = "avx512f,avx512vl,avx512bw,avx512vnni,avx2,fma,f16c")]
pub(crate) unsafe fn rows_vnni<F: TileRuns + Avx2Runs>(
    w: &Matrix<'_>,
    first: usize,
    x: &Columns<'_>,
    out: &mut [f32],
) {
    let n = x.count();
    // SAFETY: the caller guarantees the CPU features; the kernel checks sizes.
    let tiled = unsafe { packed_rows::<F>(w, first, x, out) };
    if tiled * n < out.len() {
        // SAFETY: AVX2, FMA and F16C are among this function's requirements.
        unsafe { rows_avx2::<F>(w, first + tiled, x, &mut out[tiled * n..]) };
    }
}

/// dspark's own order for a lane-order format with signed tiles (Q8_0): rows in whole
/// packed tiles by [`tile`] (the run order, exact integer sums: the bits of
/// [`super::dot_runs_ref`]), the others, and every row of a matrix without its packed
/// copy, by that reference itself (the product driver gives this kernel only matrices
/// with a packed copy, whose tasks start on whole tiles, so that part is at most a
/// matrix's last 15 rows).
///
/// # Safety
/// The CPU must support AVX-512 F, VL, BW and VNNI plus AVX2, FMA and F16C.
#[target_feature(enable = "avx512f,avx512vl,avx512bw,avx512vnni,avx2,fma,f16c")]
pub(crate) unsafe fn rows_own_vnni<F: TileRuns>(
    w: &Matrix<'_>,
    first: usize,
    x: &Columns<'_>,
    out: &mut [f32],
) {
    let n = x.count();
    // SAFETY: the caller guarantees the CPU features; the kernel checks sizes.
    let tiled = unsafe { packed_rows::<F>(w, first, x, out) };
    if tiled * n < out.len() {
        crate::format::rows_by_dot(
            w,
            first + tiled,
            x,
            &mut out[tiled * n..],
            super::dot_runs_ref::<F>,
        );
    }
}

/// Columns sharing one pass over half a tile in the AVX2 own-order kernel
/// ([`tile_own_avx2`]): a drafter's block of 8 in one pass, its sums in eight registers.
const GROUP_OWN_AVX2: usize = 8;

/// H halves from `half` of one packed tile of a format with signed tiles (Q8_0), rows
/// 8 half..8 (half + H) of `nb` blocks, · G columns with AVX2, in dspark's own order: lane
/// i of half h's column c is row 8 (half + h) + i's dot product with column c, the bits
/// of [`super::dot_runs_ref`] (each half's instructions are the same whatever else the
/// pass holds). One column takes both halves in one pass (H = 2), so that each of the
/// tile's lines is read once, in order; more columns take a half at a time (H = 1), the
/// second half finding the tile's lines in the L2. Without `vpdpbusd` the signed values are met by the sign trick
/// inside the run order: per register k of a run, `|w|` once for the group (`vpabsb`),
/// then per column the four broadcast quants given the signs of the values (`vpsignb`),
/// one `vpmaddubsw` (pair sums at most 2 · 128 · 127, no saturation) and one `vpmaddwd`
/// into the row's exact run sum; then one conversion and fused add per run and column,
/// where the lane order takes one per row. Exact for every value and every quant but
/// -128, which the activation quantizer gives only to a block whose scale is zero (its
/// products then add nothing either way).
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C; `tile` is one whole tile of `nb` blocks
/// (checked); `half < 2`.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn tile_own_avx2<F: TileRuns, const G: usize, const H: usize>(
    tile: &[u8],
    nb: usize,
    x: &RunColumns<'_, G>,
    half: usize,
    ahead: Ahead,
) -> [[__m256; G]; H] {
    const { assert!(F::SUBS == 1 && H >= 1 && H <= 2) };
    assert_eq!(tile.len(), nb * F::TILE_BLOCK_BYTES);
    assert!(half + H <= 2 && F::TILE_SIGNED);
    let ones = _mm256_set1_epi16(1);
    let mut acc = [[_mm256_setzero_ps(); G]; H];
    // The columns' run scales cut to the row, so that reading run j's needs no check.
    let d: [&[f32]; G] = std::array::from_fn(|c| &x.d[c][..nb]);
    for j in 0..nb {
        ahead.block::<F>(j);
        // SAFETY: j < nb, so the block lies inside the tile (asserted above).
        let p = unsafe { tile.as_ptr().add(j * F::TILE_BLOCK_BYTES) };
        // SAFETY: p is a whole tile block, half + h < 2; the features are this function's.
        let dw: [__m256; H] = std::array::from_fn(|h| unsafe { F::tile_scales8(p, half + h).0 });
        let mut sums = [[_mm256_setzero_si256(); G]; H];
        for k in 0..8 {
            for h in 0..H {
                // SAFETY: as above.
                let code = unsafe { F::tile_code8(p, k, half + h) };
                let mag = _mm256_abs_epi8(code);
                for c in 0..G {
                    // SAFETY: every column covers the row's runs (RunColumns::new checked);
                    // k < 8.
                    let q = unsafe { x.quants4(c, j, k) };
                    let signed = _mm256_sign_epi8(_mm256_set1_epi32(q), code);
                    let pairs = _mm256_maddubs_epi16(mag, signed);
                    sums[h][c] = _mm256_add_epi32(sums[h][c], _mm256_madd_epi16(pairs, ones));
                }
            }
        }
        for h in 0..H {
            for c in 0..G {
                let scale = _mm256_mul_ps(dw[h], _mm256_set1_ps(d[c][j]));
                acc[h][c] = _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(sums[h][c]), acc[h][c]);
            }
        }
    }
    acc
}

/// dspark's own order for a format with signed tiles (Q8_0) on AVX2 without VNNI: rows in
/// whole packed tiles by [`tile_own_avx2`] (the bits of [`super::dot_runs_ref`]), the
/// others by that reference itself (as [`rows_own_vnni`]: at most a matrix's last 15
/// rows).
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn rows_own_avx2<F: TileRuns>(
    w: &Matrix<'_>,
    first: usize,
    x: &Columns<'_>,
    out: &mut [f32],
) {
    let n = x.count();
    // SAFETY: the caller guarantees the CPU features; the kernel checks sizes.
    let tiled = unsafe { packed_rows_avx2::<F, true>(w, first, x, out) };
    if tiled * n < out.len() {
        crate::format::rows_by_dot(
            w,
            first + tiled,
            x,
            &mut out[tiled * n..],
            super::dot_runs_ref::<F>,
        );
    }
}

/// Columns sharing one pass over a tile in ggml's lane order ([`tile_lanes`]): each
/// column holds eight accumulators, so groups stay small.
const GROUP_LANES: usize = 2;

/// One packed tile (16 rows of `nb` blocks) · G columns of a format that sums in ggml's
/// vec_dot lane order ([`super::dot_lanes_ref`]): register k of a run's codes holds lane
/// k (values 4k..4k + 4) of each of the 16 rows, so one `vpdpbusd` with those four
/// activation quants broadcast is lane k's exact integer sum for every row (unsigned codes;
/// an offset's `-OFFSET · Σq` of the four quants starts it); lane k is fused into its own
/// accumulator with the run's scale product, the mins into another; at the end each row's
/// eight lanes are added in [`crate::lanes::hsum8`]'s order, then its mins. Lane r of
/// column c's result: the bits of the reference for row r. While it walks the tile it
/// prefetches `ahead`.
///
/// # Safety
/// The CPU must support AVX-512 F, VL, BW and VNNI plus AVX2, FMA and F16C; `tile` is one
/// whole tile of `nb` blocks (checked).
#[target_feature(enable = "avx512f,avx512vl,avx512bw,avx512vnni,avx2,fma,f16c")]
unsafe fn tile_lanes<F: TileRuns, const G: usize>(
    tile: &[u8],
    nb: usize,
    x: &RunColumns<'_, G>,
    ahead: Ahead,
) -> [__m512; G] {
    assert_eq!(tile.len(), nb * F::TILE_BLOCK_BYTES);
    let zero = _mm512_setzero_si512();
    let offset = _mm512_set1_epi8(F::TILE_OFFSET as i8);
    let mut acc = [[_mm512_setzero_ps(); 8]; G];
    let mut macc = [_mm512_setzero_ps(); G];
    for b in 0..nb {
        ahead.block::<F>(b);
        // SAFETY: b < nb, so the block lies inside the tile (asserted above).
        let p = unsafe { tile.as_ptr().add(b * F::TILE_BLOCK_BYTES) };
        // SAFETY: p is a whole tile block; the features are this function's.
        let (dw, mw) = unsafe { F::tile_scales(p) };
        if F::HAS_MIN {
            for c in 0..G {
                macc[c] = _mm512_fmadd_ps(mw, _mm512_set1_ps(x.s[c][b]), macc[c]);
            }
        }
        for sub in 0..F::SUBS {
            let j = b * F::SUBS + sub;
            // SAFETY: as above.
            let mut codes = unsafe { F::tile_codes(p, sub) };
            if F::HIGH_X16 {
                for code in &mut codes[4..] {
                    // Per byte: (16 q) >> 4 within each 16-bit lane moves no bit across
                    // bytes, as the low four bits of every byte are clear.
                    *code = _mm512_srli_epi16::<4>(*code);
                }
            }
            // Signed values: their magnitudes as the unsigned operand, their signs as byte
            // masks (a zero value's magnitude makes its product zero whatever the sign).
            let mut negative = [0 as __mmask64; 8];
            if F::TILE_SIGNED {
                for k in 0..8 {
                    negative[k] = _mm512_movepi8_mask(codes[k]);
                    codes[k] = _mm512_abs_epi8(codes[k]);
                }
            }
            for c in 0..G {
                let scale = _mm512_mul_ps(dw, _mm512_set1_ps(x.d[c][j]));
                for k in 0..8 {
                    // SAFETY: every column covers the row's runs (RunColumns::new checked);
                    // k < 8.
                    let xk = _mm512_set1_epi32(unsafe { x.quants4(c, j, k) });
                    let start = if F::TILE_OFFSET != 0 {
                        _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, offset, xk))
                    } else {
                        zero
                    };
                    // q negated (8-bit wrap) where the value is negative.
                    let xk = if F::TILE_SIGNED {
                        _mm512_mask_sub_epi8(xk, negative[k], zero, xk)
                    } else {
                        xk
                    };
                    let sums = _mm512_dpbusd_epi32(start, codes[k], xk);
                    acc[c][k] = _mm512_fmadd_ps(scale, _mm512_cvtepi32_ps(sums), acc[c][k]);
                }
            }
        }
    }
    std::array::from_fn(|c| {
        let a = &acc[c];
        let s4: [__m512; 4] = std::array::from_fn(|k| _mm512_add_ps(a[k], a[k + 4]));
        let s2 = [_mm512_add_ps(s4[0], s4[2]), _mm512_add_ps(s4[1], s4[3])];
        let sum = _mm512_add_ps(s2[0], s2[1]);
        if F::HAS_MIN {
            _mm512_add_ps(sum, macc[c])
        } else {
            sum
        }
    })
}

/// The lane-order rows of a task that lie in whole packed tiles, every column, into
/// `out` ([`tile_lanes`]); returns how many rows it did (see [`packed_rows`]).
///
/// # Safety
/// As [`tile_lanes`].
#[target_feature(enable = "avx512f,avx512vl,avx512bw,avx512vnni,avx2,fma,f16c")]
unsafe fn packed_rows_lanes<F: TileRuns>(
    w: &Matrix<'_>,
    first: usize,
    x: &Columns<'_>,
    out: &mut [f32],
) -> usize {
    let n = x.count();
    let nb = w.row_bytes() / F::BLOCK_BYTES;
    let tile_bytes = nb * F::TILE_BLOCK_BYTES;
    let Some((packed, tiles)) = packed_tiles(w, first, out.len() / n, TILE_ROWS, tile_bytes) else {
        return 0;
    };
    let mut done = 0;
    while done < n {
        let g = group_size(n, done, GROUP_LANES);
        macro_rules! run {
            ($g:literal) => {{
                let cols = RunColumns::<$g>::new::<F>(x, done, nb, false);
                for t in 0..tiles {
                    let at = (first / TILE_ROWS + t) * tile_bytes;
                    let ahead = Ahead {
                        start: packed.as_ptr().wrapping_add(at + tile_bytes),
                        on: done == 0,
                        hint: Hint::L1,
                    };
                    let tile_at = &packed[at..at + tile_bytes];
                    // SAFETY: the caller guarantees the CPU features; the kernel checks
                    // the sizes.
                    let r = unsafe { tile_lanes::<F, $g>(tile_at, nb, &cols, ahead) };
                    let mut lanes = [0.0f32; TILE_ROWS];
                    for (c, v) in r.into_iter().enumerate() {
                        // SAFETY: `lanes` holds sixteen f32.
                        unsafe { _mm512_storeu_ps(lanes.as_mut_ptr(), v) };
                        for (i, &l) in lanes.iter().enumerate() {
                            out[(t * TILE_ROWS + i) * n + done + c] = l;
                        }
                    }
                }
            }};
        }
        match g {
            2 => run!(2),
            _ => run!(1),
        }
        done += g;
    }
    tiles * TILE_ROWS
}

/// The AVX-512 VNNI row kernel of the lane-order formats: rows in whole packed tiles by
/// [`tile_lanes`], the others by the file-layout lane kernel (the same bits).
///
/// # Safety
/// The CPU must support AVX-512 F, VL, BW and VNNI plus AVX2, FMA and F16C.
#[target_feature(enable = "avx512f,avx512vl,avx512bw,avx512vnni,avx2,fma,f16c")]
pub(crate) unsafe fn rows_lanes_vnni<F: TileRuns + Avx2Runs>(
    w: &Matrix<'_>,
    first: usize,
    x: &Columns<'_>,
    out: &mut [f32],
) {
    let n = x.count();
    // SAFETY: the caller guarantees the CPU features; the kernel checks sizes.
    let tiled = unsafe { packed_rows_lanes::<F>(w, first, x, out) };
    if tiled * n < out.len() {
        // SAFETY: the features are this function's.
        unsafe {
            super::x86_64::rows_lanes_vnni::<F, false>(w, first + tiled, x, &mut out[tiled * n..])
        };
    }
}

//! x86-64 sums of IQ1_S and IQ1_M superblocks for the shared row skeleton
//! (`superblock/x86_64.rs`), reached only through their kernel-table rows (`iq1_s.rs`,
//! `iq1_m.rs`) and held to their `dot_ref` bit for bit by the tests.
//!
//! Both formats spell a value as `(grid + δ/8) · ls · d` with δ = ±1; eight times it,
//! `8·grid + δ`, is an integer from −9 to 9, and `u = 8·grid + δ + 9` an unsigned byte
//! (0..18): the grid words of [`crate::iq1s_grid`]'s kernel form (`8·(grid + 1)`) plus 0
//! (δ = −1) or 2 (δ = +1). The 32 grid indices of a superblock are decoded as i32 vectors
//! (eight at a time, with the delta addends), the grid words fetched four to a register
//! (by `vpgatherdq` for one column, by scalar loads for several: each measured faster
//! there) and the delta added once per sub-block of 32; per column `vpmaddubsw(u, q)` (pairs at most 2 · 18 · 128, no
//! saturation) and `vpmaddwd` by the scale of each run of sixteen. The `+9` comes back
//! out once per superblock: `Σ_r ls_r · (−9) · Σ_run q`, the Q8_K sums of sixteen times
//! sixteen coefficients, one more `vpmaddwd` per column. So each column's lanes add up to
//! `Σ_r ls_r · Σ_run (8·grid + δ) · q`, the reference's integer.

// The kernels walk several per-column arrays by one index.
#![allow(clippy::needless_range_loop)]

use std::arch::x86_64::*;
use std::marker::PhantomData;

use super::BLOCK_BYTES;
use crate::iq1s_grid::GRID_X8;
use crate::superblock::x86_64::{Q8kBlock, Superblock};

/// Where an IQ1 format keeps its fields, decoded a vector at a time.
pub(crate) trait Iq1Layout {
    /// Bytes per superblock.
    const BYTES: usize;
    /// The f16 bits of the superblock scale.
    ///
    /// # Safety
    /// `block` points at a whole superblock.
    unsafe fn d_bits(block: *const u8) -> u16;
    /// The grid indices (0..2048) of groups `8k..8k + 8` (`k < 4`; sub-blocks 2k and
    /// 2k + 1) as i32 lanes, and each group's delta addend as i32 lanes: `0x02020202`
    /// for δ = +1, 0 for δ = −1.
    ///
    /// # Safety
    /// The CPU must support AVX2; `block` points at a whole superblock.
    unsafe fn groups(block: *const u8, k: usize) -> (__m256i, __m256i);
    /// The sixteen run scales `2s + 1` as i16 lanes, run r in lane r.
    ///
    /// # Safety
    /// The CPU must support AVX2; `block` points at a whole superblock.
    unsafe fn run_scales(block: *const u8) -> __m256i;
}

/// The IQ1 sums of a layout: AVX2, FMA, F16C; with `VNNI` (AVX-512 VNNI and VL) the scale
/// product and the accumulation are one `vpdpwssd`.
pub(crate) struct Iq1<L, const VNNI: bool>(PhantomData<L>);

impl<L: Iq1Layout, const VNNI: bool> Superblock for Iq1<L, VNNI> {
    const BYTES: usize = L::BYTES;
    const FINAL: f32 = super::IQ1S_DELTA;

    #[inline(always)]
    unsafe fn d_bits(block: *const u8) -> u16 {
        // SAFETY: the caller guarantees a whole superblock.
        unsafe { L::d_bits(block) }
    }

    #[inline(always)]
    unsafe fn isums<const G: usize>(block: *const u8, x: [Q8kBlock; G]) -> [__m256i; G] {
        // SAFETY: the caller guarantees AVX2, a whole superblock at `block`, and 256
        // quants and sixteen sums per column; the gathered indices are below 2048 (the
        // layouts build them from eleven bits), inside `GRID_X8`.
        unsafe {
            let runs = L::run_scales(block);
            // [run 2ib in the low half | run 2ib + 1 in the high half], from the dword
            // (2ib, 2ib + 1) broadcast by `vpermd`.
            let split = _mm256_setr_epi8(
                0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, //
                2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3,
            );
            // One column (four rows in flight): `vpgatherdq` measured faster. Several
            // columns: the indices go through memory, four scalar loads and inserts per
            // sub-block measured faster.
            let mut ids = [0u32; 32];
            let mut gathered = [_mm256_setzero_si256(); 8];
            let mut plus = [_mm256_setzero_si256(); 4];
            let grid = GRID_X8.as_ptr().cast::<i64>();
            for k in 0..4 {
                let (idx, p) = L::groups(block, k);
                if G == 1 {
                    gathered[2 * k] =
                        _mm256_i32gather_epi64::<8>(grid, _mm256_castsi256_si128(idx));
                    gathered[2 * k + 1] =
                        _mm256_i32gather_epi64::<8>(grid, _mm256_extracti128_si256::<1>(idx));
                } else {
                    _mm256_storeu_si256(ids.as_mut_ptr().add(8 * k).cast(), idx);
                }
                plus[k] = p;
            }
            let mut acc = [_mm256_setzero_si256(); G];
            for k in 0..4 {
                for h in 0..2 {
                    let ib = 2 * k + h;
                    let word = |l: usize| GRID_X8[ids[4 * ib + l] as usize & 0x7FF] as i64;
                    let words = if G == 1 {
                        gathered[ib]
                    } else {
                        _mm256_set_epi64x(word(3), word(2), word(1), word(0))
                    };
                    let spread = _mm256_setr_epi32(
                        4 * h as i32,
                        4 * h as i32,
                        4 * h as i32 + 1,
                        4 * h as i32 + 1,
                        4 * h as i32 + 2,
                        4 * h as i32 + 2,
                        4 * h as i32 + 3,
                        4 * h as i32 + 3,
                    );
                    let u = _mm256_add_epi8(words, _mm256_permutevar8x32_epi32(plus[k], spread));
                    let ls = _mm256_shuffle_epi8(
                        _mm256_permutevar8x32_epi32(runs, _mm256_set1_epi32(ib as i32)),
                        split,
                    );
                    for c in 0..G {
                        let q = _mm256_loadu_si256(x[c].q.add(32 * ib).cast());
                        let p = _mm256_maddubs_epi16(u, q);
                        acc[c] = if VNNI {
                            _mm256_dpwssd_epi32(acc[c], p, ls)
                        } else {
                            _mm256_add_epi32(acc[c], _mm256_madd_epi16(p, ls))
                        };
                    }
                }
            }
            let off = _mm256_mullo_epi16(runs, _mm256_set1_epi16(-9));
            for c in 0..G {
                let s = _mm256_loadu_si256(x[c].bsums.cast());
                acc[c] = _mm256_add_epi32(acc[c], _mm256_madd_epi16(s, off));
            }
            acc
        }
    }
}

/// IQ1_S's fields.
pub(crate) struct SubS;

impl Iq1Layout for SubS {
    const BYTES: usize = BLOCK_BYTES;

    #[inline(always)]
    unsafe fn d_bits(block: *const u8) -> u16 {
        // SAFETY: the caller guarantees a whole superblock.
        unsafe { block.cast::<u16>().read_unaligned() }
    }

    #[inline(always)]
    unsafe fn groups(block: *const u8, k: usize) -> (__m256i, __m256i) {
        // SAFETY: the eight u16 at 34 and the index bytes 2 + 8k..2 + 8k + 8 are in the
        // superblock; the caller guarantees AVX2.
        unsafe {
            // Each sub-block's u16 in the high half of an i32 lane.
            let qh = _mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(_mm_loadu_si128(
                block.add(34).cast(),
            )));
            let sub = _mm256_setr_epi32(
                2 * k as i32,
                2 * k as i32,
                2 * k as i32,
                2 * k as i32,
                2 * k as i32 + 1,
                2 * k as i32 + 1,
                2 * k as i32 + 1,
                2 * k as i32 + 1,
            );
            let h = _mm256_permutevar8x32_epi32(qh, sub);
            // Group l's high bits are u16 bits 3l..3l + 3: shifted to bits 8..11.
            let high = _mm256_and_si256(
                _mm256_srlv_epi32(h, _mm256_setr_epi32(8, 11, 14, 17, 8, 11, 14, 17)),
                _mm256_set1_epi32(0x700),
            );
            let low = _mm256_cvtepu8_epi32(_mm_loadl_epi64(block.add(2 + 8 * k).cast()));
            // Bit 15 (the delta's sign) is the lane's sign bit.
            let plus =
                _mm256_andnot_si256(_mm256_srai_epi32::<31>(h), _mm256_set1_epi32(0x0202_0202));
            (_mm256_or_si256(low, high), plus)
        }
    }

    #[inline(always)]
    unsafe fn run_scales(block: *const u8) -> __m256i {
        // SAFETY: the eight u16 at 34 are in the superblock; the caller guarantees AVX2.
        unsafe {
            let qh = _mm_loadu_si128(block.add(34).cast());
            let s = _mm_and_si128(_mm_srli_epi16::<12>(qh), _mm_set1_epi16(7));
            let ls = _mm_add_epi16(_mm_add_epi16(s, s), _mm_set1_epi16(1));
            _mm256_set_m128i(_mm_unpackhi_epi16(ls, ls), _mm_unpacklo_epi16(ls, ls))
        }
    }
}

//! x86-64 Q3_K kernels, reached only through the Q3_K kernel-table row (`q3_k.rs`), each
//! held to [`super::Q3K`]'s `dot_ref` bit for bit by the tests:
//! - the tile kernels ([`Rows`] as [`x86k::Tiles`]) on the packed copy ([`super::pack`]),
//!   sixteen rows per tile in the lanes of registers, quants as `q + 4` (0..8):
//!   [`q3k_tile_vnni`] (AVX-512 VNNI: per sub-block a `vpdpbusd` chain of four, below
//!   2^15, then `vpdpwssd` by the scale with its upper 16 bits cleared) and
//!   [`q3k_tile_avx2`] (two halves of eight rows: four `vpmaddubsw` summed in i16, then
//!   `vpmaddwd` by `(sc, sc)` pairs); the offset as `-4 · sc · (sum of sixteen)` by one
//!   multiply-add per two sub-blocks;
//! - [`rows_avx2`], for rows outside whole tiles and matrices without a packed copy: a
//!   row at a time, each super-block's quants assembled once as `q + 4` and shared by up
//!   to four columns; `vpmaddubsw` then `vpmaddwd` by the sub-block scales, minus
//!   `4 · Σ sc · (sum of sixteen)`: the exact `isum`, one horizontal sum per super-block,
//!   then the float step.

// The kernels walk several per-column arrays (scales, quants, sums, accumulators) by one
// index.
#![allow(clippy::needless_range_loop)]

use std::arch::x86_64::*;

use half::f16;

use super::{BLOCK_BYTES, PACK_BLOCK_BYTES, PACK_ROWS};

const _: () = assert!(PACK_ROWS == x86k::TILE_ROWS);
use crate::columns::Columns;
use crate::kquant::x86_64::{self as x86k, KColumns};
use crate::kquant::QK_K;
use crate::matrix::Matrix;

/// Bit `b` (0..8) of each byte of `hm` moved to bit 2 (the file's high bits of one
/// register of quants, or the packed high bits of register b of a line).
#[target_feature(enable = "avx2")]
#[inline]
fn high_bit(hm: __m256i, b: usize) -> __m256i {
    let m = _mm256_set1_epi8(4);
    // 16-bit shifts: the bit that lands on bit 2 of each byte comes from the same byte.
    let moved = match b {
        0 => _mm256_slli_epi16::<2>(hm),
        1 => _mm256_slli_epi16::<1>(hm),
        2 => hm,
        3 => _mm256_srli_epi16::<1>(hm),
        4 => _mm256_srli_epi16::<2>(hm),
        5 => _mm256_srli_epi16::<3>(hm),
        6 => _mm256_srli_epi16::<4>(hm),
        _ => _mm256_srli_epi16::<5>(hm),
    };
    _mm256_and_si256(moved, m)
}

/// The sixteen scales of the block at `b` (-32..32) as i16 lanes.
///
/// # Safety
/// The CPU must support AVX2; `b` points to a whole block.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn scales16(b: *const u8) -> __m256i {
    // SAFETY: the caller guarantees a whole block: its 110 bytes are readable.
    let block = unsafe { std::slice::from_raw_parts(b, BLOCK_BYTES) };
    let sc = super::scales(block);
    // SAFETY: `sc` holds 16 bytes.
    _mm256_cvtepi8_epi16(unsafe { _mm_loadu_si128(sc.as_ptr().cast()) })
}

/// A Q3_K row · G columns with AVX2, into `out`.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C; every column covers the row's super-blocks
/// (checked).
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q3k_group<const G: usize>(row: &[u8], x: &KColumns<'_, G>, out: &mut [f32]) {
    let nb = row.len() / BLOCK_BYTES;
    x.check(nb);
    let w = row.as_ptr();
    let m3 = _mm256_set1_epi8(3);
    let masks = x86k::half_masks();
    let mut acc = [0.0f32; G];
    for i in 0..nb {
        // SAFETY: (and every "see above" below) i < nb, so the block's 110 bytes are in the row,
        // and every column holds nb blocks (checked above).
        let b = unsafe { w.add(i * BLOCK_BYTES) };
        x86k::prefetch_ahead(b);
        // SAFETY: see above.
        let sc16 = unsafe { scales16(b) };
        // SAFETY: see above (hmask at 0).
        let hm = unsafe { _mm256_loadu_si256(b.cast()) };
        let mut isum = [_mm256_setzero_si256(); G];
        for c in 0..G {
            // SAFETY: see above.
            let bs = unsafe { _mm256_loadu_si256(x.bs[c].as_ptr().add(16 * i).cast()) };
            isum[c] =
                _mm256_sub_epi32(isum[c], _mm256_slli_epi32::<2>(_mm256_madd_epi16(bs, sc16)));
        }
        for n in 0..2 {
            // SAFETY: see above (qs at 32).
            let bits = unsafe { _mm256_loadu_si256(b.add(32 + 32 * n).cast()) };
            let sc = x86k::half_scales(sc16, n);
            let low = [
                _mm256_and_si256(bits, m3),
                _mm256_and_si256(_mm256_srli_epi16::<2>(bits), m3),
                _mm256_and_si256(_mm256_srli_epi16::<4>(bits), m3),
                _mm256_and_si256(_mm256_srli_epi16::<6>(bits), m3),
            ];
            for j in 0..4 {
                let q = _mm256_or_si256(low[j], high_bit(hm, 4 * n + j));
                let s = _mm256_shuffle_epi8(sc, masks[j]);
                for c in 0..G {
                    // SAFETY: see above.
                    let xv = unsafe {
                        _mm256_loadu_si256(x.q[c].as_ptr().add(i * QK_K + 128 * n + 32 * j).cast())
                    };
                    let p = _mm256_madd_epi16(s, _mm256_maddubs_epi16(q, xv));
                    isum[c] = _mm256_add_epi32(isum[c], p);
                }
            }
        }
        // SAFETY: see above (d at 108).
        let d = f16::from_bits(unsafe { b.add(108).cast::<u16>().read_unaligned() }).to_f32();
        for c in 0..G {
            acc[c] = x86k::step1(acc[c], isum[c], d, x.d[c][i]);
        }
    }
    out[..G].copy_from_slice(&acc);
}

/// Q3_K rows `first..first + out.len() / n` · all n columns with AVX2, row-major
/// into `out` ([`x86k::rows_avx2`] with [`q3k_group`]).
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn rows_avx2(w: &Matrix<'_>, first: usize, x: &Columns<'_>, out: &mut [f32]) {
    // SAFETY: the caller guarantees AVX2, FMA and F16C.
    unsafe { x86k::rows_avx2::<Rows>(w, first, x, out) }
}

/// This format's AVX2 row kernel ([`x86k::RowGroup`]) and tile kernels ([`x86k::Tiles`]).
pub(crate) struct Rows;

impl x86k::RowGroup for Rows {
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn group<const G: usize>(row: &[u8], x: &KColumns<'_, G>, out: &mut [f32]) {
        // SAFETY: the caller guarantees AVX2, FMA and F16C; the kernel checks sizes.
        unsafe { q3k_group::<G>(row, x, out) }
    }
}

/// One packed tile (16 rows, `nb` super-blocks) · G columns with AVX2: rows 0..8, then
/// rows 8..16 (the low and high 32 bytes of each line), eight rows in the eight i32 lanes
/// of a register. Per sub-block and column, four `vpmaddubsw` (quants `q + 4` × four
/// activation quants broadcast) summed in i16 (at most 16 · 7 · 128: exact), then
/// `vpmaddwd` by the rows' scales as `(sc, sc)` pairs; per two sub-blocks one `vpmaddwd`
/// of `(-4 sc_a, -4 sc_b)` by the two sums of sixteen: the exact `isum`. The float step per
/// super-block is the reference's, lane by lane.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C; `tile` is one whole packed tile of `nb`
/// super-blocks; every column covers them (checked).
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q3k_tile_avx2<const G: usize>(
    tile: &[u8],
    nb: usize,
    x: &KColumns<'_, G>,
    ahead: *const u8,
) -> [[f32; 16]; G] {
    assert_eq!(tile.len(), nb * PACK_BLOCK_BYTES);
    x.check(nb);
    let m3 = _mm256_set1_epi8(3);
    let mut acc = [[_mm256_setzero_ps(); 2]; G];
    for i in 0..nb {
        // SAFETY: (and every "see above" below) i < nb, so the super-block's
        // PACK_BLOCK_BYTES are in the tile, and every column holds nb blocks (checked).
        let b = unsafe { tile.as_ptr().add(i * PACK_BLOCK_BYTES) };
        x86k::prefetch_lines(ahead.wrapping_add(i * PACK_BLOCK_BYTES), PACK_BLOCK_BYTES);
        for h8 in 0..2 {
            let mut isum = [_mm256_setzero_si256(); G];
            for u in 0..8 {
                // SAFETY: see above (scales at 1536 + 16t, rows 8h8..; high-bit line u at
                // 1024 + 64u).
                let (sa, sb, hb) = unsafe {
                    (
                        _mm_loadl_epi64(b.add(1536 + 16 * (2 * u) + 8 * h8).cast()),
                        _mm_loadl_epi64(b.add(1536 + 16 * (2 * u + 1) + 8 * h8).cast()),
                        _mm256_loadu_si256(b.add(1024 + 64 * u + 32 * h8).cast()),
                    )
                };
                let scale = [
                    _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(sa, sa)),
                    _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(sb, sb)),
                ];
                let offset = _mm256_sub_epi16(
                    _mm256_setzero_si256(),
                    _mm256_slli_epi16::<2>(_mm256_cvtepi8_epi16(_mm_unpacklo_epi8(sa, sb))),
                );
                let mut r = [[_mm256_setzero_si256(); 4]; 2];
                for (h, rh) in r.iter_mut().enumerate() {
                    // SAFETY: see above (half h8 of low-bit line 2u + h).
                    let l = unsafe { _mm256_loadu_si256(b.add(64 * (2 * u + h) + 32 * h8).cast()) };
                    let low = [
                        _mm256_and_si256(l, m3),
                        _mm256_and_si256(_mm256_srli_epi16::<2>(l), m3),
                        _mm256_and_si256(_mm256_srli_epi16::<4>(l), m3),
                        _mm256_and_si256(_mm256_srli_epi16::<6>(l), m3),
                    ];
                    for p in 0..4 {
                        rh[p] = _mm256_or_si256(low[p], high_bit(hb, 4 * h + p));
                    }
                }
                for c in 0..G {
                    // SAFETY: see above; quants i·256 + 32u.. + 32 and sums 16i + 2u, + 1
                    // are in the column.
                    unsafe {
                        let q = x.q[c].as_ptr().add(i * QK_K + 32 * u);
                        let xb = |k: usize| {
                            _mm256_set1_epi32(q.add(4 * k).cast::<i32>().read_unaligned())
                        };
                        let pair = x.bs[c]
                            .as_ptr()
                            .add(16 * i + 2 * u)
                            .cast::<i32>()
                            .read_unaligned();
                        let mut sum = _mm256_add_epi32(
                            isum[c],
                            _mm256_madd_epi16(offset, _mm256_set1_epi32(pair)),
                        );
                        for h in 0..2 {
                            let mut part = _mm256_maddubs_epi16(r[h][0], xb(4 * h));
                            for p in 1..4 {
                                part = _mm256_add_epi16(
                                    part,
                                    _mm256_maddubs_epi16(r[h][p], xb(4 * h + p)),
                                );
                            }
                            sum = _mm256_add_epi32(sum, _mm256_madd_epi16(part, scale[h]));
                        }
                        isum[c] = sum;
                    }
                }
            }
            // SAFETY: see above (d at 1792, 16 f16).
            let d = _mm256_cvtph_ps(unsafe { _mm_loadu_si128(b.add(1792 + 16 * h8).cast()) });
            for c in 0..G {
                let dx = _mm256_set1_ps(x.d[c][i]);
                acc[c][h8] = _mm256_fmadd_ps(
                    _mm256_cvtepi32_ps(isum[c]),
                    _mm256_mul_ps(d, dx),
                    acc[c][h8],
                );
            }
        }
    }
    std::array::from_fn(|c| {
        let mut o = [0.0f32; 16];
        for h8 in 0..2 {
            // SAFETY: `o` holds 16 f32: 8 at 8 h8.
            unsafe { _mm256_storeu_ps(o.as_mut_ptr().add(8 * h8), acc[c][h8]) };
        }
        o
    })
}

/// Bit `k` (0..8) of each byte of `h` as bit 2 (the packed high bits of register k of a
/// line, see [`super::pack`]), 512-bit.
#[target_feature(enable = "avx512f,avx512bw")]
#[inline]
fn high_bit512(h: __m512i, k: usize) -> __m512i {
    // 16-bit shifts: the bit that lands on bit 2 of each byte comes from the same byte.
    let moved = match k {
        0 => _mm512_slli_epi16::<2>(h),
        1 => _mm512_slli_epi16::<1>(h),
        2 => h,
        3 => _mm512_srli_epi16::<1>(h),
        4 => _mm512_srli_epi16::<2>(h),
        5 => _mm512_srli_epi16::<3>(h),
        6 => _mm512_srli_epi16::<4>(h),
        _ => _mm512_srli_epi16::<5>(h),
    };
    _mm512_and_si512(moved, _mm512_set1_epi8(4))
}

/// One packed tile (16 rows, `nb` super-blocks) · G columns with AVX-512 VNNI: lane r of
/// every register is row r. Per sub-block and column, a `vpdpbusd` chain over its four
/// registers of `q + 4` (at most 16 · 7 · 128 < 2^15, so `vpdpwssd` by the scale with its
/// upper 16 bits cleared multiplies it exactly); per two sub-blocks one `vpdpwssd` of
/// `(-4 sc_a, -4 sc_b)` by the two sums of sixteen: the exact `isum`. The float step is
/// the reference's, lane by lane.
///
/// # Safety
/// The CPU must support AVX-512 F, VL, BW and VNNI plus AVX2, FMA and F16C; `tile` is one
/// whole packed tile of `nb` super-blocks; every column covers them (checked).
#[target_feature(enable = "avx512f,avx512vl,avx512bw,avx512vnni,avx2,fma,f16c")]
unsafe fn q3k_tile_vnni<const G: usize>(
    tile: &[u8],
    nb: usize,
    x: &KColumns<'_, G>,
    ahead: *const u8,
) -> [[f32; 16]; G] {
    assert_eq!(tile.len(), nb * PACK_BLOCK_BYTES);
    x.check(nb);
    let m3 = _mm512_set1_epi8(3);
    let low16 = _mm512_set1_epi32(0xFFFF);
    let mut acc = [_mm512_setzero_ps(); G];
    for i in 0..nb {
        // SAFETY: (and every "see above" below) i < nb, so the super-block's
        // PACK_BLOCK_BYTES are in the tile, and every column holds nb blocks (checked).
        let b = unsafe { tile.as_ptr().add(i * PACK_BLOCK_BYTES) };
        x86k::prefetch_lines(ahead.wrapping_add(i * PACK_BLOCK_BYTES), PACK_BLOCK_BYTES);
        let mut isum = [_mm512_setzero_si512(); G];
        for u in 0..8 {
            // SAFETY: see above (scales at 1536 + 16t; high-bit line u at 1024 + 64u).
            let (sa, sb, hb) = unsafe {
                (
                    _mm_loadu_si128(b.add(1536 + 16 * (2 * u)).cast()),
                    _mm_loadu_si128(b.add(1536 + 16 * (2 * u + 1)).cast()),
                    _mm512_loadu_si512(b.add(1024 + 64 * u).cast()),
                )
            };
            let scale = [
                _mm512_and_si512(_mm512_cvtepi8_epi32(sa), low16),
                _mm512_and_si512(_mm512_cvtepi8_epi32(sb), low16),
            ];
            // (-4 sc_2u, -4 sc_2u+1) i16 pairs per row.
            let pairs = _mm512_inserti64x4::<1>(
                _mm512_castsi256_si512(_mm256_cvtepi8_epi16(_mm_unpacklo_epi8(sa, sb))),
                _mm256_cvtepi8_epi16(_mm_unpackhi_epi8(sa, sb)),
            );
            let offset = _mm512_sub_epi16(_mm512_setzero_si512(), _mm512_slli_epi16::<2>(pairs));
            let mut r = [[_mm512_setzero_si512(); 4]; 2];
            for (h, rh) in r.iter_mut().enumerate() {
                // SAFETY: see above (low-bit line 2u + h).
                let l = unsafe { _mm512_loadu_si512(b.add(64 * (2 * u + h)).cast()) };
                let low = [
                    _mm512_and_si512(l, m3),
                    _mm512_and_si512(_mm512_srli_epi16::<2>(l), m3),
                    _mm512_and_si512(_mm512_srli_epi16::<4>(l), m3),
                    _mm512_and_si512(_mm512_srli_epi16::<6>(l), m3),
                ];
                for p in 0..4 {
                    rh[p] = _mm512_or_si512(low[p], high_bit512(hb, 4 * h + p));
                }
            }
            for c in 0..G {
                // SAFETY: see above; quants i·256 + 32u.. + 32 and sums 16i + 2u, + 1 are
                // in the column.
                unsafe {
                    let q = x.q[c].as_ptr().add(i * QK_K + 32 * u);
                    let xb =
                        |k: usize| _mm512_set1_epi32(q.add(4 * k).cast::<i32>().read_unaligned());
                    let pair = x.bs[c]
                        .as_ptr()
                        .add(16 * i + 2 * u)
                        .cast::<i32>()
                        .read_unaligned();
                    let mut sum = _mm512_dpwssd_epi32(isum[c], offset, _mm512_set1_epi32(pair));
                    for h in 0..2 {
                        let mut a = _mm512_dpbusd_epi32(_mm512_setzero_si512(), r[h][0], xb(4 * h));
                        for p in 1..4 {
                            a = _mm512_dpbusd_epi32(a, r[h][p], xb(4 * h + p));
                        }
                        sum = _mm512_dpwssd_epi32(sum, a, scale[h]);
                    }
                    isum[c] = sum;
                }
            }
        }
        // SAFETY: see above (d at 1792, 16 f16).
        let d = _mm512_cvtph_ps(unsafe { _mm256_loadu_si256(b.add(1792).cast()) });
        for c in 0..G {
            let dx = _mm512_set1_ps(x.d[c][i]);
            acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[c]), _mm512_mul_ps(d, dx), acc[c]);
        }
    }
    std::array::from_fn(|c| {
        let mut o = [0.0f32; 16];
        // SAFETY: `o` holds 16 f32.
        unsafe { _mm512_storeu_ps(o.as_mut_ptr(), acc[c]) };
        o
    })
}

impl x86k::Tiles for Rows {
    const PACK_BLOCK_BYTES: usize = PACK_BLOCK_BYTES;

    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn tile_avx2<const G: usize>(
        tile: &[u8],
        nb: usize,
        x: &KColumns<'_, G>,
        ahead: *const u8,
    ) -> [[f32; 16]; G] {
        // SAFETY: the caller guarantees AVX2, FMA and F16C; the kernel checks sizes.
        unsafe { q3k_tile_avx2::<G>(tile, nb, x, ahead) }
    }

    #[target_feature(enable = "avx512f,avx512vl,avx512bw,avx512vnni,avx2,fma,f16c")]
    unsafe fn tile_vnni<const G: usize>(
        tile: &[u8],
        nb: usize,
        x: &KColumns<'_, G>,
        ahead: *const u8,
    ) -> [[f32; 16]; G] {
        // SAFETY: the caller guarantees the CPU features; the kernel checks sizes.
        unsafe { q3k_tile_vnni::<G>(tile, nb, x, ahead) }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn rows(w: &Matrix<'_>, first: usize, x: &Columns<'_>, out: &mut [f32]) {
        // SAFETY: the caller guarantees AVX2, FMA and F16C.
        unsafe { rows_avx2(w, first, x, out) }
    }
}

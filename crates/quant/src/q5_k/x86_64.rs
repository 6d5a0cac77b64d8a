//! x86-64 Q5_K kernels, reached only through the Q5_K kernel-table row (`q5_k.rs`), each
//! held to [`super::Q5K`]'s `dot_ref` bit for bit by the tests:
//! - the tile kernels ([`Rows`] as [`x86k::Tiles`]) on the packed copy ([`super::pack`]),
//!   sixteen rows per tile in the lanes of registers: [`q5k_tile_vnni`] (AVX-512 VNNI:
//!   `vpdpbusd` chains of two registers, below 2^15, then `vpdpwssd` by the scale) and
//!   [`q5k_tile_avx2`] (two halves of eight rows: four `vpmaddubsw` summed in i16, then
//!   `vpmaddwd` by `(sc, sc)` pairs); the mins as `(m, m)` pairs by the sub-block's two
//!   sums of sixteen;
//! - [`rows_avx2`], for rows outside whole tiles and matrices without a packed copy: a
//!   row at a time, each super-block's 5-bit quants assembled once and shared by up to
//!   four columns; `vpmaddubsw` then `vpmaddwd` by the sub-block scale, the mins against
//!   the Q8_K sums of sixteen; one horizontal sum of `isum` and `msum` together per
//!   super-block and the two float steps in two lanes of one register.

// The kernels walk several per-column arrays (scales, quants, sums, accumulators) by one
// index.
#![allow(clippy::needless_range_loop)]

use std::arch::x86_64::*;

use super::{BLOCK_BYTES, PACK_BLOCK_BYTES, PACK_ROWS};

const _: () = assert!(PACK_ROWS == x86k::TILE_ROWS);
use crate::columns::Columns;
use crate::kquant::x86_64::{self as x86k, KColumns};
use crate::kquant::QK_K;
use crate::matrix::Matrix;

/// The fifth bits of sub-block `s` (bit s of each byte of `qh`) moved to bit 4.
#[target_feature(enable = "avx2")]
#[inline]
fn fifth(qh: __m256i, s: usize) -> __m256i {
    let m = _mm256_set1_epi8(0x10);
    // 16-bit shifts: the bit that lands on bit 4 of each byte comes from the same byte.
    let moved = match s {
        0 => _mm256_slli_epi16::<4>(qh),
        1 => _mm256_slli_epi16::<3>(qh),
        2 => _mm256_slli_epi16::<2>(qh),
        3 => _mm256_slli_epi16::<1>(qh),
        4 => qh,
        5 => _mm256_srli_epi16::<1>(qh),
        6 => _mm256_srli_epi16::<2>(qh),
        _ => _mm256_srli_epi16::<3>(qh),
    };
    _mm256_and_si256(moved, m)
}

/// A Q5_K row · G columns with AVX2, into `out`.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C; every column covers the row's super-blocks
/// (checked).
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q5k_group<const G: usize>(row: &[u8], x: &KColumns<'_, G>, out: &mut [f32]) {
    let nb = row.len() / BLOCK_BYTES;
    x.check(nb);
    let w = row.as_ptr();
    let m4 = _mm256_set1_epi8(0xF);
    let mut acc = [_mm_setzero_ps(); G];
    for i in 0..nb {
        // SAFETY: (and every "see above" below) i < nb, so the block's 176 bytes are in the row,
        // and every column holds nb blocks (checked above).
        let b = unsafe { w.add(i * BLOCK_BYTES) };
        x86k::prefetch_ahead(b);
        // SAFETY: see above (the packed scales at 4).
        let (sc, mn) = unsafe { x86k::scales_mins_k4(b.add(4)) };
        let sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_cvtsi64_si128(sc as i64)));
        let mdup = x86k::dup_mins(mn);
        // SAFETY: see above (qh at 16).
        let qh = unsafe { _mm256_loadu_si256(b.add(16).cast()) };
        let mut isum = [_mm256_setzero_si256(); G];
        let mut msum = [_mm256_setzero_si256(); G];
        for c in 0..G {
            // SAFETY: see above.
            let bs = unsafe { _mm256_loadu_si256(x.bs[c].as_ptr().add(16 * i).cast()) };
            msum[c] = _mm256_madd_epi16(mdup, bs);
        }
        for j in 0..4 {
            // SAFETY: see above (qs at 48).
            let bits = unsafe { _mm256_loadu_si256(b.add(48 + 32 * j).cast()) };
            let lo = _mm256_or_si256(_mm256_and_si256(bits, m4), fifth(qh, 2 * j));
            let hi = _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi16::<4>(bits), m4),
                fifth(qh, 2 * j + 1),
            );
            let sl = x86k::scale_lanes(sc16, 2 * j);
            let sh = x86k::scale_lanes(sc16, 2 * j + 1);
            for c in 0..G {
                // SAFETY: see above.
                let (x0, x1) = unsafe {
                    let p = x.q[c].as_ptr().add(i * QK_K + 64 * j);
                    (
                        _mm256_loadu_si256(p.cast()),
                        _mm256_loadu_si256(p.add(32).cast()),
                    )
                };
                let p0 = _mm256_madd_epi16(sl, _mm256_maddubs_epi16(lo, x0));
                let p1 = _mm256_madd_epi16(sh, _mm256_maddubs_epi16(hi, x1));
                isum[c] = _mm256_add_epi32(isum[c], _mm256_add_epi32(p0, p1));
            }
        }
        // SAFETY: the block's first four bytes are d and dmin.
        let dm = unsafe { x86k::d_dmin(b) };
        for c in 0..G {
            acc[c] = x86k::step2(acc[c], isum[c], msum[c], dm, x.d[c][i]);
        }
    }
    for c in 0..G {
        out[c] = x86k::finish2(acc[c]);
    }
}

/// Q5_K rows `first..first + out.len() / n` · all n columns with AVX2, row-major
/// into `out` ([`x86k::rows_avx2`] with [`q5k_group`]).
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
        unsafe { q5k_group::<G>(row, x, out) }
    }
}

/// One packed tile (16 rows, `nb` super-blocks) · G columns with AVX2: rows 0..8, then
/// rows 8..16 (the low and high 32 bytes of each line), eight rows in the eight i32 lanes
/// of a register. Per sub-block and column, two groups of four `vpmaddubsw` (quants 0..32
/// × four activation quants broadcast) summed in i16 (at most 16 · 31 · 128 < 2^15:
/// exact), each times the rows' scales as `(sc, sc)` pairs by `vpmaddwd`; the mins as
/// `(m, m)` pairs by the sub-block's two sums of sixteen. The float steps per super-block
/// are the reference's, lane by lane.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C; `tile` is one whole packed tile of `nb`
/// super-blocks; every column covers them (checked).
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q5k_tile_avx2<const G: usize>(
    tile: &[u8],
    nb: usize,
    x: &KColumns<'_, G>,
    ahead: *const u8,
) -> [[f32; 16]; G] {
    assert_eq!(tile.len(), nb * PACK_BLOCK_BYTES);
    x.check(nb);
    let m4 = _mm256_set1_epi8(0xF);
    let mut acc = [[_mm256_setzero_ps(); 2]; G];
    let mut accm = [[_mm256_setzero_ps(); 2]; G];
    for i in 0..nb {
        // SAFETY: (and every "see above" below) i < nb, so the super-block's
        // PACK_BLOCK_BYTES are in the tile, and every column holds nb blocks (checked).
        let b = unsafe { tile.as_ptr().add(i * PACK_BLOCK_BYTES) };
        x86k::prefetch_lines(ahead.wrapping_add(i * PACK_BLOCK_BYTES), PACK_BLOCK_BYTES);
        for h8 in 0..2 {
            let mut isum = [_mm256_setzero_si256(); G];
            let mut msum = [_mm256_setzero_si256(); G];
            for s in 0..8 {
                // SAFETY: see above (scales at 2560, mins at 2688, 16 rows per sub-block;
                // fifth bits of sub-block s at 2048 + 64s).
                let (sc, mn, hb) = unsafe {
                    (
                        _mm_loadl_epi64(b.add(2560 + 16 * s + 8 * h8).cast()),
                        _mm_loadl_epi64(b.add(2688 + 16 * s + 8 * h8).cast()),
                        _mm256_loadu_si256(b.add(2048 + 64 * s + 32 * h8).cast()),
                    )
                };
                let scale = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(sc, sc));
                let mins = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mn, mn));
                let mut r = [_mm256_setzero_si256(); 8];
                for j in 0..4 {
                    // SAFETY: see above (half h8 of nibble line 4s + j).
                    let l = unsafe { _mm256_loadu_si256(b.add(64 * (4 * s + j) + 32 * h8).cast()) };
                    r[j] = _mm256_or_si256(_mm256_and_si256(l, m4), fifth(hb, j));
                    r[4 + j] = _mm256_or_si256(
                        _mm256_and_si256(_mm256_srli_epi16::<4>(l), m4),
                        fifth(hb, 4 + j),
                    );
                }
                for c in 0..G {
                    // SAFETY: see above; quants i·256 + 32s.. + 32 and sums 16i + 2s, + 1
                    // are in the column.
                    unsafe {
                        let q = x.q[c].as_ptr().add(i * QK_K + 32 * s);
                        let xb = |k: usize| {
                            _mm256_set1_epi32(q.add(4 * k).cast::<i32>().read_unaligned())
                        };
                        let mut sum = isum[c];
                        for h in 0..2 {
                            let mut part = _mm256_maddubs_epi16(r[4 * h], xb(4 * h));
                            for p in 1..4 {
                                part = _mm256_add_epi16(
                                    part,
                                    _mm256_maddubs_epi16(r[4 * h + p], xb(4 * h + p)),
                                );
                            }
                            sum = _mm256_add_epi32(sum, _mm256_madd_epi16(part, scale));
                        }
                        isum[c] = sum;
                        let pair = x.bs[c]
                            .as_ptr()
                            .add(16 * i + 2 * s)
                            .cast::<i32>()
                            .read_unaligned();
                        msum[c] = _mm256_add_epi32(
                            msum[c],
                            _mm256_madd_epi16(mins, _mm256_set1_epi32(pair)),
                        );
                    }
                }
            }
            // SAFETY: see above (d at 2816, dmin at 2848, 16 f16 each).
            let (d, dmin) = unsafe {
                (
                    _mm256_cvtph_ps(_mm_loadu_si128(b.add(2816 + 16 * h8).cast())),
                    _mm256_cvtph_ps(_mm_loadu_si128(b.add(2848 + 16 * h8).cast())),
                )
            };
            for c in 0..G {
                let dx = _mm256_set1_ps(x.d[c][i]);
                acc[c][h8] = _mm256_fmadd_ps(
                    _mm256_cvtepi32_ps(isum[c]),
                    _mm256_mul_ps(d, dx),
                    acc[c][h8],
                );
                accm[c][h8] = _mm256_fmadd_ps(
                    _mm256_cvtepi32_ps(msum[c]),
                    _mm256_mul_ps(dmin, dx),
                    accm[c][h8],
                );
            }
        }
    }
    std::array::from_fn(|c| {
        let mut o = [0.0f32; 16];
        for h8 in 0..2 {
            // SAFETY: `o` holds 16 f32: 8 at 8 h8.
            unsafe {
                _mm256_storeu_ps(
                    o.as_mut_ptr().add(8 * h8),
                    _mm256_sub_ps(acc[c][h8], accm[c][h8]),
                )
            };
        }
        o
    })
}

/// Bit `p` (0..8) of each byte of `h` as bit 4, 512-bit ([`fifth`]'s).
#[target_feature(enable = "avx512f,avx512bw")]
#[inline]
fn fifth512(h: __m512i, p: usize) -> __m512i {
    // 16-bit shifts: the bit that lands on bit 4 of each byte comes from the same byte.
    let moved = match p {
        0 => _mm512_slli_epi16::<4>(h),
        1 => _mm512_slli_epi16::<3>(h),
        2 => _mm512_slli_epi16::<2>(h),
        3 => _mm512_slli_epi16::<1>(h),
        4 => h,
        5 => _mm512_srli_epi16::<1>(h),
        6 => _mm512_srli_epi16::<2>(h),
        _ => _mm512_srli_epi16::<3>(h),
    };
    _mm512_and_si512(moved, _mm512_set1_epi8(0x10))
}

/// One packed tile (16 rows, `nb` super-blocks) · G columns with AVX-512 VNNI: lane r of
/// every register is row r. Per sub-block and column, four `vpdpbusd` chains of two
/// registers (at most 8 · 31 · 128 < 2^15, so `vpdpwssd` by the scale, whose upper 16
/// bits are zero, multiplies each exactly) and one `vpdpwssd` of the `(m, m)` mins by the
/// sub-block's two sums of sixteen. The float steps are the reference's, lane by lane.
///
/// # Safety
/// The CPU must support AVX-512 F, VL, BW and VNNI plus AVX2, FMA and F16C; `tile` is one
/// whole packed tile of `nb` super-blocks; every column covers them (checked).
#[target_feature(enable = "avx512f,avx512vl,avx512bw,avx512vnni,avx2,fma,f16c")]
unsafe fn q5k_tile_vnni<const G: usize>(
    tile: &[u8],
    nb: usize,
    x: &KColumns<'_, G>,
    ahead: *const u8,
) -> [[f32; 16]; G] {
    assert_eq!(tile.len(), nb * PACK_BLOCK_BYTES);
    x.check(nb);
    let m4 = _mm512_set1_epi8(0xF);
    let mut acc = [_mm512_setzero_ps(); G];
    let mut accm = [_mm512_setzero_ps(); G];
    for i in 0..nb {
        // SAFETY: (and every "see above" below) i < nb, so the super-block's
        // PACK_BLOCK_BYTES are in the tile, and every column holds nb blocks (checked).
        let b = unsafe { tile.as_ptr().add(i * PACK_BLOCK_BYTES) };
        x86k::prefetch_lines(ahead.wrapping_add(i * PACK_BLOCK_BYTES), PACK_BLOCK_BYTES);
        let mut isum = [_mm512_setzero_si512(); G];
        let mut msum = [_mm512_setzero_si512(); G];
        for s in 0..8 {
            // SAFETY: see above (scales at 2560, mins at 2688; fifth bits at 2048 + 64s).
            let (scale, mins, hb) = unsafe {
                (
                    _mm512_cvtepu8_epi32(_mm_loadu_si128(b.add(2560 + 16 * s).cast())),
                    _mm512_cvtepu8_epi32(_mm_loadu_si128(b.add(2688 + 16 * s).cast())),
                    _mm512_loadu_si512(b.add(2048 + 64 * s).cast()),
                )
            };
            let mpair = _mm512_or_si512(mins, _mm512_slli_epi32::<16>(mins));
            let mut r = [_mm512_setzero_si512(); 8];
            for j in 0..4 {
                // SAFETY: see above (nibble line 4s + j).
                let l = unsafe { _mm512_loadu_si512(b.add(64 * (4 * s + j)).cast()) };
                r[j] = _mm512_or_si512(_mm512_and_si512(l, m4), fifth512(hb, j));
                r[4 + j] = _mm512_or_si512(
                    _mm512_and_si512(_mm512_srli_epi16::<4>(l), m4),
                    fifth512(hb, 4 + j),
                );
            }
            for c in 0..G {
                // SAFETY: see above; quants i·256 + 32s.. + 32 and sums 16i + 2s, + 1 are
                // in the column.
                unsafe {
                    let q = x.q[c].as_ptr().add(i * QK_K + 32 * s);
                    let xb =
                        |k: usize| _mm512_set1_epi32(q.add(4 * k).cast::<i32>().read_unaligned());
                    let mut sum = isum[c];
                    for k in (0..8).step_by(2) {
                        let a = _mm512_dpbusd_epi32(_mm512_setzero_si512(), r[k], xb(k));
                        let a = _mm512_dpbusd_epi32(a, r[k + 1], xb(k + 1));
                        sum = _mm512_dpwssd_epi32(sum, a, scale);
                    }
                    isum[c] = sum;
                    let pair = x.bs[c]
                        .as_ptr()
                        .add(16 * i + 2 * s)
                        .cast::<i32>()
                        .read_unaligned();
                    msum[c] = _mm512_dpwssd_epi32(msum[c], mpair, _mm512_set1_epi32(pair));
                }
            }
        }
        // SAFETY: see above (d at 2816, dmin at 2848, 16 f16 each).
        let (d, dmin) = unsafe {
            (
                _mm512_cvtph_ps(_mm256_loadu_si256(b.add(2816).cast())),
                _mm512_cvtph_ps(_mm256_loadu_si256(b.add(2848).cast())),
            )
        };
        for c in 0..G {
            let dx = _mm512_set1_ps(x.d[c][i]);
            acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[c]), _mm512_mul_ps(d, dx), acc[c]);
            accm[c] = _mm512_fmadd_ps(
                _mm512_cvtepi32_ps(msum[c]),
                _mm512_mul_ps(dmin, dx),
                accm[c],
            );
        }
    }
    std::array::from_fn(|c| {
        let mut o = [0.0f32; 16];
        // SAFETY: `o` holds 16 f32.
        unsafe { _mm512_storeu_ps(o.as_mut_ptr(), _mm512_sub_ps(acc[c], accm[c])) };
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
        unsafe { q5k_tile_avx2::<G>(tile, nb, x, ahead) }
    }

    #[target_feature(enable = "avx512f,avx512vl,avx512bw,avx512vnni,avx2,fma,f16c")]
    unsafe fn tile_vnni<const G: usize>(
        tile: &[u8],
        nb: usize,
        x: &KColumns<'_, G>,
        ahead: *const u8,
    ) -> [[f32; 16]; G] {
        // SAFETY: the caller guarantees the CPU features; the kernel checks sizes.
        unsafe { q5k_tile_vnni::<G>(tile, nb, x, ahead) }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn rows(w: &Matrix<'_>, first: usize, x: &Columns<'_>, out: &mut [f32]) {
        // SAFETY: the caller guarantees AVX2, FMA and F16C.
        unsafe { rows_avx2(w, first, x, out) }
    }
}

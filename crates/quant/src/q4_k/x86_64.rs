//! x86-64 Q4_K kernels, reached only through the Q4_K kernel-table row (`q4_k.rs`), each
//! held to [`super::Q4K`]'s `dot_ref` bit for bit by the tests:
//! - the tile kernels ([`Rows`] as [`x86k::Tiles`], driven by `x86k::rows_tiled_avx2` /
//!   `rows_tiled_vnni`) on the packed copy ([`super::pack`]), sixteen rows per tile in
//!   the lanes of registers, so the float steps run for many rows at once and a
//!   super-block needs no horizontal sum: [`q4k_tile_vnni`] (AVX-512 VNNI: `vpdpbusd` on
//!   four quants per lane, `vpdpwssd` by the scales) and [`q4k_tile_avx2`] (two halves of
//!   eight rows: `vpmaddubsw` summed in i16, `vpmaddwd` by the scales);
//! - [`rows_avx2`], for rows outside whole tiles and matrices without a packed copy: a
//!   row at a time, each super-block's nibbles unpacked once and shared by up to four
//!   columns, `vpmaddubsw` then `vpmaddwd` by the sub-block scale; per super-block one
//!   horizontal sum of `isum` and `msum` together, and the two float steps in two lanes.
//!
//! - [`VecRows`], ggml's `vec_dot` order (`super::dot_vec_ref`) for the matrices llama.cpp
//!   does not re-lay: a row at a time, eight i32 lanes per super-block fused with `d_x ·
//!   d`, the mins in four f32 lanes.
//!
//! Every column's instruction sequence is the same whatever the group holds, and the
//! float steps are [`crate::kquant`]'s, so a column's bits never depend on its group.

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

/// A Q4_K row · G columns with AVX2, into `out`.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C; every column covers the row's super-blocks
/// (checked).
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4k_group<const G: usize>(row: &[u8], x: &KColumns<'_, G>, out: &mut [f32]) {
    let nb = row.len() / BLOCK_BYTES;
    x.check(nb);
    let w = row.as_ptr();
    let m4 = _mm256_set1_epi8(0xF);
    let mut acc = [_mm_setzero_ps(); G];
    for i in 0..nb {
        // SAFETY: (and every "see above" below) i < nb, so the block's 144 bytes are in the row,
        // and every column holds nb blocks (checked above).
        let b = unsafe { w.add(i * BLOCK_BYTES) };
        x86k::prefetch_ahead(b);
        // SAFETY: see above (the packed scales at 4).
        let (sc, mn) = unsafe { x86k::scales_mins_k4(b.add(4)) };
        let sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_cvtsi64_si128(sc as i64)));
        let mdup = x86k::dup_mins(mn);
        let mut isum = [_mm256_setzero_si256(); G];
        let mut msum = [_mm256_setzero_si256(); G];
        for c in 0..G {
            // SAFETY: see above.
            let bs = unsafe { _mm256_loadu_si256(x.bs[c].as_ptr().add(16 * i).cast()) };
            msum[c] = _mm256_madd_epi16(mdup, bs);
        }
        for j in 0..4 {
            // SAFETY: see above.
            let bits = unsafe { _mm256_loadu_si256(b.add(16 + 32 * j).cast()) };
            let lo = _mm256_and_si256(bits, m4);
            let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(bits), m4);
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

/// Q4_K rows `first..first + out.len() / n` · all n columns with AVX2, row-major
/// into `out` ([`x86k::rows_avx2`] with [`q4k_group`]).
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
        unsafe { q4k_group::<G>(row, x, out) }
    }
}

/// One packed tile (16 rows, `nb` super-blocks) · G columns with AVX2: rows 0..8, then
/// rows 8..16 (the low and high 32 bytes of each line), eight rows in the eight i32 lanes
/// of a register. Per sub-block and column, eight `vpmaddubsw` (nibbles × four activation
/// quants broadcast) summed in i16 (at most 16 · 2 · 15 · 128 < 2^15: exact), then one
/// `vpmaddwd` by the rows' scales as `(sc, sc)` pairs: the sub-block's exact sum; the
/// mins as `(m, m)` pairs by the sub-block's two sums of sixteen. The float steps per
/// super-block are the reference's, lane by lane.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C; `tile` is one whole packed tile of `nb`
/// super-blocks; every column covers them (checked).
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4k_tile_avx2<const G: usize>(
    tile: &[u8],
    nb: usize,
    x: &KColumns<'_, G>,
    ahead: *const u8,
) -> [[f32; 16]; G] {
    assert_eq!(tile.len(), nb * PACK_BLOCK_BYTES);
    x.check(nb);
    let m4 = _mm256_set1_epi8(0xF);
    let pairs = |v: __m256i| _mm256_or_si256(v, _mm256_slli_epi32::<16>(v));
    let mut acc = [[_mm256_setzero_ps(); 2]; G];
    let mut accm = [[_mm256_setzero_ps(); 2]; G];
    for i in 0..nb {
        // SAFETY: (and every "see above" below) i < nb, so the super-block's
        // PACK_BLOCK_BYTES are in the tile, and every column holds nb blocks (checked).
        let b = unsafe { tile.as_ptr().add(i * PACK_BLOCK_BYTES) };
        x86k::prefetch_lines(ahead.wrapping_add(i * PACK_BLOCK_BYTES), PACK_BLOCK_BYTES);
        for h in 0..2 {
            let mut isum = [_mm256_setzero_si256(); G];
            let mut mins = [_mm256_setzero_si256(); 8];
            for s in 0..8 {
                // SAFETY: see above (scales at 2048, mins at 2176, 16 rows per sub-block).
                let (scale, mn) = unsafe {
                    (
                        _mm256_cvtepu8_epi32(_mm_loadl_epi64(b.add(2048 + 16 * s + 8 * h).cast())),
                        _mm256_cvtepu8_epi32(_mm_loadl_epi64(b.add(2176 + 16 * s + 8 * h).cast())),
                    )
                };
                let scale = pairs(scale);
                mins[s] = pairs(mn);
                let mut part = [_mm256_setzero_si256(); G];
                for j in 0..4 {
                    // SAFETY: see above (half h of line 4s + j).
                    let l = unsafe { _mm256_loadu_si256(b.add(64 * (4 * s + j) + 32 * h).cast()) };
                    let lo = _mm256_and_si256(l, m4);
                    let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(l), m4);
                    for c in 0..G {
                        // SAFETY: see above; quants i·256 + 32s + 4j (+ 16) are in the column.
                        let (xl, xh) = unsafe {
                            let q = x.q[c].as_ptr().add(i * QK_K + 32 * s + 4 * j);
                            (
                                _mm256_set1_epi32(q.cast::<i32>().read_unaligned()),
                                _mm256_set1_epi32(q.add(16).cast::<i32>().read_unaligned()),
                            )
                        };
                        let p = _mm256_add_epi16(
                            _mm256_maddubs_epi16(lo, xl),
                            _mm256_maddubs_epi16(hi, xh),
                        );
                        part[c] = _mm256_add_epi16(part[c], p);
                    }
                }
                for c in 0..G {
                    isum[c] = _mm256_add_epi32(isum[c], _mm256_madd_epi16(part[c], scale));
                }
            }
            // SAFETY: see above (d at 2304, dmin at 2336, 16 f16 each).
            let (d, dmin) = unsafe {
                (
                    _mm256_cvtph_ps(_mm_loadu_si128(b.add(2304 + 16 * h).cast())),
                    _mm256_cvtph_ps(_mm_loadu_si128(b.add(2336 + 16 * h).cast())),
                )
            };
            for c in 0..G {
                let mut msum = _mm256_setzero_si256();
                for s in 0..8 {
                    // SAFETY: see above; sums 16i + 2s, 16i + 2s + 1 are in the column.
                    let pair = unsafe {
                        x.bs[c]
                            .as_ptr()
                            .add(16 * i + 2 * s)
                            .cast::<i32>()
                            .read_unaligned()
                    };
                    msum =
                        _mm256_add_epi32(msum, _mm256_madd_epi16(mins[s], _mm256_set1_epi32(pair)));
                }
                let dx = _mm256_set1_ps(x.d[c][i]);
                acc[c][h] =
                    _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[c]), _mm256_mul_ps(d, dx), acc[c][h]);
                accm[c][h] = _mm256_fmadd_ps(
                    _mm256_cvtepi32_ps(msum),
                    _mm256_mul_ps(dmin, dx),
                    accm[c][h],
                );
            }
        }
    }
    std::array::from_fn(|c| {
        let mut o = [0.0f32; 16];
        for h in 0..2 {
            // SAFETY: `o` holds 16 f32: 8 at 8h.
            unsafe {
                _mm256_storeu_ps(
                    o.as_mut_ptr().add(8 * h),
                    _mm256_sub_ps(acc[c][h], accm[c][h]),
                )
            };
        }
        o
    })
}

/// One packed tile (16 rows, `nb` super-blocks) · G columns with AVX-512 VNNI: lane r of
/// every register is row r. Per sub-block and column, two `vpdpbusd` chains of four
/// (sixteen quants each: below 2^15, so `vpdpwssd` by the scale, whose upper 16 bits are
/// zero, multiplies them exactly) and one `vpdpwssd` of the mins (as `(m, m)` pairs) by
/// the sub-block's two sums of sixteen: the exact `isum` and `msum` of [`q4k_group`].
/// The float steps per super-block are then those of the reference, lane by lane.
///
/// # Safety
/// The CPU must support AVX-512 F, VL, BW and VNNI plus AVX2, FMA and F16C; `tile` is one
/// whole packed tile of `nb` super-blocks; every column covers them (checked).
#[target_feature(enable = "avx512f,avx512vl,avx512bw,avx512vnni,avx2,fma,f16c")]
unsafe fn q4k_tile_vnni<const G: usize>(
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
        // SAFETY: (and every "see above" below) i < nb, so the super-block's PACK_BLOCK_BYTES are in
        // the tile, and every column holds nb blocks (checked above).
        let b = unsafe { tile.as_ptr().add(i * PACK_BLOCK_BYTES) };
        x86k::prefetch_lines(ahead.wrapping_add(i * PACK_BLOCK_BYTES), PACK_BLOCK_BYTES);
        let mut isum = [_mm512_setzero_si512(); G];
        let mut msum = [_mm512_setzero_si512(); G];
        for s in 0..8 {
            // SAFETY: see above (scales at 2048, mins at 2176, 16 bytes per sub-block).
            let (scale, mins) = unsafe {
                (
                    _mm512_cvtepu8_epi32(_mm_loadu_si128(b.add(2048 + 16 * s).cast())),
                    _mm512_cvtepu8_epi32(_mm_loadu_si128(b.add(2176 + 16 * s).cast())),
                )
            };
            let mpair = _mm512_or_si512(mins, _mm512_slli_epi32::<16>(mins));
            let mut lo = [_mm512_setzero_si512(); 4];
            let mut hi = [_mm512_setzero_si512(); 4];
            for j in 0..4 {
                // SAFETY: see above (line 4s + j of the super-block's 32).
                let l = unsafe { _mm512_loadu_si512(b.add(64 * (4 * s + j)).cast()) };
                lo[j] = _mm512_and_si512(l, m4);
                hi[j] = _mm512_and_si512(_mm512_srli_epi16::<4>(l), m4);
            }
            for c in 0..G {
                // SAFETY: see above; quants i·256 + 32s + 4k.. and sums 16i + 2s.. are in
                // the column.
                unsafe {
                    let q = x.q[c].as_ptr().add(i * QK_K + 32 * s);
                    let xb =
                        |k: usize| _mm512_set1_epi32(q.add(4 * k).cast::<i32>().read_unaligned());
                    let mut a = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo[0], xb(0));
                    let mut h = _mm512_dpbusd_epi32(_mm512_setzero_si512(), hi[0], xb(4));
                    for j in 1..4 {
                        a = _mm512_dpbusd_epi32(a, lo[j], xb(j));
                        h = _mm512_dpbusd_epi32(h, hi[j], xb(4 + j));
                    }
                    isum[c] = _mm512_dpwssd_epi32(isum[c], a, scale);
                    isum[c] = _mm512_dpwssd_epi32(isum[c], h, scale);
                    let pair = x.bs[c]
                        .as_ptr()
                        .add(16 * i + 2 * s)
                        .cast::<i32>()
                        .read_unaligned();
                    msum[c] = _mm512_dpwssd_epi32(msum[c], mpair, _mm512_set1_epi32(pair));
                }
            }
        }
        // SAFETY: see above (d at 2304, dmin at 2336, 16 f16 each).
        let (d, dmin) = unsafe {
            (
                _mm512_cvtph_ps(_mm256_loadu_si256(b.add(2304).cast())),
                _mm512_cvtph_ps(_mm256_loadu_si256(b.add(2336).cast())),
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
        unsafe { q4k_tile_avx2::<G>(tile, nb, x, ahead) }
    }

    #[target_feature(enable = "avx512f,avx512vl,avx512bw,avx512vnni,avx2,fma,f16c")]
    unsafe fn tile_vnni<const G: usize>(
        tile: &[u8],
        nb: usize,
        x: &KColumns<'_, G>,
        ahead: *const u8,
    ) -> [[f32; 16]; G] {
        // SAFETY: the caller guarantees the CPU features; the kernel checks sizes.
        unsafe { q4k_tile_vnni::<G>(tile, nb, x, ahead) }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn rows(w: &Matrix<'_>, first: usize, x: &Columns<'_>, out: &mut [f32]) {
        // SAFETY: the caller guarantees AVX2, FMA and F16C.
        unsafe { rows_avx2(w, first, x, out) }
    }
}

/// A Q4_K row · G columns in ggml's `vec_dot` order ([`super::dot_vec_ref`]).
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C; every column covers the row's super-blocks
/// (checked).
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn vec_group<const G: usize>(row: &[u8], x: &KColumns<'_, G>, out: &mut [f32]) {
    let nb = row.len() / BLOCK_BYTES;
    x.check(nb);
    let m4 = _mm256_set1_epi8(0xF);
    let mut acc = [_mm256_setzero_ps(); G];
    let mut accm = [[0.0f32; 4]; G];
    for (i, b) in row.chunks_exact(BLOCK_BYTES).enumerate() {
        let p = b.as_ptr();
        x86k::prefetch_ahead(p);
        let (sc, m) = crate::kquant::scales_mins_k4(&b[super::SCALES..super::QS]);
        let scales: [__m256i; 8] = std::array::from_fn(|s| _mm256_set1_epi16(i16::from(sc[s])));
        let mut runs = [_mm256_setzero_si256(); 8];
        for j in 0..4 {
            // SAFETY: the block is 144 bytes, its quants at QS..QS + 128.
            let bytes = unsafe { _mm256_loadu_si256(p.add(super::QS + 32 * j).cast()) };
            runs[2 * j] = _mm256_and_si256(bytes, m4);
            runs[2 * j + 1] = _mm256_and_si256(_mm256_srli_epi16::<4>(bytes), m4);
        }
        let (dw, dminw) = (
            crate::x86_64::f16_at(b, super::D),
            crate::x86_64::f16_at(b, super::DMIN),
        );
        for c in 0..G {
            let (d, q, bs) = (x.d[c], x.q[c], x.bs[c]);
            // SAFETY: super-block i's 256 quants lie inside the column.
            let sumi = unsafe { x86k::scaled_run_sums(&runs, &scales, q.as_ptr().add(i * QK_K)) };
            let dx = d[i];
            acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(dx * dw), _mm256_cvtepi32_ps(sumi), acc[c]);
            let bs = &bs[16 * i..16 * i + 16];
            let sub = |s: usize| i32::from(bs[2 * s]) + i32::from(bs[2 * s + 1]);
            let dmin = -(dx * dminw);
            for k in 0..4 {
                let v = i32::from(m[2 * k]) * sub(2 * k) + i32::from(m[2 * k + 1]) * sub(2 * k + 1);
                accm[c][k] = dmin.mul_add(v as f32, accm[c][k]);
            }
        }
    }
    for c in 0..G {
        let a = accm[c];
        out[c] = crate::x86_64::hsum(acc[c]) + ((a[0] + a[2]) + (a[1] + a[3]));
    }
}

/// ggml's `vec_dot` order as a row kernel ([`x86k::RowGroup`]), run by [`x86k::rows_avx2`].
pub(crate) struct VecRows;

impl x86k::RowGroup for VecRows {
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn group<const G: usize>(row: &[u8], x: &KColumns<'_, G>, out: &mut [f32]) {
        // SAFETY: the caller guarantees AVX2, FMA and F16C; the kernel checks sizes.
        unsafe { vec_group::<G>(row, x, out) }
    }
}

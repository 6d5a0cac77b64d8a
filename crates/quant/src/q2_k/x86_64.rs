//! x86-64 Q2_K kernels, reached only through the Q2_K kernel-table row (`q2_k.rs`), each
//! held to [`super::Q2K`]'s `dot_ref` bit for bit by the tests:
//! - the tile kernels ([`Rows`] as [`x86k::Tiles`]) on the packed copy ([`super::pack`]),
//!   sixteen rows per tile in the lanes of registers: [`q2k_tile_vnni`] (AVX-512 VNNI: per
//!   sub-block a `vpdpbusd` chain of four, below 2^15, then `vpdpwssd` by the scale) and
//!   [`q2k_tile_avx2`] (two halves of eight rows: four `vpmaddubsw` summed in i16, then
//!   `vpmaddwd` by `(sc, sc)` pairs); the mins as `(m_a, m_b)` pairs by the two sums of
//!   sixteen of two sub-blocks;
//! - [`rows_avx2`], for rows outside whole tiles and matrices without a packed copy: a
//!   row at a time, each super-block's 2-bit quants unpacked once and shared by up to four
//!   columns; `vpmaddubsw` then `vpmaddwd` by the sub-block scales, the mins against the
//!   Q8_K sums of sixteen; one horizontal sum of `isum` and `msum` together per
//!   super-block and the two float steps in two lanes of one register;
//! - [`VecRows`], ggml's `vec_dot` order (`super::dot_vec_ref`) for the matrices llama.cpp
//!   does not re-lay: eight i32 lanes of mins and of values per super-block, each fused in
//!   turn into one set of f32 lanes.

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

/// A Q2_K row · G columns with AVX2, into `out`.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C; every column covers the row's super-blocks
/// (checked).
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q2k_group<const G: usize>(row: &[u8], x: &KColumns<'_, G>, out: &mut [f32]) {
    let nb = row.len() / BLOCK_BYTES;
    x.check(nb);
    let w = row.as_ptr();
    let m3 = _mm256_set1_epi8(3);
    let m4 = _mm_set1_epi8(0xF);
    let masks = x86k::half_masks();
    let mut acc = [_mm_setzero_ps(); G];
    for i in 0..nb {
        // SAFETY: (and every "see above" below) i < nb, so the block's 84 bytes are in the row, and
        // every column holds nb blocks (checked above).
        let b = unsafe { w.add(i * BLOCK_BYTES) };
        x86k::prefetch_ahead(b);
        // SAFETY: see above (sixteen scale bytes at 0).
        let sm = unsafe { _mm_loadu_si128(b.cast()) };
        let sc16 = _mm256_cvtepu8_epi16(_mm_and_si128(sm, m4));
        let mins16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16::<4>(sm), m4));
        let mut isum = [_mm256_setzero_si256(); G];
        let mut msum = [_mm256_setzero_si256(); G];
        for c in 0..G {
            // SAFETY: see above.
            let bs = unsafe { _mm256_loadu_si256(x.bs[c].as_ptr().add(16 * i).cast()) };
            msum[c] = _mm256_madd_epi16(mins16, bs);
        }
        for n in 0..2 {
            // SAFETY: see above (qs at 16).
            let bits = unsafe { _mm256_loadu_si256(b.add(16 + 32 * n).cast()) };
            let sc = x86k::half_scales(sc16, n);
            let q = [
                _mm256_and_si256(bits, m3),
                _mm256_and_si256(_mm256_srli_epi16::<2>(bits), m3),
                _mm256_and_si256(_mm256_srli_epi16::<4>(bits), m3),
                _mm256_and_si256(_mm256_srli_epi16::<6>(bits), m3),
            ];
            for j in 0..4 {
                let s = _mm256_shuffle_epi8(sc, masks[j]);
                for c in 0..G {
                    // SAFETY: see above.
                    let xv = unsafe {
                        _mm256_loadu_si256(x.q[c].as_ptr().add(i * QK_K + 128 * n + 32 * j).cast())
                    };
                    let p = _mm256_madd_epi16(s, _mm256_maddubs_epi16(q[j], xv));
                    isum[c] = _mm256_add_epi32(isum[c], p);
                }
            }
        }
        // SAFETY: d and dmin are the block's bytes 80..84.
        let dm = unsafe { x86k::d_dmin(b.add(80)) };
        for c in 0..G {
            acc[c] = x86k::step2(acc[c], isum[c], msum[c], dm, x.d[c][i]);
        }
    }
    for c in 0..G {
        out[c] = x86k::finish2(acc[c]);
    }
}

/// Q2_K rows `first..first + out.len() / n` · all n columns with AVX2, row-major
/// into `out` ([`x86k::rows_avx2`] with [`q2k_group`]).
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
        unsafe { q2k_group::<G>(row, x, out) }
    }
}

/// One packed tile (16 rows, `nb` super-blocks) · G columns with AVX2: rows 0..8, then
/// rows 8..16 (the low and high 32 bytes of each line), eight rows in the eight i32 lanes
/// of a register. Per sub-block and column, four `vpmaddubsw` (quants 0..4 × four
/// activation quants broadcast) summed in i16 (at most 16 · 3 · 128: exact), then
/// `vpmaddwd` by the rows' scales as `(sc, sc)` pairs; per two sub-blocks one `vpmaddwd`
/// of the `(m_a, m_b)` mins by the two sums of sixteen. The float steps per super-block are
/// the reference's, lane by lane.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C; `tile` is one whole packed tile of `nb`
/// super-blocks; every column covers them (checked).
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q2k_tile_avx2<const G: usize>(
    tile: &[u8],
    nb: usize,
    x: &KColumns<'_, G>,
    ahead: *const u8,
) -> [[f32; 16]; G] {
    assert_eq!(tile.len(), nb * PACK_BLOCK_BYTES);
    x.check(nb);
    let m3 = _mm256_set1_epi8(3);
    let m15 = _mm_set1_epi8(15);
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
            for u in 0..8 {
                // SAFETY: see above (scale-and-min bytes at 1024 + 16t, rows 8h8..).
                let (sa, sb) = unsafe {
                    (
                        _mm_loadl_epi64(b.add(1024 + 16 * (2 * u) + 8 * h8).cast()),
                        _mm_loadl_epi64(b.add(1024 + 16 * (2 * u + 1) + 8 * h8).cast()),
                    )
                };
                let (sca, scb) = (_mm_and_si128(sa, m15), _mm_and_si128(sb, m15));
                let scale = [
                    _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(sca, sca)),
                    _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(scb, scb)),
                ];
                let mins = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(
                    _mm_and_si128(_mm_srli_epi16::<4>(sa), m15),
                    _mm_and_si128(_mm_srli_epi16::<4>(sb), m15),
                ));
                let mut r = [[_mm256_setzero_si256(); 4]; 2];
                for (h, rh) in r.iter_mut().enumerate() {
                    // SAFETY: see above (half h8 of quant line 2u + h).
                    let l = unsafe { _mm256_loadu_si256(b.add(64 * (2 * u + h) + 32 * h8).cast()) };
                    *rh = [
                        _mm256_and_si256(l, m3),
                        _mm256_and_si256(_mm256_srli_epi16::<2>(l), m3),
                        _mm256_and_si256(_mm256_srli_epi16::<4>(l), m3),
                        _mm256_and_si256(_mm256_srli_epi16::<6>(l), m3),
                    ];
                }
                for c in 0..G {
                    // SAFETY: see above; quants i·256 + 32u.. + 32 and sums 16i + 2u, + 1
                    // are in the column.
                    unsafe {
                        let q = x.q[c].as_ptr().add(i * QK_K + 32 * u);
                        let xb = |k: usize| {
                            _mm256_set1_epi32(q.add(4 * k).cast::<i32>().read_unaligned())
                        };
                        let mut sum = isum[c];
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
                        let pair = x.bs[c]
                            .as_ptr()
                            .add(16 * i + 2 * u)
                            .cast::<i32>()
                            .read_unaligned();
                        msum[c] = _mm256_add_epi32(
                            msum[c],
                            _mm256_madd_epi16(mins, _mm256_set1_epi32(pair)),
                        );
                    }
                }
            }
            // SAFETY: see above (d at 1280, dmin at 1312, 16 f16 each).
            let (d, dmin) = unsafe {
                (
                    _mm256_cvtph_ps(_mm_loadu_si128(b.add(1280 + 16 * h8).cast())),
                    _mm256_cvtph_ps(_mm_loadu_si128(b.add(1312 + 16 * h8).cast())),
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

/// One packed tile (16 rows, `nb` super-blocks) · G columns with AVX-512 VNNI: lane r of
/// every register is row r. Per sub-block and column, a `vpdpbusd` chain over its four
/// registers (at most 16 · 3 · 128 < 2^15, so `vpdpwssd` by the scale, whose upper 16 bits
/// are zero, multiplies it exactly); per two sub-blocks one `vpdpwssd` of the `(m_a, m_b)`
/// mins by the two sums of sixteen. The float steps are the reference's, lane by lane.
///
/// # Safety
/// The CPU must support AVX-512 F, VL, BW and VNNI plus AVX2, FMA and F16C; `tile` is one
/// whole packed tile of `nb` super-blocks; every column covers them (checked).
#[target_feature(enable = "avx512f,avx512vl,avx512bw,avx512vnni,avx2,fma,f16c")]
unsafe fn q2k_tile_vnni<const G: usize>(
    tile: &[u8],
    nb: usize,
    x: &KColumns<'_, G>,
    ahead: *const u8,
) -> [[f32; 16]; G] {
    assert_eq!(tile.len(), nb * PACK_BLOCK_BYTES);
    x.check(nb);
    let m3 = _mm512_set1_epi8(3);
    let m15 = _mm512_set1_epi32(15);
    let mut acc = [_mm512_setzero_ps(); G];
    let mut accm = [_mm512_setzero_ps(); G];
    for i in 0..nb {
        // SAFETY: (and every "see above" below) i < nb, so the super-block's
        // PACK_BLOCK_BYTES are in the tile, and every column holds nb blocks (checked).
        let b = unsafe { tile.as_ptr().add(i * PACK_BLOCK_BYTES) };
        x86k::prefetch_lines(ahead.wrapping_add(i * PACK_BLOCK_BYTES), PACK_BLOCK_BYTES);
        let mut isum = [_mm512_setzero_si512(); G];
        let mut msum = [_mm512_setzero_si512(); G];
        for u in 0..8 {
            // SAFETY: see above (scale-and-min bytes at 1024 + 16t).
            let (va, vb) = unsafe {
                (
                    _mm512_cvtepu8_epi32(_mm_loadu_si128(b.add(1024 + 16 * (2 * u)).cast())),
                    _mm512_cvtepu8_epi32(_mm_loadu_si128(b.add(1024 + 16 * (2 * u + 1)).cast())),
                )
            };
            let scale = [_mm512_and_si512(va, m15), _mm512_and_si512(vb, m15)];
            let mins = _mm512_or_si512(
                _mm512_srli_epi32::<4>(va),
                _mm512_slli_epi32::<16>(_mm512_srli_epi32::<4>(vb)),
            );
            let mut r = [[_mm512_setzero_si512(); 4]; 2];
            for (h, rh) in r.iter_mut().enumerate() {
                // SAFETY: see above (quant line 2u + h).
                let l = unsafe { _mm512_loadu_si512(b.add(64 * (2 * u + h)).cast()) };
                *rh = [
                    _mm512_and_si512(l, m3),
                    _mm512_and_si512(_mm512_srli_epi16::<2>(l), m3),
                    _mm512_and_si512(_mm512_srli_epi16::<4>(l), m3),
                    _mm512_and_si512(_mm512_srli_epi16::<6>(l), m3),
                ];
            }
            for c in 0..G {
                // SAFETY: see above; quants i·256 + 32u.. + 32 and sums 16i + 2u, + 1 are
                // in the column.
                unsafe {
                    let q = x.q[c].as_ptr().add(i * QK_K + 32 * u);
                    let xb =
                        |k: usize| _mm512_set1_epi32(q.add(4 * k).cast::<i32>().read_unaligned());
                    let mut sum = isum[c];
                    for h in 0..2 {
                        let mut a = _mm512_dpbusd_epi32(_mm512_setzero_si512(), r[h][0], xb(4 * h));
                        for p in 1..4 {
                            a = _mm512_dpbusd_epi32(a, r[h][p], xb(4 * h + p));
                        }
                        sum = _mm512_dpwssd_epi32(sum, a, scale[h]);
                    }
                    isum[c] = sum;
                    let pair = x.bs[c]
                        .as_ptr()
                        .add(16 * i + 2 * u)
                        .cast::<i32>()
                        .read_unaligned();
                    msum[c] = _mm512_dpwssd_epi32(msum[c], mins, _mm512_set1_epi32(pair));
                }
            }
        }
        // SAFETY: see above (d at 1280, dmin at 1312, 16 f16 each).
        let (d, dmin) = unsafe {
            (
                _mm512_cvtph_ps(_mm256_loadu_si256(b.add(1280).cast())),
                _mm512_cvtph_ps(_mm256_loadu_si256(b.add(1312).cast())),
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
        unsafe { q2k_tile_avx2::<G>(tile, nb, x, ahead) }
    }

    #[target_feature(enable = "avx512f,avx512vl,avx512bw,avx512vnni,avx2,fma,f16c")]
    unsafe fn tile_vnni<const G: usize>(
        tile: &[u8],
        nb: usize,
        x: &KColumns<'_, G>,
        ahead: *const u8,
    ) -> [[f32; 16]; G] {
        // SAFETY: the caller guarantees the CPU features; the kernel checks sizes.
        unsafe { q2k_tile_vnni::<G>(tile, nb, x, ahead) }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn rows(w: &Matrix<'_>, first: usize, x: &Columns<'_>, out: &mut [f32]) {
        // SAFETY: the caller guarantees AVX2, FMA and F16C.
        unsafe { rows_avx2(w, first, x, out) }
    }
}

/// A Q2_K row · G columns in ggml's `vec_dot` order ([`super::dot_vec_ref`]).
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C; every column covers the row's super-blocks
/// (checked).
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn vec_group<const G: usize>(row: &[u8], x: &KColumns<'_, G>, out: &mut [f32]) {
    let nb = row.len() / BLOCK_BYTES;
    x.check(nb);
    let m3 = _mm256_set1_epi8(3);
    let mut acc = [_mm256_setzero_ps(); G];
    for (i, b) in row.chunks_exact(BLOCK_BYTES).enumerate() {
        let p = b.as_ptr();
        x86k::prefetch_ahead(p);
        // SAFETY: the block is 84 bytes: scales at 0..16, quants at QS..QS + 64.
        let packed = unsafe { _mm_loadu_si128(p.cast()) };
        let mins = _mm256_cvtepu8_epi16(_mm_and_si128(
            _mm_srli_epi16::<4>(packed),
            _mm_set1_epi8(0xF),
        ));
        let sc: [i8; 16] = std::array::from_fn(|t| (b[t] & 0xF) as i8);
        let mut runs = [_mm256_setzero_si256(); 8];
        for h in 0..2 {
            // SAFETY: see above.
            let bits = unsafe { _mm256_loadu_si256(p.add(super::QS + 32 * h).cast()) };
            for j in 0..4 {
                runs[4 * h + j] =
                    _mm256_and_si256(_mm256_srl_epi16(bits, _mm_cvtsi32_si128(2 * j as i32)), m3);
            }
        }
        let run_scales: [__m256i; 8] = std::array::from_fn(|r| x86k::split_run_scales(&sc, r));
        let (dw, dminw) = (
            crate::x86_64::f16_at(b, super::D),
            crate::x86_64::f16_at(b, super::DMIN),
        );
        for c in 0..G {
            let (d, q, bs) = (x.d[c], x.q[c], x.bs[c]);
            // SAFETY: super-block i's 256 quants and 16 sums lie inside the column.
            let (qx, bsx) = unsafe { (q.as_ptr().add(i * QK_K), bs.as_ptr().add(16 * i)) };
            // SAFETY: sixteen i16 sums (see above).
            let sums = unsafe { _mm256_loadu_si256(bsx.cast()) };
            let prod = _mm256_madd_epi16(mins, sums);
            let dx = d[i];
            acc[c] = _mm256_fmadd_ps(
                _mm256_set1_ps(-(dx * dminw)),
                _mm256_cvtepi32_ps(prod),
                acc[c],
            );
            // SAFETY: super-block i's 256 quants (see above).
            let sumi = unsafe { x86k::scaled_run_sums(&runs, &run_scales, qx) };
            acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(dx * dw), _mm256_cvtepi32_ps(sumi), acc[c]);
        }
    }
    for c in 0..G {
        out[c] = crate::x86_64::hsum(acc[c]);
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

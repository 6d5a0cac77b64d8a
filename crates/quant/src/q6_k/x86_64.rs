//! x86-64 Q6_K kernels, reached only through the Q6_K kernel-table row (`q6_k.rs`), each
//! held to [`super::Q6K`]'s `dot_ref` bit for bit by the tests:
//! - the tile kernels ([`Rows`] as [`x86k::Tiles`], driven by `x86k::rows_tiled_avx2` /
//!   `rows_tiled_vnni`) on the packed copy ([`super::pack`]), sixteen rows per tile in
//!   the lanes of registers: [`q6k_tile_vnni`] (AVX-512 VNNI: per sub-block of sixteen a
//!   `vpdpbusd` chain of four on the quants 0..64, times the scale by `vpmulld`) and
//!   [`q6k_tile_avx2`] (two halves of eight rows: `vpmaddubsw` summed two by two in i16,
//!   `vpmaddwd` by the scales); the -32 offset as `-32 · sc · (sum of sixteen)` by one
//!   multiply-add per two sub-blocks;
//! - [`rows_avx2`], for rows outside whole tiles and matrices without a packed copy: a
//!   row at a time, quants assembled once per group of four columns, `vpmaddubsw` then
//!   `vpmaddwd` by the scales, minus `32 · Σ sc · (sum of sixteen)` (as ggml's x86 kernel
//!   takes the offset); one horizontal sum per super-block, then the float step.
//!
//! Every column's instruction sequence is the same whatever the group holds, and the
//! float step is [`crate::kquant`]'s, so a column's bits never depend on its group.

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

/// A Q6_K row · G columns with AVX2, into `out`.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C; every column covers the row's super-blocks
/// (checked).
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q6k_group<const G: usize>(row: &[u8], x: &KColumns<'_, G>, out: &mut [f32]) {
    let nb = row.len() / BLOCK_BYTES;
    x.check(nb);
    let w = row.as_ptr();
    let m15 = _mm256_set1_epi8(15);
    let m3 = _mm256_set1_epi8(3);
    let m12 = _mm256_set1_epi8(12);
    let m48 = _mm256_set1_epi8(48);
    let m192 = _mm256_set1_epi8(-64);
    // Register k of a half takes sub-block 2k in its low 128 bits, 2k + 1 in its high.
    let masks = x86k::half_masks();
    let mut acc = [0.0f32; G];
    for i in 0..nb {
        // SAFETY: (and every "see above" below) i < nb, so the block's 210 bytes are in the row,
        // and every column holds nb blocks (checked above).
        let b = unsafe { w.add(i * BLOCK_BYTES) };
        x86k::prefetch_ahead(b);
        // SAFETY: see above (sixteen scales at 192).
        let sc_all = _mm256_cvtepi8_epi16(unsafe { _mm_loadu_si128(b.add(192).cast()) });
        let mut isum = [_mm256_setzero_si256(); G];
        for c in 0..G {
            // SAFETY: see above.
            let bs = unsafe { _mm256_loadu_si256(x.bs[c].as_ptr().add(16 * i).cast()) };
            isum[c] = _mm256_sub_epi32(
                isum[c],
                _mm256_slli_epi32::<5>(_mm256_madd_epi16(bs, sc_all)),
            );
        }
        for j in 0..2 {
            // SAFETY: see above.
            let (ql0, ql1, qh) = unsafe {
                (
                    _mm256_loadu_si256(b.add(64 * j).cast()),
                    _mm256_loadu_si256(b.add(64 * j + 32).cast()),
                    _mm256_loadu_si256(b.add(128 + 32 * j).cast()),
                )
            };
            let sc = x86k::half_scales(sc_all, j);
            let q = [
                _mm256_or_si256(
                    _mm256_and_si256(ql0, m15),
                    _mm256_slli_epi16::<4>(_mm256_and_si256(qh, m3)),
                ),
                _mm256_or_si256(
                    _mm256_and_si256(ql1, m15),
                    _mm256_slli_epi16::<2>(_mm256_and_si256(qh, m12)),
                ),
                _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16::<4>(ql0), m15),
                    _mm256_and_si256(qh, m48),
                ),
                _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16::<4>(ql1), m15),
                    _mm256_srli_epi16::<2>(_mm256_and_si256(qh, m192)),
                ),
            ];
            for k in 0..4 {
                let s = _mm256_shuffle_epi8(sc, masks[k]);
                for c in 0..G {
                    // SAFETY: see above.
                    let xv = unsafe {
                        _mm256_loadu_si256(x.q[c].as_ptr().add(i * QK_K + 128 * j + 32 * k).cast())
                    };
                    let p = _mm256_madd_epi16(s, _mm256_maddubs_epi16(q[k], xv));
                    isum[c] = _mm256_add_epi32(isum[c], p);
                }
            }
        }
        // SAFETY: see above (d at 208).
        let d = f16::from_bits(unsafe { b.add(208).cast::<u16>().read_unaligned() }).to_f32();
        for c in 0..G {
            acc[c] = x86k::step1(acc[c], isum[c], d, x.d[c][i]);
        }
    }
    out[..G].copy_from_slice(&acc);
}

/// Q6_K rows `first..first + out.len() / n` · all n columns with AVX2, row-major
/// into `out` ([`x86k::rows_avx2`] with [`q6k_group`]).
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
        unsafe { q6k_group::<G>(row, x, out) }
    }
}

/// One packed tile (16 rows, `nb` super-blocks) · G columns with AVX2: rows 0..8, then
/// rows 8..16 (the low and high 32 bytes of each line), eight rows in the eight i32 lanes
/// of a register. Per sub-block of sixteen and column, four `vpmaddubsw` (quants 0..64 ×
/// four activation quants broadcast), summed two by two in i16 (at most 4 · 63 · 128 <
/// 2^15: exact), each pair times the rows' scales by `vpmaddwd`; the -32 offset as `-32 ·
/// sc · (sum of sixteen)` by one `vpmaddwd` per two sub-blocks: the exact `isum` of
/// [`q6k_group`]. The float step per super-block is the reference's, lane by lane.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C; `tile` is one whole packed tile of `nb`
/// super-blocks; every column covers them (checked).
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q6k_tile_avx2<const G: usize>(
    tile: &[u8],
    nb: usize,
    x: &KColumns<'_, G>,
    ahead: *const u8,
) -> [[f32; 16]; G] {
    assert_eq!(tile.len(), nb * PACK_BLOCK_BYTES);
    x.check(nb);
    let m15 = _mm256_set1_epi8(15);
    let m48 = _mm256_set1_epi8(48);
    let mut acc = [[_mm256_setzero_ps(); 2]; G];
    for i in 0..nb {
        // SAFETY: (and every "see above" below) i < nb, so the super-block's
        // PACK_BLOCK_BYTES are in the tile, and every column holds nb blocks (checked).
        let b = unsafe { tile.as_ptr().add(i * PACK_BLOCK_BYTES) };
        x86k::prefetch_lines(ahead.wrapping_add(i * PACK_BLOCK_BYTES), PACK_BLOCK_BYTES);
        for h in 0..2 {
            let mut isum = [_mm256_setzero_si256(); G];
            for u in 0..8 {
                // SAFETY: see above (the scales of sub-blocks 2u, 2u + 1 at 3072 + 16t,
                // rows 8h..8h + 8; high-bit lines at 2048 + 64t).
                let (sa, sb, ha, hb) = unsafe {
                    (
                        _mm_loadl_epi64(b.add(3072 + 16 * (2 * u) + 8 * h).cast()),
                        _mm_loadl_epi64(b.add(3072 + 16 * (2 * u + 1) + 8 * h).cast()),
                        _mm256_loadu_si256(b.add(2048 + 64 * (2 * u) + 32 * h).cast()),
                        _mm256_loadu_si256(b.add(2048 + 64 * (2 * u + 1) + 32 * h).cast()),
                    )
                };
                // (sc, sc) pairs per row for each sub-block; (-32 sc_a, -32 sc_b) pairs.
                let scale = [
                    _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(sa, sa)),
                    _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(sb, sb)),
                ];
                let offset = _mm256_sub_epi16(
                    _mm256_setzero_si256(),
                    _mm256_slli_epi16::<5>(_mm256_cvtepi8_epi16(_mm_unpacklo_epi8(sa, sb))),
                );
                let high = |hv: __m256i, p: usize| {
                    let moved = match p {
                        0 => _mm256_slli_epi16::<4>(hv),
                        1 => _mm256_slli_epi16::<2>(hv),
                        2 => hv,
                        _ => _mm256_srli_epi16::<2>(hv),
                    };
                    _mm256_and_si256(moved, m48)
                };
                let mut r = [_mm256_setzero_si256(); 8];
                for j in 0..4 {
                    // SAFETY: see above (half h of nibble line 4u + j).
                    let l = unsafe { _mm256_loadu_si256(b.add(64 * (4 * u + j) + 32 * h).cast()) };
                    r[j] = _mm256_or_si256(_mm256_and_si256(l, m15), high(ha, j));
                    r[4 + j] = _mm256_or_si256(
                        _mm256_and_si256(_mm256_srli_epi16::<4>(l), m15),
                        high(hb, j),
                    );
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
                        for t in 0..2 {
                            let p01 = _mm256_add_epi16(
                                _mm256_maddubs_epi16(r[4 * t], xb(4 * t)),
                                _mm256_maddubs_epi16(r[4 * t + 1], xb(4 * t + 1)),
                            );
                            let p23 = _mm256_add_epi16(
                                _mm256_maddubs_epi16(r[4 * t + 2], xb(4 * t + 2)),
                                _mm256_maddubs_epi16(r[4 * t + 3], xb(4 * t + 3)),
                            );
                            sum = _mm256_add_epi32(sum, _mm256_madd_epi16(p01, scale[t]));
                            sum = _mm256_add_epi32(sum, _mm256_madd_epi16(p23, scale[t]));
                        }
                        let pair = x.bs[c]
                            .as_ptr()
                            .add(16 * i + 2 * u)
                            .cast::<i32>()
                            .read_unaligned();
                        isum[c] = _mm256_add_epi32(
                            sum,
                            _mm256_madd_epi16(offset, _mm256_set1_epi32(pair)),
                        );
                    }
                }
            }
            // SAFETY: see above (d at 3328, 16 f16).
            let d = _mm256_cvtph_ps(unsafe { _mm_loadu_si128(b.add(3328 + 16 * h).cast()) });
            for c in 0..G {
                let dx = _mm256_set1_ps(x.d[c][i]);
                acc[c][h] =
                    _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[c]), _mm256_mul_ps(d, dx), acc[c][h]);
            }
        }
    }
    std::array::from_fn(|c| {
        let mut o = [0.0f32; 16];
        for h in 0..2 {
            // SAFETY: `o` holds 16 f32: 8 at 8h.
            unsafe { _mm256_storeu_ps(o.as_mut_ptr().add(8 * h), acc[c][h]) };
        }
        o
    })
}

/// One packed tile (16 rows, `nb` super-blocks) · G columns with AVX-512 VNNI: lane r of
/// every register is row r. Per sub-block t and column, a `vpdpbusd` chain over the
/// sub-block's four registers of quants (0..64), times the scale (`vpmulld`); the -32
/// offset as `-32 · sc · (sum of sixteen)` by one `vpdpwssd` per two sub-blocks: the exact
/// `isum` of [`q6k_group`]; then the reference's float step, lane by lane.
///
/// # Safety
/// The CPU must support AVX-512 F, VL, BW and VNNI plus AVX2, FMA and F16C; `tile` is one
/// whole packed tile of `nb` super-blocks; every column covers them (checked).
#[target_feature(enable = "avx512f,avx512vl,avx512bw,avx512vnni,avx2,fma,f16c")]
unsafe fn q6k_tile_vnni<const G: usize>(
    tile: &[u8],
    nb: usize,
    x: &KColumns<'_, G>,
    ahead: *const u8,
) -> [[f32; 16]; G] {
    assert_eq!(tile.len(), nb * PACK_BLOCK_BYTES);
    x.check(nb);
    let m15 = _mm512_set1_epi8(15);
    let m48 = _mm512_set1_epi8(48);
    let mut acc = [_mm512_setzero_ps(); G];
    for i in 0..nb {
        // SAFETY: (and every "see above" below) i < nb, so the super-block's
        // PACK_BLOCK_BYTES are in the tile, and every column holds nb blocks (checked).
        let b = unsafe { tile.as_ptr().add(i * PACK_BLOCK_BYTES) };
        x86k::prefetch_lines(ahead.wrapping_add(i * PACK_BLOCK_BYTES), PACK_BLOCK_BYTES);
        let mut isum = [_mm512_setzero_si512(); G];
        for u in 0..8 {
            let mut r = [_mm512_setzero_si512(); 8];
            // SAFETY: see above (high-bit lines at 2048 + 64 t).
            let (ha, hb) = unsafe {
                (
                    _mm512_loadu_si512(b.add(2048 + 64 * (2 * u)).cast()),
                    _mm512_loadu_si512(b.add(2048 + 64 * (2 * u + 1)).cast()),
                )
            };
            let high = |h: __m512i, p: usize| match p {
                0 => _mm512_slli_epi16::<4>(h),
                1 => _mm512_slli_epi16::<2>(h),
                2 => h,
                _ => _mm512_srli_epi16::<2>(h),
            };
            for j in 0..4 {
                // SAFETY: see above (nibble line 4u + j).
                let l = unsafe { _mm512_loadu_si512(b.add(64 * (4 * u + j)).cast()) };
                let lo = _mm512_and_si512(l, m15);
                let hi = _mm512_and_si512(_mm512_srli_epi16::<4>(l), m15);
                // (high & 48) | nibble.
                r[j] = _mm512_ternarylogic_epi32::<0xEA>(high(ha, j), m48, lo);
                r[4 + j] = _mm512_ternarylogic_epi32::<0xEA>(high(hb, j), m48, hi);
            }
            // SAFETY: see above (scales at 3072, 16 per sub-block).
            let (sa, sb) = unsafe {
                (
                    _mm_loadu_si128(b.add(3072 + 16 * (2 * u)).cast()),
                    _mm_loadu_si128(b.add(3072 + 16 * (2 * u + 1)).cast()),
                )
            };
            let scale = [_mm512_cvtepi8_epi32(sa), _mm512_cvtepi8_epi32(sb)];
            // (-32 sc_2u, -32 sc_2u+1) i16 pairs per row.
            let pairs = _mm512_inserti64x4::<1>(
                _mm512_castsi256_si512(_mm256_cvtepi8_epi16(_mm_unpacklo_epi8(sa, sb))),
                _mm256_cvtepi8_epi16(_mm_unpackhi_epi8(sa, sb)),
            );
            let offset = _mm512_sub_epi16(_mm512_setzero_si512(), _mm512_slli_epi16::<5>(pairs));
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
                        let mut a =
                            _mm512_dpbusd_epi32(_mm512_setzero_si512(), r[4 * h], xb(4 * h));
                        for p in 1..4 {
                            a = _mm512_dpbusd_epi32(a, r[4 * h + p], xb(4 * h + p));
                        }
                        sum = _mm512_add_epi32(sum, _mm512_mullo_epi32(a, scale[h]));
                    }
                    isum[c] = sum;
                }
            }
        }
        // SAFETY: see above (d at 3328, 16 f16).
        let d = _mm512_cvtph_ps(unsafe { _mm256_loadu_si256(b.add(3328).cast()) });
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
        unsafe { q6k_tile_avx2::<G>(tile, nb, x, ahead) }
    }

    #[target_feature(enable = "avx512f,avx512vl,avx512bw,avx512vnni,avx2,fma,f16c")]
    unsafe fn tile_vnni<const G: usize>(
        tile: &[u8],
        nb: usize,
        x: &KColumns<'_, G>,
        ahead: *const u8,
    ) -> [[f32; 16]; G] {
        // SAFETY: the caller guarantees the CPU features; the kernel checks sizes.
        unsafe { q6k_tile_vnni::<G>(tile, nb, x, ahead) }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn rows(w: &Matrix<'_>, first: usize, x: &Columns<'_>, out: &mut [f32]) {
        // SAFETY: the caller guarantees AVX2, FMA and F16C.
        unsafe { rows_avx2(w, first, x, out) }
    }
}

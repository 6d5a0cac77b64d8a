//! x86-64 TQ1_0 superblock sums for the shared row skeleton (`superblock/x86_64.rs`),
//! reached only through the TQ1_0 kernel-table row (`tq1_0.rs`) and held to
//! [`super::Tq1_0`]'s `dot_ref` bit for bit by the tests.
//!
//! Digits: each packed byte goes to the high half of a 16-bit lane (`vpunpck*bw` with
//! zero), so `vpmullw` by `3^l` leaves `(q · 3^l mod 256) << 8` and `vpmulhuw` by 3 gives
//! `((q · 3^l mod 256) · 3) >> 8`, the digit; `vpackuswb` puts the bytes back in order.
//! The superblock becomes eight registers of 32 digits in value order (five from
//! `qs[0..32]`; two with one digit of `qs[32..48]` per 128-bit half; one with its last
//! digit beside the sixteen digits of `qh`), decoded once for the group of columns. Per
//! column `vpmaddubsw(t, q)` (digits 0..2: pairs at most 512) is summed in i16 lanes
//! (eight per lane: 4096), the Q8_K sums subtracted lane by lane, and `vpmaddwd` by one
//! widens: the lanes add up to `Σ t·q − Σ q = Σ (t − 1)·q`.

// The kernels walk several per-column arrays by one index.
#![allow(clippy::needless_range_loop)]

use std::arch::x86_64::*;

use super::{BLOCK_BYTES, D_AT};
use crate::superblock::x86_64::{Q8kBlock, Superblock};

/// The digits of the bytes held in the high halves of `lo` and `hi`'s 16-bit lanes
/// (`vpunpcklbw` / `vpunpckhbw` of the same register with zero), with `3^l` per lane in
/// `pow_lo` / `pow_hi`, as 32 bytes in the packed register's order.
///
/// # Safety
/// The CPU must support AVX2.
#[inline(always)]
unsafe fn digits(lo: __m256i, hi: __m256i, pow_lo: __m256i, pow_hi: __m256i) -> __m256i {
    // SAFETY: the caller guarantees AVX2.
    unsafe {
        let three = _mm256_set1_epi16(3);
        let t_lo = _mm256_mulhi_epu16(_mm256_mullo_epi16(lo, pow_lo), three);
        let t_hi = _mm256_mulhi_epu16(_mm256_mullo_epi16(hi, pow_hi), three);
        _mm256_packus_epi16(t_lo, t_hi)
    }
}

/// `3^l` in every 16-bit lane of the low 128-bit half, `3^h` in the high half.
///
/// # Safety
/// The CPU must support AVX2.
#[inline(always)]
unsafe fn pow_halves(l: i16, h: i16) -> __m256i {
    // SAFETY: the caller guarantees AVX2.
    unsafe { _mm256_set_m128i(_mm_set1_epi16(h), _mm_set1_epi16(l)) }
}

/// The superblock at `block` as eight registers of 32 digits (0..2), values in order.
///
/// # Safety
/// The CPU must support AVX2; `block` points at a whole superblock.
#[inline(always)]
unsafe fn decode(block: *const u8) -> [__m256i; 8] {
    // SAFETY: qs[0..48] and qh[0..4] are the superblock's first 52 bytes;
    // the caller guarantees AVX2.
    unsafe {
        let zero = _mm256_setzero_si256();
        let a = _mm256_loadu_si256(block.cast());
        let (a_lo, a_hi) = (_mm256_unpacklo_epi8(zero, a), _mm256_unpackhi_epi8(zero, a));
        let mut first = [zero; 5];
        for (l, f) in first.iter_mut().enumerate() {
            let p = _mm256_set1_epi16([1, 3, 9, 27, 81][l]);
            *f = digits(a_lo, a_hi, p, p);
        }
        // qs[32..48] in both halves: digits 0 | 1, then 2 | 3.
        let b = _mm256_broadcastsi128_si256(_mm_loadu_si128(block.add(32).cast()));
        let (b_lo, b_hi) = (_mm256_unpacklo_epi8(zero, b), _mm256_unpackhi_epi8(zero, b));
        let p01 = pow_halves(1, 3);
        let p23 = pow_halves(9, 27);
        let v5 = digits(b_lo, b_hi, p01, p01);
        let v6 = digits(b_lo, b_hi, p23, p23);
        // qs[32..48]'s digit 4 | qh[0..4] four times, digit l from the l-th copy.
        let qh = _mm_set1_epi32(block.add(48).cast::<i32>().read_unaligned());
        let c = _mm256_inserti128_si256::<1>(b, qh);
        let (c_lo, c_hi) = (_mm256_unpacklo_epi8(zero, c), _mm256_unpackhi_epi8(zero, c));
        let pc_lo = _mm256_set_epi16(3, 3, 3, 3, 1, 1, 1, 1, 81, 81, 81, 81, 81, 81, 81, 81);
        let pc_hi = _mm256_set_epi16(27, 27, 27, 27, 9, 9, 9, 9, 81, 81, 81, 81, 81, 81, 81, 81);
        let v7 = digits(c_lo, c_hi, pc_lo, pc_hi);
        [first[0], first[1], first[2], first[3], first[4], v5, v6, v7]
    }
}

/// The AVX2 sums (AVX2, FMA, F16C).
pub(crate) type Avx2 = Tq1<false>;
/// The AVX-512 VNNI sums: `vpdpbusd` (on 256-bit registers) takes the digits times the
/// quants straight into i32 lanes, one instruction per 32 values and column.
pub(crate) type Avx512 = Tq1<true>;

/// The TQ1_0 sums, with `vpdpbusd` when `VNNI` (AVX-512 VNNI and VL).
pub(crate) struct Tq1<const VNNI: bool>;

impl<const VNNI: bool> Superblock for Tq1<VNNI> {
    const BYTES: usize = BLOCK_BYTES;

    #[inline(always)]
    unsafe fn d_bits(block: *const u8) -> u16 {
        // SAFETY: the caller guarantees a whole superblock.
        unsafe { block.add(D_AT).cast::<u16>().read_unaligned() }
    }

    #[inline(always)]
    unsafe fn isums<const G: usize>(block: *const u8, x: [Q8kBlock; G]) -> [__m256i; G] {
        // SAFETY: the caller guarantees AVX2, a whole superblock at `block`
        // and 256 quants and sixteen sums per column.
        unsafe {
            let t = decode(block);
            let mut acc = [_mm256_setzero_si256(); G];
            for (k, &tv) in t.iter().enumerate() {
                for c in 0..G {
                    let q = _mm256_loadu_si256(x[c].q.add(32 * k).cast());
                    acc[c] = if VNNI {
                        _mm256_dpbusd_epi32(acc[c], tv, q)
                    } else {
                        _mm256_add_epi16(acc[c], _mm256_maddubs_epi16(tv, q))
                    };
                }
            }
            let ones = _mm256_set1_epi16(1);
            for c in 0..G {
                let s = _mm256_loadu_si256(x[c].bsums.cast());
                acc[c] = if VNNI {
                    _mm256_sub_epi32(acc[c], _mm256_madd_epi16(s, ones))
                } else {
                    _mm256_madd_epi16(_mm256_sub_epi16(acc[c], s), ones)
                };
            }
            acc
        }
    }
}

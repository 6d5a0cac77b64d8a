//! x86-64 TQ2_0 superblock sums for the shared row skeleton (`superblock/x86_64.rs`),
//! reached only through the TQ2_0 kernel-table row (`tq2_0.rs`) and held to
//! [`super::Tq2_0`]'s `dot_ref` bit for bit by the tests.
//!
//! Each 32-byte half of the codes gives four registers of 32 codes (shift by 0, 2, 4, 6 and
//! mask), in value order, decoded once for the group of columns. Per column
//! `vpmaddubsw(c, q)` (codes 0..3 unsigned: pairs at most 2 · 3 · 128) is summed in i16
//! lanes (at most eight pairs per lane: 6144), the Q8_K sums (|Σ| ≤ 2048 each) are
//! subtracted lane by lane, and `vpmaddwd` by one widens: the lanes add up to
//! `Σ c·q − Σ q = Σ (c − 1)·q`.

// The kernels walk several per-column arrays by one index.
#![allow(clippy::needless_range_loop)]

use std::arch::x86_64::*;

use super::{BLOCK_BYTES, D_AT};
use crate::superblock::x86_64::{Q8kBlock, Superblock};

/// The AVX2 sums (AVX2, FMA, F16C).
pub(crate) type Avx2 = Tq2<false>;
/// The AVX-512 VNNI sums: `vpdpbusd` (on 256-bit registers) takes the codes times the
/// quants straight into i32 lanes, one instruction per 32 values and column.
pub(crate) type Avx512 = Tq2<true>;

/// The TQ2_0 sums, with `vpdpbusd` when `VNNI` (AVX-512 VNNI and VL).
pub(crate) struct Tq2<const VNNI: bool>;

impl<const VNNI: bool> Superblock for Tq2<VNNI> {
    const BYTES: usize = BLOCK_BYTES;

    #[inline(always)]
    unsafe fn d_bits(block: *const u8) -> u16 {
        // SAFETY: the caller guarantees a whole superblock.
        unsafe { block.add(D_AT).cast::<u16>().read_unaligned() }
    }

    #[inline(always)]
    unsafe fn isums<const G: usize>(block: *const u8, x: [Q8kBlock; G]) -> [__m256i; G] {
        // SAFETY: the caller guarantees AVX2, a whole superblock at `block`
        // (its 64 code bytes first) and 256 quants and sixteen sums per column.
        unsafe {
            let m3 = _mm256_set1_epi8(3);
            let mut acc = [_mm256_setzero_si256(); G];
            for j in 0..2 {
                let raw = _mm256_loadu_si256(block.add(32 * j).cast());
                let codes = [
                    _mm256_and_si256(raw, m3),
                    _mm256_and_si256(_mm256_srli_epi16::<2>(raw), m3),
                    _mm256_and_si256(_mm256_srli_epi16::<4>(raw), m3),
                    _mm256_and_si256(_mm256_srli_epi16::<6>(raw), m3),
                ];
                for (l, &cv) in codes.iter().enumerate() {
                    for c in 0..G {
                        let q = _mm256_loadu_si256(x[c].q.add(128 * j + 32 * l).cast());
                        acc[c] = if VNNI {
                            _mm256_dpbusd_epi32(acc[c], cv, q)
                        } else {
                            _mm256_add_epi16(acc[c], _mm256_maddubs_epi16(cv, q))
                        };
                    }
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

//! x86-64 IQ4_XS superblock sums for the shared row skeleton
//! (`superblock/x86_64.rs`), reached only through the IQ4_XS kernel-table row
//! (`iq4_xs.rs`) and held to [`super::Iq4Xs`]'s `dot_ref` bit for bit by the tests:
//! - [`Avx2`]: per sub-block of 32 the sixteen index bytes broadcast to both halves of a
//!   register, the high half shifted by four, masked, and looked up with `vpshufb` in the
//!   table; then per column `vpsignb`, `vpmaddubsw` (`|w| · ±q`, pairs in i16, at most
//!   2 · 127 · 128: no saturation) and `vpmaddwd` by the sub-block scale.
//! - [`Avx512`]: two sub-blocks (64 values) per register; the sign goes onto the
//!   activations by a masked `0 − q` (the same 8-bit wrap as `vpsignb`), and `vpdpwssd`
//!   multiplies by the two scales and accumulates.
//!
//! The weights of a sub-block are decoded once and shared by every column of the group.

// The kernels walk several per-column arrays by one index.
#![allow(clippy::needless_range_loop)]

use std::arch::x86_64::*;

use super::{BLOCK_BYTES, KVALUES_IQ4NL};
use crate::superblock::x86_64::{Q8kBlock, Superblock};

/// The eight sub-block scales `ls` (−32..31) of the superblock at `block` as i16, in
/// order, in both 128-bit halves.
///
/// # Safety
/// The CPU must support AVX2; `block` points at a whole superblock.
#[inline(always)]
unsafe fn scales(block: *const u8) -> __m256i {
    // SAFETY: bytes 2..8 are in the superblock; the caller guarantees AVX2.
    unsafe {
        let h = _mm256_set1_epi32(i32::from(block.add(2).cast::<u16>().read_unaligned()));
        let l = _mm256_set1_epi32(block.add(4).cast::<i32>().read_unaligned());
        let low = _mm256_and_si256(
            _mm256_srlv_epi32(l, _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28)),
            _mm256_set1_epi32(0x0F),
        );
        // ((h >> 2·ib) & 3) << 4: shifted left for ib < 2, right for ib > 2 (a count of
        // 32 gives 0).
        let high = _mm256_and_si256(
            _mm256_sllv_epi32(h, _mm256_setr_epi32(4, 2, 0, 32, 32, 32, 32, 32)),
            _mm256_set1_epi32(0x30),
        );
        let high = _mm256_or_si256(
            high,
            _mm256_and_si256(
                _mm256_srlv_epi32(h, _mm256_setr_epi32(32, 32, 0, 2, 4, 6, 8, 10)),
                _mm256_set1_epi32(0x30),
            ),
        );
        let ls = _mm256_sub_epi32(_mm256_or_si256(low, high), _mm256_set1_epi32(32));
        // Lanes [0..4 | 4..8] as i16 twice per half, then quads (0, 2, 0, 2).
        _mm256_permute4x64_epi64::<0x88>(_mm256_packs_epi32(ls, ls))
    }
}

/// `vpshufb` indices broadcasting i16 lane `ib` of a 128-bit half to all of it.
const SPLAT: [[u8; 32]; 8] = {
    let mut t = [[0u8; 32]; 8];
    let mut ib = 0;
    while ib < 8 {
        let mut k = 0;
        while k < 32 {
            t[ib][k] = (2 * ib + k % 2) as u8;
            k += 1;
        }
        ib += 1;
    }
    t
};

/// The AVX2 sums (AVX2, FMA, F16C).
pub(crate) struct Avx2;

impl Superblock for Avx2 {
    const BYTES: usize = BLOCK_BYTES;
    const FINAL: f32 = 1.0;

    #[inline(always)]
    unsafe fn d_bits(block: *const u8) -> u16 {
        // SAFETY: the caller guarantees a whole superblock.
        unsafe { block.cast::<u16>().read_unaligned() }
    }

    #[inline(always)]
    unsafe fn isums<const G: usize>(block: *const u8, x: [Q8kBlock; G]) -> [__m256i; G] {
        // SAFETY: the caller guarantees AVX2, a whole superblock at `block`
        // (sub-block ib's indices at 8 + 16·ib, inside its 136 bytes) and 256 quants per
        // column.
        unsafe {
            let table = _mm256_broadcastsi128_si256(_mm_loadu_si128(KVALUES_IQ4NL.as_ptr().cast()));
            let m4 = _mm256_set1_epi8(0x0F);
            let high_half = _mm256_set_epi32(4, 4, 4, 4, 0, 0, 0, 0);
            let ls = scales(block);
            let mut acc = [_mm256_setzero_si256(); G];
            for ib in 0..8 {
                let raw =
                    _mm256_broadcastsi128_si256(_mm_loadu_si128(block.add(8 + 16 * ib).cast()));
                let idx = _mm256_and_si256(_mm256_srlv_epi32(raw, high_half), m4);
                let w = _mm256_shuffle_epi8(table, idx);
                let aw = _mm256_sign_epi8(w, w);
                let scale = _mm256_shuffle_epi8(ls, _mm256_loadu_si256(SPLAT[ib].as_ptr().cast()));
                for c in 0..G {
                    let q = _mm256_loadu_si256(x[c].q.add(32 * ib).cast());
                    let p = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(q, w));
                    acc[c] = _mm256_add_epi32(acc[c], _mm256_madd_epi16(p, scale));
                }
            }
            acc
        }
    }
}

/// `vpshufb` indices giving the 128-bit halves 0, 1 i16 lane 2p and halves 2, 3 lane
/// 2p + 1 of each half: sub-blocks 2p and 2p + 1's scales for a 64-value register.
const PAIR: [[u8; 64]; 4] = {
    let mut t = [[0u8; 64]; 4];
    let mut p = 0;
    while p < 4 {
        let mut k = 0;
        while k < 64 {
            t[p][k] = (2 * (2 * p + k / 32) + k % 2) as u8;
            k += 1;
        }
        p += 1;
    }
    t
};

/// The AVX-512 sums (F, VL, BW, VNNI, with the AVX2 set).
pub(crate) struct Avx512;

impl Superblock for Avx512 {
    const BYTES: usize = BLOCK_BYTES;
    const FINAL: f32 = 1.0;

    #[inline(always)]
    unsafe fn d_bits(block: *const u8) -> u16 {
        // SAFETY: the caller guarantees a whole superblock.
        unsafe { block.cast::<u16>().read_unaligned() }
    }

    #[inline(always)]
    unsafe fn isums<const G: usize>(block: *const u8, x: [Q8kBlock; G]) -> [__m256i; G] {
        // SAFETY: the caller guarantees AVX-512 F, BW and VNNI, a whole
        // superblock at `block` (sub-blocks 2p and 2p + 1's indices at 8 + 32·p, 32 bytes
        // inside its 136) and 256 quants per column.
        unsafe {
            let table = _mm512_broadcast_i32x4(_mm_loadu_si128(KVALUES_IQ4NL.as_ptr().cast()));
            let m4 = _mm512_set1_epi8(0x0F);
            let zero = _mm512_setzero_si512();
            let ls = _mm512_broadcast_i32x4(_mm256_castsi256_si128(scales(block)));
            let mut acc = [zero; G];
            for p in 0..4 {
                // 128-bit lanes: sub-block 2p's bytes twice, then 2p + 1's twice; the second
                // copy of each shifted down a nibble: values in order 64p..64p + 64.
                let raw = _mm512_castsi256_si512(_mm256_loadu_si256(block.add(8 + 32 * p).cast()));
                let lanes = _mm512_shuffle_i64x2::<0x50>(raw, raw);
                let shifted = _mm512_mask_srli_epi16::<4>(lanes, 0xFF00_FF00, lanes);
                let w = _mm512_shuffle_epi8(table, _mm512_and_si512(shifted, m4));
                let aw = _mm512_abs_epi8(w);
                let neg = _mm512_movepi8_mask(w);
                let scale = _mm512_shuffle_epi8(ls, _mm512_loadu_si512(PAIR[p].as_ptr().cast()));
                for c in 0..G {
                    let q = _mm512_loadu_si512(x[c].q.add(64 * p).cast());
                    let sq = _mm512_mask_sub_epi8(q, neg, zero, q);
                    acc[c] = _mm512_dpwssd_epi32(acc[c], _mm512_maddubs_epi16(aw, sq), scale);
                }
            }
            let mut out = [_mm256_setzero_si256(); G];
            for c in 0..G {
                out[c] = _mm256_add_epi32(
                    _mm512_castsi512_si256(acc[c]),
                    _mm512_extracti64x4_epi64::<1>(acc[c]),
                );
            }
            out
        }
    }
}

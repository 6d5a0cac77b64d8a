//! IQ1_M's fields for the shared IQ1 sums (`iq1_s/x86_64.rs`, which explains the
//! arithmetic): per group its own delta, per run of sixteen its own scale.

use std::arch::x86_64::*;

use super::{BLOCK_BYTES, SCALES_AT};
use crate::iq1_s::x86_64::Iq1Layout;

/// IQ1_M's fields.
pub(crate) struct SubM;

impl Iq1Layout for SubM {
    const BYTES: usize = BLOCK_BYTES;

    #[inline(always)]
    unsafe fn d_bits(block: *const u8) -> u16 {
        // SAFETY: the four u16 at SCALES_AT are the superblock's last eight bytes.
        let sc = unsafe { block.add(SCALES_AT).cast::<u64>().read_unaligned() };
        (0..4).fold(0u16, |d, k| {
            d | (((sc >> (16 * k + 12)) & 0xF) as u16) << (4 * k)
        })
    }

    #[inline(always)]
    unsafe fn groups(block: *const u8, k: usize) -> (__m256i, __m256i) {
        // SAFETY: the nibble bytes 32 + 4k..32 + 4k + 4 and the index bytes 8k..8k + 8 are
        // in the superblock; the caller guarantees AVX2.
        unsafe {
            let b = _mm_cvtsi32_si128(block.add(32 + 4 * k).cast::<i32>().read_unaligned());
            // Each nibble byte twice, as i32 lanes; the odd lanes take the high nibble.
            let twice = _mm256_cvtepu8_epi32(_mm_unpacklo_epi8(b, b));
            let nib = _mm256_and_si256(
                _mm256_srlv_epi32(twice, _mm256_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4)),
                _mm256_set1_epi32(0x0F),
            );
            let high = _mm256_slli_epi32::<8>(_mm256_and_si256(nib, _mm256_set1_epi32(7)));
            let low = _mm256_cvtepu8_epi32(_mm_loadl_epi64(block.add(8 * k).cast()));
            let negative = _mm256_and_si256(nib, _mm256_set1_epi32(8));
            let plus = _mm256_and_si256(
                _mm256_cmpeq_epi32(negative, _mm256_setzero_si256()),
                _mm256_set1_epi32(0x0202_0202),
            );
            (_mm256_or_si256(low, high), plus)
        }
    }

    #[inline(always)]
    unsafe fn run_scales(block: *const u8) -> __m256i {
        // SAFETY: the four u16 at SCALES_AT are the superblock's last eight bytes; the
        // caller guarantees AVX2.
        unsafe {
            let sc = _mm_loadl_epi64(block.add(SCALES_AT).cast());
            // Lane 4u + f holds u16 u (run r = 4u + f takes bits 3f..3f + 3 of it).
            let pairs = _mm_unpacklo_epi16(sc, sc);
            let words = _mm256_set_m128i(
                _mm_unpackhi_epi32(pairs, pairs),
                _mm_unpacklo_epi32(pairs, pairs),
            );
            // Bits 3f..3f + 3 to the top by 2^(13 − 3f), then down to 0..3.
            let up = _mm256_setr_epi16(
                1 << 13,
                1 << 10,
                1 << 7,
                1 << 4,
                1 << 13,
                1 << 10,
                1 << 7,
                1 << 4,
                1 << 13,
                1 << 10,
                1 << 7,
                1 << 4,
                1 << 13,
                1 << 10,
                1 << 7,
                1 << 4,
            );
            let s = _mm256_srli_epi16::<13>(_mm256_mullo_epi16(words, up));
            _mm256_add_epi16(_mm256_add_epi16(s, s), _mm256_set1_epi16(1))
        }
    }
}

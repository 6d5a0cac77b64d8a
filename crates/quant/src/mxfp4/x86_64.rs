//! MXFP4's decoders for the shared kernels of `legacy/`: the codes look up `KVALUES + 12`
//! (unsigned, 0..=24; `vpshufb`); the E8M0 bytes become `e8m0_half` lanes with integer
//! operations. A packed tile block (16 rows, 272 bytes) is the codes in lanes (256 bytes),
//! then the 16 exponent bytes.

use std::arch::x86_64::*;

use super::{Mxfp4, KVALUES};
use crate::legacy::tiles::{pack_nibbles, tile_nibbles, tile_nibbles8, TileRuns, TILE_ROWS};
use crate::legacy::x86_64::{nibbles32, table32, Avx2Runs, ROWS};

/// What the codes add to the table values.
const OFFSET: i32 = 12;

/// [`KVALUES`] plus [`OFFSET`], the unsigned codes of both kernels.
const CODES: [i8; 16] = {
    let mut t = [0i8; 16];
    let mut i = 0;
    while i < 16 {
        t[i] = KVALUES[i] + OFFSET as i8;
        i += 1;
    }
    t
};

/// `e8m0_half` of eight exponents (i32 lanes): `0x0020_0000 << e` for `e < 2`, else
/// `(e − 1) << 23`, as f32 bits.
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn e8m0_half8(e: __m256i) -> __m256 {
    let sub = _mm256_sllv_epi32(_mm256_set1_epi32(0x0020_0000), e);
    let normal = _mm256_slli_epi32::<23>(_mm256_sub_epi32(e, _mm256_set1_epi32(1)));
    let small = _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e);
    _mm256_castsi256_ps(_mm256_blendv_epi8(normal, sub, small))
}

impl Avx2Runs for Mxfp4 {
    const OFFSET: i32 = OFFSET;

    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn codes(p: *const u8, _sub: usize) -> __m256i {
        // SAFETY: the caller guarantees a whole block: its codes are bytes 1..17.
        unsafe { _mm256_shuffle_epi8(table32(&CODES), nibbles32(p.add(1))) }
    }

    #[target_feature(enable = "avx2,f16c")]
    #[inline]
    unsafe fn scales8(ps: &[*const u8; ROWS]) -> (__m256, __m256) {
        // SAFETY: the caller guarantees whole blocks, which start with e.
        let e = |i: usize| i32::from(unsafe { *ps[i] });
        let v = _mm256_setr_epi32(e(0), e(1), e(2), e(3), e(4), e(5), e(6), e(7));
        // SAFETY: AVX2 is among this function's features.
        (unsafe { e8m0_half8(v) }, _mm256_setzero_ps())
    }
}

impl TileRuns for Mxfp4 {
    const TILE_BLOCK_BYTES: usize = 256 + 16;
    const TILE_OFFSET: i32 = OFFSET;

    fn pack_block(blocks: &[&[u8]; TILE_ROWS], out: &mut [u8]) {
        pack_nibbles(blocks, 1, &mut out[..256]);
        for (r, b) in blocks.iter().enumerate() {
            out[256 + r] = b[0];
        }
    }

    #[target_feature(enable = "avx512f,avx512bw")]
    #[inline]
    unsafe fn tile_codes(p: *const u8, _sub: usize) -> [__m512i; 8] {
        // SAFETY: `CODES` is 16 bytes.
        let t = _mm512_broadcast_i32x4(unsafe { _mm_loadu_si128(CODES.as_ptr().cast()) });
        // SAFETY: the caller guarantees a whole tile block, which starts with 256 bytes of
        // codes.
        unsafe { tile_nibbles(p) }.map(|i| _mm512_shuffle_epi8(t, i))
    }

    #[target_feature(enable = "avx512f")]
    #[inline]
    unsafe fn tile_scales(p: *const u8) -> (__m512, __m512) {
        // SAFETY: the caller guarantees a whole tile block: the 16 exponents at 256.
        let e = _mm512_cvtepu8_epi32(unsafe { _mm_loadu_si128(p.add(256).cast()) });
        let sub = _mm512_sllv_epi32(_mm512_set1_epi32(0x0020_0000), e);
        let normal = _mm512_slli_epi32::<23>(_mm512_sub_epi32(e, _mm512_set1_epi32(1)));
        let small = _mm512_cmplt_epu32_mask(e, _mm512_set1_epi32(2));
        (
            _mm512_castsi512_ps(_mm512_mask_blend_epi32(small, normal, sub)),
            _mm512_setzero_ps(),
        )
    }

    const I16_SUMS: usize = 4;

    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn tile_codes8(p: *const u8, _sub: usize, half: usize) -> [__m256i; 8] {
        // SAFETY: `CODES` is 16 bytes.
        let t = unsafe { table32(&CODES) };
        // SAFETY: the caller guarantees a whole tile block, which starts with 256 bytes of
        // codes, and half < 2.
        unsafe { tile_nibbles8(p, half) }.map(|i| _mm256_shuffle_epi8(t, i))
    }

    #[target_feature(enable = "avx2,f16c")]
    #[inline]
    unsafe fn tile_scales8(p: *const u8, half: usize) -> (__m256, __m256) {
        // SAFETY: the caller guarantees a whole tile block: the 16 exponents at 256; half
        // < 2 picks eight of them.
        let e = _mm256_cvtepu8_epi32(unsafe { _mm_loadl_epi64(p.add(256 + 8 * half).cast()) });
        // SAFETY: AVX2 is among this function's features.
        (unsafe { e8m0_half8(e) }, _mm256_setzero_ps())
    }
}

//! Q1_0's decoders for the shared kernels of `legacy/`: a run's 32 bits become codes `2 ·
//! bit` (the value plus one); a packed tile block (16 rows, 288 bytes) is, per run, the
//! bits as eight byte masks (64 bytes, [`pack_bits`]), then the 16 scales as f16.

use std::arch::x86_64::*;

use super::Q1_0;
use crate::legacy::tiles::{
    pack_bits, pack_f16, tile_f16, tile_f16_8, tile_mask, tile_mask8, TileRuns, TILE_ROWS,
};
use crate::legacy::x86_64::{bits32, f16x8, Avx2Runs, ROWS};

impl Avx2Runs for Q1_0 {
    const OFFSET: i32 = 1;

    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn codes(p: *const u8, sub: usize) -> __m256i {
        // SAFETY: the caller guarantees a whole block: run sub's bits are bytes 2 + 4 sub
        // .. 6 + 4 sub, sub < 4.
        let set = unsafe { bits32(p.add(2 + 4 * sub)) };
        _mm256_and_si256(set, _mm256_set1_epi8(2))
    }

    #[target_feature(enable = "avx2,f16c")]
    #[inline]
    unsafe fn scales8(ps: &[*const u8; ROWS]) -> (__m256, __m256) {
        // SAFETY: the caller guarantees whole blocks, which start with d.
        (unsafe { f16x8(ps, 0) }, _mm256_setzero_ps())
    }
}

impl TileRuns for Q1_0 {
    const TILE_BLOCK_BYTES: usize = 4 * 64 + 32;
    const TILE_OFFSET: i32 = 1;

    fn pack_block(blocks: &[&[u8]; TILE_ROWS], out: &mut [u8]) {
        for sub in 0..4 {
            let at = 2 + 4 * sub;
            let words =
                blocks.map(|b| u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]));
            pack_bits(&words, &mut out[64 * sub..64 * sub + 64]);
        }
        pack_f16(blocks, 0, &mut out[256..288]);
    }

    #[target_feature(enable = "avx512f,avx512bw")]
    #[inline]
    unsafe fn tile_codes(p: *const u8, sub: usize) -> [__m512i; 8] {
        let two = _mm512_set1_epi8(2);
        std::array::from_fn(|k| {
            // SAFETY: the caller guarantees a whole tile block: run sub's masks are bytes
            // 64 sub .. 64 sub + 64, sub < 4.
            let set = unsafe { tile_mask(p.add(64 * sub), k) };
            _mm512_maskz_mov_epi8(set, two)
        })
    }

    #[target_feature(enable = "avx512f")]
    #[inline]
    unsafe fn tile_scales(p: *const u8) -> (__m512, __m512) {
        // SAFETY: the caller guarantees a whole tile block: d at 256.
        (unsafe { tile_f16(p.add(256)) }, _mm512_setzero_ps())
    }

    const I16_SUMS: usize = 8;

    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn tile_codes8(p: *const u8, sub: usize, half: usize) -> [__m256i; 8] {
        let two = _mm256_set1_epi8(2);
        std::array::from_fn(|k| {
            // SAFETY: the caller guarantees a whole tile block (run sub's masks are bytes
            // 64 sub .. 64 sub + 64, sub < 4) and half < 2.
            let set = unsafe { tile_mask8(p.add(64 * sub), k, half) };
            _mm256_and_si256(set, two)
        })
    }

    #[target_feature(enable = "avx2,f16c")]
    #[inline]
    unsafe fn tile_scales8(p: *const u8, half: usize) -> (__m256, __m256) {
        // SAFETY: the caller guarantees a whole tile block: d at 256.
        (unsafe { tile_f16_8(p.add(256), half) }, _mm256_setzero_ps())
    }
}

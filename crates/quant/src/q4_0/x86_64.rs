//! Q4_0's decoders for the shared kernels of `legacy/`: the raw nibbles are the codes
//! (`q_w = w + 8`, unsigned, at most 15); a packed tile block (16 rows, 288 bytes) is the
//! nibbles in lanes (256 bytes), then the 16 scales as f16.

use std::arch::x86_64::*;

use super::Q4_0;
use crate::legacy::tiles::{
    pack_f16, pack_nibbles, tile_f16, tile_f16_8, tile_nibbles8, tile_nibbles_x16, TileRuns,
    TILE_ROWS,
};
use crate::legacy::x86_64::{f16x8, nibbles32, Avx2Runs, ROWS};

impl Avx2Runs for Q4_0 {
    const OFFSET: i32 = 8;

    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn codes(p: *const u8, _sub: usize) -> __m256i {
        // SAFETY: the caller guarantees a whole block: its quants are bytes 2..18.
        unsafe { nibbles32(p.add(2)) }
    }

    #[target_feature(enable = "avx2,f16c")]
    #[inline]
    unsafe fn scales8(ps: &[*const u8; ROWS]) -> (__m256, __m256) {
        // SAFETY: the caller guarantees whole blocks, which start with d.
        (unsafe { f16x8(ps, 0) }, _mm256_setzero_ps())
    }
}

impl TileRuns for Q4_0 {
    const TILE_BLOCK_BYTES: usize = 256 + 32;
    const TILE_OFFSET: i32 = 8;

    fn pack_block(blocks: &[&[u8]; TILE_ROWS], out: &mut [u8]) {
        pack_nibbles(blocks, 2, &mut out[..256]);
        pack_f16(blocks, 0, &mut out[256..288]);
    }

    #[target_feature(enable = "avx512f,avx512bw")]
    #[inline]
    unsafe fn tile_codes(p: *const u8, _sub: usize) -> [__m512i; 8] {
        // SAFETY: the caller guarantees a whole tile block, which starts with 256 bytes of
        // nibbles.
        unsafe { tile_nibbles_x16(p) }
    }

    const HIGH_X16: bool = true;

    #[target_feature(enable = "avx512f")]
    #[inline]
    unsafe fn tile_scales(p: *const u8) -> (__m512, __m512) {
        // SAFETY: the caller guarantees a whole tile block: d at 256.
        (unsafe { tile_f16(p.add(256)) }, _mm512_setzero_ps())
    }

    const I16_SUMS: usize = 8;

    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn tile_codes8(p: *const u8, _sub: usize, half: usize) -> [__m256i; 8] {
        // SAFETY: the caller guarantees a whole tile block and half < 2.
        unsafe { tile_nibbles8(p, half) }
    }

    #[target_feature(enable = "avx2,f16c")]
    #[inline]
    unsafe fn tile_scales8(p: *const u8, half: usize) -> (__m256, __m256) {
        // SAFETY: the caller guarantees a whole tile block: d at 256.
        (unsafe { tile_f16_8(p.add(256), half) }, _mm256_setzero_ps())
    }
}

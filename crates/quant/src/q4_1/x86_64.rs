//! Q4_1's decoders for the shared kernels of `legacy/`: on the file's layout the 16 nibble
//! bytes become 32 unsigned codes (the quants themselves, at most 15, fit `vpmaddubsw`
//! with no offset), `d` and `m` eight rows at a time; a packed tile block (16 rows, 320
//! bytes) is the nibbles in lanes (256 bytes, [`pack_nibbles`]), then the 16 `d` and the
//! 16 `m` as f16.

use std::arch::x86_64::*;

use super::Q4_1;
use crate::legacy::tiles::{
    pack_f16, pack_nibbles, tile_f16, tile_f16_8, tile_nibbles8, tile_nibbles_x16, TileRuns,
    TILE_ROWS,
};
use crate::legacy::x86_64::{f16_pairs8, nibbles32, Avx2Runs, ROWS};

impl Avx2Runs for Q4_1 {
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn codes(p: *const u8, _sub: usize) -> __m256i {
        // SAFETY: the caller guarantees a whole block: its quants are bytes 4..20.
        unsafe { nibbles32(p.add(4)) }
    }

    #[target_feature(enable = "avx2,f16c")]
    #[inline]
    unsafe fn scales8(ps: &[*const u8; ROWS]) -> (__m256, __m256) {
        // SAFETY: the caller guarantees whole blocks, which start with d and m.
        unsafe { f16_pairs8(ps) }
    }
}

impl TileRuns for Q4_1 {
    const TILE_BLOCK_BYTES: usize = 256 + 64;

    fn pack_block(blocks: &[&[u8]; TILE_ROWS], out: &mut [u8]) {
        pack_nibbles(blocks, 4, &mut out[..256]);
        pack_f16(blocks, 0, &mut out[256..288]);
        pack_f16(blocks, 2, &mut out[288..320]);
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
        // SAFETY: the caller guarantees a whole tile block: d at 256, m at 288.
        unsafe { (tile_f16(p.add(256)), tile_f16(p.add(288))) }
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
        // SAFETY: the caller guarantees a whole tile block: d at 256, m at 288.
        unsafe { (tile_f16_8(p.add(256), half), tile_f16_8(p.add(288), half)) }
    }
}

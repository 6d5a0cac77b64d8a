//! Q5_0's decoders for the shared kernels of `legacy/`: the raw 5-bit quants are the
//! codes (`q_w = w + 16`, unsigned, at most 31); a packed tile block (16 rows, 352 bytes)
//! is the nibbles in lanes (256 bytes), the fifth bits as eight byte masks (64 bytes,
//! [`pack_bits`]), then the 16 scales as f16.

use std::arch::x86_64::*;

use super::Q5_0;
use crate::legacy::tiles::{
    pack_bits, pack_f16, pack_nibbles, tile_f16, tile_f16_8, tile_fifth_bits, tile_fifth_bits8,
    TileRuns, TILE_ROWS,
};
use crate::legacy::x86_64::{f16x8, five_bits32, Avx2Runs, ROWS};

impl Avx2Runs for Q5_0 {
    const OFFSET: i32 = 16;

    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn codes(p: *const u8, _sub: usize) -> __m256i {
        // SAFETY: the caller guarantees a whole block: qh at 2..6, nibbles at 6..22.
        unsafe { five_bits32(p.add(2), p.add(6)) }
    }

    #[target_feature(enable = "avx2,f16c")]
    #[inline]
    unsafe fn scales8(ps: &[*const u8; ROWS]) -> (__m256, __m256) {
        // SAFETY: the caller guarantees whole blocks, which start with d.
        (unsafe { f16x8(ps, 0) }, _mm256_setzero_ps())
    }
}

impl TileRuns for Q5_0 {
    const TILE_BLOCK_BYTES: usize = 256 + 64 + 32;
    const TILE_OFFSET: i32 = 16;

    fn pack_block(blocks: &[&[u8]; TILE_ROWS], out: &mut [u8]) {
        pack_nibbles(blocks, 6, &mut out[..256]);
        let qh = blocks.map(|b| u32::from_le_bytes([b[2], b[3], b[4], b[5]]));
        pack_bits(&qh, &mut out[256..320]);
        pack_f16(blocks, 0, &mut out[320..352]);
    }

    #[target_feature(enable = "avx512f,avx512bw")]
    #[inline]
    unsafe fn tile_codes(p: *const u8, _sub: usize) -> [__m512i; 8] {
        // SAFETY: the caller guarantees a whole tile block: nibbles at 0..256, the fifth
        // bits' masks at 256..320.
        unsafe { tile_fifth_bits(p, p.add(256)) }
    }

    #[target_feature(enable = "avx512f")]
    #[inline]
    unsafe fn tile_scales(p: *const u8) -> (__m512, __m512) {
        // SAFETY: the caller guarantees a whole tile block: d at 320.
        (unsafe { tile_f16(p.add(320)) }, _mm512_setzero_ps())
    }
    const I16_SUMS: usize = 4;

    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn tile_codes8(p: *const u8, _sub: usize, half: usize) -> [__m256i; 8] {
        // SAFETY: the caller guarantees a whole tile block (nibbles at 0..256, the fifth
        // bits' masks at 256..320) and half < 2.
        unsafe { tile_fifth_bits8(p, p.add(256), half) }
    }

    #[target_feature(enable = "avx2,f16c")]
    #[inline]
    unsafe fn tile_scales8(p: *const u8, half: usize) -> (__m256, __m256) {
        // SAFETY: the caller guarantees a whole tile block: d at 320.
        (unsafe { tile_f16_8(p.add(320), half) }, _mm256_setzero_ps())
    }
}

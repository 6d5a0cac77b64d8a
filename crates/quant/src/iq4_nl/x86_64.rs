//! IQ4_NL's decoders for the shared kernels of `legacy/`: on the file's layout the
//! indices look up the signed table values (`vpshufb`), met as `|q_x| · sign(v, q_x)`; a
//! packed tile block (16 rows, 288 bytes) is the indices in lanes (256 bytes), then the 16
//! scales as f16, and decodes to `KVALUES + 128` (unsigned codes, 1..=241).

use std::arch::x86_64::*;

use super::{Iq4Nl, KVALUES};
use crate::legacy::tiles::{pack_f16, pack_nibbles, tile_f16, tile_nibbles, TileRuns, TILE_ROWS};
use crate::legacy::x86_64::{f16x8, nibbles32, table32, Avx2Runs, ROWS};

/// [`KVALUES`] plus 128, as the unsigned codes of the packed kernel.
const CODES: [i8; 16] = {
    let mut t = [0i8; 16];
    let mut i = 0;
    while i < 16 {
        t[i] = (KVALUES[i] as i16 + 128) as u8 as i8;
        i += 1;
    }
    t
};

impl Avx2Runs for Iq4Nl {
    const SIGNED: bool = true;

    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn codes(p: *const u8, _sub: usize) -> __m256i {
        // SAFETY: the caller guarantees a whole block: its indices are bytes 2..18.
        unsafe { _mm256_shuffle_epi8(table32(&KVALUES), nibbles32(p.add(2))) }
    }

    #[target_feature(enable = "avx2,f16c")]
    #[inline]
    unsafe fn scales8(ps: &[*const u8; ROWS]) -> (__m256, __m256) {
        // SAFETY: the caller guarantees whole blocks, which start with d.
        (unsafe { f16x8(ps, 0) }, _mm256_setzero_ps())
    }
}

impl TileRuns for Iq4Nl {
    const TILE_BLOCK_BYTES: usize = 256 + 32;
    const TILE_OFFSET: i32 = 128;

    fn pack_block(blocks: &[&[u8]; TILE_ROWS], out: &mut [u8]) {
        pack_nibbles(blocks, 2, &mut out[..256]);
        pack_f16(blocks, 0, &mut out[256..288]);
    }

    #[target_feature(enable = "avx512f,avx512bw")]
    #[inline]
    unsafe fn tile_codes(p: *const u8, _sub: usize) -> [__m512i; 8] {
        // SAFETY: `CODES` is 16 bytes.
        let t = _mm512_broadcast_i32x4(unsafe { _mm_loadu_si128(CODES.as_ptr().cast()) });
        // SAFETY: the caller guarantees a whole tile block, which starts with 256 bytes of
        // indices.
        unsafe { tile_nibbles(p) }.map(|i| _mm512_shuffle_epi8(t, i))
    }

    #[target_feature(enable = "avx512f")]
    #[inline]
    unsafe fn tile_scales(p: *const u8) -> (__m512, __m512) {
        // SAFETY: the caller guarantees a whole tile block: d at 256.
        (unsafe { tile_f16(p.add(256)) }, _mm512_setzero_ps())
    }

    /// The codes reach 241, beyond `vpmaddubsw`'s reach: the AVX2 kernel reads the file.
    const AVX2: bool = false;

    unsafe fn tile_codes8(_p: *const u8, _sub: usize, _half: usize) -> [__m256i; 8] {
        unreachable!("the AVX2 kernel does not read IQ4_NL tiles (TileRuns::AVX2)")
    }

    unsafe fn tile_scales8(_p: *const u8, _half: usize) -> (__m256, __m256) {
        unreachable!("the AVX2 kernel does not read IQ4_NL tiles (TileRuns::AVX2)")
    }
}

//! IQ3_S decoding for the shared lattice kernels (`iq_lattice/x86_64.rs`).

use std::arch::x86_64::*;

use super::Iq3S;
use crate::iq_grids::IQ3S_GRID;
use crate::iq_lattice::x86_64::decode::{self, Shared};
use crate::iq_lattice::x86_64::decode512;
use crate::iq_lattice::x86_64::{DecodeAvx2, DecodeAvx512, Pair, Run};

impl DecodeAvx2 for Iq3S {
    type State = Shared;

    #[target_feature(enable = "avx2")]
    unsafe fn prepare(blk: *const u8) -> Shared {
        // SAFETY: the caller guarantees a whole block (110 bytes) at blk: the sign bytes
        // are bytes 74..106 and the scales 106..110.
        let (signs, sc) = unsafe {
            (
                _mm256_loadu_si256(blk.add(74).cast()),
                _mm_cvtsi32_si128(blk.add(106).cast::<i32>().read_unaligned()),
            )
        };
        // One field per run of 32 (low nibble first), each twice: one per run of 16.
        let m = _mm_set1_epi8(0x0F);
        let ls = _mm_unpacklo_epi8(
            _mm_and_si128(sc, m),
            _mm_and_si128(_mm_srli_epi16::<4>(sc), m),
        );
        Shared {
            signs: decode::halves(signs),
            mult: decode::mult_bytes(_mm_unpacklo_epi8(ls, ls)),
        }
    }

    #[target_feature(enable = "avx2")]
    unsafe fn run(st: &Shared, blk: *const u8, j: usize) -> Run {
        // SAFETY: run j < 8 of a whole block: its eight low index bytes are bytes
        // 2 + 8j..10 + 8j, its high bits byte 66 + j.
        let (low, qh) = unsafe {
            (
                _mm256_cvtepu8_epi32(_mm_loadl_epi64(blk.add(2 + 8 * j).cast())),
                i32::from(*blk.add(66 + j)),
            )
        };
        // Bit k of qh moved to bit 8 of index k.
        let high = _mm256_and_si256(
            _mm256_sllv_epi32(
                _mm256_set1_epi32(qh),
                _mm256_setr_epi32(8, 7, 6, 5, 4, 3, 2, 1),
            ),
            _mm256_set1_epi32(0x100),
        );
        let idx = _mm256_or_si256(low, high);
        // SAFETY: the indices have 9 bits, below the grid's 512 entries.
        let mag = unsafe { _mm256_i32gather_epi32::<4>(IQ3S_GRID.as_ptr().cast(), idx) };
        Run {
            mag,
            sign: decode::run_signs(&st.signs, j),
            mult: decode::run_mult(st.mult, j),
        }
    }
}

impl DecodeAvx512 for Iq3S {
    type State = __m512i;

    #[target_feature(enable = "avx512f,avx512vl,avx512bw,avx2")]
    unsafe fn prepare512(blk: *const u8) -> __m512i {
        // SAFETY: the caller guarantees a whole block (110 bytes) at blk: the scales are
        // bytes 106..110.
        let sc = unsafe { _mm_cvtsi32_si128(blk.add(106).cast::<i32>().read_unaligned()) };
        let m = _mm_set1_epi8(0x0F);
        let ls = _mm_unpacklo_epi8(
            _mm_and_si128(sc, m),
            _mm_and_si128(_mm_srli_epi16::<4>(sc), m),
        );
        decode512::mult_bytes(_mm_unpacklo_epi8(ls, ls))
    }

    #[target_feature(enable = "avx512f,avx512vl,avx512bw,avx2")]
    unsafe fn pair(st: &__m512i, blk: *const u8, t: usize) -> Pair {
        // SAFETY: pair t < 4 of a whole block: its sixteen low index bytes are bytes
        // 2 + 16t..18 + 16t, its high bits bytes 66 + 2t..68 + 2t, its sign bytes
        // 74 + 8t..82 + 8t.
        let (low, qh, neg) = unsafe {
            (
                _mm512_cvtepu8_epi32(_mm_loadu_si128(blk.add(2 + 16 * t).cast())),
                blk.add(66 + 2 * t).cast::<u16>().read_unaligned(),
                blk.add(74 + 8 * t).cast::<u64>().read_unaligned(),
            )
        };
        // Bit l of the two qh bytes is bit 8 of index l.
        let idx = _mm512_mask_or_epi32(low, qh, low, _mm512_set1_epi32(0x100));
        // SAFETY: the indices have 9 bits, below the grid's 512 entries.
        let mag = unsafe { _mm512_i32gather_epi32::<4>(idx, IQ3S_GRID.as_ptr().cast()) };
        Pair {
            mag,
            neg,
            mult: decode512::pair_mult(*st, t),
        }
    }
}

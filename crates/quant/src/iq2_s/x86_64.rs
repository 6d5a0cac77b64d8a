//! IQ2_S decoding for the shared lattice kernels (`iq_lattice/x86_64.rs`).

use std::arch::x86_64::*;

use super::Iq2S;
use crate::iq_grids::IQ2S_GRID;
use crate::iq_lattice::x86_64::decode::{self, Shared};
use crate::iq_lattice::x86_64::decode512;
use crate::iq_lattice::x86_64::{DecodeAvx2, DecodeAvx512, Pair, Run};

impl DecodeAvx2 for Iq2S {
    type State = Shared;

    #[target_feature(enable = "avx2")]
    unsafe fn prepare(blk: *const u8) -> Shared {
        // SAFETY: the caller guarantees a whole block (82 bytes) at blk: the sign bytes are
        // bytes 34..66 and the scales 74..82.
        let (signs, ls) = unsafe {
            (
                _mm256_loadu_si256(blk.add(34).cast()),
                decode::nibbles8(blk.add(74)),
            )
        };
        Shared {
            signs: decode::halves(signs),
            mult: decode::mult_bytes(ls),
        }
    }

    #[target_feature(enable = "avx2")]
    unsafe fn run(st: &Shared, blk: *const u8, j: usize) -> Run {
        // SAFETY: run j < 8 of a whole block: its four low index bytes are bytes
        // 2 + 4j..6 + 4j, its high bits byte 66 + j.
        let (low, qh) = unsafe {
            (
                _mm_cvtepu8_epi32(_mm_cvtsi32_si128(
                    blk.add(2 + 4 * j).cast::<i32>().read_unaligned(),
                )),
                i32::from(*blk.add(66 + j)),
            )
        };
        // Bits 2l..2l + 2 of qh moved to bits 8..10 of index l.
        let high = _mm_and_si128(
            _mm_sllv_epi32(_mm_set1_epi32(qh), _mm_setr_epi32(8, 6, 4, 2)),
            _mm_set1_epi32(0x300),
        );
        let idx = _mm_or_si128(low, high);
        // SAFETY: the indices have 10 bits, below the grid's 1024 entries.
        let mag = unsafe { _mm256_i32gather_epi64::<8>(IQ2S_GRID.as_ptr().cast(), idx) };
        Run {
            mag,
            sign: decode::run_signs(&st.signs, j),
            mult: decode::run_mult(st.mult, j),
        }
    }
}

impl DecodeAvx512 for Iq2S {
    type State = __m512i;

    #[target_feature(enable = "avx512f,avx512vl,avx512bw,avx2")]
    unsafe fn prepare512(blk: *const u8) -> __m512i {
        // SAFETY: the caller guarantees a whole block (82 bytes) at blk: the scales are
        // bytes 74..82.
        decode512::mult_bytes(unsafe { decode::nibbles8(blk.add(74)) })
    }

    #[target_feature(enable = "avx512f,avx512vl,avx512bw,avx2")]
    unsafe fn pair(st: &__m512i, blk: *const u8, t: usize) -> Pair {
        // SAFETY: pair t < 4 of a whole block: its eight low index bytes are bytes
        // 2 + 8t..10 + 8t, its sign bytes 34 + 8t..42 + 8t, its high bits bytes
        // 66 + 2t..68 + 2t.
        let (low, neg, qh) = unsafe {
            (
                _mm256_cvtepu8_epi32(_mm_loadl_epi64(blk.add(2 + 8 * t).cast())),
                blk.add(34 + 8 * t).cast::<u64>().read_unaligned(),
                i32::from(blk.add(66 + 2 * t).cast::<u16>().read_unaligned()),
            )
        };
        // Bits 2l..2l + 2 of the two qh bytes moved to bits 8..10 of index l.
        let high = _mm256_slli_epi32::<8>(_mm256_and_si256(
            _mm256_srlv_epi32(
                _mm256_set1_epi32(qh),
                _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14),
            ),
            _mm256_set1_epi32(3),
        ));
        let idx = _mm256_or_si256(low, high);
        // SAFETY: the indices have 10 bits, below the grid's 1024 entries.
        let mag = unsafe { _mm512_i32gather_epi64::<8>(idx, IQ2S_GRID.as_ptr().cast()) };
        Pair {
            mag,
            neg,
            mult: decode512::pair_mult(*st, t),
        }
    }
}

//! IQ3_XXS decoding for the shared lattice kernels (`iq_lattice/x86_64.rs`).

use std::arch::x86_64::*;

use super::Iq3Xxs;
use crate::iq_grids::IQ3XXS_GRID;
use crate::iq_lattice::x86_64::decode::{self, Shared};
use crate::iq_lattice::x86_64::decode512::{self, Shared512};
use crate::iq_lattice::x86_64::{DecodeAvx2, DecodeAvx512, Pair, Run};

impl DecodeAvx2 for Iq3Xxs {
    type State = Shared;

    #[target_feature(enable = "avx2")]
    unsafe fn prepare(blk: *const u8) -> Shared {
        // SAFETY: the caller guarantees a whole block (98 bytes) at blk: the eight words of
        // signs and scales are bytes 66..98.
        let aux = unsafe { _mm256_loadu_si256(blk.add(66).cast()) };
        let signs = decode::with_parity(decode::spread7(aux));
        Shared {
            signs: decode::halves(signs),
            mult: decode::mult_bytes(decode::ls_of_lanes(aux)),
        }
    }

    #[target_feature(enable = "avx2")]
    unsafe fn run(st: &Shared, blk: *const u8, j: usize) -> Run {
        // SAFETY: run j < 8 of a whole block: its eight index bytes are bytes
        // 2 + 8j..10 + 8j.
        let idx = unsafe { _mm256_cvtepu8_epi32(_mm_loadl_epi64(blk.add(2 + 8 * j).cast())) };
        // SAFETY: the indices are bytes, below the grid's 256 entries.
        let mag = unsafe { _mm256_i32gather_epi32::<4>(IQ3XXS_GRID.as_ptr().cast(), idx) };
        Run {
            mag,
            sign: decode::run_signs(&st.signs, j),
            mult: decode::run_mult(st.mult, j),
        }
    }
}

impl DecodeAvx512 for Iq3Xxs {
    type State = Shared512;

    #[target_feature(enable = "avx512f,avx512vl,avx512bw,avx2")]
    unsafe fn prepare512(blk: *const u8) -> Shared512 {
        // SAFETY: the caller guarantees a whole block (98 bytes) at blk.
        let aux = unsafe { _mm256_loadu_si256(blk.add(66).cast()) };
        Shared512 {
            neg: decode512::masks(decode::with_parity(decode::spread7(aux))),
            mult: decode512::mult_bytes(decode::ls_of_lanes(aux)),
        }
    }

    #[target_feature(enable = "avx512f,avx512vl,avx512bw,avx2")]
    unsafe fn pair(st: &Shared512, blk: *const u8, t: usize) -> Pair {
        // SAFETY: pair t < 4 of a whole block: its sixteen index bytes are bytes
        // 2 + 16t..18 + 16t.
        let idx = unsafe { _mm512_cvtepu8_epi32(_mm_loadu_si128(blk.add(2 + 16 * t).cast())) };
        // SAFETY: the indices are bytes, below the grid's 256 entries.
        let mag = unsafe { _mm512_i32gather_epi32::<4>(idx, IQ3XXS_GRID.as_ptr().cast()) };
        Pair {
            mag,
            neg: st.neg[t],
            mult: decode512::pair_mult(st.mult, t),
        }
    }
}

//! IQ2_XXS decoding for the shared lattice kernels (`iq_lattice/x86_64.rs`).

use std::arch::x86_64::*;

use super::Iq2Xxs;
use crate::iq_grids::IQ2XXS_GRID;
use crate::iq_lattice::x86_64::decode::{self, Shared};
use crate::iq_lattice::x86_64::decode512::{self, Shared512};
use crate::iq_lattice::x86_64::{DecodeAvx2, DecodeAvx512, Pair, Run};

impl DecodeAvx2 for Iq2Xxs {
    type State = Shared;

    #[target_feature(enable = "avx2")]
    unsafe fn prepare(blk: *const u8) -> Shared {
        // SAFETY: the caller guarantees a whole block (66 bytes) at blk: bytes 2..66.
        let (a, b) = unsafe {
            (
                _mm256_loadu_si256(blk.add(2).cast()),
                _mm256_loadu_si256(blk.add(34).cast()),
            )
        };
        // The odd 32-bit words of the eight runs, in run order.
        let odd =
            _mm256_shuffle_ps::<0b11_01_11_01>(_mm256_castsi256_ps(a), _mm256_castsi256_ps(b));
        let aux = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_castps_si256(odd));
        let signs = decode::with_parity(decode::spread7(aux));
        Shared {
            signs: decode::halves(signs),
            mult: decode::mult_bytes(decode::ls_of_lanes(aux)),
        }
    }

    #[target_feature(enable = "avx2")]
    unsafe fn run(st: &Shared, blk: *const u8, j: usize) -> Run {
        // SAFETY: run j < 8 of a whole block: its four index bytes are bytes 2 + 8j..6 + 8j.
        let idx = unsafe {
            _mm_cvtepu8_epi32(_mm_cvtsi32_si128(
                blk.add(2 + 8 * j).cast::<i32>().read_unaligned(),
            ))
        };
        // SAFETY: the indices are bytes, below the grid's 256 entries.
        let mag = unsafe { _mm256_i32gather_epi64::<8>(IQ2XXS_GRID.as_ptr().cast(), idx) };
        Run {
            mag,
            sign: decode::run_signs(&st.signs, j),
            mult: decode::run_mult(st.mult, j),
        }
    }
}

impl DecodeAvx512 for Iq2Xxs {
    type State = Shared512;

    #[target_feature(enable = "avx512f,avx512vl,avx512bw,avx2")]
    unsafe fn prepare512(blk: *const u8) -> Shared512 {
        // SAFETY: the caller guarantees a whole block (66 bytes) at blk.
        let (a, b) = unsafe {
            (
                _mm256_loadu_si256(blk.add(2).cast()),
                _mm256_loadu_si256(blk.add(34).cast()),
            )
        };
        let odd =
            _mm256_shuffle_ps::<0b11_01_11_01>(_mm256_castsi256_ps(a), _mm256_castsi256_ps(b));
        let aux = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_castps_si256(odd));
        Shared512 {
            neg: decode512::masks(decode::with_parity(decode::spread7(aux))),
            mult: decode512::mult_bytes(decode::ls_of_lanes(aux)),
        }
    }

    #[target_feature(enable = "avx512f,avx512vl,avx512bw,avx2")]
    unsafe fn pair(st: &Shared512, blk: *const u8, t: usize) -> Pair {
        // SAFETY: pair t < 4 of a whole block: runs 2t and 2t + 1 are bytes
        // 2 + 16t..18 + 16t, their index bytes the first four of each eight.
        let v = unsafe { _mm_loadu_si128(blk.add(2 + 16 * t).cast()) };
        let pick = _mm_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, -1, -1, -1, -1, -1, -1, -1, -1);
        let idx = _mm256_cvtepu8_epi32(_mm_shuffle_epi8(v, pick));
        // SAFETY: the indices are bytes, below the grid's 256 entries.
        let mag = unsafe { _mm512_i32gather_epi64::<8>(idx, IQ2XXS_GRID.as_ptr().cast()) };
        Pair {
            mag,
            neg: st.neg[t],
            mult: decode512::pair_mult(st.mult, t),
        }
    }
}

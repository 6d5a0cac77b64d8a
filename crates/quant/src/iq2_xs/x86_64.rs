//! IQ2_XS decoding for the shared lattice kernels (`iq_lattice/x86_64.rs`).

use std::arch::x86_64::*;

use super::Iq2Xs;
use crate::iq_grids::IQ2XS_GRID;
use crate::iq_lattice::x86_64::decode::{self, Shared};
use crate::iq_lattice::x86_64::decode512::{self, Shared512};
use crate::iq_lattice::x86_64::{DecodeAvx2, DecodeAvx512, Pair, Run};

impl DecodeAvx2 for Iq2Xs {
    type State = Shared;

    #[target_feature(enable = "avx2")]
    unsafe fn prepare(blk: *const u8) -> Shared {
        // SAFETY: the caller guarantees a whole block (74 bytes) at blk: `qs` is bytes
        // 2..66 and the scales 66..74.
        let (a, b, ls) = unsafe {
            (
                _mm256_loadu_si256(blk.add(2).cast()),
                _mm256_loadu_si256(blk.add(34).cast()),
                decode::nibbles8(blk.add(66)),
            )
        };
        // Sign indices (bits 9..16 of each u16) as bytes, in order.
        let packed = _mm256_packus_epi16(_mm256_srli_epi16::<9>(a), _mm256_srli_epi16::<9>(b));
        let signs = decode::with_parity(_mm256_permute4x64_epi64::<0b11_01_10_00>(packed));
        Shared {
            signs: decode::halves(signs),
            mult: decode::mult_bytes(ls),
        }
    }

    #[target_feature(enable = "avx2")]
    unsafe fn run(st: &Shared, blk: *const u8, j: usize) -> Run {
        // SAFETY: run j < 8 of a whole block: its four u16 are bytes 2 + 8j..10 + 8j.
        let q = unsafe { _mm_loadl_epi64(blk.add(2 + 8 * j).cast()) };
        let idx = _mm_and_si128(_mm_cvtepu16_epi32(q), _mm_set1_epi32(511));
        // SAFETY: the indices are masked to 9 bits, below the grid's 512 entries.
        let mag = unsafe { _mm256_i32gather_epi64::<8>(IQ2XS_GRID.as_ptr().cast(), idx) };
        Run {
            mag,
            sign: decode::run_signs(&st.signs, j),
            mult: decode::run_mult(st.mult, j),
        }
    }
}

impl DecodeAvx512 for Iq2Xs {
    type State = Shared512;

    #[target_feature(enable = "avx512f,avx512vl,avx512bw,avx2")]
    unsafe fn prepare512(blk: *const u8) -> Shared512 {
        // SAFETY: the caller guarantees a whole block (74 bytes) at blk.
        let (a, b, ls) = unsafe {
            (
                _mm256_loadu_si256(blk.add(2).cast()),
                _mm256_loadu_si256(blk.add(34).cast()),
                decode::nibbles8(blk.add(66)),
            )
        };
        let packed = _mm256_packus_epi16(_mm256_srli_epi16::<9>(a), _mm256_srli_epi16::<9>(b));
        let signs = decode::with_parity(_mm256_permute4x64_epi64::<0b11_01_10_00>(packed));
        Shared512 {
            neg: decode512::masks(signs),
            mult: decode512::mult_bytes(ls),
        }
    }

    #[target_feature(enable = "avx512f,avx512vl,avx512bw,avx2")]
    unsafe fn pair(st: &Shared512, blk: *const u8, t: usize) -> Pair {
        // SAFETY: pair t < 4 of a whole block: its eight u16 are bytes 2 + 16t..18 + 16t.
        let q = unsafe { _mm_loadu_si128(blk.add(2 + 16 * t).cast()) };
        let idx = _mm256_and_si256(_mm256_cvtepu16_epi32(q), _mm256_set1_epi32(511));
        // SAFETY: the indices are masked to 9 bits, below the grid's 512 entries.
        let mag = unsafe { _mm512_i32gather_epi64::<8>(idx, IQ2XS_GRID.as_ptr().cast()) };
        Pair {
            mag,
            neg: st.neg[t],
            mult: decode512::pair_mult(st.mult, t),
        }
    }
}

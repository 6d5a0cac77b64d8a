//! x86-64 helpers the formats' kernels share: horizontal sums in a fixed order.

use std::arch::x86_64::*;

/// Horizontal sum of 8 lanes, in a fixed order.
#[target_feature(enable = "avx2")]
pub(crate) fn hsum(v: __m256) -> f32 {
    let s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    let s1 = _mm_add_ss(s2, _mm_shuffle_ps::<1>(s2, s2));
    _mm_cvtss_f32(s1)
}

/// Sum of the eight i32 lanes (wrapping; exact while the true sum fits in i32).
#[target_feature(enable = "avx2")]
pub(crate) fn hsum_i32(v: __m256i) -> i32 {
    let s4 = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
    let s2 = _mm_add_epi32(s4, _mm_unpackhi_epi64(s4, s4));
    let s1 = _mm_add_epi32(s2, _mm_shuffle_epi32::<1>(s2));
    _mm_cvtsi128_si32(s1)
}

/// The f16 with bits `bits` as f32, by one F16C conversion (inlined into F16C kernels; the
/// `half` crate's conversion checks the CPU on every call).
#[target_feature(enable = "f16c")]
#[inline]
pub(crate) fn f16_to_f32(bits: u16) -> f32 {
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(bits))))
}

/// The little-endian f16 at byte `at` of `b` as f32 ([`f16_to_f32`]).
#[target_feature(enable = "f16c")]
#[inline]
pub(crate) fn f16_at(b: &[u8], at: usize) -> f32 {
    f16_to_f32(u16::from_le_bytes([b[at], b[at + 1]]))
}

/// How a kernel forms eight i32 lanes from 32 byte products `u · s` (`u` unsigned, at most
/// 127 where [`Maddubs`] runs; `s` signed): lane l is `Σ u_j s_j` over bytes 4l..4l + 4.
/// Both ways give the exact sums, so a kernel's bits do not depend on which one ran; the
/// choice is speed (one `vpdpbusd` against `vpmaddubsw` + `vpmaddwd`).
pub(crate) trait LaneDot {
    /// `acc` plus the lane sums of `u · s`.
    ///
    /// # Safety
    /// The CPU must have the implementation's instruction set (the caller's kernel enables
    /// it).
    unsafe fn dot(acc: __m256i, u: __m256i, s: __m256i) -> __m256i;
    /// Whether `u` may be any byte, so that signed values may be met as the unsigned codes
    /// `v + 128` (their sums corrected by `-128 · Σs`: the same exact integers).
    const WIDE: bool;
}

/// AVX2: `vpmaddubsw` (pairs in i16; exact while `u ≤ 127`, as 2 · 127 · 128 < 2^15) then
/// `vpmaddwd` by ones.
pub(crate) struct Maddubs;

impl LaneDot for Maddubs {
    const WIDE: bool = false;
    #[inline(always)]
    unsafe fn dot(acc: __m256i, u: __m256i, s: __m256i) -> __m256i {
        // SAFETY: the caller's kernel enables AVX2.
        unsafe {
            let pairs = _mm256_maddubs_epi16(u, s);
            _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)))
        }
    }
}

/// AVX-512 VNNI on 256-bit registers: one `vpdpbusd` (exact for every byte).
pub(crate) struct Dpbusd;

impl LaneDot for Dpbusd {
    const WIDE: bool = true;
    #[inline(always)]
    unsafe fn dot(acc: __m256i, u: __m256i, s: __m256i) -> __m256i {
        // SAFETY: the caller's kernel enables AVX-512 VL and VNNI.
        unsafe { _mm256_dpbusd_epi32(acc, u, s) }
    }
}

//! The x86-64 Q8_K activation quantizer: AVX2, the reference's bytes.

use std::arch::x86_64::*;

use super::{BLOCK_BYTES, QK_K};

/// Quantizes whole Q8_K blocks with AVX2: the bytes of
/// [`crate::q8_k::quantize_activations_ref`] (ggml's `quantize_row_q8_K_ref`), tested.
///
/// Per block: the largest magnitude by a lane-wise max that, as the reference's strict
/// `>`, never takes a NaN; the signed value is the first one of that magnitude in index
/// order (the reference keeps the first); `iscale = -127 / max`; each quant is ggml's
/// `nearest_int(iscale · x)` (the `+ 1.5 · 2^23` trick: the same f32 addition, then the
/// same bit operations) capped at 127 and cut to its low byte, as C's conversion to
/// `int8_t` does; the sums of sixteen are summed from those bytes.
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn quantize_q8_k_avx2(x: &[f32], out: &mut [u8]) {
    assert_eq!(x.len() % QK_K, 0, "Q8_K input must be whole blocks");
    assert_eq!(out.len(), x.len() / QK_K * BLOCK_BYTES, "Q8_K output size");
    let sign = _mm256_set1_ps(-0.0);
    let magic = _mm256_set1_ps(12_582_912.0);
    let mant = _mm256_set1_epi32(0x007f_ffff);
    let half = _mm256_set1_epi32(0x0040_0000);
    let cap = _mm256_set1_epi32(127);
    let low = _mm256_set1_epi32(0xFF);
    let ones8 = _mm256_set1_epi8(1);
    let ones16 = _mm256_set1_epi16(1);
    let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (xb, ob) in x.chunks_exact(QK_K).zip(out.chunks_exact_mut(BLOCK_BYTES)) {
        let p = xb.as_ptr();
        // SAFETY: (and every load below) xb holds 256 f32: loads at 8k, k < 32, are in it.
        let load = |k: usize| unsafe { _mm256_loadu_ps(p.add(8 * k)) };
        let mut m = _mm256_setzero_ps();
        for k in 0..32 {
            // max(a, m) is m when a is NaN: NaN never becomes the maximum.
            m = _mm256_max_ps(_mm256_andnot_ps(sign, load(k)), m);
        }
        let m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps::<1>(m));
        let m2 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        let amax = _mm_cvtss_f32(_mm_max_ss(m2, _mm_movehdup_ps(m2)));
        if amax == 0.0 {
            ob.fill(0);
            continue;
        }
        let target = _mm256_set1_ps(amax);
        let mut first = QK_K;
        for k in 0..32 {
            let eq = _mm256_cmp_ps::<_CMP_EQ_OQ>(_mm256_andnot_ps(sign, load(k)), target);
            let bits = _mm256_movemask_ps(eq);
            if bits != 0 {
                first = 8 * k + bits.trailing_zeros() as usize;
                break;
            }
        }
        let iscale = -127.0 / xb[first];
        let is = _mm256_set1_ps(iscale);
        let (d, rest) = ob.split_at_mut(4);
        let (qs, sums) = rest.split_at_mut(QK_K);
        let mut s4 = [_mm256_setzero_si256(); 8];
        for (r, s4r) in s4.iter_mut().enumerate() {
            let q: [__m256i; 4] = std::array::from_fn(|j| {
                let v = _mm256_add_ps(_mm256_mul_ps(is, load(4 * r + j)), magic);
                let n = _mm256_sub_epi32(_mm256_and_si256(_mm256_castps_si256(v), mant), half);
                _mm256_and_si256(_mm256_min_epi32(n, cap), low)
            });
            // Low bytes 0..255 pack unsigned without saturating; then back in order.
            let b = _mm256_packus_epi16(
                _mm256_packus_epi32(q[0], q[1]),
                _mm256_packus_epi32(q[2], q[3]),
            );
            let b = _mm256_permutevar8x32_epi32(b, order);
            // SAFETY: qs holds 256 bytes; bytes 32r..32r + 32 are in it for r < 8.
            unsafe { _mm256_storeu_si256(qs.as_mut_ptr().add(32 * r).cast(), b) };
            // Sums of four: lanes 0..4 the first sixteen, 4..8 the second.
            *s4r = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, b), ones16);
        }
        // Sums of sixteen: [r0a r1a r2a r3a | r0b r1b r2b r3b] per pair of hadds.
        let h = |a: usize| {
            _mm256_hadd_epi32(
                _mm256_hadd_epi32(s4[a], s4[a + 1]),
                _mm256_hadd_epi32(s4[a + 2], s4[a + 3]),
            )
        };
        // Runs in order: register r's runs are 2r (low half) and 2r + 1 (high half).
        let interleave = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
        let lo = _mm256_permutevar8x32_epi32(h(0), interleave);
        let hi = _mm256_permutevar8x32_epi32(h(4), interleave);
        let s16 = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_packs_epi32(lo, hi));
        // SAFETY: sums holds 32 bytes.
        unsafe { _mm256_storeu_si256(sums.as_mut_ptr().cast(), s16) };
        d.copy_from_slice(&(1.0 / iscale).to_le_bytes());
    }
}

//! A plain read of bytes at the machine's read bandwidth: the wrapping sum of their
//! little-endian 64-bit words, the reference of what a memory-bound product could reach
//! (`dspark bench`'s bandwidth probe, the `stream` benchmark).
//!
//! How wide the loads are matters: on the Emerald Rapids VM these figures come from, two
//! threads reading a mapped 633 MB file reach ~17 GB/s with 16-byte loads (what portable
//! Rust compiles `u64` lanes to), ~20 with 32-byte ones and ~24 with 64-byte ones
//! (`docs/PERFORMANCE.md`, issue #22). So the read picks the widest loads this CPU has. The
//! sum is wrapping integer addition, whose result does not depend on the order: every
//! path returns the reference's value ([`sum_words_ref`]).

/// The wrapping sum of `b` as little-endian 64-bit words (a last partial word's bytes
/// each added as a value): the reference.
pub fn sum_words_ref(b: &[u8]) -> u64 {
    let mut words = b.chunks_exact(8);
    let mut s = 0u64;
    for w in &mut words {
        s = s.wrapping_add(u64::from_le_bytes(w.try_into().expect("8 bytes")));
    }
    words
        .remainder()
        .iter()
        .fold(s, |s, &x| s.wrapping_add(u64::from(x)))
}

/// [`sum_words_ref`]'s value, read with the widest loads this CPU has (64 bytes under
/// AVX-512 F, 32 under AVX2; otherwise the reference).
pub fn sum_words(b: &[u8]) -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU has AVX-512 F, checked just above.
            return unsafe { x86::sum_words_avx512(b) };
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2, checked just above.
            return unsafe { x86::sum_words_avx2(b) };
        }
    }
    sum_words_ref(b)
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// Bytes one loop iteration reads: four independent accumulators of 64 bytes, so
    /// each core keeps several lines' loads in flight.
    const STEP512: usize = 256;

    /// [`super::sum_words_ref`] with 64-byte loads.
    ///
    /// # Safety
    /// The CPU must have AVX-512 F.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn sum_words_avx512(b: &[u8]) -> u64 {
        let whole = b.len() / STEP512 * STEP512;
        let p = b.as_ptr();
        let mut acc = [_mm512_setzero_si512(); 4];
        let mut at = 0;
        while at < whole {
            for (k, a) in acc.iter_mut().enumerate() {
                // SAFETY: at + 64 k + 64 ≤ whole ≤ b.len(): the 64 bytes are inside `b`;
                // the load is unaligned.
                let v = unsafe { _mm512_loadu_si512(p.add(at + 64 * k).cast()) };
                *a = _mm512_add_epi64(*a, v);
            }
            at += STEP512;
        }
        let v = _mm512_add_epi64(
            _mm512_add_epi64(acc[0], acc[1]),
            _mm512_add_epi64(acc[2], acc[3]),
        );
        let mut lanes = [0u64; 8];
        // SAFETY: `lanes` is 64 writable bytes; the store is unaligned.
        unsafe { _mm512_storeu_si512(lanes.as_mut_ptr().cast(), v) };
        lanes
            .iter()
            .fold(super::sum_words_ref(&b[whole..]), |s, &x| s.wrapping_add(x))
    }

    /// Bytes one AVX2 iteration reads (four 32-byte accumulators).
    const STEP256: usize = 128;

    /// [`super::sum_words_ref`] with 32-byte loads.
    ///
    /// # Safety
    /// The CPU must have AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn sum_words_avx2(b: &[u8]) -> u64 {
        let whole = b.len() / STEP256 * STEP256;
        let p = b.as_ptr();
        let mut acc = [_mm256_setzero_si256(); 4];
        let mut at = 0;
        while at < whole {
            for (k, a) in acc.iter_mut().enumerate() {
                // SAFETY: at + 32 k + 32 ≤ whole ≤ b.len(): the 32 bytes are inside `b`;
                // the load is unaligned.
                let v = unsafe { _mm256_loadu_si256(p.add(at + 32 * k).cast()) };
                *a = _mm256_add_epi64(*a, v);
            }
            at += STEP256;
        }
        let v = _mm256_add_epi64(
            _mm256_add_epi64(acc[0], acc[1]),
            _mm256_add_epi64(acc[2], acc[3]),
        );
        let mut lanes = [0u64; 4];
        // SAFETY: `lanes` is 32 writable bytes; the store is unaligned.
        unsafe { _mm256_storeu_si256(lanes.as_mut_ptr().cast(), v) };
        lanes
            .iter()
            .fold(super::sum_words_ref(&b[whole..]), |s, &x| s.wrapping_add(x))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes whose words carry into the high bits, so a lost or doubled word changes the
    /// sum.
    fn bytes(n: usize) -> Vec<u8> {
        (0..n)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 7) as u8)
            .collect()
    }

    #[test]
    fn every_path_sums_what_the_reference_sums() {
        let b = bytes(5000);
        // Every length around the loops' steps and every misalignment of the start.
        for start in 0..9 {
            for len in (0..700).chain([1023, 1024, 1025, 4096 - start, 4991 - start]) {
                let s = &b[start..start + len];
                let want = sum_words_ref(s);
                assert_eq!(sum_words(s), want, "start {start} len {len}");
                #[cfg(target_arch = "x86_64")]
                {
                    if std::arch::is_x86_feature_detected!("avx2") {
                        // SAFETY: AVX2 checked just above.
                        assert_eq!(unsafe { x86::sum_words_avx2(s) }, want, "avx2 {len}");
                    }
                    if std::arch::is_x86_feature_detected!("avx512f") {
                        // SAFETY: AVX-512 F checked just above.
                        assert_eq!(unsafe { x86::sum_words_avx512(s) }, want, "avx512 {len}");
                    }
                }
            }
        }
    }

    #[test]
    fn the_reference_counts_each_word_and_tail_byte_once() {
        let mut b = vec![0u8; 19];
        b[0] = 1; // word 0: 1
        b[15] = 2; // word 1: 2 << 56
        b[16] = 3; // tail bytes, as values
        b[18] = 4;
        assert_eq!(sum_words_ref(&b), 1 + (2u64 << 56) + 3 + 4);
        assert_eq!(sum_words(&b), sum_words_ref(&b));
    }
}

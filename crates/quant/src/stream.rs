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

    /// A vector register of 64-bit lanes the read sums into.
    trait Lanes: Copy {
        /// Bytes one register loads.
        const BYTES: usize;
        /// All lanes zero.
        ///
        /// # Safety
        /// The CPU must have the register's set.
        unsafe fn zero() -> Self;
        /// The `BYTES` bytes at `p`, unaligned.
        ///
        /// # Safety
        /// `p..p + BYTES` must be readable; the CPU must have the register's set.
        unsafe fn load(p: *const u8) -> Self;
        /// Lane-wise wrapping sum.
        ///
        /// # Safety
        /// The CPU must have the register's set.
        unsafe fn add(self, other: Self) -> Self;
        /// The lanes' wrapping sum.
        ///
        /// # Safety
        /// The CPU must have the register's set.
        unsafe fn total(self) -> u64;
    }

    impl Lanes for __m512i {
        const BYTES: usize = 64;
        #[inline(always)]
        unsafe fn zero() -> Self {
            // SAFETY: the caller's guarantee (AVX-512 F).
            unsafe { _mm512_setzero_si512() }
        }
        #[inline(always)]
        unsafe fn load(p: *const u8) -> Self {
            // SAFETY: the caller's guarantee (64 readable bytes, AVX-512 F).
            unsafe { _mm512_loadu_si512(p.cast()) }
        }
        #[inline(always)]
        unsafe fn add(self, other: Self) -> Self {
            // SAFETY: the caller's guarantee (AVX-512 F).
            unsafe { _mm512_add_epi64(self, other) }
        }
        #[inline(always)]
        unsafe fn total(self) -> u64 {
            let mut lanes = [0u64; 8];
            // SAFETY: `lanes` is 64 writable bytes; the caller's guarantee (AVX-512 F).
            unsafe { _mm512_storeu_si512(lanes.as_mut_ptr().cast(), self) };
            lanes.iter().fold(0, |s, &x| s.wrapping_add(x))
        }
    }

    impl Lanes for __m256i {
        const BYTES: usize = 32;
        #[inline(always)]
        unsafe fn zero() -> Self {
            // SAFETY: the caller's guarantee (AVX2).
            unsafe { _mm256_setzero_si256() }
        }
        #[inline(always)]
        unsafe fn load(p: *const u8) -> Self {
            // SAFETY: the caller's guarantee (32 readable bytes, AVX2).
            unsafe { _mm256_loadu_si256(p.cast()) }
        }
        #[inline(always)]
        unsafe fn add(self, other: Self) -> Self {
            // SAFETY: the caller's guarantee (AVX2).
            unsafe { _mm256_add_epi64(self, other) }
        }
        #[inline(always)]
        unsafe fn total(self) -> u64 {
            let mut lanes = [0u64; 4];
            // SAFETY: `lanes` is 32 writable bytes; the caller's guarantee (AVX2).
            unsafe { _mm256_storeu_si256(lanes.as_mut_ptr().cast(), self) };
            lanes.iter().fold(0, |s, &x| s.wrapping_add(x))
        }
    }

    /// [`super::sum_words_ref`] with loads of `V`: four independent accumulators, so each
    /// core keeps several lines' loads in flight; the bytes after the last whole four
    /// registers by the reference.
    ///
    /// # Safety
    /// The CPU must have `V`'s instruction set (the caller enables it).
    #[inline(always)]
    unsafe fn sum_words_with<V: Lanes>(b: &[u8]) -> u64 {
        let step = 4 * V::BYTES;
        let whole = b.len() / step * step;
        let p = b.as_ptr();
        // SAFETY: the caller enables V's set.
        let mut acc = [unsafe { V::zero() }; 4];
        let mut at = 0;
        while at < whole {
            for (k, a) in acc.iter_mut().enumerate() {
                // SAFETY: at + (k + 1) · BYTES ≤ whole ≤ b.len(): the bytes are inside `b`;
                // the caller enables V's set.
                *a = unsafe { a.add(V::load(p.add(at + k * V::BYTES))) };
            }
            at += step;
        }
        // SAFETY: the caller enables V's set.
        let sum = unsafe { acc[0].add(acc[1]).add(acc[2].add(acc[3])).total() };
        sum.wrapping_add(super::sum_words_ref(&b[whole..]))
    }

    /// [`super::sum_words_ref`] with 64-byte loads.
    ///
    /// # Safety
    /// The CPU must have AVX-512 F.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn sum_words_avx512(b: &[u8]) -> u64 {
        // SAFETY: this function enables AVX-512 F.
        unsafe { sum_words_with::<__m512i>(b) }
    }

    /// [`super::sum_words_ref`] with 32-byte loads.
    ///
    /// # Safety
    /// The CPU must have AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn sum_words_avx2(b: &[u8]) -> u64 {
        // SAFETY: this function enables AVX2.
        unsafe { sum_words_with::<__m256i>(b) }
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

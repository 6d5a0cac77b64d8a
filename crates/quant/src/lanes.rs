//! Summation orders that scalar references and SIMD kernels share, so both give the same
//! bits: a kernel keeps partial sums in vector lanes and reduces them in a fixed tree; a
//! reference keeps the same partial sums in an array and adds them in the same tree.

/// `v[0] + … + v[7]` in the order of an 8-lane horizontal sum (lanes i and i + 4 first,
/// then i and i + 2, then 0 and 1): `((v0+v4) + (v2+v6)) + ((v1+v5) + (v3+v7))`.
#[inline]
pub fn hsum8(v: [f32; 8]) -> f32 {
    let s4 = [v[0] + v[4], v[1] + v[5], v[2] + v[6], v[3] + v[7]];
    let s2 = [s4[0] + s4[2], s4[1] + s4[3]];
    s2[0] + s2[1]
}

/// `v[0] + … + v[15]` in the order of a 16-lane horizontal sum: the two 8-lane halves added
/// lane by lane, then [`hsum8`].
#[inline]
pub fn hsum16(v: [f32; 16]) -> f32 {
    hsum8(std::array::from_fn(|i| v[i] + v[i + 8]))
}

/// Eight exact i32 lanes of `len` products in the layout of ggml's AVX2 `vec_dot`s over
/// runs of 32 (`vpmaddubsw` then `vpmaddwd`): lane `l` sums `term(v)` over the values `v`
/// with `(v mod 32) / 4 == l` (wrapping as the i32 lanes do).
pub(crate) fn position_lanes(len: usize, term: impl Fn(usize) -> i32) -> [i32; 8] {
    let mut lanes = [0i32; 8];
    for v in 0..len {
        let l = (v % 32) / 4;
        lanes[l] = lanes[l].wrapping_add(term(v));
    }
    lanes
}

/// The float steps of ggml's x86 `vec_dot` (and the formats that follow it): per block or
/// superblock eight exact integer lanes, each fused with the block's scale product into its
/// own accumulator (`acc_l = fma(d, lane_l, acc_l)`), reduced by [`hsum8`] at the end;
/// formats with mins also fuse `m · s` products into one scalar, added last.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct LaneAcc {
    acc: [f32; 8],
    summs: f32,
}

impl LaneAcc {
    /// Adds one block's lanes scaled by `d`.
    #[inline(always)]
    pub(crate) fn add(&mut self, d: f32, lanes: &[i32; 8]) {
        for (a, &v) in self.acc.iter_mut().zip(lanes) {
            *a = d.mul_add(v as f32, *a);
        }
    }

    /// Adds one min product, `summs = fma(m, s, summs)`.
    #[inline(always)]
    pub(crate) fn add_min(&mut self, m: f32, s: f32) {
        self.summs = m.mul_add(s, self.summs);
    }

    /// This set of lanes plus `other`'s, lane by lane (formats without mins).
    #[inline(always)]
    pub(crate) fn merged(self, other: LaneAcc) -> LaneAcc {
        LaneAcc {
            acc: std::array::from_fn(|l| self.acc[l] + other.acc[l]),
            summs: self.summs + other.summs,
        }
    }

    /// `hsum8(acc)` (formats without mins).
    #[inline(always)]
    pub(crate) fn sum(self) -> f32 {
        hsum8(self.acc)
    }

    /// The fused min products (IQ1_S's delta sums).
    #[inline(always)]
    pub(crate) fn summs(self) -> f32 {
        self.summs
    }

    /// `hsum8(acc) + summs` (formats with mins).
    #[inline(always)]
    pub(crate) fn sum_with_mins(self) -> f32 {
        hsum8(self.acc) + self.summs
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    #[test]
    fn hsum8_is_the_avx2_horizontal_sum() {
        if !is_x86_feature_detected!("avx2") {
            return;
        }
        let mut rng = 0x9E37_79B9_7F4A_7C15u64;
        for _ in 0..10_000 {
            let v: [f32; 8] = std::array::from_fn(|_| {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                f32::from_bits(0x3000_0000 + (rng as u32 >> 3))
                    * if rng & 1 == 1 { -1.0 } else { 1.0 }
            });
            // SAFETY: AVX2 was detected above; `v` holds 8 f32.
            let fast =
                unsafe { crate::x86_64::hsum(std::arch::x86_64::_mm256_loadu_ps(v.as_ptr())) };
            assert_eq!(fast.to_bits(), super::hsum8(v).to_bits(), "{v:?}");
        }
    }
}

//! SplitMix64: a tiny deterministic generator for synthetic weights and test inputs.
//!
//! Written here rather than taken from `rand` because its stream must never change: the
//! synthetic models and the seeded tests depend on its exact output, and these few lines
//! are the whole algorithm (Steele, Lea & Flood, "Fast splittable pseudorandom number
//! generators", 2014).

/// The generator; the field is the state (any seed is fine).
#[derive(Clone, Debug)]
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1) (24 random bits).
    pub fn uniform(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }

    /// Roughly N(0, 1): the sum of four uniforms, scaled (Irwin–Hall; cheap and portable).
    pub fn normal(&mut self) -> f32 {
        (0..4)
            .map(|_| (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32)
            .sum::<f32>()
            * 1.7
            - 3.4
    }
}

//! Deterministic mutants of valid files, and a memory bound to run each under: the
//! mutation tests in CI (the coverage-guided fuzzers in `fuzz/` do not run there).

use std::alloc::System;

use cap::Cap;

use crate::rng::SplitMix64;

/// Values written over 4- and 8-byte fields: counts, lengths, dims, ids and floats at
/// their edges.
pub const EXTREMES: [u64; 11] = [
    0,
    1,
    2,
    0xff,
    0x7fff_ffff,
    0xffff_ffff,
    1 << 32,
    i64::MAX as u64,
    u64::MAX,
    0x7fc0_0000, // f32 NaN
    0xbf80_0000, // f32 -1
];

/// Calls `check` on every truncation of `valid`, then on `flips` seeded mutants of it:
/// single bit flips, random bytes, and 4- and 8-byte fields overwritten with
/// [`EXTREMES`], in turn. The same seed gives the same mutants.
pub fn mutants(valid: &[u8], flips: usize, seed: u64, mut check: impl FnMut(&[u8])) {
    for len in 0..valid.len() {
        check(&valid[..len]);
    }
    if valid.is_empty() {
        return;
    }
    let mut rng = SplitMix64(seed);
    let mut m = valid.to_vec();
    for i in 0..flips {
        m.copy_from_slice(valid);
        let pos = (rng.next_u64() % valid.len() as u64) as usize;
        match i % 4 {
            0 => m[pos] ^= 1 << (rng.next_u64() % 8),
            1 => m[pos] = rng.next_u64() as u8,
            w => {
                let width = if w == 2 { 4 } else { 8 };
                let v = EXTREMES[(rng.next_u64() % EXTREMES.len() as u64) as usize].to_le_bytes();
                let end = (pos + width).min(m.len());
                m[pos..end].copy_from_slice(&v[..end - pos]);
            }
        }
        check(&m);
    }
}

/// Runs `f` with at most `bound` more bytes available than `alloc` has handed out now
/// (an allocation past it aborts the process, so a test binary declares `alloc` its
/// global allocator).
pub fn bounded(alloc: &Cap<System>, bound: usize, f: impl FnOnce()) {
    alloc
        .set_limit(alloc.allocated() + bound)
        .expect("limit above current use");
    f();
    alloc.set_limit(usize::MAX).expect("lift the limit");
}

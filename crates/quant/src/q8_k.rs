//! Q8_K: the activation blocks the k-quants, i-quants and ternary quants dot with (ggml's
//! `vec_dot_type` for them): 256 values as an f32 scale `d`, 256 signed bytes, and the
//! sixteen i16 sums of each run of 16 quants (292 bytes). No GGUF stores weights in it;
//! dspark only makes it from activations.
//!
//! ggml's x86 CPU backend quantizes these activations with its portable reference
//! (`quantize_row_q8_K_ref`, `ggml/src/ggml-quants.c`; the x86 `quantize_row_q8_K` calls
//! it), which [`quantize_activations_ref`] restates: the value of largest magnitude `max`
//! (the first one, by strict comparison, keeping its sign), `iscale = -127 / max`, each
//! quant `nearest_int(iscale · x)` capped at 127 (ties to even, by the `+ 1.5 · 2^23`
//! trick, whose bits are emulated), `d = 1 / iscale`; an all-zero block is `d = 0` with
//! zero quants and sums.

use crate::columns::{Activation, ActivationKernels};
use crate::cpu::Detected;

/// Values per block (`QK_K`).
pub const QK_K: usize = 256;
/// Bytes per block: f32 `d`, 256 quants, sixteen i16 sums.
pub const BLOCK_BYTES: usize = 292;

/// ggml's `nearest_int`: `fval + 1.5 · 2^23` in f32, then the low 23 bits of the result
/// minus 2^22 (ties to even for `|fval| < 2^22`; other values, NaN included, give what
/// those bit operations give).
#[inline]
pub fn nearest_int(fval: f32) -> i32 {
    let bits = (fval + 12_582_912.0f32).to_bits();
    (bits & 0x007f_ffff) as i32 - 0x0040_0000
}

/// Quantizes activations by ggml's recipe (see the module doc).
///
/// # Panics
/// If `x` is not whole blocks or `out` is not their size.
pub fn quantize_activations_ref(x: &[f32], out: &mut [u8]) {
    assert_eq!(x.len() % QK_K, 0, "Q8_K input must be whole blocks");
    assert_eq!(out.len(), x.len() / QK_K * BLOCK_BYTES, "Q8_K output size");
    for (xb, ob) in x.chunks_exact(QK_K).zip(out.chunks_exact_mut(BLOCK_BYTES)) {
        let (mut max, mut amax) = (0.0f32, 0.0f32);
        for &v in xb {
            let a = v.abs();
            if a > amax {
                amax = a;
                max = v;
            }
        }
        if amax == 0.0 {
            ob.fill(0);
            continue;
        }
        let iscale = -127.0 / max;
        let (d, rest) = ob.split_at_mut(4);
        let (qs, sums) = rest.split_at_mut(QK_K);
        for (q, &v) in qs.iter_mut().zip(xb) {
            *q = nearest_int(iscale * v).min(127) as i8 as u8;
        }
        for (s, run) in sums.chunks_exact_mut(2).zip(qs.chunks_exact(16)) {
            let sum: i32 = run.iter().map(|&b| i32::from(b as i8)).sum();
            s.copy_from_slice(&(sum as i16).to_le_bytes());
        }
        d.copy_from_slice(&(1.0 / iscale).to_le_bytes());
    }
}

/// The Q8_K activation quantizer of `cpu`, for the table's activation part: the
/// reference's bytes, with an AVX2 kernel where the CPU has AVX2 (about ten times faster).
pub fn activation_kernels(cpu: Detected) -> ActivationKernels {
    let mut k = ActivationKernels {
        activation: Activation::Q8_K,
        quantize: quantize_activations_ref,
        quantize_ref: quantize_activations_ref,
    };
    #[cfg(target_arch = "x86_64")]
    if cpu.has_avx2() {
        k.quantize = |x, out| {
            // SAFETY: built only from a `Detected` with AVX2.
            unsafe { x86_64::quantize_q8_k_avx2(x, out) }
        };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = cpu;
    k
}

#[cfg(target_arch = "x86_64")]
mod x86_64;

/// Quantizes activations with this CPU's kernel (the bytes of
/// [`quantize_activations_ref`]).
///
/// # Panics
/// As [`quantize_activations_ref`].
pub fn quantize_activations(x: &[f32], out: &mut [u8]) {
    let row = crate::kernels().activation(Activation::Q8_K);
    (row.expect("the table has a Q8_K activation row").quantize)(x, out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_int_rounds_ties_to_even() {
        for (x, want) in [
            (0.5f32, 0),
            (1.5, 2),
            (2.5, 2),
            (-0.5, 0),
            (-1.5, -2),
            (126.7, 127),
            (-127.0, -127),
        ] {
            assert_eq!(nearest_int(x), want, "{x}");
        }
    }

    #[test]
    fn the_scale_keeps_the_sign_of_the_first_largest_value() {
        let mut x = [0.0f32; QK_K];
        x[3] = -2.0;
        x[9] = 2.0; // same magnitude, later: not the max
        x[20] = 1.0;
        let mut b = [0u8; BLOCK_BYTES];
        quantize_activations_ref(&x, &mut b);
        let d = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        assert_eq!(d, 1.0 / (-127.0f32 / -2.0));
        assert_eq!(b[4 + 3] as i8, -127);
        assert_eq!(b[4 + 9] as i8, 127);
        assert_eq!(b[4 + 20] as i8, nearest_int(63.5) as i8);
        let s0 = i16::from_le_bytes([b[260], b[261]]);
        assert_eq!(s0, -127 + 127);
        let s1 = i16::from_le_bytes([b[262], b[263]]);
        assert_eq!(s1, i16::from(b[4 + 20] as i8));
        let mut z = [7u8; BLOCK_BYTES];
        quantize_activations_ref(&[0.0; QK_K], &mut z);
        assert!(z.iter().all(|&v| v == 0));
    }

    /// The AVX2 Q8_K quantizer gives the reference's bytes: random, wide-range, tied,
    /// all-zero, single-value, equal-magnitude (first one's sign) and non-finite blocks.
    #[test]
    fn avx2_q8_k_quantizer_gives_the_reference_bytes() {
        use dspark_testkit::rng::SplitMix64 as Rng;
        let Some(cpu) = Detected::avx2() else {
            eprintln!("AVX2 missing: nothing to compare on this CPU");
            return;
        };
        let k = activation_kernels(cpu);
        let mut rng = Rng(0x0b8c);
        let mut blocks: Vec<Vec<f32>> = Vec::new();
        for scale in [1.0f32, 1e-3, 1e3, 1e-30, 1e30] {
            blocks.push((0..QK_K).map(|_| rng.normal() * scale).collect());
        }
        blocks.push(
            (0..QK_K)
                .map(|_| loop {
                    let v = f32::from_bits(rng.next_u64() as u32);
                    if v.is_finite() {
                        break v;
                    }
                })
                .collect(),
        );
        // Ties: max 127 gives iscale -1, so k + 0.5 rounds to the even neighbour.
        blocks.push(
            (0..QK_K)
                .map(|i| {
                    if i == 7 {
                        127.0
                    } else {
                        (i % 200) as f32 * 0.5 - 50.25 + 0.25
                    }
                })
                .collect(),
        );
        blocks.push(vec![0.0; QK_K]);
        blocks.push(vec![-0.0; QK_K]);
        let mut one = vec![0.0f32; QK_K];
        one[200] = -3.5;
        blocks.push(one);
        // Equal magnitudes of both signs: the first one's sign wins.
        for (a, b) in [(5usize, 9usize), (9, 5), (0, 255), (255, 0)] {
            let mut v: Vec<f32> = (0..QK_K).map(|i| (i as f32 * 0.37).sin()).collect();
            v[a] = -4.0;
            v[b] = 4.0;
            blocks.push(v);
        }
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            for at in [0usize, 17, 255] {
                let mut v: Vec<f32> = (0..QK_K).map(|i| (i as f32 * 0.11).cos()).collect();
                v[at] = bad;
                blocks.push(v);
            }
        }
        blocks.push(vec![f32::NAN; QK_K]);
        for b in &blocks {
            let mut want = vec![0u8; BLOCK_BYTES];
            let mut got = vec![0u8; BLOCK_BYTES];
            quantize_activations_ref(b, &mut want);
            (k.quantize)(b, &mut got);
            assert_eq!(got, want, "{:?}", &b[..8]);
        }
        let many: Vec<f32> = (0..QK_K * 64).map(|_| rng.normal()).collect();
        let mut want = vec![0u8; 64 * BLOCK_BYTES];
        let mut got = want.clone();
        quantize_activations_ref(&many, &mut want);
        (k.quantize)(&many, &mut got);
        assert_eq!(got, want);
    }
}

//! Q8_1: the activation blocks Q4_1 and Q5_1 weights dot with (ggml's `vec_dot_type` for
//! them): 32 values as an f16 scale `d`, an f16 `s = d · Σq`, and 32 signed bytes (36
//! bytes). No GGUF stores weights in it; dspark only makes it from activations.
//!
//! [`quantize_activations_ref`] restates ggml's x86 `quantize_row_q8_1` (its AVX2 path,
//! `ggml-cpu/arch/x86/quants.c`): the quants exactly as Q8_0's x86 activation recipe makes
//! them ([`crate::q8_0::quantize_activations_ref`]: `127 / amax`, ties to even, saturating
//! packs), `d = amax / 127` stored as f16, and `s` = f16 of the **unrounded** `d` times the
//! i32 sum of the quants before packing. Blocks holding a non-finite value take ggml's
//! portable reference (`quantize_row_q8_1_ref`: `1 / d`, ties away from zero) — a broken
//! model either way, but the bytes stay defined. The AVX2 kernel (in `q8_0/x86_64.rs`,
//! shared with Q8_0) gives the same bytes.

use half::f16;

use crate::columns::{Activation, ActivationKernels};
use crate::cpu::Detected;
use crate::q8_0;

/// Values per block (`QK8_1`).
pub const QK8_1: usize = 32;
/// Bytes per block: f16 `d`, f16 `s`, 32 quants.
pub const BLOCK_BYTES: usize = 36;

fn put_f16(out: &mut [u8], v: f32) {
    out.copy_from_slice(&f16::from_f32(v).to_bits().to_le_bytes());
}

/// One block by ggml's portable reference, for blocks holding a non-finite value.
fn block_portable(xb: &[f32], ob: &mut [u8]) {
    let mut q8 = [0u8; q8_0::BLOCK_BYTES];
    q8_0::quantize_block_ref(xb, &mut q8);
    let amax = xb.iter().fold(0.0f32, |m, v| {
        let a = v.abs();
        if m > a {
            m
        } else {
            a
        }
    });
    let d = amax / 127.0;
    let sum: i32 = q8[2..].iter().map(|&b| i32::from(b as i8)).sum();
    ob[..2].copy_from_slice(&q8[..2]);
    put_f16(&mut ob[2..4], sum as f32 * d);
    ob[4..].copy_from_slice(&q8[2..]);
}

/// Quantizes activations by ggml's x86 recipe (see the module doc).
///
/// # Panics
/// If `x` is not whole blocks or `out` is not their size.
pub fn quantize_activations_ref(x: &[f32], out: &mut [u8]) {
    assert_eq!(x.len() % QK8_1, 0, "Q8_1 input must be whole blocks");
    assert_eq!(out.len(), x.len() / QK8_1 * BLOCK_BYTES, "Q8_1 output size");
    for (xb, ob) in x.chunks_exact(QK8_1).zip(out.chunks_exact_mut(BLOCK_BYTES)) {
        if !xb.iter().all(|v| v.is_finite()) {
            block_portable(xb, ob);
            continue;
        }
        let amax = xb.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
        let mut sum = 0i32;
        for (o, &v) in ob[4..].iter_mut().zip(xb) {
            // As `cvtps_epi32` then saturating packs: out-of-range and NaN products give
            // i32::MIN, which the (wrapping) sum takes before the pack saturates it.
            let r = (v * id).round_ties_even();
            let i = if r.is_nan() || !(-2_147_483_648.0..2_147_483_648.0).contains(&r) {
                i32::MIN
            } else {
                r as i32
            };
            sum = sum.wrapping_add(i);
            *o = i.clamp(-128, 127) as i8 as u8;
        }
        put_f16(&mut ob[..2], d);
        put_f16(&mut ob[2..4], d * sum as f32);
    }
}

/// [`quantize_activations_ref`] with AVX2 (the same bytes).
///
/// # Safety
/// The CPU must support AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn quantize_activations_avx2(x: &[f32], out: &mut [u8]) {
    assert_eq!(x.len() % QK8_1, 0, "Q8_1 input must be whole blocks");
    assert_eq!(out.len(), x.len() / QK8_1 * BLOCK_BYTES, "Q8_1 output size");
    for (xb, ob) in x.chunks_exact(QK8_1).zip(out.chunks_exact_mut(BLOCK_BYTES)) {
        // SAFETY: AVX2 is this function's own target feature; xb is one block and
        // ob[4..] its 32 quant bytes.
        match unsafe { q8_0::x86_64::activation_block_avx2(xb, &mut ob[4..]) } {
            Some((d, sum)) => {
                put_f16(&mut ob[..2], d);
                put_f16(&mut ob[2..4], d * sum as f32);
            }
            None => block_portable(xb, ob),
        }
    }
}

/// The Q8_1 activation quantizer of `cpu`, for the table's activation part.
pub fn activation_kernels(cpu: Detected) -> ActivationKernels {
    let mut k = ActivationKernels {
        activation: Activation::Q8_1,
        quantize: quantize_activations_ref,
        quantize_ref: quantize_activations_ref,
    };
    #[cfg(target_arch = "x86_64")]
    if cpu.has_avx2() {
        k.quantize = |x, out| {
            // SAFETY: built only from a `Detected` with AVX2.
            unsafe { quantize_activations_avx2(x, out) }
        };
    }
    let _ = cpu;
    k
}

/// Quantizes activations with this CPU's kernel (the bytes of
/// [`quantize_activations_ref`]).
///
/// # Panics
/// As [`quantize_activations_ref`].
pub fn quantize_activations(x: &[f32], out: &mut [u8]) {
    let row = crate::kernels().activation(Activation::Q8_1);
    (row.expect("the table has a Q8_1 activation row").quantize)(x, out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_use_the_unrounded_scale_and_the_quants() {
        let x: Vec<f32> = (0..32).map(|i| (i as f32 - 10.3) * 0.37).collect();
        let mut b = [0u8; BLOCK_BYTES];
        quantize_activations_ref(&x, &mut b);
        let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let sum: i32 = b[4..].iter().map(|&q| i32::from(q as i8)).sum();
        assert_eq!(u16::from_le_bytes([b[0], b[1]]), f16::from_f32(d).to_bits());
        assert_eq!(
            u16::from_le_bytes([b[2], b[3]]),
            f16::from_f32(d * sum as f32).to_bits()
        );
        // The quants are Q8_0's x86 activation quants.
        let mut q8 = [0u8; q8_0::BLOCK_BYTES];
        q8_0::quantize_activations_ref(&x, &mut q8);
        assert_eq!(&b[4..], &q8[2..]);
        assert_eq!(&b[..2], &q8[..2]);
    }
}

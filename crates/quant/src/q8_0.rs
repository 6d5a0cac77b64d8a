//! Q8_0: blocks of 32 values stored as an f16 scale and 32 signed bytes (34 bytes).
//!
//! [`quantize_ref`] restates ggml's `quantize_row_q8_0_ref` (`ggml/src/ggml-quants.c`),
//! which gguf-py's `quants.py` reproduces byte for byte (`docs/GGUF.md` §3):
//! `amax` by C-style max, `d = amax / 127` and `id = 1 / d` in f32, `q = roundf(x · id)`
//! (ties away from zero) from the **unrounded** f32 `d`, scale stored as IEEE
//! round-to-nearest-even f16. A product that is not finite (only when `1/d` overflows, or
//! for non-finite inputs) gives `q = 0`, as C on x86 does; Rust's saturating `as i8` would
//! give 127 instead. The SIMD kernel in `q8_0/x86_64.rs` must produce the same bytes.

use dspark_gguf::GgmlType;
use half::f16;

use crate::columns::{Activation, ActivationKernels, Columns};
use crate::cpu::Detected;
use crate::format::{BlockFormat, FormatKernels, Scale};

/// Values per block (`QK8_0` in `ggml-common.h`).
pub const QK8_0: usize = 32;
/// Bytes per block: a 2-byte f16 scale then 32 int8 quants.
pub const BLOCK_BYTES: usize = 34;

/// One Q8_0 block as laid out on disk.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockQ8_0 {
    /// Scale, IEEE binary16 bits (little-endian on disk).
    pub d: [u8; 2],
    /// Quants.
    pub qs: [i8; QK8_0],
}
const _: () = assert!(std::mem::size_of::<BlockQ8_0>() == BLOCK_BYTES);

/// Quantizes one block with the reference recipe.
#[inline]
pub fn quantize_block_ref(x: &[f32], out: &mut [u8]) {
    debug_assert_eq!((x.len(), out.len()), (QK8_0, BLOCK_BYTES));
    let mut amax = 0.0f32;
    for &v in x {
        let a = v.abs();
        // ggml's MAX(a, b) is `a > b ? a : b`: keep this exact form (NaN behaviour).
        amax = if amax > a { amax } else { a };
    }
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    out[..2].copy_from_slice(&f16::from_f32(d).to_bits().to_le_bytes());
    for (o, &v) in out[2..].iter_mut().zip(x) {
        let p = v * id;
        *o = if p.is_finite() {
            p.round() as i8 as u8
        } else {
            0
        };
    }
}

/// Quantizes activations as ggml's x86 CPU matmul does before a product with Q8_0
/// weights (`ggml-cpu/arch/x86/quants.c` `quantize_row_q8_0`, its AVX path): `d =
/// amax / 127` stored as f16, but the values scaled by `id = 127 / amax` (not `1 / d`)
/// and rounded to the nearest integer with ties to even (not away from zero). The two
/// recipes differ for a value on a rounding boundary, rarely, by one quant; matching
/// llama.cpp's choice keeps a model's tokens equal to llama.cpp's on this CPU family.
/// Blocks with a non-finite value take the reference's bytes (a broken model either way).
///
/// # Panics
/// If the lengths do not match.
pub fn quantize_activations(x: &[f32], out: &mut [u8]) {
    let row = crate::kernels().activation(Activation::Q8_0);
    (row.expect("the table has a Q8_0 activation row").quantize)(x, out)
}

/// [`quantize_activations`]' scalar reference.
///
/// # Panics
/// If the lengths do not match.
pub fn quantize_activations_ref(x: &[f32], out: &mut [u8]) {
    assert_eq!(x.len() % QK8_0, 0, "Q8_0 input must be whole blocks");
    assert_eq!(out.len(), x.len() / QK8_0 * BLOCK_BYTES, "Q8_0 output size");
    for (xb, ob) in x.chunks_exact(QK8_0).zip(out.chunks_exact_mut(BLOCK_BYTES)) {
        if !xb.iter().all(|v| v.is_finite()) {
            quantize_block_ref(xb, ob);
            continue;
        }
        let amax = xb.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
        ob[..2].copy_from_slice(&f16::from_f32(d).to_bits().to_le_bytes());
        for (o, &v) in ob[2..].iter_mut().zip(xb) {
            // As `cvtps_epi32` then saturating packs: out-of-range and NaN products (only
            // when `127 / amax` overflows) give the "integer indefinite", i32::MIN → −128.
            let r = (v * id).round_ties_even();
            let i = if r.is_nan() || !(-2_147_483_648.0..2_147_483_648.0).contains(&r) {
                i32::MIN
            } else {
                r as i32
            };
            *o = i.clamp(-128, 127) as i8 as u8;
        }
    }
}

/// Quantizes `x` (length a multiple of 32) into `out` (34 bytes per 32 values).
///
/// # Panics
/// If the lengths do not match.
pub fn quantize_ref(x: &[f32], out: &mut [u8]) {
    assert_eq!(x.len() % QK8_0, 0, "Q8_0 input must be whole blocks");
    assert_eq!(out.len(), x.len() / QK8_0 * BLOCK_BYTES, "Q8_0 output size");
    for (xb, ob) in x.chunks_exact(QK8_0).zip(out.chunks_exact_mut(BLOCK_BYTES)) {
        quantize_block_ref(xb, ob);
    }
}

/// Dequantizes `q` (34 bytes per block) into `y`: `y = q · f16_to_f32(d)` in f32.
///
/// # Panics
/// If the lengths do not match.
pub fn dequantize_ref(q: &[u8], y: &mut [f32]) {
    assert_eq!(q.len() % BLOCK_BYTES, 0, "Q8_0 input must be whole blocks");
    assert_eq!(y.len(), q.len() / BLOCK_BYTES * QK8_0, "Q8_0 output size");
    for (qb, yb) in q.chunks_exact(BLOCK_BYTES).zip(y.chunks_exact_mut(QK8_0)) {
        let d = f16::from_bits(u16::from_le_bytes([qb[0], qb[1]])).to_f32();
        for (o, &b) in yb.iter_mut().zip(&qb[2..]) {
            *o = f32::from(b as i8) * d;
        }
    }
}

/// The integer dot of one block's weight quants `w` and activation quants `x` as the AVX2
/// kernels compute it (`|w|` times `x` with `w`'s sign, pairs added in i16, which never
/// saturates for these ranges): exact, except that for `w < 0` an `x` of -128 is negated to
/// -128 (an 8-bit wrap). Activation quants are -128 only when a block's scale overflows.
pub fn block_isum(w: &[u8], x: &[i8]) -> i32 {
    w.iter()
        .zip(x)
        .map(|(&wb, &xv)| {
            let w = wb as i8;
            let sx = match w.signum() {
                -1 => xv.wrapping_neg(),
                0 => 0,
                _ => xv,
            };
            i32::from(w.unsigned_abs()) * i32::from(sx)
        })
        .sum()
}

/// The Q8_0 format: rows dot with Q8_0 activation columns (an exact integer dot per block,
/// scaled by `d_w · d_x`), as ggml's CPU matmul computes them.
pub struct Q8_0;

impl BlockFormat for Q8_0 {
    const TYPE: GgmlType = GgmlType::Q8_0;
    const ACTIVATION: Activation = Activation::Q8_0;
    const SCALES: &'static [Scale] = &[Scale::F16(0)];
    const QUANTIZE_REF: Option<crate::format::QuantizeFn> = Some(quantize_ref);

    fn dequantize_ref(q: &[u8], y: &mut [f32]) {
        dequantize_ref(q, y)
    }

    /// In ggml's order (its x86 `vec_dot_q8_0_q8_0`, and llamafile's `tinyBLAS` for
    /// prompts, which sums alike): eight lanes, lane `l` of block `b` an exact integer dot
    /// `isum_{b,l}` of values `4l..4l + 4` (with the AVX2 sign trick's one wrap: a weight
    /// below zero negates an activation quant of -128 to itself, see [`block_isum`]); per
    /// block, in order, `lane_l = fma(d_w · d_x, isum_{b,l}, lane_l)`; the lanes reduced by
    /// [`crate::lanes::hsum8`].
    fn dot_ref(row: &[u8], x: &Columns<'_>, c: usize) -> f32 {
        let (xd, xq) = x.q8(c);
        let mut acc = crate::lanes::LaneAcc::default();
        for (b, wb) in row.chunks_exact(BLOCK_BYTES).enumerate() {
            let dw = f16::from_bits(u16::from_le_bytes([wb[0], wb[1]])).to_f32();
            let xb = &xq[b * QK8_0..(b + 1) * QK8_0];
            let lanes: [i32; 8] = std::array::from_fn(|l| {
                block_isum(&wb[2 + 4 * l..6 + 4 * l], &xb[4 * l..4 * l + 4])
            });
            acc.add(dw * xd[b], &lanes);
        }
        acc.sum()
    }

    fn kernels(cpu: Detected) -> FormatKernels {
        let mut k = FormatKernels::reference::<Q8_0>();
        #[cfg(target_arch = "x86_64")]
        {
            if cpu.has_avx2() {
                k.quantize = Some(|x, out| {
                    // SAFETY: built only from a `Detected` with AVX2.
                    unsafe { x86_64::quantize_avx2(x, out) }
                });
                k.dequantize = |q, y| {
                    // SAFETY: built only from a `Detected` with AVX2.
                    unsafe { x86_64::dequantize_avx2(q, y) }
                };
                k.rows = |w, first, x, out| {
                    // SAFETY: built only from a `Detected` with AVX2, FMA and F16C.
                    unsafe {
                        crate::legacy::x86_64::rows_lanes_avx2::<Q8_0, false>(w, first, x, out)
                    }
                };
                // Without VNNI only the own order reads the tiles: the lane order reads
                // the file's layout, so only a drafter's matrices get them.
                k.pack = Some(crate::legacy::tiles::pack::<Q8_0>);
                k.pack_own_only = true;
                k.own_rows = Some(|w, first, x, out| {
                    // SAFETY: built only from a `Detected` with AVX2, FMA and F16C.
                    unsafe { crate::legacy::tiles::rows_own_avx2::<Q8_0>(w, first, x, out) }
                });
                k.own_dot_ref = Some(crate::legacy::dot_runs_ref::<Q8_0>);
            }
            if cpu.isa() == crate::cpu::Isa::Avx512Vnni {
                k.rows = |w, first, x, out| {
                    // SAFETY: built only from a `Detected` with AVX-512 F, VL, BW and VNNI
                    // and the AVX2 set.
                    unsafe { crate::legacy::tiles::rows_lanes_vnni::<Q8_0>(w, first, x, out) }
                };
                k.pack = Some(crate::legacy::tiles::pack::<Q8_0>);
                k.pack_own_only = false;
                k.own_rows = Some(|w, first, x, out| {
                    // SAFETY: built only from a `Detected` with AVX-512 F, VL, BW and VNNI
                    // and the AVX2 set.
                    unsafe { crate::legacy::tiles::rows_own_vnni::<Q8_0>(w, first, x, out) }
                });
                k.own_dot_ref = Some(crate::legacy::dot_runs_ref::<Q8_0>);
            }
        }
        let _ = cpu;
        k
    }
}

/// Q8_0 as a format of 32-value runs summing in ggml's lane order, which lets the shared
/// lane kernels (`legacy/x86_64.rs`) run its rows: signed values met as `|w| · sign(x, w)`,
/// the wrap [`block_isum`] describes included. Its reference stays [`Q8_0::dot_ref`].
impl crate::legacy::Runs32 for Q8_0 {
    const LANES: bool = true;
    const BLOCK_BYTES: usize = BLOCK_BYTES;
    fn scale(block: &[u8]) -> f32 {
        f16::from_bits(u16::from_le_bytes([block[0], block[1]])).to_f32()
    }
    fn values(block: &[u8], _sub: usize) -> [i32; crate::legacy::RUN] {
        std::array::from_fn(|j| i32::from(block[2 + j] as i8))
    }
}

/// The Q8_0 activation quantizer of `cpu` (ggml's x86 recipe), for the table's activation
/// part.
pub fn activation_kernels(cpu: Detected) -> ActivationKernels {
    let mut k = ActivationKernels {
        activation: Activation::Q8_0,
        quantize: quantize_activations_ref,
        quantize_ref: quantize_activations_ref,
    };
    #[cfg(target_arch = "x86_64")]
    if cpu.has_avx2() {
        k.quantize = |x, out| {
            // SAFETY: built only from a `Detected` with AVX2.
            unsafe { x86_64::quantize_activations_avx2(x, out) }
        };
    }
    let _ = cpu;
    k
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod x86_64;

#[cfg(test)]
mod tests {
    use super::*;

    fn q(x: &[f32]) -> Vec<u8> {
        let mut out = vec![0u8; x.len() / QK8_0 * BLOCK_BYTES];
        quantize_ref(x, &mut out);
        out
    }

    #[test]
    fn ties_round_away_from_zero() {
        // amax 127 → d = 1, id = 1: products are the inputs themselves.
        let mut x = [0.0f32; 32];
        x[0] = 127.0;
        x[1] = 0.5;
        x[2] = -0.5;
        x[3] = 2.5;
        x[4] = -126.5;
        let b = q(&x);
        assert_eq!(&b[..2], &f16::from_f32(1.0).to_bits().to_le_bytes());
        assert_eq!(b[2] as i8, 127);
        assert_eq!(b[3] as i8, 1);
        assert_eq!(b[4] as i8, -1);
        assert_eq!(b[5] as i8, 3);
        assert_eq!(b[6] as i8, -127);
    }

    #[test]
    fn zeros_and_overflowing_inverse_give_zero_quants() {
        assert!(q(&[0.0; 32]).iter().all(|&b| b == 0));
        assert!(q(&[-0.0; 32]).iter().all(|&b| b == 0));
        // amax 1e-40: d is f32-subnormal, 1/d overflows to inf: C on x86 stores q = 0.
        let mut x = [0.0f32; 32];
        x[7] = 1e-40;
        x[9] = -1e-40;
        assert!(q(&x).iter().all(|&b| b == 0));
    }

    #[test]
    fn huge_amax_saturates_the_scale_to_infinity() {
        let mut x = [1.0f32; 32];
        x[31] = 3.0e38;
        let b = q(&x);
        assert_eq!(u16::from_le_bytes([b[0], b[1]]), 0x7C00);
        assert_eq!(b[33] as i8, 127);
    }

    #[test]
    fn dequantize_inverts_within_half_a_step() {
        let x: Vec<f32> = (0..64).map(|i| (i as f32 - 31.3) * 0.01).collect();
        let mut y = vec![0.0; 64];
        dequantize_ref(&q(&x), &mut y);
        for (blk_x, blk_y) in x.chunks(32).zip(y.chunks(32)) {
            let amax = blk_x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
            for (a, b) in blk_x.iter().zip(blk_y) {
                assert!((a - b).abs() <= amax / 127.0 * 0.6);
            }
        }
    }
}

//! Q5_K: super-blocks of 256 values in eight sub-blocks of 32, each value a 5-bit quant
//! with a 6-bit scale and a 6-bit min per sub-block under two f16 super-block scales (176
//! bytes). Read only.
//!
//! **Block** (`block_q5_K`, `ggml-common.h`): f16 `d`, f16 `dmin`, 12 bytes of packed
//! 6-bit scales and mins (as Q4_K's, [`crate::kquant::scale_min_k4`]), 32 bytes `qh`, 128
//! bytes `qs`. Value `l` (0..32) of sub-block s takes its low four bits from byte
//! `32 (s / 2) + l` of `qs` (low nibble for even s, high for odd) and its fifth bit from
//! bit s of `qh[l]`.
//!
//! **Dequantization** (`dequantize_row_q5_K`, `ggml-quants.c`; gguf-py's `Q5_K`, the same
//! values): `(d · sc_s) · q - (dmin · m_s)`.
//!
//! **Dot** (`vec_dot_type` Q8_K), in ggml's x86 order (llama.cpp does not re-lay Q5_K on
//! x86): eight integer lanes per super-block (`block_lanes`) and a min sum, with
//! `lanes::LaneAcc`'s float steps.
//!
//! **Kernel** (`q5_k/x86_64.rs`): AVX2, a row at a time, weights shared by up to four
//! columns; `dot_ref`'s bits.

use dspark_gguf::GgmlType;

use crate::columns::{Activation, Columns};
use crate::cpu::Detected;
use crate::format::{BlockFormat, FormatKernels, Scale};
use crate::kquant::{f16_at, min_sum, scales_mins_k4, K_SCALE_SIZE, QK_K};
use crate::lanes::LaneAcc;

/// Bytes per super-block.
pub const BLOCK_BYTES: usize = 176;

/// One Q5_K super-block as laid out on disk.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockQ5K {
    /// Super-block scale of the sub-block scales, IEEE binary16 bits.
    pub d: [u8; 2],
    /// Super-block scale of the sub-block mins, IEEE binary16 bits.
    pub dmin: [u8; 2],
    /// Eight 6-bit scales and eight 6-bit mins, packed.
    pub scales: [u8; K_SCALE_SIZE],
    /// Fifth bits of the quants.
    pub qh: [u8; QK_K / 8],
    /// Low four bits of the quants, two per byte.
    pub qs: [u8; QK_K / 2],
}
const _: () = assert!(std::mem::size_of::<BlockQ5K>() == BLOCK_BYTES);

/// Offsets of the fields in a block.
const D: usize = 0;
const DMIN: usize = 2;
const SCALES: usize = 4;
const QH: usize = 16;
const QS: usize = 48;

/// Quant `v` (0..256) of a block, 0..32.
#[inline]
fn quant(b: &[u8], v: usize) -> u8 {
    let (s, l) = (v / 32, v % 32);
    let byte = b[QS + 32 * (s / 2) + l];
    let lo = if s % 2 == 0 { byte & 0xF } else { byte >> 4 };
    lo | (((b[QH + l] >> s) & 1) << 4)
}

/// Dequantizes whole super-blocks (gguf-py's values, bit for bit).
///
/// # Panics
/// If the lengths do not match.
pub fn dequantize_ref(q: &[u8], y: &mut [f32]) {
    assert_eq!(q.len() % BLOCK_BYTES, 0, "Q5_K input must be whole blocks");
    assert_eq!(y.len(), q.len() / BLOCK_BYTES * QK_K, "Q5_K output size");
    for (b, yb) in q.chunks_exact(BLOCK_BYTES).zip(y.chunks_exact_mut(QK_K)) {
        let (d, dmin) = (f16_at(b, D), f16_at(b, DMIN));
        let (sc, m) = scales_mins_k4(&b[SCALES..QH]);
        for (v, o) in yb.iter_mut().enumerate() {
            let s = v / 32;
            let (ds, ms) = (d * f32::from(sc[s]), dmin * f32::from(m[s]));
            *o = ds * f32::from(quant(b, v)) - ms;
        }
    }
}

/// A super-block's eight integer lanes as ggml's AVX2 kernel forms them (lane `l`: `Σ sc
/// · q · x` over positions `4l..4l + 4` of each sub-block of 32), and its exact min sum
/// `Σ_s m_s · (bsum_{2s} + bsum_{2s+1})`.
pub(crate) fn block_lanes(b: &[u8], xq: &[i8], bsums: &[i16]) -> ([i32; 8], i32) {
    let (sc, m) = scales_mins_k4(&b[SCALES..QH]);
    let mut lanes = [0i32; 8];
    for v in 0..QK_K {
        lanes[(v % 32) / 4] += i32::from(sc[v / 32]) * i32::from(quant(b, v)) * i32::from(xq[v]);
    }
    (lanes, min_sum(&m, 2, bsums))
}

/// The Q5_K format.
pub struct Q5K;

/// llama.cpp's prompt orders ([`crate::tiled`]): the super-block decoded.
impl crate::tiled::TiledOrder for Q5K {
    const SUPER_BYTES: usize = BLOCK_BYTES;
    const HAS_MIN: bool = true;
    fn decode(b: &[u8], out: &mut crate::tiled::Decoded) {
        for (v, w) in out.w.iter_mut().enumerate() {
            *w = quant(b, v) as i8;
        }
        let (sc, m) = crate::kquant::scales_mins_k4(&b[SCALES..QH]);
        for t in 0..16 {
            (out.sc[t], out.min[t]) = (i16::from(sc[t / 2]), i16::from(m[t / 2]));
        }
        (out.d, out.dmin) = (f16_at(b, D), f16_at(b, DMIN));
    }
}

impl BlockFormat for Q5K {
    const TYPE: GgmlType = GgmlType::Q5_K;
    const ACTIVATION: Activation = Activation::Q8_K;
    const SCALES: &'static [Scale] = &[Scale::F16(D), Scale::F16(DMIN)];

    fn dequantize_ref(q: &[u8], y: &mut [f32]) {
        dequantize_ref(q, y)
    }

    /// In ggml's x86 order (`vec_dot_q5_K_q8_K`, its AVX2 path): per super-block the eight
    /// lanes of `block_lanes` fused with `d_x · d_w` into eight accumulators, and the min
    /// sum into a scalar, `summs = fma(−(d_x · dmin_w), msum, summs)`; the result is
    /// `hsum8(acc) + summs`.
    fn dot_ref(row: &[u8], x: &Columns<'_>, c: usize) -> f32 {
        let (xd, xq) = x.q8(c);
        let bs = x.q8_bsums(c);
        let mut acc = LaneAcc::default();
        for (i, b) in row.chunks_exact(BLOCK_BYTES).enumerate() {
            let (lanes, msum) =
                block_lanes(b, &xq[i * QK_K..(i + 1) * QK_K], &bs[16 * i..16 * (i + 1)]);
            acc.add(xd[i] * f16_at(b, D), &lanes);
            acc.add_min(-(xd[i] * f16_at(b, DMIN)), msum as f32);
        }
        acc.sum_with_mins()
    }

    fn kernels(cpu: Detected) -> FormatKernels {
        let mut k = FormatKernels::reference::<Q5K>();
        crate::tiled::install::<Q5K, 0>(&mut k, cpu);
        #[cfg(target_arch = "x86_64")]
        if cpu.has_avx2() {
            k.rows = |w, first, x, out| {
                // SAFETY: built only from a `Detected` with AVX2, FMA and F16C.
                unsafe { crate::kquant::x86_64::rows_avx2::<x86_64::Rows>(w, first, x, out) }
            };
        }
        let _ = cpu;
        k
    }
}

#[cfg(target_arch = "x86_64")]
mod x86_64;

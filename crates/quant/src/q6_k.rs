//! Q6_K: super-blocks of 256 values in sixteen sub-blocks of 16, each value a 6-bit quant
//! (offset by -32) with an 8-bit signed scale per sub-block under one f16 super-block scale
//! (210 bytes). Read only.
//!
//! **Block** (`block_q6_K`, `ggml-common.h`): 128 bytes `ql` (low four bits), 64 bytes `qh`
//! (high two bits), sixteen i8 scales, f16 `d`. Each half of 128 values (n = 0, 1) uses
//! `ql[64n..64n + 64]` and `qh[32n..32n + 32]`: value `32p + l` (quarter p = 0..4, l =
//! 0..32) takes the low nibble of `ql[64n + l + 32 (p mod 2)]` for p < 2, the high nibble
//! for p ≥ 2, and bits `2p..2p + 2` of `qh[32n + l]` as its bits 4 and 5.
//!
//! **Dequantization** (`dequantize_row_q6_K`, `ggml-quants.c`; gguf-py's `Q6_K`, the same
//! values): `(d · sc) · (q - 32)`.
//!
//! **Dot** (`vec_dot_type` Q8_K), in ggml's x86 order (llama.cpp does not re-lay Q6_K on
//! x86): per super-block eight exact integer lanes (`block_lanes`), each fused with
//! `d_x · d_w` into its own f32 accumulator, the eight reduced at the end.
//!
//! **Kernel** (`q6_k/x86_64.rs`): AVX2, a row at a time, the quants assembled once per
//! group of four columns, the -32 taken through the Q8_K sums as ggml's x86 kernel does;
//! `dot_ref`'s bits.

use dspark_gguf::GgmlType;

use crate::columns::{Activation, Columns};
use crate::cpu::Detected;
use crate::format::{BlockFormat, FormatKernels, Scale};
use crate::kquant::{f16_at, QK_K};

/// Bytes per super-block.
pub const BLOCK_BYTES: usize = 210;

/// One Q6_K super-block as laid out on disk.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockQ6K {
    /// Low four bits of the quants.
    pub ql: [u8; QK_K / 2],
    /// High two bits of the quants.
    pub qh: [u8; QK_K / 4],
    /// Sub-block scales.
    pub scales: [i8; QK_K / 16],
    /// Super-block scale, IEEE binary16 bits.
    pub d: [u8; 2],
}
const _: () = assert!(std::mem::size_of::<BlockQ6K>() == BLOCK_BYTES);

/// Offsets of the fields in a block.
const QH: usize = 128;
const SCALES: usize = 192;
const D: usize = 208;

/// Quant `v` (0..256) of a block, 0..64 (before the -32).
#[inline]
pub(crate) fn quant(b: &[u8], v: usize) -> u8 {
    let (n, p, l) = (v / 128, (v % 128) / 32, v % 32);
    let ql = b[64 * n + l + 32 * (p % 2)];
    let lo = if p < 2 { ql & 0xF } else { ql >> 4 };
    let hi = (b[QH + 32 * n + l] >> (2 * p)) & 3;
    lo | (hi << 4)
}

/// Scale of sub-block `t` (0..16).
#[inline]
fn scale(b: &[u8], t: usize) -> i8 {
    b[SCALES + t] as i8
}

/// Dequantizes whole super-blocks (gguf-py's values, bit for bit).
///
/// # Panics
/// If the lengths do not match.
pub fn dequantize_ref(q: &[u8], y: &mut [f32]) {
    assert_eq!(q.len() % BLOCK_BYTES, 0, "Q6_K input must be whole blocks");
    assert_eq!(y.len(), q.len() / BLOCK_BYTES * QK_K, "Q6_K output size");
    for (b, yb) in q.chunks_exact(BLOCK_BYTES).zip(y.chunks_exact_mut(QK_K)) {
        let d = f16_at(b, D);
        for (v, o) in yb.iter_mut().enumerate() {
            let ds = d * f32::from(scale(b, v / 16));
            *o = ds * f32::from(quant(b, v) as i8 - 32);
        }
    }
}

/// The Q6_K format.
pub struct Q6K;

/// llama.cpp's prompt orders ([`crate::tiled`]): the super-block decoded.
impl crate::tiled::TiledOrder for Q6K {
    const SUPER_BYTES: usize = BLOCK_BYTES;
    const HAS_MIN: bool = false;
    fn decode(b: &[u8], out: &mut crate::tiled::Decoded) {
        for (v, w) in out.w.iter_mut().enumerate() {
            *w = quant(b, v) as i8 - 32;
        }
        for t in 0..16 {
            out.sc[t] = i16::from(scale(b, t));
        }
        out.min = [0; 16];
        (out.d, out.dmin) = (f16_at(b, D), 0.0);
    }
}

impl BlockFormat for Q6K {
    const TYPE: GgmlType = GgmlType::Q6_K;
    const ACTIVATION: Activation = Activation::Q8_K;
    const SCALES: &'static [Scale] = &[Scale::F16(D)];

    fn dequantize_ref(q: &[u8], y: &mut [f32]) {
        dequantize_ref(q, y)
    }

    /// In ggml's x86 order (`vec_dot_q6_K_q8_K`, its AVX2 path): per super-block eight
    /// exact integer lanes (`block_lanes`), then `lane_l = fma(d_x · d_w, lane_l,
    /// acc_l)`; the lanes reduced by [`crate::lanes::hsum8`].
    fn dot_ref(row: &[u8], x: &Columns<'_>, c: usize) -> f32 {
        let (xd, xq) = x.q8(c);
        let bsums = x.q8_bsums(c);
        let mut acc = crate::lanes::LaneAcc::default();
        for (i, b) in row.chunks_exact(BLOCK_BYTES).enumerate() {
            let lanes = block_lanes(
                b,
                &xq[i * QK_K..(i + 1) * QK_K],
                &bsums[i * 16..i * 16 + 16],
            );
            acc.add(xd[i] * f16_at(b, D), &lanes);
        }
        acc.sum()
    }

    fn kernels(cpu: Detected) -> FormatKernels {
        let mut k = FormatKernels::reference::<Q6K>();
        crate::tiled::install::<Q6K, 0>(&mut k, cpu);
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

/// A super-block's eight integer lanes as ggml's AVX2 kernel forms them: lane `l` holds
/// `Σ sc · q · x` over the values at positions `4l..4l + 4` of each run of 32 (the unsigned
/// quants, before the -32), minus `32 · (sc_{2l} · bsum_{2l} + sc_{2l+1} · bsum_{2l+1})`
/// (the -32 taken through the Q8_K sums of sixteen). Exact.
pub(crate) fn block_lanes(b: &[u8], xq: &[i8], bsums: &[i16]) -> [i32; 8] {
    let mut lanes = [0i32; 8];
    for v in 0..QK_K {
        lanes[(v % 32) / 4] +=
            i32::from(scale(b, v / 16)) * i32::from(quant(b, v)) * i32::from(xq[v]);
    }
    for (l, lane) in lanes.iter_mut().enumerate() {
        let m = i32::from(scale(b, 2 * l)) * i32::from(bsums[2 * l])
            + i32::from(scale(b, 2 * l + 1)) * i32::from(bsums[2 * l + 1]);
        *lane -= 32 * m;
    }
    lanes
}

#[cfg(target_arch = "x86_64")]
mod x86_64;

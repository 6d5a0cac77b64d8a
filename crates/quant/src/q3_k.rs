//! Q3_K: super-blocks of 256 values in sixteen sub-blocks of 16, each value a 3-bit quant
//! (-4..4) with a 6-bit scale (offset by -32) per sub-block under one f16 super-block scale
//! (110 bytes). Read only.
//!
//! **Block** (`block_q3_K`, `ggml-common.h`): 32 bytes `hmask` (high bits), 64 bytes `qs`
//! (low two bits), 12 bytes of packed 6-bit scales, f16 `d`. Each half of 128 values (n =
//! 0, 1) uses `qs[32n..32n + 32]`: value `32j + l` (j = 0..4, l = 0..32) has bits
//! `2j..2j + 2` of `qs[32n + l]` as its low bits and bit `4n + j` of `hmask[l]`; its
//! quant is `low - 4` when that bit is clear, `low` when set. Scale t's low four bits are
//! nibble `t / 8` of byte `t mod 8`, its high two bits bits `2 (t / 4)..` of byte
//! `8 + t mod 4`.
//!
//! **Dequantization** (`dequantize_row_q3_K`, `ggml-quants.c`; gguf-py's `Q3_K`, the same
//! values): `(d · (sc - 32)) · q`.
//!
//! **Dot** (`vec_dot_type` Q8_K): ggml's x86 order (`ggml_vec_dot_q3_K_q8_K`): per
//! super-block eight exact lanes of `(sc − 32) · q · x` in the AVX2 layout (`block_lanes`),
//! each fused with `d_x · d` into its own accumulator; the eight added at the end. In a
//! prompt's forward, llama.cpp's tiled order ([`crate::tiled`]).
//!
//! **Kernels** (`q3_k/x86_64.rs`): an AVX2 row kernel, a row at a time, each super-block's
//! quants unpacked once and shared by up to four columns, the lanes as ggml forms them.
//! It gives `dot_ref`'s bits.

use dspark_gguf::GgmlType;

use crate::columns::{Activation, Columns};
use crate::cpu::Detected;
use crate::format::{BlockFormat, FormatKernels, Scale};
use crate::kquant::{f16_at, QK_K};

/// Bytes per super-block.
pub const BLOCK_BYTES: usize = 110;

/// One Q3_K super-block as laid out on disk.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockQ3K {
    /// High bits of the quants.
    pub hmask: [u8; QK_K / 8],
    /// Low two bits of the quants.
    pub qs: [u8; QK_K / 4],
    /// Sixteen 6-bit scales, packed.
    pub scales: [u8; 12],
    /// Super-block scale, IEEE binary16 bits.
    pub d: [u8; 2],
}
const _: () = assert!(std::mem::size_of::<BlockQ3K>() == BLOCK_BYTES);

/// Offsets of the fields in a block.
const QS: usize = 32;
const SCALES: usize = 96;
const D: usize = 108;

/// Quant `v` (0..256) of a block, -4..4.
#[inline]
fn quant(b: &[u8], v: usize) -> i8 {
    let (n, j, l) = (v / 128, (v % 128) / 32, v % 32);
    let low = ((b[QS + 32 * n + l] >> (2 * j)) & 3) as i8;
    let high = (b[l] >> (4 * n + j)) & 1;
    if high == 1 {
        low
    } else {
        low - 4
    }
}

/// The sixteen scales of a block, -32..32.
#[inline]
pub(crate) fn scales(b: &[u8]) -> [i8; 16] {
    let s = &b[SCALES..SCALES + 12];
    std::array::from_fn(|t| {
        let low = (s[t % 8] >> (4 * (t / 8))) & 0xF;
        let high = (s[8 + t % 4] >> (2 * (t / 4))) & 3;
        (low | (high << 4)) as i8 - 32
    })
}

/// Dequantizes whole super-blocks (gguf-py's values, bit for bit).
///
/// # Panics
/// If the lengths do not match.
pub fn dequantize_ref(q: &[u8], y: &mut [f32]) {
    assert_eq!(q.len() % BLOCK_BYTES, 0, "Q3_K input must be whole blocks");
    assert_eq!(y.len(), q.len() / BLOCK_BYTES * QK_K, "Q3_K output size");
    for (b, yb) in q.chunks_exact(BLOCK_BYTES).zip(y.chunks_exact_mut(QK_K)) {
        let d = f16_at(b, D);
        let sc = scales(b);
        for (v, o) in yb.iter_mut().enumerate() {
            let dl = d * f32::from(sc[v / 16]);
            *o = dl * f32::from(quant(b, v));
        }
    }
}

/// The eight exact lanes of one super-block against one Q8_K block's quants, in ggml's
/// AVX2 layout ([`crate::lanes::position_lanes`]).
pub(crate) fn block_lanes(b: &[u8], xq: &[i8]) -> [i32; 8] {
    let sc = scales(b);
    crate::lanes::position_lanes(QK_K, |v| {
        i32::from(sc[v / 16]) * i32::from(quant(b, v)) * i32::from(xq[v])
    })
}

/// The Q3_K format.
pub struct Q3K;

/// llama.cpp's prompt orders ([`crate::tiled`]): the super-block decoded.
impl crate::tiled::TiledOrder for Q3K {
    const SUPER_BYTES: usize = BLOCK_BYTES;
    const HAS_MIN: bool = false;
    fn decode(b: &[u8], out: &mut crate::tiled::Decoded) {
        for (v, w) in out.w.iter_mut().enumerate() {
            *w = quant(b, v);
        }
        out.sc = scales(b).map(i16::from);
        out.min = [0; 16];
        (out.d, out.dmin) = (f16_at(b, D), 0.0);
    }
}

impl BlockFormat for Q3K {
    const TYPE: GgmlType = GgmlType::Q3_K;
    const ACTIVATION: Activation = Activation::Q8_K;
    const SCALES: &'static [Scale] = &[Scale::F16(D)];

    fn dequantize_ref(q: &[u8], y: &mut [f32]) {
        dequantize_ref(q, y)
    }

    /// ggml's x86 order (`ggml_vec_dot_q3_K_q8_K`, `ggml-cpu/arch/x86/quants.c`): per
    /// super-block eight exact lanes of `scale · quant · q` (`block_lanes`) fused with
    /// `d_x · d_w` into eight accumulators, [`crate::lanes::hsum8`] at the end.
    fn dot_ref(row: &[u8], x: &Columns<'_>, c: usize) -> f32 {
        let (xd, xq) = x.q8(c);
        let mut acc = crate::lanes::LaneAcc::default();
        for (i, b) in row.chunks_exact(BLOCK_BYTES).enumerate() {
            acc.add(
                xd[i] * f16_at(b, D),
                &block_lanes(b, &xq[i * QK_K..(i + 1) * QK_K]),
            );
        }
        acc.sum()
    }

    fn kernels(cpu: Detected) -> FormatKernels {
        let mut k = FormatKernels::reference::<Q3K>();
        crate::tiled::install::<Q3K, 0>(&mut k, cpu);
        #[cfg(target_arch = "x86_64")]
        if cpu.has_avx2() {
            k.rows = |w, first, x, out| {
                // SAFETY: built only from a `Detected` with AVX2, FMA and F16C.
                unsafe { x86_64::rows_avx2(w, first, x, out) }
            };
        }
        let _ = cpu;
        k
    }
}

#[cfg(target_arch = "x86_64")]
mod x86_64;

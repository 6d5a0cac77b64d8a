//! IQ2_S: 256 values in 82 bytes (2.5625 bits per value), eight magnitudes at a time from
//! a 1024-point grid, eight explicit sign bits per eight values, a scale field per 16
//! values.
//!
//! **Block** (`block_iq2_s`, `ggml/src/ggml-common.h`): an f16 scale `d`; `qs`, 64 bytes:
//! the low 8 bits of 32 grid indices (one per group of eight values) then 32 sign bytes
//! (bit j of byte k: value 8k + j is negative); `qh`, 8 bytes: bits 2l..2l + 2 of byte s
//! are bits 8..10 of the index of group 4s + l; `scales`, 8 bytes: byte s holds `ls` of
//! values 32s..32s + 16 in its low nibble and of 32s + 16..32s + 32 in its high nibble.
//! Grid: `iq2s_grid` ([`crate::iq_grids::IQ2S_GRID`]), eight magnitudes 8 / 25 / 43 each.
//!
//! **Dequantization** (gguf-py `gguf/quants.py` `IQ2_S`, as ggml's `dequantize_row_iq2_s`
//! in `ggml/src/ggml-quants.c`): `y = (d · (0.5 + ls) · 0.25) · magnitude · (±1)` in f32,
//! in that order.
//!
//! **Dot product**: with Q8_K activations (`vec_dot_type` in `ggml-cpu/ggml-cpu.c`), in
//! the order of [`crate::iq_lattice`] (eight exact integer lanes per block, a fused
//! multiply-add per lane and block, [`crate::lanes::hsum8`], times the factor 1/8) — the
//! float steps of ggml's AVX2 `ggml_vec_dot_iq2_s_q8_K` (`ggml-cpu/arch/x86/quants.c`).

use dspark_gguf::GgmlType;

use crate::columns::{Activation, Columns};
use crate::cpu::Detected;
use crate::format::{BlockFormat, FormatKernels, Scale};
use crate::iq_grids::IQ2S_GRID;
use crate::iq_lattice::{Decoded, Lattice, LatticeKernels, QK_K};

/// Bytes per block: f16 `d`, 32 index bytes, 32 sign bytes, 8 high-bit bytes, 8 scale
/// bytes.
pub const BLOCK_BYTES: usize = 82;

/// One IQ2_S block as laid out on disk.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockIq2S {
    /// Scale, IEEE binary16 bits (little-endian on disk).
    pub d: [u8; 2],
    /// Low 8 bits of the 32 grid indices, then the 32 sign bytes.
    pub qs: [u8; QK_K / 4],
    /// Bits 8..10 of the grid indices, four per byte.
    pub qh: [u8; QK_K / 32],
    /// Two 4-bit scale fields per run of 32 values.
    pub scales: [u8; QK_K / 32],
}
const _: () = assert!(std::mem::size_of::<BlockIq2S>() == BLOCK_BYTES);

/// The IQ2_S format.
pub struct Iq2S;

impl Lattice for Iq2S {
    const TYPE: GgmlType = GgmlType::IQ2_S;
    const BLOCK_BYTES: usize = BLOCK_BYTES;
    const FACTOR: f32 = 0.125;

    fn decode(block: &[u8]) -> Decoded {
        let mut dec = Decoded {
            d: u16::from_le_bytes([block[0], block[1]]),
            grid: [0; QK_K],
            neg: [0; QK_K / 8],
            ls: [0; QK_K / 16],
        };
        let (qs, signs, qh, scales) = (
            &block[2..34],
            &block[34..66],
            &block[66..74],
            &block[74..82],
        );
        for k in 0..32 {
            let high = usize::from(qh[k / 4] >> (2 * (k % 4)) & 3);
            let g = IQ2S_GRID[usize::from(qs[k]) | high << 8].to_le_bytes();
            dec.grid[8 * k..8 * k + 8].copy_from_slice(&g);
        }
        dec.neg.copy_from_slice(signs);
        for (s, &sc) in scales.iter().enumerate() {
            dec.ls[2 * s] = sc & 15;
            dec.ls[2 * s + 1] = sc >> 4;
        }
        dec
    }

    fn sub_scale(d: f32, ls: u8) -> f32 {
        d * (0.5 + f32::from(ls)) * 0.25
    }
}

/// llama.cpp's prompt orders ([`crate::tiled`]): the super-block decoded.
impl crate::tiled::TiledOrder for Iq2S {
    const SUPER_BYTES: usize = BLOCK_BYTES;
    const HAS_MIN: bool = false;
    fn decode(b: &[u8], out: &mut crate::tiled::Decoded) {
        crate::iq_lattice::decode_tiled::<Self>(b, out)
    }
}

impl BlockFormat for Iq2S {
    const TYPE: GgmlType = GgmlType::IQ2_S;
    const ACTIVATION: Activation = Activation::Q8_K;
    const SCALES: &'static [Scale] = &[Scale::F16(0)];

    fn dequantize_ref(q: &[u8], y: &mut [f32]) {
        crate::iq_lattice::dequantize_ref::<Self>(q, y)
    }

    /// In [`crate::iq_lattice`]'s order (see the module doc).
    fn dot_ref(row: &[u8], x: &Columns<'_>, c: usize) -> f32 {
        crate::iq_lattice::dot_ref::<Self>(row, x, c)
    }

    fn kernels(cpu: Detected) -> FormatKernels {
        crate::iq_lattice::kernels::<Self>(cpu)
    }
}

impl LatticeKernels for Iq2S {
    #[cfg(target_arch = "x86_64")]
    const ROWS_AVX2: crate::matrix::RowKernel = |w, first, x, out| {
        // SAFETY: this kernel is put in a table only for a `Detected` with AVX2, FMA and
        // F16C (`iq_lattice::kernels`).
        unsafe { crate::iq_lattice::x86_64::rows_avx2::<Self>(w, first, x, out) }
    };
    #[cfg(target_arch = "x86_64")]
    const ROWS_AVX512: crate::matrix::RowKernel = |w, first, x, out| {
        // SAFETY: this kernel is put in a table only for a `Detected` with the AVX-512
        // VNNI set (`iq_lattice::kernels`).
        unsafe { crate::iq_lattice::x86_64::rows_avx512::<Self>(w, first, x, out) }
    };
}

#[cfg(target_arch = "x86_64")]
mod x86_64;

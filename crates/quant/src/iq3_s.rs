//! IQ3_S: 256 values in 110 bytes (3.4375 bits per value), four magnitudes at a time from
//! a 512-point grid, eight explicit sign bits per eight values.
//!
//! **Block** (`block_iq3_s`, `ggml/src/ggml-common.h`): an f16 scale `d`; `qs`, 64 bytes:
//! the low 8 bits of the grid indices (one per group of four values, into `iq3s_grid`,
//! [`crate::iq_grids::IQ3S_GRID`], odd magnitudes 1 to 15); `qh`, 8 bytes: bit k of byte s
//! is bit 8 of index 8s + k; `signs`, 32 bytes (bit j of byte k: value 8k + j is
//! negative); `scales`, 4 bytes: byte t holds `ls` of values 64t..64t + 32 in its low
//! nibble and of 64t + 32..64t + 64 in its high nibble.
//!
//! **Dequantization** (gguf-py `gguf/quants.py` `IQ3_S`, as ggml's `dequantize_row_iq3_s`
//! in `ggml/src/ggml-quants.c`): `y = (d · (1 + 2·ls)) · magnitude · (±1)` in f32, in that
//! order.
//!
//! **Dot product**: with Q8_K activations (`vec_dot_type` in `ggml-cpu/ggml-cpu.c`), in
//! the order of [`crate::iq_lattice`] (eight exact integer lanes per block, a fused
//! multiply-add per lane and block, [`crate::lanes::hsum8`]; the factor is 1) — the float
//! steps of ggml's AVX2 `ggml_vec_dot_iq3_s_q8_K` (`ggml-cpu/arch/x86/quants.c`).

use dspark_gguf::GgmlType;

use crate::columns::{Activation, Columns};
use crate::cpu::Detected;
use crate::format::{BlockFormat, FormatKernels, Scale};
use crate::iq_grids::IQ3S_GRID;
use crate::iq_lattice::{Decoded, Lattice, LatticeKernels, QK_K};

/// Bytes per block: f16 `d`, 64 index bytes, 8 high-bit bytes, 32 sign bytes, 4 scale
/// bytes.
pub const BLOCK_BYTES: usize = 110;

/// One IQ3_S block as laid out on disk.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockIq3S {
    /// Scale, IEEE binary16 bits (little-endian on disk).
    pub d: [u8; 2],
    /// Low 8 bits of the 64 grid indices.
    pub qs: [u8; QK_K / 4],
    /// Bit 8 of the grid indices, eight per byte.
    pub qh: [u8; QK_K / 32],
    /// One sign bit per value.
    pub signs: [u8; QK_K / 8],
    /// Two 4-bit scale fields per 64 values (`IQ3S_N_SCALE` = 4).
    pub scales: [u8; QK_K / 64],
}
const _: () = assert!(std::mem::size_of::<BlockIq3S>() == BLOCK_BYTES);

/// The IQ3_S format.
pub struct Iq3S;

impl Lattice for Iq3S {
    const TYPE: GgmlType = GgmlType::IQ3_S;
    const BLOCK_BYTES: usize = BLOCK_BYTES;
    const FACTOR: f32 = 1.0;

    fn decode(block: &[u8]) -> Decoded {
        let mut dec = Decoded {
            d: u16::from_le_bytes([block[0], block[1]]),
            grid: [0; QK_K],
            neg: [0; QK_K / 8],
            ls: [0; QK_K / 16],
        };
        let (qs, qh, signs, scales) = (
            &block[2..66],
            &block[66..74],
            &block[74..106],
            &block[106..110],
        );
        for k in 0..64 {
            let high = usize::from(qh[k / 8] >> (k % 8) & 1);
            let g = IQ3S_GRID[usize::from(qs[k]) | high << 8].to_le_bytes();
            dec.grid[4 * k..4 * k + 4].copy_from_slice(&g);
        }
        dec.neg.copy_from_slice(signs);
        for s in 0..8 {
            let ls = scales[s / 2] >> (4 * (s % 2)) & 15;
            dec.ls[2 * s] = ls;
            dec.ls[2 * s + 1] = ls;
        }
        dec
    }

    fn sub_scale(d: f32, ls: u8) -> f32 {
        d * f32::from(1 + 2 * ls)
    }
}

/// llama.cpp's prompt orders ([`crate::tiled`]): the super-block decoded.
impl crate::tiled::TiledOrder for Iq3S {
    const SUPER_BYTES: usize = BLOCK_BYTES;
    const HAS_MIN: bool = false;
    fn decode(b: &[u8], out: &mut crate::tiled::Decoded) {
        crate::iq_lattice::decode_tiled::<Self>(b, out)
    }
}

impl BlockFormat for Iq3S {
    const TYPE: GgmlType = GgmlType::IQ3_S;
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

impl LatticeKernels for Iq3S {
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

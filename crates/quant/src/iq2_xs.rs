//! IQ2_XS: 256 values in 74 bytes (2.3125 bits per value), eight magnitudes at a time
//! from a 512-point grid, a scale field per 16 values.
//!
//! **Block** (`block_iq2_xs`, `ggml/src/ggml-common.h`): an f16 scale `d`, 32 little-endian
//! `u16` (`qs`, one per group of eight values: bits 0..9 a grid index into `iq2xs_grid`,
//! [`crate::iq_grids::IQ2XS_GRID`], eight magnitudes 8 / 25 / 43 each; bits 9..16 a 7-bit
//! sign index into `ksigns_iq2xs`), then 8 bytes of scale fields (`scales`: byte s holds
//! `ls` of values 32s..32s + 16 in its low nibble and of 32s + 16..32s + 32 in its high
//! nibble).
//!
//! **Dequantization** (gguf-py `gguf/quants.py` `IQ2_XS`, as ggml's
//! `dequantize_row_iq2_xs` in `ggml/src/ggml-quants.c`): `y = (d · (0.5 + ls) · 0.25) ·
//! magnitude · (±1)` in f32, in that order.
//!
//! **Dot product**: with Q8_K activations (`vec_dot_type` in `ggml-cpu/ggml-cpu.c`), in
//! the order of [`crate::iq_lattice`] (eight exact integer lanes per block, a fused
//! multiply-add per lane and block, [`crate::lanes::hsum8`], times the factor 1/8) — the
//! float steps of ggml's AVX2 `ggml_vec_dot_iq2_xs_q8_K` (`ggml-cpu/arch/x86/quants.c`).

use dspark_gguf::GgmlType;

use crate::columns::{Activation, Columns};
use crate::cpu::Detected;
use crate::format::{BlockFormat, FormatKernels, Scale};
use crate::iq_grids::{IQ2XS_GRID, KSIGNS_IQ2XS};
use crate::iq_lattice::{Decoded, Lattice, LatticeKernels, QK_K};

/// Bytes per block: f16 `d`, 32 `u16`, 8 scale bytes.
pub const BLOCK_BYTES: usize = 74;

/// One IQ2_XS block as laid out on disk.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockIq2Xs {
    /// Scale, IEEE binary16 bits (little-endian on disk).
    pub d: [u8; 2],
    /// One little-endian `u16` per group of eight values: grid index and sign index.
    pub qs: [u8; QK_K / 4],
    /// Two 4-bit scale fields per run of 32 values.
    pub scales: [u8; QK_K / 32],
}
const _: () = assert!(std::mem::size_of::<BlockIq2Xs>() == BLOCK_BYTES);

/// The IQ2_XS format.
pub struct Iq2Xs;

impl Lattice for Iq2Xs {
    const TYPE: GgmlType = GgmlType::IQ2_XS;
    const BLOCK_BYTES: usize = BLOCK_BYTES;
    const FACTOR: f32 = 0.125;

    fn decode(block: &[u8]) -> Decoded {
        let mut dec = Decoded {
            d: u16::from_le_bytes([block[0], block[1]]),
            grid: [0; QK_K],
            neg: [0; QK_K / 8],
            ls: [0; QK_K / 16],
        };
        for (k, q) in block[2..66].chunks_exact(2).enumerate() {
            let q = u16::from_le_bytes([q[0], q[1]]);
            let g = IQ2XS_GRID[usize::from(q & 511)].to_le_bytes();
            dec.grid[8 * k..8 * k + 8].copy_from_slice(&g);
            dec.neg[k] = KSIGNS_IQ2XS[usize::from(q >> 9)];
        }
        for (s, &sc) in block[66..74].iter().enumerate() {
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
impl crate::tiled::TiledOrder for Iq2Xs {
    const SUPER_BYTES: usize = BLOCK_BYTES;
    const HAS_MIN: bool = false;
    fn decode(b: &[u8], out: &mut crate::tiled::Decoded) {
        crate::iq_lattice::decode_tiled::<Self>(b, out)
    }
}

impl BlockFormat for Iq2Xs {
    const TYPE: GgmlType = GgmlType::IQ2_XS;
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

impl LatticeKernels for Iq2Xs {
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

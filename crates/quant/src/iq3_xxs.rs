//! IQ3_XXS: 256 values in 98 bytes (3.0625 bits per value), four magnitudes at a time from
//! a 256-point grid.
//!
//! **Block** (`block_iq3_xxs`, `ggml/src/ggml-common.h`): an f16 scale `d`; `qs`, 96
//! bytes: 64 grid indices (one per group of four values, into `iq3xxs_grid`,
//! [`crate::iq_grids::IQ3XXS_GRID`], magnitudes 4 to 62), then eight little-endian `u32`,
//! one per run of 32 values, holding four 7-bit sign indices at bits 0, 7, 14, 21
//! (`ksigns_iq2xs`, one per eight values) and the run's scale field `ls` at bits 28..32.
//!
//! **Dequantization** (gguf-py `gguf/quants.py` `IQ3_XXS`, as ggml's
//! `dequantize_row_iq3_xxs` in `ggml/src/ggml-quants.c`): `y = (d · (0.5 + ls) · 0.5) ·
//! magnitude · (±1)` in f32, in that order.
//!
//! **Dot product**: with Q8_K activations (`vec_dot_type` in `ggml-cpu/ggml-cpu.c`), in
//! the order of [`crate::iq_lattice`] (eight exact integer lanes per block, a fused
//! multiply-add per lane and block, [`crate::lanes::hsum8`], times the factor 1/4) — the
//! float steps of ggml's AVX2 `ggml_vec_dot_iq3_xxs_q8_K` (`ggml-cpu/arch/x86/quants.c`).

use dspark_gguf::GgmlType;

use crate::columns::{Activation, Columns};
use crate::cpu::Detected;
use crate::format::{BlockFormat, FormatKernels, Scale};
use crate::iq_grids::{IQ3XXS_GRID, KSIGNS_IQ2XS};
use crate::iq_lattice::{Decoded, Lattice, LatticeKernels, QK_K};

/// Bytes per block: f16 `d`, 64 index bytes, eight `u32` of signs and scales.
pub const BLOCK_BYTES: usize = 98;

/// One IQ3_XXS block as laid out on disk.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockIq3Xxs {
    /// Scale, IEEE binary16 bits (little-endian on disk).
    pub d: [u8; 2],
    /// 64 grid indices, then per run of 32 values a `u32` of sign indices and scale.
    pub qs: [u8; 3 * QK_K / 8],
}
const _: () = assert!(std::mem::size_of::<BlockIq3Xxs>() == BLOCK_BYTES);

/// The IQ3_XXS format.
pub struct Iq3Xxs;

impl Lattice for Iq3Xxs {
    const TYPE: GgmlType = GgmlType::IQ3_XXS;
    const BLOCK_BYTES: usize = BLOCK_BYTES;
    const FACTOR: f32 = 0.25;

    fn decode(block: &[u8]) -> Decoded {
        let mut dec = Decoded {
            d: u16::from_le_bytes([block[0], block[1]]),
            grid: [0; QK_K],
            neg: [0; QK_K / 8],
            ls: [0; QK_K / 16],
        };
        for (k, &i) in block[2..66].iter().enumerate() {
            let g = IQ3XXS_GRID[usize::from(i)].to_le_bytes();
            dec.grid[4 * k..4 * k + 4].copy_from_slice(&g);
        }
        for (s, a) in block[66..98].chunks_exact(4).enumerate() {
            let aux = u32::from_le_bytes([a[0], a[1], a[2], a[3]]);
            for l in 0..4 {
                dec.neg[4 * s + l] = KSIGNS_IQ2XS[(aux >> (7 * l)) as usize & 127];
            }
            dec.ls[2 * s] = (aux >> 28) as u8;
            dec.ls[2 * s + 1] = (aux >> 28) as u8;
        }
        dec
    }

    fn sub_scale(d: f32, ls: u8) -> f32 {
        d * (0.5 + f32::from(ls)) * 0.5
    }
}

/// llama.cpp's prompt orders ([`crate::tiled`]): the super-block decoded.
impl crate::tiled::TiledOrder for Iq3Xxs {
    const SUPER_BYTES: usize = BLOCK_BYTES;
    const HAS_MIN: bool = false;
    fn decode(b: &[u8], out: &mut crate::tiled::Decoded) {
        crate::iq_lattice::decode_tiled::<Self>(b, out)
    }
}

impl BlockFormat for Iq3Xxs {
    const TYPE: GgmlType = GgmlType::IQ3_XXS;
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

impl LatticeKernels for Iq3Xxs {
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

//! IQ2_XXS: 256 values in 66 bytes (2.0625 bits per value), eight magnitudes at a time
//! from a 256-point grid.
//!
//! **Block** (`block_iq2_xxs`, `ggml/src/ggml-common.h`): an f16 scale `d`, then 32
//! little-endian `u16` (`qs`) read as eight runs of 32 values, 8 bytes each: bytes 0..4 are
//! four grid indices (`iq2xxs_grid`, [`crate::iq_grids::IQ2XXS_GRID`]: eight magnitudes
//! 8 / 25 / 43 each), and the `u32` in bytes 4..8 holds four 7-bit sign indices at bits 0,
//! 7, 14, 21 (`ksigns_iq2xs`: seven sign bits plus an even-parity eighth, one per group of
//! eight values) and the run's scale field `ls` at bits 28..32.
//!
//! **Dequantization** (gguf-py `gguf/quants.py` `IQ2_XXS`, as ggml's
//! `dequantize_row_iq2_xxs` in `ggml/src/ggml-quants.c`): `y = (d · (0.5 + ls) · 0.25) ·
//! magnitude · (±1)` in f32, in that order.
//!
//! **Dot product**: with Q8_K activations (`vec_dot_type` in `ggml-cpu/ggml-cpu.c`), as
//! `d_w · d_x · (2·ls + 1) · magnitude · sign · q` summed in the order of
//! [`crate::iq_lattice`] (eight exact integer lanes per block, a fused multiply-add per
//! lane and block, [`crate::lanes::hsum8`], times [`Iq2Xxs`]'s factor 1/8) — ggml's AVX2
//! `ggml_vec_dot_iq2_xxs_q8_K` (`ggml-cpu/arch/x86/quants.c`) takes the same float steps.

use dspark_gguf::GgmlType;

use crate::columns::{Activation, Columns};
use crate::cpu::Detected;
use crate::format::{BlockFormat, FormatKernels, Scale};
use crate::iq_grids::{IQ2XXS_GRID, KSIGNS_IQ2XS};
use crate::iq_lattice::{Decoded, Lattice, LatticeKernels, QK_K};

/// Bytes per block: f16 `d` and 32 `u16`.
pub const BLOCK_BYTES: usize = 66;

/// One IQ2_XXS block as laid out on disk.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockIq2Xxs {
    /// Scale, IEEE binary16 bits (little-endian on disk).
    pub d: [u8; 2],
    /// Per run of 32 values: four grid indices, then a `u32` of four sign indices and the
    /// scale field.
    pub qs: [u8; QK_K / 4],
}
const _: () = assert!(std::mem::size_of::<BlockIq2Xxs>() == BLOCK_BYTES);

/// The IQ2_XXS format.
pub struct Iq2Xxs;

impl Lattice for Iq2Xxs {
    const TYPE: GgmlType = GgmlType::IQ2_XXS;
    const BLOCK_BYTES: usize = BLOCK_BYTES;
    const FACTOR: f32 = 0.125;

    fn decode(block: &[u8]) -> Decoded {
        let mut dec = Decoded {
            d: u16::from_le_bytes([block[0], block[1]]),
            grid: [0; QK_K],
            neg: [0; QK_K / 8],
            ls: [0; QK_K / 16],
        };
        for (s, run) in block[2..].chunks_exact(8).enumerate() {
            let aux = u32::from_le_bytes([run[4], run[5], run[6], run[7]]);
            for l in 0..4 {
                let g = IQ2XXS_GRID[usize::from(run[l])].to_le_bytes();
                dec.grid[32 * s + 8 * l..32 * s + 8 * l + 8].copy_from_slice(&g);
                dec.neg[4 * s + l] = KSIGNS_IQ2XS[(aux >> (7 * l)) as usize & 127];
            }
            dec.ls[2 * s] = (aux >> 28) as u8;
            dec.ls[2 * s + 1] = (aux >> 28) as u8;
        }
        dec
    }

    fn sub_scale(d: f32, ls: u8) -> f32 {
        d * (0.5 + f32::from(ls)) * 0.25
    }
}

/// llama.cpp's prompt orders ([`crate::tiled`]): the super-block decoded.
impl crate::tiled::TiledOrder for Iq2Xxs {
    const SUPER_BYTES: usize = BLOCK_BYTES;
    const HAS_MIN: bool = false;
    fn decode(b: &[u8], out: &mut crate::tiled::Decoded) {
        crate::iq_lattice::decode_tiled::<Self>(b, out)
    }
}

impl BlockFormat for Iq2Xxs {
    const TYPE: GgmlType = GgmlType::IQ2_XXS;
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

impl LatticeKernels for Iq2Xxs {
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

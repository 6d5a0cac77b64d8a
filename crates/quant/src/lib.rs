//! Block formats for dspark: one module per GGUF weight format behind one trait, scalar
//! references, and SIMD kernels that agree with them.
//!
//! # Brief overview
//! - [`BlockFormat`]: what a weight format is (its GGUF type, the [`Activation`] it dots
//!   with, where its blocks keep their scales, reference dequantize and dot, a reference
//!   quantizer for the formats dspark writes); one module each: [`fp32`], [`fp16`],
//!   [`bf16`], [`q8_0`] (ggml's reference quantizer, bit for bit); the formats of
//!   32-value runs [`q4_0`], [`q4_1`], [`q5_0`], [`q5_1`], [`iq4_nl`], [`mxfp4`] and
//!   [`q1_0`] (read only), whose shared summation order and kernels live in `legacy.rs`;
//!   the Q8_K-partnered [`iq4_xs`], [`iq1_s`], [`iq1_m`] (on the lattice [`iq1s_grid`]),
//!   [`tq1_0`] and [`tq2_0`], whose dot products share one shape ([`superblock`]); the
//!   k-quants [`q2_k`], [`q3_k`], [`q4_k`], [`q5_k`], [`q6_k`] (read only; what they share
//!   is in [`kquant`]); the lattice i-quants [`iq2_xxs`], [`iq2_xs`], [`iq2_s`],
//!   [`iq3_xxs`], [`iq3_s`] (read only; shared parts in [`iq_lattice`], their grids in
//!   [`iq_grids`]).
//! - [`Activation`]: the activation kinds weights dot with (ggml's `vec_dot_type`): f32,
//!   F16, BF16, and the quantized [`q8_0`], [`q8_1`], [`q8_k`] blocks, made by ggml's x86
//!   recipes; [`Columns`] holds columns prepared for one of them.
//! - [`FORMATS`] and [`ACTIVATIONS`]: the tables, one row per weight format and per
//!   quantized activation kind; [`Kernels`] is both built for this CPU ([`kernels`]), with
//!   the attention and activation vector kernels and the error sums beside them. Fast
//!   kernels equal their references (bytes for quantizers, bits for dot products and error
//!   sums), and the tests walk the tables, so a new format is one module plus one row,
//!   covered automatically. Where a format's reference sums as ggml's x86 kernel for it
//!   does, its products are llama.cpp's to the bit (`docs/LLAMA-CPP.md` §6 lists which).
//! - [`gemm`]: weight matrix ([`Matrix`]) × 1..16 activation columns, each column computed
//!   exactly as it would be alone; it knows formats only through their table rows.
//! - [`float`]: decoding BF16 / F16 / F32 source bytes and encoding F16 / BF16.
//! - [`error`]: quantization error sums with a defined summation order.
//! - [`vector`]: the f32 dot product and `y += s·x` of attention.
//!
//! Set `DSPARK_FORCE_SCALAR=1` to make [`kernels`] pick the scalar references (CI runs
//! the suite that way too).
//!
//! # Example
//! ```
//! use dspark_gguf::GgmlType;
//! use dspark_quant::{kernels, q8_0};
//!
//! let x: Vec<f32> = (0..64).map(|i| (i as f32 - 32.0) / 10.0).collect();
//! let mut fast = vec![0u8; 68];
//! let mut reference = vec![0u8; 68];
//! let q8 = kernels().format(GgmlType::Q8_0).unwrap();
//! (q8.quantize.unwrap())(&x, &mut fast);
//! q8_0::quantize_ref(&x, &mut reference);
//! assert_eq!(fast, reference);
//! assert!(kernels().format(GgmlType::Q8_K).is_none()); // an activation kind, never a weight
//! ```
#![deny(missing_docs)]

use std::sync::OnceLock;

pub mod bf16;
pub mod columns;
pub mod cpu;
pub mod error;
pub mod float;
pub mod format;
pub mod fp16;
pub mod fp32;
pub mod gemm;
pub mod iq1_m;
pub mod iq1_s;
pub mod iq1s_grid;
pub mod iq2_s;
pub mod iq2_xs;
pub mod iq2_xxs;
pub mod iq3_s;
pub mod iq3_xxs;
pub mod iq4_nl;
pub mod iq4_xs;
pub mod iq_grids;
pub mod iq_lattice;
pub mod kquant;
pub mod lanes;
mod legacy;
pub mod matrix;
pub mod mxfp4;
mod plain;
pub mod q1_0;
pub mod q2_k;
pub mod q3_k;
pub mod q4_0;
pub mod q4_1;
pub mod q4_k;
pub mod q5_0;
pub mod q5_1;
pub mod q5_k;
pub mod q6_k;
pub mod q8_0;
pub mod q8_1;
pub mod q8_k;
pub mod stream;
pub mod superblock;
pub mod tiled;
pub mod tq1_0;
pub mod tq2_0;
pub mod vector;
#[cfg(target_arch = "x86_64")]
mod x86_64;

use dspark_gguf::GgmlType;

pub use columns::{Activation, ActivationKernels, Columns};
pub use cpu::{Detected, Isa};
pub use error::ErrorSums;
pub use float::SourceDtype;
pub use format::{BlockFormat, FormatKernels, QuantizeFn, Scale};
pub use matrix::{Matrix, Packed};

/// How many weight formats the table holds.
pub const FORMAT_COUNT: usize = 26;

/// A row of [`FORMATS`]: a GGUF type and the function giving its kernels for a CPU.
pub type FormatRow = (GgmlType, fn(Detected) -> FormatKernels);

/// The weight formats, one row each. Adding a format is a module implementing
/// [`BlockFormat`] and a row here.
pub const FORMATS: [FormatRow; FORMAT_COUNT] = [
    (GgmlType::F32, <fp32::Fp32 as BlockFormat>::kernels),
    (GgmlType::F16, <fp16::Fp16 as BlockFormat>::kernels),
    (GgmlType::BF16, <bf16::Bf16 as BlockFormat>::kernels),
    (GgmlType::Q8_0, <q8_0::Q8_0 as BlockFormat>::kernels),
    (GgmlType::Q4_0, <q4_0::Q4_0 as BlockFormat>::kernels),
    (GgmlType::Q4_1, <q4_1::Q4_1 as BlockFormat>::kernels),
    (GgmlType::Q5_0, <q5_0::Q5_0 as BlockFormat>::kernels),
    (GgmlType::Q5_1, <q5_1::Q5_1 as BlockFormat>::kernels),
    (GgmlType::IQ4_NL, <iq4_nl::Iq4Nl as BlockFormat>::kernels),
    (GgmlType::MXFP4, <mxfp4::Mxfp4 as BlockFormat>::kernels),
    (GgmlType::Q1_0, <q1_0::Q1_0 as BlockFormat>::kernels),
    (GgmlType::IQ4_XS, <iq4_xs::Iq4Xs as BlockFormat>::kernels),
    (GgmlType::IQ1_S, <iq1_s::Iq1S as BlockFormat>::kernels),
    (GgmlType::IQ1_M, <iq1_m::Iq1M as BlockFormat>::kernels),
    (GgmlType::TQ1_0, <tq1_0::Tq1_0 as BlockFormat>::kernels),
    (GgmlType::TQ2_0, <tq2_0::Tq2_0 as BlockFormat>::kernels),
    (GgmlType::Q2_K, <q2_k::Q2K as BlockFormat>::kernels),
    (GgmlType::Q3_K, <q3_k::Q3K as BlockFormat>::kernels),
    (GgmlType::Q4_K, <q4_k::Q4K as BlockFormat>::kernels),
    (GgmlType::Q5_K, <q5_k::Q5K as BlockFormat>::kernels),
    (GgmlType::Q6_K, <q6_k::Q6K as BlockFormat>::kernels),
    (GgmlType::IQ2_XXS, <iq2_xxs::Iq2Xxs as BlockFormat>::kernels),
    (GgmlType::IQ2_XS, <iq2_xs::Iq2Xs as BlockFormat>::kernels),
    (GgmlType::IQ2_S, <iq2_s::Iq2S as BlockFormat>::kernels),
    (GgmlType::IQ3_XXS, <iq3_xxs::Iq3Xxs as BlockFormat>::kernels),
    (GgmlType::IQ3_S, <iq3_s::Iq3S as BlockFormat>::kernels),
];

/// How many quantized activation kinds the table holds.
pub const ACTIVATION_COUNT: usize = 3;

/// A row of [`ACTIVATIONS`]: a quantized activation kind and the function giving its
/// quantizer for a CPU.
pub type ActivationRow = (Activation, fn(Detected) -> ActivationKernels);

/// The quantized activation kinds, one row each.
pub const ACTIVATIONS: [ActivationRow; ACTIVATION_COUNT] = [
    (Activation::Q8_0, q8_0::activation_kernels),
    (Activation::Q8_1, q8_1::activation_kernels),
    (Activation::Q8_K, q8_k::activation_kernels),
];

/// The weight types some kernel multiplies (the contract checks take this list).
pub fn matrix_types() -> [GgmlType; FORMAT_COUNT] {
    FORMATS.map(|(ty, _)| ty)
}

/// [`Kernels::attend_chunk_f16`] over cache rows of `T`: `(q16, keys, values, stride,
/// positions, scale, out) -> (M, S)`.
pub type AttendChunkOf<T> =
    fn(&[f32], &[T], &[T], usize, std::ops::Range<usize>, f32, &mut [f32]) -> (f32, f32);

/// [`Kernels::attend_chunk_f16`]: over rows stored as f32.
pub type AttendChunk = AttendChunkOf<f32>;

/// [`Kernels::attend_chunk_f16_half`]: over rows stored as F16.
pub type AttendChunkHalf = AttendChunkOf<half::f16>;

/// The implementation of each op chosen for one CPU.
#[derive(Clone, Copy, Debug)]
pub struct Kernels {
    /// Which instruction set the kernels use (`"avx512vnni"`, `"avx2"` or `"scalar"`).
    pub isa: &'static str,
    /// The format table, in [`FORMATS`] order.
    pub formats: [FormatKernels; FORMAT_COUNT],
    /// The quantized activation kinds' quantizers, in [`ACTIVATIONS`] order.
    pub activations: [ActivationKernels; ACTIVATION_COUNT],
    /// Error sums, identical in bits to [`error::error_sums_ref`] (NaN payloads aside).
    pub error_sums: fn(&[f32], &[f32]) -> ErrorSums,
    /// f32 dot product, within [`gemm::DOT_TOLERANCE`] of [`vector::dot_ref`].
    pub dot_f32: fn(&[f32], &[f32]) -> f32,
    /// `y += s·x`, the bits of [`vector::axpy_ref`] (one fused multiply-add per value, as
    /// ggml's `ggml_vec_mad_f32`).
    pub axpy_f32: fn(&mut [f32], f32, &[f32]),
    /// f32 dot product in ggml's `ggml_vec_dot_f32` order, the bits of
    /// [`vector::dot_f32_ggml_ref`] (what llama.cpp's recurrent ops dot with).
    pub dot_f32_ggml: fn(&[f32], &[f32]) -> f32,
    /// One query against keys at a stride ([`vector::dots_ref`]), each dot the same bits
    /// as [`Kernels::dot_f32`].
    pub dots_f32: fn(&[f32], &[f32], usize, &mut [f32]),
    /// Weighted values at a stride summed in order ([`vector::axpys_ref`]), each step the
    /// same bits as [`Kernels::axpy_f32`].
    pub axpys_f32: fn(&mut [f32], &[f32], &[f32], usize),
    /// An F16 accumulator rescaled, the bits of [`vector::scale_round_f16_ref`].
    pub scale_round_f16: fn(&mut [f32], f32),
    /// An F16 accumulator taking a weighted row, the bits of
    /// [`vector::mad_round_f16_ref`].
    pub mad_round_f16: fn(&mut [f32], &[f32], f32),
    /// The dot product of F16-valued vectors, the bits of [`vector::dot_f16_ref`] (ggml's
    /// AVX-512 order).
    pub dot_f16: fn(&[f32], &[f32]) -> f32,
    /// SwiGLU in place, the bits of [`vector::swiglu_ref`] (ggml's AVX-512 arithmetic).
    pub swiglu: fn(&mut [f32], &[f32]),
    /// One query row over a chunk of positions by llama.cpp's one-chunk flash attention
    /// with F16 values, the bits of [`vector::attend_chunk_f16_ref`].
    pub attend_chunk_f16: AttendChunk,
    /// Sequential fused dot products of a query with keys at a stride, the bits of
    /// [`vector::fused_dots_ref`].
    pub fused_dots: fn(&[f32], &[f32], usize, &mut [f32]),
    /// Weighted values at a stride, one fused step each in order, the bits of
    /// [`vector::fused_axpys_ref`].
    pub fused_axpys: fn(&mut [f32], &[f32], &[f32], usize),
    /// [`Kernels::attend_chunk_f16`] over keys and values stored as F16 (the same bits as
    /// over the same values stored as f32).
    pub attend_chunk_f16_half: AttendChunkHalf,
    /// [`Kernels::fused_dots`] over keys stored as F16 (the same bits).
    pub fused_dots_half: fn(&[f32], &[half::f16], usize, &mut [f32]),
    /// [`Kernels::fused_axpys`] over values stored as F16 (the same bits).
    pub fused_axpys_half: fn(&mut [f32], &[f32], &[half::f16], usize),
}

impl Kernels {
    /// The kernels of `cpu`.
    pub fn for_cpu(cpu: Detected) -> Kernels {
        let mut k = Kernels {
            isa: "scalar",
            formats: FORMATS.map(|(_, kernels)| kernels(cpu)),
            activations: ACTIVATIONS.map(|(_, kernels)| kernels(cpu)),
            error_sums: error::error_sums_ref,
            dot_f32: vector::dot_ref,
            axpy_f32: vector::axpy_ref,
            dot_f32_ggml: vector::dot_f32_ggml_ref,
            dots_f32: vector::dots_ref,
            axpys_f32: vector::axpys_ref,
            scale_round_f16: vector::scale_round_f16_ref,
            mad_round_f16: vector::mad_round_f16_ref,
            swiglu: vector::swiglu_ref,
            dot_f16: vector::dot_f16_ref,
            fused_dots: vector::fused_dots_ref,
            fused_axpys: vector::fused_axpys_ref,
            attend_chunk_f16: vector::attend_chunk_f16_ref,
            attend_chunk_f16_half: vector::attend_chunk_f16_ref,
            fused_dots_half: vector::fused_dots_ref,
            fused_axpys_half: vector::fused_axpys_ref,
        };
        #[cfg(target_arch = "x86_64")]
        if cpu.has_avx2() {
            k.isa = if cpu.isa() == Isa::Avx512Vnni {
                "avx512vnni"
            } else {
                "avx2"
            };
            k.error_sums = |x, y| {
                // SAFETY: built only from a `Detected` with AVX2.
                unsafe { error::x86_64::error_sums_avx2(x, y) }
            };
            k.dot_f32 = |a, b| {
                // SAFETY: built only from a `Detected` with AVX2 and FMA.
                unsafe { vector::x86_64::dot_avx2(a, b) }
            };
            k.dot_f32_ggml = |a, b| {
                // SAFETY: built only from a `Detected` with AVX2, FMA and F16C.
                unsafe { vector::x86_64::dot_f32_ggml_avx2(a, b) }
            };
            k.axpy_f32 = |y, s, x| {
                // SAFETY: built only from a `Detected` with AVX2 and FMA.
                unsafe { vector::x86_64::axpy_avx2(y, s, x) }
            };
            k.dots_f32 = |q, keys, stride, out| {
                // SAFETY: built only from a `Detected` with AVX2 and FMA.
                unsafe { vector::x86_64::dots_avx2(q, keys, stride, out) }
            };
            k.scale_round_f16 = |y, s| {
                // SAFETY: built only from a `Detected` with AVX2, FMA and F16C.
                unsafe { vector::x86_64::scale_round_f16_avx2(y, s) }
            };
            k.mad_round_f16 = |y, x, s| {
                // SAFETY: built only from a `Detected` with AVX2, FMA and F16C.
                unsafe { vector::x86_64::mad_round_f16_avx2(y, x, s) }
            };
            k.axpys_f32 = |y, w, values, stride| {
                // SAFETY: built only from a `Detected` with AVX2 and FMA.
                unsafe { vector::x86_64::axpys_avx2(y, w, values, stride) }
            };
            k.swiglu = |g, u| {
                // SAFETY: built only from a `Detected` with AVX2 and FMA.
                unsafe { vector::x86_64::swiglu_avx2(g, u) }
            };
            k.dot_f16 = |a, b| {
                // SAFETY: built only from a `Detected` with AVX2, FMA and F16C.
                unsafe { vector::x86_64::dot_f16_avx2(a, b) }
            };
            k.fused_dots = |q, keys, stride, out| {
                // SAFETY: built only from a `Detected` with AVX2 and FMA.
                unsafe { vector::x86_64::fused_dots_fma(q, keys, stride, out) }
            };
            k.fused_axpys = |y, w, values, stride| {
                // SAFETY: built only from a `Detected` with AVX2 and FMA.
                unsafe { vector::x86_64::fused_axpys_fma(y, w, values, stride) }
            };
            k.attend_chunk_f16 = |q, keys, values, stride, positions, scale, out| {
                // SAFETY: built only from a `Detected` with AVX2, FMA and F16C.
                unsafe {
                    vector::x86_64::attend_chunk_f16_avx2(
                        q, keys, values, stride, positions, scale, out,
                    )
                }
            };
            k.attend_chunk_f16_half = |q, keys, values, stride, positions, scale, out| {
                // SAFETY: built only from a `Detected` with AVX2, FMA and F16C.
                unsafe {
                    vector::x86_64::attend_chunk_f16_avx2(
                        q, keys, values, stride, positions, scale, out,
                    )
                }
            };
            k.fused_dots_half = |q, keys, stride, out| {
                // SAFETY: built only from a `Detected` with AVX2 and FMA.
                unsafe { vector::x86_64::fused_dots_fma(q, keys, stride, out) }
            };
            k.fused_axpys_half = |y, w, values, stride| {
                // SAFETY: built only from a `Detected` with AVX2, FMA and F16C.
                unsafe { vector::x86_64::fused_axpys_fma(y, w, values, stride) }
            };
            if cpu.isa() == Isa::Avx512Vnni {
                k.swiglu = |g, u| {
                    // SAFETY: built only from a `Detected` with AVX-512 F.
                    unsafe { vector::x86_64::swiglu_avx512(g, u) }
                };
            }
        }
        k
    }

    /// The scalar references.
    pub fn scalar() -> Kernels {
        Kernels::for_cpu(Detected::scalar())
    }

    /// The AVX2 kernels, or `None` when this CPU lacks AVX2, FMA or F16C.
    pub fn avx2() -> Option<Kernels> {
        Detected::avx2().map(Kernels::for_cpu)
    }

    /// The AVX2 kernels with the AVX-512 ones (VNNI tiles of the packed formats, SwiGLU with
    /// `scalef`; the same bits as the AVX2 ones), or `None` when this CPU lacks any of them.
    pub fn avx512() -> Option<Kernels> {
        Detected::avx512_vnni().map(Kernels::for_cpu)
    }

    /// The kernels of weight type `ty`, or `None` when no format module reads it.
    pub fn format(&self, ty: GgmlType) -> Option<&FormatKernels> {
        self.formats.iter().find(|f| f.ty == ty)
    }

    /// The quantizer of activation kind `a`, or `None` for the float kinds.
    pub fn activation(&self, a: Activation) -> Option<&ActivationKernels> {
        self.activations.iter().find(|k| k.activation == a)
    }
}

/// The kernels for this CPU, chosen on first use: the widest instruction set available,
/// unless `DSPARK_FORCE_SCALAR` is set to anything but `0`.
pub fn kernels() -> &'static Kernels {
    static CHOSEN: OnceLock<Kernels> = OnceLock::new();
    CHOSEN.get_or_init(|| {
        let forced = std::env::var_os("DSPARK_FORCE_SCALAR").is_some_and(|v| v != "0");
        if forced {
            return Kernels::scalar();
        }
        Kernels::avx512()
            .or_else(Kernels::avx2)
            .unwrap_or_else(Kernels::scalar)
    })
}

/// The kernel-table row of `ty` for this CPU, or `None` when no format module reads it.
pub fn format_of(ty: GgmlType) -> Option<&'static FormatKernels> {
    kernels().format(ty)
}

#[cfg(test)]
mod tests;

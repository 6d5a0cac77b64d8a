//! The block-format trait, and the kernel table keyed by GGUF type.
//!
//! A format is one module: its block layout, a scalar reference for quantizing,
//! dequantizing and dotting a row with an activation column, and (optionally) the faster
//! kernels it has for each instruction set ([`BlockFormat::kernels`]). The table
//! ([`crate::FORMATS`]) has one row per format; [`crate::Kernels`] builds it for the CPU,
//! and the tests walk it, so a new format (Q4_K, Q6_K) is one module and one row, and every
//! kernel test covers it.

use dspark_gguf::GgmlType;

use crate::gemm::{Columns, Matrix, RowKernel};

/// What a weight row is multiplied with: f32 columns, or columns converted once to the
/// weights' own type, as ggml's CPU matmul does (its `vec_dot_type`: F16 weights dot F16
/// activations, BF16 weights BF16 ones, Q8_0 weights Q8_0 blocks).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    /// Plain f32 values.
    F32,
    /// Values rounded to F16 (nearest, ties to even), kept as f32: every product with an
    /// F16 weight is then exact in f32.
    F16,
    /// Values rounded to BF16 (nearest, ties to even), kept as f32.
    Bf16,
    /// Q8_0 blocks ([`crate::q8_0::quantize_ref`]), split into f32 scales and i8 quants.
    Q8_0,
}

/// Instruction sets a kernel may use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Isa {
    /// Portable Rust.
    Scalar,
    /// AVX2, FMA and F16C.
    Avx2,
    /// The AVX2 set plus AVX-512 F, VL and VNNI.
    Avx512Vnni,
}

/// Proof that this CPU has an instruction set: only [`Detected::scalar`] and the detecting
/// constructors make one, so a kernel table built from it never holds a kernel the CPU
/// cannot run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Detected(Isa);

impl Detected {
    /// The scalar references, which run anywhere.
    pub const fn scalar() -> Detected {
        Detected(Isa::Scalar)
    }

    /// AVX2 + FMA + F16C, when this CPU has them.
    pub fn avx2() -> Option<Detected> {
        #[cfg(target_arch = "x86_64")]
        {
            if is_x86_feature_detected!("avx2")
                && is_x86_feature_detected!("fma")
                && is_x86_feature_detected!("f16c")
            {
                return Some(Detected(Isa::Avx2));
            }
        }
        None
    }

    /// AVX-512 F + VL + VNNI on top of the AVX2 set, when this CPU has them.
    pub fn avx512_vnni() -> Option<Detected> {
        #[cfg(target_arch = "x86_64")]
        {
            if Detected::avx2().is_some()
                && is_x86_feature_detected!("avx512f")
                && is_x86_feature_detected!("avx512vl")
                && is_x86_feature_detected!("avx512vnni")
            {
                return Some(Detected(Isa::Avx512Vnni));
            }
        }
        None
    }

    /// The instruction set.
    pub fn isa(self) -> Isa {
        self.0
    }

    /// Whether the AVX2 set is available (also true under AVX-512 VNNI).
    pub fn has_avx2(self) -> bool {
        self.0 >= Isa::Avx2
    }
}

/// A block format: its GGUF type, what it dots with, and its scalar references.
pub trait BlockFormat: Sized {
    /// The GGUF type (block length and bytes come from `dspark_gguf`'s table).
    const TYPE: GgmlType;
    /// What a row of this format is multiplied with.
    const ACTIVATION: Activation;
    /// Reference quantization of whole blocks, bit-exact with ggml / gguf-py.
    fn quantize_ref(x: &[f32], out: &mut [u8]);
    /// Reference dequantization of whole blocks.
    fn dequantize_ref(q: &[u8], y: &mut [f32]);
    /// Reference dot product of one row with column `c` of `x` (prepared for
    /// [`BlockFormat::ACTIVATION`]).
    fn dot_ref(row: &[u8], x: &Columns<'_>, c: usize) -> f32;
    /// The index of the first value whose encoding is NaN or infinite (for a block format,
    /// the first value of the first block with a non-finite scale), or `None`.
    fn first_non_finite(bytes: &[u8]) -> Option<usize>;
    /// The fastest kernels of this format for `cpu` (the references unless overridden).
    fn kernels(cpu: Detected) -> FormatKernels {
        let _ = cpu;
        FormatKernels::reference::<Self>()
    }
}

/// One row of the kernel table: a format's kernels for one CPU, with its references beside
/// them for the tests.
#[derive(Clone, Copy, Debug)]
pub struct FormatKernels {
    /// The GGUF type.
    pub ty: GgmlType,
    /// What rows dot with.
    pub activation: Activation,
    /// Quantization (the same bytes as `quantize_ref`).
    pub quantize: fn(&[f32], &mut [u8]),
    /// Dequantization (the same values as `dequantize_ref`).
    pub dequantize: fn(&[u8], &mut [f32]),
    /// Rows · columns, each within [`crate::gemm::DOT_TOLERANCE`] of `dot_ref`, each column
    /// the same bits whatever else is computed with it.
    pub rows: RowKernel,
    /// The reference quantizer.
    pub quantize_ref: fn(&[f32], &mut [u8]),
    /// The reference dequantizer.
    pub dequantize_ref: fn(&[u8], &mut [f32]),
    /// The reference dot product.
    pub dot_ref: fn(&[u8], &Columns<'_>, usize) -> f32,
    /// The first non-finite value of whole blocks, or `None`.
    pub first_non_finite: fn(&[u8]) -> Option<usize>,
    /// Whether `rows` reads a matrix's packed tiles ([`crate::gemm::Packed`]) when it has
    /// them (same bits as without); `false` means packing would only cost memory.
    pub packs: bool,
}

impl FormatKernels {
    /// The scalar references of format `F`.
    pub const fn reference<F: BlockFormat>() -> FormatKernels {
        FormatKernels {
            ty: F::TYPE,
            activation: F::ACTIVATION,
            quantize: F::quantize_ref,
            dequantize: F::dequantize_ref,
            rows: rows_ref::<F>,
            quantize_ref: F::quantize_ref,
            dequantize_ref: F::dequantize_ref,
            dot_ref: F::dot_ref,
            first_non_finite: F::first_non_finite,
            packs: false,
        }
    }

    /// Values per block.
    pub fn block_len(&self) -> usize {
        self.ty.block_size() as usize
    }

    /// Bytes per block.
    pub fn block_bytes(&self) -> usize {
        self.ty.type_size() as usize
    }

    /// Bytes of a row of `cols` values (`cols` whole blocks).
    pub fn row_bytes(&self, cols: usize) -> usize {
        cols / self.block_len() * self.block_bytes()
    }
}

/// The scalar row kernel of format `F`: `F::dot_ref` for each row and column.
pub fn rows_ref<F: BlockFormat>(w: &Matrix<'_>, first: usize, x: &Columns<'_>, out: &mut [f32]) {
    let n = x.count();
    for (i, row_out) in out.chunks_exact_mut(n).enumerate() {
        for (c, o) in row_out.iter_mut().enumerate() {
            *o = F::dot_ref(w.row(first + i), x, c);
        }
    }
}

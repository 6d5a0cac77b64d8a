//! The block-format trait and the kernel-table row it produces.
//!
//! A weight format is one module: its block layout, a scalar reference for dequantizing
//! (equal to gguf-py's `gguf.quants.dequantize`, or to ggml's reference where gguf-py has
//! none) and for dotting a row with a prepared activation column, where its blocks keep
//! their floating-point scales (what may be NaN or infinite in a file), and the faster
//! kernels it has for each instruction set ([`BlockFormat::kernels`]). The table
//! ([`crate::FORMATS`]) has one row per format; [`crate::Kernels`] builds it for the CPU,
//! the product driver ([`crate::gemm`]) reaches kernels only through it, and the tests walk
//! it, so a new format is one module and one row, and every kernel test covers it.
//!
//! **Numerics.** A format's `dot_ref` *defines* its dot product, including the order in
//! which partial sums are added; its fast kernels give the same bits (the integer parts are
//! exact, and the floating-point steps follow the reference's order, fused multiply-adds
//! included), and each column's result never depends on what other columns are computed
//! beside it. The tests compare bits, never tolerances.

use dspark_gguf::GgmlType;
use half::f16;

use crate::columns::{Activation, Columns};
use crate::cpu::Detected;
use crate::matrix::{Matrix, Packed, RowKernel};

/// A floating-point field of a block: its byte offset in the block and its encoding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scale {
    /// An IEEE binary16 at this offset (non-finite: exponent bits all ones).
    F16(usize),
    /// An E8M0 exponent byte at this offset (MXFP4; `0xFF` is NaN).
    E8m0(usize),
    /// An IEEE binary16 spread over the top nibbles of the four little-endian u16 at this
    /// offset, its lowest nibble in the first (IQ1_M's block scale, `ggml-common.h`'s
    /// `iq1m_scale_t`): bits `4k..4k + 4` of the f16 are bits 12..16 of u16 k.
    F16Nibbles(usize),
}

impl Scale {
    /// Whether this field of `block` is NaN or infinite.
    pub fn is_non_finite(self, block: &[u8]) -> bool {
        match self {
            Scale::F16(at) => u16::from_le_bytes([block[at], block[at + 1]]) & 0x7C00 == 0x7C00,
            Scale::E8m0(at) => block[at] == 0xFF,
            Scale::F16Nibbles(at) => f16_from_nibbles(block, at) & 0x7C00 == 0x7C00,
        }
    }

    /// Writes the f16 `bits` into this field of `block` (for the f16 kinds; an E8M0 field
    /// takes `0xFF` for a non-finite pattern and `127` otherwise). The tests plant
    /// non-finite scales with it.
    pub fn set_f16_bits(self, block: &mut [u8], bits: u16) {
        match self {
            Scale::F16(at) => block[at..at + 2].copy_from_slice(&bits.to_le_bytes()),
            Scale::E8m0(at) => block[at] = if bits & 0x7C00 == 0x7C00 { 0xFF } else { 127 },
            Scale::F16Nibbles(at) => {
                for k in 0..4 {
                    let hi = &mut block[at + 2 * k + 1];
                    *hi = (*hi & 0x0F) | ((bits >> (4 * k)) as u8 & 0x0F) << 4;
                }
            }
        }
    }

    /// Sets this field of `block` to a finite value picked from `seed` (tests build random
    /// blocks with it): an f16 of magnitude 2^-14..2^-2, an exponent 2^-10..2^-1.
    pub fn set_finite(self, block: &mut [u8], seed: u64) {
        match self {
            Scale::F16(at) => {
                let exp = (seed % 13) as i32 - 14;
                let mant = 1.0 + ((seed >> 8) % 1024) as f32 / 1024.0;
                let sign = if (seed >> 20) & 1 == 1 { -1.0 } else { 1.0 };
                let v = f16::from_f32(sign * mant * 2f32.powi(exp));
                block[at..at + 2].copy_from_slice(&v.to_bits().to_le_bytes());
            }
            Scale::E8m0(at) => block[at] = 117 + (seed % 10) as u8,
            Scale::F16Nibbles(_) => {
                let mut plain = [0u8; 2];
                Scale::F16(0).set_finite(&mut plain, seed);
                self.set_f16_bits(block, u16::from_le_bytes(plain));
            }
        }
    }
}

/// The f16 bits of a [`Scale::F16Nibbles`] field at `at` of `block`.
pub fn f16_from_nibbles(block: &[u8], at: usize) -> u16 {
    (0..4).fold(0u16, |bits, k| {
        bits | u16::from(block[at + 2 * k + 1] >> 4) << (4 * k)
    })
}

/// The first value of the first block of `bytes` with a non-finite field among `scales`
/// (whole blocks of `ty`), or `None`.
pub fn first_non_finite_scale(ty: GgmlType, scales: &[Scale], bytes: &[u8]) -> Option<usize> {
    let (bl, bb) = (ty.block_size() as usize, ty.type_size() as usize);
    bytes
        .chunks_exact(bb)
        .position(|b| scales.iter().any(|s| s.is_non_finite(b)))
        .map(|block| block * bl)
}

/// Whole blocks of f32 values → a format's blocks (`(values, out)`).
pub type QuantizeFn = fn(&[f32], &mut [u8]);

/// A weight format: its GGUF type, what it dots with, and its scalar references.
pub trait BlockFormat: Sized {
    /// The GGUF type (block length and bytes come from `dspark_gguf`'s table).
    const TYPE: GgmlType;
    /// What a row of this format is multiplied with (ggml's `vec_dot_type`).
    const ACTIVATION: Activation;
    /// The floating-point fields of a block (empty for the plain types, which override
    /// [`BlockFormat::first_non_finite`]).
    const SCALES: &'static [Scale];
    /// Reference dequantization of whole blocks (gguf-py's values, bit for bit).
    fn dequantize_ref(q: &[u8], y: &mut [f32]);
    /// Reference dot product of one row with column `c` of `x` (prepared for
    /// [`BlockFormat::ACTIVATION`]); it defines the sum's order.
    fn dot_ref(row: &[u8], x: &Columns<'_>, c: usize) -> f32;
    /// Reference quantization of whole blocks, bit-exact with ggml / gguf-py, for the
    /// formats dspark writes (`None` for those it only reads).
    const QUANTIZE_REF: Option<QuantizeFn> = None;
    /// The index of the first value whose encoding is NaN or infinite (for a block format,
    /// the first value of the first block with a non-finite scale), or `None`.
    fn first_non_finite(bytes: &[u8]) -> Option<usize> {
        first_non_finite_scale(Self::TYPE, Self::SCALES, bytes)
    }
    /// The fastest kernels of this format for `cpu` (the references unless overridden).
    fn kernels(cpu: Detected) -> FormatKernels {
        let _ = cpu;
        FormatKernels::reference::<Self>()
    }
}

/// A one-row, one-column dot product.
pub type DotFn = fn(&[u8], &Columns<'_>, usize) -> f32;

/// Makes a packed copy of a matrix for a format's kernels, or `None` when the matrix has
/// nothing worth packing; fails, without allocating, if the memory cannot be reserved.
pub type PackFn = fn(&Matrix<'_>) -> Result<Option<Packed>, std::collections::TryReserveError>;

/// One row of the kernel table: a format's kernels for one CPU, with its references beside
/// them for the tests.
#[derive(Clone, Copy, Debug)]
pub struct FormatKernels {
    /// The GGUF type.
    pub ty: GgmlType,
    /// What rows dot with.
    pub activation: Activation,
    /// The floating-point fields of a block.
    pub scales: &'static [Scale],
    /// Quantization (the same bytes as `quantize_ref`), for the formats dspark writes.
    pub quantize: Option<QuantizeFn>,
    /// Dequantization (the same values as `dequantize_ref`).
    pub dequantize: fn(&[u8], &mut [f32]),
    /// Rows · columns, each the bits of `dot_ref`, each column the same bits whatever else
    /// is computed with it.
    pub rows: RowKernel,
    /// The reference quantizer, for the formats dspark writes.
    pub quantize_ref: Option<QuantizeFn>,
    /// The reference dequantizer.
    pub dequantize_ref: fn(&[u8], &mut [f32]),
    /// The reference dot product.
    pub dot_ref: fn(&[u8], &Columns<'_>, usize) -> f32,
    /// The first non-finite value of whole blocks, or `None`.
    pub first_non_finite: fn(&[u8]) -> Option<usize>,
    /// Makes the packed copy `rows` reads when a matrix has one (same bits as without);
    /// `None`: this format's kernels read the file's layout only.
    pub pack: Option<PackFn>,
    /// Whether only `own_rows` reads the packed copy (the llama.cpp orders read the file's
    /// layout on this CPU): then only matrices whose products take the own order (a
    /// drafter's, and the LM head it borrows) are worth packing.
    pub pack_own_only: bool,
    /// Rows · columns in the order of llama.cpp's prompt products ([`crate::tiled`]), the
    /// bits of `prompt_dot_ref`; `None` where a prompt's products take `rows`.
    pub prompt_rows: Option<RowKernel>,
    /// The reference of `prompt_rows`.
    pub prompt_dot_ref: Option<DotFn>,
    /// llama.cpp re-lays this format's matrices whose row count is a multiple of this
    /// (0: none) at load on this CPU, unless they are [`Matrix::not_relaid`]; those keep
    /// its re-laid kernels in prompts too, so `prompt_rows` is not for them.
    pub relaid_rows: usize,
    /// For the formats whose `rows` sum in the order of llama.cpp's re-laid kernels: rows
    /// · columns in the order of its `vec_dot` (the bits of `vec_dot_ref`), which the
    /// matrices it does not re-lay take in decode and verify steps (and in prompts where
    /// no prompt kernel applies). `None`: `rows` serves every matrix.
    pub vec_rows: Option<RowKernel>,
    /// The reference of `vec_rows`.
    pub vec_dot_ref: Option<DotFn>,
    /// Rows · columns of a prompt's plain (not per-expert) product from two columns on,
    /// for a matrix that is not re-laid, where llama.cpp's llamafile `tinyBLAS` runs it in
    /// another order than `vec_dot` (IQ4_NL); the bits of `sgemm_dot_ref`.
    pub sgemm_rows: Option<RowKernel>,
    /// The reference of `sgemm_rows`.
    pub sgemm_dot_ref: Option<DotFn>,
    /// Rows · columns of a prompt's forward with a re-laid matrix (more than three
    /// columns): columns in whole groups of four by `relaid_prompt_dot_ref`, the rest by
    /// `dot_ref`.
    pub relaid_prompt_rows: Option<RowKernel>,
    /// The reference of `relaid_prompt_rows`' grouped columns.
    pub relaid_prompt_dot_ref: Option<DotFn>,
    /// For F32 and F16: llama.cpp runs a plain product of two columns or more through
    /// llamafile's `tinyBLAS` (the order of `rows`) when the matrix's rows are a multiple of
    /// 4 and its columns of this; every other product (one column, other shapes, every
    /// per-expert product) takes `vec_rows`. So do dspark's: decode and verify steps take
    /// `vec_rows` (a verify of n columns is n steps), a prompt's products take `rows` where
    /// llama.cpp's do. 0: the rules of `relaid_rows` decide instead.
    pub tinyblas_cols: usize,
    /// Rows · columns in dspark's own order, for products whose bits need not be
    /// llama.cpp's (a drafter's: its proposals decide speed, never the output), on a matrix
    /// with its packed copy: the fastest order this CPU's tiles allow, the bits of
    /// `own_dot_ref`. `None`: such products take the llama.cpp orders too
    /// ([`FormatKernels::own_rows_for`]).
    pub own_rows: Option<RowKernel>,
    /// The reference of `own_rows`.
    pub own_dot_ref: Option<DotFn>,
}

impl FormatKernels {
    /// The scalar references of format `F`.
    pub const fn reference<F: BlockFormat>() -> FormatKernels {
        FormatKernels {
            ty: F::TYPE,
            activation: F::ACTIVATION,
            scales: F::SCALES,
            quantize: F::QUANTIZE_REF,
            dequantize: F::dequantize_ref,
            rows: rows_ref::<F>,
            quantize_ref: F::QUANTIZE_REF,
            dequantize_ref: F::dequantize_ref,
            dot_ref: F::dot_ref,
            first_non_finite: F::first_non_finite,
            pack: None,
            pack_own_only: false,
            prompt_rows: None,
            prompt_dot_ref: None,
            relaid_rows: 0,
            vec_rows: None,
            vec_dot_ref: None,
            sgemm_rows: None,
            sgemm_dot_ref: None,
            relaid_prompt_rows: None,
            relaid_prompt_dot_ref: None,
            tinyblas_cols: 0,
            own_rows: None,
            own_dot_ref: None,
        }
    }

    /// Whether llama.cpp's plain products of `w` take llamafile's `tinyBLAS`
    /// ([`FormatKernels::tinyblas_cols`]).
    pub fn tinyblas(&self, w: &Matrix<'_>) -> bool {
        self.tinyblas_cols > 0
            && w.rows.is_multiple_of(4)
            && w.cols.is_multiple_of(self.tinyblas_cols)
    }

    /// Whether llama.cpp re-lays `w` at load on this CPU ([`FormatKernels::relaid_rows`]).
    pub fn relaid(&self, w: &Matrix<'_>) -> bool {
        self.relaid_rows > 0 && w.relayable() && w.rows.is_multiple_of(self.relaid_rows)
    }

    /// The row kernel of `w`'s one-column products (decode and verify steps): `rows`, or
    /// `vec_rows` where llama.cpp does not re-lay `w` (F32 and F16: always `vec_rows`).
    pub fn step_rows(&self, w: &Matrix<'_>) -> RowKernel {
        match self.vec_rows {
            Some(k) if self.tinyblas_cols > 0 || !self.relaid(w) => k,
            _ => self.rows,
        }
    }

    /// Whether the kernels of a matrix, re-laid by llama.cpp or not as `relaid` says, read
    /// its packed copy: the re-laid order's kernels do, `vec_rows` never.
    pub fn reads_packed(&self, relaid: bool) -> bool {
        relaid || self.vec_rows.is_none()
    }

    /// The reference dot product of [`FormatKernels::step_rows`] for `w`.
    pub fn step_dot_ref(&self, w: &Matrix<'_>) -> DotFn {
        match self.vec_dot_ref {
            Some(d) if self.tinyblas_cols > 0 || !self.relaid(w) => d,
            _ => self.dot_ref,
        }
    }

    /// The row kernel for `w` in a plain product of `n` columns, `prompt` when the forward
    /// is a prompt's (see [`crate::tiled`]).
    pub fn rows_for(&self, w: &Matrix<'_>, n: usize, prompt: bool) -> RowKernel {
        let step = self.step_rows(w);
        if !prompt {
            return step;
        }
        if self.tinyblas_cols > 0 {
            return if n >= 2 && self.tinyblas(w) {
                self.rows
            } else {
                step
            };
        }
        if self.relaid(w) {
            // llama.cpp's re-laid kernels: grouped columns from four on.
            return match self.relaid_prompt_rows {
                Some(k) if n > 3 => k,
                _ => step,
            };
        }
        match (self.prompt_rows, self.sgemm_rows) {
            (Some(k), _) if n >= crate::tiled::MIN_COLUMNS => k,
            (_, Some(k)) if n >= 2 => k,
            _ => step,
        }
    }

    /// The row kernel for `w` in a per-expert product of `n` routed tokens (llama.cpp's
    /// `mul_mat_id`, which has no `tinyBLAS` path), `prompt` as for
    /// [`FormatKernels::rows_for`].
    pub fn routed_rows_for(&self, w: &Matrix<'_>, n: usize, prompt: bool) -> RowKernel {
        if let (Some(k), true) = (self.vec_rows, self.tinyblas_cols > 0) {
            return k;
        }
        match self.prompt_rows {
            Some(k) if prompt && n >= crate::tiled::MIN_COLUMNS && !self.relaid(w) => k,
            _ => self.step_rows(w),
        }
    }

    /// The row kernel of `w` in dspark's own order ([`FormatKernels::own_rows`]), where
    /// this CPU has one and `w` has its packed copy; `None`: the llama.cpp orders apply.
    /// So a product's bits in the own order depend on the matrix's layout (packed or not,
    /// decided once per file at load) and the CPU, as well as its inputs.
    pub fn own_rows_for(&self, w: &Matrix<'_>) -> Option<RowKernel> {
        self.own_rows.filter(|_| w.packed().is_some())
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

    /// Arbitrary valid blocks for `values` values (whole blocks), the same for the same
    /// seed: random bytes with every scale set finite and small ([`Scale::set_finite`]);
    /// every other bit pattern of a block is a valid encoding. Plain formats get values
    /// of magnitude below 2 instead. For tests, benchmarks and synthetic models.
    pub fn sample(&self, values: usize, seed: u64) -> Vec<u8> {
        let mut state = seed ^ 0x9E37_79B9_7F4A_7C15;
        let mut next = move || {
            // SplitMix64.
            state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        };
        let mut q = vec![0u8; self.row_bytes(values)];
        if self.block_len() == 1 {
            let v: Vec<f32> = (0..values)
                .map(|_| (next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0)
                .collect();
            let quantize = self.quantize_ref.expect("plain formats have an encoder");
            quantize(&v, &mut q);
            return q;
        }
        for chunk in q.chunks_mut(8) {
            let r = next().to_le_bytes();
            chunk.copy_from_slice(&r[..chunk.len()]);
        }
        for block in q.chunks_exact_mut(self.block_bytes()) {
            for s in self.scales {
                s.set_finite(block, next());
            }
        }
        q
    }
}

/// The scalar row kernel of format `F`: `F::dot_ref` for each row and column.
pub fn rows_ref<F: BlockFormat>(w: &Matrix<'_>, first: usize, x: &Columns<'_>, out: &mut [f32]) {
    rows_by_dot(w, first, x, out, F::dot_ref)
}

/// A row kernel from a one-row, one-column dot product: `dot` for each row and column.
pub fn rows_by_dot(
    w: &Matrix<'_>,
    first: usize,
    x: &Columns<'_>,
    out: &mut [f32],
    dot: impl Fn(&[u8], &Columns<'_>, usize) -> f32,
) {
    let n = x.count();
    for (i, row_out) in out.chunks_exact_mut(n).enumerate() {
        let row = w.row(first + i);
        for (c, o) in row_out.iter_mut().enumerate() {
            *o = dot(row, x, c);
        }
    }
}

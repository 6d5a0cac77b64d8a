//! Q4_0: blocks of 32 values stored as an f16 scale `d` and 32 4-bit quants (18 bytes);
//! value `j` is `d · (q_j − 8)`.
//!
//! - Layout (`block_q4_0`, `ggml/src/ggml-common.h`): `d`, then 16 bytes whose low nibbles
//!   are quants 0..16 and high nibbles quants 16..32.
//! - Dequantization (`dequantize_row_q4_0` in `ggml/src/ggml-quants.c`; gguf-py's
//!   `Q4_0.dequantize_blocks`, equal bit for bit): `(q − 8) · d` in f32.
//! - `vec_dot_type`: Q8_0 (`type_traits_cpu` in `ggml/src/ggml-cpu/ggml-cpu.c`).
//! - Summation order: `legacy.rs`'s, per block `acc = fma(d_w · d_x, Σ (q_w − 8)
//!   q_x, acc)`, where llama.cpp re-lays the matrix; elsewhere its `vec_dot`'s one set
//!   of eight lanes (`legacy::lanes_ref`).
//! - Kernels (`q4_0/x86_64.rs`): packed tiles of 16 rows (read by an AVX2 kernel in halves
//!   of eight rows and by an AVX-512 VNNI one), the file's layout (AVX2, eight rows per
//!   register) for rows outside whole tiles, all multiplying the raw nibbles (`q_w`,
//!   unsigned) and subtracting `8 · Σ q_x`. llama.cpp re-lays Q4_0 for AVX2 too
//!   (`repack.cpp`, 8 rows interleaved); this layout is dspark's own.

use dspark_gguf::GgmlType;

use crate::columns::{Activation, Columns};
use crate::cpu::Detected;
use crate::format::{BlockFormat, FormatKernels, Scale};
use crate::legacy::{f16_at, nibbles, Runs32, RUN};

/// Values per block (`QK4_0` in `ggml-common.h`).
pub const QK4_0: usize = 32;
/// Bytes per block: f16 `d`, 16 bytes of nibbles.
pub const BLOCK_BYTES: usize = 18;

/// One Q4_0 block as laid out on disk.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockQ4_0 {
    /// Scale, IEEE binary16 bits (little-endian).
    pub d: [u8; 2],
    /// Quants: byte j holds quant j (low nibble) and quant j + 16 (high nibble).
    pub qs: [u8; QK4_0 / 2],
}
const _: () = assert!(std::mem::size_of::<BlockQ4_0>() == BLOCK_BYTES);

/// Dequantizes `q` (18 bytes per block) into `y`: `y = (q − 8) · d`.
///
/// # Panics
/// If the lengths do not match.
pub fn dequantize_ref(q: &[u8], y: &mut [f32]) {
    assert_eq!(q.len() % BLOCK_BYTES, 0, "Q4_0 input must be whole blocks");
    assert_eq!(y.len(), q.len() / BLOCK_BYTES * QK4_0, "Q4_0 output size");
    for (qb, yb) in q.chunks_exact(BLOCK_BYTES).zip(y.chunks_exact_mut(QK4_0)) {
        let d = f16_at(qb, 0);
        for (o, v) in yb.iter_mut().zip(nibbles(&qb[2..])) {
            *o = (i32::from(v) - 8) as f32 * d;
        }
    }
}

/// The Q4_0 format.
pub struct Q4_0;

impl Runs32 for Q4_0 {
    const BLOCK_BYTES: usize = BLOCK_BYTES;
    fn scale(block: &[u8]) -> f32 {
        f16_at(block, 0)
    }
    fn values(block: &[u8], _sub: usize) -> [i32; RUN] {
        nibbles(&block[2..]).map(|v| i32::from(v) - 8)
    }
}

impl BlockFormat for Q4_0 {
    const TYPE: GgmlType = GgmlType::Q4_0;
    const ACTIVATION: Activation = Activation::Q8_0;
    const SCALES: &'static [Scale] = &[Scale::F16(0)];

    fn dequantize_ref(q: &[u8], y: &mut [f32]) {
        dequantize_ref(q, y)
    }

    /// `legacy.rs`'s order: per block `acc = fma(d_w · d_x, Σ (q_w − 8) q_x, acc)`.
    fn dot_ref(row: &[u8], x: &Columns<'_>, c: usize) -> f32 {
        crate::legacy::dot_ref::<Q4_0>(row, x, c)
    }

    fn kernels(cpu: Detected) -> FormatKernels {
        crate::legacy::kernels::<Q4_0>(cpu)
    }
}

#[cfg(target_arch = "x86_64")]
mod x86_64;

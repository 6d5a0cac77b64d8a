//! Q4_1: blocks of 32 values stored as an f16 scale `d`, an f16 min `m` and 32 unsigned
//! 4-bit quants (20 bytes); value `j` is `d · q_j + m`.
//!
//! - Layout (`block_q4_1`, `ggml/src/ggml-common.h`): `d`, `m`, then 16 bytes whose low
//!   nibbles are quants 0..16 and high nibbles quants 16..32.
//! - Dequantization (`dequantize_row_q4_1` in `ggml/src/ggml-quants.c`; gguf-py's
//!   `Q4_1.dequantize_blocks`, which this equals bit for bit): `d · q` rounded to f32,
//!   then `+ m` rounded again (no fused multiply-add).
//! - `vec_dot_type`: Q8_1 (`type_traits_cpu` in `ggml/src/ggml-cpu/ggml-cpu.c`): a
//!   block's dot is `d_w · d_x · Σ q_w q_x + m_w · s_x`, `s_x` the Q8_1 block's stored
//!   `d_x · Σ q_x` (`ggml_vec_dot_q4_1_q8_1`, `ggml/src/ggml-cpu/arch/x86/quants.c`).
//! - Summation order: `legacy.rs`'s — per block `acc = fma(d_w · d_x, isum, acc)`
//!   and `macc = fma(m_w, s_x, macc)`, the result `acc + macc`.
//! - Kernels (`q4_1/x86_64.rs`): packed tiles of 16 rows (read by an AVX2 kernel in halves
//!   of eight rows and by an AVX-512 VNNI one), the file's layout (AVX2, eight rows per
//!   register) for rows outside whole tiles, all multiplying the unsigned quants as they
//!   are (`vpdpbusd` on AVX-512).

use dspark_gguf::GgmlType;

use crate::columns::{Activation, Columns};
use crate::cpu::Detected;
use crate::format::{BlockFormat, FormatKernels, Scale};
use crate::legacy::{f16_at, nibbles, Runs32, RUN};

/// Values per block (`QK4_1` in `ggml-common.h`).
pub const QK4_1: usize = 32;
/// Bytes per block: f16 `d`, f16 `m`, 16 bytes of nibbles.
pub const BLOCK_BYTES: usize = 20;

/// One Q4_1 block as laid out on disk.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockQ4_1 {
    /// Scale, IEEE binary16 bits (little-endian).
    pub d: [u8; 2],
    /// Min, IEEE binary16 bits (little-endian).
    pub m: [u8; 2],
    /// Quants: byte j holds quant j (low nibble) and quant j + 16 (high nibble).
    pub qs: [u8; QK4_1 / 2],
}
const _: () = assert!(std::mem::size_of::<BlockQ4_1>() == BLOCK_BYTES);

/// Dequantizes `q` (20 bytes per block) into `y`: `y = d · q + m`, two f32 roundings.
///
/// # Panics
/// If the lengths do not match.
pub fn dequantize_ref(q: &[u8], y: &mut [f32]) {
    assert_eq!(q.len() % BLOCK_BYTES, 0, "Q4_1 input must be whole blocks");
    assert_eq!(y.len(), q.len() / BLOCK_BYTES * QK4_1, "Q4_1 output size");
    for (qb, yb) in q.chunks_exact(BLOCK_BYTES).zip(y.chunks_exact_mut(QK4_1)) {
        let (d, m) = (f16_at(qb, 0), f16_at(qb, 2));
        for (o, v) in yb.iter_mut().zip(nibbles(&qb[4..])) {
            *o = f32::from(v) * d + m;
        }
    }
}

/// The Q4_1 format.
pub struct Q4_1;

impl Runs32 for Q4_1 {
    const LANES: bool = true;
    const BLOCK_BYTES: usize = BLOCK_BYTES;
    const HAS_MIN: bool = true;
    fn scale(block: &[u8]) -> f32 {
        f16_at(block, 0)
    }
    fn min(block: &[u8]) -> f32 {
        f16_at(block, 2)
    }
    fn values(block: &[u8], _sub: usize) -> [i32; RUN] {
        nibbles(&block[4..]).map(i32::from)
    }
}

impl BlockFormat for Q4_1 {
    const TYPE: GgmlType = GgmlType::Q4_1;
    const ACTIVATION: Activation = Activation::Q8_1;
    const SCALES: &'static [Scale] = &[Scale::F16(0), Scale::F16(2)];

    fn dequantize_ref(q: &[u8], y: &mut [f32]) {
        dequantize_ref(q, y)
    }

    /// `legacy.rs`'s order: per block `acc = fma(d_w · d_x, Σ q_w q_x, acc)` and
    /// `macc = fma(m_w, s_x, macc)`; the result is `acc + macc`.
    fn dot_ref(row: &[u8], x: &Columns<'_>, c: usize) -> f32 {
        crate::legacy::dot_ref::<Q4_1>(row, x, c)
    }

    fn kernels(cpu: Detected) -> FormatKernels {
        crate::legacy::kernels::<Q4_1>(cpu)
    }
}

#[cfg(target_arch = "x86_64")]
mod x86_64;

//! Q5_0: blocks of 32 values stored as an f16 scale `d`, 32 fifth bits and 32 4-bit
//! quants (22 bytes); value `j` is `d · (q_j − 16)` with `q_j` the 5-bit quant.
//!
//! - Layout (`block_q5_0`, `ggml/src/ggml-common.h`): `d`, `qh` (a little-endian u32: bit
//!   j is bit 4 of quant j), then 16 bytes whose low nibbles are quants 0..16 and high
//!   nibbles quants 16..32.
//! - Dequantization (`dequantize_row_q5_0` in `ggml/src/ggml-quants.c`; gguf-py's
//!   `Q5_0.dequantize_blocks`, equal bit for bit): `(q − 16) · d` in f32.
//! - `vec_dot_type`: Q8_0 (`type_traits_cpu` in `ggml/src/ggml-cpu/ggml-cpu.c`).
//! - Summation order: `legacy.rs`'s, per block `acc = fma(d_w · d_x, Σ (q_w − 16)
//!   q_x, acc)`.
//! - Kernels (`q5_0/x86_64.rs`): packed tiles of 16 rows (read by an AVX2 kernel in halves
//!   of eight rows and by an AVX-512 VNNI one), the file's layout (AVX2, eight rows per
//!   register) for rows outside whole tiles, all multiplying the raw 5-bit quants
//!   (unsigned) and subtracting `16 · Σ q_x`.

use dspark_gguf::GgmlType;

use crate::columns::{Activation, Columns};
use crate::cpu::Detected;
use crate::format::{BlockFormat, FormatKernels, Scale};
use crate::legacy::{f16_at, five_bits, Runs32, RUN};

/// Values per block (`QK5_0` in `ggml-common.h`).
pub const QK5_0: usize = 32;
/// Bytes per block: f16 `d`, 4 bytes of fifth bits, 16 bytes of nibbles.
pub const BLOCK_BYTES: usize = 22;

/// One Q5_0 block as laid out on disk.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockQ5_0 {
    /// Scale, IEEE binary16 bits (little-endian).
    pub d: [u8; 2],
    /// Fifth bits: bit j of this little-endian u32 is bit 4 of quant j.
    pub qh: [u8; 4],
    /// Low four bits: byte j holds quant j (low nibble) and quant j + 16 (high nibble).
    pub qs: [u8; QK5_0 / 2],
}
const _: () = assert!(std::mem::size_of::<BlockQ5_0>() == BLOCK_BYTES);

/// Dequantizes `q` (22 bytes per block) into `y`: `y = (q − 16) · d`.
///
/// # Panics
/// If the lengths do not match.
pub fn dequantize_ref(q: &[u8], y: &mut [f32]) {
    assert_eq!(q.len() % BLOCK_BYTES, 0, "Q5_0 input must be whole blocks");
    assert_eq!(y.len(), q.len() / BLOCK_BYTES * QK5_0, "Q5_0 output size");
    for (qb, yb) in q.chunks_exact(BLOCK_BYTES).zip(y.chunks_exact_mut(QK5_0)) {
        let d = f16_at(qb, 0);
        for (o, v) in yb.iter_mut().zip(five_bits(&qb[2..6], &qb[6..])) {
            *o = (i32::from(v) - 16) as f32 * d;
        }
    }
}

/// The Q5_0 format.
pub struct Q5_0;

impl Runs32 for Q5_0 {
    const LANES: bool = true;
    const BLOCK_BYTES: usize = BLOCK_BYTES;
    fn scale(block: &[u8]) -> f32 {
        f16_at(block, 0)
    }
    fn values(block: &[u8], _sub: usize) -> [i32; RUN] {
        five_bits(&block[2..6], &block[6..]).map(|v| i32::from(v) - 16)
    }
}

impl BlockFormat for Q5_0 {
    const TYPE: GgmlType = GgmlType::Q5_0;
    const ACTIVATION: Activation = Activation::Q8_0;
    const SCALES: &'static [Scale] = &[Scale::F16(0)];

    fn dequantize_ref(q: &[u8], y: &mut [f32]) {
        dequantize_ref(q, y)
    }

    /// `legacy.rs`'s order: per block `acc = fma(d_w · d_x, Σ (q_w − 16) q_x, acc)`.
    fn dot_ref(row: &[u8], x: &Columns<'_>, c: usize) -> f32 {
        crate::legacy::dot_ref::<Q5_0>(row, x, c)
    }

    fn kernels(cpu: Detected) -> FormatKernels {
        crate::legacy::kernels::<Q5_0>(cpu)
    }
}

#[cfg(target_arch = "x86_64")]
mod x86_64;

//! MXFP4 (OCP microscaling FP4): blocks of 32 values stored as an E8M0 exponent byte
//! `e` and 32 4-bit E2M1 codes (17 bytes); value `j` is `2^(e − 128) · KVALUES[i_j]`,
//! where [`KVALUES`] holds the E2M1 values doubled (0, ±0.5 … ±6 → 0, ±1 … ±12) and the
//! scale is halved to match.
//!
//! - Layout (`block_mxfp4`, `ggml/src/ggml-common.h`): `e`, then 16 bytes whose low
//!   nibbles are codes 0..16 and high nibbles codes 16..32; the table is `kvalues_mxfp4`
//!   in the same file.
//! - Scale: [`e8m0_half`] (`ggml_e8m0_to_fp32_half`, `ggml/src/ggml-impl.h`, and gguf-py's
//!   `MXFP4.e8m0_to_fp32_half`): `e < 2` gives the subnormals 2^-128 and 2^-127; otherwise
//!   the f32 with exponent field `e − 1`. NaN is not special-cased: `e = 0xFF` reads as
//!   2^127 (the non-finite check of [`crate::Scale::E8m0`] still flags it).
//! - Dequantization (`dequantize_row_mxfp4` in `ggml/src/ggml-quants.c`; gguf-py's
//!   `MXFP4.dequantize_blocks`, equal bit for bit): `d · KVALUES[i]` in f32.
//! - `vec_dot_type`: Q8_0 (`type_traits_cpu` in `ggml/src/ggml-cpu/ggml-cpu.c`).
//! - Summation order: `legacy.rs`'s, per block `acc = fma(d_w · d_x, Σ KVALUES[i]
//!   q_x, acc)` with `d_w = e8m0_half(e)`, where llama.cpp re-lays the matrix; elsewhere
//!   (`--no-repack`, 3-D tensors in plain products) its `vec_dot`'s two sets of lanes
//!   (`legacy::lanes_ref`).
//! - Kernels (`mxfp4/x86_64.rs`): packed tiles of 16 rows (read by an AVX2 kernel in halves
//!   of eight rows and by an AVX-512 VNNI one), the file's layout (AVX2, eight rows per
//!   register) for rows outside whole tiles, all multiplying `KVALUES + 12` (unsigned
//!   codes, 0..=24) and subtracting `12 · Σ q_x`. llama.cpp re-lays MXFP4 for AVX2 too
//!   (`repack.cpp`).

use dspark_gguf::GgmlType;

use crate::columns::{Activation, Columns};
use crate::cpu::Detected;
use crate::format::{BlockFormat, FormatKernels, Scale};
use crate::legacy::{nibbles, Runs32, RUN};

/// Values per block (`QK_MXFP4` in `ggml-common.h`).
pub const QK_MXFP4: usize = 32;
/// Bytes per block: the E8M0 exponent, 16 bytes of nibble codes.
pub const BLOCK_BYTES: usize = 17;

/// E2M1 values doubled, by code (`kvalues_mxfp4` in `ggml-common.h`).
pub const KVALUES: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

/// One MXFP4 block as laid out on disk.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockMxfp4 {
    /// Shared exponent (E8M0).
    pub e: u8,
    /// Codes: byte j holds code j (low nibble) and code j + 16 (high nibble).
    pub qs: [u8; QK_MXFP4 / 2],
}
const _: () = assert!(std::mem::size_of::<BlockMxfp4>() == BLOCK_BYTES);

/// Half the E8M0 value of `e`, as ggml computes it: `2^(e − 128)` (subnormal for `e < 2`;
/// `0xFF` gives 2^127, not NaN).
pub fn e8m0_half(e: u8) -> f32 {
    let bits = if e < 2 {
        0x0020_0000u32 << e
    } else {
        u32::from(e - 1) << 23
    };
    f32::from_bits(bits)
}

/// Dequantizes `q` (17 bytes per block) into `y`: `y = e8m0_half(e) · KVALUES[i]`.
///
/// # Panics
/// If the lengths do not match.
pub fn dequantize_ref(q: &[u8], y: &mut [f32]) {
    assert_eq!(q.len() % BLOCK_BYTES, 0, "MXFP4 input must be whole blocks");
    assert_eq!(
        y.len(),
        q.len() / BLOCK_BYTES * QK_MXFP4,
        "MXFP4 output size"
    );
    for (qb, yb) in q
        .chunks_exact(BLOCK_BYTES)
        .zip(y.chunks_exact_mut(QK_MXFP4))
    {
        let d = e8m0_half(qb[0]);
        for (o, i) in yb.iter_mut().zip(nibbles(&qb[1..])) {
            *o = d * f32::from(KVALUES[usize::from(i)]);
        }
    }
}

/// The MXFP4 format.
pub struct Mxfp4;

impl Runs32 for Mxfp4 {
    const BLOCK_BYTES: usize = BLOCK_BYTES;
    const PAIRED: bool = true;
    fn scale(block: &[u8]) -> f32 {
        e8m0_half(block[0])
    }
    fn values(block: &[u8], _sub: usize) -> [i32; RUN] {
        nibbles(&block[1..]).map(|i| i32::from(KVALUES[usize::from(i)]))
    }
}

impl BlockFormat for Mxfp4 {
    const TYPE: GgmlType = GgmlType::MXFP4;
    const ACTIVATION: Activation = Activation::Q8_0;
    const SCALES: &'static [Scale] = &[Scale::E8m0(0)];

    fn dequantize_ref(q: &[u8], y: &mut [f32]) {
        dequantize_ref(q, y)
    }

    /// `legacy.rs`'s order: per block `acc = fma(e8m0_half(e) · d_x, Σ KVALUES[i]
    /// q_x, acc)`.
    fn dot_ref(row: &[u8], x: &Columns<'_>, c: usize) -> f32 {
        crate::legacy::dot_ref::<Mxfp4>(row, x, c)
    }

    fn kernels(cpu: Detected) -> FormatKernels {
        crate::legacy::kernels::<Mxfp4>(cpu)
    }
}

#[cfg(target_arch = "x86_64")]
mod x86_64;

#[cfg(test)]
mod tests {
    use super::e8m0_half;

    #[test]
    fn e8m0_half_is_ggml_s() {
        assert_eq!(e8m0_half(0).to_bits(), 0x0020_0000);
        assert_eq!(e8m0_half(1).to_bits(), 0x0040_0000);
        assert_eq!(e8m0_half(2), 2f32.powi(-126));
        assert_eq!(e8m0_half(127), 0.5);
        assert_eq!(e8m0_half(128), 1.0);
        assert_eq!(e8m0_half(0xFE), 2f32.powi(126));
        assert_eq!(e8m0_half(0xFF), 2f32.powi(127));
    }
}

//! IQ4_NL: blocks of 32 values stored as an f16 scale `d` and 32 4-bit indices into a
//! fixed non-linear table of 16 signed values (18 bytes); value `j` is `d ·
//! KVALUES[i_j]`.
//!
//! - Layout (`block_iq4_nl`, `ggml/src/ggml-common.h`): `d`, then 16 bytes whose low
//!   nibbles are indices 0..16 and high nibbles indices 16..32; the table is
//!   `kvalues_iq4nl` in the same file ([`KVALUES`]).
//! - Dequantization (`dequantize_row_iq4_nl` in `ggml/src/ggml-quants.c`; gguf-py's
//!   `IQ4_NL.dequantize_blocks`, equal bit for bit): `d · KVALUES[i]` in f32.
//! - `vec_dot_type`: Q8_0 (`type_traits_cpu` in `ggml/src/ggml-cpu/ggml-cpu.c`).
//! - Summation order: `legacy.rs`'s, per block `acc = fma(d_w · d_x, Σ KVALUES[i]
//!   q_x, acc)`, where llama.cpp re-lays the matrix; elsewhere its `vec_dot`'s two sets of
//!   lanes, and in a prompt's plain products `tinyBLAS`'s one (`legacy::lanes_ref`).
//! - Kernels (`iq4_nl/x86_64.rs`): AVX2 on the file's layout only (the table values reach
//!   -127, too wide for `vpmaddubsw` with an offset, so it multiplies `|q_x|` by the values
//!   with `q_x`'s sign, exact), AVX-512 VNNI on packed tiles of 16 rows (`KVALUES + 128` as
//!   unsigned codes, less `128 · Σ q_x`). llama.cpp re-lays IQ4_NL for AVX2 too (`repack.cpp`).

use dspark_gguf::GgmlType;

use crate::columns::{Activation, Columns};
use crate::cpu::Detected;
use crate::format::{BlockFormat, FormatKernels, Scale};
use crate::legacy::{f16_at, nibbles, Runs32, RUN};

/// Values per block (`QK4_NL` in `ggml-common.h`).
pub const QK4_NL: usize = 32;
/// Bytes per block: f16 `d`, 16 bytes of nibble indices.
pub const BLOCK_BYTES: usize = 18;

/// The 16 values an index selects (`kvalues_iq4nl` in `ggml-common.h`).
pub const KVALUES: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

/// One IQ4_NL block as laid out on disk.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockIq4Nl {
    /// Scale, IEEE binary16 bits (little-endian).
    pub d: [u8; 2],
    /// Indices: byte j holds index j (low nibble) and index j + 16 (high nibble).
    pub qs: [u8; QK4_NL / 2],
}
const _: () = assert!(std::mem::size_of::<BlockIq4Nl>() == BLOCK_BYTES);

/// Dequantizes `q` (18 bytes per block) into `y`: `y = d · KVALUES[i]`.
///
/// # Panics
/// If the lengths do not match.
pub fn dequantize_ref(q: &[u8], y: &mut [f32]) {
    assert_eq!(
        q.len() % BLOCK_BYTES,
        0,
        "IQ4_NL input must be whole blocks"
    );
    assert_eq!(
        y.len(),
        q.len() / BLOCK_BYTES * QK4_NL,
        "IQ4_NL output size"
    );
    for (qb, yb) in q.chunks_exact(BLOCK_BYTES).zip(y.chunks_exact_mut(QK4_NL)) {
        let d = f16_at(qb, 0);
        for (o, i) in yb.iter_mut().zip(nibbles(&qb[2..])) {
            *o = d * f32::from(KVALUES[usize::from(i)]);
        }
    }
}

/// The IQ4_NL format.
pub struct Iq4Nl;

impl Runs32 for Iq4Nl {
    const BLOCK_BYTES: usize = BLOCK_BYTES;
    const PAIRED: bool = true;
    const SGEMM: bool = true;
    fn scale(block: &[u8]) -> f32 {
        f16_at(block, 0)
    }
    fn values(block: &[u8], _sub: usize) -> [i32; RUN] {
        nibbles(&block[2..]).map(|i| i32::from(KVALUES[usize::from(i)]))
    }
}

impl BlockFormat for Iq4Nl {
    const TYPE: GgmlType = GgmlType::IQ4_NL;
    const ACTIVATION: Activation = Activation::Q8_0;
    const SCALES: &'static [Scale] = &[Scale::F16(0)];

    fn dequantize_ref(q: &[u8], y: &mut [f32]) {
        dequantize_ref(q, y)
    }

    /// `legacy.rs`'s order: per block `acc = fma(d_w · d_x, Σ KVALUES[i] q_x, acc)`.
    fn dot_ref(row: &[u8], x: &Columns<'_>, c: usize) -> f32 {
        crate::legacy::dot_ref::<Iq4Nl>(row, x, c)
    }

    fn kernels(cpu: Detected) -> FormatKernels {
        crate::legacy::kernels::<Iq4Nl>(cpu)
    }
}

#[cfg(target_arch = "x86_64")]
mod x86_64;

//! Q1_0: blocks of 128 values stored as an f16 scale `d` and 128 sign bits (18 bytes);
//! value `j` is `d` where bit `j` is set and `−d` where it is clear.
//!
//! - Layout (`block_q1_0`, `ggml/src/ggml-common.h`): `d`, then 16 bytes; value j is bit
//!   `j mod 8` of byte `j / 8`.
//! - Dequantization (`dequantize_row_q1_0` in `ggml/src/ggml-quants.c`): `d` or its
//!   negation (a sign flip, so a NaN scale keeps its payload). gguf-py 0.19.0 has no Q1_0
//!   dequantizer; the test below holds this one to a fixture made by ggml's own
//!   (`testdata/README.md`).
//! - `vec_dot_type`: Q8_0 (`type_traits_cpu` in `ggml/src/ggml-cpu/ggml-cpu.c`): a block
//!   meets four Q8_0 blocks, each 32 values a run (`ggml_vec_dot_q1_0_q8_0`,
//!   `ggml/src/ggml-cpu/quants.c`).
//! - Summation order: ggml's x86 `ggml_vec_dot_q1_0_q8_0` ([`Q1_0::dot_ref`]).
//! - Kernels: the scalar reference for now.

use dspark_gguf::GgmlType;

use crate::columns::{Activation, Columns};
use crate::cpu::Detected;
use crate::format::{BlockFormat, FormatKernels, Scale};
use crate::legacy::{f16_at, RUN};

/// Values per block (`QK1_0` in `ggml-common.h`).
pub const QK1_0: usize = 128;
/// Bytes per block: f16 `d`, 16 bytes of sign bits.
pub const BLOCK_BYTES: usize = 18;

/// One Q1_0 block as laid out on disk.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockQ1_0 {
    /// Scale, IEEE binary16 bits (little-endian).
    pub d: [u8; 2],
    /// Signs: value j is `+d` when bit `j mod 8` of byte `j / 8` is set, else `−d`.
    pub qs: [u8; QK1_0 / 8],
}
const _: () = assert!(std::mem::size_of::<BlockQ1_0>() == BLOCK_BYTES);

/// Whether value `j` of the block is positive.
fn bit(block: &[u8], j: usize) -> bool {
    (block[2 + j / 8] >> (j % 8)) & 1 == 1
}

/// Dequantizes `q` (18 bytes per block) into `y`: `d` where the bit is set, `−d` where
/// it is clear.
///
/// # Panics
/// If the lengths do not match.
pub fn dequantize_ref(q: &[u8], y: &mut [f32]) {
    assert_eq!(q.len() % BLOCK_BYTES, 0, "Q1_0 input must be whole blocks");
    assert_eq!(y.len(), q.len() / BLOCK_BYTES * QK1_0, "Q1_0 output size");
    for (qb, yb) in q.chunks_exact(BLOCK_BYTES).zip(y.chunks_exact_mut(QK1_0)) {
        let d = f16_at(qb, 0);
        for (j, o) in yb.iter_mut().enumerate() {
            *o = if bit(qb, j) { d } else { -d };
        }
    }
}

/// The Q1_0 format.
pub struct Q1_0;

impl BlockFormat for Q1_0 {
    const TYPE: GgmlType = GgmlType::Q1_0;
    const ACTIVATION: Activation = Activation::Q8_0;
    const SCALES: &'static [Scale] = &[Scale::F16(0)];

    fn dequantize_ref(q: &[u8], y: &mut [f32]) {
        dequantize_ref(q, y)
    }

    /// ggml's x86 order (`ggml_vec_dot_q1_0_q8_0`, `ggml-cpu/arch/x86/quants.c`): per block
    /// of 128, its four runs' eight exact lanes of `±q` (`crate::lanes::position_lanes`;
    /// a negative sign negates with an 8-bit wrap, as `(q ^ m) − m` does) scaled into one
    /// block accumulator — `d_x(0) · lanes` for the first run, `fma(d_x(k), lanes, ·)` for
    /// the next three — then `acc = fma(d_w, block, acc)` lane by lane;
    /// [`crate::lanes::hsum8`] at the end.
    fn dot_ref(row: &[u8], x: &Columns<'_>, c: usize) -> f32 {
        let (xd, xq) = x.q8(c);
        let mut acc = [0.0f32; 8];
        for (b, blk) in row.chunks_exact(BLOCK_BYTES).enumerate() {
            let mut block = [0.0f32; 8];
            for k in 0..QK1_0 / RUN {
                let j = (QK1_0 / RUN) * b + k;
                let q = &xq[RUN * j..RUN * (j + 1)];
                let lanes = crate::lanes::position_lanes(RUN, |i| {
                    let v = q[i];
                    i32::from(if bit(blk, RUN * k + i) {
                        v
                    } else {
                        v.wrapping_neg()
                    })
                });
                for (a, &l) in block.iter_mut().zip(&lanes) {
                    *a = if k == 0 {
                        xd[j] * l as f32
                    } else {
                        xd[j].mul_add(l as f32, *a)
                    };
                }
            }
            let d = f16_at(blk, 0);
            for (a, &v) in acc.iter_mut().zip(&block) {
                *a = d.mul_add(v, *a);
            }
        }
        crate::lanes::hsum8(acc)
    }

    fn kernels(cpu: Detected) -> FormatKernels {
        // The scalar reference (a kernel in ggml's lane order is still to be written).
        let _ = cpu;
        FormatKernels::reference::<Q1_0>()
    }
}

#[cfg(test)]
mod tests {
    /// Blocks from ggml and their values by ggml's `dequantize_row_q1_0` (see
    /// `testdata/README.md`): raw blocks, then the f32 values, little-endian.
    const BLOCKS: &[u8] = include_bytes!("../testdata/q1_0.blocks");
    const VALUES: &[u8] = include_bytes!("../testdata/q1_0.f32");

    #[test]
    fn dequantization_equals_ggml_s_on_the_fixture() {
        assert_eq!(BLOCKS.len() % super::BLOCK_BYTES, 0);
        let n = BLOCKS.len() / super::BLOCK_BYTES * super::QK1_0;
        assert_eq!(VALUES.len(), 4 * n);
        for k in [crate::Kernels::scalar()]
            .into_iter()
            .chain(crate::Kernels::avx2())
            .chain(crate::Kernels::avx512())
        {
            let f = k.format(dspark_gguf::GgmlType::Q1_0).unwrap();
            let mut y = vec![0.0f32; n];
            (f.dequantize)(BLOCKS, &mut y);
            for (i, (v, want)) in y.iter().zip(VALUES.chunks_exact(4)).enumerate() {
                let want = u32::from_le_bytes([want[0], want[1], want[2], want[3]]);
                assert_eq!(v.to_bits(), want, "{}: value {i}", k.isa);
            }
        }
    }
}

//! Q4_K: super-blocks of 256 values in eight sub-blocks of 32, each value a 4-bit quant
//! with a 6-bit scale and a 6-bit min per sub-block under two f16 super-block scales (144
//! bytes). Read only: dspark dequantizes and multiplies it, llama-quantize writes it.
//!
//! **Block** (`block_q4_K`, `ggml-common.h`): f16 `d`, f16 `dmin`, 12 bytes of packed
//! 6-bit scales and mins ([`crate::kquant::scale_min_k4`]), 128 bytes of quants. Bytes
//! `32j..32j + 32` of the quants hold sub-block `2j` in their low nibbles and sub-block
//! `2j + 1` in their high nibbles.
//!
//! **Dequantization** (`dequantize_row_q4_K`, `ggml-quants.c`; gguf-py's `Q4_K`,
//! `gguf/quants.py`, the same values): value `l` of sub-block `s` is
//! `(d · sc_s) · q - (dmin · m_s)`, each product rounded to f32, then the difference.
//!
//! **Dot** (`vec_dot_type` Q8_K, `ggml-cpu/ggml-cpu.c`): per super-block the exact
//! integers `isum = Σ_s sc_s · Σ_l q · x` and `msum = Σ_s m_s · (the two Q8_K sums of
//! sixteen of sub-block s)`, then the float steps of [`crate::kquant`] (`acc` and `accm`
//! fused per super-block, `acc - accm` at the end) — llama.cpp's x86 repacked Q4_K order.
//!
//! **Kernels** (`q4_k/x86_64.rs`): on a packed copy ([`pack`], made on AVX2 and AVX-512
//! machines alike), sixteen rows per tile in the lanes of registers, so the float steps
//! run for many rows at once and a super-block needs no horizontal sum: AVX2 (two halves
//! of eight rows, `vpmaddubsw` / `vpmaddwd`, up to four columns per pass) and AVX-512 VNNI
//! (`vpdpbusd` / `vpdpwssd`, up to eight columns per pass). Rows outside whole tiles, or a
//! matrix without its packed copy, take the AVX2 row kernel (a row at a time, its nibbles
//! unpacked once per group of four columns). All give `dot_ref`'s bits.

use dspark_gguf::GgmlType;

use crate::columns::{Activation, Columns};
use crate::cpu::Detected;
use crate::format::{BlockFormat, FormatKernels, Scale};
use crate::kquant::{f16_at, min_sum, scales_mins_k4, SuperAcc, K_SCALE_SIZE, QK_K};
use crate::matrix::{Matrix, Packed};

/// Bytes per super-block.
pub const BLOCK_BYTES: usize = 144;

/// One Q4_K super-block as laid out on disk.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockQ4K {
    /// Super-block scale of the sub-block scales, IEEE binary16 bits.
    pub d: [u8; 2],
    /// Super-block scale of the sub-block mins, IEEE binary16 bits.
    pub dmin: [u8; 2],
    /// Eight 6-bit scales and eight 6-bit mins, packed.
    pub scales: [u8; K_SCALE_SIZE],
    /// Quants, two per byte.
    pub qs: [u8; QK_K / 2],
}
const _: () = assert!(std::mem::size_of::<BlockQ4K>() == BLOCK_BYTES);

/// Offsets of the fields in a block.
const D: usize = 0;
const DMIN: usize = 2;
const SCALES: usize = 4;
const QS: usize = 16;

/// Quant `v` (0..256) of a block.
#[inline]
fn quant(b: &[u8], v: usize) -> u8 {
    let byte = b[QS + 32 * (v / 64) + v % 32];
    if (v / 32).is_multiple_of(2) {
        byte & 0xF
    } else {
        byte >> 4
    }
}

/// Dequantizes whole super-blocks (gguf-py's values, bit for bit).
///
/// # Panics
/// If the lengths do not match.
pub fn dequantize_ref(q: &[u8], y: &mut [f32]) {
    assert_eq!(q.len() % BLOCK_BYTES, 0, "Q4_K input must be whole blocks");
    assert_eq!(y.len(), q.len() / BLOCK_BYTES * QK_K, "Q4_K output size");
    for (b, yb) in q.chunks_exact(BLOCK_BYTES).zip(y.chunks_exact_mut(QK_K)) {
        let (d, dmin) = (f16_at(b, D), f16_at(b, DMIN));
        let (sc, m) = scales_mins_k4(&b[SCALES..QS]);
        for (v, o) in yb.iter_mut().enumerate() {
            let s = v / 32;
            let (ds, ms) = (d * f32::from(sc[s]), dmin * f32::from(m[s]));
            *o = ds * f32::from(quant(b, v)) - ms;
        }
    }
}

/// The exact integer sums of one super-block against one Q8_K block: `(isum, msum)`.
pub(crate) fn block_sums(b: &[u8], xq: &[i8], bsums: &[i16]) -> (i32, i32) {
    let (sc, m) = scales_mins_k4(&b[SCALES..QS]);
    let isum = (0..QK_K)
        .map(|v| i32::from(sc[v / 32]) * i32::from(quant(b, v)) * i32::from(xq[v]))
        .sum();
    (isum, min_sum(&m, 2, bsums))
}

/// The exact integer parts of ggml's x86 `vec_dot` of one super-block (`vec_dot_q4_K_q8_K`,
/// `ggml-cpu/arch/x86/quants.c`): eight lanes, lane `l` the sum over the sub-blocks `s`
/// of `sc_s · q · x` over their values `4l..4l + 4`, and four lanes of mins, lane `k` the
/// mins of sub-blocks `2k` and `2k + 1` times their Q8_K sums of 32.
pub(crate) fn vec_block_sums(b: &[u8], xq: &[i8], bsums: &[i16]) -> ([i32; 8], [i32; 4]) {
    let (sc, m) = scales_mins_k4(&b[SCALES..QS]);
    let lanes = crate::lanes::position_lanes(QK_K, |v| {
        i32::from(sc[v / 32]) * i32::from(quant(b, v)) * i32::from(xq[v])
    });
    let sub = |s: usize| i32::from(bsums[2 * s]) + i32::from(bsums[2 * s + 1]);
    let mins = std::array::from_fn(|k| {
        i32::from(m[2 * k]) * sub(2 * k) + i32::from(m[2 * k + 1]) * sub(2 * k + 1)
    });
    (lanes, mins)
}

/// The dot product in ggml's x86 `vec_dot` order, which llama.cpp runs for the Q4_K
/// matrices it does not re-lay (3-D tensors in plain products, rows not a multiple of 8,
/// `--no-repack`): per super-block the lanes of [`vec_block_sums`], `acc_l = fma(d_x ·
/// d, lane_l, acc_l)` and `accm_k = fma(−(d_x · dmin), mins_k, accm_k)`; the result is
/// `hsum8(acc) + ((accm_0 + accm_2) + (accm_1 + accm_3))`.
pub(crate) fn dot_vec_ref(row: &[u8], x: &Columns<'_>, c: usize) -> f32 {
    let (xd, xq) = x.q8(c);
    let bs = x.q8_bsums(c);
    let mut acc = crate::lanes::LaneAcc::default();
    let mut accm = [0.0f32; 4];
    for (i, b) in row.chunks_exact(BLOCK_BYTES).enumerate() {
        let (lanes, mins) =
            vec_block_sums(b, &xq[i * QK_K..(i + 1) * QK_K], &bs[16 * i..16 * (i + 1)]);
        let (d, dmin) = (xd[i] * f16_at(b, D), -(xd[i] * f16_at(b, DMIN)));
        acc.add(d, &lanes);
        for (a, &v) in accm.iter_mut().zip(&mins) {
            *a = dmin.mul_add(v as f32, *a);
        }
    }
    acc.sum() + ((accm[0] + accm[2]) + (accm[1] + accm[3]))
}

/// The Q4_K format.
pub struct Q4K;

/// llama.cpp's prompt orders ([`crate::tiled`]): the super-block decoded.
impl crate::tiled::TiledOrder for Q4K {
    const SUPER_BYTES: usize = BLOCK_BYTES;
    const HAS_MIN: bool = true;
    fn decode(b: &[u8], out: &mut crate::tiled::Decoded) {
        for (v, w) in out.w.iter_mut().enumerate() {
            *w = quant(b, v) as i8;
        }
        let (sc, m) = scales_mins_k4(&b[SCALES..QS]);
        for t in 0..16 {
            (out.sc[t], out.min[t]) = (i16::from(sc[t / 2]), i16::from(m[t / 2]));
        }
        (out.d, out.dmin) = (f16_at(b, D), f16_at(b, DMIN));
    }
}

impl BlockFormat for Q4K {
    const TYPE: GgmlType = GgmlType::Q4_K;
    const ACTIVATION: Activation = Activation::Q8_K;
    const SCALES: &'static [Scale] = &[Scale::F16(D), Scale::F16(DMIN)];

    fn dequantize_ref(q: &[u8], y: &mut [f32]) {
        dequantize_ref(q, y)
    }

    /// Per super-block in order: the exact `isum` and `msum`, then
    /// `acc = fma(isum, d · d_x, acc)`, `accm = fma(msum, dmin · d_x, accm)`; the result
    /// is `acc - accm` (see [`crate::kquant`]).
    fn dot_ref(row: &[u8], x: &Columns<'_>, c: usize) -> f32 {
        let (xd, xq) = x.q8(c);
        let bs = x.q8_bsums(c);
        let mut acc = SuperAcc::default();
        for (i, b) in row.chunks_exact(BLOCK_BYTES).enumerate() {
            let (isum, msum) =
                block_sums(b, &xq[i * QK_K..(i + 1) * QK_K], &bs[16 * i..16 * (i + 1)]);
            acc.add(f16_at(b, D), f16_at(b, DMIN), xd[i], isum, msum);
        }
        acc.with_mins()
    }

    fn kernels(cpu: Detected) -> FormatKernels {
        let mut k = FormatKernels::reference::<Q4K>();
        crate::tiled::install::<Q4K, 64>(&mut k, cpu);
        // llama.cpp re-lays matrices of multiples of 8 rows on AVX2 CPUs (`repack.cpp`), and
        // those keep the re-laid kernels in prompts.
        // Every kernel set mirrors that build (as `crate::legacy`'s formats do); the other
        // matrices take its `vec_dot` order.
        k.relaid_rows = 8;
        k.vec_dot_ref = Some(dot_vec_ref);
        k.vec_rows =
            Some(|w, first, x, out| crate::format::rows_by_dot(w, first, x, out, dot_vec_ref));
        #[cfg(target_arch = "x86_64")]
        {
            use crate::cpu::Isa;
            use crate::kquant::x86_64 as x86k;
            if cpu.has_avx2() {
                k.vec_rows = Some(|w, first, x, out| {
                    // SAFETY: built only from a `Detected` with AVX2, FMA and F16C.
                    unsafe { x86k::rows_avx2::<x86_64::VecRows>(w, first, x, out) }
                });
                k.rows = |w, first, x, out| {
                    // SAFETY: built only from a `Detected` with AVX2, FMA and F16C.
                    unsafe { x86k::rows_tiled_avx2::<x86_64::Rows>(w, first, x, out) }
                };
                k.pack = Some(pack);
            }
            if cpu.isa() == Isa::Avx512Vnni {
                k.rows = |w, first, x, out| {
                    // SAFETY: built only from a `Detected` with AVX-512 F, VL, BW and VNNI
                    // and the AVX2 set.
                    unsafe { x86k::rows_tiled_vnni::<x86_64::Rows>(w, first, x, out) }
                };
                k.pack = Some(pack);
            }
        }
        let _ = cpu;
        k
    }
}

/// Rows per tile of the packed layout ([`pack`]).
pub const PACK_ROWS: usize = 16;

/// Bytes of one super-block of one packed tile: the quants of 16 rows (2048), their
/// scales (128) and mins (128) one byte each, and their `d` and `dmin` (32 each).
pub(crate) const PACK_BLOCK_BYTES: usize = 2048 + 128 + 128 + 32 + 32;

const _: () = assert!(crate::gemm::TASK_ROW_ALIGN.is_multiple_of(PACK_ROWS));

/// A Q4_K matrix's whole tiles of [`PACK_ROWS`] rows, re-laid so the AVX-512 VNNI kernel
/// keeps sixteen rows in the sixteen lanes of its registers; rows beyond the last whole
/// tile stay in the file's layout only; `None` when there is no whole tile.
///
/// Tile t (rows 16t..16t + 16) of a matrix of nb super-blocks per row is
/// `nb · PACK_BLOCK_BYTES` bytes at `t · nb · PACK_BLOCK_BYTES`, super-block by
/// super-block, each:
/// - 32 lines of 64 bytes of quants: line `4s + j` (sub-block s, j in 0..4) holds in its
///   low nibbles register `8s + j` and in its high nibbles register `8s + 4 + j`, where
///   register k's bytes `4r..4r + 4` are quants `4k..4k + 4` of row r (what `vpdpbusd`
///   multiplies with four activation quants);
/// - the 6-bit scales unpacked, sub-block by sub-block, 16 rows each (128 bytes);
/// - the mins likewise (128 bytes);
/// - the rows' `d` (16 f16), then their `dmin` (16 f16).
///
/// 2.8 % larger than the file's bytes (the scales unpacked).
pub fn pack(m: &Matrix<'_>) -> Result<Option<Packed>, std::collections::TryReserveError> {
    let tiles = m.rows / PACK_ROWS;
    if m.ty != GgmlType::Q4_K || tiles == 0 {
        return Ok(None);
    }
    let nb = m.cols / QK_K;
    Packed::build(m, tiles * nb * PACK_BLOCK_BYTES, |out| {
        for (t, tile) in out.chunks_exact_mut(nb * PACK_BLOCK_BYTES).enumerate() {
            for (i, dst) in tile.chunks_exact_mut(PACK_BLOCK_BYTES).enumerate() {
                for r in 0..PACK_ROWS {
                    let row = m.row(t * PACK_ROWS + r);
                    let b = &row[i * BLOCK_BYTES..(i + 1) * BLOCK_BYTES];
                    for s in 0..8 {
                        for j in 0..4 {
                            let line = &mut dst[64 * (4 * s + j)..][..64];
                            for e in 0..4 {
                                let lo = quant(b, 32 * s + 4 * j + e);
                                let hi = quant(b, 32 * s + 16 + 4 * j + e);
                                line[4 * r + e] = lo | (hi << 4);
                            }
                        }
                    }
                    let (sc, mn) = scales_mins_k4(&b[SCALES..QS]);
                    for s in 0..8 {
                        dst[2048 + 16 * s + r] = sc[s];
                        dst[2048 + 128 + 16 * s + r] = mn[s];
                    }
                    dst[2304 + 2 * r..][..2].copy_from_slice(&b[D..D + 2]);
                    dst[2336 + 2 * r..][..2].copy_from_slice(&b[DMIN..DMIN + 2]);
                }
            }
        }
    })
    .map(Some)
}

#[cfg(target_arch = "x86_64")]
mod x86_64;

#[cfg(test)]
mod tests {
    use super::*;

    /// Dequantization restated from `dequantize_row_q4_K`'s loop structure (ggml walks
    /// 64 values at a time, low nibbles then high nibbles of 32 bytes).
    #[test]
    fn dequantize_walks_the_blocks_as_ggml_does() {
        let f = crate::Kernels::scalar();
        let f = f.format(GgmlType::Q4_K).unwrap();
        let q = f.sample(3 * QK_K, 4);
        let mut y = vec![0.0f32; 3 * QK_K];
        dequantize_ref(&q, &mut y);
        for (b, yb) in q.chunks_exact(BLOCK_BYTES).zip(y.chunks_exact(QK_K)) {
            let (d, dmin) = (f16_at(b, 0), f16_at(b, 2));
            let mut at = 0;
            for j in 0..4 {
                let qs = &b[16 + 32 * j..16 + 32 * j + 32];
                let (s1, m1) = crate::kquant::scale_min_k4(2 * j, &b[4..16]);
                let (s2, m2) = crate::kquant::scale_min_k4(2 * j + 1, &b[4..16]);
                let (d1, m1) = (d * f32::from(s1), dmin * f32::from(m1));
                let (d2, m2) = (d * f32::from(s2), dmin * f32::from(m2));
                for &v in qs {
                    assert_eq!(yb[at].to_bits(), (d1 * f32::from(v & 0xF) - m1).to_bits());
                    at += 1;
                }
                for &v in qs {
                    assert_eq!(yb[at].to_bits(), (d2 * f32::from(v >> 4) - m2).to_bits());
                    at += 1;
                }
            }
        }
    }
}

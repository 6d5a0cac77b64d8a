//! Q5_K: super-blocks of 256 values in eight sub-blocks of 32, each value a 5-bit quant
//! with a 6-bit scale and a 6-bit min per sub-block under two f16 super-block scales (176
//! bytes). Read only.
//!
//! **Block** (`block_q5_K`, `ggml-common.h`): f16 `d`, f16 `dmin`, 12 bytes of packed
//! 6-bit scales and mins (as Q4_K's, [`crate::kquant::scale_min_k4`]), 32 bytes `qh`, 128
//! bytes `qs`. Value `l` (0..32) of sub-block s takes its low four bits from byte
//! `32 (s / 2) + l` of `qs` (low nibble for even s, high for odd) and its fifth bit from
//! bit s of `qh[l]`.
//!
//! **Dequantization** (`dequantize_row_q5_K`, `ggml-quants.c`; gguf-py's `Q5_K`, the same
//! values): `(d · sc_s) · q - (dmin · m_s)`.
//!
//! **Dot** (`vec_dot_type` Q8_K): Q4_K's ([`crate::q4_k`]): the exact `isum` and `msum`
//! per super-block, then [`crate::kquant`]'s float steps with mins.
//!
//! **Kernels** (`q5_k/x86_64.rs`): on a packed copy ([`pack`]), sixteen rows per tile in
//! the lanes of registers: AVX2 (two halves of eight rows, `vpmaddubsw` summed in i16
//! then `vpmaddwd` by the scales, up to four columns per pass) and AVX-512 VNNI
//! (`vpdpbusd` chains of two, then `vpdpwssd` by the scales, up to eight). Rows outside
//! whole tiles, or a matrix without its packed copy, take the AVX2 row kernel (a row at a
//! time, weights shared by up to four columns). All give `dot_ref`'s bits.

use dspark_gguf::GgmlType;

use crate::columns::{Activation, Columns};
use crate::cpu::Detected;
use crate::format::{BlockFormat, FormatKernels, Scale};
use crate::kquant::{f16_at, min_sum, scales_mins_k4, SuperAcc, K_SCALE_SIZE, QK_K};
use crate::matrix::{Matrix, Packed};

/// Bytes per super-block.
pub const BLOCK_BYTES: usize = 176;

/// One Q5_K super-block as laid out on disk.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockQ5K {
    /// Super-block scale of the sub-block scales, IEEE binary16 bits.
    pub d: [u8; 2],
    /// Super-block scale of the sub-block mins, IEEE binary16 bits.
    pub dmin: [u8; 2],
    /// Eight 6-bit scales and eight 6-bit mins, packed.
    pub scales: [u8; K_SCALE_SIZE],
    /// Fifth bits of the quants.
    pub qh: [u8; QK_K / 8],
    /// Low four bits of the quants, two per byte.
    pub qs: [u8; QK_K / 2],
}
const _: () = assert!(std::mem::size_of::<BlockQ5K>() == BLOCK_BYTES);

/// Offsets of the fields in a block.
const D: usize = 0;
const DMIN: usize = 2;
const SCALES: usize = 4;
const QH: usize = 16;
const QS: usize = 48;

/// Quant `v` (0..256) of a block, 0..32.
#[inline]
fn quant(b: &[u8], v: usize) -> u8 {
    let (s, l) = (v / 32, v % 32);
    let byte = b[QS + 32 * (s / 2) + l];
    let lo = if s % 2 == 0 { byte & 0xF } else { byte >> 4 };
    lo | (((b[QH + l] >> s) & 1) << 4)
}

/// Dequantizes whole super-blocks (gguf-py's values, bit for bit).
///
/// # Panics
/// If the lengths do not match.
pub fn dequantize_ref(q: &[u8], y: &mut [f32]) {
    assert_eq!(q.len() % BLOCK_BYTES, 0, "Q5_K input must be whole blocks");
    assert_eq!(y.len(), q.len() / BLOCK_BYTES * QK_K, "Q5_K output size");
    for (b, yb) in q.chunks_exact(BLOCK_BYTES).zip(y.chunks_exact_mut(QK_K)) {
        let (d, dmin) = (f16_at(b, D), f16_at(b, DMIN));
        let (sc, m) = scales_mins_k4(&b[SCALES..QH]);
        for (v, o) in yb.iter_mut().enumerate() {
            let s = v / 32;
            let (ds, ms) = (d * f32::from(sc[s]), dmin * f32::from(m[s]));
            *o = ds * f32::from(quant(b, v)) - ms;
        }
    }
}

/// The exact integer sums of one super-block against one Q8_K block: `(isum, msum)`.
fn block_sums(b: &[u8], xq: &[i8], bsums: &[i16]) -> (i32, i32) {
    let (sc, m) = scales_mins_k4(&b[SCALES..QH]);
    let isum = (0..QK_K)
        .map(|v| i32::from(sc[v / 32]) * i32::from(quant(b, v)) * i32::from(xq[v]))
        .sum();
    (isum, min_sum(&m, 2, bsums))
}

/// The Q5_K format.
pub struct Q5K;

impl BlockFormat for Q5K {
    const TYPE: GgmlType = GgmlType::Q5_K;
    const ACTIVATION: Activation = Activation::Q8_K;
    const SCALES: &'static [Scale] = &[Scale::F16(D), Scale::F16(DMIN)];

    fn dequantize_ref(q: &[u8], y: &mut [f32]) {
        dequantize_ref(q, y)
    }

    /// Per super-block in order: the exact `isum` and `msum`, then `acc = fma(isum, d ·
    /// d_x, acc)`, `accm = fma(msum, dmin · d_x, accm)`; the result is `acc - accm` (see
    /// [`crate::kquant`]).
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
        let mut k = FormatKernels::reference::<Q5K>();
        #[cfg(target_arch = "x86_64")]
        {
            use crate::cpu::Isa;
            use crate::kquant::x86_64 as x86k;
            if cpu.has_avx2() {
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
            }
        }
        let _ = cpu;
        k
    }
}

/// Rows per tile of the packed layout ([`pack`]).
pub const PACK_ROWS: usize = 16;

/// Bytes of one super-block of one packed tile: 16 rows' low four bits (2048) and fifth
/// bits (512), scales and mins (128 each, unpacked), `d` and `dmin` (32 each).
pub(crate) const PACK_BLOCK_BYTES: usize = 2048 + 512 + 128 + 128 + 32 + 32;

/// A Q5_K matrix's whole tiles of [`PACK_ROWS`] rows, re-laid so the tile kernels keep
/// sixteen (AVX-512) or eight (AVX2) rows in the lanes of their registers; rows beyond the
/// last whole tile stay in the file's layout only; `None` when there is no whole tile.
///
/// Register k (0..64) of a super-block means quants `4k..4k + 4` of each row r at bytes
/// `4r..4r + 4`. Tile t (rows 16t..16t + 16) is `nb · PACK_BLOCK_BYTES` bytes at
/// `t · nb · PACK_BLOCK_BYTES`, super-block by super-block, each:
/// - 32 lines of 64 bytes of low four bits, as Q4_K's ([`crate::q4_k::pack`]): line
///   `4s + j` holds register `8s + j` in its low nibbles, `8s + 4 + j` in its high ones;
/// - 8 lines of fifth bits: line s holds register `8s + p`'s in bit p of each byte;
/// - the 6-bit scales unpacked, sub-block by sub-block, 16 rows each; the mins likewise;
/// - the rows' `d` (16 f16), then their `dmin` (16 f16).
///
/// 2.3 % larger than the file's bytes (the scales unpacked).
pub fn pack(m: &Matrix<'_>) -> Result<Option<Packed>, std::collections::TryReserveError> {
    let tiles = m.rows / PACK_ROWS;
    if m.ty != GgmlType::Q5_K || tiles == 0 {
        return Ok(None);
    }
    let nb = m.cols / QK_K;
    Packed::build(m, tiles * nb * PACK_BLOCK_BYTES, |out| {
        for (t, tile) in out.chunks_exact_mut(nb * PACK_BLOCK_BYTES).enumerate() {
            for (i, dst) in tile.chunks_exact_mut(PACK_BLOCK_BYTES).enumerate() {
                for r in 0..PACK_ROWS {
                    let row = m.row(t * PACK_ROWS + r);
                    let b = &row[i * BLOCK_BYTES..(i + 1) * BLOCK_BYTES];
                    for k in 0..64 {
                        let (s, j) = (k / 8, k % 8);
                        let shift = if j < 4 { 0 } else { 4 };
                        for e in 0..4 {
                            let q = quant(b, 4 * k + e);
                            dst[64 * (4 * s + j % 4) + 4 * r + e] |= (q & 0xF) << shift;
                            dst[2048 + 64 * s + 4 * r + e] |= (q >> 4) << j;
                        }
                    }
                    let (sc, mn) = scales_mins_k4(&b[SCALES..QH]);
                    for s in 0..8 {
                        dst[2560 + 16 * s + r] = sc[s];
                        dst[2688 + 16 * s + r] = mn[s];
                    }
                    dst[2816 + 2 * r..][..2].copy_from_slice(&b[D..D + 2]);
                    dst[2848 + 2 * r..][..2].copy_from_slice(&b[DMIN..DMIN + 2]);
                }
            }
        }
    })
    .map(Some)
}

#[cfg(target_arch = "x86_64")]
mod x86_64;

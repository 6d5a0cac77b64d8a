//! Q6_K: super-blocks of 256 values in sixteen sub-blocks of 16, each value a 6-bit quant
//! (offset by -32) with an 8-bit signed scale per sub-block under one f16 super-block scale
//! (210 bytes). Read only.
//!
//! **Block** (`block_q6_K`, `ggml-common.h`): 128 bytes `ql` (low four bits), 64 bytes `qh`
//! (high two bits), sixteen i8 scales, f16 `d`. Each half of 128 values (n = 0, 1) uses
//! `ql[64n..64n + 64]` and `qh[32n..32n + 32]`: value `32p + l` (quarter p = 0..4, l =
//! 0..32) takes the low nibble of `ql[64n + l + 32 (p mod 2)]` for p < 2, the high nibble
//! for p ≥ 2, and bits `2p..2p + 2` of `qh[32n + l]` as its bits 4 and 5.
//!
//! **Dequantization** (`dequantize_row_q6_K`, `ggml-quants.c`; gguf-py's `Q6_K`, the same
//! values): `(d · sc) · (q - 32)`.
//!
//! **Dot** (`vec_dot_type` Q8_K): per super-block the exact `isum = Σ_t sc_t · Σ (q - 32)
//! · x`, then `acc = fma(isum, d · d_x, acc)` ([`crate::kquant`], no mins).
//!
//! **Kernels** (`q6_k/x86_64.rs`): on a packed copy ([`pack`], made on AVX2 and AVX-512
//! machines alike, as large as the file's rows), sixteen rows per tile in the lanes of
//! registers: AVX2 (two halves of eight rows, `vpmaddubsw` / `vpmaddwd`, up to four
//! columns per pass) and AVX-512 VNNI (`vpdpbusd` then `vpmulld` by the scales, up to
//! eight columns per pass). Rows outside whole tiles, or a matrix without its packed
//! copy, take the AVX2 row kernel (a row at a time, quants assembled once per group of
//! four columns, the -32 taken through the Q8_K sums as ggml's x86 kernel does). All give
//! `dot_ref`'s bits.

use dspark_gguf::GgmlType;

use crate::columns::{Activation, Columns};
use crate::cpu::Detected;
use crate::format::{BlockFormat, FormatKernels, Scale};
use crate::kquant::{f16_at, SuperAcc, QK_K};
use crate::matrix::{Matrix, Packed};

/// Bytes per super-block.
pub const BLOCK_BYTES: usize = 210;

/// One Q6_K super-block as laid out on disk.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockQ6K {
    /// Low four bits of the quants.
    pub ql: [u8; QK_K / 2],
    /// High two bits of the quants.
    pub qh: [u8; QK_K / 4],
    /// Sub-block scales.
    pub scales: [i8; QK_K / 16],
    /// Super-block scale, IEEE binary16 bits.
    pub d: [u8; 2],
}
const _: () = assert!(std::mem::size_of::<BlockQ6K>() == BLOCK_BYTES);

/// Offsets of the fields in a block.
const QH: usize = 128;
const SCALES: usize = 192;
const D: usize = 208;

/// Quant `v` (0..256) of a block, 0..64 (before the -32).
#[inline]
pub(crate) fn quant(b: &[u8], v: usize) -> u8 {
    let (n, p, l) = (v / 128, (v % 128) / 32, v % 32);
    let ql = b[64 * n + l + 32 * (p % 2)];
    let lo = if p < 2 { ql & 0xF } else { ql >> 4 };
    let hi = (b[QH + 32 * n + l] >> (2 * p)) & 3;
    lo | (hi << 4)
}

/// Scale of sub-block `t` (0..16).
#[inline]
fn scale(b: &[u8], t: usize) -> i8 {
    b[SCALES + t] as i8
}

/// Dequantizes whole super-blocks (gguf-py's values, bit for bit).
///
/// # Panics
/// If the lengths do not match.
pub fn dequantize_ref(q: &[u8], y: &mut [f32]) {
    assert_eq!(q.len() % BLOCK_BYTES, 0, "Q6_K input must be whole blocks");
    assert_eq!(y.len(), q.len() / BLOCK_BYTES * QK_K, "Q6_K output size");
    for (b, yb) in q.chunks_exact(BLOCK_BYTES).zip(y.chunks_exact_mut(QK_K)) {
        let d = f16_at(b, D);
        for (v, o) in yb.iter_mut().enumerate() {
            let ds = d * f32::from(scale(b, v / 16));
            *o = ds * f32::from(quant(b, v) as i8 - 32);
        }
    }
}

/// The exact integer sum of one super-block against one Q8_K block's quants.
pub(crate) fn block_isum(b: &[u8], xq: &[i8]) -> i32 {
    (0..QK_K)
        .map(|v| i32::from(scale(b, v / 16)) * (i32::from(quant(b, v)) - 32) * i32::from(xq[v]))
        .sum()
}

/// The Q6_K format.
pub struct Q6K;

impl BlockFormat for Q6K {
    const TYPE: GgmlType = GgmlType::Q6_K;
    const ACTIVATION: Activation = Activation::Q8_K;
    const SCALES: &'static [Scale] = &[Scale::F16(D)];

    fn dequantize_ref(q: &[u8], y: &mut [f32]) {
        dequantize_ref(q, y)
    }

    /// Per super-block in order: the exact `isum`, then `acc = fma(isum,
    /// d · d_x, acc)`; the result is `acc` (see [`crate::kquant`]).
    fn dot_ref(row: &[u8], x: &Columns<'_>, c: usize) -> f32 {
        let (xd, xq) = x.q8(c);
        let mut acc = SuperAcc::default();
        for (i, b) in row.chunks_exact(BLOCK_BYTES).enumerate() {
            let isum = block_isum(b, &xq[i * QK_K..(i + 1) * QK_K]);
            acc.add_plain(f16_at(b, D), xd[i], isum);
        }
        acc.plain()
    }

    fn kernels(cpu: Detected) -> FormatKernels {
        let mut k = FormatKernels::reference::<Q6K>();
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
                k.pack = Some(pack);
            }
        }
        let _ = cpu;
        k
    }
}

/// Rows per tile of the packed layout ([`pack`]).
pub const PACK_ROWS: usize = 16;

/// Bytes of one super-block of one packed tile: 16 rows' low nibbles (2048), high bits
/// (1024), scales (256) and `d` (32) — as many as the file's 16 blocks.
pub(crate) const PACK_BLOCK_BYTES: usize = 2048 + 1024 + 256 + 32;

const _: () = assert!(PACK_BLOCK_BYTES == PACK_ROWS * BLOCK_BYTES);
const _: () = assert!(crate::gemm::TASK_ROW_ALIGN.is_multiple_of(PACK_ROWS));

/// A Q6_K matrix's whole tiles of [`PACK_ROWS`] rows, re-laid so the AVX-512 VNNI kernel
/// keeps sixteen rows in the sixteen lanes of its registers; rows beyond the last whole
/// tile stay in the file's layout only; `None` when there is no whole tile.
///
/// Register k (0..64) of a super-block means quants `4k..4k + 4` of each row r at bytes
/// `4r..4r + 4` (what `vpdpbusd` multiplies with four activation quants). Tile t (rows
/// 16t..16t + 16) is `nb · PACK_BLOCK_BYTES` bytes at `t · nb · PACK_BLOCK_BYTES`,
/// super-block by super-block, each:
/// - 32 lines of 64 bytes of low nibbles: line `4u + j` (u = 0..8, j = 0..4) holds
///   register `8u + j` in its low nibbles and register `8u + 4 + j` in its high nibbles;
/// - 16 lines of high bits: line t (the sub-block of registers `4t..4t + 4`) holds the
///   two high bits of register `4t + p` in bits `2p..2p + 2` of each byte;
/// - the scales, sub-block by sub-block, 16 rows each (256 bytes);
/// - the rows' `d` (16 f16).
pub fn pack(m: &Matrix<'_>) -> Result<Option<Packed>, std::collections::TryReserveError> {
    let tiles = m.rows / PACK_ROWS;
    if m.ty != GgmlType::Q6_K || tiles == 0 {
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
                        let (u, j) = (k / 8, k % 8);
                        let line = 4 * u + j % 4;
                        let shift = if j < 4 { 0 } else { 4 };
                        let high = 2048 + 64 * (k / 4) + 4 * r;
                        for e in 0..4 {
                            let q = quant(b, 4 * k + e);
                            dst[64 * line + 4 * r + e] |= (q & 0xF) << shift;
                            dst[high + e] |= (q >> 4) << (2 * (k % 4));
                        }
                    }
                    for s in 0..16 {
                        dst[3072 + 16 * s + r] = b[SCALES + s];
                    }
                    dst[3328 + 2 * r..][..2].copy_from_slice(&b[D..D + 2]);
                }
            }
        }
    })
    .map(Some)
}

#[cfg(target_arch = "x86_64")]
mod x86_64;

//! Q3_K: super-blocks of 256 values in sixteen sub-blocks of 16, each value a 3-bit quant
//! (-4..4) with a 6-bit scale (offset by -32) per sub-block under one f16 super-block scale
//! (110 bytes). Read only.
//!
//! **Block** (`block_q3_K`, `ggml-common.h`): 32 bytes `hmask` (high bits), 64 bytes `qs`
//! (low two bits), 12 bytes of packed 6-bit scales, f16 `d`. Each half of 128 values (n =
//! 0, 1) uses `qs[32n..32n + 32]`: value `32j + l` (j = 0..4, l = 0..32) has bits
//! `2j..2j + 2` of `qs[32n + l]` as its low bits and bit `4n + j` of `hmask[l]`; its
//! quant is `low - 4` when that bit is clear, `low` when set. Scale t's low four bits are
//! nibble `t / 8` of byte `t mod 8`, its high two bits bits `2 (t / 4)..` of byte
//! `8 + t mod 4`.
//!
//! **Dequantization** (`dequantize_row_q3_K`, `ggml-quants.c`; gguf-py's `Q3_K`, the same
//! values): `(d · (sc - 32)) · q`.
//!
//! **Dot** (`vec_dot_type` Q8_K): per super-block the exact `isum = Σ_t (sc_t - 32) · Σ q
//! · x`, then `acc = fma(isum, d · d_x, acc)` ([`crate::kquant`], no mins).
//!
//! **Kernels** (`q3_k/x86_64.rs`): on a packed copy ([`pack`]), sixteen rows per tile in
//! the lanes of registers: AVX2 (two halves of eight rows, `vpmaddubsw` summed in i16
//! then `vpmaddwd` by the scales, up to four columns per pass) and AVX-512 VNNI
//! (`vpdpbusd` then `vpdpwssd` by the scales, up to eight), the quants as `q + 4` and the
//! offset as `-4 · sc · (sum of sixteen)`. Rows outside whole tiles, or a matrix without
//! its packed copy, take the AVX2 row kernel (a row at a time, weights shared by up to four
//! columns). All give `dot_ref`'s bits.

use dspark_gguf::GgmlType;

use crate::columns::{Activation, Columns};
use crate::cpu::Detected;
use crate::format::{BlockFormat, FormatKernels, Scale};
use crate::kquant::{f16_at, SuperAcc, QK_K};
use crate::matrix::{Matrix, Packed};

/// Bytes per super-block.
pub const BLOCK_BYTES: usize = 110;

/// One Q3_K super-block as laid out on disk.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockQ3K {
    /// High bits of the quants.
    pub hmask: [u8; QK_K / 8],
    /// Low two bits of the quants.
    pub qs: [u8; QK_K / 4],
    /// Sixteen 6-bit scales, packed.
    pub scales: [u8; 12],
    /// Super-block scale, IEEE binary16 bits.
    pub d: [u8; 2],
}
const _: () = assert!(std::mem::size_of::<BlockQ3K>() == BLOCK_BYTES);

/// Offsets of the fields in a block.
const QS: usize = 32;
const SCALES: usize = 96;
const D: usize = 108;

/// Quant `v` (0..256) of a block, -4..4.
#[inline]
fn quant(b: &[u8], v: usize) -> i8 {
    let (n, j, l) = (v / 128, (v % 128) / 32, v % 32);
    let low = ((b[QS + 32 * n + l] >> (2 * j)) & 3) as i8;
    let high = (b[l] >> (4 * n + j)) & 1;
    if high == 1 {
        low
    } else {
        low - 4
    }
}

/// The sixteen scales of a block, -32..32.
#[inline]
pub(crate) fn scales(b: &[u8]) -> [i8; 16] {
    let s = &b[SCALES..SCALES + 12];
    std::array::from_fn(|t| {
        let low = (s[t % 8] >> (4 * (t / 8))) & 0xF;
        let high = (s[8 + t % 4] >> (2 * (t / 4))) & 3;
        (low | (high << 4)) as i8 - 32
    })
}

/// Dequantizes whole super-blocks (gguf-py's values, bit for bit).
///
/// # Panics
/// If the lengths do not match.
pub fn dequantize_ref(q: &[u8], y: &mut [f32]) {
    assert_eq!(q.len() % BLOCK_BYTES, 0, "Q3_K input must be whole blocks");
    assert_eq!(y.len(), q.len() / BLOCK_BYTES * QK_K, "Q3_K output size");
    for (b, yb) in q.chunks_exact(BLOCK_BYTES).zip(y.chunks_exact_mut(QK_K)) {
        let d = f16_at(b, D);
        let sc = scales(b);
        for (v, o) in yb.iter_mut().enumerate() {
            let dl = d * f32::from(sc[v / 16]);
            *o = dl * f32::from(quant(b, v));
        }
    }
}

/// The exact integer sum of one super-block against one Q8_K block's quants.
fn block_isum(b: &[u8], xq: &[i8]) -> i32 {
    let sc = scales(b);
    (0..QK_K)
        .map(|v| i32::from(sc[v / 16]) * i32::from(quant(b, v)) * i32::from(xq[v]))
        .sum()
}

/// The Q3_K format.
pub struct Q3K;

impl BlockFormat for Q3K {
    const TYPE: GgmlType = GgmlType::Q3_K;
    const ACTIVATION: Activation = Activation::Q8_K;
    const SCALES: &'static [Scale] = &[Scale::F16(D)];

    fn dequantize_ref(q: &[u8], y: &mut [f32]) {
        dequantize_ref(q, y)
    }

    /// Per super-block in order: the exact `isum`, then `acc = fma(isum, d · d_x, acc)`;
    /// the result is `acc` (see [`crate::kquant`]).
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
        let mut k = FormatKernels::reference::<Q3K>();
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

/// Bytes of one super-block of one packed tile: 16 rows' low bits (1024) and high bits
/// (512), scales (256, unpacked) and `d` (32).
pub(crate) const PACK_BLOCK_BYTES: usize = 1024 + 512 + 256 + 32;

/// A Q3_K matrix's whole tiles of [`PACK_ROWS`] rows, re-laid so the tile kernels keep
/// sixteen (AVX-512) or eight (AVX2) rows in the lanes of their registers; rows beyond the
/// last whole tile stay in the file's layout only; `None` when there is no whole tile.
///
/// Register k (0..64) of a super-block means quants `4k..4k + 4` of each row r at bytes
/// `4r..4r + 4`, each quant stored as `q + 4` (0..8: the low two bits and, as bit 2, the
/// file's high bit, set when the quant is not offset by -4). Tile t (rows 16t..16t + 16)
/// is `nb · PACK_BLOCK_BYTES` bytes at `t · nb · PACK_BLOCK_BYTES`, super-block by
/// super-block, each:
/// - 16 lines of 64 bytes of low bits: line t (the sub-block of registers `4t..4t + 4`)
///   holds register `4t + p` in bits `2p..2p + 2` of each byte;
/// - 8 lines of high bits: line u holds register `8u + p`'s in bit p of each byte;
/// - the scales unpacked (-32..32, i8), sub-block by sub-block, 16 rows each;
/// - the rows' `d` (16 f16).
///
/// 3.6 % larger than the file's bytes (the scales unpacked).
pub fn pack(m: &Matrix<'_>) -> Result<Option<Packed>, std::collections::TryReserveError> {
    let tiles = m.rows / PACK_ROWS;
    if m.ty != GgmlType::Q3_K || tiles == 0 {
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
                        for e in 0..4 {
                            let u = (quant(b, 4 * k + e) + 4) as u8;
                            dst[64 * (k / 4) + 4 * r + e] |= (u & 3) << (2 * (k % 4));
                            dst[1024 + 64 * (k / 8) + 4 * r + e] |= (u >> 2) << (k % 8);
                        }
                    }
                    for (s, &sc) in scales(b).iter().enumerate() {
                        dst[1536 + 16 * s + r] = sc as u8;
                    }
                    dst[1792 + 2 * r..][..2].copy_from_slice(&b[D..D + 2]);
                }
            }
        }
    })
    .map(Some)
}

#[cfg(target_arch = "x86_64")]
mod x86_64;

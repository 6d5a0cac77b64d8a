//! Q2_K: super-blocks of 256 values in sixteen sub-blocks of 16, each value a 2-bit quant
//! with a 4-bit scale and a 4-bit min per sub-block under two f16 super-block scales (84
//! bytes). Read only.
//!
//! **Block** (`block_q2_K`, `ggml-common.h`): sixteen bytes of scales (low nibble) and
//! mins (high nibble), 64 bytes of quants, f16 `d`, f16 `dmin`. Each half of 128 values (n
//! = 0, 1) uses `qs[32n..32n + 32]`: value `32j + l` (j = 0..4, l = 0..32) is bits
//! `2j..2j + 2` of `qs[32n + l]`.
//!
//! **Dequantization** (`dequantize_row_q2_K`, `ggml-quants.c`; gguf-py's `Q2_K`, the same
//! values): `(d · sc_t) · q - (dmin · m_t)` for sub-block `t = value / 16`.
//!
//! **Dot** (`vec_dot_type` Q8_K): per super-block the exact `isum = Σ_t sc_t · Σ q · x`
//! and `msum = Σ_t m_t · (the Q8_K sum of sixteen t)`, then [`crate::kquant`]'s float
//! steps with mins.
//!
//! **Kernels** (`q2_k/x86_64.rs`): on a packed copy ([`pack`], as large as the file's
//! rows), sixteen rows per tile in the lanes of registers: AVX2 (two halves of eight rows,
//! `vpmaddubsw` summed in i16 then `vpmaddwd` by the scales, up to four columns per pass)
//! and AVX-512 VNNI (`vpdpbusd` then `vpdpwssd` by the scales, up to eight). Rows outside
//! whole tiles, or a matrix without its packed copy, take the AVX2 row kernel (a row at a
//! time, weights shared by up to four columns). All give `dot_ref`'s bits.

use dspark_gguf::GgmlType;

use crate::columns::{Activation, Columns};
use crate::cpu::Detected;
use crate::format::{BlockFormat, FormatKernels, Scale};
use crate::kquant::{f16_at, SuperAcc, QK_K};
use crate::matrix::{Matrix, Packed};

/// Bytes per super-block.
pub const BLOCK_BYTES: usize = 84;

/// One Q2_K super-block as laid out on disk.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockQ2K {
    /// Sub-block scales (low nibbles) and mins (high nibbles).
    pub scales: [u8; QK_K / 16],
    /// Quants, four per byte.
    pub qs: [u8; QK_K / 4],
    /// Super-block scale of the sub-block scales, IEEE binary16 bits.
    pub d: [u8; 2],
    /// Super-block scale of the sub-block mins, IEEE binary16 bits.
    pub dmin: [u8; 2],
}
const _: () = assert!(std::mem::size_of::<BlockQ2K>() == BLOCK_BYTES);

/// Offsets of the fields in a block.
const QS: usize = 16;
const D: usize = 80;
const DMIN: usize = 82;

/// Quant `v` (0..256) of a block, 0..4.
#[inline]
fn quant(b: &[u8], v: usize) -> u8 {
    let (n, j, l) = (v / 128, (v % 128) / 32, v % 32);
    (b[QS + 32 * n + l] >> (2 * j)) & 3
}

/// Dequantizes whole super-blocks (gguf-py's values, bit for bit).
///
/// # Panics
/// If the lengths do not match.
pub fn dequantize_ref(q: &[u8], y: &mut [f32]) {
    assert_eq!(q.len() % BLOCK_BYTES, 0, "Q2_K input must be whole blocks");
    assert_eq!(y.len(), q.len() / BLOCK_BYTES * QK_K, "Q2_K output size");
    for (b, yb) in q.chunks_exact(BLOCK_BYTES).zip(y.chunks_exact_mut(QK_K)) {
        let (d, dmin) = (f16_at(b, D), f16_at(b, DMIN));
        for (v, o) in yb.iter_mut().enumerate() {
            let sm = b[v / 16];
            let (dl, ml) = (d * f32::from(sm & 0xF), dmin * f32::from(sm >> 4));
            *o = dl * f32::from(quant(b, v)) - ml;
        }
    }
}

/// The exact integer sums of one super-block against one Q8_K block: `(isum, msum)`.
fn block_sums(b: &[u8], xq: &[i8], bsums: &[i16]) -> (i32, i32) {
    let isum = (0..QK_K)
        .map(|v| i32::from(b[v / 16] & 0xF) * i32::from(quant(b, v)) * i32::from(xq[v]))
        .sum();
    let msum = (0..16)
        .map(|t| i32::from(b[t] >> 4) * i32::from(bsums[t]))
        .sum();
    (isum, msum)
}

/// The exact integer parts of ggml's x86 `vec_dot` of one super-block (`vec_dot_q2_K_q8_K`,
/// `ggml-cpu/arch/x86/quants.c`): eight lanes of mins, lane `l` the mins of sub-blocks
/// `2l` and `2l + 1` times their Q8_K sums of sixteen, and eight lanes of values, lane `l`
/// the sum of `sc_t · q · x` over the values `4l..4l + 4` of each run of 32.
fn vec_block_sums(b: &[u8], xq: &[i8], bsums: &[i16]) -> ([i32; 8], [i32; 8]) {
    let mins = std::array::from_fn(|l| {
        (2 * l..2 * l + 2)
            .map(|t| i32::from(b[t] >> 4) * i32::from(bsums[t]))
            .sum()
    });
    let lanes = crate::lanes::position_lanes(QK_K, |v| {
        i32::from(b[v / 16] & 0xF) * i32::from(quant(b, v)) * i32::from(xq[v])
    });
    (mins, lanes)
}

/// The dot product in ggml's x86 `vec_dot` order, which llama.cpp runs for the Q2_K
/// matrices it does not re-lay (all of them without AVX-512; 3-D tensors in plain products,
/// rows not a multiple of 8, `--no-repack`): per super-block, into one set of eight lanes,
/// first `acc_l = fma(−(d_x · dmin), mins_l, acc_l)`, then `acc_l = fma(d_x · d, lane_l,
/// acc_l)` ([`vec_block_sums`]); the result is `hsum8(acc)`.
fn dot_vec_ref(row: &[u8], x: &Columns<'_>, c: usize) -> f32 {
    let (xd, xq) = x.q8(c);
    let bs = x.q8_bsums(c);
    let mut acc = crate::lanes::LaneAcc::default();
    for (i, b) in row.chunks_exact(BLOCK_BYTES).enumerate() {
        let (mins, lanes) =
            vec_block_sums(b, &xq[i * QK_K..(i + 1) * QK_K], &bs[16 * i..16 * (i + 1)]);
        acc.add(-(xd[i] * f16_at(b, DMIN)), &mins);
        acc.add(xd[i] * f16_at(b, D), &lanes);
    }
    acc.sum()
}

/// The Q2_K format.
pub struct Q2K;

/// llama.cpp's prompt orders ([`crate::tiled`]): the super-block decoded.
impl crate::tiled::TiledOrder for Q2K {
    const SUPER_BYTES: usize = BLOCK_BYTES;
    const HAS_MIN: bool = true;
    fn decode(b: &[u8], out: &mut crate::tiled::Decoded) {
        for (v, w) in out.w.iter_mut().enumerate() {
            *w = quant(b, v) as i8;
        }
        out.sc = std::array::from_fn(|t| i16::from(b[t] & 0xF));
        out.min = std::array::from_fn(|t| i16::from(b[t] >> 4));
        (out.d, out.dmin) = (f16_at(b, D), f16_at(b, DMIN));
    }
}

impl BlockFormat for Q2K {
    const TYPE: GgmlType = GgmlType::Q2_K;
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
        let mut k = FormatKernels::reference::<Q2K>();
        crate::tiled::install::<Q2K, 128>(&mut k, cpu);
        // llama.cpp re-lays matrices of multiples of 8 rows on AVX-512 CPUs (`repack.cpp`), and
        // those keep the re-laid kernels in prompts.
        k.relaid_rows = if cpu.isa() == crate::cpu::Isa::Avx512Vnni {
            8
        } else {
            0
        };
        // The other matrices take its `vec_dot` order.
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
            }
        }
        let _ = cpu;
        k
    }
}

/// Rows per tile of the packed layout ([`pack`]).
pub const PACK_ROWS: usize = 16;

/// Bytes of one super-block of one packed tile: 16 rows' quants (1024), scale-and-min
/// bytes (256), `d` and `dmin` (32 each) — as many as the file's 16 blocks.
pub(crate) const PACK_BLOCK_BYTES: usize = 1024 + 256 + 32 + 32;

const _: () = assert!(PACK_BLOCK_BYTES == PACK_ROWS * BLOCK_BYTES);

/// A Q2_K matrix's whole tiles of [`PACK_ROWS`] rows, re-laid so the tile kernels keep
/// sixteen (AVX-512) or eight (AVX2) rows in the lanes of their registers; rows beyond the
/// last whole tile stay in the file's layout only; `None` when there is no whole tile.
///
/// Register k (0..64) of a super-block means quants `4k..4k + 4` of each row r at bytes
/// `4r..4r + 4`. Tile t (rows 16t..16t + 16) is `nb · PACK_BLOCK_BYTES` bytes at
/// `t · nb · PACK_BLOCK_BYTES`, super-block by super-block, each:
/// - 16 lines of 64 bytes of quants: line t (the sub-block of registers `4t..4t + 4`)
///   holds register `4t + p` in bits `2p..2p + 2` of each byte;
/// - the scale-and-min bytes as in the file, sub-block by sub-block, 16 rows each;
/// - the rows' `d` (16 f16), then their `dmin` (16 f16).
pub fn pack(m: &Matrix<'_>) -> Result<Option<Packed>, std::collections::TryReserveError> {
    let tiles = m.rows / PACK_ROWS;
    if m.ty != GgmlType::Q2_K || tiles == 0 {
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
                            dst[64 * (k / 4) + 4 * r + e] |= quant(b, 4 * k + e) << (2 * (k % 4));
                        }
                    }
                    for s in 0..16 {
                        dst[1024 + 16 * s + r] = b[s];
                    }
                    dst[1280 + 2 * r..][..2].copy_from_slice(&b[D..D + 2]);
                    dst[1312 + 2 * r..][..2].copy_from_slice(&b[DMIN..DMIN + 2]);
                }
            }
        }
    })
    .map(Some)
}

#[cfg(target_arch = "x86_64")]
mod x86_64;

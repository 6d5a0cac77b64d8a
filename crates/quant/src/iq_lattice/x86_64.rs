//! x86-64 row kernels shared by the lattice i-quants, generic over how a format decodes a
//! block into registers ([`DecodeAvx2`], [`DecodeAvx512`], implemented in each format's
//! `x86_64.rs`).
//!
//! A block is decoded once per row and shared by a group of up to eight columns: for each
//! run of 32 values (AVX2) or pair of runs (AVX-512) the format gives the magnitudes (u8,
//! from grid gathers), the signs and the multipliers `2·ls + 1` (i16, one per pair of
//! values). Each column multiplies pairs of values (`vpmaddubsw`) and scales them into its
//! 32-bit lanes (`vpmaddwd` + add, or `vpdpwssd`): the reference's lane sums exactly
//! (`super`'s module doc). Signs go either to each column's quants (few columns) or once to
//! the weights, the columns then reading their quants XOR 0x80 (see [`group_avx2`]); both
//! give the same integers. The float steps then follow the reference one for one: `d_w ·
//! d_x` in f32, a fused multiply-add of the converted lanes per block, [`hsum`], the
//! factor. Column c's instructions do not depend on the rest of its group (its flip mode
//! changes only how its exact integers are formed), so a column's bits never do.
//!
//! With the same Q8_K activations the results are also those of ggml's AVX2 dot products
//! (`ggml-cpu/arch/x86/quants.c`), whose lanes and float steps are the same; ggml decodes
//! one row for one column at a time, with scalar grid lookups.

// The kernels walk several per-column arrays (scales, quants, accumulators) by one index.
#![allow(clippy::needless_range_loop)]

use std::arch::x86_64::*;

use super::{Lattice, QK_K};
use crate::columns::Columns;
use crate::matrix::{group_size, Matrix};
use crate::x86_64::hsum;

/// Columns sharing one pass over a row (AVX2).
pub(crate) const GROUP: usize = 8;

/// How far ahead of the kernel's loads the weights are prefetched, in bytes.
const PREFETCH: usize = 1024;

/// The f16 scale at `p` as f32 (`vcvtph2ps`: the value `super::f16_bits_to_f32` gives).
///
/// # Safety
/// The CPU must support F16C; `p` points at 2 readable bytes.
#[target_feature(enable = "avx2,f16c")]
unsafe fn f16_at(p: *const u8) -> f32 {
    // SAFETY: the caller guarantees 2 bytes at p.
    let bits = unsafe { p.cast::<u16>().read_unaligned() };
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(bits))))
}

/// One run of 32 values decoded for the kernels.
#[derive(Clone, Copy)]
pub(crate) struct Run {
    /// Magnitudes, unsigned bytes (at most 62).
    pub mag: __m256i,
    /// Signs: byte -1 where the value is negative, +1 elsewhere.
    pub sign: __m256i,
    /// Multipliers `2·ls + 1` as i16, lane k for values 2k and 2k + 1.
    pub mult: __m256i,
}

/// How a lattice format decodes a block into registers for the AVX2 kernels.
pub(crate) trait DecodeAvx2: Lattice {
    /// What a block's runs share (signs and multipliers of all eight runs, say).
    type State: Copy;
    /// Decodes what the block's runs share.
    ///
    /// # Safety
    /// The CPU must support AVX2; `blk` points at one whole block of this format.
    unsafe fn prepare(blk: *const u8) -> Self::State;
    /// Run `j` (values `32j..32j + 32`, j < 8) of the block.
    ///
    /// # Safety
    /// As [`DecodeAvx2::prepare`], with `st` prepared from the same block and j < 8.
    unsafe fn run(st: &Self::State, blk: *const u8, j: usize) -> Run;
}

/// A row of lattice format `L` · G columns (`d[c]`, `q[c]`: column c's Q8_K block scales
/// and quants, or with `FLIP` its quants XOR 0x80), each result in the reference's order.
///
/// Without `FLIP` each column applies the signs to its quants (`vpsignb`) and multiplies
/// them with the magnitudes. With `FLIP` the signs go to the weights once (`w = ±mag`) and
/// each column multiplies `q + 128` (its quants XOR 0x80, as unsigned bytes) with them:
/// `Σ (q + 128)·w·m − 128·Σ w·m`, the second sum computed once per block for the whole
/// group, is the same integer in each lane (pairs stay within i16: 255 · 62 · 2 < 2^15).
/// One instruction less per run and column, one block's correction more: worth it from a
/// few columns on ([`FLIP_MIN`]).
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C; `row` holds whole blocks and every column's
/// scales and quants cover as many blocks (checked).
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn group_avx2<L: DecodeAvx2, const G: usize, const FLIP: bool>(
    row: &[u8],
    d: [&[f32]; G],
    q: [&[i8]; G],
    out: &mut [f32],
) {
    let nb = row.len() / L::BLOCK_BYTES;
    assert_eq!(row.len(), nb * L::BLOCK_BYTES);
    for c in 0..G {
        assert!(d[c].len() >= nb && q[c].len() >= nb * QK_K);
    }
    assert!(out.len() >= G);
    let flip = _mm256_set1_epi8(-128);
    let mut accf = [_mm256_setzero_ps(); G];
    for b in 0..nb {
        // Every access below is in bounds: b < nb, so the block's bytes lie inside `row`
        // and every column holds scale b and quants b·256..b·256 + 256 (asserted above).
        // SAFETY: see above.
        let blk = unsafe { row.as_ptr().add(b * L::BLOCK_BYTES) };
        _mm_prefetch::<_MM_HINT_T0>(blk.wrapping_add(PREFETCH).cast());
        _mm_prefetch::<_MM_HINT_T0>(blk.wrapping_add(PREFETCH + 64).cast());
        // SAFETY: as above.
        let st = unsafe { L::prepare(blk) };
        // The block's runs, decoded once for every column (kept in memory: they do not
        // fit in sixteen registers beside the columns' work).
        // FLIP: signed weights; otherwise magnitudes and signs.
        let mut weight = [_mm256_setzero_si256(); 8];
        let mut sign = [_mm256_setzero_si256(); 8];
        let mut mult = [_mm256_setzero_si256(); 8];
        let mut corr = _mm256_setzero_si256();
        for j in 0..8 {
            // SAFETY: as above, j < 8.
            let r = unsafe { L::run(&st, blk, j) };
            mult[j] = r.mult;
            if FLIP {
                let w = _mm256_sign_epi8(r.mag, r.sign);
                let p = _mm256_maddubs_epi16(flip, w);
                corr = _mm256_sub_epi32(corr, _mm256_madd_epi16(p, r.mult));
                weight[j] = w;
            } else {
                weight[j] = r.mag;
                sign[j] = r.sign;
            }
        }
        // SAFETY: as above.
        let dw = _mm256_set1_ps(unsafe { f16_at(blk) });
        for c in 0..G {
            let xb = &q[c][b * QK_K..(b + 1) * QK_K];
            let mut acc = [corr, _mm256_setzero_si256()];
            for j in 0..8 {
                // SAFETY: xb holds 256 quants, so bytes 32j..32j + 32 are in bounds (j < 8).
                let x = unsafe { _mm256_loadu_si256(xb.as_ptr().add(32 * j).cast()) };
                let p = if FLIP {
                    _mm256_maddubs_epi16(x, weight[j])
                } else {
                    _mm256_maddubs_epi16(weight[j], _mm256_sign_epi8(x, sign[j]))
                };
                acc[j % 2] = _mm256_add_epi32(acc[j % 2], _mm256_madd_epi16(p, mult[j]));
            }
            let lanes = _mm256_add_epi32(acc[0], acc[1]);
            // SAFETY: as above.
            let dx = unsafe { _mm256_broadcast_ss(&*d[c].as_ptr().add(b)) };
            accf[c] = _mm256_fmadd_ps(_mm256_mul_ps(dw, dx), _mm256_cvtepi32_ps(lanes), accf[c]);
        }
    }
    for c in 0..G {
        out[c] = hsum(accf[c]) * L::FACTOR;
    }
}

/// From how many columns in a group the kernels take the weights' signs once and the
/// columns' quants XOR 0x80 ([`group_avx2`]'s `FLIP`; the bits are the same either way).
pub(crate) const FLIP_MIN: usize = 4;

/// Into `buf`: the quants of columns `first..first + g` XOR 0x80 (`q + 128` as unsigned
/// bytes), one column after another, when the group is large enough to read them
/// ([`FLIP_MIN`]); cleared otherwise. At most eight columns' worth, reused group to group.
fn flip_group(x: &Columns<'_>, first: usize, g: usize, buf: &mut Vec<i8>) {
    buf.clear();
    if g >= FLIP_MIN {
        buf.extend((first..first + g).flat_map(|c| x.q8(c).1.iter().map(|&v| v ^ i8::MIN)));
    }
}

/// Calls group kernel `$kernel` for a group of `$g` columns (1..=8): `$d` the group's
/// scales in the form the kernel takes, `$q(c)` column c's quants, flipped from
/// [`FLIP_MIN`] columns on.
macro_rules! dispatch {
    ($kernel:ident::<$L:ty>($g:expr, $row:expr, $d:expr, $q:expr, $o:expr)) => {
        match ($g, $g >= FLIP_MIN) {
            (8, _) => $kernel::<$L, 8, true>($row, $d, std::array::from_fn($q), $o),
            (7, _) => $kernel::<$L, 7, true>($row, $d, std::array::from_fn($q), $o),
            (6, _) => $kernel::<$L, 6, true>($row, $d, std::array::from_fn($q), $o),
            (5, _) => $kernel::<$L, 5, true>($row, $d, std::array::from_fn($q), $o),
            (4, true) => $kernel::<$L, 4, true>($row, $d, std::array::from_fn($q), $o),
            (4, false) => $kernel::<$L, 4, false>($row, $d, std::array::from_fn($q), $o),
            (3, true) => $kernel::<$L, 3, true>($row, $d, std::array::from_fn($q), $o),
            (3, false) => $kernel::<$L, 3, false>($row, $d, std::array::from_fn($q), $o),
            (2, _) => $kernel::<$L, 2, false>($row, $d, std::array::from_fn($q), $o),
            _ => $kernel::<$L, 1, false>($row, $d, std::array::from_fn($q), $o),
        }
    };
}

/// Rows `first..first + out.len() / n` of lattice format `L` · all n columns, row-major
/// into `out`, columns in groups of up to [`GROUP`], one group at a time over all the rows
/// (so a flipped copy is needed for one group only: at most eight columns' quants, the
/// one allocation here besides a group's scales).
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn rows_avx2<L: DecodeAvx2>(
    w: &Matrix<'_>,
    first: usize,
    x: &Columns<'_>,
    out: &mut [f32],
) {
    let (n, len) = (x.count(), x.len());
    let mut flip = Vec::new();
    let mut done = 0;
    while done < n {
        let g = group_size(n, done, GROUP);
        flip_group(x, done, g, &mut flip);
        let d = |c: usize| x.q8(done + c).0;
        let q = |c: usize| match flip.is_empty() {
            true => x.q8(done + c).1,
            false => &flip[c * len..(c + 1) * len],
        };
        for (i, row_out) in out.chunks_exact_mut(n).enumerate() {
            let row = w.row(first + i);
            let o = &mut row_out[done..done + g];
            // SAFETY: the caller guarantees AVX2, FMA and F16C; the kernel checks sizes.
            unsafe { dispatch!(group_avx2::<L>(g, row, std::array::from_fn(d), q, o)) };
        }
        done += g;
    }
}

/// One pair of runs (64 values) decoded for the AVX-512 kernels.
#[derive(Clone, Copy)]
pub(crate) struct Pair {
    /// Magnitudes, unsigned bytes (at most 62).
    pub mag: __m512i,
    /// Signs: bit i set where value i of the pair is negative.
    pub neg: __mmask64,
    /// Multipliers `2·ls + 1` as i16, lane k for values 2k and 2k + 1.
    pub mult: __m512i,
}

/// How a lattice format decodes a block into registers for the AVX-512 kernels.
pub(crate) trait DecodeAvx512: Lattice {
    /// What a block's pairs of runs share.
    type State: Copy;
    /// Decodes what the block's pairs share.
    ///
    /// # Safety
    /// The CPU must support the AVX-512 VNNI set ([`crate::cpu::Isa::Avx512Vnni`]);
    /// `blk` points at one whole block of this format.
    unsafe fn prepare512(blk: *const u8) -> Self::State;
    /// Runs `2t` and `2t + 1` (values `64t..64t + 64`, t < 4) of the block.
    ///
    /// # Safety
    /// As [`DecodeAvx512::prepare512`], with `st` prepared from the same block and t < 4.
    unsafe fn pair(st: &Self::State, blk: *const u8, t: usize) -> Pair;
}

/// Columns sharing one pass over a row (AVX-512).
pub(crate) const GROUP512: usize = 8;

/// A row of lattice format `L` · G columns (`q[c]`: column c's quants, XOR 0x80 with
/// `FLIP`; `dt[b·G + c]`: its scale of block b) with AVX-512: as [`group_avx2`], 64 values
/// per register, the block decoded whole before the columns run. The signs come as a mask
/// (a masked `0 − v`), `vpdpwssd` scales and adds the pair sums, and each block's sixteen
/// 32-bit lanes fold into the reference's eight (lane l + 8 holds the next run's values of
/// lane l) before the same float steps — two columns per 512-bit register, each in its own
/// half, so the fold, conversion and fused multiply-add serve both.
///
/// # Safety
/// The CPU must support the AVX-512 VNNI set with AVX2, FMA and F16C; `row` holds whole
/// blocks, `dt` G scales per block and every column's quants cover as many blocks
/// (checked).
#[target_feature(enable = "avx512f,avx512vl,avx512bw,avx512vnni,avx2,fma,f16c")]
unsafe fn group_avx512<L: DecodeAvx512, const G: usize, const FLIP: bool>(
    row: &[u8],
    dt: &[f32],
    q: [&[i8]; G],
    out: &mut [f32],
) {
    let nb = row.len() / L::BLOCK_BYTES;
    assert_eq!(row.len(), nb * L::BLOCK_BYTES);
    assert!((1..=8).contains(&G) && dt.len() >= nb * G);
    for c in 0..G {
        assert!(q[c].len() >= nb * QK_K);
    }
    assert!(out.len() >= G);
    let zero = _mm512_setzero_si512();
    let flip = _mm512_set1_epi8(-128);
    let mut acc2 = [_mm512_setzero_ps(); 4];
    let mut acc1 = _mm256_setzero_ps();
    for b in 0..nb {
        // Every access below is in bounds: b < nb, so the block's bytes lie inside `row`,
        // every column holds quants b·256..b·256 + 256 and `dt` the scales b·G..b·G + G
        // (asserted above).
        // SAFETY: see above.
        let blk = unsafe { row.as_ptr().add(b * L::BLOCK_BYTES) };
        _mm_prefetch::<_MM_HINT_T0>(blk.wrapping_add(PREFETCH).cast());
        _mm_prefetch::<_MM_HINT_T0>(blk.wrapping_add(PREFETCH + 64).cast());
        // SAFETY: as above.
        let st = unsafe { L::prepare512(blk) };
        // SAFETY: as above, t < 4.
        let pairs: [Pair; 4] = std::array::from_fn(|t| unsafe { L::pair(&st, blk, t) });
        let mut init = zero;
        let mut w = [zero; 4];
        if FLIP {
            let mut corr = zero;
            for (t, p) in pairs.iter().enumerate() {
                w[t] = _mm512_mask_sub_epi8(p.mag, p.neg, zero, p.mag);
                corr = dpwssd(corr, _mm512_maddubs_epi16(flip, w[t]), p.mult);
            }
            init = _mm512_sub_epi32(zero, corr);
        }
        let mut sums = [init; G];
        for (c, acc) in sums.iter_mut().enumerate() {
            let xb = &q[c][b * QK_K..(b + 1) * QK_K];
            for (t, p) in pairs.iter().enumerate() {
                // SAFETY: xb holds 256 quants, so bytes 64t..64t + 64 are in bounds (t < 4).
                let x = unsafe { _mm512_loadu_si512(xb.as_ptr().add(64 * t).cast()) };
                let prod = if FLIP {
                    _mm512_maddubs_epi16(x, w[t])
                } else {
                    _mm512_maddubs_epi16(p.mag, _mm512_mask_sub_epi8(x, p.neg, zero, x))
                };
                *acc = dpwssd(*acc, prod, p.mult);
            }
        }
        // Lane c: d_w · d_x of column c, as the reference rounds it.
        // SAFETY: as above (the masked load reads G scales).
        let scales = _mm256_mul_ps(_mm256_set1_ps(unsafe { f16_at(blk) }), unsafe {
            _mm256_maskz_loadu_ps(((1u32 << G) - 1) as u8, dt.as_ptr().add(b * G))
        });
        // Two columns per register: the 128-bit halves of each column's sums, added, are
        // its eight lanes; each 256-bit half then takes its column's float steps.
        for (k, acc) in acc2.iter_mut().enumerate().take(G / 2) {
            let (a, c) = (sums[2 * k], sums[2 * k + 1]);
            let lanes = _mm512_add_epi32(
                _mm512_shuffle_i64x2::<0x44>(a, c),
                _mm512_shuffle_i64x2::<0xEE>(a, c),
            );
            let (lo, hi) = (2 * k as i32, 2 * k as i32 + 1);
            let pick = _mm512_setr_epi32(
                lo, lo, lo, lo, lo, lo, lo, lo, hi, hi, hi, hi, hi, hi, hi, hi,
            );
            let s = _mm512_permutexvar_ps(pick, _mm512_castps256_ps512(scales));
            *acc = _mm512_fmadd_ps(s, _mm512_cvtepi32_ps(lanes), *acc);
        }
        if G % 2 == 1 {
            let a = sums[G - 1];
            let lanes =
                _mm256_add_epi32(_mm512_castsi512_si256(a), _mm512_extracti64x4_epi64::<1>(a));
            let s = _mm256_permutevar8x32_ps(scales, _mm256_set1_epi32(G as i32 - 1));
            acc1 = _mm256_fmadd_ps(s, _mm256_cvtepi32_ps(lanes), acc1);
        }
    }
    for k in 0..G / 2 {
        out[2 * k] = hsum(_mm512_castps512_ps256(acc2[k])) * L::FACTOR;
        let hi = _mm512_extracti64x4_epi64::<1>(_mm512_castps_si512(acc2[k]));
        out[2 * k + 1] = hsum(_mm256_castsi256_ps(hi)) * L::FACTOR;
    }
    if G % 2 == 1 {
        out[G - 1] = hsum(acc1) * L::FACTOR;
    }
}

/// `acc + Σ` of the products of `a`'s and `b`'s i16 pairs, lane by lane (`vpdpwssd`,
/// exact: i16 · i16 products and wrapping i32 sums).
///
/// Written as inline assembly because LLVM otherwise splits the instruction into
/// `vpmaddwd` + `vpaddd` to shorten the accumulator's dependency chain, which costs the
/// kernels one instruction per use where they are throughput-bound.
#[target_feature(enable = "avx512f,avx512vnni")]
#[inline]
fn dpwssd(acc: __m512i, a: __m512i, b: __m512i) -> __m512i {
    let mut acc = acc;
    // SAFETY: `vpdpwssd` reads and writes registers only; the CPU has AVX-512 VNNI (this
    // function's target features).
    unsafe {
        std::arch::asm!(
            "vpdpwssd {acc}, {a}, {b}",
            acc = inout(zmm_reg) acc,
            a = in(zmm_reg) a,
            b = in(zmm_reg) b,
            options(pure, nomem, nostack),
        )
    };
    acc
}

/// Rows `first..first + out.len() / n` of lattice format `L` · all n columns with
/// AVX-512, row-major into `out`, columns in groups of up to [`GROUP512`], one group at a
/// time over all the rows (as [`rows_avx2`]).
///
/// # Safety
/// The CPU must support the AVX-512 VNNI set with AVX2, FMA and F16C.
#[target_feature(enable = "avx512f,avx512vl,avx512bw,avx512vnni,avx2,fma,f16c")]
pub(crate) unsafe fn rows_avx512<L: DecodeAvx512>(
    w: &Matrix<'_>,
    first: usize,
    x: &Columns<'_>,
    out: &mut [f32],
) {
    let (n, len) = (x.count(), x.len());
    let nb = len / QK_K;
    let mut flip = Vec::new();
    let mut done = 0;
    while done < n {
        let g = group_size(n, done, GROUP512);
        flip_group(x, done, g, &mut flip);
        // Block b's column scales at b·g..b·g + g.
        let dt: Vec<f32> = (0..nb)
            .flat_map(|b| (0..g).map(move |c| (b, c)))
            .map(|(b, c)| x.q8(done + c).0[b])
            .collect();
        let q = |c: usize| match flip.is_empty() {
            true => x.q8(done + c).1,
            false => &flip[c * len..(c + 1) * len],
        };
        for (i, row_out) in out.chunks_exact_mut(n).enumerate() {
            let row = w.row(first + i);
            let o = &mut row_out[done..done + g];
            // SAFETY: the caller guarantees the features; the kernel checks sizes.
            unsafe { dispatch!(group_avx512::<L>(g, row, &dt, q, o)) };
        }
        done += g;
    }
}

/// Shared decoding steps of the formats' AVX-512 decoders.
pub(crate) mod decode512 {
    use std::arch::x86_64::*;

    /// What the four pairs of runs of a block share once decoded.
    #[derive(Clone, Copy)]
    pub(crate) struct Shared512 {
        /// The block's 32 sign bytes as four masks of 64 values.
        pub neg: [u64; 4],
        /// The sixteen multipliers `2·ls + 1` (one per 16 values), in every 128-bit lane.
        pub mult: __m512i,
    }

    /// The block's sign bytes (byte k: values 8k..8k + 8) as four 64-value masks.
    #[target_feature(enable = "avx2")]
    pub(crate) fn masks(signs: __m256i) -> [u64; 4] {
        let mut m = [0u64; 4];
        // SAFETY: `m` is 32 bytes.
        unsafe { _mm256_storeu_si256(m.as_mut_ptr().cast(), signs) };
        m
    }

    /// The multipliers `2·ls + 1` of sixteen 4-bit fields (one byte each, one per run of
    /// 16 values), in every 128-bit lane (what [`pair_mult`] reads).
    #[target_feature(enable = "avx512f,avx512bw")]
    pub(crate) fn mult_bytes(ls: __m128i) -> __m512i {
        let m = _mm_add_epi8(_mm_add_epi8(ls, ls), _mm_set1_epi8(1));
        _mm512_broadcast_i32x4(m)
    }

    /// Pair t's multipliers as i16: 128-bit lane q takes multiplier 4t + q.
    const MULT: [[u8; 64]; 4] = {
        let mut t = [[0u8; 64]; 4];
        let mut r = 0;
        while r < 4 {
            let mut i = 0;
            while i < 64 {
                t[r][i] = if i % 2 == 1 {
                    0x80
                } else {
                    (4 * r + i / 16) as u8
                };
                i += 1;
            }
            r += 1;
        }
        t
    };

    /// Pair t's multipliers as i16 (for `vpdpwssd`), from [`mult_bytes`].
    #[target_feature(enable = "avx512f,avx512bw")]
    pub(crate) fn pair_mult(m: __m512i, t: usize) -> __m512i {
        // SAFETY: MULT rows are 64 bytes.
        let ctrl = unsafe { _mm512_loadu_si512(MULT[t].as_ptr().cast()) };
        _mm512_shuffle_epi8(m, ctrl)
    }
}

/// Shared decoding steps of the formats' AVX2 decoders.
pub(crate) mod decode {
    use std::arch::x86_64::*;

    /// `PARITY[n]` is 0x80 when `n` (0..16) has an odd number of set bits.
    const PARITY: [u8; 16] = {
        let mut t = [0u8; 16];
        let mut n = 0;
        while n < 16 {
            if (n as u32).count_ones() % 2 == 1 {
                t[n] = 0x80;
            }
            n += 1;
        }
        t
    };

    /// Bytes of seven sign bits each (0..128) with ggml's eighth bit added: set when the
    /// seven have an odd count, so that every byte has an even count (`ksigns_iq2xs`).
    #[target_feature(enable = "avx2")]
    pub(crate) fn with_parity(v: __m256i) -> __m256i {
        // SAFETY: PARITY is 16 bytes.
        let table = _mm256_broadcastsi128_si256(unsafe { _mm_loadu_si128(PARITY.as_ptr().cast()) });
        // Bits 4..6 of each byte folded onto bits 0..2: the low nibble's parity is then
        // the byte's (bit 7 stays clear, so the shuffle looks the nibble up).
        let high = _mm256_and_si256(_mm256_srli_epi16::<4>(v), _mm256_set1_epi8(0x07));
        let folded = _mm256_xor_si256(v, high);
        _mm256_or_si256(v, _mm256_shuffle_epi8(table, folded))
    }

    /// The four 7-bit fields at bits 0, 7, 14, 21 of each 32-bit lane, one per byte.
    #[target_feature(enable = "avx2")]
    pub(crate) fn spread7(aux: __m256i) -> __m256i {
        let f = |v: __m256i, m: i32| _mm256_and_si256(v, _mm256_set1_epi32(m));
        let b0 = f(aux, 0x7F);
        let b1 = f(_mm256_slli_epi32::<1>(aux), 0x7F00);
        let b2 = f(_mm256_slli_epi32::<2>(aux), 0x7F_0000);
        let b3 = f(_mm256_slli_epi32::<3>(aux), 0x7F00_0000);
        _mm256_or_si256(_mm256_or_si256(b0, b1), _mm256_or_si256(b2, b3))
    }

    /// The 32 sign bytes of a block (byte k: values 8k..8k + 8), as two registers holding
    /// bytes 0..16 and 16..32 in both 128-bit halves (what [`run_signs`] reads).
    #[target_feature(enable = "avx2")]
    pub(crate) fn halves(signs: __m256i) -> [__m256i; 2] {
        [
            _mm256_broadcastsi128_si256(_mm256_castsi256_si128(signs)),
            _mm256_broadcastsi128_si256(_mm256_extracti128_si256::<1>(signs)),
        ]
    }

    /// Byte-broadcast controls: for run t of a half, bytes 8m..8m + 8 of the result take
    /// sign byte 4t + m.
    const EXPAND: [[u8; 32]; 4] = {
        let mut t = [[0u8; 32]; 4];
        let mut r = 0;
        while r < 4 {
            let mut i = 0;
            while i < 32 {
                // Each 128-bit half shuffles its own copy: indices are within a half.
                t[r][i] = (4 * r + i / 8) as u8;
                i += 1;
            }
            r += 1;
        }
        t
    };

    /// The bit of value j within its sign byte, per byte of a run.
    const BITS: [u8; 32] = {
        let mut t = [0u8; 32];
        let mut i = 0;
        while i < 32 {
            t[i] = 1 << (i % 8);
            i += 1;
        }
        t
    };

    /// What the eight runs of a block share once decoded: the sign bytes split by
    /// [`halves`], and the multipliers' bytes by [`mult_bytes`].
    #[derive(Clone, Copy)]
    pub(crate) struct Shared {
        /// Sign bytes 0..16 and 16..32, each in both 128-bit halves.
        pub signs: [__m256i; 2],
        /// The sixteen multipliers `2·ls + 1` (one per 16 values), in both halves.
        pub mult: __m256i,
    }

    /// The multipliers `2·ls + 1` of sixteen 4-bit fields (one byte each, one per run of
    /// 16 values), in both 128-bit halves (what [`run_mult`] reads).
    #[target_feature(enable = "avx2")]
    pub(crate) fn mult_bytes(ls: __m128i) -> __m256i {
        let m = _mm_add_epi8(_mm_add_epi8(ls, ls), _mm_set1_epi8(1));
        _mm256_broadcastsi128_si256(m)
    }

    /// Run j's multipliers as i16: lanes 0..8 take multiplier 2j, lanes 8..16 take 2j + 1.
    const MULT: [[u8; 32]; 8] = {
        let mut t = [[0u8; 32]; 8];
        let mut r = 0;
        while r < 8 {
            let mut i = 0;
            while i < 32 {
                t[r][i] = if i % 2 == 1 {
                    0x80
                } else {
                    (2 * r + i / 16) as u8
                };
                i += 1;
            }
            r += 1;
        }
        t
    };

    /// Run j's multipliers as i16 (for `vpmaddwd`), from [`mult_bytes`].
    #[target_feature(enable = "avx2")]
    pub(crate) fn run_mult(m: __m256i, j: usize) -> __m256i {
        // SAFETY: MULT rows are 32 bytes.
        let ctrl = unsafe { _mm256_loadu_si256(MULT[j].as_ptr().cast()) };
        _mm256_shuffle_epi8(m, ctrl)
    }

    /// The scale fields at bits 28..32 of eight 32-bit lanes (one per run of 32 values),
    /// each twice (one per run of 16), as sixteen bytes.
    #[target_feature(enable = "avx2")]
    pub(crate) fn ls_of_lanes(aux: __m256i) -> __m128i {
        let ls = _mm256_srli_epi32::<28>(aux);
        let ctrl = _mm256_setr_epi8(
            0, 0, 4, 4, 8, 8, 12, 12, -1, -1, -1, -1, -1, -1, -1, -1, //
            0, 0, 4, 4, 8, 8, 12, 12, -1, -1, -1, -1, -1, -1, -1, -1,
        );
        let b = _mm256_shuffle_epi8(ls, ctrl);
        _mm_unpacklo_epi64(_mm256_castsi256_si128(b), _mm256_extracti128_si256::<1>(b))
    }

    /// Sixteen 4-bit fields stored two per byte, low nibble first, from eight bytes at
    /// `p`, one per byte.
    ///
    /// # Safety
    /// `p` points at 8 readable bytes.
    #[target_feature(enable = "avx2")]
    pub(crate) unsafe fn nibbles8(p: *const u8) -> __m128i {
        // SAFETY: the caller guarantees 8 bytes at p.
        let v = unsafe { _mm_loadl_epi64(p.cast()) };
        let m = _mm_set1_epi8(0x0F);
        _mm_unpacklo_epi8(
            _mm_and_si128(v, m),
            _mm_and_si128(_mm_srli_epi16::<4>(v), m),
        )
    }

    /// Run j's signs as ±1 bytes, from the block's sign bytes split by [`halves`].
    #[target_feature(enable = "avx2")]
    pub(crate) fn run_signs(h: &[__m256i; 2], j: usize) -> __m256i {
        // SAFETY: EXPAND rows and BITS are 32 bytes.
        let (ctrl, bits) = unsafe {
            (
                _mm256_loadu_si256(EXPAND[j % 4].as_ptr().cast()),
                _mm256_loadu_si256(BITS.as_ptr().cast()),
            )
        };
        let bytes = _mm256_shuffle_epi8(h[j / 4], ctrl);
        let neg = _mm256_cmpeq_epi8(_mm256_and_si256(bytes, bits), bits);
        _mm256_or_si256(neg, _mm256_set1_epi8(1))
    }
}

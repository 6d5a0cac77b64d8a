//! x86-64 pieces the k-quant kernels share: the columns a kernel reads, the float steps
//! of [`crate::kquant`] in vector lanes, scale broadcasts, prefetching and the packed
//! tiles' bookkeeping.

use std::arch::x86_64::*;

use crate::columns::Columns;
use crate::kquant::QK_K;
use crate::matrix::{group_size, packed_tiles, Matrix};

/// One Q8_K column as the kernels read it: per block the scale, the quants and the sums
/// of sixteen.
#[derive(Clone, Copy)]
pub(crate) struct KCol<'c> {
    d: &'c [f32],
    q: &'c [i8],
    bs: &'c [i16],
}

impl<'c> KCol<'c> {
    /// Column `c` of `x`.
    #[inline]
    pub(crate) fn new(x: &'c Columns<'_>, c: usize) -> KCol<'c> {
        let (d, q) = x.q8(c);
        KCol {
            d,
            q,
            bs: x.q8_bsums(c),
        }
    }
}

/// G Q8_K columns as the kernels read them: per block the scale, the quants and the sums
/// of sixteen.
pub(crate) struct KColumns<'c, const G: usize> {
    /// Block scales.
    pub(crate) d: [&'c [f32]; G],
    /// Quants.
    pub(crate) q: [&'c [i8]; G],
    /// Sums of sixteen quants (16 per block).
    pub(crate) bs: [&'c [i16]; G],
}

impl<'c, const G: usize> KColumns<'c, G> {
    /// Columns `first..first + G` of `x`.
    #[inline]
    pub(crate) fn new(x: &'c Columns<'_>, first: usize) -> KColumns<'c, G> {
        KColumns::of(&std::array::from_fn::<_, G, _>(|c| KCol::new(x, first + c)))
    }

    /// The first G of `cols`.
    #[inline]
    pub(crate) fn of(cols: &[KCol<'c>]) -> KColumns<'c, G> {
        KColumns {
            d: std::array::from_fn(|c| cols[c].d),
            q: std::array::from_fn(|c| cols[c].q),
            bs: std::array::from_fn(|c| cols[c].bs),
        }
    }

    /// Panics unless every column holds at least `nb` blocks (the kernels' unchecked
    /// loads rely on it).
    #[inline]
    pub(crate) fn check(&self, nb: usize) {
        for c in 0..G {
            assert!(
                self.d[c].len() >= nb
                    && self.q[c].len() >= nb * QK_K
                    && self.bs[c].len() >= nb * 16,
                "column shorter than the row"
            );
        }
    }
}

/// Columns sharing one pass over a row in the AVX2 kernels.
const GROUP: usize = 4;

/// A k-quant format's AVX2 kernel for one row and a group of columns.
pub(crate) trait RowGroup {
    /// Row `row` (whole super-blocks) · the G columns of `x`, into `out[..G]`.
    ///
    /// # Safety
    /// The CPU must support AVX2, FMA and F16C; the kernel checks the columns' sizes.
    unsafe fn group<const G: usize>(row: &[u8], x: &KColumns<'_, G>, out: &mut [f32]);
}

/// Rows `first..first + out.len() / n` · all n columns with `K`'s AVX2 kernel, row-major
/// into `out`: each row once per group of up to four columns (the weights unpacked once
/// per group), the columns' slices taken once per call.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn rows_avx2<K: RowGroup>(
    w: &Matrix<'_>,
    first: usize,
    x: &Columns<'_>,
    out: &mut [f32],
) {
    let n = x.count();
    let cols: Vec<KCol<'_>> = (0..n).map(|c| KCol::new(x, c)).collect();
    for (i, row_out) in out.chunks_exact_mut(n).enumerate() {
        let row = w.row(first + i);
        let mut done = 0;
        while done < n {
            let g = group_size(n, done, GROUP);
            let (o, c) = (&mut row_out[done..done + g], &cols[done..done + g]);
            // SAFETY: the caller guarantees AVX2, FMA and F16C; the kernel checks sizes.
            unsafe {
                match g {
                    4 => K::group::<4>(row, &KColumns::of(c), o),
                    3 => K::group::<3>(row, &KColumns::of(c), o),
                    2 => K::group::<2>(row, &KColumns::of(c), o),
                    _ => K::group::<1>(row, &KColumns::of(c), o),
                }
            }
            done += g;
        }
    }
}

/// How far ahead of a row kernel's loads the weights are prefetched, in bytes (rows of a
/// task are contiguous, so this runs into the next rows).
const PREFETCH: usize = 2048;

/// Prefetches the cache lines of a super-block of up to 256 bytes [`PREFETCH`] bytes
/// ahead of `b`.
#[inline(always)]
pub(crate) fn prefetch_ahead(b: *const u8) {
    for line in 0..4 {
        let p = b.wrapping_add(PREFETCH + 64 * line);
        // SAFETY: a prefetch is a hint: it reads nothing and never faults.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(p.cast()) };
    }
}

/// Prefetches `bytes` bytes from `p` (nothing when `p` is null).
#[inline(always)]
pub(crate) fn prefetch_lines(p: *const u8, bytes: usize) {
    if p.is_null() {
        return;
    }
    for off in (0..bytes).step_by(64) {
        // SAFETY: a prefetch is a hint: it reads nothing and never faults.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(off).cast()) };
    }
}

/// The eight scales and eight mins of Q4_K / Q5_K's 12 packed bytes at `q` (ggml's
/// `utmp` shuffle of `get_scale_min_k4`'s packing, `ggml-cpu/arch/x86/quants.c`) as
/// little-endian u64 of bytes: `(scales, mins)`.
///
/// # Safety
/// `q` points to 12 readable bytes.
#[inline(always)]
pub(crate) unsafe fn scales_mins_k4(q: *const u8) -> (u64, u64) {
    // SAFETY: the caller guarantees 12 readable bytes.
    let u: [u32; 3] = unsafe { std::ptr::read_unaligned(q.cast()) };
    const M1: u32 = 0x3f3f_3f3f;
    const M2: u32 = 0x0f0f_0f0f;
    const M3: u32 = 0x0303_0303;
    let sc_lo = u[0] & M1;
    let sc_hi = (u[2] & M2) | (((u[0] >> 6) & M3) << 4);
    let m_lo = u[1] & M1;
    let m_hi = ((u[2] >> 4) & M2) | (((u[1] >> 6) & M3) << 4);
    (
        u64::from(sc_lo) | (u64::from(sc_hi) << 32),
        u64::from(m_lo) | (u64::from(m_hi) << 32),
    )
}

/// The f16 pair at `b` (`d`, `dmin`) as f32 in lanes 0 and 1 (lanes 2, 3 zero).
///
/// # Safety
/// The CPU must support F16C; `b` points to 4 readable bytes.
#[target_feature(enable = "avx2,f16c")]
#[inline]
pub(crate) unsafe fn d_dmin(b: *const u8) -> __m128 {
    // SAFETY: the caller guarantees 4 readable bytes.
    let bits = unsafe { b.cast::<i32>().read_unaligned() };
    _mm_cvtph_ps(_mm_cvtsi32_si128(bits))
}

/// One super-block's float steps in lanes 0 (`acc`) and 1 (`accm`) of `acc`: the eight
/// lanes of `isum` and of `msum` summed (exact: the sums fit in i32), then
/// `acc = fma(isum, d · d_x, acc)` and `accm = fma(msum, dmin · d_x, accm)` with `dm` =
/// `[d, dmin, 0, 0]` — [`crate::kquant`]'s steps, lane for lane.
#[target_feature(enable = "avx2,fma")]
#[inline]
pub(crate) fn step2(acc: __m128, isum: __m256i, msum: __m256i, dm: __m128, dx: f32) -> __m128 {
    let h = _mm256_hadd_epi32(isum, msum);
    let q = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256::<1>(h));
    let s = _mm_hadd_epi32(q, q);
    _mm_fmadd_ps(_mm_cvtepi32_ps(s), _mm_mul_ps(dm, _mm_set1_ps(dx)), acc)
}

/// `acc - accm` from lanes 0 and 1 of [`step2`]'s accumulator.
#[target_feature(enable = "avx2")]
#[inline]
pub(crate) fn finish2(acc: __m128) -> f32 {
    _mm_cvtss_f32(acc) - _mm_cvtss_f32(_mm_movehdup_ps(acc))
}

/// The sixteen i16 lanes `m0, m0, m1, m1, …, m7, m7` of eight mins given as bytes: what
/// `vpmaddwd` multiplies a Q8_K block's sixteen sums of sixteen with.
#[target_feature(enable = "avx2")]
#[inline]
pub(crate) fn dup_mins(mins: u64) -> __m256i {
    let dup = _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    _mm256_cvtepu8_epi16(_mm_shuffle_epi8(_mm_cvtsi64_si128(mins as i64), dup))
}

/// i16 lane `s` (0..8) of each 128-bit half of `sc16` in every i16 lane of that half.
#[target_feature(enable = "avx2")]
#[inline]
pub(crate) fn scale_lanes(sc16: __m256i, s: usize) -> __m256i {
    let pick = (((2 * s + 1) << 8) | (2 * s)) as i16;
    _mm256_shuffle_epi8(sc16, _mm256_set1_epi16(pick))
}

/// The i16 scales of runs of 16 for the 32 bytes of run `r` (0..8) of a super-block:
/// scales `2r` (bytes 0..16) and `2r + 1` (bytes 16..32).
#[target_feature(enable = "avx2")]
#[inline]
pub(crate) fn split_run_scales(sc: &[i8; 16], r: usize) -> __m256i {
    let lo = _mm256_set1_epi16(i16::from(sc[2 * r]));
    let hi = _mm256_set1_epi16(i16::from(sc[2 * r + 1]));
    _mm256_permute2x128_si256::<0x20>(lo, hi)
}

/// The exact eight i32 lanes of ggml's k-quant `vec_dot`s over one super-block: for each
/// run `r` of 32 unsigned quants, `vpmaddubsw` with the activation quants at `qx + 32r`,
/// `vpmaddwd` by the run's i16 scales, summed over the runs (lane `l`: the values `4l..4l
/// + 4` of every run).
///
/// # Safety
/// The CPU must support AVX2; `qx` must point at 256 readable quants.
#[target_feature(enable = "avx2")]
#[inline]
pub(crate) unsafe fn scaled_run_sums(
    runs: &[__m256i; 8],
    scales: &[__m256i; 8],
    qx: *const i8,
) -> __m256i {
    let mut sumi = _mm256_setzero_si256();
    for r in 0..8 {
        // SAFETY: run r's 32 quants lie inside the caller's 256.
        let xv = unsafe { _mm256_loadu_si256(qx.add(32 * r).cast()) };
        let p16 = _mm256_madd_epi16(scales[r], _mm256_maddubs_epi16(runs[r], xv));
        sumi = _mm256_add_epi32(sumi, p16);
    }
    sumi
}

/// The shuffles that spread sixteen-value sub-block scales over a register of 32 quants
/// after `vpmaddubsw`: mask k puts i16 lane `2k` of the low 128 bits in every lane of the
/// low half and lane `2k + 1` of the high 128 bits in every lane of the high half (with
/// [`half_scales`]' registers, whose halves are equal).
#[target_feature(enable = "avx2")]
#[inline]
pub(crate) fn half_masks() -> [__m256i; 4] {
    let pick = |t: usize| _mm_set1_epi16((((2 * t + 1) << 8) | (2 * t)) as i16);
    std::array::from_fn(|k| _mm256_setr_m128i(pick(2 * k), pick(2 * k + 1)))
}

/// 128-bit half `n` (0, 1) of `sc16` in both halves.
#[target_feature(enable = "avx2")]
#[inline]
pub(crate) fn half_scales(sc16: __m256i, n: usize) -> __m256i {
    if n == 0 {
        _mm256_permute2x128_si256::<0x00>(sc16, sc16)
    } else {
        _mm256_permute2x128_si256::<0x11>(sc16, sc16)
    }
}

/// Rows per packed k-quant tile: the sixteen lanes of a 512-bit register, or two halves
/// of eight for AVX2.
pub(crate) const TILE_ROWS: usize = 16;

const _: () = assert!(crate::gemm::TASK_ROW_ALIGN.is_multiple_of(TILE_ROWS));

/// A k-quant format's packed tiles of [`TILE_ROWS`] rows (its `pack`) and their kernels.
pub(crate) trait Tiles {
    /// Bytes of one super-block of one tile.
    const PACK_BLOCK_BYTES: usize;

    /// One whole tile of `nb` super-blocks · the G columns of `x` with AVX2, prefetching
    /// the bytes at `ahead` (null: none) as it goes: each row's result per column.
    ///
    /// # Safety
    /// The CPU must support AVX2, FMA and F16C; the kernel checks the sizes.
    unsafe fn tile_avx2<const G: usize>(
        tile: &[u8],
        nb: usize,
        x: &KColumns<'_, G>,
        ahead: *const u8,
    ) -> [[f32; TILE_ROWS]; G];

    /// [`Tiles::tile_avx2`] with AVX-512 VNNI (the same bits).
    ///
    /// # Safety
    /// The CPU must support AVX-512 F, VL, BW and VNNI plus AVX2, FMA and F16C; the kernel
    /// checks the sizes.
    unsafe fn tile_vnni<const G: usize>(
        tile: &[u8],
        nb: usize,
        x: &KColumns<'_, G>,
        ahead: *const u8,
    ) -> [[f32; TILE_ROWS]; G];

    /// The row kernel for rows outside whole tiles (the same bits).
    ///
    /// # Safety
    /// The CPU must support AVX2, FMA and F16C.
    unsafe fn rows(w: &Matrix<'_>, first: usize, x: &Columns<'_>, out: &mut [f32]);
}

/// A tile's results for columns `c..c + G` into its rows of `out` (row-major, `n`
/// columns per row).
#[inline(always)]
fn scatter<const G: usize>(r: [[f32; TILE_ROWS]; G], c: usize, n: usize, out: &mut [f32]) {
    for (j, col) in r.iter().enumerate() {
        for (i, &v) in col.iter().enumerate() {
            out[i * n + c + j] = v;
        }
    }
}

/// Walks the whole packed tiles of a task (rows `first..first + out.len() / n`, when the
/// matrix has a packed copy and the task starts on a tile): `run(g, tile, c, ahead,
/// rows)` for each tile and each group of up to `max` columns from `c`, with the next
/// tile to prefetch for the first group (null for the others, which find this one
/// cached) and the tile's rows of `out`. Returns how many rows it covered.
#[inline(always)]
fn walk_tiles(
    w: &Matrix<'_>,
    first: usize,
    n: usize,
    out: &mut [f32],
    block_bytes: usize,
    max: usize,
    mut run: impl FnMut(usize, &[u8], usize, *const u8, &mut [f32]),
) -> usize {
    let tile_bytes = w.cols / QK_K * block_bytes;
    let Some((packed, tiles)) = packed_tiles(w, first, out.len() / n, TILE_ROWS, tile_bytes) else {
        return 0;
    };
    for t in 0..tiles {
        let at = (first / TILE_ROWS + t) * tile_bytes;
        let tile = &packed[at..at + tile_bytes];
        let next = packed.as_ptr().wrapping_add(at + tile_bytes);
        let rows = &mut out[t * TILE_ROWS * n..(t + 1) * TILE_ROWS * n];
        let mut c = 0;
        while c < n {
            let g = group_size(n, c, max);
            run(
                g,
                tile,
                c,
                if c == 0 { next } else { std::ptr::null() },
                rows,
            );
            c += g;
        }
    }
    tiles * TILE_ROWS
}

/// Rows `first..first + out.len() / n` · all n columns with AVX2: rows in whole packed
/// tiles with `T`'s tile kernel (up to four columns per pass), the others with its row
/// kernel.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn rows_tiled_avx2<T: Tiles>(
    w: &Matrix<'_>,
    first: usize,
    x: &Columns<'_>,
    out: &mut [f32],
) {
    let (n, nb) = (x.count(), w.cols / QK_K);
    let done = walk_tiles(
        w,
        first,
        n,
        out,
        T::PACK_BLOCK_BYTES,
        4,
        |g, tile, c, ahead, o| {
            // SAFETY: the caller guarantees the CPU features; the kernels check sizes.
            unsafe {
                match g {
                    4 => scatter(
                        T::tile_avx2::<4>(tile, nb, &KColumns::new(x, c), ahead),
                        c,
                        n,
                        o,
                    ),
                    3 => scatter(
                        T::tile_avx2::<3>(tile, nb, &KColumns::new(x, c), ahead),
                        c,
                        n,
                        o,
                    ),
                    2 => scatter(
                        T::tile_avx2::<2>(tile, nb, &KColumns::new(x, c), ahead),
                        c,
                        n,
                        o,
                    ),
                    _ => scatter(
                        T::tile_avx2::<1>(tile, nb, &KColumns::new(x, c), ahead),
                        c,
                        n,
                        o,
                    ),
                }
            }
        },
    );
    if done * n < out.len() {
        // SAFETY: the caller guarantees AVX2, FMA and F16C.
        unsafe { T::rows(w, first + done, x, &mut out[done * n..]) };
    }
}

/// Rows `first..first + out.len() / n` · all n columns with AVX-512 VNNI: rows in whole
/// packed tiles with `T`'s VNNI tile kernel (up to eight columns per pass), the others
/// with its row kernel.
///
/// # Safety
/// The CPU must support AVX-512 F, VL, BW and VNNI, AVX2, FMA and F16C.
#[target_feature(enable = "avx512f,avx512vl,avx512bw,avx512vnni,avx2,fma,f16c")]
pub(crate) unsafe fn rows_tiled_vnni<T: Tiles>(
    w: &Matrix<'_>,
    first: usize,
    x: &Columns<'_>,
    out: &mut [f32],
) {
    let (n, nb) = (x.count(), w.cols / QK_K);
    let done = walk_tiles(
        w,
        first,
        n,
        out,
        T::PACK_BLOCK_BYTES,
        8,
        |g, tile, c, ahead, o| {
            // SAFETY: the caller guarantees the CPU features; the kernels check sizes.
            unsafe {
                match g {
                    8 => scatter(
                        T::tile_vnni::<8>(tile, nb, &KColumns::new(x, c), ahead),
                        c,
                        n,
                        o,
                    ),
                    7 => scatter(
                        T::tile_vnni::<7>(tile, nb, &KColumns::new(x, c), ahead),
                        c,
                        n,
                        o,
                    ),
                    6 => scatter(
                        T::tile_vnni::<6>(tile, nb, &KColumns::new(x, c), ahead),
                        c,
                        n,
                        o,
                    ),
                    5 => scatter(
                        T::tile_vnni::<5>(tile, nb, &KColumns::new(x, c), ahead),
                        c,
                        n,
                        o,
                    ),
                    4 => scatter(
                        T::tile_vnni::<4>(tile, nb, &KColumns::new(x, c), ahead),
                        c,
                        n,
                        o,
                    ),
                    3 => scatter(
                        T::tile_vnni::<3>(tile, nb, &KColumns::new(x, c), ahead),
                        c,
                        n,
                        o,
                    ),
                    2 => scatter(
                        T::tile_vnni::<2>(tile, nb, &KColumns::new(x, c), ahead),
                        c,
                        n,
                        o,
                    ),
                    _ => scatter(
                        T::tile_vnni::<1>(tile, nb, &KColumns::new(x, c), ahead),
                        c,
                        n,
                        o,
                    ),
                }
            }
        },
    );
    if done * n < out.len() {
        // SAFETY: AVX2, FMA and F16C are among the caller's guarantees.
        unsafe { T::rows(w, first + done, x, &mut out[done * n..]) };
    }
}

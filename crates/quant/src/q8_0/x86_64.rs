//! AVX2 Q8_0 kernels. Each produces exactly the bytes (quantize) or values (dequantize) of
//! its scalar reference in `q8_0.rs`; `tests` compare them on random and edge-case input.
//!
//! Unlike ggml's AVX quantizer (which multiplies by `127/amax` and rounds ties to even),
//! this one computes `id = 1/d` from `d = amax/127` exactly as the reference does and
//! rounds ties away from zero: `t = trunc(p)`, then `t ± 1` when `|p − t| ≥ 0.5`. Both
//! steps are exact for `|p| < 2^23`, and `|p| ≤ 127.00003` here.

use std::arch::x86_64::*;

use half::f16;

use super::{quantize_block_ref, BLOCK_BYTES, QK8_0};

/// One block's 32 values in four registers and their largest magnitude, or `None` when a
/// value is not finite (the callers then take the reference's bytes).
///
/// # Safety
/// The CPU must support AVX2; `xb` holds 32 values.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn load_block(xb: &[f32]) -> Option<([__m256; 4], f32)> {
    debug_assert_eq!(xb.len(), QK8_0);
    let sign = _mm256_set1_ps(-0.0);
    let max_finite = _mm256_set1_ps(f32::MAX);
    // SAFETY: xb has exactly 32 f32s, so the four unaligned 8-lane loads are in bounds.
    let v = unsafe {
        [
            _mm256_loadu_ps(xb.as_ptr()),
            _mm256_loadu_ps(xb.as_ptr().add(8)),
            _mm256_loadu_ps(xb.as_ptr().add(16)),
            _mm256_loadu_ps(xb.as_ptr().add(24)),
        ]
    };
    let a = v.map(|v| _mm256_andnot_ps(sign, v));
    // All lanes finite (NaN compares false)?
    let fin = _mm256_and_ps(
        _mm256_and_ps(
            _mm256_cmp_ps::<_CMP_LE_OQ>(a[0], max_finite),
            _mm256_cmp_ps::<_CMP_LE_OQ>(a[1], max_finite),
        ),
        _mm256_and_ps(
            _mm256_cmp_ps::<_CMP_LE_OQ>(a[2], max_finite),
            _mm256_cmp_ps::<_CMP_LE_OQ>(a[3], max_finite),
        ),
    );
    if _mm256_movemask_ps(fin) != 0xFF {
        return None;
    }
    // With finite inputs the max is order-independent, so a tree equals C's loop.
    let m = _mm256_max_ps(_mm256_max_ps(a[0], a[1]), _mm256_max_ps(a[2], a[3]));
    let m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps::<1>(m));
    let m2 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    let m1 = _mm_max_ss(m2, _mm_shuffle_ps::<1>(m2, m2));
    Some((v, _mm_cvtss_f32(m1)))
}

/// Packs four registers of i32 quants (saturating) into a block's 32 bytes, in order.
///
/// # Safety
/// The CPU must support AVX2; `qs` holds 32 bytes.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn store_quants(q: [__m256i; 4], qs: &mut [u8]) {
    debug_assert_eq!(qs.len(), QK8_0);
    let perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    let i16s = [
        _mm256_packs_epi32(q[0], q[1]),
        _mm256_packs_epi32(q[2], q[3]),
    ];
    let i8s = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(i16s[0], i16s[1]), perm);
    // SAFETY: qs is exactly 32 bytes, the width of one unaligned 256-bit store.
    unsafe { _mm256_storeu_si256(qs.as_mut_ptr().cast(), i8s) };
}

/// Quantizes whole blocks with AVX2.
///
/// # Safety
/// The CPU must support AVX2 and FMA-free AVX (checked by the caller with
/// `is_x86_feature_detected!("avx2")`).
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn quantize_avx2(x: &[f32], out: &mut [u8]) {
    assert_eq!(x.len() % QK8_0, 0);
    assert_eq!(out.len(), x.len() / QK8_0 * BLOCK_BYTES);
    let sign = _mm256_set1_ps(-0.0);
    let half = _mm256_set1_ps(0.5);
    let one = _mm256_set1_ps(1.0);
    for (xb, ob) in x.chunks_exact(QK8_0).zip(out.chunks_exact_mut(BLOCK_BYTES)) {
        // SAFETY: AVX2 is this function's own target feature; xb is one block.
        let Some((v, amax)) = (unsafe { load_block(xb) }) else {
            quantize_block_ref(xb, ob);
            continue;
        };
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        ob[..2].copy_from_slice(&f16::from_f32(d).to_bits().to_le_bytes());
        if !id.is_finite() {
            // Every product is ±inf or NaN: the reference stores 0 for each.
            ob[2..].fill(0);
            continue;
        }
        let idv = _mm256_set1_ps(id);
        let q = v.map(|v| {
            let p = _mm256_mul_ps(v, idv);
            let t = _mm256_round_ps::<{ _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC }>(p);
            let frac = _mm256_andnot_ps(sign, _mm256_sub_ps(p, t));
            let step = _mm256_and_ps(
                _mm256_cmp_ps::<_CMP_GE_OQ>(frac, half),
                _mm256_or_ps(one, _mm256_and_ps(p, sign)),
            );
            _mm256_cvttps_epi32(_mm256_add_ps(t, step))
        });
        // SAFETY: AVX2 as above; ob[2..] is the block's 32 quant bytes.
        unsafe { store_quants(q, &mut ob[2..]) };
    }
}

/// Quantizes activations with AVX2 by ggml's x86 recipe (`quantize_activations`): the
/// values times `127 / amax`, rounded to nearest with ties to even, packed with
/// saturation — the same bytes as the scalar `super::quantize_activations`.
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn quantize_activations_avx2(x: &[f32], out: &mut [u8]) {
    assert_eq!(x.len() % QK8_0, 0);
    assert_eq!(out.len(), x.len() / QK8_0 * BLOCK_BYTES);
    for (xb, ob) in x.chunks_exact(QK8_0).zip(out.chunks_exact_mut(BLOCK_BYTES)) {
        // SAFETY: AVX2 is this function's own target feature; xb is one block and
        // ob[2..] its 32 quant bytes.
        match unsafe { activation_block_avx2(xb, &mut ob[2..]) } {
            Some((d, _)) => ob[..2].copy_from_slice(&f16::from_f32(d).to_bits().to_le_bytes()),
            None => quantize_block_ref(xb, ob),
        }
    }
}

/// One block by ggml's x86 activation recipe: the quants into `qs` (32 bytes), and the
/// unrounded scale `amax / 127` with the wrapping i32 sum of the quants before they were
/// packed; `None` (and `qs` untouched) when a value is not finite.
///
/// # Safety
/// The CPU must support AVX2; `xb` holds 32 values and `qs` 32 bytes.
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn activation_block_avx2(xb: &[f32], qs: &mut [u8]) -> Option<(f32, i32)> {
    // SAFETY: AVX2 is this function's own target feature; xb is one block.
    let (v, amax) = unsafe { load_block(xb) }?;
    let d = amax / 127.0;
    let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
    let idv = _mm256_set1_ps(id);
    let q = v.map(|v| {
        let p = _mm256_mul_ps(v, idv);
        let r = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(p);
        _mm256_cvtps_epi32(r)
    });
    let sum = crate::x86_64::hsum_i32(_mm256_add_epi32(
        _mm256_add_epi32(q[0], q[1]),
        _mm256_add_epi32(q[2], q[3]),
    ));
    // SAFETY: AVX2 as above; qs is the block's 32 quant bytes.
    unsafe { store_quants(q, qs) };
    Some((d, sum))
}

/// Dequantizes whole blocks with AVX2.
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn dequantize_avx2(q: &[u8], y: &mut [f32]) {
    assert_eq!(q.len() % BLOCK_BYTES, 0);
    assert_eq!(y.len(), q.len() / BLOCK_BYTES * QK8_0);
    for (qb, yb) in q.chunks_exact(BLOCK_BYTES).zip(y.chunks_exact_mut(QK8_0)) {
        let d = _mm256_set1_ps(f16::from_bits(u16::from_le_bytes([qb[0], qb[1]])).to_f32());
        for k in 0..4 {
            // SAFETY: qb[2..] has 32 bytes, so bytes 2+8k..2+8k+8 are in bounds for k < 4;
            // yb has 32 f32s, so the 8-lane store at 8k is in bounds.
            unsafe {
                let b = _mm_loadl_epi64(qb.as_ptr().add(2 + 8 * k).cast());
                let f = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b));
                _mm256_storeu_ps(yb.as_mut_ptr().add(8 * k), _mm256_mul_ps(f, d));
            }
        }
    }
}

impl crate::legacy::x86_64::Avx2Runs for super::Q8_0 {
    const SIGNED: bool = true;

    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn codes(p: *const u8, _sub: usize) -> __m256i {
        // SAFETY: the caller guarantees a whole block: the 32 quants at 2..34.
        unsafe { _mm256_loadu_si256(p.add(2).cast()) }
    }

    #[target_feature(enable = "avx2,f16c")]
    #[inline]
    unsafe fn scales8(ps: &[*const u8; crate::legacy::x86_64::ROWS]) -> (__m256, __m256) {
        // SAFETY: the caller guarantees whole blocks, which start with d.
        (
            unsafe { crate::legacy::x86_64::f16x8(ps, 0) },
            _mm256_setzero_ps(),
        )
    }
}

/// Packed tiles of 16 Q8_0 rows for the lane-order AVX-512 VNNI kernel
/// (`legacy::tiles::tile_lanes`): register k (64 bytes at 64k) lane r = values 4k..4k + 4
/// of row r's block, as signed bytes; then the 16 scales (f16).
impl crate::legacy::tiles::TileRuns for super::Q8_0 {
    const TILE_BLOCK_BYTES: usize = 512 + 32;
    const TILE_SIGNED: bool = true;
    const AVX2: bool = false;

    fn pack_block(blocks: &[&[u8]; crate::legacy::tiles::TILE_ROWS], out: &mut [u8]) {
        for (r, b) in blocks.iter().enumerate() {
            for k in 0..8 {
                out[64 * k + 4 * r..64 * k + 4 * r + 4].copy_from_slice(&b[2 + 4 * k..6 + 4 * k]);
            }
        }
        crate::legacy::tiles::pack_f16(blocks, 0, &mut out[512..544]);
    }

    #[target_feature(enable = "avx512f,avx512bw")]
    #[inline]
    unsafe fn tile_codes(p: *const u8, _sub: usize) -> [__m512i; 8] {
        // SAFETY: the caller guarantees a whole tile block: eight 64-byte registers first.
        std::array::from_fn(|k| unsafe { _mm512_loadu_si512(p.add(64 * k).cast()) })
    }

    #[target_feature(enable = "avx512f")]
    #[inline]
    unsafe fn tile_scales(p: *const u8) -> (__m512, __m512) {
        // SAFETY: the caller guarantees a whole tile block: d at 512.
        (
            unsafe { crate::legacy::tiles::tile_f16(p.add(512)) },
            _mm512_setzero_ps(),
        )
    }

    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn tile_codes8(p: *const u8, _sub: usize, half: usize) -> [__m256i; 8] {
        // SAFETY: the caller guarantees a whole tile block and half < 2.
        std::array::from_fn(|k| unsafe { _mm256_loadu_si256(p.add(64 * k + 32 * half).cast()) })
    }

    #[inline(always)]
    unsafe fn tile_code8(p: *const u8, k: usize, half: usize) -> __m256i {
        // SAFETY: the caller guarantees a whole tile block, half < 2 and k < 8, the CPU AVX.
        unsafe { _mm256_loadu_si256(p.add(64 * k + 32 * half).cast()) }
    }

    #[target_feature(enable = "avx2,f16c")]
    #[inline]
    unsafe fn tile_scales8(p: *const u8, half: usize) -> (__m256, __m256) {
        // SAFETY: the caller guarantees a whole tile block: d at 512, half < 2.
        (
            unsafe { crate::legacy::tiles::tile_f16_8(p.add(512), half) },
            _mm256_setzero_ps(),
        )
    }
}

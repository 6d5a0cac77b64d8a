//! f32 vector kernels: those of attention (the dot product of a query and a key, `y += s·x`
//! for the weighted sum of values, the F16 accumulator steps) and the gated activation of
//! the feed-forward blocks ([`swiglu_ref`]). Scalar references here; AVX2 + FMA versions in
//! `vector/x86_64.rs`, held to the references within [`crate::gemm::DOT_TOLERANCE`] of
//! `Σ |a·b|` by the tests. Each is a pure function of its inputs, so one query's result
//! does not depend on what else is computed beside it.

/// What a KV cache row holds: f32 values, or F16 values stored as F16 (half the bytes:
/// what llama.cpp's F16 cache keeps). The attention kernels read either; a value reads as
/// the same f32 either way (F16 converts to f32 exactly), so their bits do not depend on
/// the storage.
pub trait CacheValue: Copy + Send + Sync + 'static {
    /// The value as f32.
    fn value(self) -> f32;
    /// `k`'s [`crate::Kernels::attend_chunk_f16`] over rows of this type.
    fn attend_chunk_f16(k: &crate::Kernels) -> crate::AttendChunkOf<Self>;
    /// `k`'s [`crate::Kernels::fused_dots`] over keys of this type.
    fn fused_dots(k: &crate::Kernels) -> fn(&[f32], &[Self], usize, &mut [f32]);
    /// `k`'s [`crate::Kernels::fused_axpys`] over values of this type.
    fn fused_axpys(k: &crate::Kernels) -> fn(&mut [f32], &[f32], &[Self], usize);
}

impl CacheValue for f32 {
    #[inline(always)]
    fn value(self) -> f32 {
        self
    }
    fn attend_chunk_f16(k: &crate::Kernels) -> crate::AttendChunk {
        k.attend_chunk_f16
    }
    fn fused_dots(k: &crate::Kernels) -> fn(&[f32], &[f32], usize, &mut [f32]) {
        k.fused_dots
    }
    fn fused_axpys(k: &crate::Kernels) -> fn(&mut [f32], &[f32], &[f32], usize) {
        k.fused_axpys
    }
}

impl CacheValue for half::f16 {
    #[inline(always)]
    fn value(self) -> f32 {
        self.to_f32()
    }
    fn attend_chunk_f16(k: &crate::Kernels) -> crate::AttendChunkHalf {
        k.attend_chunk_f16_half
    }
    fn fused_dots(k: &crate::Kernels) -> fn(&[f32], &[half::f16], usize, &mut [f32]) {
        k.fused_dots_half
    }
    fn fused_axpys(k: &crate::Kernels) -> fn(&mut [f32], &[f32], &[half::f16], usize) {
        k.fused_axpys_half
    }
}

/// `Σ a_i · b_i`, in order.
///
/// # Panics
/// If the lengths differ.
pub fn dot_ref(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "dot lengths");
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// `y_i += s · x_i`, each one fused multiply-add (ggml's `ggml_vec_mad_f32`).
///
/// # Panics
/// If the lengths differ.
pub fn axpy_ref(y: &mut [f32], s: f32, x: &[f32]) {
    assert_eq!(y.len(), x.len(), "axpy lengths");
    for (o, &v) in y.iter_mut().zip(x) {
        *o = s.mul_add(v, *o);
    }
}

/// `out[p] = dot(q, keys[p·stride .. p·stride + q.len()])` for every `p < out.len()`:
/// one query against keys laid out at a fixed stride (a KV cache's rows), each exactly as
/// [`dot_ref`] computes it.
///
/// # Panics
/// If the last key does not fit in `keys`.
pub fn dots_ref(q: &[f32], keys: &[f32], stride: usize, out: &mut [f32]) {
    check_strided(q.len(), keys.len(), stride, out.len());
    for (p, o) in out.iter_mut().enumerate() {
        *o = dot_ref(q, &keys[p * stride..p * stride + q.len()]);
    }
}

/// `y += Σ_p weights[p] · values[p·stride .. p·stride + y.len()]`, position by position in
/// order, each step exactly as [`axpy_ref`] computes it.
///
/// # Panics
/// If the last value does not fit in `values`.
pub fn axpys_ref(y: &mut [f32], weights: &[f32], values: &[f32], stride: usize) {
    check_strided(y.len(), values.len(), stride, weights.len());
    for (p, &w) in weights.iter().enumerate() {
        axpy_ref(y, w, &values[p * stride..p * stride + y.len()]);
    }
}

/// `out[p]` = the sequential fused dot product of `q` and key `p` (`keys[p·stride ..]`):
/// `a = fma(q_d, k_d, a)` for d in order from `a = 0` — the score of llama.cpp's tiled
/// flash attention (`simd_gemm`, one lane per key).
///
/// # Panics
/// If the last key does not fit in `keys`.
pub fn fused_dots_ref<T: CacheValue>(q: &[f32], keys: &[T], stride: usize, out: &mut [f32]) {
    check_strided(q.len(), keys.len(), stride, out.len());
    for (p, o) in out.iter_mut().enumerate() {
        let key = &keys[p * stride..p * stride + q.len()];
        *o = q
            .iter()
            .zip(key)
            .fold(0.0f32, |a, (&x, &y)| x.mul_add(y.value(), a));
    }
}

/// `y_j = fma(w_p, values[p·stride + j], y_j)` for p in order: the weighted values of
/// llama.cpp's tiled flash attention, one fused step per value.
///
/// # Panics
/// If the last value does not fit in `values`.
pub fn fused_axpys_ref<T: CacheValue>(y: &mut [f32], weights: &[f32], values: &[T], stride: usize) {
    check_strided(y.len(), values.len(), stride, weights.len());
    let n = y.len();
    for (p, &w) in weights.iter().enumerate() {
        for (o, &v) in y.iter_mut().zip(&values[p * stride..p * stride + n]) {
            *o = w.mul_add(v.value(), *o);
        }
    }
}

/// `x` rounded to the nearest F16 value (ties to even), as f32.
#[inline]
pub fn round_f16(x: f32) -> f32 {
    half::f16::from_f32(x).to_f32()
}

/// Every value of `x` [`round_f16`]ed, by this CPU's [`crate::Kernels::scale_round_f16`]
/// with a scale of 1 (`v · 1 = v` for every value, a NaN quieted as the rounding quiets
/// it: the same bits; tested). A decode step rounds its queries so (and Kimi K3's MLA its
/// cache rows): one call per value through `half` took ~5 ns, ~0.5 ms of a Qwen3-0.6B
/// step with its keys and values.
pub fn round_f16s(x: &mut [f32]) {
    (crate::kernels().scale_round_f16)(x, 1.0)
}

/// `y_i = round_f16(y_i · s)`: an F16 accumulator rescaled (ggml's `ggml_vec_scale_f16`).
pub fn scale_round_f16_ref(y: &mut [f32], s: f32) {
    for v in y.iter_mut() {
        *v = round_f16(*v * s);
    }
}

/// `y_i = round_f16(fma(x_i, s, y_i))`: an F16 accumulator taking a weighted row as
/// ggml's `ggml_vec_mad_f16` does — its SIMD steps fuse, and so do its scalar leftovers
/// (the compiler contracts them; checked against llama.cpp's flash attention over rows of
/// 32 values, all leftovers).
///
/// # Panics
/// If the lengths differ.
pub fn mad_round_f16_ref<T: CacheValue>(y: &mut [f32], x: &[T], s: f32) {
    assert_eq!(y.len(), x.len(), "mad lengths");
    for (o, &v) in y.iter_mut().zip(x) {
        *o = round_f16(v.value().mul_add(s, *o));
    }
}

/// One query row over a chunk of positions by llama.cpp's one-chunk flash-attention recipe
/// with F16 values (ggml's `ggml_compute_forward_flash_attn_ext_f16_one_chunk`): per
/// position `p`, the score `s = dot_f16(q16, key_p) · scale`; on a new maximum `M` the
/// accumulator is rescaled by `ms = exp(M_old − M)` ([`scale_round_f16_ref`]), else the
/// value's weight is `vs = exp(s − M)`; the value row is added with weight `vs`
/// ([`mad_round_f16_ref`]; `vs = 1` on a new maximum) and `S = fma(S, ms, vs)`. `out`
/// (the accumulator, F16 values) starts at zero; returns `(M, S)` (`(-inf, 0)` for no
/// positions). Keys and values of position `p` start at `p · stride` of `keys` and
/// `values`; a key is `q16.len()` long, a value row `out.len()`. `exp` is libm's `expf`,
/// as ggml's.
///
/// # Panics
/// If a position's key or value lies outside its slice.
pub fn attend_chunk_f16_ref<T: CacheValue>(
    q16: &[f32],
    keys: &[T],
    values: &[T],
    stride: usize,
    positions: std::ops::Range<usize>,
    scale: f32,
    out: &mut [f32],
) -> (f32, f32) {
    check_strided(q16.len(), keys.len(), stride, positions.end);
    check_strided(out.len(), values.len(), stride, positions.end);
    let (d, r) = (q16.len(), out.len());
    let (mut m, mut sum) = (f32::NEG_INFINITY, 0.0f32);
    out.fill(0.0);
    for p in positions {
        let s = dot_f16_ref(q16, &keys[p * stride..p * stride + d]) * scale;
        let (mut ms, mut vs) = (1.0f32, 1.0f32);
        if s > m {
            let old = m;
            m = s;
            ms = (old - m).exp();
            scale_round_f16_ref(out, ms);
        } else {
            vs = (s - m).exp();
        }
        mad_round_f16_ref(out, &values[p * stride..p * stride + r], vs);
        sum = sum.mul_add(ms, vs);
    }
    (m, sum)
}

/// Elements per step of ggml's F16 and F32 dot products ([`dot_f16_ref`],
/// [`dot_f32_ggml_ref`]): four registers of 16.
pub const F16_DOT_STEP: usize = 64;

/// The whole steps of ggml's AVX-512 `ggml_vec_dot_f16` / `ggml_vec_dot_f32`: steps of
/// [`F16_DOT_STEP`] values fused into four 16-lane accumulators (accumulator `j` takes
/// values `16j..16j + 16` of each step), the accumulators added pairwise (`0 + 2`, `1 + 3`,
/// then the two), the 16 lanes reduced by [`crate::lanes::hsum16`]. Returns that sum and
/// how many values it covers.
fn ggml_step_sum<T: CacheValue>(a: &[f32], b: &[T]) -> (f32, usize) {
    assert_eq!(a.len(), b.len(), "dot lengths");
    let whole = a.len() / F16_DOT_STEP * F16_DOT_STEP;
    let mut acc = [[0.0f32; 16]; 4];
    for (sa, sb) in a[..whole]
        .chunks_exact(F16_DOT_STEP)
        .zip(b[..whole].chunks_exact(F16_DOT_STEP))
    {
        for (j, reg) in acc.iter_mut().enumerate() {
            for (l, lane) in reg.iter_mut().enumerate() {
                *lane = sa[16 * j + l].mul_add(sb[16 * j + l].value(), *lane);
            }
        }
    }
    let lanes: [f32; 16] =
        std::array::from_fn(|l| (acc[0][l] + acc[2][l]) + (acc[1][l] + acc[3][l]));
    (crate::lanes::hsum16(lanes), whole)
}

/// The dot product of two F16-valued vectors as ggml's `ggml_vec_dot_f16` computes it on
/// AVX-512 (what its flash attention scores a key with): whole steps of
/// [`F16_DOT_STEP`] values fused into four 16-lane accumulators (accumulator `j` takes
/// values `16j..16j + 16` of each step), added pairwise (`0 + 2`, `1 + 3`, then the two),
/// the lanes reduced by [`crate::lanes::hsum16`]; then the leftover values' products added
/// in f64; the result rounded to f32.
///
/// # Panics
/// If the lengths differ.
pub fn dot_f16_ref<T: CacheValue>(a: &[f32], b: &[T]) -> f32 {
    let (steps, whole) = ggml_step_sum(a, b);
    let mut sum = f64::from(steps);
    for (x, y) in a[whole..].iter().zip(&b[whole..]) {
        sum += f64::from(x * y.value());
    }
    sum as f32
}

/// The dot product of two f32 vectors as ggml's `ggml_vec_dot_f32` computes it on AVX-512
/// (the KDA recurrence's dots, `GATED_DELTA_NET`): the whole steps of [`dot_f16_ref`],
/// then each leftover product rounded and added to the f32 sum in order (unfused: checked
/// against llama.cpp's `GATED_DELTA_NET` with heads of 32, all leftovers).
///
/// # Panics
/// If the lengths differ.
pub fn dot_f32_ggml_ref(a: &[f32], b: &[f32]) -> f32 {
    let (mut sum, whole) = ggml_step_sum(a, b);
    for (x, y) in a[whole..].iter().zip(&b[whole..]) {
        sum += x * y;
    }
    sum
}

/// Elements [`swiglu_ref`] takes through the vectorised exponential, in groups of this many.
pub const SWIGLU_GROUP: usize = 16;

/// `e^x` as ggml's AVX-512 `ggml_v_expf` computes it (`docs/RUNTIME-MATH.md` §1.8): a
/// round-to-integer `n = round(x·log2 e)`, the remainder `b = x − n·ln 2` in two fused
/// steps, a degree-5 polynomial in fused steps, scaled by `2^n` with one rounding; `|n| >
/// 192` gives `+inf` (n > 0) or `+0`. Within 3 ulp of `e^x`, but not the same bits as a
/// libm `expf`: llama.cpp's gated activations use this one, so the targets do too.
#[inline]
pub fn ggml_expf(x: f32) -> f32 {
    let r = f32::from_bits(0x4b40_0000); // 0x1.8p23
    let z = x.mul_add(f32::from_bits(0x3fb8_aa3b), r); // log2 e
    let n = z - r;
    let b = (-n).mul_add(
        f32::from_bits(0x35bf_be8e),                  // ln 2, low part
        (-n).mul_add(f32::from_bits(0x3f31_7200), x), // ln 2, high part
    );
    if n.abs() > 192.0 {
        return if n <= 0.0 { 0.0 } else { f32::INFINITY };
    }
    let u = b * b;
    let j = f32::from_bits(0x3c07_2010)
        .mul_add(b, f32::from_bits(0x3d2b_9f17))
        .mul_add(
            u,
            f32::from_bits(0x3e2a_af33).mul_add(b, f32::from_bits(0x3eff_fedb)),
        )
        .mul_add(u, f32::from_bits(0x3f7f_fff6).mul_add(b, 1.0));
    scale_pow2(j, n)
}

/// `j · 2^n` rounded once, for `|n| ≤ 192` an integer (what AVX-512's `scalef` gives): two
/// exact powers of two, the first product exact because `j` is near 1.
#[inline]
fn scale_pow2(j: f32, n: f32) -> f32 {
    if n.is_nan() || j.is_nan() {
        return j + n;
    }
    let n = n as i32;
    let half = n / 2;
    j * pow2(half) * pow2(n - half)
}

/// `2^e` for `|e| ≤ 96` (a normal f32).
#[inline]
fn pow2(e: i32) -> f32 {
    f32::from_bits(((e + 127) as u32) << 23)
}

/// `gate_i = silu(gate_i) · up_i` (SwiGLU) as ggml's `ggml_vec_swiglu_f32` computes it with
/// AVX-512: each whole group of [`SWIGLU_GROUP`] elements as `x / (1 + ggml_expf(−x)) · up`,
/// the leftover elements with libm's `expf` (its scalar `ggml_silu_f32`).
///
/// # Panics
/// If the lengths differ.
pub fn swiglu_ref(gate: &mut [f32], up: &[f32]) {
    assert_eq!(gate.len(), up.len(), "swiglu lengths");
    let grouped = gate.len() - gate.len() % SWIGLU_GROUP;
    for (i, (g, &u)) in gate.iter_mut().zip(up).enumerate() {
        let e = if i < grouped {
            ggml_expf(-*g)
        } else {
            (-*g).exp()
        };
        *g = *g / (1.0 + e) * u;
    }
}

/// Row `count − 1` of `len` values at `stride` lies inside `total` values.
pub(crate) fn check_strided(len: usize, total: usize, stride: usize, count: usize) {
    if count > 0 {
        let end = (count - 1)
            .checked_mul(stride)
            .and_then(|s| s.checked_add(len));
        assert!(
            end.is_some_and(|e| e <= total),
            "{count} rows of {len} at stride {stride} do not fit in {total} values"
        );
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod x86_64;

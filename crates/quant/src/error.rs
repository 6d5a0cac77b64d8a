//! Quantization error sums, defined so that every kernel gives the same bits.
//!
//! For a reference `x` and its round trip `y`, element `i` contributes `e = y − x` (an
//! f32 subtraction) as `e²` and `x²` (both squared in f64, which is exact for f32 inputs)
//! to lane `i mod 16`; a call's total is lane 0 + lane 1 + … + lane 15, added left to
//! right. The sum order is part of the definition, so the AVX2 kernel (which keeps the 16
//! lanes in four registers) and the scalar reference agree to the last bit, and the
//! converter's report does not depend on the CPU. Callers add call totals in a fixed order.

/// Lanes of the defined sum order.
pub const LANES: usize = 16;

/// Sums of squared errors and squared references, and the largest absolute error.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ErrorSums {
    /// Σ (y − x)².
    pub sq_err: f64,
    /// Σ x².
    pub sq_ref: f64,
    /// max |y − x| (f32).
    pub max_abs: f32,
}

impl ErrorSums {
    /// Adds another call's sums (the caller fixes the order).
    pub fn add(&mut self, other: &ErrorSums) {
        self.sq_err += other.sq_err;
        self.sq_ref += other.sq_ref;
        self.max_abs = max_nan(self.max_abs, other.max_abs);
    }

    /// sqrt(Σe² / Σx²); 0 when both are 0.
    pub fn relative_rmse(&self) -> f64 {
        if self.sq_err == 0.0 {
            0.0
        } else {
            (self.sq_err / self.sq_ref).sqrt()
        }
    }
}

/// The larger of two errors; NaN when either is (an undefined error stays undefined).
#[inline]
fn max_nan(a: f32, b: f32) -> f32 {
    if a.is_nan() || b.is_nan() {
        f32::NAN
    } else if b > a {
        b
    } else {
        a
    }
}

/// The scalar reference.
///
/// # Panics
/// If the lengths differ.
pub fn error_sums_ref(x: &[f32], y: &[f32]) -> ErrorSums {
    assert_eq!(x.len(), y.len());
    let mut err = [0.0f64; LANES];
    let mut r = [0.0f64; LANES];
    let mut max_abs = 0.0f32;
    for (i, (&a, &b)) in x.iter().zip(y).enumerate() {
        let e = b - a;
        max_abs = max_nan(max_abs, e.abs());
        let e = f64::from(e);
        let a = f64::from(a);
        err[i % LANES] += e * e;
        r[i % LANES] += a * a;
    }
    ErrorSums {
        sq_err: err.iter().fold(0.0, |s, v| s + v),
        sq_ref: r.iter().fold(0.0, |s, v| s + v),
        max_abs,
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod x86_64 {
    use std::arch::x86_64::*;

    use super::{ErrorSums, LANES};

    /// AVX2 version of [`super::error_sums_ref`], same lane order.
    ///
    /// # Safety
    /// The CPU must support AVX2.
    #[target_feature(enable = "avx2")]
    pub(crate) unsafe fn error_sums_avx2(x: &[f32], y: &[f32]) -> ErrorSums {
        assert_eq!(x.len(), y.len());
        let sign = _mm256_set1_ps(-0.0);
        let mut err = [_mm256_setzero_pd(); 4];
        let mut r = [_mm256_setzero_pd(); 4];
        let mut mx = _mm256_setzero_ps();
        // max_ps drops NaN depending on operand order; track NaN apart, as the reference does.
        let mut nan = _mm256_setzero_ps();
        let n16 = x.len() / LANES * LANES;
        let mut i = 0;
        while i < n16 {
            for h in 0..2 {
                // SAFETY: i + 16 <= n16 <= len, so 8 lanes at i + 8h are in bounds of both.
                let (xv, yv) = unsafe {
                    (
                        _mm256_loadu_ps(x.as_ptr().add(i + 8 * h)),
                        _mm256_loadu_ps(y.as_ptr().add(i + 8 * h)),
                    )
                };
                let e = _mm256_sub_ps(yv, xv);
                mx = _mm256_max_ps(mx, _mm256_andnot_ps(sign, e));
                nan = _mm256_or_ps(nan, _mm256_cmp_ps::<_CMP_UNORD_Q>(e, e));
                let halves_e = [
                    _mm256_cvtps_pd(_mm256_castps256_ps128(e)),
                    _mm256_cvtps_pd(_mm256_extractf128_ps::<1>(e)),
                ];
                let halves_x = [
                    _mm256_cvtps_pd(_mm256_castps256_ps128(xv)),
                    _mm256_cvtps_pd(_mm256_extractf128_ps::<1>(xv)),
                ];
                for k in 0..2 {
                    let lane = 2 * h + k;
                    err[lane] = _mm256_add_pd(err[lane], _mm256_mul_pd(halves_e[k], halves_e[k]));
                    r[lane] = _mm256_add_pd(r[lane], _mm256_mul_pd(halves_x[k], halves_x[k]));
                }
            }
            i += LANES;
        }
        let mut el = [0.0f64; LANES];
        let mut rl = [0.0f64; LANES];
        for k in 0..4 {
            // SAFETY: el and rl have 16 f64s; the 4-lane store at 4k is in bounds for k < 4.
            unsafe {
                _mm256_storeu_pd(el.as_mut_ptr().add(4 * k), err[k]);
                _mm256_storeu_pd(rl.as_mut_ptr().add(4 * k), r[k]);
            }
        }
        let mut m = [0.0f32; 8];
        // SAFETY: m has 8 f32s.
        unsafe { _mm256_storeu_ps(m.as_mut_ptr(), mx) };
        let mut max_abs = m.iter().fold(0.0f32, |a, &b| super::max_nan(a, b));
        if _mm256_movemask_ps(nan) != 0 {
            max_abs = f32::NAN;
        }
        for (j, (&a, &b)) in x[n16..].iter().zip(&y[n16..]).enumerate() {
            let e = b - a;
            max_abs = super::max_nan(max_abs, e.abs());
            el[j] += f64::from(e) * f64::from(e);
            rl[j] += f64::from(a) * f64::from(a);
        }
        ErrorSums {
            sq_err: el.iter().fold(0.0, |s, v| s + v),
            sq_ref: rl.iter().fold(0.0, |s, v| s + v),
            max_abs,
        }
    }
}

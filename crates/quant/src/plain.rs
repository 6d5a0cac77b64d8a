//! The plain formats' shared kernels (F32, F16, BF16: one value per element): their row
//! kernels load eight weights, convert them to f32 once and share them among a group of
//! columns. The formats themselves are [`crate::fp32`], [`crate::fp16`], [`crate::bf16`].

/// The plain formats' dot product, in the order their kernels sum it: element `k` of each
/// whole run of eight goes to lane `k mod 8` of accumulator `(k / 8) mod 2` by a fused
/// multiply-add; the two accumulators are added lane by lane and reduced by
/// [`crate::lanes::hsum8`]; the last `cols mod 8` products are added one by one.
pub(crate) fn dot_lanes(w: impl Fn(usize) -> f32, x: &[f32]) -> f32 {
    let mut acc = [[0.0f32; 8]; 2];
    let whole = x.len() / 8 * 8;
    for k in 0..whole {
        let a = &mut acc[(k / 8) % 2][k % 8];
        *a = w(k).mul_add(x[k], *a);
    }
    let mut s = crate::lanes::hsum8(std::array::from_fn(|l| acc[0][l] + acc[1][l]));
    for (j, &xv) in x.iter().enumerate().skip(whole) {
        s += w(j) * xv;
    }
    s
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod x86_64;

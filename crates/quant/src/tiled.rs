//! llama.cpp's order for the products of a prompt with k- and i-quant matrices.
//!
//! From 8 activation columns on (`ggml_tiled_min_batch`), llama.cpp's CPU backend
//! multiplies Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S,
//! IQ1_S and IQ1_M matrices with its tiled kernels (`ggml-cpu/tiled/`), not with the
//! one-column `vec_dot` its decode steps use — except matrices it re-lays at load (on x86:
//! Q4_K always, Q2_K with AVX-512, both when the row count is a multiple of 8), which keep
//! their re-laid kernels. The tiled kernels' order, per row and column and per super-block
//! `i` in order (see docs/LLAMA-CPP.md §6):
//!
//! ```text
//! r   = (S1_i as f32) · d_w            // S1: Σ_s scale_s · Σ_j (value_j · q_j), exact i32
//! r   = fma(-dmin_w, S2_i as f32, r)   // formats with mins: S2 = Σ_s min_s · Σ_j q_j
//! acc = fma(r, d_x, acc)               // from acc = +0
//! ```
//!
//! where `d_w` is the block's f16 scale times the format's power of two (the real value of
//! a weight is `d_w · scale_s · value_j`), `d_x` the Q8_K block's scale. A power of two
//! moved between `d_w` and `S1` changes no bit (both roundings scale with it), so each
//! format gives its own exact integers ([`TiledOrder::super_sums`]).
//!
//! dspark uses this order only where llama.cpp does: in a prompt's forward
//! ([`crate::gemm::prompt_order`]) with at least [`MIN_COLUMNS`] columns. Verify forwards
//! keep the one-column order, so a verify of n columns still equals n decode steps.

use crate::columns::Columns;
use crate::format::BlockFormat;

/// Columns from which llama.cpp's prompt products take the tiled kernels.
pub const MIN_COLUMNS: usize = 8;

/// Values per super-block.
const QK_K: usize = 256;

/// One super-block's part of a tiled product: `d_w`, `dmin_w` (0 without mins) and the
/// exact integer sums `S1`, `S2` (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct SuperSums {
    pub d: f32,
    pub dmin: f32,
    pub s1: i32,
    pub s2: i32,
}

/// A format llama.cpp's tiled kernels multiply.
pub(crate) trait TiledOrder: BlockFormat {
    /// Bytes per super-block.
    const SUPER_BYTES: usize;
    /// Whether blocks carry mins (the `fma(-dmin, S2, r)` step).
    const HAS_MIN: bool;

    /// Super-block `block`'s sums with one Q8_K block: quants `xq` (256) and their sums of
    /// sixteen `bsums` (16).
    fn super_sums(block: &[u8], xq: &[i8], bsums: &[i16]) -> SuperSums;
}

/// The tiled order's product of one row with column `c` of `x` (Q8_K).
pub(crate) fn dot_ref<F: TiledOrder>(row: &[u8], x: &Columns<'_>, c: usize) -> f32 {
    let (xd, xq) = x.q8(c);
    let bs = x.q8_bsums(c);
    let mut acc = 0.0f32;
    for (i, b) in row.chunks_exact(F::SUPER_BYTES).enumerate() {
        let s = F::super_sums(b, &xq[i * QK_K..(i + 1) * QK_K], &bs[16 * i..16 * (i + 1)]);
        let mut r = s.s1 as f32 * s.d;
        if F::HAS_MIN {
            r = (-s.dmin).mul_add(s.s2 as f32, r);
        }
        acc = r.mul_add(xd[i], acc);
    }
    acc
}

/// `Σ lanes`, wrapping as llama.cpp's i32 sums do (no real block comes near).
pub(crate) fn lane_total(lanes: &[i32; 8]) -> i32 {
    lanes.iter().fold(0i32, |a, &l| a.wrapping_add(l))
}

#[cfg(test)]
mod tests {
    use dspark_gguf::GgmlType;

    use crate::gemm::{gemm_with, prompt_order};
    use crate::{Activation, Columns, Kernels, Matrix};

    /// Every kernel set, the scalar references first.
    fn kernel_sets() -> Vec<Kernels> {
        [Some(Kernels::scalar()), Kernels::avx2(), Kernels::avx512()]
            .into_iter()
            .flatten()
            .collect()
    }

    fn normal(seed: u64, len: usize) -> Vec<f32> {
        let mut s = seed;
        (0..len)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 4.0
            })
            .collect()
    }

    /// `gemm_with` of `w` by `n` columns, in or out of [`prompt_order`], column-major.
    fn product(k: &Kernels, w: &Matrix<'_>, x: &[f32], prompt: bool) -> Vec<f32> {
        let n = x.len() / w.cols;
        let mut y = vec![0.0f32; n * w.rows];
        if prompt {
            prompt_order(|| gemm_with(k, w, x, &mut y));
        } else {
            gemm_with(k, w, x, &mut y);
        }
        y
    }

    /// The dot product `dot` gives every element of a column-major product.
    fn by(
        dot: crate::format::DotFn,
        w: &Matrix<'_>,
        x: &Columns<'_>,
        cols: impl Fn(usize) -> bool,
        y: &[f32],
    ) -> bool {
        (0..x.count()).filter(|&c| cols(c)).all(|c| {
            (0..w.rows).all(|r| dot(w.row(r), x, c).to_bits() == y[c * w.rows + r].to_bits())
        })
    }

    /// The tiled types take the tiled order in a prompt's products from 8 columns on, and
    /// only there; the two orders differ on these rows (or the test would prove nothing).
    #[test]
    fn prompts_of_eight_columns_or_more_take_the_tiled_order() {
        let tiled = [
            GgmlType::Q3_K,
            GgmlType::Q5_K,
            GgmlType::Q6_K,
            GgmlType::IQ4_XS,
            GgmlType::IQ2_XXS,
            GgmlType::IQ3_S,
            GgmlType::IQ1_S,
            GgmlType::IQ1_M,
        ];
        for k in kernel_sets() {
            for ty in tiled {
                let f = *k.format(ty).unwrap();
                let (rows, cols) = (20, 512);
                let q = f.sample(rows * cols, 7);
                let w = Matrix::new(ty, rows, cols, &q).unwrap();
                let tiled_dot = f.prompt_dot_ref.expect("a tiled type has a prompt order");
                for n in [7, 8, 11] {
                    let x = normal(n as u64, n * cols);
                    let xc = Columns::with(&k, Activation::Q8_K, &x, cols);
                    let prompt = product(&k, &w, &x, true);
                    let plain = product(&k, &w, &x, false);
                    assert!(
                        by(f.dot_ref, &w, &xc, |_| true, &plain),
                        "{} {ty} n {n}",
                        k.isa
                    );
                    if n >= super::MIN_COLUMNS {
                        assert!(by(tiled_dot, &w, &xc, |_| true, &prompt), "{} {ty}", k.isa);
                        assert_ne!(prompt, plain, "{ty}: the orders differ somewhere");
                    } else {
                        assert_eq!(prompt, plain, "{ty}: fewer than 8 columns");
                    }
                }
            }
        }
    }

    /// Q4_K matrices of a multiple of 8 rows are re-laid by llama.cpp on AVX2 CPUs: from
    /// four columns on, whole groups of four take its re-laid order and the rest the
    /// one-column order; other row counts take the tiled order from 8 columns.
    #[test]
    fn relaid_q4_k_splits_columns_in_fours() {
        let Some(k) = Kernels::avx2() else { return };
        let f = *k.format(GgmlType::Q4_K).unwrap();
        let grouped = f.relaid_prompt_dot_ref.unwrap();
        let cols = 512;
        for (rows, n) in [(16, 6), (16, 3), (12, 9)] {
            let q = f.sample(rows * cols, 3);
            let w = Matrix::new(GgmlType::Q4_K, rows, cols, &q).unwrap();
            let x = normal(rows as u64 + n as u64, n * cols);
            let xc = Columns::with(&k, Activation::Q8_K, &x, cols);
            let y = product(&k, &w, &x, true);
            match (rows, n) {
                (16, 6) => {
                    assert!(by(grouped, &w, &xc, |c| c < 4, &y));
                    assert!(by(f.dot_ref, &w, &xc, |c| c >= 4, &y));
                }
                (16, 3) => assert!(by(f.dot_ref, &w, &xc, |_| true, &y)),
                _ => assert!(by(f.prompt_dot_ref.unwrap(), &w, &xc, |_| true, &y)),
            }
        }
    }

    /// The tiled order is a dot product: close to the f64 one of the dequantized rows and
    /// the activations' quantized values.
    #[test]
    fn the_tiled_order_is_close_to_the_exact_product() {
        let k = Kernels::scalar();
        for ty in [
            GgmlType::Q2_K,
            GgmlType::Q4_K,
            GgmlType::Q6_K,
            GgmlType::IQ2_S,
        ] {
            let f = *k.format(ty).unwrap();
            let cols = 1024;
            let q = f.sample(4 * cols, 11);
            let w = Matrix::new(ty, 4, cols, &q).unwrap();
            let mut wf = vec![0.0f32; 4 * cols];
            (f.dequantize_ref)(&q, &mut wf);
            let x = normal(5, cols);
            let xc = Columns::with(&k, Activation::Q8_K, &x, cols);
            let (xd, xq) = xc.q8(0);
            for r in 0..4 {
                let exact: f64 = (0..cols)
                    .map(|v| {
                        f64::from(wf[r * cols + v]) * f64::from(xd[v / 256]) * f64::from(xq[v])
                    })
                    .sum();
                let scale: f64 = (0..cols)
                    .map(|v| {
                        (f64::from(wf[r * cols + v]) * f64::from(xd[v / 256]) * f64::from(xq[v]))
                            .abs()
                    })
                    .sum();
                let got = f64::from((f.prompt_dot_ref.unwrap())(w.row(r), &xc, 0));
                assert!(
                    (got - exact).abs() <= 1e-5 * scale,
                    "{ty} row {r}: {got} vs {exact}"
                );
            }
        }
    }
}

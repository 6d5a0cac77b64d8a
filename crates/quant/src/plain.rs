//! The plain formats' shared kernels (F32 and F16: one value per element; BF16 sums in its
//! own order, `crate::bf16`): their row
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

/// llama.cpp's plain products that llamafile's `tinyBLAS` does not take (per-expert
/// products, and matrices whose rows are not a multiple of 4 or whose columns are not of
/// [`TINYBLAS_COLS`]) run ggml's `vec_dot` of the format instead: each row decoded to f32
/// once (`decode`), then `dot` with each column (the columns already rounded to the
/// format's activation). `dot` is [`crate::vector::dot_f32_ggml_ref`] for F32 and
/// [`crate::vector::dot_f16_ref`] for F16, or their kernels.
pub(crate) fn vec_rows_with(
    w: &crate::Matrix<'_>,
    first: usize,
    x: &crate::columns::Columns<'_>,
    out: &mut [f32],
    decode: impl Fn(&[u8], &mut [f32]),
    dot: impl Fn(&[f32], &[f32]) -> f32,
) {
    let n = x.count();
    let mut row = vec![0.0f32; w.cols];
    for (i, row_out) in out.chunks_exact_mut(n).enumerate() {
        decode(w.row(first + i), &mut row);
        for (c, o) in row_out.iter_mut().enumerate() {
            *o = dot(&row, x.f32(c));
        }
    }
}

/// The `vec_dot` reference of one row and column (see [`vec_rows_with`]).
pub(crate) fn vec_dot_with(
    row: &[u8],
    x: &crate::columns::Columns<'_>,
    c: usize,
    dtype: crate::SourceDtype,
    dot: fn(&[f32], &[f32]) -> f32,
) -> f32 {
    let mut w = vec![0.0f32; x.len()];
    crate::float::decode(dtype, row, &mut w);
    dot(&w, x.f32(c))
}

/// The column multiple llamafile's `tinyBLAS` needs of an F32 or F16 matrix (its AVX-512
/// build: 16 values a register); its rows must be a multiple of 4.
pub const TINYBLAS_COLS: usize = 16;

#[cfg(target_arch = "x86_64")]
pub(crate) mod x86_64;

#[cfg(test)]
mod tests {
    use dspark_gguf::GgmlType;

    use crate::gemm::{gemm_local_routed, gemm_with, prompt_order};
    use crate::{Kernels, Matrix};

    fn kernel_sets() -> Vec<Kernels> {
        [Some(Kernels::scalar()), Kernels::avx2(), Kernels::avx512()]
            .into_iter()
            .flatten()
            .collect()
    }

    fn words(b: &[u8]) -> Vec<u32> {
        b.chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    }

    /// F32, F16 and BF16 products as llama.cpp makes them (fixtures by its CPU backend,
    /// `testdata/README.md`): one column through ggml's `vec_dot` (160 values: leftovers
    /// past whole steps of 64), a prompt's five columns through llamafile's `tinyBLAS`; and
    /// the rules around them — a verify's five columns are five one-column steps, a
    /// per-expert product and a matrix of 6 rows (not a multiple of 4) take `vec_dot` in a
    /// prompt too.
    #[test]
    fn plain_products_equal_llama_cpp_s_vec_dot_and_tinyblas() {
        let x: Vec<f32> = words(include_bytes!("../testdata/columns_5x160.f32"))
            .into_iter()
            .map(f32::from_bits)
            .collect();
        // (type, weights, one column's products, five columns' products)
        type Case = (GgmlType, &'static [u8], &'static [u8], &'static [u8]);
        let cases: [Case; 3] = [
            (
                GgmlType::F32,
                include_bytes!("../testdata/f32_16x160.blocks"),
                include_bytes!("../testdata/f32_16x160.vec_dot.f32"),
                include_bytes!("../testdata/f32_16x160.tinyblas.f32"),
            ),
            (
                GgmlType::F16,
                include_bytes!("../testdata/f16_16x160.blocks"),
                include_bytes!("../testdata/f16_16x160.vec_dot.f32"),
                include_bytes!("../testdata/f16_16x160.tinyblas.f32"),
            ),
            (
                GgmlType::BF16,
                include_bytes!("../testdata/bf16_16x160.blocks"),
                include_bytes!("../testdata/bf16_16x160.vec_dot.f32"),
                include_bytes!("../testdata/bf16_16x160.tinyblas.f32"),
            ),
        ];
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        for (ty, blocks, one, five) in cases {
            let w = Matrix::new(ty, 16, 160, blocks).unwrap();
            let row_bytes = blocks.len() / 16;
            let w6 = Matrix::new(ty, 6, 160, &blocks[..6 * row_bytes]).unwrap();
            for k in kernel_sets() {
                let mut y = vec![0.0f32; 16];
                gemm_with(&k, &w, &x[..160], &mut y);
                assert_eq!(bits(&y), words(one), "{} {ty}: one column", k.isa);
                let mut y = vec![0.0f32; 16 * 5];
                prompt_order(|| gemm_with(&k, &w, &x, &mut y));
                assert_eq!(
                    bits(&y),
                    words(five),
                    "{} {ty}: a prompt's five columns",
                    k.isa
                );
                // One column at a time: the five steps a verify must equal.
                let steps: Vec<f32> = x
                    .chunks_exact(160)
                    .flat_map(|c| {
                        let mut y = vec![0.0f32; 16];
                        gemm_with(&k, &w, c, &mut y);
                        y
                    })
                    .collect();
                let mut y = vec![0.0f32; 16 * 5];
                gemm_with(&k, &w, &x, &mut y);
                assert_eq!(bits(&y), bits(&steps), "{} {ty}: a verify", k.isa);
                let mut y6 = vec![0.0f32; 6 * 5];
                prompt_order(|| gemm_with(&k, &w6, &x, &mut y6));
                let want6: Vec<f32> = steps
                    .chunks_exact(16)
                    .flat_map(|c| c[..6].to_vec())
                    .collect();
                assert_eq!(
                    bits(&y6),
                    bits(&want6),
                    "{} {ty}: 6 rows in a prompt",
                    k.isa
                );
            }
            let mut y = vec![0.0f32; 16 * 5];
            gemm_local_routed(&w, &x, &mut y, true);
            let mut want = vec![0.0f32; 16 * 5];
            gemm_with(crate::kernels(), &w, &x, &mut want);
            assert_eq!(
                bits(&y),
                bits(&want),
                "{ty}: a per-expert product in a prompt"
            );
        }
    }
}

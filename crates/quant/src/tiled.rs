//! llama.cpp's orders for the products of a prompt with k- and i-quant matrices.
//!
//! From 8 activation columns on (`ggml_tiled_min_batch`), llama.cpp's CPU backend
//! multiplies Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S,
//! IQ1_S and IQ1_M matrices with its tiled kernels (`ggml-cpu/tiled/`), not with the
//! one-column `vec_dot` its decode steps use — except matrices it re-lays at load (on x86:
//! Q4_K always, Q2_K with AVX-512, both when the row count is a multiple of 8), which take
//! their re-laid gemm from 4 columns. The tiled kernels' order, per row and column and per
//! super-block `i` in order (docs/LLAMA-CPP.md §6):
//!
//! ```text
//! r   = (S1_i as f32) · d_w            // S1: Σ_v scale · value_v · q_v, exact i32
//! r   = fma(-dmin_w, S2_i as f32, r)   // formats with mins: S2 = Σ_t min_t · (Q8_K sum t)
//! acc = fma(r, d_x, acc)               // from acc = +0
//! ```
//!
//! where `d_w` is the block's f16 scale times the format's power of two (a weight's value
//! is `d_w · scale · value`), `d_x` the Q8_K block's scale. The re-laid gemms' order
//! (`gemm_dot_ref`): per super-block and per chunk of 64 (Q4_K) or 128 (Q2_K) values,
//! `acc = fma(isum, d_w · d_x, acc)` and `accm = fma(msum, dmin_w · d_x, accm)`; the result
//! `acc − accm`; the columns past the last whole group of four take the one-column order.
//!
//! Every format here decodes a super-block into one shape (`Decoded`: each value a signed
//! byte, a scale and a min per run of sixteen), so one driver per order serves them all, a
//! super-block decoded once per row and reused by every column; the integer sums come from
//! the scalar reference (`sums_ref`) or an AVX2 kernel with the same integers
//! (`tiled/x86_64.rs`). dspark uses these orders only where llama.cpp does: in a prompt's
//! forward ([`crate::gemm::prompt_order`]) with at least [`MIN_COLUMNS`] columns. Verify
//! forwards keep the one-column order, so a verify of n columns still equals n decode
//! steps.

use std::ops::Range;

use crate::columns::Columns;
use crate::format::BlockFormat;
use crate::matrix::Matrix;

/// Columns from which llama.cpp's prompt products take the tiled kernels.
pub const MIN_COLUMNS: usize = 8;

/// Values per super-block.
pub(crate) const QK_K: usize = 256;

/// One super-block as the prompt orders read it: `Σ_v sc[v / 16] · w[v] · q[v]` is its
/// `S1` (or a chunk's `isum`) and `Σ_t min[t] · bsums[t]` its `S2` (`msum`); `d` and `dmin`
/// are the f32 scales those multiply.
#[derive(Clone, Debug)]
pub(crate) struct Decoded {
    /// Every value as a signed byte, `|w| ≤ 127`.
    pub w: [i8; QK_K],
    /// The scale of each run of sixteen values.
    pub sc: [i16; 16],
    /// The min of each run of sixteen values (zero without mins).
    pub min: [i16; 16],
    pub d: f32,
    pub dmin: f32,
}

impl Default for Decoded {
    fn default() -> Decoded {
        Decoded {
            w: [0; QK_K],
            sc: [0; 16],
            min: [0; 16],
            d: 0.0,
            dmin: 0.0,
        }
    }
}

/// A format llama.cpp's prompt kernels multiply.
pub(crate) trait TiledOrder: BlockFormat {
    /// Bytes per super-block.
    const SUPER_BYTES: usize;
    /// Whether blocks carry mins (the `fma(-dmin, S2, r)` step).
    const HAS_MIN: bool;

    /// Decodes one whole super-block into `out` (every field).
    fn decode(block: &[u8], out: &mut Decoded);
}

/// The exact integer sums of values `range` (whole runs of sixteen) of a decoded
/// super-block with one Q8_K block (quants `xq`, sums of sixteen `bs`): `(isum, msum)`,
/// wrapping as llama.cpp's i32 sums do (no real block comes near).
pub(crate) fn sums_ref(dec: &Decoded, xq: &[i8], bs: &[i16], range: Range<usize>) -> (i32, i32) {
    let runs = range.start / 16..range.end / 16;
    let isum = range.fold(0i32, |a, v| {
        a.wrapping_add(i32::from(dec.sc[v / 16]) * i32::from(dec.w[v]) * i32::from(xq[v]))
    });
    let msum = runs.fold(0i32, |a, t| {
        a.wrapping_add(i32::from(dec.min[t]) * i32::from(bs[t]))
    });
    (isum, msum)
}

/// How a driver takes a super-block's integer sums ([`sums_ref`]'s integers).
pub(crate) trait Sums {
    /// The sums of values `range` of `dec` with one Q8_K block.
    ///
    /// # Safety
    /// The CPU must have the implementation's instruction set.
    unsafe fn sums(dec: &Decoded, xq: &[i8], bs: &[i16], range: Range<usize>) -> (i32, i32);
}

/// [`sums_ref`] as a [`Sums`].
pub(crate) struct RefSums;

impl Sums for RefSums {
    #[inline(always)]
    unsafe fn sums(dec: &Decoded, xq: &[i8], bs: &[i16], range: Range<usize>) -> (i32, i32) {
        sums_ref(dec, xq, bs, range)
    }
}

/// The tiled order's float steps over a row's decoded super-blocks with column `c`.
///
/// # Safety
/// `sums` must be safe to call on this CPU.
#[inline(always)]
unsafe fn tiled_column<S: Sums, const HAS_MIN: bool>(
    decoded: &[Decoded],
    x: &Columns<'_>,
    c: usize,
) -> f32 {
    let (xd, xq) = x.q8(c);
    let bs = x.q8_bsums(c);
    let mut acc = 0.0f32;
    for (i, dec) in decoded.iter().enumerate() {
        // SAFETY: the caller's guarantee.
        let (s1, s2) = unsafe {
            S::sums(
                dec,
                &xq[i * QK_K..(i + 1) * QK_K],
                &bs[16 * i..16 * (i + 1)],
                0..QK_K,
            )
        };
        let mut r = s1 as f32 * dec.d;
        if HAS_MIN {
            r = (-dec.dmin).mul_add(s2 as f32, r);
        }
        acc = r.mul_add(xd[i], acc);
    }
    acc
}

/// The re-laid gemm order's float steps over a row's decoded super-blocks with column `c`,
/// chunks of `chunk` values.
///
/// # Safety
/// `sums` must be safe to call on this CPU.
#[inline(always)]
unsafe fn gemm_column<S: Sums>(
    decoded: &[Decoded],
    x: &Columns<'_>,
    c: usize,
    chunk: usize,
) -> f32 {
    let (xd, xq) = x.q8(c);
    let bs = x.q8_bsums(c);
    let (mut acc, mut accm) = (0.0f32, 0.0f32);
    for (i, dec) in decoded.iter().enumerate() {
        let (sd, sm) = (dec.d * xd[i], dec.dmin * xd[i]);
        let (xqi, bsi) = (&xq[i * QK_K..(i + 1) * QK_K], &bs[16 * i..16 * (i + 1)]);
        for v in (0..QK_K).step_by(chunk) {
            // SAFETY: the caller's guarantee.
            let (isum, msum) = unsafe { S::sums(dec, xqi, bsi, v..v + chunk) };
            acc = (isum as f32).mul_add(sd, acc);
            accm = (msum as f32).mul_add(sm, accm);
        }
    }
    acc - accm
}

/// A row's super-blocks decoded ([`TiledOrder::decode`]) into `into`.
fn decode_row<F: TiledOrder>(row: &[u8], into: &mut Vec<Decoded>) {
    let nb = row.len() / F::SUPER_BYTES;
    into.resize(nb, Decoded::default());
    for (b, dec) in row.chunks_exact(F::SUPER_BYTES).zip(into.iter_mut()) {
        F::decode(b, dec);
    }
}

/// Rows `first..first + out.len() / n` · every column in the tiled order, row-major into
/// `out`, each super-block decoded once per row.
///
/// # Safety
/// The CPU must have `S`'s instruction set.
#[inline(always)]
pub(crate) unsafe fn rows_tiled<F: TiledOrder, S: Sums>(
    w: &Matrix<'_>,
    first: usize,
    x: &Columns<'_>,
    out: &mut [f32],
) {
    let n = x.count();
    let mut decoded = Vec::new();
    for (i, row_out) in out.chunks_exact_mut(n).enumerate() {
        decode_row::<F>(w.row(first + i), &mut decoded);
        for (c, o) in row_out.iter_mut().enumerate() {
            // SAFETY: the caller's guarantee.
            *o = unsafe {
                if F::HAS_MIN {
                    tiled_column::<S, true>(&decoded, x, c)
                } else {
                    tiled_column::<S, false>(&decoded, x, c)
                }
            };
        }
    }
}

/// Rows `first..` · every column of a prompt with a matrix llama.cpp re-lays: the columns
/// in whole groups of four in the re-laid gemm's order (chunks of `chunk` values), the
/// others (at most three) by `F::dot_ref`, as llama.cpp's re-laid kernels split them.
///
/// # Safety
/// The CPU must have `S`'s instruction set.
#[inline(always)]
pub(crate) unsafe fn rows_relaid<F: TiledOrder, S: Sums>(
    w: &Matrix<'_>,
    first: usize,
    x: &Columns<'_>,
    out: &mut [f32],
    chunk: usize,
) {
    let n = x.count();
    let whole = n - n % 4;
    let mut decoded = Vec::new();
    for (i, row_out) in out.chunks_exact_mut(n).enumerate() {
        let row = w.row(first + i);
        decode_row::<F>(row, &mut decoded);
        for (c, o) in row_out.iter_mut().enumerate() {
            *o = if c < whole {
                // SAFETY: the caller's guarantee.
                unsafe { gemm_column::<S>(&decoded, x, c, chunk) }
            } else {
                F::dot_ref(row, x, c)
            };
        }
    }
}

/// The tiled order's product of one row with column `c` of `x` (Q8_K): the reference.
pub(crate) fn dot_ref<F: TiledOrder>(row: &[u8], x: &Columns<'_>, c: usize) -> f32 {
    let mut decoded = Vec::new();
    decode_row::<F>(row, &mut decoded);
    // SAFETY: `sums_ref` is portable Rust.
    unsafe {
        if F::HAS_MIN {
            tiled_column::<RefSums, true>(&decoded, x, c)
        } else {
            tiled_column::<RefSums, false>(&decoded, x, c)
        }
    }
}

/// The re-laid gemm order's product of one row with column `c` (chunks of `CHUNK`): the
/// reference.
pub(crate) fn gemm_dot_ref<F: TiledOrder, const CHUNK: usize>(
    row: &[u8],
    x: &Columns<'_>,
    c: usize,
) -> f32 {
    let mut decoded = Vec::new();
    decode_row::<F>(row, &mut decoded);
    // SAFETY: `sums_ref` is portable Rust.
    unsafe { gemm_column::<RefSums>(&decoded, x, c, CHUNK) }
}

/// Puts `F`'s prompt orders in its kernel-table row: the references, the scalar kernels
/// (decoding once per row) and, when `cpu` has AVX2, the AVX2 ones; with `CHUNK > 0` also
/// the re-laid gemm's, chunks of `CHUNK` values (formats llama.cpp re-lays).
pub(crate) fn install<F: TiledOrder, const CHUNK: usize>(
    k: &mut crate::format::FormatKernels,
    cpu: crate::cpu::Detected,
) {
    k.prompt_dot_ref = Some(dot_ref::<F>);
    k.prompt_rows = Some(|w, first, x, out| {
        // SAFETY: `sums_ref` is portable Rust.
        unsafe { rows_tiled::<F, RefSums>(w, first, x, out) }
    });
    if CHUNK > 0 {
        k.relaid_prompt_dot_ref = Some(gemm_dot_ref::<F, CHUNK>);
        k.relaid_prompt_rows = Some(|w, first, x, out| {
            // SAFETY: `sums_ref` is portable Rust.
            unsafe { rows_relaid::<F, RefSums>(w, first, x, out, CHUNK) }
        });
    }
    #[cfg(target_arch = "x86_64")]
    if cpu.has_avx2() {
        k.prompt_rows = Some(|w, first, x, out| {
            // SAFETY: built only from a `Detected` with AVX2 and FMA.
            unsafe { x86_64::rows_tiled_avx2::<F>(w, first, x, out) }
        });
        if CHUNK > 0 {
            k.relaid_prompt_rows = Some(|w, first, x, out| {
                // SAFETY: built only from a `Detected` with AVX2 and FMA.
                unsafe { x86_64::rows_relaid_avx2::<F>(w, first, x, out, CHUNK) }
            });
        }
    }
    let _ = cpu;
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod x86_64;

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

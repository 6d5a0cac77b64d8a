//! Every fast kernel against its scalar reference: bytes for quantizers, bits for sums.

use dspark_gguf::GgmlType;
use dspark_testkit::rng::SplitMix64 as Rng;

use crate::{error, q8_0, vector, Kernels};

/// Any finite f32 bit pattern.
fn any_finite(rng: &mut Rng) -> f32 {
    loop {
        let x = f32::from_bits(rng.next_u64() as u32);
        if x.is_finite() {
            return x;
        }
    }
}

/// Blocks that stress the rounding and scale rules.
fn edge_blocks() -> Vec<[f32; 32]> {
    let mut blocks = Vec::new();
    blocks.push([0.0; 32]);
    blocks.push([-0.0; 32]);
    let mut mixed = [0.0f32; 32];
    for (i, v) in mixed.iter_mut().enumerate() {
        *v = if i % 2 == 0 { -0.0 } else { 0.0 };
    }
    blocks.push(mixed);
    // amax 127 makes d = 1: products are the values, so .5 values are exact ties.
    for scale in [1.0f32, 2.0, 0.5, 1024.0] {
        let mut b = [0.0f32; 32];
        b[0] = 127.0 * scale;
        for (i, v) in b.iter_mut().enumerate().skip(1) {
            *v = ((i as f32) * 4.0 - 63.5) * scale;
        }
        b[1] = 0.5 * scale;
        b[2] = -0.5 * scale;
        b[3] = 126.5 * scale;
        b[4] = -126.5 * scale;
        blocks.push(b);
    }
    // Tiny and huge amax: f32-subnormal d, f16-subnormal d, d rounding to f16 zero, 1/d
    // overflowing, d overflowing f16.
    for amax in [
        1e-45f32,
        1e-40,
        3e-39,
        2.9e-39,
        3.7e-37,
        1e-30,
        1e-10,
        3.79e-6,
        1e-6,
        6.1e-5,
        1.0,
        65504.0,
        8.3e6,
        1e20,
        3.4e38,
        f32::MAX,
    ] {
        let mut b = [0.0f32; 32];
        for (i, v) in b.iter_mut().enumerate() {
            *v = amax * ((i as f32) - 15.5) / 16.0;
        }
        b[31] = -amax;
        blocks.push(b);
        let mut s = [0.0f32; 32];
        s[17] = amax;
        blocks.push(s);
    }
    blocks
}

fn check_quantize(k: &Kernels, x: &[f32]) {
    let mut fast = vec![0u8; x.len() / 32 * 34];
    let mut reference = vec![0u8; fast.len()];
    let q8 = k.format(GgmlType::Q8_0).expect("Q8_0 is in the table");
    (q8.quantize.expect("Q8_0 has a quantizer"))(x, &mut fast);
    q8_0::quantize_ref(x, &mut reference);
    for (i, (f, r)) in fast.chunks(34).zip(reference.chunks(34)).enumerate() {
        assert_eq!(
            f,
            r,
            "{}: block {i} differs for input {:?}",
            k.isa,
            &x[i * 32..i * 32 + 32]
        );
    }
    let mut yf = vec![0.0f32; x.len()];
    let mut yr = vec![0.0f32; x.len()];
    (q8.dequantize)(&fast, &mut yf);
    q8_0::dequantize_ref(&reference, &mut yr);
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&yf), bits(&yr), "{}: dequantize differs", k.isa);
}

fn fast_kernels() -> Vec<Kernels> {
    let mut v = vec![Kernels::scalar()];
    match Kernels::avx2() {
        Some(k) => v.push(k),
        None => eprintln!("AVX2 not available on this CPU: only the scalar kernels run"),
    }
    match Kernels::avx512() {
        Some(k) => v.push(k),
        None => eprintln!("AVX-512 VNNI not available on this CPU: its kernel is not tested"),
    }
    v
}

#[test]
fn quantize_matches_reference_on_edge_blocks() {
    let x: Vec<f32> = edge_blocks().into_iter().flatten().collect();
    for k in fast_kernels() {
        check_quantize(&k, &x);
    }
}

#[test]
fn quantize_matches_reference_on_random_blocks() {
    let mut rng = Rng(7);
    for k in fast_kernels() {
        let x: Vec<f32> = (0..32 * 4096).map(|_| rng.normal() * 0.02).collect();
        check_quantize(&k, &x);
        let x: Vec<f32> = (0..32 * 4096).map(|_| any_finite(&mut rng)).collect();
        check_quantize(&k, &x);
        // BF16-valued input, as converted from checkpoints.
        let x: Vec<f32> = (0..32 * 4096)
            .map(|_| f32::from_bits(rng.normal().to_bits() & 0xffff_0000))
            .collect();
        check_quantize(&k, &x);
    }
}

/// ggml's x86 activation quantizers: every kernel table's bytes equal each kind's scalar
/// reference, on edge, tie and random blocks (Q8_0's and Q8_1's `127 / amax` with ties to
/// even and saturating packs; Q8_K's portable recipe).
#[test]
fn activation_quantizers_match_their_references() {
    let mut rng = Rng(11);
    let mut inputs: Vec<Vec<f32>> = vec![edge_blocks().into_iter().flatten().collect()];
    inputs.push((0..32 * 4096).map(|_| rng.normal() * 0.02).collect());
    inputs.push((0..32 * 4096).map(|_| any_finite(&mut rng)).collect());
    // Exact ties: amax 127 gives id = 1, so k + 0.5 rounds to the even neighbour.
    let ties: Vec<f32> = (0..32 * 8)
        .map(|i| {
            if i % 32 == 0 {
                127.0
            } else {
                (i % 32) as f32 - 16.5
            }
        })
        .collect();
    inputs.push(ties.clone());
    let mut nonfinite: Vec<f32> = (0..32 * 64).map(|i| (i as f32).sin()).collect();
    for at in [3, 40, 95, 300, 1000] {
        nonfinite[at] = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY][at % 3];
    }
    inputs.push(nonfinite);
    for k in fast_kernels() {
        assert_eq!(
            k.activations.map(|a| a.activation),
            crate::ACTIVATIONS.map(|(a, _)| a),
            "{}",
            k.isa
        );
        for a in &k.activations {
            let (bl, bb) = (
                a.activation.block_len(),
                a.activation.block_type().unwrap().type_size() as usize,
            );
            for x in &inputs {
                let x = &x[..x.len() / bl * bl];
                let mut reference = vec![0u8; x.len() / bl * bb];
                (a.quantize_ref)(x, &mut reference);
                let mut fast = vec![0u8; reference.len()];
                (a.quantize)(x, &mut fast);
                assert_eq!(fast, reference, "{} {:?}", k.isa, a.activation);
            }
        }
    }
    // Ties to even, not away from zero: 1.5 → 2, 2.5 → 2, −0.5 → 0 (the reference
    // quantizer gives 3 for 2.5).
    let mut out = vec![0u8; 34 * 8];
    q8_0::quantize_activations_ref(&ties, &mut out);
    let q = |j: usize| out[2 + j] as i8;
    assert_eq!(
        (q(16), q(17), q(18), q(19)),
        (0, 0, 2, 2),
        "{:?}",
        &ties[16..20]
    );
}

#[test]
fn activation_block_sizes_are_the_gguf_table_s() {
    use crate::Activation;
    assert_eq!(
        Activation::Q8_0.block_type().unwrap().type_size() as usize,
        q8_0::BLOCK_BYTES
    );
    assert_eq!(
        Activation::Q8_1.block_type().unwrap().type_size() as usize,
        crate::q8_1::BLOCK_BYTES
    );
    assert_eq!(
        Activation::Q8_K.block_type().unwrap().type_size() as usize,
        crate::q8_k::BLOCK_BYTES
    );
    assert_eq!(Activation::Q8_K.block_len(), crate::q8_k::QK_K);
}

#[test]
fn quantize_falls_back_on_non_finite_blocks() {
    let mut x: Vec<f32> = (0..32 * 6).map(|i| (i as f32).sin()).collect();
    x[3] = f32::NAN;
    x[40] = f32::INFINITY;
    x[95] = f32::NEG_INFINITY;
    x[100] = f32::NAN;
    x[127] = f32::NAN;
    for k in fast_kernels() {
        check_quantize(&k, &x);
    }
    // Infinite amax: d = inf → f16 inf, id = 0, q = 0 (x·0) except inf·0 = NaN → 0.
    let mut r = vec![0u8; x.len() / 32 * 34];
    q8_0::quantize_ref(&x, &mut r);
    assert_eq!(u16::from_le_bytes([r[34], r[35]]), 0x7c00);
    assert!(r[36..68].iter().all(|&b| b == 0));
}

#[test]
fn error_sums_match_reference_bit_for_bit_at_every_length() {
    let mut rng = Rng(11);
    for k in fast_kernels() {
        for len in 0..=70 {
            for offset in 0..3 {
                let x: Vec<f32> = (0..len + offset).map(|_| rng.normal()).collect();
                let y: Vec<f32> = x.iter().map(|v| v + rng.normal() * 1e-3).collect();
                let f = (k.error_sums)(&x[offset..], &y[offset..]);
                let r = error::error_sums_ref(&x[offset..], &y[offset..]);
                assert_eq!(
                    f.sq_err.to_bits(),
                    r.sq_err.to_bits(),
                    "{} len {len}",
                    k.isa
                );
                assert_eq!(
                    f.sq_ref.to_bits(),
                    r.sq_ref.to_bits(),
                    "{} len {len}",
                    k.isa
                );
                assert_eq!(
                    f.max_abs.to_bits(),
                    r.max_abs.to_bits(),
                    "{} len {len}",
                    k.isa
                );
            }
        }
        let x: Vec<f32> = (0..100_003).map(|_| rng.normal()).collect();
        let y: Vec<f32> = x.iter().map(|v| v * 1.001).collect();
        assert_eq!((k.error_sums)(&x, &y), error::error_sums_ref(&x, &y));
    }
}

/// Huge blocks dequantize through an infinite f16 scale to ±inf and NaN: the sums and
/// the maximum must still agree (NaN as NaN, whatever its payload).
#[test]
fn error_sums_agree_on_infinite_and_nan_round_trips() {
    let same = |a: f64, b: f64| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan());
    for k in fast_kernels() {
        for nan_at in [None, Some(0), Some(5), Some(17), Some(40)] {
            let x: Vec<f32> = (0..48).map(|i| i as f32 * 1e36).collect();
            let mut y: Vec<f32> = x.iter().map(|v| v * 1.5).collect();
            if let Some(i) = nan_at {
                y[i] = f32::NAN;
            }
            y[3] = f32::INFINITY;
            let (f, r) = ((k.error_sums)(&x, &y), error::error_sums_ref(&x, &y));
            assert!(
                same(f.sq_err, r.sq_err) && same(f.sq_ref, r.sq_ref),
                "{} {nan_at:?}",
                k.isa
            );
            assert!(
                same(f64::from(f.max_abs), f64::from(r.max_abs)),
                "{} {nan_at:?}: {} vs {}",
                k.isa,
                f.max_abs,
                r.max_abs
            );
            assert_eq!(r.max_abs.is_nan(), nan_at.is_some());
        }
    }
}

#[test]
fn relative_rmse_of_q8_0_on_gaussian_weights_is_about_half_a_percent() {
    let mut rng = Rng(3);
    let x: Vec<f32> = (0..32 * 10_000).map(|_| rng.normal() * 0.02).collect();
    let mut q = vec![0u8; x.len() / 32 * 34];
    q8_0::quantize_ref(&x, &mut q);
    let mut y = vec![0.0f32; x.len()];
    q8_0::dequantize_ref(&q, &mut y);
    let e = error::error_sums_ref(&x, &y).relative_rmse();
    assert!((0.003..0.008).contains(&e), "relative RMSE {e}");
}

/// Every format of the table, on every kernel set this CPU has: quantize (where dspark
/// writes the format) and dequantize against the references (bytes and bits), the row
/// kernel against `dot_ref` bit for bit, the dot product close to the dequantized weights'
/// f32 dot, and batched columns equal to single columns bit for bit. A format added to the
/// table is covered here without a new test.
pub(crate) mod formats {
    use super::{fast_kernels, Rng};
    use crate::gemm::{gemm_with, Columns, Matrix};
    use crate::{FormatKernels, FORMATS};

    /// Random bytes of a `rows × cols` matrix of format `f`: quantized normal values for a
    /// format dspark writes, else random blocks whose scales are finite (every other bit
    /// pattern of a block is a valid encoding).
    pub(crate) fn matrix(f: &FormatKernels, rows: usize, cols: usize, rng: &mut Rng) -> Vec<u8> {
        if let Some(quantize) = f.quantize_ref {
            let mut q = vec![0u8; f.row_bytes(cols) * rows];
            let v: Vec<f32> = (0..rows * cols).map(|_| rng.normal() * 0.05).collect();
            quantize(&v, &mut q);
            return q;
        }
        f.sample(rows * cols, rng.next_u64())
    }

    /// Row lengths to test: odd ones for one-value formats, whole-block ones otherwise.
    fn sizes(f: &FormatKernels) -> Vec<usize> {
        match f.block_len() {
            1 => (1..70).chain([4096, 14337]).collect(),
            b => [1, 2, 3, 7, 8, 9, 17, 33, 128, 448]
                .iter()
                .map(|n| n * b)
                .collect(),
        }
    }

    fn bits(v: &[f32]) -> Vec<u32> {
        v.iter().map(|x| x.to_bits()).collect()
    }

    #[test]
    fn the_table_has_one_row_per_format_and_every_kernel_set_all_of_them() {
        for k in fast_kernels() {
            let types: Vec<_> = k.formats.iter().map(|f| f.ty).collect();
            assert_eq!(types, FORMATS.map(|(t, _)| t).to_vec(), "{}", k.isa);
            for f in &k.formats {
                assert!(f.block_len() > 0 && f.block_bytes() > 0, "{}", f.ty);
                for s in f.scales {
                    let at = match s {
                        crate::Scale::F16(at) => at + 2,
                        crate::Scale::E8m0(at) => at + 1,
                        crate::Scale::F16Nibbles(at) => at + 8,
                    };
                    assert!(
                        at <= f.block_bytes(),
                        "{}: scale {s:?} outside the block",
                        f.ty
                    );
                }
            }
        }
    }

    #[test]
    fn quantize_and_dequantize_equal_the_references() {
        let mut rng = Rng(3);
        for k in fast_kernels() {
            for f in &k.formats {
                for n in sizes(f) {
                    let reference = match (f.quantize, f.quantize_ref) {
                        (Some(fast), Some(slow)) => {
                            let x: Vec<f32> = (0..n).map(|_| rng.normal()).collect();
                            let (mut a, mut b) =
                                (vec![0u8; f.row_bytes(n)], vec![0u8; f.row_bytes(n)]);
                            fast(&x, &mut a);
                            slow(&x, &mut b);
                            assert_eq!(a, b, "{} {} n {n}", k.isa, f.ty);
                            b
                        }
                        (None, None) => matrix(f, 1, n, &mut rng),
                        _ => panic!("{}: a quantizer without its reference", f.ty),
                    };
                    let (mut a, mut b) = (vec![0.0f32; n], vec![0.0f32; n]);
                    (f.dequantize)(&reference, &mut a);
                    (f.dequantize_ref)(&reference, &mut b);
                    assert_eq!(bits(&a), bits(&b), "{} {} n {n}", k.isa, f.ty);
                }
            }
        }
    }

    /// A format's dot products are its references', bit for bit, in every kernel set: its
    /// `rows`, and where it has them its `vec_dot` and `tinyBLAS` orders, for one to eight
    /// columns (the kernels' passes differ with the count).
    #[test]
    fn fast_dot_gives_the_bits_of_the_reference() {
        let mut rng = Rng(21);
        for k in fast_kernels() {
            for f in &k.formats {
                assert_eq!(f.vec_rows.is_some(), f.vec_dot_ref.is_some(), "{}", f.ty);
                assert_eq!(
                    f.sgemm_rows.is_some(),
                    f.sgemm_dot_ref.is_some(),
                    "{}",
                    f.ty
                );
                let orders = [
                    Some(("rows", f.rows, f.dot_ref)),
                    f.vec_rows.zip(f.vec_dot_ref).map(|(r, d)| ("vec", r, d)),
                    f.sgemm_rows
                        .zip(f.sgemm_dot_ref)
                        .map(|(r, d)| ("sgemm", r, d)),
                ];
                for cols in sizes(f) {
                    let rows = 3;
                    let w = matrix(f, rows, cols, &mut rng);
                    let m = Matrix::new(f.ty, rows, cols, &w).unwrap();
                    let x: Vec<f32> = (0..8 * cols).map(|_| rng.normal()).collect();
                    for n in [1, 2, 5, 8] {
                        let xc = Columns::with(&k, f.activation, &x[..n * cols], cols);
                        for (order, kernel, dot) in orders.iter().flatten() {
                            if *order == "rows" && n > 2 && cols > 33 * f.block_len() {
                                continue; // the long rows are covered by two columns
                            }
                            let mut fast = vec![0.0f32; rows * n];
                            kernel(&m, 0, &xc, &mut fast);
                            for r in 0..rows {
                                for c in 0..n {
                                    let want = dot(m.row(r), &xc, c);
                                    assert_eq!(
                                        fast[r * n + c].to_bits(),
                                        want.to_bits(),
                                        "{} {} {order} cols {cols} n {n} row {r} column {c}: {} vs {want}",
                                        k.isa,
                                        f.ty,
                                        fast[r * n + c]
                                    );
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    /// llama.cpp re-lays a matrix (and dspark takes its re-laid order) only when the
    /// format, the row count and the matrix allow it: a plain product of a matrix of 16
    /// rows gives `dot_ref`'s bits where the format re-lays 8-row groups, the `vec_dot`
    /// order's once the matrix is marked not re-laid or its rows are not whole groups.
    #[test]
    fn matrices_llama_cpp_does_not_re_lay_take_the_vec_dot_order() {
        let mut rng = Rng(31);
        for k in fast_kernels() {
            for f in k.formats.iter().filter(|f| f.vec_dot_ref.is_some()) {
                let cols = 5 * f.block_len().max(32);
                for rows in [16, 13] {
                    let data = matrix(f, rows, cols, &mut rng);
                    let plain = Matrix::new(f.ty, rows, cols, &data).unwrap();
                    let x: Vec<f32> = (0..cols).map(|_| rng.normal()).collect();
                    let xc = Columns::with(&k, f.activation, &x, cols);
                    for m in [plain, plain.not_relaid()] {
                        let mut y = vec![0.0f32; rows];
                        gemm_with(&k, &m, &x, &mut y);
                        let relaid =
                            f.relaid_rows > 0 && rows % f.relaid_rows == 0 && m.relayable();
                        assert_eq!(f.relaid(&m), relaid, "{} {}", k.isa, f.ty);
                        let dot = if relaid {
                            f.dot_ref
                        } else {
                            f.vec_dot_ref.unwrap()
                        };
                        for (r, got) in y.iter().enumerate() {
                            let want = dot(m.row(r), &xc, 0);
                            assert_eq!(got.to_bits(), want.to_bits(), "{} {} row {r}", k.isa, f.ty);
                        }
                    }
                }
            }
        }
    }

    /// The dot product of a row with quantized activations stays close to the f32 dot of
    /// the dequantized row with the unquantized column: the activation's own rounding
    /// (half a step of 127 per block, or none for the float kinds) bounds the gap.
    #[test]
    fn dot_is_close_to_the_dequantized_f32_dot() {
        let mut rng = Rng(77);
        let k = crate::kernels();
        for f in &k.formats {
            let cols = 8 * f.block_len().max(256);
            let w = matrix(f, 4, cols, &mut rng);
            let m = Matrix::new(f.ty, 4, cols, &w).unwrap();
            let x: Vec<f32> = (0..cols).map(|_| rng.normal()).collect();
            let xc = Columns::new(f.activation, &x, cols);
            let mut y = [0.0f32; 4];
            (f.rows)(&m, 0, &xc, &mut y);
            for (r, &got) in y.iter().enumerate() {
                let mut wf = vec![0.0f32; cols];
                (f.dequantize_ref)(m.row(r), &mut wf);
                let exact: f64 = wf
                    .iter()
                    .zip(xc.f32(0))
                    .map(|(a, b)| f64::from(a * b))
                    .sum();
                let scale: f64 = wf
                    .iter()
                    .zip(&x)
                    .map(|(a, b)| f64::from((a * b).abs()))
                    .sum();
                let tol = match f.activation.block_len() {
                    1 => 1e-5 * scale,
                    _ => 0.02 * scale,
                } + 1e-12;
                assert!(
                    (f64::from(got) - exact).abs() <= tol,
                    "{} row {r}: {got} vs {exact} (scale {scale})",
                    f.ty
                );
            }
        }
    }

    /// The numerics contract: a column's result does not depend on how many columns are
    /// computed with it, nor on the thread count.
    #[test]
    fn batched_columns_equal_single_columns_bit_for_bit() {
        let mut rng = Rng(5);
        let rows = 37;
        for k in fast_kernels() {
            for f in &k.formats {
                let cols = 9 * f.block_len().max(32);
                let data = matrix(f, rows, cols, &mut rng);
                let w = Matrix::new(f.ty, rows, cols, &data).unwrap();
                let x: Vec<f32> = (0..16 * cols).map(|_| rng.normal()).collect();
                let mut singles = vec![0.0f32; 16 * rows];
                for c in 0..16 {
                    gemm_with(
                        &k,
                        &w,
                        &x[c * cols..(c + 1) * cols],
                        &mut singles[c * rows..(c + 1) * rows],
                    );
                }
                for n in 1..=16 {
                    for threads in [1, 3] {
                        let pool = rayon::ThreadPoolBuilder::new()
                            .num_threads(threads)
                            .build()
                            .unwrap();
                        let mut y = vec![0.0f32; n * rows];
                        pool.install(|| gemm_with(&k, &w, &x[..n * cols], &mut y));
                        assert_eq!(
                            bits(&y),
                            bits(&singles[..n * rows]),
                            "{} {} n {n} threads {threads}",
                            k.isa,
                            f.ty
                        );
                    }
                }
            }
        }
    }

    /// One column over tasks of many rows (the one-column AVX2 lane path runs a task's
    /// two halves in runs of rows per call, the last run shorter, an odd last row alone)
    /// gives each row its reference's bits, on one thread and two.
    #[test]
    fn one_column_over_long_tasks_gives_the_reference_bits() {
        let mut rng = Rng(43);
        for k in fast_kernels() {
            for f in &k.formats {
                let cols = 2 * f.block_len().max(32);
                for rows in [1001, 1090] {
                    let data = matrix(f, rows, cols, &mut rng);
                    let w = Matrix::new(f.ty, rows, cols, &data).unwrap();
                    let x: Vec<f32> = (0..cols).map(|_| rng.normal()).collect();
                    let xc = crate::columns::Columns::with(&k, f.activation, &x, cols);
                    let dot = f.step_dot_ref(&w);
                    let want: Vec<f32> = (0..rows).map(|r| dot(w.row(r), &xc, 0)).collect();
                    for threads in [1, 2] {
                        let pool = rayon::ThreadPoolBuilder::new()
                            .num_threads(threads)
                            .build()
                            .unwrap();
                        let mut y = vec![0.0f32; rows];
                        pool.install(|| gemm_with(&k, &w, &x, &mut y));
                        assert_eq!(
                            bits(&y),
                            bits(&want),
                            "{} {} rows {rows} threads {threads}",
                            k.isa,
                            f.ty
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn non_finite_values_are_found_in_every_format() {
        let mut rng = Rng(8);
        for f in &crate::Kernels::scalar().formats {
            let n = 4 * f.block_len().max(32);
            let q = matrix(f, 1, n, &mut rng);
            assert_eq!((f.first_non_finite)(&q), None, "{}", f.ty);
            if f.block_len() == 1 {
                // Plain formats: every value is its own encoding.
                let quantize = f.quantize_ref.expect("plain formats are written");
                let x: Vec<f32> = (0..n).map(|i| i as f32 * 0.01 - 1.0).collect();
                for bad in [f32::INFINITY, f32::NEG_INFINITY, f32::NAN] {
                    let mut y = x.clone();
                    y[n / 2 + 1] = bad;
                    let mut q = vec![0u8; f.row_bytes(n)];
                    quantize(&y, &mut q);
                    assert_eq!((f.first_non_finite)(&q), Some(n / 2 + 1), "{} {bad}", f.ty);
                }
                continue;
            }
            // Block formats: each scale field of a later block made non-finite in turn.
            for s in f.scales {
                for (block, pattern) in [(1usize, 0u16), (3, 1)] {
                    let mut bad = q.clone();
                    let b = &mut bad[block * f.block_bytes()..(block + 1) * f.block_bytes()];
                    match *s {
                        crate::Scale::F16(at) => {
                            let v: u16 = [0x7C00, 0xFE01][pattern as usize];
                            b[at..at + 2].copy_from_slice(&v.to_le_bytes());
                        }
                        crate::Scale::E8m0(at) => b[at] = 0xFF,
                        crate::Scale::F16Nibbles(_) => {
                            s.set_f16_bits(b, [0x7C00, 0xFE01][pattern as usize])
                        }
                    }
                    assert_eq!(
                        (f.first_non_finite)(&bad),
                        Some(block * f.block_len()),
                        "{} {s:?}",
                        f.ty
                    );
                }
            }
        }
    }

    #[test]
    fn matrix_sizes_are_checked_and_unknown_types_have_no_kernel() {
        use dspark_gguf::GgmlType;
        assert!(Matrix::new(GgmlType::Q8_0, 2, 33, &[0u8; 68]).is_none());
        assert!(Matrix::new(GgmlType::F32, 2, 3, &[0u8; 23]).is_none());
        assert!(Matrix::new(GgmlType::BF16, 2, 3, &[0u8; 12]).is_some());
        assert!(Matrix::new(GgmlType::F32, usize::MAX, 3, &[0u8; 12]).is_none());
        // No wildcard reads an unknown type as another: types without a module have no row.
        for ty in GgmlType::all().filter(|t| !crate::matrix_types().contains(t)) {
            let bytes = vec![0u8; ty.type_size() as usize];
            let m = Matrix::new(ty, 1, ty.block_size() as usize, &bytes).unwrap();
            assert!(m.format().is_none(), "{ty}");
        }
    }
}

/// The Q8_0 kernels give the scalar reference's bits (ggml's lane order) for any number
/// of columns, rows of any block count, and weight bytes of -128 (which ggml's quantizer
/// never writes but a file may hold), run on one thread or split across three.
#[test]
fn q8_0_kernels_give_the_reference_bits() {
    use crate::gemm::{gemm_with, Matrix};
    let mut rng = Rng(91);
    for cols in [32, 256, 288, 544, 800, 1824, 4128] {
        let rows = 19;
        let v: Vec<f32> = (0..rows * cols).map(|_| rng.normal()).collect();
        let mut q = vec![0u8; rows * cols / 32 * 34];
        q8_0::quantize_ref(&v, &mut q);
        for (i, b) in q.iter_mut().enumerate() {
            if i % 34 >= 2 && i % 11 == 0 {
                *b = 0x80;
            }
        }
        let w = Matrix::new(GgmlType::Q8_0, rows, cols, &q).unwrap();
        let x: Vec<f32> = (0..17 * cols).map(|_| rng.normal() * 2.0).collect();
        for n in (1..=9).chain([16, 17]) {
            let run = |k: &Kernels| {
                let mut y = vec![0.0f32; n * rows];
                gemm_with(k, &w, &x[..n * cols], &mut y);
                y.iter().map(|f| f.to_bits()).collect::<Vec<_>>()
            };
            let want = run(&Kernels::scalar());
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(3)
                .build()
                .unwrap();
            for k in fast_kernels() {
                assert_eq!(run(&k), want, "{} cols {cols} n {n}", k.isa);
                assert_eq!(
                    pool.install(|| run(&k)),
                    want,
                    "{} 3 threads cols {cols} n {n}",
                    k.isa
                );
            }
        }
    }
}

/// The attention vector kernels against their references: the dot product within the
/// gemm tolerance of `Σ |a·b|`, `y += s·x` within one rounding per element.
/// The strided kernels are their one-row kernels in a loop, bit for bit, for every
/// kernel set, and refuse a last row outside the buffer.
#[test]
fn strided_vector_kernels_equal_their_one_row_kernels() {
    let mut rng = Rng(56);
    for k in fast_kernels() {
        for (len, stride, count) in [
            (64, 128, 37),
            (128, 256, 21),
            (128, 128, 3),
            (16, 16, 5),
            (13, 40, 9),
            (64, 64, 0),
            (8, 8, 1),
        ] {
            let keys: Vec<f32> = (0..stride * count.max(1)).map(|_| rng.normal()).collect();
            let q: Vec<f32> = (0..len).map(|_| rng.normal()).collect();
            let mut out = vec![0.0; count];
            (k.dots_f32)(&q, &keys, stride, &mut out);
            for (p, o) in out.iter().enumerate() {
                assert_eq!(
                    o.to_bits(),
                    (k.dot_f32)(&q, &keys[p * stride..p * stride + len]).to_bits()
                );
            }
            let w: Vec<f32> = (0..count).map(|_| rng.normal()).collect();
            let (mut y1, mut y2) = (q.clone(), q.clone());
            (k.axpys_f32)(&mut y1, &w, &keys, stride);
            for (p, &wp) in w.iter().enumerate() {
                (k.axpy_f32)(&mut y2, wp, &keys[p * stride..p * stride + len]);
            }
            assert_eq!(
                y1.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                y2.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
            );
        }
        let short = vec![0.0f32; 100];
        let r = std::panic::catch_unwind(|| {
            let mut out = vec![0.0; 3];
            (k.dots_f32)(&[0.0; 8], &short, 48, &mut out)
        });
        assert!(r.is_err(), "{}: a row past the end must be refused", k.isa);
    }
}

/// The f32 vector kernels: `dot_f32` within tolerance of the in-order sum; ggml's order
/// (`dot_f32_ggml`) and the fused axpy bit for bit their references, and close to the sums.
#[test]
fn vector_kernels_are_within_tolerance_of_the_references() {
    let mut rng = Rng(55);
    for k in fast_kernels() {
        for n in (0..70).chain([127, 128, 129, 1000]) {
            let a: Vec<f32> = (0..n).map(|_| rng.normal()).collect();
            let b: Vec<f32> = (0..n).map(|_| rng.normal()).collect();
            let scale: f32 = a.iter().zip(&b).map(|(x, y)| (x * y).abs()).sum::<f32>() + 1e-30;
            let (f, r) = ((k.dot_f32)(&a, &b), vector::dot_ref(&a, &b));
            assert!(
                (f - r).abs() <= crate::gemm::DOT_TOLERANCE * scale,
                "{} n {n}: {f} vs {r}",
                k.isa
            );
            // ggml's order and ggml's fused axpy: the same bits as the references.
            let (f, r) = ((k.dot_f32_ggml)(&a, &b), vector::dot_f32_ggml_ref(&a, &b));
            assert_eq!(
                f.to_bits(),
                r.to_bits(),
                "{} ggml dot n {n}: {f} vs {r}",
                k.isa
            );
            assert!(
                (f - vector::dot_ref(&a, &b)).abs() <= crate::gemm::DOT_TOLERANCE * scale,
                "{} ggml dot n {n}: {f} is not a dot product",
                k.isa
            );
            let s = rng.normal();
            let (mut y1, mut y2) = (b.clone(), b.clone());
            (k.axpy_f32)(&mut y1, s, &a);
            vector::axpy_ref(&mut y2, s, &a);
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&y1), bits(&y2), "{} axpy n {n}", k.isa);
            for (i, (u, v)) in y1.iter().zip(&b).enumerate() {
                let tol = 2.0 * f32::EPSILON * (v.abs() + (s * a[i]).abs());
                assert!((u - (v + s * a[i])).abs() <= tol, "{} n {n} i {i}", k.isa);
            }
        }
    }
}

/// `gemm_local` (one thread, for small products run from parallel loops) gives `gemm`'s
/// bits for every format, packed or not, rows in and outside whole tiles, any columns.
#[test]
fn local_gemm_gives_the_same_bits_as_gemm() {
    use crate::gemm::{gemm, gemm_local, Matrix};
    let mut rng = Rng(23);
    for (rows, cols) in [(16, 256), (35, 512), (97, 256)] {
        for f in crate::kernels().formats.iter() {
            let q = formats::matrix(f, rows, cols, &mut rng);
            let w = Matrix::new(f.ty, rows, cols, &q).unwrap();
            let packed = f.pack.map(|pack| pack(&w).unwrap()).unwrap_or(None);
            let wp = match &packed {
                Some(p) => w.with_packed(p),
                None => w,
            };
            let ty = f.ty;
            let x: Vec<f32> = (0..17 * cols).map(|_| rng.normal()).collect();
            for n in [1, 2, 5, 16, 17] {
                for m in [&w, &wp] {
                    let (mut a, mut b) = (vec![0.0f32; n * rows], vec![0.0f32; n * rows]);
                    gemm(m, &x[..n * cols], &mut a);
                    gemm_local(m, &x[..n * cols], &mut b);
                    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                    assert_eq!(bits(&a), bits(&b), "{ty} rows {rows} cols {cols} n {n}");
                }
            }
        }
    }
}

/// dspark's own order (a drafter's products, [`crate::gemm::own_order`]) gives its
/// reference's bits on a packed matrix — rows in whole tiles and past them, one to
/// seventeen columns, every byte pattern of a block (Q8_0's -128 included) — and inside
/// `own_order` `gemm` takes it exactly where the matrix is packed, the llama.cpp order
/// elsewhere and outside.
#[test]
fn own_order_gives_its_reference_bits_where_packed() {
    use crate::gemm::{gemm, own_order, Columns, Matrix};
    let mut rng = Rng(41);
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    for k in fast_kernels() {
        for f in k.formats.iter() {
            assert_eq!(f.own_rows.is_some(), f.own_dot_ref.is_some(), "{}", f.ty);
            let (Some(own), Some(dot)) = (f.own_rows, f.own_dot_ref) else {
                continue;
            };
            assert!(
                f.pack.is_some(),
                "{}: the own order reads packed tiles",
                f.ty
            );
            for (rows, cols) in [(16, 32), (37, 256), (48, 4096)] {
                let q = f.sample(rows * cols, rng.next_u64());
                let w = Matrix::new(f.ty, rows, cols, &q).unwrap();
                let packed = (f.pack.unwrap())(&w).unwrap().unwrap();
                let wp = w.with_packed(&packed);
                let x: Vec<f32> = (0..17 * cols).map(|_| rng.normal()).collect();
                for n in [1, 2, 3, 8, 9, 17] {
                    let xc = Columns::with(&k, f.activation, &x[..n * cols], cols);
                    let mut fast = vec![0.0f32; rows * n];
                    for first in (0..rows).step_by(16) {
                        let len = 16.min(rows - first) * n;
                        own(&wp, first, &xc, &mut fast[first * n..first * n + len]);
                    }
                    for r in 0..rows {
                        for c in 0..n {
                            let want = dot(w.row(r), &xc, c);
                            assert_eq!(
                                fast[r * n + c].to_bits(),
                                want.to_bits(),
                                "{} {} rows {rows} cols {cols} n {n} row {r} column {c}",
                                k.isa,
                                f.ty
                            );
                        }
                    }
                }
            }
        }
    }
    // The product driver: the own order inside `own_order` on packed matrices only.
    for f in crate::kernels()
        .formats
        .iter()
        .filter(|f| f.own_rows.is_some())
    {
        let (rows, cols) = (35, 512);
        let q = f.sample(rows * cols, rng.next_u64());
        let w = Matrix::new(f.ty, rows, cols, &q).unwrap();
        let packed = (f.pack.unwrap())(&w).unwrap().unwrap();
        let wp = w.with_packed(&packed);
        let x: Vec<f32> = (0..5 * cols).map(|_| rng.normal()).collect();
        for n in [1, 5] {
            let xc = Columns::new(f.activation, &x[..n * cols], cols);
            let want = |dot: crate::format::DotFn| -> Vec<u32> {
                let mut v = vec![0.0f32; n * rows];
                for c in 0..n {
                    for r in 0..rows {
                        v[c * rows + r] = dot(w.row(r), &xc, c);
                    }
                }
                bits(&v)
            };
            let step = f.step_dot_ref(&w);
            for (m, inside, dot) in [
                (&wp, true, f.own_dot_ref.unwrap()),
                (&w, true, step),
                (&wp, false, step),
            ] {
                // 35 rows are three tasks: handed out first to last and last to first.
                for last_first in [false, true] {
                    let mut y = vec![0.0f32; n * rows];
                    let run = |y: &mut [f32]| {
                        if inside {
                            own_order(|| gemm(m, &x[..n * cols], y));
                        } else {
                            gemm(m, &x[..n * cols], y);
                        }
                    };
                    if last_first {
                        crate::gemm::last_rows_first(|| run(&mut y));
                    } else {
                        run(&mut y);
                    }
                    assert_eq!(
                        bits(&y),
                        want(dot),
                        "{} n {n} own {inside} last rows first {last_first}",
                        f.ty
                    );
                }
            }
        }
    }
}

/// The F16-accumulator kernels (llama.cpp's flash-attention value sums) give their
/// references' bits: lengths around the vector width, values
/// near F16's limits (subnormal, overflowing to infinity).
#[test]
fn f16_accumulator_kernels_match_their_references() {
    let mut rng = Rng(29);
    for len in [0usize, 1, 7, 8, 9, 32, 63, 64, 65, 128, 131] {
        for scale in [1.0f32, 3.0e-6, 1.0e4] {
            let x: Vec<f32> = (0..len).map(|_| rng.normal() * scale).collect();
            let y0: Vec<f32> = (0..len)
                .map(|_| crate::vector::round_f16(rng.normal() * scale))
                .collect();
            for k in fast_kernels() {
                {
                    for w in [0.0f32, 0.37, 1.0, 1.7e-3] {
                        let (mut a, mut b) = (y0.clone(), y0.clone());
                        (k.mad_round_f16)(&mut a, &x, w);
                        crate::vector::mad_round_f16_ref(&mut b, &x, w);
                        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                        assert_eq!(bits(&a), bits(&b), "{} mad len {len} w {w}", k.isa);
                        (k.scale_round_f16)(&mut a, w);
                        crate::vector::scale_round_f16_ref(&mut b, w);
                        assert_eq!(bits(&a), bits(&b), "{} scale len {len} w {w}", k.isa);
                    }
                }
            }
        }
    }
}

/// A scale of 1 makes the F16 rescale kernels a rounding of every value to F16 with
/// [`crate::vector::round_f16`]'s bits (what [`crate::vector::round_f16s`] relies on): every
/// F16 value, its f32 neighbours, the ties halfway to the next F16 value and their
/// neighbours, both signs; values past F16's largest, f32 subnormals, infinities, and NaNs
/// quiet and signalling with payloads high and low.
#[test]
fn f16_rescale_by_one_is_round_f16() {
    let mut x = Vec::new();
    for h in 0..=u16::MAX {
        let v = half::f16::from_bits(h).to_f32();
        let next = half::f16::from_bits(h.wrapping_add(1)).to_f32();
        let tie = (f64::from(v) + f64::from(next)) / 2.0;
        for base in [v, tie as f32] {
            let b = base.to_bits();
            x.extend([b, b.wrapping_add(1), b.wrapping_sub(1)].map(f32::from_bits));
        }
    }
    x.extend([
        65504.0f32,
        65519.99,
        65520.0,
        65536.0,
        1.0e9,
        f32::MAX,
        f32::MIN_POSITIVE,
        1.0e-40,
        f32::INFINITY,
        f32::NEG_INFINITY,
    ]);
    for bits in [
        0x7fc0_0000u32,
        0x7f80_0001,
        0x7fbf_ffff,
        0x7fa0_2000,
        0xffc0_0001,
        0xff80_4000,
    ] {
        x.push(f32::from_bits(bits));
    }
    let negated: Vec<f32> = x.iter().map(|v| -v).collect();
    x.extend(negated);
    let want: Vec<u32> = x
        .iter()
        .map(|&v| crate::vector::round_f16(v).to_bits())
        .collect();
    let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
    for k in fast_kernels() {
        let mut got = x.clone();
        (k.scale_round_f16)(&mut got, 1.0);
        assert_eq!(bits(&got), want, "{}", k.isa);
    }
    let mut got = x.clone();
    crate::vector::round_f16s(&mut got);
    assert_eq!(bits(&got), want, "round_f16s");
}

/// The fused one-chunk flash-attention kernels give their reference's bits: head sizes
/// around the 64-value step and the 16-lane width and Kimi K3's MLA rows (576 / 512),
/// strides wider than a row, chunks starting inside the keys, chunks over several of the
/// AVX2 kernel's windows, scores that raise the maximum late (rescaling the accumulator)
/// and values near F16's limits.
#[test]
fn attend_chunk_kernels_match_their_reference() {
    let mut rng = Rng(31);
    for (d, r) in [
        (64usize, 64usize),
        (128, 128),
        (80, 80),
        (32, 48),
        (7, 9),
        (192, 128),
        (576, 512),
        (64, 0),
    ] {
        for (count, value_scale) in [
            (1usize, 1.0f32),
            (5, 3.0e-3),
            (37, 1.0),
            (130, 2.0e3),
            (300, 0.5),
        ] {
            let stride = d.max(r) + 3;
            let f16 = |x: f32| crate::vector::round_f16(x);
            let q: Vec<f32> = (0..d).map(|_| f16(rng.normal())).collect();
            let keys: Vec<f32> = (0..count * stride)
                .enumerate()
                .map(|(i, _)| f16(rng.normal() * (1.0 + (i / stride) as f32 * 0.05)))
                .collect();
            let values: Vec<f32> = (0..count * stride)
                .map(|_| f16(rng.normal() * value_scale))
                .collect();
            for start in [0, count / 3] {
                let run = |f: crate::AttendChunk, fill: f32| {
                    let mut out = vec![fill; r];
                    let got = f(&q, &keys, &values, stride, start..count, 0.125, &mut out);
                    (got, out)
                };
                let (got_ref, want) = run(crate::vector::attend_chunk_f16_ref, 7.0);
                // The same values stored as F16 (an F16 cache).
                let (keys16, values16): (Vec<half::f16>, Vec<half::f16>) = (
                    keys.iter().map(|&v| half::f16::from_f32(v)).collect(),
                    values.iter().map(|&v| half::f16::from_f32(v)).collect(),
                );
                let run16 = |f: crate::AttendChunkHalf| {
                    let mut out = vec![3.0f32; r];
                    let got = f(
                        &q,
                        &keys16,
                        &values16,
                        stride,
                        start..count,
                        0.125,
                        &mut out,
                    );
                    (got, out)
                };
                for k in fast_kernels() {
                    let (got, out) = run16(k.attend_chunk_f16_half);
                    let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                    assert_eq!(
                        (got.0.to_bits(), got.1.to_bits(), bits(&out)),
                        (got_ref.0.to_bits(), got_ref.1.to_bits(), bits(&want)),
                        "{} F16-stored d {d} r {r} count {count} start {start}",
                        k.isa
                    );
                }
                for k in fast_kernels() {
                    let (got, out) = run(k.attend_chunk_f16, -1.0);
                    let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                    assert_eq!(
                        (got.0.to_bits(), got.1.to_bits()),
                        (got_ref.0.to_bits(), got_ref.1.to_bits()),
                        "{} d {d} r {r} count {count} start {start}",
                        k.isa
                    );
                    assert_eq!(
                        bits(&out),
                        bits(&want),
                        "{} d {d} r {r} count {count}",
                        k.isa
                    );
                }
            }
        }
    }
}

/// Every block format's dequantization equals gguf-py's `gguf.quants.dequantize` bit for
/// bit, on sampled blocks (every bit pattern but the scales random) and, for the formats
/// dspark writes, on quantized values: gguf-py (llama.cpp's own Python package, pinned in
/// `tests/python/requirements.txt`) runs once over all of them. The formats gguf-py cannot
/// dequantize are checked against committed ggml fixtures in their own modules. Fails, not
/// skips, when `$DSPARK_PYTHON` (default `python3`) lacks gguf-py.
#[test]
fn dequantization_equals_gguf_py_bit_for_bit() {
    /// Formats gguf-py 0.19.0 has no dequantizer for.
    const NOT_IN_GGUF_PY: &[GgmlType] = &[GgmlType::Q1_0];
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng(0x5eed);
    let mut batch = Vec::new();
    let mut expected = Vec::new();
    for f in crate::Kernels::scalar().formats.iter() {
        if NOT_IN_GGUF_PY.contains(&f.ty) {
            continue;
        }
        let values = 64 * f.block_len().max(256);
        let mut blocks = formats::matrix(f, 1, values, &mut rng);
        blocks.extend(f.sample(values, rng.next_u64()));
        let mut y = vec![0.0f32; 2 * values];
        (f.dequantize_ref)(&blocks, &mut y);
        let (inp, out) = (
            dir.path().join(format!("{}.bin", f.ty)),
            dir.path().join(format!("{}.f32", f.ty)),
        );
        std::fs::write(&inp, &blocks).unwrap();
        batch.push(serde_json::json!({"type": f.ty.name(), "blocks": inp, "out": out}));
        expected.push((f.ty, out, y));
    }
    let list = dir.path().join("batch.json");
    std::fs::write(&list, serde_json::to_vec(&batch).unwrap()).unwrap();
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/python/dequantize.py");
    let python = std::env::var("DSPARK_PYTHON").unwrap_or_else(|_| "python3".into());
    let o = std::process::Command::new(&python)
        .arg(&script)
        .arg(&list)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {python}: {e} (set DSPARK_PYTHON to a Python with gguf-py: scripts/test.sh does)"));
    assert!(
        o.status.success(),
        "gguf-py failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    for (ty, out, y) in expected {
        let got: Vec<u32> = std::fs::read(&out)
            .unwrap()
            .chunks_exact(4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        let want: Vec<u32> = y.iter().map(|v| v.to_bits()).collect();
        assert_eq!(got.len(), want.len(), "{ty}: value count");
        if let Some(i) = (0..want.len()).find(|&i| {
            got[i] != want[i]
                && !(f32::from_bits(got[i]).is_nan() && f32::from_bits(want[i]).is_nan())
        }) {
            panic!(
                "{ty}: value {i} is {} in gguf-py, {} here",
                f32::from_bits(got[i]),
                f32::from_bits(want[i])
            );
        }
    }
}

/// SwiGLU kernels give the reference's bits: lengths around the group size (the leftover
/// elements take libm's `expf`), ordinary activations, and the edges of the exponential
/// (results overflowing to infinity, subnormal, `|n| > 192`).
#[test]
fn swiglu_kernels_match_their_reference() {
    let mut rng = Rng(31);
    for len in [0usize, 1, 8, 15, 16, 17, 31, 32, 48, 100, 1536] {
        for scale in [1.0f32, 4.0, 30.0, 95.0, 300.0] {
            let g: Vec<f32> = (0..len).map(|_| rng.normal() * scale).collect();
            let u: Vec<f32> = (0..len).map(|_| rng.normal()).collect();
            let mut want = g.clone();
            crate::vector::swiglu_ref(&mut want, &u);
            for k in fast_kernels() {
                let mut got = g.clone();
                (k.swiglu)(&mut got, &u);
                let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&got), bits(&want), "{} len {len} scale {scale}", k.isa);
            }
        }
    }
}

/// ggml's vectorised exponential stays within 3 ulp of the exact one where the result is
/// normal, and reaches infinity and zero where ggml's does.
#[test]
fn ggml_expf_is_close_to_exp() {
    use crate::vector::ggml_expf;
    let mut x = -103.0f32;
    while x < 88.5 {
        let got = ggml_expf(x);
        let want = f64::from(x).exp();
        if want > 1.2e-38 && want < 3.0e38 {
            let ulp = f64::from(f32::from_bits(got.to_bits() + 1) - got);
            assert!(
                (f64::from(got) - want).abs() <= 3.0 * ulp,
                "e^{x}: {got} vs {want}"
            );
        }
        x += 0.0137;
    }
    assert_eq!(ggml_expf(200.0), f32::INFINITY);
    assert_eq!(ggml_expf(-200.0), 0.0);
    assert_eq!(ggml_expf(0.0), 1.0);
    assert!(ggml_expf(f32::NAN).is_nan());
}

/// The F16 dot-product kernels give the reference's bits (ggml's AVX-512 order): lengths
/// around its step of 64, F16-valued inputs of several magnitudes.
#[test]
fn f16_dot_kernels_match_their_reference() {
    let mut rng = Rng(37);
    for len in [0usize, 1, 16, 63, 64, 65, 100, 128, 192, 576] {
        for scale in [1.0f32, 1e-3, 200.0] {
            let a: Vec<f32> = (0..len)
                .map(|_| crate::vector::round_f16(rng.normal() * scale))
                .collect();
            let b: Vec<f32> = (0..len)
                .map(|_| crate::vector::round_f16(rng.normal() * scale))
                .collect();
            let want = crate::vector::dot_f16_ref(&a, &b);
            for k in fast_kernels() {
                assert_eq!(
                    (k.dot_f16)(&a, &b).to_bits(),
                    want.to_bits(),
                    "{} len {len} scale {scale}",
                    k.isa
                );
            }
        }
    }
}

/// The fused attention kernels of llama.cpp's tiled flash attention (scores as sequential
/// fused dots, values as sequential fused steps) give their references' bits, for any
/// number of keys and any head size.
#[test]
fn fused_attention_kernels_match_their_references() {
    let mut rng = Rng(41);
    for (dk, keys) in [(64usize, 64usize), (64, 7), (128, 17), (5, 9), (3, 1)] {
        let stride = dk + 3;
        let q: Vec<f32> = (0..dk).map(|_| rng.normal()).collect();
        let kv: Vec<f32> = (0..keys * stride).map(|_| rng.normal()).collect();
        let w: Vec<f32> = (0..keys).map(|_| rng.normal().abs()).collect();
        let mut want = vec![0.0f32; keys];
        crate::vector::fused_dots_ref(&q, &kv, stride, &mut want);
        let mut want_y: Vec<f32> = (0..dk).map(|_| rng.normal()).collect();
        let start = want_y.clone();
        crate::vector::fused_axpys_ref(&mut want_y, &w, &kv, stride);
        for k in fast_kernels() {
            let mut got = vec![0.0f32; keys];
            (k.fused_dots)(&q, &kv, stride, &mut got);
            assert_eq!(
                got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                want.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                "{} dots dk {dk} keys {keys}",
                k.isa
            );
            let mut y = start.clone();
            (k.fused_axpys)(&mut y, &w, &kv, stride);
            assert_eq!(
                y.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                want_y.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                "{} axpys dk {dk} keys {keys}",
                k.isa
            );
        }
        // Stored as F16 (an F16 cache): the bits of the same values stored as f32.
        let kv16: Vec<half::f16> = kv.iter().map(|&v| half::f16::from_f32(v)).collect();
        let kv32: Vec<f32> = kv16.iter().map(|v| v.to_f32()).collect();
        let mut want16 = vec![0.0f32; keys];
        crate::vector::fused_dots_ref(&q, &kv32, stride, &mut want16);
        let mut want16_y = start.clone();
        crate::vector::fused_axpys_ref(&mut want16_y, &w, &kv32, stride);
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        for k in fast_kernels() {
            let mut got = vec![0.0f32; keys];
            (k.fused_dots_half)(&q, &kv16, stride, &mut got);
            assert_eq!(
                bits(&got),
                bits(&want16),
                "{} F16 dots dk {dk} keys {keys}",
                k.isa
            );
            let mut y = start.clone();
            (k.fused_axpys_half)(&mut y, &w, &kv16, stride);
            assert_eq!(
                bits(&y),
                bits(&want16_y),
                "{} F16 axpys dk {dk} keys {keys}",
                k.isa
            );
        }
    }
}

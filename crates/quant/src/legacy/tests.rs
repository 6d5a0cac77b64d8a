//! The shared kernels of the formats of 32-value runs against the reference order: packed
//! tiles and the file's layout give `dot_ref`'s bits for rows in and outside whole tiles,
//! any number of columns and threads; hostile blocks (non-finite scales, activation
//! quants of -128) keep the kernels on the reference's bits.

use dspark_gguf::GgmlType;
use dspark_testkit::rng::SplitMix64 as Rng;

use crate::gemm::{gemm_with, Columns, Matrix};
use crate::{FormatKernels, Kernels};

/// The weight types of this family.
pub(crate) const TYPES: &[GgmlType] = &[
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::IQ4_NL,
    GgmlType::MXFP4,
    GgmlType::Q8_0,
];

fn kernel_sets() -> Vec<Kernels> {
    let mut v = vec![Kernels::scalar()];
    v.extend(Kernels::avx2());
    v.extend(Kernels::avx512());
    v
}

fn ours(k: &Kernels) -> impl Iterator<Item = &FormatKernels> {
    k.formats.iter().filter(|f| TYPES.contains(&f.ty))
}

/// Equal bits, or both NaN (a NaN's payload may depend on which operand carried it).
fn same(a: f32, b: f32) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

/// `gemm_with` on `w` (with its packed copy when the kernel set packs) against its
/// reference (`dot_ref`, or the `vec_dot` order where llama.cpp would not re-lay `w`)
/// on every row and column, on 1 and 3 threads.
fn check(k: &Kernels, f: &FormatKernels, w: &Matrix<'_>, x: &[f32], what: &str) {
    let n = x.len() / w.cols;
    let packed = f.pack.map(|pack| pack(w).unwrap()).unwrap_or(None);
    assert_eq!(
        packed.is_some(),
        f.pack.is_some() && w.rows >= 16,
        "{}",
        f.ty
    );
    let wp = match &packed {
        Some(p) => w.with_packed(p),
        None => *w,
    };
    let xc = Columns::with(k, f.activation, x, w.cols);
    let want: Vec<f32> = (0..n)
        .flat_map(|c| (0..w.rows).map(move |r| (c, r)))
        .map(|(c, r)| (f.step_dot_ref(w))(w.row(r), &xc, c))
        .collect();
    for threads in [1, 3] {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        for m in [w, &wp] {
            let mut y = vec![0.0f32; n * w.rows];
            pool.install(|| gemm_with(k, m, x, &mut y));
            for (i, (&a, &b)) in y.iter().zip(&want).enumerate() {
                assert!(
                    same(a, b),
                    "{} {} {what} rows {} cols {} n {n} threads {threads} packed {}: \
                     column {} row {}: {a} vs {b}",
                    k.isa,
                    f.ty,
                    w.rows,
                    w.cols,
                    m.packed().is_some(),
                    i / w.rows,
                    i % w.rows
                );
            }
        }
    }
}

#[test]
fn packed_and_file_layouts_give_the_bits_of_the_reference() {
    let mut rng = Rng(0x1e6a);
    for k in kernel_sets() {
        for f in ours(&k) {
            let bl = f.block_len();
            for (rows, blocks) in [(16, 1), (35, 2), (48, 3), (19, 9), (64, 18), (97, 5)] {
                let cols = blocks * bl;
                let q = f.sample(rows * cols, rng.next_u64());
                let w = Matrix::new(f.ty, rows, cols, &q).unwrap();
                for n in [1, 2, 3, 5, 8, 9, 16, 17] {
                    let x: Vec<f32> = (0..n * cols).map(|_| rng.normal()).collect();
                    check(&k, f, &w, &x, "random");
                }
            }
        }
    }
}

/// Scales that are infinite, NaN or subnormal (and MXFP4's `0xFF`, which ggml reads as
/// 2^127, not NaN), activation blocks whose quants are all -128 (values so small that
/// `127 / amax` overflows), zero and huge activations: every kernel still gives the
/// reference's bits (NaN for NaN).
#[test]
fn hostile_blocks_keep_the_reference_bits() {
    let mut rng = Rng(0xbad);
    for k in kernel_sets() {
        for f in ours(&k) {
            let (bl, bb) = (f.block_len(), f.block_bytes());
            let rows = 33;
            let cols = 4 * bl.max(64);
            let mut q = f.sample(rows * cols, rng.next_u64());
            for (i, block) in q.chunks_exact_mut(bb).enumerate() {
                for s in f.scales {
                    match (*s, i % 7) {
                        (crate::Scale::F16(at), 1) => {
                            block[at..at + 2].copy_from_slice(&[0x00, 0x7C])
                        }
                        (crate::Scale::F16(at), 2) => {
                            block[at..at + 2].copy_from_slice(&[0x01, 0xFE])
                        }
                        (crate::Scale::F16(at), 3) => {
                            block[at..at + 2].copy_from_slice(&[0x01, 0x00])
                        }
                        (crate::Scale::F16(at), 4) => {
                            block[at..at + 2].copy_from_slice(&[0xFF, 0x7B])
                        }
                        (crate::Scale::E8m0(at), 1) => block[at] = 0xFF,
                        (crate::Scale::E8m0(at), 2) => block[at] = 0x00,
                        (crate::Scale::E8m0(at), 3) => block[at] = 0x01,
                        (crate::Scale::E8m0(at), 4) => block[at] = 0xFE,
                        _ => {}
                    }
                }
            }
            let w = Matrix::new(f.ty, rows, cols, &q).unwrap();
            let n = 5;
            let mut x: Vec<f32> = (0..n * cols).map(|_| rng.normal()).collect();
            // Column 1: every other block tiny (quants -128, scale 0); column 2: zeros;
            // column 3: huge values.
            for (b, v) in x[cols..2 * cols].chunks_exact_mut(32).enumerate() {
                if b % 2 == 0 {
                    v.iter_mut()
                        .enumerate()
                        .for_each(|(i, v)| *v = (i as f32 - 9.0) * 1e-40);
                }
            }
            x[2 * cols..3 * cols].fill(0.0);
            x[3 * cols..4 * cols].iter_mut().for_each(|v| *v *= 3e37);
            let xc = Columns::with(&k, f.activation, &x[cols..2 * cols], cols);
            assert!(xc.q8(0).1[..32].iter().all(|&v| v == -128), "{}", f.ty);
            check(&k, f, &w, &x, "hostile");
        }
    }
}

/// Where llama.cpp re-lays weights on x86 (Q4_0, IQ4_NL, MXFP4 with rows a multiple of 8,
/// `repack.cpp`), its kernels sum each row the way [`super::dot_ref`] does (one
/// `fma(int sum, d_w · d_x, acc)` per block, rows in lanes), with the same activation
/// quants: so dspark's products are llama.cpp's, bit for bit, on every kernel set, packed
/// or not (fixtures made by llama.cpp, `testdata/README.md`).
#[test]
fn products_equal_llama_cpp_s_repacked_x86_path() {
    let f32s = |b: &[u8]| -> Vec<f32> {
        b.chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    };
    let x = f32s(include_bytes!("../../testdata/columns_5x128.f32"));
    let cases: [(GgmlType, &[u8], &[u8]); 3] = [
        (
            GgmlType::MXFP4,
            include_bytes!("../../testdata/mxfp4_16x128.blocks"),
            include_bytes!("../../testdata/mxfp4_16x128.llama.f32"),
        ),
        (
            GgmlType::Q4_0,
            include_bytes!("../../testdata/q4_0_16x128.blocks"),
            include_bytes!("../../testdata/q4_0_16x128.llama.f32"),
        ),
        (
            GgmlType::IQ4_NL,
            include_bytes!("../../testdata/iq4_nl_16x128.blocks"),
            include_bytes!("../../testdata/iq4_nl_16x128.llama.f32"),
        ),
    ];
    for (ty, blocks, want) in cases {
        let want = f32s(want);
        let w = Matrix::new(ty, 16, 128, blocks).unwrap();
        for k in kernel_sets() {
            let f = k.format(ty).unwrap();
            let packed = f.pack.map(|pack| pack(&w).unwrap()).unwrap_or(None);
            for m in [Some(w), packed.as_ref().map(|p| w.with_packed(p))]
                .into_iter()
                .flatten()
            {
                for n in [1, 5] {
                    let mut y = vec![0.0f32; 16 * n];
                    gemm_with(&k, &m, &x[..128 * n], &mut y);
                    let got: Vec<u32> = y.iter().map(|v| v.to_bits()).collect();
                    let want: Vec<u32> = want[..16 * n].iter().map(|v| v.to_bits()).collect();
                    assert_eq!(
                        got,
                        want,
                        "{} {ty} n {n} packed {}",
                        k.isa,
                        m.packed().is_some()
                    );
                }
            }
        }
    }
}

/// Where llama.cpp does not re-lay the weights (`--no-repack`, 3-D tensors, rows not a
/// multiple of 8), a column goes through its `vec_dot` (IQ4_NL and MXFP4: two sets of
/// lanes and an odd last block alone — 5 blocks a row here) and a prompt's columns through
/// llamafile's `tinyBLAS` (Q4_0, IQ4_NL; MXFP4 has none, so `vec_dot` again): dspark's
/// products of a matrix marked [`Matrix::not_relaid`] equal both, bit for bit, on every
/// kernel set (fixtures made by llama.cpp, `testdata/README.md`).
#[test]
fn products_equal_llama_cpp_s_path_without_re_laying() {
    let f32s = |b: &[u8]| -> Vec<u32> {
        b.chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    };
    let x: Vec<f32> = f32s(include_bytes!("../../testdata/columns_5x160.f32"))
        .into_iter()
        .map(f32::from_bits)
        .collect();
    // (type, weights, one column's products, five columns' products)
    type Case = (GgmlType, &'static [u8], &'static [u8], &'static [u8]);
    let cases: [Case; 3] = [
        (
            GgmlType::MXFP4,
            include_bytes!("../../testdata/mxfp4_16x160.blocks"),
            include_bytes!("../../testdata/mxfp4_16x160.vec_dot.f32"),
            include_bytes!("../../testdata/mxfp4_16x160.no_repack.f32"),
        ),
        (
            GgmlType::Q4_0,
            include_bytes!("../../testdata/q4_0_16x160.blocks"),
            include_bytes!("../../testdata/q4_0_16x160.vec_dot.f32"),
            include_bytes!("../../testdata/q4_0_16x160.no_repack.f32"),
        ),
        (
            GgmlType::IQ4_NL,
            include_bytes!("../../testdata/iq4_nl_16x160.blocks"),
            include_bytes!("../../testdata/iq4_nl_16x160.vec_dot.f32"),
            include_bytes!("../../testdata/iq4_nl_16x160.no_repack.f32"),
        ),
    ];
    for (ty, blocks, one, five) in cases {
        let w = Matrix::new(ty, 16, 160, blocks).unwrap().not_relaid();
        for k in kernel_sets() {
            let f = k.format(ty).unwrap();
            assert!(!f.relaid(&w), "{ty}");
            let mut y = vec![0.0f32; 16];
            gemm_with(&k, &w, &x[..160], &mut y);
            let got: Vec<u32> = y.iter().map(|v| v.to_bits()).collect();
            assert_eq!(got, f32s(one), "{} {ty}: one column", k.isa);
            let mut y = vec![0.0f32; 16 * 5];
            crate::gemm::prompt_order(|| gemm_with(&k, &w, &x, &mut y));
            let got: Vec<u32> = y.iter().map(|v| v.to_bits()).collect();
            assert_eq!(got, f32s(five), "{} {ty}: a prompt's five columns", k.isa);
        }
    }
}

/// A row that is not whole blocks is refused before any kernel sees it (Q1_0's blocks are
/// 128 values: SmolLM2's 576-wide rows cannot be Q1_0, and llama-quantize refuses them too).
#[test]
fn rows_of_partial_blocks_are_refused() {
    for &ty in TYPES {
        let (bl, bb) = (ty.block_size() as usize, ty.type_size() as usize);
        for cols in [bl / 2, bl + 1, 3 * bl - 16, 576] {
            if cols % bl == 0 {
                continue;
            }
            let bytes = vec![0u8; cols.div_ceil(bl) * bb * 2];
            assert!(
                Matrix::new(ty, 2, cols, &bytes).is_none(),
                "{ty} cols {cols}"
            );
        }
    }
}

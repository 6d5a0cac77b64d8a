//! What the k-quant formats ([`crate::q2_k`], [`crate::q3_k`], [`crate::q4_k`],
//! [`crate::q5_k`], [`crate::q6_k`]) share: super-blocks of 256 values dotted with
//! [`crate::q8_k`] activation blocks, the 6-bit scale packing of Q4_K / Q5_K, and the
//! float steps of their dot products.
//!
//! **The dot products' order.** Every k-quant row · column is, per super-block `i` in
//! order, an exact integer sum `isum_i` of `scale · quant · x` over the block's 256 values
//! (and, for the formats with mins, an exact `msum_i = Σ min · (sum of the sub-block's
//! activation quants)`, taken from the Q8_K block's sums of sixteen), then two float
//! steps per super-block:
//!
//! ```text
//! acc  = fma(isum_i as f32, d_w · d_x, acc)        // from acc = +0
//! accm = fma(msum_i as f32, dmin_w · d_x, accm)    // from accm = +0 (formats with mins)
//! dot  = acc - accm                                // or acc, without mins
//! ```
//!
//! with `d_w`, `dmin_w` the block's f16 scales as f32 and `d_x` the activation block's f32
//! scale. The integer parts are exact in any order, so a kernel may sum them as its
//! instructions like; the float steps are per super-block and sequential, so a kernel
//! gives the reference's bits whether it keeps a row in a scalar or in a vector lane
//! beside other rows. Q5_K and Q6_K sum instead in ggml's `vec_dot` lane order
//! (`lanes::LaneAcc`), as llama.cpp does for them on x86. The order above is llama.cpp's x86
//! repacked Q4_K kernel
//! (`ggml_gemv_q4_K_8x8_q8_K`, `ggml-cpu/arch/x86/repack.cpp`: two accumulators per row,
//! `iacc · (d · d_x)` and `iacc_min · (dmin · d_x)` fused per super-block, subtracted at
//! the end), which llama.cpp runs for Q4_K matrices on AVX2 machines.

use half::f16;

/// Values per super-block (`QK_K` in `ggml-common.h`; the Q8_K block's length).
pub const QK_K: usize = crate::q8_k::QK_K;

/// Bytes of the packed 6-bit scales and mins of Q4_K and Q5_K (`K_SCALE_SIZE`).
pub const K_SCALE_SIZE: usize = 12;

/// The f16 at `at` in `b`, as f32.
#[inline]
pub(crate) fn f16_at(b: &[u8], at: usize) -> f32 {
    f16::from_bits(u16::from_le_bytes([b[at], b[at + 1]])).to_f32()
}

/// Scale and min of sub-block `j` (0..8) from Q4_K / Q5_K's 12 packed bytes (ggml's
/// `get_scale_min_k4`, `ggml-quants.c`): sub-blocks 0..4 keep their 6 bits in the low
/// bits of bytes `j` (scale) and `j + 4` (min); sub-blocks 4..8 keep their low 4 bits in
/// the nibbles of byte `j + 4` and their high 2 bits in the top bits of bytes `j - 4`
/// (scale) and `j` (min).
#[inline]
pub fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// All eight scales and mins of Q4_K / Q5_K's packed bytes ([`scale_min_k4`]).
#[inline]
pub fn scales_mins_k4(q: &[u8]) -> ([u8; 8], [u8; 8]) {
    let mut sc = [0u8; 8];
    let mut m = [0u8; 8];
    for j in 0..8 {
        (sc[j], m[j]) = scale_min_k4(j, q);
    }
    (sc, m)
}

/// The float steps of a k-quant dot product (see the module doc), one super-block at a
/// time.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct SuperAcc {
    acc: f32,
    accm: f32,
}

impl SuperAcc {
    /// Adds super-block `i`'s integer sums: `isum` scaled by `d_w · d_x`, `msum` by
    /// `dmin_w · d_x` (pass `msum = 0`, `dmin = 0` for the formats without mins: the step
    /// then leaves `accm` at +0).
    #[inline(always)]
    pub(crate) fn add(&mut self, d: f32, dmin: f32, dx: f32, isum: i32, msum: i32) {
        self.acc = (isum as f32).mul_add(d * dx, self.acc);
        self.accm = (msum as f32).mul_add(dmin * dx, self.accm);
    }

    /// `acc - accm` (formats with mins).
    #[inline(always)]
    pub(crate) fn with_mins(self) -> f32 {
        self.acc - self.accm
    }
}

/// `Σ_t mins[t / per] · bsums[t]` over a super-block's sixteen sums of sixteen
/// activation quants: the exact integer a formats' mins multiply (`per` = sums per
/// sub-block: 2 for Q4_K / Q5_K's sub-blocks of 32, 1 for Q2_K's of 16).
#[inline]
pub(crate) fn min_sum(mins: &[u8], per: usize, bsums: &[i16]) -> i32 {
    bsums
        .iter()
        .enumerate()
        .map(|(t, &b)| i32::from(mins[t / per]) * i32::from(b))
        .sum()
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod x86_64;

#[cfg(test)]
mod tests {
    use super::*;

    /// The unpacking restates gguf-py's `Q4_K.get_scale_min` (`gguf/quants.py`), which
    /// splits the 12 bytes into `d`, `m`, `m_d` rows of four.
    #[test]
    fn scale_min_k4_is_gguf_py_s_unpacking() {
        let mut s = 0x1234_5678_9abc_def0u64;
        for _ in 0..1000 {
            let q: [u8; 12] = std::array::from_fn(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (s >> 56) as u8
            });
            let (d, m, md) = (&q[0..4], &q[4..8], &q[8..12]);
            for j in 0..8 {
                let (sc, mn) = scale_min_k4(j, &q);
                let (want_sc, want_m) = if j < 4 {
                    (d[j] & 0x3F, m[j] & 0x3F)
                } else {
                    let k = j - 4;
                    (
                        (md[k] & 0x0F) | ((d[k] >> 2) & 0x30),
                        (md[k] >> 4) | ((m[k] >> 2) & 0x30),
                    )
                };
                assert_eq!((sc, mn), (want_sc, want_m), "{q:?} j {j}");
            }
        }
    }

    /// The packed tiles of the k-quants that have them give the reference's bits: rows in
    /// and outside whole tiles, tasks starting on and off a tile, 1 to 17 columns, split
    /// across threads or not, and every kernel set (the scalar and AVX2 ones ignore the
    /// packed copy).
    #[test]
    fn packed_k_quant_tiles_give_the_reference_bits() {
        use crate::gemm::{gemm_with, Columns, Matrix};
        use dspark_testkit::rng::SplitMix64 as Rng;
        let mut rng = Rng(0x4b51);
        let kernels: Vec<crate::Kernels> = [crate::Kernels::avx2(), crate::Kernels::avx512()]
            .into_iter()
            .flatten()
            .collect();
        for k in &kernels {
            for f in k
                .formats
                .iter()
                .filter(|f| f.activation == crate::Activation::Q8_K)
            {
                let Some(pack) = f.pack else { continue };
                for (rows, cols) in [(16, 256), (35, 512), (48, 1536), (19, 2304), (64, 256)] {
                    let q = f.sample(rows * cols, rng.next_u64());
                    let w = Matrix::new(f.ty, rows, cols, &q).unwrap();
                    let p = pack(&w).unwrap().expect("a whole tile");
                    assert_eq!(p.bytes() as usize % (rows / 16 * cols / QK_K), 0);
                    let wp = w.with_packed(&p);
                    let x: Vec<f32> = (0..17 * cols).map(|_| rng.normal() * 2.0).collect();
                    for n in (1..=9).chain([16, 17]) {
                        let xc = Columns::with(k, f.activation, &x[..n * cols], cols);
                        let want_with = |dot: crate::format::DotFn| -> Vec<u32> {
                            (0..n)
                                .flat_map(|c| (0..rows).map(move |r| (c, r)))
                                .map(|(c, r)| dot(w.row(r), &xc, c).to_bits())
                                .collect()
                        };
                        // A plain product takes `vec_dot`'s order where llama.cpp would
                        // not re-lay the matrix (35 and 19 rows).
                        let (want, tiles) = (want_with(f.step_dot_ref(&w)), want_with(f.dot_ref));
                        let run = |threads: usize| {
                            let pool = rayon::ThreadPoolBuilder::new()
                                .num_threads(threads)
                                .build()
                                .unwrap();
                            let mut y = vec![0.0f32; n * rows];
                            pool.install(|| gemm_with(k, &wp, &x[..n * cols], &mut y));
                            y.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
                        };
                        for threads in [1, 3] {
                            assert_eq!(
                                run(threads),
                                want,
                                "{} {} rows {rows} cols {cols} n {n} threads {threads}",
                                k.isa,
                                f.ty
                            );
                        }
                        // A task starting off a tile reads the file's layout.
                        let mut y = vec![0.0f32; (rows - 3) * n];
                        (f.rows)(&wp, 3, &xc, &mut y);
                        for r in 0..rows - 3 {
                            for c in 0..n {
                                assert_eq!(
                                    y[r * n + c].to_bits(),
                                    tiles[c * rows + r + 3],
                                    "{} {} off a tile, row {r} column {c}",
                                    k.isa,
                                    f.ty
                                );
                            }
                        }
                    }
                }
            }
        }
    }

    /// The activations of the SmolLM2 fixture (`testdata/README.md`): an integer hash,
    /// exact in any language.
    fn fixture_activation(c: u64, k: u64) -> f32 {
        let mut z = (c * 1_000_003 + k).wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        ((z >> 40) as f32 / 16_777_216.0 - 0.5) * 4.0
    }

    /// Real rows of SmolLM2-135M's Q4_K_M file, against llama.cpp's x86 kernels on the
    /// same activations (`testdata/README.md`): the Q4_K dot equals llama.cpp's repacked
    /// one-column kernel bit for bit on every kernel set, and its `vec_dot` where the
    /// matrix is not re-laid; both formats stay within float
    /// rounding of ggml's other kernels and within 2 % of the dequantized rows' f32 dot.
    #[test]
    fn smollm2_rows_dot_as_llama_cpp_does() {
        use crate::gemm::{gemm_with, Columns, Matrix};
        use dspark_gguf::GgmlType;
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata");
        let read = |name: &str| std::fs::read(dir.join(name)).unwrap();
        let json: serde_json::Value =
            serde_json::from_slice(&read("smollm2-k-quant-ggml-dots.json")).unwrap();
        let cols = json["cols"].as_u64().unwrap() as usize;
        let x: Vec<f32> = (0..8u64)
            .flat_map(|c| (0..cols as u64).map(move |k| fixture_activation(c, k)))
            .collect();
        let bits_of = |key: &str, c: usize| -> Vec<u32> {
            json[key][c]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| u32::from_str_radix(v.as_str().unwrap(), 16).unwrap())
                .collect()
        };
        let mut kernels = vec![crate::Kernels::scalar()];
        kernels.extend(crate::Kernels::avx2());
        kernels.extend(crate::Kernels::avx512());
        for (ty, file, rows, ggml) in [
            (
                GgmlType::Q4_K,
                "smollm2-q4_k-rows.bin",
                "q4_k_rows",
                "q4_k_vec_dot",
            ),
            (
                GgmlType::Q6_K,
                "smollm2-q6_k-rows.bin",
                "q6_k_rows",
                "q6_k_vec_dot",
            ),
        ] {
            let rows = json[rows].as_u64().unwrap() as usize;
            let q = read(file);
            let w = Matrix::new(ty, rows, cols, &q).unwrap();
            for k in &kernels {
                let f = k.format(ty).unwrap();
                let mut y = vec![0.0f32; 8 * rows];
                gemm_with(k, &w, &x, &mut y);
                let xc = Columns::with(k, f.activation, &x, cols);
                for c in 0..8 {
                    let ours = &y[c * rows..(c + 1) * rows];
                    if ty == GgmlType::Q4_K {
                        let want = bits_of("q4_k_gemv_8x8", c);
                        let got: Vec<u32> = ours.iter().map(|v| v.to_bits()).collect();
                        assert_eq!(got, want, "{} Q4_K column {c}: llama.cpp's gemv", k.isa);
                        // The same rows where llama.cpp does not re-lay them: its
                        // `vec_dot`, bit for bit.
                        let mut y1 = vec![0.0f32; rows];
                        let xs = &x[c * cols..(c + 1) * cols];
                        gemm_with(k, &w.not_relaid(), xs, &mut y1);
                        let got: Vec<u32> = y1.iter().map(|v| v.to_bits()).collect();
                        assert_eq!(got, bits_of(ggml, c), "{} Q4_K column {c}: vec_dot", k.isa);
                    }
                    for (r, (&o, g)) in ours.iter().zip(bits_of(ggml, c)).enumerate() {
                        let mut wf = vec![0.0f32; cols];
                        (f.dequantize_ref)(w.row(r), &mut wf);
                        let xs = &x[c * cols..(c + 1) * cols];
                        let scale: f64 = wf
                            .iter()
                            .zip(xs)
                            .map(|(a, b)| f64::from((a * b).abs()))
                            .sum();
                        let exact: f64 = wf.iter().zip(xs).map(|(a, b)| f64::from(a * b)).sum();
                        let g = f32::from_bits(g);
                        assert!(
                            (o - g).abs() <= 1e-6 * scale as f32,
                            "{} {ty} row {r} column {c}: {o} vs ggml's {g}",
                            k.isa
                        );
                        assert!(
                            (f64::from(o) - exact).abs() <= 0.02 * scale,
                            "{} {ty} row {r} column {c}: {o} vs {exact}",
                            k.isa
                        );
                        assert_eq!(o.to_bits(), (f.dot_ref)(w.row(r), &xc, c).to_bits());
                    }
                }
            }
        }
    }
}

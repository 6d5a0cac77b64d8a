//! What the lattice i-quants share — IQ2_XXS ([`crate::iq2_xxs`]), IQ2_XS
//! ([`crate::iq2_xs`]), IQ2_S ([`crate::iq2_s`]), IQ3_XXS ([`crate::iq3_xxs`]) and IQ3_S
//! ([`crate::iq3_s`]): their reference dequantization and dot product, written once over
//! what a block decodes to, and the kernel-table rows built from them.
//!
//! # What a block is
//! Each format stores super-blocks of [`QK_K`] = 256 values with one f16 scale `d` first
//! (bytes 0..2). Every value `v` is `sub_scale(d, ls) · magnitude · sign`, where the
//! magnitude comes from a grid entry ([`crate::iq_grids`]) chosen by an index in the block,
//! the sign from a sign bit, and `ls` is a 4-bit field shared by a run of 16 or 32 values.
//! [`Lattice::decode`] turns one block into those three arrays ([`Decoded`]); the formats
//! differ only in how their bits are laid out and in `sub_scale`.
//!
//! # Dequantization
//! [`dequantize_ref`] computes, in f32, `(sub_scale(d, ls) · magnitude) · (±1)` — gguf-py's
//! `db * grid * signs` (`gguf/quants.py`), bit for bit.
//!
//! # The dot product and its summation order
//! Every format dots with Q8_K activations ([`crate::q8_k`]: per block of 256 an f32 scale
//! `d_x` and 256 quants, which that quantizer keeps in -127..=127). gguf-py's `sub_scale` is
//! always `d · (2·ls + 1) · F` for a power of two `F` ([`Lattice::FACTOR`]: 1/8 for the IQ2
//! formats, 1/4 for IQ3_XXS, 1 for IQ3_S), so a block's dot is `d_w · d_x · F` times an
//! integer, as ggml's dot products compute it (`ggml-cpu/arch/x86/quants.c`). [`dot_ref`]
//! defines the order:
//! 1. per block b, eight exact integer **lane sums**: lane `l` (0..8) sums
//!    `(2·ls + 1) · magnitude · sign · q_x` over the values `v` with `(v mod 32) / 4 == l`
//!    (what a 256-bit register of 32-bit sums holds after `vpmaddubsw` + `vpmaddwd` over
//!    the block's eight runs of 32); every partial sum fits in i32 (at most 31 · 62 · 127 ·
//!    32);
//! 2. per block, in block order, each lane `acc[l] = fma(d_w · d_x, lane[l] as f32,
//!    acc[l])`, with `d_w · d_x` rounded to f32 first;
//! 3. the result is `hsum8(acc) · F` ([`crate::lanes::hsum8`]).
//!
//! These are the float steps of ggml's AVX2 dot products for all five formats (an f32
//! `d_w · d_x`, a fused multiply-add of the converted 32-bit lanes into eight f32 lanes per
//! block, its 8-lane horizontal sum, times 0.125 / 0.25 / nothing), and their lanes hold
//! the same values, so with the same activations the results should be ggml's own bits.
//! The kernels (`iq_lattice/x86_64.rs`) compute the integer lanes in any exact way and
//! then take exactly these float steps.

use dspark_gguf::GgmlType;
use half::f16;

use crate::columns::{Activation, Columns};
use crate::cpu::Detected;
use crate::format::{BlockFormat, FormatKernels};

/// Values per super-block (`QK_K` in `ggml-common.h`).
pub const QK_K: usize = 256;

/// One block as the reference sees it: every value's magnitude, sign and scale field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decoded {
    /// The block's scale `d`, as stored (IEEE binary16 bits).
    pub d: u16,
    /// Magnitude of each value (a grid byte).
    pub grid: [u8; QK_K],
    /// Sign bits: bit `j` of byte `k` set means value `8k + j` is negative.
    pub neg: [u8; QK_K / 8],
    /// The 4-bit scale field of each run of 16 values.
    pub ls: [u8; QK_K / 16],
}

impl Decoded {
    /// Whether value `v` is negative.
    pub fn is_negative(&self, v: usize) -> bool {
        self.neg[v / 8] >> (v % 8) & 1 == 1
    }

    /// The odd integer multiplier `2·ls + 1` of value `v`.
    pub fn multiplier(&self, v: usize) -> i32 {
        2 * i32::from(self.ls[v / 16]) + 1
    }
}

/// A lattice i-quant: its block size and how a block decodes. The format's
/// [`BlockFormat`] implementation forwards to this module's generic references.
pub trait Lattice {
    /// The GGUF type.
    const TYPE: GgmlType;
    /// Bytes per block.
    const BLOCK_BYTES: usize;
    /// The power of two `F` with `sub_scale(d, ls) = d · (2·ls + 1) · F`.
    const FACTOR: f32;
    /// The block's magnitudes, signs and scale fields (`block` is one whole block).
    fn decode(block: &[u8]) -> Decoded;
    /// The f32 scale of a run of values as gguf-py computes it from the block's `d` and
    /// the run's 4-bit field `ls`.
    fn sub_scale(d: f32, ls: u8) -> f32;
}

/// The f32 value of an f16 scale's bits.
pub(crate) fn f16_bits_to_f32(bits: u16) -> f32 {
    f16::from_bits(bits).to_f32()
}

/// Reference dequantization of whole blocks of format `L` (gguf-py's values).
///
/// # Panics
/// If `q` is not whole blocks or `y` is not their values.
pub fn dequantize_ref<L: Lattice>(q: &[u8], y: &mut [f32]) {
    assert_eq!(
        q.len() % L::BLOCK_BYTES,
        0,
        "{} input must be whole blocks",
        L::TYPE
    );
    assert_eq!(
        y.len(),
        q.len() / L::BLOCK_BYTES * QK_K,
        "{} output size",
        L::TYPE
    );
    for (qb, yb) in q.chunks_exact(L::BLOCK_BYTES).zip(y.chunks_exact_mut(QK_K)) {
        let dec = L::decode(qb);
        let d = f16_bits_to_f32(dec.d);
        for (v, o) in yb.iter_mut().enumerate() {
            let db = L::sub_scale(d, dec.ls[v / 16]);
            let sign = if dec.is_negative(v) { -1.0f32 } else { 1.0 };
            *o = db * f32::from(dec.grid[v]) * sign;
        }
    }
}

/// The eight exact integer lane sums of one block against one block of Q8_K quants `x`
/// (step 1 of the module doc's order).
pub fn lane_sums<L: Lattice>(block: &[u8], x: &[i8]) -> [i32; 8] {
    assert_eq!((block.len(), x.len()), (L::BLOCK_BYTES, QK_K));
    let dec = L::decode(block);
    let mut lanes = [0i32; 8];
    for (v, &xv) in x.iter().enumerate() {
        let w = i32::from(dec.grid[v]) * if dec.is_negative(v) { -1 } else { 1 };
        lanes[(v % 32) / 4] += dec.multiplier(v) * w * i32::from(xv);
    }
    lanes
}

/// One super-block decoded for llama.cpp's prompt orders ([`crate::tiled`]): the values
/// `grid · sign`, the scales `2·ls + 1`, `d_w = d · F`.
pub(crate) fn decode_tiled<L: Lattice>(block: &[u8], out: &mut crate::tiled::Decoded) {
    let dec = L::decode(block);
    for (v, w) in out.w.iter_mut().enumerate() {
        let g = i32::from(dec.grid[v]);
        *w = (if dec.is_negative(v) { -g } else { g }) as i8;
    }
    for t in 0..16 {
        out.sc[t] = (2 * i32::from(dec.ls[t]) + 1) as i16;
    }
    out.min = [0; 16];
    out.d = f16_bits_to_f32(dec.d) * L::FACTOR;
    out.dmin = 0.0;
}

/// Reference dot product of a row of format `L` with column `c` of `x` (Q8_K), in the
/// module doc's order.
pub fn dot_ref<L: Lattice>(row: &[u8], x: &Columns<'_>, c: usize) -> f32 {
    let (xd, xq) = x.q8(c);
    let nb = row.len() / L::BLOCK_BYTES;
    let mut acc = crate::lanes::LaneAcc::default();
    for b in 0..nb {
        let wb = &row[b * L::BLOCK_BYTES..(b + 1) * L::BLOCK_BYTES];
        let lanes = lane_sums::<L>(wb, &xq[b * QK_K..(b + 1) * QK_K]);
        acc.add(
            f16_bits_to_f32(u16::from_le_bytes([wb[0], wb[1]])) * xd[b],
            &lanes,
        );
    }
    acc.sum() * L::FACTOR
}

/// The kernel-table row of lattice format `F` for `cpu`: the references, with the x86
/// row kernels where the CPU has them.
pub(crate) fn kernels<F>(cpu: Detected) -> FormatKernels
where
    F: BlockFormat + Lattice + LatticeKernels + crate::tiled::TiledOrder,
{
    let mut k = FormatKernels::reference::<F>();
    crate::tiled::install::<F, 0>(&mut k, cpu);
    debug_assert_eq!(<F as BlockFormat>::ACTIVATION, Activation::Q8_K);
    #[cfg(target_arch = "x86_64")]
    {
        if cpu.has_avx2() {
            k.rows = F::ROWS_AVX2;
        }
        if cpu.isa() == crate::cpu::Isa::Avx512Vnni {
            k.rows = F::ROWS_AVX512;
        }
    }
    let _ = cpu;
    k
}

/// The row kernels a lattice format has beyond its reference (each built only into a
/// table for a CPU with the instruction set it needs).
pub(crate) trait LatticeKernels {
    /// Rows with AVX2, FMA and F16C.
    #[cfg(target_arch = "x86_64")]
    const ROWS_AVX2: crate::matrix::RowKernel;
    /// Rows with the AVX-512 VNNI set.
    #[cfg(target_arch = "x86_64")]
    const ROWS_AVX512: crate::matrix::RowKernel;
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod x86_64;

#[cfg(test)]
mod tests {
    use super::*;
    use dspark_gguf::GgmlType;

    /// The kernels rely on Q8_K quants never being -128 (a sign flip of -128 would wrap):
    /// ggml's quantizer scales by `-127 / max` and keeps the largest value at ∓127, and
    /// non-finite or vanishing scales give zeros. Checked on edge blocks here.
    #[test]
    fn q8_k_quants_stay_within_127() {
        let mut blocks: Vec<[f32; QK_K]> = Vec::new();
        for amax in [
            1e-45f32,
            1e-40,
            3.6e-37,
            3.8e-37,
            1e-20,
            1.0,
            3.0e38,
            f32::MAX,
        ] {
            let mut b = [0.0f32; QK_K];
            for (i, v) in b.iter_mut().enumerate() {
                *v = amax * ((i as f32) - 127.5) / 128.0;
            }
            b[200] = -amax;
            blocks.push(b);
            b[3] = amax;
            blocks.push(b);
        }
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            let mut b = [0.5f32; QK_K];
            b[17] = bad;
            b[18] = -3.0;
            blocks.push(b);
        }
        let x: Vec<f32> = blocks.into_iter().flatten().collect();
        let mut out = vec![0u8; x.len() / QK_K * crate::q8_k::BLOCK_BYTES];
        crate::q8_k::quantize_activations_ref(&x, &mut out);
        for b in out.chunks_exact(crate::q8_k::BLOCK_BYTES) {
            assert!(b[4..4 + QK_K].iter().all(|&q| q as i8 != -128));
        }
    }

    /// Real rows (`testdata/iq/`, cut from llama.cpp requantizations of SmolLM2): every
    /// kernel set's dot products with three columns are ggml's own (its `vec_dot`, printed
    /// by `testdata/iq/ggml_dots.c`) bit for bit, and close to the dequantized rows' f32
    /// dots; the dequantized values are gguf-py's bit for bit.
    #[test]
    fn real_rows_give_ggml_s_dots_and_gguf_py_s_values() {
        use crate::gemm::{gemm_with, Matrix};
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/iq");
        let expected = std::fs::read_to_string(dir.join("ggml_dots.txt")).unwrap();
        let (rows, cols, n) = (6, 1536, 3);
        // The columns of `ggml_dots.c`.
        let x: Vec<f32> = (0..n)
            .flat_map(|c| {
                (0..cols)
                    .map(move |i| (((i * 7919 + c * 104_729 + 13) % 2001) as f32 - 1000.0) / 997.0)
            })
            .collect();
        let tmp = tempfile::tempdir().unwrap();
        let mut batch = Vec::new();
        let mut dequantized = Vec::new();
        for line in expected.lines() {
            let mut words = line.split_whitespace();
            let name = words.next().unwrap();
            let want: Vec<u32> = words.map(|w| u32::from_str_radix(w, 16).unwrap()).collect();
            let ty = GgmlType::all()
                .find(|t| t.name().eq_ignore_ascii_case(name))
                .unwrap();
            let bytes = std::fs::read(dir.join(format!("{name}.bin"))).unwrap();
            let m = Matrix::new(ty, rows, cols, &bytes).unwrap();
            let mut wf = vec![0.0f32; rows * cols];
            (m.format().unwrap().dequantize_ref)(&bytes, &mut wf);
            let sets = [
                Some(crate::Kernels::scalar()),
                crate::Kernels::avx2(),
                crate::Kernels::avx512(),
            ];
            for k in sets.into_iter().flatten() {
                let mut y = vec![0.0f32; n * rows];
                gemm_with(&k, &m, &x, &mut y);
                let got: Vec<u32> = y.iter().map(|v| v.to_bits()).collect();
                assert_eq!(got, want, "{} {ty}: ggml's dot products", k.isa);
            }
            for c in 0..n {
                for r in 0..rows {
                    let w = &wf[r * cols..(r + 1) * cols];
                    let xc = &x[c * cols..(c + 1) * cols];
                    let exact: f64 = w.iter().zip(xc).map(|(a, b)| f64::from(a * b)).sum();
                    let scale: f64 = w
                        .iter()
                        .zip(xc)
                        .map(|(a, b)| f64::from((a * b).abs()))
                        .sum();
                    let got = f64::from(f32::from_bits(want[c * rows + r]));
                    assert!(
                        (got - exact).abs() <= 0.01 * scale,
                        "{ty} column {c} row {r}: {got} vs {exact}"
                    );
                }
            }
            let out = tmp.path().join(format!("{name}.f32"));
            batch.push(serde_json::json!({"type": ty.name(), "blocks": dir.join(format!("{name}.bin")), "out": out}));
            dequantized.push((ty, out, wf));
        }
        assert_eq!(dequantized.len(), 5);
        let list = tmp.path().join("batch.json");
        std::fs::write(&list, serde_json::to_vec(&batch).unwrap()).unwrap();
        let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/python/dequantize.py");
        let python = std::env::var("DSPARK_PYTHON").unwrap_or_else(|_| "python3".into());
        let o = std::process::Command::new(&python)
            .arg(&script)
            .arg(&list)
            .output()
            .unwrap_or_else(|e| panic!("cannot run {python}: {e} (set DSPARK_PYTHON)"));
        assert!(
            o.status.success(),
            "gguf-py failed: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        for (ty, out, wf) in dequantized {
            let got: Vec<u32> = std::fs::read(&out)
                .unwrap()
                .chunks_exact(4)
                .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect();
            let want: Vec<u32> = wf.iter().map(|v| v.to_bits()).collect();
            assert_eq!(got, want, "{ty}: dequantized values");
        }
    }

    /// The five formats' kernel-table rows, for every kernel set this CPU has.
    fn lattice_rows() -> Vec<crate::FormatKernels> {
        let sets = [
            Some(crate::Kernels::scalar()),
            crate::Kernels::avx2(),
            crate::Kernels::avx512(),
        ];
        let types = [
            GgmlType::IQ2_XXS,
            GgmlType::IQ2_XS,
            GgmlType::IQ2_S,
            GgmlType::IQ3_XXS,
            GgmlType::IQ3_S,
        ];
        sets.into_iter()
            .flatten()
            .flat_map(|k| types.map(|t| *k.format(t).expect("a lattice format")))
            .collect()
    }

    /// Blocks at the edges of the encoding: every byte 0xFF (the largest indices and scale
    /// fields, every value negative) or 0x00, against columns whose quants are all ±127, so
    /// the integer sums reach their largest magnitudes; and blocks whose scale is infinite
    /// or NaN. Every kernel gives the reference's bits (NaN as NaN); the reference's i32
    /// sums would panic on overflow in the tests' build.
    #[test]
    fn extreme_blocks_give_the_reference_s_bits() {
        use crate::gemm::{Columns, Matrix};
        let cols = 3 * QK_K;
        // Columns: +max, −max, alternating (Q8_K quantizes each to ±127).
        let x: Vec<f32> = (0..3 * cols)
            .map(|i| match i / cols {
                0 => 1.0,
                1 => -1.0,
                _ => [1.0, -1.0][i % 2],
            })
            .collect();
        for f in lattice_rows() {
            let bb = f.block_bytes();
            for (fill, d) in [
                (0xFFu8, 0x3C00u16),
                (0x00, 0x3C00),
                (0xFF, 0x7BFF),
                (0x5A, 0x7C00),
                (0xA5, 0xFC00),
                (0x3C, 0x7E00),
            ] {
                let mut w = vec![fill; 2 * (cols / QK_K) * bb];
                for b in w.chunks_exact_mut(bb) {
                    b[..2].copy_from_slice(&d.to_le_bytes());
                }
                let m = Matrix::new(f.ty, 2, cols, &w).unwrap();
                let mut y = vec![0.0f32; 6];
                let xc = Columns::new(f.activation, &x, cols);
                (f.rows)(&m, 0, &xc, &mut y);
                for r in 0..2 {
                    for c in 0..3 {
                        let want = (f.dot_ref)(m.row(r), &xc, c);
                        let got = y[r * 3 + c];
                        assert!(
                            got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                            "{} fill {fill:#x} d {d:#x} row {r} column {c}: {got} vs {want}",
                            f.ty
                        );
                    }
                }
            }
        }
    }
}

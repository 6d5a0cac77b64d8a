//! What the Q8_K-partnered superblock formats share: a row is superblocks of 256 values,
//! each with one f16 scale `d_w`, met by Q8_K activation blocks (an f32 scale `d_x`, 256
//! quants, sums of sixteen). [`ternary_dot`] is ggml's order for TQ1_0 and TQ2_0, whose
//! x86-64 kernels share the skeleton in `superblock/x86_64.rs`; IQ1_S and IQ1_M
//! ([`crate::iq1_s`], [`crate::iq1_m`]) keep their own orders beside their layouts.

/// Values per superblock (`QK_K`, `ggml-common.h`).
pub const QK_K: usize = 256;

/// ggml's x86 order for the ternary formats (`ggml_vec_dot_tq1_0_q8_K`,
/// `ggml_vec_dot_tq2_0_q8_K`, `ggml-cpu/arch/x86/quants.c`): per superblock eight exact
/// i32 lanes, lane l holding `Σ c·q` over the values with `(v mod 32) / 4 == l` (c the
/// unsigned code, `value + 1`) less the Q8_K sums of sixteen `2l` and `2l + 1`; each lane
/// fused into its own accumulator with `d_x · d_w`; [`crate::lanes::hsum8`] at the end.
pub fn ternary_dot(
    row: &[u8],
    x: &crate::columns::Columns<'_>,
    c: usize,
    block_bytes: usize,
    d_at: usize,
    value: fn(&[u8], usize) -> i32,
) -> f32 {
    let (dx, qx) = x.q8(c);
    let bs = x.q8_bsums(c);
    let mut acc = crate::lanes::LaneAcc::default();
    for (b, blk) in row.chunks_exact(block_bytes).enumerate() {
        let q = &qx[b * QK_K..(b + 1) * QK_K];
        let mut lanes =
            crate::lanes::position_lanes(QK_K, |v| (value(blk, v) + 1) * i32::from(q[v]));
        for (l, lane) in lanes.iter_mut().enumerate() {
            *lane -= i32::from(bs[16 * b + 2 * l]) + i32::from(bs[16 * b + 2 * l + 1]);
        }
        acc.add(dx[b] * f16_at(blk, d_at), &lanes);
    }
    acc.sum()
}

/// The f16 at `at` of `block`, as f32.
#[inline]
pub fn f16_at(block: &[u8], at: usize) -> f32 {
    half::f16::from_bits(u16::from_le_bytes([block[at], block[at + 1]])).to_f32()
}

/// `w · x` as the SIMD kernels multiply signed weights by signed activation quants (`|w|`
/// times `x` with w's sign, `vpsignb`): exact, except that for `w < 0` an `x` of −128 is
/// negated to −128 (an 8-bit wrap). Q8_K quants are −128 only for non-finite activations.
#[inline]
pub fn signed_mul(w: i8, x: i8) -> i32 {
    let sx = match w.signum() {
        -1 => x.wrapping_neg(),
        0 => 0,
        _ => x,
    };
    i32::from(w.unsigned_abs()) * i32::from(sx)
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod x86_64;

#[cfg(test)]
mod tests {
    use dspark_gguf::GgmlType;

    use crate::{Activation, Columns, Kernels};

    /// Rows of real SmolLM2-135M `blk.10.ffn_down.weight` tensors (1536 values, six
    /// superblocks) requantized by llama.cpp (`testdata/README.md`), with the FNV-1a hash
    /// of gguf-py's dequantization of them (little-endian f32 bytes) and ggml's x86 dot
    /// products (`vec_dot` of its CPU type traits, Q8_K columns by its `from_float`) with
    /// the columns of [`column`], column-major.
    struct Real {
        ty: GgmlType,
        bytes: &'static [u8],
        rows: usize,
        gguf_py_fnv: u64,
        ggml: &'static [f32],
    }

    const COLS: usize = 1536;

    #[rustfmt::skip]
    const REAL: [Real; 5] = [
        Real {
            ty: GgmlType::IQ4_XS,
            bytes: include_bytes!("../testdata/iq4_xs-smollm2.bin"),
            rows: 4,
            gguf_py_fnv: 0x9e73d4abb95555ba,
            ggml: &[-11.134095, -10.618406, -3.5341663, -10.21198, -4.1506205, 12.708313,
                -0.6312251, -5.2465434, 5.9340553, -2.249657, 6.843862, 13.080634],
        },
        Real {
            ty: GgmlType::IQ1_S,
            bytes: include_bytes!("../testdata/iq1_s-smollm2.bin"),
            rows: 8,
            gguf_py_fnv: 0xb568797d06172b1e,
            ggml: &[-13.917241, -11.340172, 1.6777291, -9.367847, 0.01930052, -3.577729,
                -7.5700116, 7.2738338, 0.5488592, 20.65394, -7.540202, -9.333749, -15.940821,
                -7.814022, 5.0078764, -7.8041005, 7.255731, -5.71367, 12.905186, 12.261337,
                15.736932, 10.628516, -2.8522952, -0.9186666],
        },
        Real {
            ty: GgmlType::IQ1_M,
            bytes: include_bytes!("../testdata/iq1_m-smollm2.bin"),
            rows: 8,
            gguf_py_fnv: 0x89a3bede64d64ebd,
            ggml: &[-17.105013, -6.437234, -0.809392, -10.12611, 0.6156916, 0.8604082,
                -6.167144, 6.52773, -3.6093364, 11.497155, -2.1851158, -6.4298296, -7.8765845,
                -13.692134, 12.672056, -0.4943136, 10.098523, -5.0861974, 5.9640517, 14.344628,
                17.610348, 9.873953, -7.0329204, -1.6978483],
        },
        Real {
            ty: GgmlType::TQ1_0,
            bytes: include_bytes!("../testdata/tq1_0-smollm2.bin"),
            rows: 8,
            gguf_py_fnv: 0x9912b9fb3af89d81,
            ggml: TERNARY,
        },
        Real {
            ty: GgmlType::TQ2_0,
            bytes: include_bytes!("../testdata/tq2_0-smollm2.bin"),
            rows: 8,
            gguf_py_fnv: 0x9912b9fb3af89d81,
            ggml: TERNARY,
        },
    ];

    /// TQ1_0 and TQ2_0 hold the same ternary values (requantized from the same file).
    #[rustfmt::skip]
    const TERNARY: &[f32] = &[-15.213089, -3.986782, -3.5580387, -2.7888794, -6.620138,
        5.243599, -8.5254135, 0.34550285, -1.7704811, -0.79208755, -5.281679, -8.724964,
        6.0762177, -2.0632381, -5.3524075, -5.7304497, 6.004427, -8.1649475, 4.7493362,
        18.562994, 5.856056, 9.085197, -3.4963493, 7.809231];

    /// Column `c` of the real-data tests: `((37k + 101c + 11) mod 257 − 128) / 64`, exact
    /// in f32 (the fixture script computes the same).
    fn column(c: usize) -> Vec<f32> {
        (0..COLS)
            .map(|k| (((37 * k + 101 * c + 11) % 257) as f32 - 128.0) / 64.0)
            .collect()
    }

    fn fnv1a(bytes: impl IntoIterator<Item = u8>) -> u64 {
        bytes.into_iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        })
    }

    /// On real rows: dequantization is gguf-py's (by hash), `dot_ref` gives ggml's own x86
    /// dot product bit for bit (the same activations, integer lanes and float steps), and
    /// every kernel set gives `dot_ref`'s bits for three columns at once and one at a time.
    #[test]
    fn real_rows_match_gguf_py_and_ggml() {
        let x: Vec<f32> = (0..3).flat_map(column).collect();
        for real in &REAL {
            let f = *Kernels::scalar().format(real.ty).unwrap();
            assert_eq!(
                real.bytes.len(),
                real.rows * f.row_bytes(COLS),
                "{}",
                real.ty
            );
            let mut y = vec![0.0f32; real.rows * COLS];
            (f.dequantize_ref)(real.bytes, &mut y);
            let hash = fnv1a(y.iter().flat_map(|v| v.to_le_bytes()));
            assert_eq!(hash, real.gguf_py_fnv, "{}: dequantization", real.ty);
            let m = crate::Matrix::new(real.ty, real.rows, COLS, real.bytes).unwrap();
            let xc = Columns::new(Activation::Q8_K, &x, COLS);
            for c in 0..3 {
                for r in 0..real.rows {
                    let ours = (f.dot_ref)(m.row(r), &xc, c);
                    let ggml = real.ggml[c * real.rows + r];
                    assert_eq!(
                        ours.to_bits(),
                        ggml.to_bits(),
                        "{} row {r} column {c}: {ours} vs ggml {ggml}",
                        real.ty
                    );
                }
            }
            for k in [Some(Kernels::scalar()), Kernels::avx2(), Kernels::avx512()]
                .into_iter()
                .flatten()
            {
                let fk = k.format(real.ty).unwrap();
                let xk = Columns::with(&k, Activation::Q8_K, &x, COLS);
                let mut all = vec![0.0f32; real.rows * 3];
                (fk.rows)(&m, 0, &xk, &mut all);
                for c in 0..3 {
                    let one = &x[c * COLS..(c + 1) * COLS];
                    let x1 = Columns::with(&k, Activation::Q8_K, one, COLS);
                    let mut alone = vec![0.0f32; real.rows];
                    (fk.rows)(&m, 0, &x1, &mut alone);
                    for r in 0..real.rows {
                        let want = (f.dot_ref)(m.row(r), &xc, c).to_bits();
                        assert_eq!(all[r * 3 + c].to_bits(), want, "{} {}", k.isa, real.ty);
                        assert_eq!(alone[r].to_bits(), want, "{} {}", k.isa, real.ty);
                    }
                }
            }
        }
    }

    #[test]
    fn signed_mul_is_exact_but_for_minus_128() {
        for w in i8::MIN..=i8::MAX {
            for x in i8::MIN..=i8::MAX {
                let want = if w < 0 && x == -128 {
                    -i32::from(w.unsigned_abs()) * 128
                } else {
                    i32::from(w) * i32::from(x)
                };
                assert_eq!(super::signed_mul(w, x), want, "{w} {x}");
            }
        }
    }
}

//! Activation columns, prepared once for the weight format they meet.
//!
//! ggml's CPU matmul converts the activations of a product to the weight type's partner
//! (its `vec_dot_type`) before any dot product: F16 weights meet F16 activations, BF16
//! ones BF16, Q8_0 / Q4_0 / Q5_0 / IQ4_NL / MXFP4 / Q1_0 weights meet Q8_0 blocks, Q4_1 and
//! Q5_1 meet Q8_1 blocks, the k-, i- and ternary quants meet Q8_K blocks. [`Activation`]
//! names these partners and [`Columns`] holds a batch of columns converted to one of them
//! (each column converted alone, so a column's bytes never depend on its neighbours). The
//! quantized partners' quantizers live in their modules ([`crate::q8_0`],
//! [`crate::q8_1`], [`crate::q8_k`]) and reach this module through the kernel table
//! ([`ActivationKernels`]), so no format module is imported here.

use std::sync::OnceLock;

use dspark_gguf::GgmlType;
use half::f16;

/// What a weight row is multiplied with: f32 columns, or columns converted once to the
/// weight type's partner, as ggml's CPU matmul does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(non_camel_case_types)]
pub enum Activation {
    /// Plain f32 values.
    F32,
    /// Values rounded to F16 (nearest, ties to even), kept as f32: every product with an
    /// F16 weight is then exact in f32.
    F16,
    /// Values rounded to BF16 (nearest, ties to even), kept as f32.
    Bf16,
    /// Q8_0 blocks of 32 (an f16 scale, 32 i8), by ggml's x86 recipe
    /// ([`crate::q8_0::quantize_activations`]).
    Q8_0,
    /// Q8_1 blocks of 32 (an f16 scale, an f16 `d · Σq`, 32 i8), by ggml's x86 recipe
    /// ([`crate::q8_1::quantize_activations`]).
    Q8_1,
    /// Q8_K blocks of 256 (an f32 scale, 256 i8, sixteen i16 sums of 16), by ggml's
    /// recipe ([`crate::q8_k::quantize_activations`]).
    Q8_K,
}

impl Activation {
    /// Every activation kind.
    pub const ALL: [Activation; 6] = [
        Activation::F32,
        Activation::F16,
        Activation::Bf16,
        Activation::Q8_0,
        Activation::Q8_1,
        Activation::Q8_K,
    ];

    /// The GGUF type of a quantized activation's blocks, or `None` for the float kinds.
    pub fn block_type(self) -> Option<GgmlType> {
        match self {
            Activation::F32 | Activation::F16 | Activation::Bf16 => None,
            Activation::Q8_0 => Some(GgmlType::Q8_0),
            Activation::Q8_1 => Some(GgmlType::Q8_1),
            Activation::Q8_K => Some(GgmlType::Q8_K),
        }
    }

    /// Values per block: 1 for the float kinds.
    pub fn block_len(self) -> usize {
        self.block_type().map_or(1, |t| t.block_size() as usize)
    }
}

/// A quantized activation kind's quantizer for one CPU, and its scalar reference (the
/// same bytes): a row of the kernel table's activation part.
#[derive(Clone, Copy, Debug)]
pub struct ActivationKernels {
    /// Which kind (one of the quantized ones).
    pub activation: Activation,
    /// Whole blocks of f32 → the kind's blocks, as ggml lays them out.
    pub quantize: fn(&[f32], &mut [u8]),
    /// The scalar reference of `quantize` (the same bytes).
    pub quantize_ref: fn(&[f32], &mut [u8]),
}

/// Activation columns prepared for one [`Activation`]: the f32 values, and for the
/// quantized kinds each column's blocks split into f32 scales, i8 quants and the kind's
/// sums (Q8_1's stored `d · Σq`, Q8_K's sums of sixteen).
#[derive(Clone, Debug)]
pub struct Columns<'x> {
    activation: Activation,
    x: &'x [f32],
    /// `x` rounded to the activation type (F16, BF16); empty otherwise.
    rounded: Vec<f32>,
    len: usize,
    n: usize,
    /// One scale per block (quantized kinds).
    d: Vec<f32>,
    /// Q8_1: the stored `d · Σq` of every block, as f32.
    s: Vec<f32>,
    qs: Vec<i8>,
    /// Q8_K: the sums of each run of 16 quants.
    bsums: Vec<i16>,
    /// `-128 · Σ q` of every block, built on first use (see [`Columns::q8_bias`]).
    bias: OnceLock<Vec<i32>>,
}

/// Blocks quantized per call while preparing columns (bounds the staging buffer).
const STAGE_VALUES: usize = 2048;

fn f16_at(b: &[u8], at: usize) -> f32 {
    f16::from_bits(u16::from_le_bytes([b[at], b[at + 1]])).to_f32()
}

impl<'x> Columns<'x> {
    /// `x` as columns of `len` values, prepared for `activation` with this CPU's kernels.
    ///
    /// # Panics
    /// If `x` is not whole columns, or (quantized kinds) `len` is not whole blocks.
    pub fn new(activation: Activation, x: &'x [f32], len: usize) -> Columns<'x> {
        Columns::with(crate::kernels(), activation, x, len)
    }

    /// [`Columns::new`] with the quantizers of `kernels` (any kernel set gives the same
    /// bytes).
    ///
    /// # Panics
    /// As [`Columns::new`].
    pub fn with(
        kernels: &crate::Kernels,
        activation: Activation,
        x: &'x [f32],
        len: usize,
    ) -> Columns<'x> {
        assert!(
            len > 0 && x.len().is_multiple_of(len),
            "x must hold whole columns of {len}"
        );
        let n = x.len() / len;
        let mut c = Columns {
            activation,
            x,
            rounded: Vec::new(),
            len,
            n,
            d: Vec::new(),
            s: Vec::new(),
            qs: Vec::new(),
            bsums: Vec::new(),
            bias: OnceLock::new(),
        };
        match activation {
            Activation::F32 => {}
            Activation::F16 => c.rounded = x.iter().map(|&v| f16::from_f32(v).to_f32()).collect(),
            Activation::Bf16 => {
                c.rounded = x
                    .iter()
                    .map(|&v| half::bf16::from_f32(v).to_f32())
                    .collect()
            }
            Activation::Q8_0 | Activation::Q8_1 | Activation::Q8_K => {
                let ty = activation.block_type().expect("a quantized kind");
                let (bl, bb) = (ty.block_size() as usize, ty.type_size() as usize);
                assert!(len.is_multiple_of(bl), "{ty} columns are whole blocks");
                let quantize = kernels
                    .activation(activation)
                    .expect("every quantized activation kind has a kernel row")
                    .quantize;
                let blocks = x.len() / bl;
                c.d.reserve_exact(blocks);
                c.qs.reserve_exact(x.len());
                if activation == Activation::Q8_1 {
                    c.s.reserve_exact(blocks);
                }
                if activation == Activation::Q8_K {
                    c.bsums.reserve_exact(blocks * 16);
                }
                let per = (STAGE_VALUES / bl).max(1);
                let mut bytes = vec![0u8; per * bb];
                for xs in x.chunks(per * bl) {
                    let out = &mut bytes[..xs.len() / bl * bb];
                    quantize(xs, out);
                    for b in out.chunks_exact(bb) {
                        c.split(b);
                    }
                }
            }
        }
        c
    }

    /// Appends one quantized block, as ggml lays it out, to the split arrays.
    fn split(&mut self, b: &[u8]) {
        match self.activation {
            Activation::Q8_0 => {
                self.d.push(f16_at(b, 0));
                self.qs.extend(i8s(&b[2..34]));
            }
            Activation::Q8_1 => {
                self.d.push(f16_at(b, 0));
                self.s.push(f16_at(b, 2));
                self.qs.extend(i8s(&b[4..36]));
            }
            Activation::Q8_K => {
                self.d.push(f32::from_le_bytes([b[0], b[1], b[2], b[3]]));
                self.qs.extend(i8s(&b[4..260]));
                self.bsums.extend(
                    b[260..292]
                        .chunks_exact(2)
                        .map(|p| i16::from_le_bytes([p[0], p[1]])),
                );
            }
            Activation::F32 | Activation::F16 | Activation::Bf16 => {
                unreachable!("float columns have no blocks")
            }
        }
    }

    /// What the columns were prepared for.
    pub fn activation(&self) -> Activation {
        self.activation
    }

    /// Number of columns.
    pub fn count(&self) -> usize {
        self.n
    }

    /// Values per column.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: a column holds at least one value.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Column `c` as f32 (rounded to the activation type for F16 and BF16; the unconverted
    /// values for the quantized kinds).
    pub fn f32(&self, c: usize) -> &[f32] {
        let all = if self.rounded.is_empty() {
            self.x
        } else {
            &self.rounded
        };
        &all[c * self.len..(c + 1) * self.len]
    }

    fn blocks_per_column(&self) -> usize {
        self.len / self.activation.block_len()
    }

    /// Column `c`'s blocks (quantized kinds): the per-block scales and the quants (empty
    /// for the float kinds).
    pub fn q8(&self, c: usize) -> (&[f32], &[i8]) {
        let nb = if self.d.is_empty() {
            0
        } else {
            self.blocks_per_column()
        };
        (
            &self.d[c * nb..(c + 1) * nb],
            &self.qs
                [c * nb * self.activation.block_len()..(c + 1) * nb * self.activation.block_len()],
        )
    }

    /// Column `c`'s Q8_1 sums: each block's stored `d · Σq` as f32 (empty unless prepared
    /// for Q8_1).
    pub fn q8_sums(&self, c: usize) -> &[f32] {
        let nb = if self.s.is_empty() {
            0
        } else {
            self.blocks_per_column()
        };
        &self.s[c * nb..(c + 1) * nb]
    }

    /// Column `c`'s Q8_K sums of sixteen: block b's run r at `16·b + r` (empty unless
    /// prepared for Q8_K).
    pub fn q8_bsums(&self, c: usize) -> &[i16] {
        let per = if self.bsums.is_empty() {
            0
        } else {
            self.blocks_per_column() * 16
        };
        &self.bsums[c * per..(c + 1) * per]
    }

    /// `-128 · Σ q` of each of column `c`'s Q8_0 blocks (empty unless prepared for Q8_0),
    /// for kernels that multiply `w + 128`. Built for all columns on the first call.
    pub fn q8_bias(&self, c: usize) -> &[i32] {
        let nb = if self.activation == Activation::Q8_0 {
            self.len / 32
        } else {
            0
        };
        let bias = self.bias.get_or_init(|| {
            if self.activation != Activation::Q8_0 {
                return Vec::new();
            }
            self.qs
                .chunks_exact(32)
                .map(|q| -128 * q.iter().map(|&v| i32::from(v)).sum::<i32>())
                .collect()
        });
        &bias[c * nb..(c + 1) * nb]
    }
}

/// Bytes [`Columns`] of `n` columns of `len` values hold at most, for memory checks made
/// before a run: the rounded copy of the F16 and BF16 kinds (4 bytes per value), or the
/// quants and per-block scales, sums and biases (under 3 bytes per
/// value), plus the staging buffer.
pub fn prepared_bytes(len: usize, n: usize) -> u64 {
    (4 * len as u64)
        .saturating_mul(n as u64)
        .saturating_add(STAGE_VALUES as u64 * 2)
}

/// Bytes read as the i8 quants they hold.
fn i8s(bytes: &[u8]) -> impl Iterator<Item = i8> + '_ {
    bytes.iter().map(|&v| v as i8)
}

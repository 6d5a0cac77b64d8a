//! Weight matrix × activation columns: `y[c] = W · x[c]` for 1 to a few columns (decode,
//! draft block, verify block), with W in any format of the kernel table ([`crate::FORMATS`])
//! as stored in a GGUF.
//!
//! **Numerics contract.** Every output element `y[c][r]` is computed by one call of the
//! row kernel on row `r` and column `c`, whatever the number of columns and however the
//! rows are split across threads. So a batched forward (verify B positions at once) gives
//! the same bits per column as B single-column calls — the property speculative decoding
//! needs to be lossless against target-only decoding with the same code.
//!
//! Q8_0 weights multiply Q8_0 activations (each column is quantized once with
//! [`crate::q8_0::quantize_ref`], as ggml does for its CPU matmul; see [`Columns`]): per
//! block an exact integer dot, scaled by `d_w · d_x`. Plain weights multiply f32
//! activations. The AVX2 row kernels (in `gemm/x86_64.rs`) sum in a different order than
//! the formats' scalar references (`dot_ref`), so they agree within [`DOT_TOLERANCE`] of
//! `Σ|w·x|`, not bit for bit. Each processes a few
//! columns per pass over a row, with per-column work identical to a single column's.

use dspark_gguf::GgmlType;
use half::f16;
use std::sync::OnceLock;

use rayon::prelude::*;

use crate::format::{Activation, FormatKernels};
use crate::q8_0::{BLOCK_BYTES, QK8_0};
use crate::Kernels;

/// Relative tolerance between a fast dot product and its scalar reference, as a fraction
/// of `Σ |w_k · x_k|` (f32 accumulation over up to ~10^5 terms in different orders).
pub const DOT_TOLERANCE: f32 = 1e-5;

/// A row-major weight matrix: `rows` rows of `cols` values (GGUF `ne = [cols, rows]`) of a
/// format in the kernel table.
#[derive(Clone, Copy, Debug)]
pub struct Matrix<'a> {
    /// Storage type (always one of [`crate::FORMATS`]).
    pub ty: GgmlType,
    /// Output size.
    pub rows: usize,
    /// Input size (whole blocks of the format).
    pub cols: usize,
    /// `rows × row_bytes` bytes.
    pub data: &'a [u8],
    row_bytes: usize,
    /// The same rows' whole tiles re-laid for a kernel that reads them ([`Packed`]).
    packed: Option<&'a [u8]>,
}

impl<'a> Matrix<'a> {
    /// Checks the type and sizes; `None` if no kernel runs `ty`, `cols` is not whole
    /// blocks, or `data` does not hold exactly `rows` rows of `cols`.
    pub fn new(ty: GgmlType, rows: usize, cols: usize, data: &'a [u8]) -> Option<Matrix<'a>> {
        let f = crate::format_of(ty)?;
        if cols == 0 || !cols.is_multiple_of(f.block_len()) {
            return None;
        }
        let row_bytes = f.row_bytes(cols);
        (data.len() == rows.checked_mul(row_bytes)?).then_some(Matrix {
            ty,
            rows,
            cols,
            data,
            row_bytes,
            packed: None,
        })
    }

    /// This matrix with `p`, its packed tiles, for the kernels that read them (the results
    /// are the same bits with or without).
    ///
    /// # Panics
    /// If `p` was packed from a matrix of another type or shape.
    pub fn with_packed(self, p: &'a Packed) -> Matrix<'a> {
        assert!(
            self.ty == GgmlType::Q8_0 && p.rows == self.rows && p.cols == self.cols,
            "packed tiles of another matrix"
        );
        Matrix {
            packed: Some(p.as_bytes()),
            ..self
        }
    }

    /// The packed tiles ([`Packed`]) of rows `0..rows / PACK_ROWS * PACK_ROWS`, if any:
    /// tile t is `tile_bytes` bytes at `t * tile_bytes`.
    pub(crate) fn packed(&self) -> Option<&'a [u8]> {
        self.packed
    }

    /// Row `r`'s bytes.
    pub fn row(&self, r: usize) -> &'a [u8] {
        &self.data[r * self.row_bytes..(r + 1) * self.row_bytes]
    }

    /// Bytes per row.
    pub fn row_bytes(&self) -> usize {
        self.row_bytes
    }

    /// The kernel-table row of this matrix's format, for this CPU.
    pub fn format(&self) -> &'static FormatKernels {
        crate::kernels()
            .format(self.ty)
            .expect("Matrix::new admits only types in the table")
    }
}

impl Matrix<'_> {
    /// Row `r` as f32 (an embedding lookup).
    ///
    /// # Panics
    /// If `r` is out of range or `out.len() != cols`.
    pub fn row_f32(&self, r: usize, out: &mut [f32]) {
        assert!(r < self.rows && out.len() == self.cols, "row_f32 bounds");
        (self.format().dequantize)(self.row(r), out);
    }
}

/// Rows per tile of the packed Q8_0 layout ([`Packed`]).
pub const PACK_ROWS: usize = 16;

/// Bytes of one block of one packed tile: 16 rows' quants (512) and scales (32).
pub(crate) const PACK_BLOCK_BYTES: usize = PACK_ROWS * BLOCK_BYTES;

/// A Q8_0 matrix's whole tiles of [`PACK_ROWS`] rows, re-laid so the AVX-512 VNNI kernel
/// computes sixteen rows' block sums in the sixteen lanes of one register, with no
/// reduction per row: in the file each row's blocks follow one another, so a one-column
/// kernel must reduce every block's products across a register (a third of its work on a
/// 256-wide model). Rows beyond the last whole tile stay in the file's layout only.
///
/// Tile t (rows 16t..16t + 16) of a matrix of nb blocks per row is `nb · 544` bytes at
/// `t · nb · 544`: first the quants, block by block, each block eight 64-byte registers,
/// register k holding bytes 4k..4k + 4 of that block of rows 0..16 (each byte XOR 0x80,
/// i.e. `w + 128` as an unsigned byte, what `vpdpbusd` multiplies); then the f16 scales,
/// block by block, 16 rows each. The same bytes as the file's, moved: a packed matrix is
/// exactly as large. Built once at load; the buffer is 64-byte aligned.
///
/// Written here rather than taken from ggml's repacking because ggml repacks Q8_0 only for
/// Arm and RISC-V, in layouts for their instructions.
#[derive(Debug)]
pub struct Packed {
    lines: Vec<[u8; 64]>,
    start: usize,
    len: usize,
    rows: usize,
    cols: usize,
}

impl Packed {
    /// The packed tiles of `m`, or `None` when this CPU's kernel for `m`'s type reads no
    /// packed tiles ([`FormatKernels::packs`]) or `m` has no whole tile. Fails, without
    /// allocating, if the memory cannot be reserved.
    pub fn of(m: &Matrix<'_>) -> Result<Option<Packed>, std::collections::TryReserveError> {
        Packed::of_with(crate::kernels(), m)
    }

    /// [`Packed::of`] for the kernels `kernels`.
    pub fn of_with(
        kernels: &Kernels,
        m: &Matrix<'_>,
    ) -> Result<Option<Packed>, std::collections::TryReserveError> {
        let packs = kernels.format(m.ty).is_some_and(|f| f.packs);
        let tiles = m.rows / PACK_ROWS;
        if !packs || m.ty != GgmlType::Q8_0 || tiles == 0 {
            return Ok(None);
        }
        let nb = m.cols / QK8_0;
        let len = tiles * nb * PACK_BLOCK_BYTES;
        let mut lines: Vec<[u8; 64]> = Vec::new();
        lines.try_reserve_exact(len.div_ceil(64) + 1)?;
        lines.resize(len.div_ceil(64) + 1, [0; 64]);
        let start = (64 - lines.as_ptr() as usize % 64) % 64;
        let out = &mut lines.as_flattened_mut()[start..start + len];
        for (t, tile) in out.chunks_exact_mut(nb * PACK_BLOCK_BYTES).enumerate() {
            let (quants, scales) = tile.split_at_mut(nb * PACK_ROWS * QK8_0);
            for r in 0..PACK_ROWS {
                let row = m.row(t * PACK_ROWS + r);
                for (b, block) in row.chunks_exact(BLOCK_BYTES).enumerate() {
                    scales[(b * PACK_ROWS + r) * 2..][..2].copy_from_slice(&block[..2]);
                    for k in 0..8 {
                        let at = b * PACK_ROWS * QK8_0 + k * 64 + 4 * r;
                        for j in 0..4 {
                            quants[at + j] = block[2 + 4 * k + j] ^ 0x80;
                        }
                    }
                }
            }
        }
        Ok(Some(Packed {
            lines,
            start,
            len,
            rows: m.rows,
            cols: m.cols,
        }))
    }

    /// Bytes held (the packed tiles; the same as their rows in the file).
    pub fn bytes(&self) -> u64 {
        self.len as u64
    }

    fn as_bytes(&self) -> &[u8] {
        &self.lines.as_flattened()[self.start..self.start + self.len]
    }
}

/// Activation columns prepared for one [`Activation`] format: the f32 values, and for Q8_0
/// each column's Q8_0 blocks split into f32 scales and i8 quants (quantized once with
/// [`crate::q8_0::quantize_ref`], as ggml does for its CPU matmul).
#[derive(Clone, Debug)]
pub struct Columns<'x> {
    x: &'x [f32],
    /// `x` rounded to the activation type (F16, BF16); empty for F32 and Q8_0.
    rounded: Vec<f32>,
    len: usize,
    n: usize,
    d: Vec<f32>,
    qs: Vec<i8>,
    /// Built on first use by a kernel that reads it (see [`Columns::q8_transposed`]).
    transposed: OnceLock<Transposed>,
    /// `-128 · Σ q` of every block, built on first use (see [`Columns::q8_bias`]).
    bias: OnceLock<Vec<i32>>,
}

/// The quants of each column's whole groups of eight blocks, transposed in 32-bit groups
/// (32-byte register k of a group holds bytes 4k..4k+4 of its blocks 0..8; groups go in
/// pairs 0–1, 2–3, … with their registers interleaved, see [`transposed_slot`]), and per
/// block of those groups `-128 · Σ q` (for kernels that multiply `w + 128`).
#[derive(Clone, Debug)]
struct Transposed {
    qt: Vec<i8>,
    bsum: Vec<i32>,
}

/// Where register k (32 bytes) of block group `group` (of `groups`) lies in a column's
/// transposed quants, in bytes: groups in complete pairs interleave their registers
/// (k of the first group, then k of the second, so one 64-byte load takes both); a last
/// unpaired group keeps its registers in order.
fn transposed_slot(group: usize, k: usize, groups: usize) -> usize {
    if group / 2 * 2 + 1 < groups {
        (group & !1) * 256 + 64 * k + 32 * (group & 1)
    } else {
        group * 256 + 32 * k
    }
}

impl<'x> Columns<'x> {
    /// `x` as columns of `len` values, prepared for `activation`.
    ///
    /// # Panics
    /// If `x` is not whole columns, or (Q8_0) `len` is not a multiple of 32.
    pub fn new(activation: Activation, x: &'x [f32], len: usize) -> Columns<'x> {
        assert!(
            len > 0 && x.len().is_multiple_of(len),
            "x must hold whole columns of {len}"
        );
        let n = x.len() / len;
        let (mut d, mut qs) = (Vec::new(), Vec::new());
        if activation == Activation::Q8_0 {
            assert!(len.is_multiple_of(QK8_0), "Q8_0 columns are whole blocks");
            let blocks = x.len() / QK8_0;
            d.reserve_exact(blocks);
            qs.reserve_exact(blocks * QK8_0);
            // ggml's x86 activation recipe ([`crate::q8_0::quantize_activations`]); 64
            // blocks at a time.
            let quantize = crate::q8_0::quantize_activations;
            let mut bytes = [0u8; 64 * BLOCK_BYTES];
            for xs in x.chunks(64 * QK8_0) {
                let out = &mut bytes[..xs.len() / QK8_0 * BLOCK_BYTES];
                quantize(xs, out);
                for block in out.chunks_exact(BLOCK_BYTES) {
                    d.push(f16::from_bits(u16::from_le_bytes([block[0], block[1]])).to_f32());
                    qs.extend(block[2..].iter().map(|&b| b as i8));
                }
            }
        }
        let rounded = match activation {
            Activation::F16 => x.iter().map(|&v| f16::from_f32(v).to_f32()).collect(),
            Activation::Bf16 => x
                .iter()
                .map(|&v| half::bf16::from_f32(v).to_f32())
                .collect(),
            Activation::F32 | Activation::Q8_0 => Vec::new(),
        };
        Columns {
            x,
            rounded,
            len,
            n,
            d,
            qs,
            transposed: OnceLock::new(),
            bias: OnceLock::new(),
        }
    }

    /// Number of columns.
    pub fn count(&self) -> usize {
        self.n
    }

    /// Column `c` as f32 (rounded to the activation type for F16 and BF16).
    pub fn f32(&self, c: usize) -> &[f32] {
        let all = if self.rounded.is_empty() {
            self.x
        } else {
            &self.rounded
        };
        &all[c * self.len..(c + 1) * self.len]
    }

    /// Column `c` as Q8_0: per-block scales and the quants (empty unless prepared for Q8_0).
    pub fn q8(&self, c: usize) -> (&[f32], &[i8]) {
        let nb = self.len / QK8_0;
        (
            &self.d[c * nb..(c + 1) * nb],
            &self.qs[c * nb * QK8_0..(c + 1) * nb * QK8_0],
        )
    }

    /// Column `c`'s whole groups of eight blocks with their quants transposed in 32-bit
    /// groups, and `-128 · Σ q` per block of those groups (empty unless prepared for
    /// Q8_0). Built for all columns on the first call, so kernels that never read it
    /// (one column, AVX2, scalar) never pay for it.
    pub fn q8_transposed(&self, c: usize) -> (&[i8], &[i32]) {
        let full = self.len / QK8_0 / 8 * 8;
        let t = self.transposed.get_or_init(|| self.transpose());
        (
            &t.qt[c * full * QK8_0..(c + 1) * full * QK8_0],
            &t.bsum[c * full..(c + 1) * full],
        )
    }

    /// `-128 · Σ q` of each of column `c`'s blocks (empty unless prepared for Q8_0), for
    /// kernels that multiply `w + 128`. Built for all columns on the first call.
    pub fn q8_bias(&self, c: usize) -> &[i32] {
        let nb = self.len / QK8_0;
        let bias = self.bias.get_or_init(|| {
            self.qs
                .chunks_exact(QK8_0)
                .map(|q| -128 * q.iter().map(|&v| i32::from(v)).sum::<i32>())
                .collect()
        });
        &bias[c * nb..(c + 1) * nb]
    }

    fn transpose(&self) -> Transposed {
        let nb = self.len / QK8_0;
        let full = nb / 8 * 8;
        let n = if self.qs.is_empty() { 0 } else { self.n };
        let mut qt = vec![0i8; n * full * QK8_0];
        let mut bsum = vec![0i32; n * full];
        for c in 0..n {
            for b in 0..full {
                let src = &self.qs[(c * nb + b) * QK8_0..(c * nb + b + 1) * QK8_0];
                bsum[c * full + b] = -128 * src.iter().map(|&v| i32::from(v)).sum::<i32>();
                let (group, lane) = (b / 8, b % 8);
                for k in 0..8 {
                    let at = c * full * QK8_0 + transposed_slot(group, k, full / 8) + 4 * lane;
                    qt[at..at + 4].copy_from_slice(&src[4 * k..4 * k + 4]);
                }
            }
        }
        Transposed { qt, bsum }
    }
}

/// Rows `first..first + k` of a matrix · every column, into `out` (`k × columns`,
/// row-major): `(matrix, first, columns, out)`.
pub type RowKernel = fn(&Matrix<'_>, usize, &Columns<'_>, &mut [f32]);

/// Rows per task when splitting `rows` rows across threads: about eight tasks per
/// thread (for balance), never fewer than 16 rows (for overhead), whole packed tiles
/// ([`PACK_ROWS`]).
fn rows_per_task(rows: usize) -> usize {
    rows.div_ceil(8 * rayon::current_num_threads())
        .max(16)
        .next_multiple_of(PACK_ROWS)
}

/// Bytes a [`gemm_with`] of `rows` output rows over `cols` inputs and `n` columns
/// allocates besides its input and output, bounded from above: the prepared activations
/// (scales, quants and their transposed copy, under 3 bytes per input value) and each
/// worker's task buffer (`rows per task × n` f32) and accumulators (at most eight 32-byte
/// registers per row). For memory checks made before a run.
pub fn scratch_bytes(rows: usize, cols: usize, n: usize) -> u64 {
    let per = rows_per_task(rows).min(rows.max(1)) as u64;
    let workers = rayon::current_num_threads() as u64;
    let task = per.saturating_mul((4 * n as u64).saturating_add(256));
    workers
        .saturating_mul(task)
        .saturating_add((3 * cols as u64).saturating_mul(n as u64))
}

/// `y[c * w.rows + r] = Σ_k W[r][k] · x[c * w.cols + k]` for each of the `x.len() / w.cols`
/// columns, with the row kernel `kernels` has for the format, on the current rayon pool.
///
/// # Panics
/// If `x` is not whole columns or `y` is not `columns × rows`.
pub fn gemm_with(kernels: &Kernels, w: &Matrix<'_>, x: &[f32], y: &mut [f32]) {
    gemm_many_with(kernels, &[w], x, &mut [y]);
}

/// Several matrices of the same type and input size times the same columns, in one
/// parallel pass (one activation preparation, one fork-join): `ys[i] = ws[i] · x`, each
/// as [`gemm_with`] would compute it, bit for bit.
///
/// # Panics
/// If the matrices differ in type or input size, `x` is not whole columns, or a `ys[i]` is
/// not `columns × ws[i].rows`.
pub fn gemm_many_with(kernels: &Kernels, ws: &[&Matrix<'_>], x: &[f32], ys: &mut [&mut [f32]]) {
    assert_eq!(ws.len(), ys.len(), "one output per matrix");
    let Some(first) = ws.first() else { return };
    assert!(
        ws.iter().all(|w| w.ty == first.ty && w.cols == first.cols),
        "matrices of one call share type and input size"
    );
    let format = kernels
        .format(first.ty)
        .expect("Matrix::new admits only types in the table");
    let kernel = format.rows;
    let x = Columns::new(format.activation, x, first.cols);
    let n = x.count();
    for (w, y) in ws.iter().zip(ys.iter()) {
        assert_eq!(y.len(), n * w.rows, "y must hold {n} columns of {}", w.rows);
    }
    let per = rows_per_task(ws.iter().map(|w| w.rows).sum());
    // A task: rows first..first + k of one matrix, and those rows' slots in each of the n
    // column-major output columns.
    let mut tasks: Vec<(&Matrix<'_>, usize, Vec<&mut [f32]>)> = Vec::new();
    for (w, y) in ws.iter().zip(ys.iter_mut()) {
        let mut columns: Vec<_> = y
            .chunks_mut(w.rows)
            .map(|col| col.chunks_mut(per))
            .collect();
        for t in 0..w.rows.div_ceil(per) {
            let pieces = columns
                .iter_mut()
                .map(|col| col.next().expect("every column has rows / per pieces"))
                .collect();
            tasks.push((w, t * per, pieces));
        }
    }
    tasks
        .into_par_iter()
        .for_each_init(Vec::new, |buf, (w, first, mut pieces)| {
            if n == 1 {
                kernel(w, first, &x, pieces[0]);
                return;
            }
            // The kernel writes rows × columns; scatter into the columns.
            let k = pieces[0].len();
            buf.resize(k * n, 0.0);
            kernel(w, first, &x, &mut buf[..k * n]);
            for (c, piece) in pieces.iter_mut().enumerate() {
                for (r, o) in piece.iter_mut().enumerate() {
                    *o = buf[r * n + c];
                }
            }
        });
}

/// [`gemm`] on the calling thread alone, for products too small to share (a head's, an
/// expert's over a few tokens) run from a parallel loop: the same row kernel on every row
/// and column, so the same bits as [`gemm`].
///
/// # Panics
/// As [`gemm_with`].
pub fn gemm_local(w: &Matrix<'_>, x: &[f32], y: &mut [f32]) {
    let format = crate::kernels()
        .format(w.ty)
        .expect("Matrix::new admits only types in the table");
    let x = Columns::new(format.activation, x, w.cols);
    let n = x.count();
    assert_eq!(y.len(), n * w.rows, "y must hold {n} columns of {}", w.rows);
    if n == 1 {
        (format.rows)(w, 0, &x, y);
        return;
    }
    // The kernel writes rows × columns; scatter into the columns, a tile of rows at a time.
    let per = PACK_ROWS.max(16);
    let mut buf = vec![0.0f32; per * n];
    for first in (0..w.rows).step_by(per) {
        let k = per.min(w.rows - first);
        (format.rows)(w, first, &x, &mut buf[..k * n]);
        for c in 0..n {
            for r in 0..k {
                y[c * w.rows + first + r] = buf[r * n + c];
            }
        }
    }
}

/// [`gemm_many_with`] using the fastest row kernel this CPU has.
pub fn gemm_many(ws: &[&Matrix<'_>], x: &[f32], ys: &mut [&mut [f32]]) {
    gemm_many_with(crate::kernels(), ws, x, ys)
}

/// [`gemm_with`] using the fastest row kernel this CPU has.
pub fn gemm(w: &Matrix<'_>, x: &[f32], y: &mut [f32]) {
    gemm_with(crate::kernels(), w, x, y)
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod x86_64;

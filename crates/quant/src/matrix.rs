//! A weight matrix as stored in a GGUF (rows of whole blocks of one type), and the packed
//! copy a format's kernels may read instead of the file's layout.

use dspark_gguf::GgmlType;

use crate::columns::Columns;
use crate::format::FormatKernels;

/// A row-major weight matrix: `rows` rows of `cols` values (GGUF `ne = [cols, rows]`),
/// each row whole blocks of `ty`.
#[derive(Clone, Copy, Debug)]
pub struct Matrix<'a> {
    /// Storage type.
    pub ty: GgmlType,
    /// Output size.
    pub rows: usize,
    /// Input size (whole blocks of the type).
    pub cols: usize,
    /// `rows × row_bytes` bytes.
    pub data: &'a [u8],
    row_bytes: usize,
    /// The same rows re-laid by the format for its kernels ([`Packed`]).
    packed: Option<&'a Packed>,
    /// Whether llama.cpp may re-lay this matrix at load ([`Matrix::not_relaid`]).
    relayable: bool,
}

impl<'a> Matrix<'a> {
    /// Checks the sizes against the type's block facts (`dspark_gguf`'s table); `None` if
    /// `cols` is not whole blocks or `data` does not hold exactly `rows` rows of `cols`.
    /// Whether a kernel multiplies the type is [`Matrix::format`]'s question.
    pub fn new(ty: GgmlType, rows: usize, cols: usize, data: &'a [u8]) -> Option<Matrix<'a>> {
        let (bl, bb) = (ty.block_size() as usize, ty.type_size() as usize);
        if cols == 0 || !cols.is_multiple_of(bl) {
            return None;
        }
        let row_bytes = (cols / bl).checked_mul(bb)?;
        (data.len() == rows.checked_mul(row_bytes)?).then_some(Matrix {
            ty,
            rows,
            cols,
            data,
            row_bytes,
            packed: None,
            relayable: true,
        })
    }

    /// This matrix with `p`, its packed copy, for the kernels that read one (the results
    /// are the same bits with or without).
    ///
    /// # Panics
    /// If `p` was packed from a matrix of another type or shape.
    pub fn with_packed(self, p: &'a Packed) -> Matrix<'a> {
        assert!(
            p.ty == self.ty && p.rows == self.rows && p.cols == self.cols,
            "packed copy of another matrix"
        );
        Matrix {
            packed: Some(p),
            ..self
        }
    }

    /// This matrix as one llama.cpp computes from the file's layout, never re-laid
    /// (`repack.cpp`'s): a 3-D tensor's slice in a plain product (MLA's per-head
    /// `attn_k_b`), or any matrix of a model run as llama.cpp's `--no-repack` runs it. The
    /// kernels then take the format's one-column order for such matrices
    /// ([`FormatKernels::vec_rows`]).
    pub fn not_relaid(self) -> Matrix<'a> {
        Matrix {
            relayable: false,
            ..self
        }
    }

    /// Whether llama.cpp may re-lay this matrix (its format and row count decide the
    /// rest: [`FormatKernels::relaid`]).
    pub fn relayable(&self) -> bool {
        self.relayable
    }

    /// The packed copy, if any.
    pub fn packed(&self) -> Option<&'a Packed> {
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

    /// The kernel-table row of this matrix's type for this CPU, or `None` when no format
    /// module multiplies it.
    pub fn format(&self) -> Option<&'static FormatKernels> {
        crate::format_of(self.ty)
    }

    /// Row `r` as f32 (an embedding lookup), by the format's dequantizer.
    ///
    /// # Panics
    /// If `r` is out of range, `out.len() != cols`, or no format module reads the type.
    pub fn row_f32(&self, r: usize, out: &mut [f32]) {
        assert!(r < self.rows && out.len() == self.cols, "row_f32 bounds");
        let f = self.format().expect("a matrix of a type in the table");
        (f.dequantize)(self.row(r), out);
    }
}

/// Rows `first..first + k` of a matrix · every column, into `out` (`k × columns`,
/// row-major): `(matrix, first, columns, out)`.
pub type RowKernel = fn(&Matrix<'_>, usize, &Columns<'_>, &mut [f32]);

/// A matrix's rows re-laid by its format for a kernel that reads them faster (a format's
/// [`FormatKernels::pack`] hook makes one; what the layout is, is the format's business):
/// 64-byte aligned bytes, tagged with the type and shape they were made from. Built once
/// at load.
#[derive(Debug)]
pub struct Packed {
    lines: Vec<[u8; 64]>,
    start: usize,
    len: usize,
    ty: GgmlType,
    rows: usize,
    cols: usize,
}

impl Packed {
    /// `len` zeroed, 64-byte aligned bytes for a packed copy of `m`, filled by `fill`.
    /// Fails, without allocating, if the memory cannot be reserved.
    pub fn build(
        m: &Matrix<'_>,
        len: usize,
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<Packed, std::collections::TryReserveError> {
        let mut lines: Vec<[u8; 64]> = Vec::new();
        let count = len.div_ceil(64) + 1;
        lines.try_reserve_exact(count)?;
        lines.resize(count, [0; 64]);
        let start = (64 - lines.as_ptr() as usize % 64) % 64;
        fill(&mut lines.as_flattened_mut()[start..start + len]);
        Ok(Packed {
            lines,
            start,
            len,
            ty: m.ty,
            rows: m.rows,
            cols: m.cols,
        })
    }

    /// Bytes held.
    pub fn bytes(&self) -> u64 {
        self.len as u64
    }

    /// The packed bytes (64-byte aligned).
    pub fn as_bytes(&self) -> &[u8] {
        &self.lines.as_flattened()[self.start..self.start + self.len]
    }
}

/// Size of the column group starting at column `done` of `n`: the columns are split into
/// as few groups of at most `max` as possible, of nearly equal sizes (9 columns in groups
/// of 8 go 5 + 4, not 8 + 1, which would pay a whole pass for one column). Kernels that
/// share one pass over a row among several columns use it; a column's bits never depend
/// on its group.
pub fn group_size(n: usize, done: usize, max: usize) -> usize {
    let groups = n.div_ceil(max);
    let base = n / groups;
    let bigger = n % groups; // the first `bigger` groups take one column more
    let index = if done < bigger * (base + 1) {
        done / (base + 1)
    } else {
        bigger + (done - bigger * (base + 1)) / base
    };
    if index < bigger {
        base + 1
    } else {
        base
    }
}

/// The packed bytes and how many whole tiles of `rows_per_tile` rows (of `tile_bytes`
/// bytes each) the task of `k` rows from `first` may take from them: `None` when the
/// matrix has no packed copy, the task does not start on a tile, or no tile fits.
pub(crate) fn packed_tiles<'a>(
    w: &Matrix<'a>,
    first: usize,
    k: usize,
    rows_per_tile: usize,
    tile_bytes: usize,
) -> Option<(&'a [u8], usize)> {
    let packed = w.packed()?.as_bytes();
    if !first.is_multiple_of(rows_per_tile) || tile_bytes == 0 {
        return None;
    }
    let tiled = packed.len() / tile_bytes * rows_per_tile;
    let tiles = k.min(tiled.saturating_sub(first)) / rows_per_tile;
    (tiles > 0).then_some((packed, tiles))
}

/// Walks `out` (rows × `n` columns, row-major) by row and by column group ([`group_size`]
/// with at most `max`), calling `f(row, first_column, group_out)`: the driver loop of the
/// kernels that share one pass over a row among several columns.
pub fn for_each_group(
    out: &mut [f32],
    n: usize,
    max: usize,
    mut f: impl FnMut(usize, usize, &mut [f32]),
) {
    for (i, row_out) in out.chunks_exact_mut(n).enumerate() {
        let mut done = 0;
        while done < n {
            let g = group_size(n, done, max);
            f(i, done, &mut row_out[done..done + g]);
            done += g;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::group_size;

    #[test]
    fn column_groups_are_balanced_and_cover_every_column() {
        for max in 1..=16 {
            for n in 1..=40 {
                let mut sizes = Vec::new();
                let mut done = 0;
                while done < n {
                    let g = group_size(n, done, max);
                    assert!((1..=max).contains(&g), "n {n} max {max}: group {g}");
                    sizes.push(g);
                    done += g;
                }
                assert_eq!(done, n);
                assert_eq!(sizes.len(), n.div_ceil(max), "n {n} max {max}");
                let (lo, hi) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
                assert!(hi - lo <= 1, "n {n} max {max}: {sizes:?}");
            }
        }
    }
}

//! Weights a model owns: the file's bytes behind an `Arc` (a memory map or a buffer,
//! shared by every session), and where each checked tensor lies in them.
//!
//! A matrix's values are checked for NaN and infinity once, by the first forward that
//! uses it ([`WeightRef::check`]), not at load: a model file is mapped, never read whole
//! before the first token, so start-up time does not grow with its size, and a Kimi K3
//! expert is read (and checked) only when a token is first routed to it. Embedding rows
//! are checked as they are looked up ([`embed_rows`]).
//!
//! Before a step reads matrices it may not have read yet (the first forward's dense
//! weights, the experts its tokens route to) it names their bytes to the file
//! ([`ModelData::will_need`], [`read_ahead`]): a mapped file then reads exactly those
//! ranges from disk, all at once, instead of faulting them in page by page with the
//! kernel's read-around (which, on a file larger than memory, reads many times the bytes
//! an expert needs).

use std::ops::Range;
use std::sync::{Arc, OnceLock};

use dspark_contract::TensorRef;
use dspark_gguf::GgmlType;
use dspark_quant::gemm::{Matrix, Packed};

use crate::error::{Result, RuntimeError};

/// A model file's bytes as the runtime reads them: a memory map or a buffer.
pub trait ModelData: AsRef<[u8]> + Send + Sync {
    /// The byte ranges `ranges` (sorted, disjoint, inside [`AsRef::as_ref`]) are about to
    /// be read: a memory map starts reading them from disk (`madvise(MADV_WILLNEED)`) and
    /// returns; a buffer, already in memory, ignores it (the default). A hint only: it
    /// never changes a value read.
    fn will_need(&self, ranges: &[Range<usize>]) {
        let _ = ranges;
    }
}

impl ModelData for Vec<u8> {}

/// A model file's bytes, shared: a memory map, or a buffer.
pub type ModelBytes = Arc<dyn ModelData>;

/// Where a checked matrix lies in its model's bytes, and its packed tiles when this CPU's
/// kernel reads them ([`Packed`]: the same results, faster; as many bytes again).
#[derive(Clone, Debug)]
pub(crate) struct WeightRef {
    ty: GgmlType,
    pub rows: usize,
    pub cols: usize,
    offset: usize,
    len: usize,
    packed: Option<Arc<Packed>>,
    /// A packed copy made after load ([`WeightRef::pack_now`]: a target's LM head that a
    /// drafter borrows), shared by the clones of this reference.
    late: Arc<OnceLock<Arc<Packed>>>,
    /// Whether llama.cpp may re-lay the matrix ([`Layout::relaid`], [`WeightRef::not_relaid`]).
    relaid: bool,
    /// The verdict on the whole tensor's values, made once (shared by row ranges).
    check: Arc<ValueCheck>,
}

/// A tensor's name and, once a forward has looked, whether its values are finite.
#[derive(Debug)]
struct ValueCheck {
    name: String,
    verdict: OnceLock<std::result::Result<(), String>>,
    /// The tensor's bytes in the model: `offset..offset + len`.
    offset: usize,
    len: usize,
    ty: GgmlType,
    cols: usize,
}

impl WeightRef {
    /// Locates `t` in `bytes`. The contract checked `t` in a file parsed from `bytes`; a
    /// tensor that does not lie inside them (a proof from another file) is an error.
    /// `layout` says whether the matrix gets packed tiles when this CPU's kernel reads them
    /// and whether llama.cpp would re-lay it ([`Layout`]).
    pub fn locate(bytes: &[u8], t: &TensorRef<'_>, layout: Layout) -> Result<WeightRef> {
        let base = bytes.as_ptr() as usize;
        let at = (t.data.as_ptr() as usize).checked_sub(base);
        let inside = at.filter(|&o| {
            o.checked_add(t.data.len())
                .is_some_and(|e| e <= bytes.len())
        });
        let Some(offset) = inside else {
            return Err(RuntimeError::tensor(
                t.name,
                "was checked in another file than the one being loaded",
            ));
        };
        let Some(m) = Matrix::new(t.ty, t.rows, t.cols, t.data).filter(|m| m.format().is_some())
        else {
            return Err(RuntimeError::tensor(
                t.name,
                format!("type {} has no kernel", t.ty),
            ));
        };
        let m = if layout.relaid { m } else { m.not_relaid() };
        // A matrix that takes the `vec_dot` order reads the file's layout.
        // A copy only the own order reads is made for a drafter's matrices only.
        let reads_tiles = m.format().is_some_and(|f| {
            f.reads_packed(f.relaid(&m)) && (layout.own_order || !f.pack_own_only)
        });
        let packed = if layout.pack && reads_tiles {
            m.format()
                .and_then(|f| f.pack)
                .map_or(Ok(None), |pack| pack(&m))
                .map_err(|_| {
                    RuntimeError::tensor(
                        t.name,
                        format!(
                            "cannot allocate {} bytes for its packed copy (DSPARK_PACK=0 runs from the file's layout)",
                            t.data.len()
                        ),
                    )
                })?
                .map(Arc::new)
        } else {
            None
        };
        Ok(WeightRef {
            ty: t.ty,
            rows: t.rows,
            cols: t.cols,
            offset,
            len: t.data.len(),
            packed,
            late: Arc::default(),
            relaid: layout.relaid,
            check: Arc::new(ValueCheck {
                name: t.name.to_string(),
                verdict: OnceLock::new(),
                offset,
                len: t.data.len(),
                ty: t.ty,
                cols: t.cols,
            }),
        })
    }

    /// This weight as llama.cpp holds a 3-D tensor's slice in a plain product (MLA's
    /// per-head `attn_k_b`): never re-laid ([`Matrix::not_relaid`]), so without packed
    /// tiles where its kernel would not read them.
    pub fn not_relaid(self) -> WeightRef {
        let reads = dspark_quant::format_of(self.ty).is_some_and(|f| f.reads_packed(false));
        let packed = self.packed.clone().filter(|_| reads);
        WeightRef {
            relaid: false,
            packed,
            late: Arc::default(),
            ..self
        }
    }

    /// This weight under another name in its errors (an expert of a stacked tensor is
    /// `NAME (expert I)`), with a verdict of its own.
    pub fn named(self, name: String) -> WeightRef {
        let c = &self.check;
        let check = Arc::new(ValueCheck {
            name,
            verdict: OnceLock::new(),
            offset: c.offset,
            len: c.len,
            ty: c.ty,
            cols: c.cols,
        });
        WeightRef { check, ..self }
    }

    /// Checks the tensor's values for NaN and infinity the first time it is asked (the
    /// scan runs once, whoever asks first; later calls read the verdict): an error names
    /// the tensor and the first such value.
    pub fn check(&self, bytes: &[u8]) -> Result<()> {
        let c = &self.check;
        let verdict = c.verdict.get_or_init(|| {
            let data = &bytes[c.offset..c.offset + c.len];
            let rows =
                c.len / (c.cols / c.ty.block_size() as usize * c.ty.type_size() as usize).max(1);
            let m = Matrix::new(c.ty, rows, c.cols, data).expect("located and sized at load");
            first_non_finite(&m).map_or(Ok(()), |at| Err(format!("value {at} is not finite")))
        });
        verdict
            .clone()
            .map_err(|msg| RuntimeError::tensor(&c.name, msg))
    }

    /// The matrix, viewed in its model's bytes (with its packed tiles, if any).
    #[inline]
    pub fn matrix<'b>(&'b self, bytes: &'b [u8]) -> Matrix<'b> {
        let m = Matrix::new(
            self.ty,
            self.rows,
            self.cols,
            &bytes[self.offset..self.offset + self.len],
        )
        .expect("located and checked at load");
        let m = if self.relaid { m } else { m.not_relaid() };
        match self
            .packed
            .as_deref()
            .or_else(|| self.late.get().map(|p| &**p))
        {
            Some(p) => m.with_packed(p),
            None => m,
        }
    }

    /// Makes the packed copy now for a matrix a drafter borrows (the target's LM head), if
    /// it has none yet and this CPU has a kernel of dspark's own order for its format, which
    /// reads packed tiles ([`dspark_quant::gemm::own_order`]); the target's kernels read the
    /// copy too where they read one (the same bits either way). Reads the whole tensor
    /// once; an allocation failure is an error naming it.
    pub fn pack_now(&self, bytes: &[u8]) -> Result<()> {
        if self.packed.is_some() || self.late.get().is_some() {
            return Ok(());
        }
        let m = self.matrix(bytes);
        let Some(f) = m.format() else { return Ok(()) };
        let (true, Some(_), Some(pack)) = (f.reads_packed(f.relaid(&m)), f.own_rows, f.pack) else {
            return Ok(());
        };
        let packed = pack(&m).map_err(|_| {
            RuntimeError::tensor(
                self.name(),
                format!(
                    "cannot allocate {} bytes for its packed copy (DSPARK_PACK=0 runs from the file's layout)",
                    self.len
                ),
            )
        })?;
        if let Some(p) = packed {
            // A concurrent caller may have set it first: the same bytes either way.
            let _ = self.late.set(Arc::new(p));
        }
        Ok(())
    }

    /// Bytes of the tensor.
    pub fn bytes(&self) -> u64 {
        self.len as u64
    }

    /// Where the matrix lies in its model's bytes.
    pub fn range(&self) -> Range<usize> {
        self.offset..self.offset + self.len
    }

    /// The tensor's name in errors.
    pub fn name(&self) -> &str {
        &self.check.name
    }

    /// Rows `first..first + n` of this matrix as a matrix of their own (a part of a fused
    /// projection), without packed tiles.
    ///
    /// # Panics
    /// If the rows are not inside the matrix (the contract sized both).
    pub fn row_range(&self, first: usize, n: usize) -> WeightRef {
        assert!(first + n <= self.rows, "rows {first}+{n} of {}", self.rows);
        let row_bytes = self.len / self.rows.max(1);
        WeightRef {
            ty: self.ty,
            rows: n,
            cols: self.cols,
            offset: self.offset + first * row_bytes,
            len: n * row_bytes,
            packed: None,
            late: Arc::default(),
            relaid: self.relaid,
            check: Arc::clone(&self.check),
        }
    }
}

/// [`WeightRef::check`] on each of `weights`, in parallel; the first error (in list order)
/// is returned.
pub(crate) fn check_all<'w>(
    bytes: &[u8],
    weights: impl IntoIterator<Item = &'w WeightRef>,
) -> Result<()> {
    use rayon::prelude::*;
    let list: Vec<&WeightRef> = weights.into_iter().collect();
    let verdicts: Vec<Result<()>> = list.par_iter().map(|w| w.check(bytes)).collect();
    verdicts.into_iter().collect()
}

/// Tells `data` that `weights` are about to be read ([`ModelData::will_need`]), in one
/// call with adjacent ranges merged, so a mapped file reads them together.
pub(crate) fn read_ahead<'w>(
    data: &dyn ModelData,
    weights: impl IntoIterator<Item = &'w WeightRef>,
) {
    read_ahead_ranges(data, weights.into_iter().map(WeightRef::range).collect());
}

/// [`ModelData::will_need`] on `ranges`, sorted and with overlapping or adjacent ones
/// merged, in one call.
pub(crate) fn read_ahead_ranges(data: &dyn ModelData, mut ranges: Vec<Range<usize>>) {
    if ranges.is_empty() {
        return;
    }
    ranges.sort_unstable_by_key(|r| r.start);
    let mut merged: Vec<Range<usize>> = Vec::with_capacity(ranges.len());
    for r in ranges {
        match merged.last_mut() {
            Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
            _ => merged.push(r),
        }
    }
    data.will_need(&merged);
}

/// Rows `tokens` of the embedding matrix `name` of `vocab` rows into `out`
/// (`tokens.len()` rows); a token outside the vocabulary is an error that writes nothing.
/// A row with a NaN or infinite value is an error naming the tensor and the value (`out`
/// is then to be discarded): rows are checked as they are read, so a large embedding is
/// never scanned whole.
///
/// # Panics
/// If `out` is not `tokens.len()` rows of the matrix's width.
pub(crate) fn embed_rows(
    m: &Matrix<'_>,
    name: &str,
    vocab: usize,
    tokens: &[u32],
    out: &mut [f32],
) -> Result<()> {
    assert_eq!(out.len(), tokens.len() * m.cols, "embed output size");
    if let Some(&t) = tokens.iter().find(|&&t| t as usize >= vocab) {
        return Err(RuntimeError::Request(format!(
            "token {t} is outside the target's vocabulary of {vocab}"
        )));
    }
    for (&t, o) in tokens.iter().zip(out.chunks_exact_mut(m.cols)) {
        m.row_f32(t as usize, o);
        if let Some(j) = o.iter().position(|x| !x.is_finite()) {
            return Err(RuntimeError::tensor(
                name,
                format!("value {} is not finite", t as usize * m.cols + j),
            ));
        }
    }
    Ok(())
}

/// Model files up to this size get packed tiles by default: where they pay. A small model
/// is compute-bound, and packed tiles cut a Q8_0 product's instructions by half or more
/// (the 7 MB trained target decodes 1.6x faster); a large one is bound by memory bandwidth,
/// where they gain nothing measurable (decode and verify of the 477 MB widened pair and
/// the synthetic Qwen3-0.6B, `docs/PERFORMANCE.md`) and would hold its matrices twice (the
/// packed copy beside the file's pages).
pub const PACK_LIMIT: u64 = 256 << 20;

/// How a model's matrices are held, decided once per file at load.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Whether matrices get packed tiles where this CPU's kernels read them (the same bits
    /// either way): `DSPARK_PACK=1` always, `=0` never, otherwise for files up to
    /// [`PACK_LIMIT`].
    pub pack: bool,
    /// Whether products take the order of llama.cpp's re-laid kernels where it re-lays a
    /// matrix (its default, `repack.cpp`), or of its kernels on the file's layout, as it
    /// runs with `--no-repack`: `DSPARK_REPACK=1` / `=0`, otherwise re-laid unless the file
    /// is larger than the machine's memory — llama.cpp's re-laid copy lives in anonymous
    /// memory, so such a file only runs there with `--no-repack`.
    pub relaid: bool,
    /// Whether the model's products take dspark's own order (a drafter's,
    /// [`dspark_quant::gemm::own_order`]): formats whose packed copy only that order reads
    /// ([`dspark_quant::format::FormatKernels::pack_own_only`]) are packed for it alone.
    pub own_order: bool,
}

impl Layout {
    /// The layout of a model file of `file_bytes` (see the fields).
    pub fn for_file(file_bytes: u64) -> Layout {
        let env = |name: &str| match std::env::var(name).as_deref() {
            Ok("0") => Some(false),
            Ok("1") => Some(true),
            _ => None,
        };
        Layout {
            pack: env("DSPARK_PACK").unwrap_or(file_bytes <= PACK_LIMIT),
            relaid: env("DSPARK_REPACK").unwrap_or_else(|| {
                crate::memory::physical_memory().is_none_or(|total| file_bytes <= total)
            }),
            own_order: false,
        }
    }

    /// The layout of a drafter file of `file_bytes`: as [`Layout::for_file`], but packed
    /// whatever its size (unless `DSPARK_PACK=0`). A drafter reads every one of its
    /// weights for every block of 8–16 columns, and its products take dspark's own order
    /// ([`dspark_quant::gemm::own_order`]), whose kernel reads packed tiles: Q8_0's
    /// does a run's 32 products with one float step where the lane order takes eight.
    pub fn for_drafter(file_bytes: u64) -> Layout {
        let pack = std::env::var("DSPARK_PACK").as_deref() != Ok("0");
        Layout {
            pack,
            own_order: true,
            ..Layout::for_file(file_bytes)
        }
    }
}

/// The index of a matrix's first NaN or infinite value (for block formats, the first
/// value of the first block with a non-finite scale), scanned in parallel: a model that
/// computes with them only ever produces token 0.
fn first_non_finite(m: &Matrix<'_>) -> Option<usize> {
    use rayon::prelude::*;
    let f = m.format().expect("located matrices have a kernel");
    let rows_per_chunk = (1 << 20) / m.row_bytes().max(1) + 1;
    m.data
        .par_chunks(rows_per_chunk * m.row_bytes())
        .enumerate()
        .find_map_first(|(i, chunk)| {
            (f.first_non_finite)(chunk).map(|j| i * rows_per_chunk * m.cols + j)
        })
}

/// The values of a checked F32 vector (norm weights, the confidence head), refused when
/// one is not finite.
pub(crate) fn vector(t: &TensorRef<'_>) -> Result<Vec<f32>> {
    let v = t.f32_values();
    match v.iter().position(|x| !x.is_finite()) {
        Some(i) => Err(RuntimeError::tensor(
            t.name,
            format!("value {i} is not finite"),
        )),
        None => Ok(v),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Q8_0 matrix gets its packed copy exactly where this CPU's kernels for the model's
    /// products read one: a target's only when its order reads tiles (not where only the
    /// own order does, `pack_own_only`), a drafter's whenever the own order has a kernel;
    /// never with `pack` off. The same bits either way, so only memory is at stake.
    #[test]
    fn packed_copies_go_where_the_models_kernels_read_them() {
        let f = dspark_quant::kernels()
            .format(GgmlType::Q8_0)
            .expect("Q8_0 has kernels");
        let (rows, cols) = (32, 64);
        let data = f.sample(rows * cols, 7);
        let t = TensorRef {
            name: "w",
            ty: GgmlType::Q8_0,
            cols,
            rows,
            data: &data,
        };
        for pack in [false, true] {
            for own_order in [false, true] {
                let layout = Layout {
                    pack,
                    relaid: true,
                    own_order,
                };
                let w = WeightRef::locate(&data, &t, layout).unwrap();
                let reads = f.pack.is_some() && (own_order || !f.pack_own_only);
                assert_eq!(
                    w.matrix(&data).packed().is_some(),
                    pack && reads,
                    "pack {pack} own order {own_order}"
                );
            }
        }
    }
}

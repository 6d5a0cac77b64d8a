//! The one place files are memory-mapped.
//!
//! Files read front to back (`verify`, `inspect`, vocabularies) are mapped with
//! `MADV_SEQUENTIAL`. Model files that a run samples ([`map_model_file`]) keep the
//! kernel's default advice (`MADV_NORMAL`), not `MADV_SEQUENTIAL` nor `MADV_RANDOM`: both of those make the kernel ignore accesses
//! through the map when it chooses pages to evict (Linux's `vma_has_recency`), so the
//! dense weights every token reads would leave the page cache as soon as a file larger
//! than memory streams experts through it, and `MADV_SEQUENTIAL` reads ahead up to the
//! device's read-ahead window (8 MiB here) on every fault, many times an expert's bytes.
//! What a step is about to read it names ([`ModelData::will_need`]:
//! `madvise(MADV_WILLNEED)` on exactly those ranges), so those bytes are read together
//! and nothing else is (`docs/PERFORMANCE.md`, "A Kimi K3 file larger than memory").

use std::fs::File;
use std::path::Path;

use anyhow::{Context, Result};
use dspark_runtime::ModelData;
use memmap2::{Advice, Mmap};

/// A read-only view of a whole file: a memory map, or an empty buffer for empty files
/// (which cannot be mapped).
pub enum Bytes {
    /// A mapped file.
    Mapped(Mmap),
    /// An empty file.
    Empty,
}

impl AsRef<[u8]> for Bytes {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl ModelData for Bytes {
    fn will_need(&self, ranges: &[std::ops::Range<usize>]) {
        if let Bytes::Mapped(m) = self {
            for r in ranges {
                // A hint: a range outside the map or a refusal changes nothing read.
                if r.start < r.end && r.end <= m.len() {
                    let _ = m.advise_range(Advice::WillNeed, r.start, r.end - r.start);
                }
            }
        }
    }
}

impl std::ops::Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Bytes::Mapped(m) => m,
            Bytes::Empty => &[],
        }
    }
}

/// Maps `path` read-only.
///
/// # Safety
/// The caller promises the file is not truncated or modified while the map lives;
/// otherwise reads may see changing bytes or fault (SIGBUS). dspark maps only files it
/// reads as input and hashes what it read, so a change shows up as a hash mismatch.
pub unsafe fn map_file(path: &Path, advice: Option<Advice>) -> Result<Bytes> {
    // Refuse FIFOs, devices and folders before opening: opening a FIFO would block.
    let meta =
        std::fs::metadata(path).with_context(|| format!("{}: cannot open", path.display()))?;
    if !meta.is_file() {
        anyhow::bail!("{}: not a regular file", path.display());
    }
    let file = File::open(path).with_context(|| format!("{}: cannot open", path.display()))?;
    let len = file
        .metadata()
        .with_context(|| format!("{}: cannot stat", path.display()))?
        .len();
    if len == 0 {
        return Ok(Bytes::Empty);
    }
    // SAFETY: the caller upholds this function's contract (no concurrent modification).
    let map =
        unsafe { Mmap::map(&file) }.with_context(|| format!("{}: cannot map", path.display()))?;
    if let Some(a) = advice {
        // A hint: refused, the file is read as usual.
        let _ = map.advise(a);
    }
    Ok(Bytes::Mapped(map))
}

/// Maps an input file the user named, to be read front to back. Inputs are treated as
/// read-only for the run.
pub fn map_input(path: &Path) -> Result<Bytes> {
    // SAFETY: input files are only read; dspark never writes to a file it maps, and its
    // outputs go to new temporary files, so the only writer could be another process,
    // which the docs ask users not to run against the same files.
    unsafe { map_file(path, Some(Advice::Sequential)) }
}

/// Maps a model file a run reads parts of, as they are needed (the module docs say why
/// with the default advice).
pub fn map_model_file(path: &Path) -> Result<Bytes> {
    // SAFETY: as for `map_input`: the file is only read, by this process.
    unsafe { map_file(path, None) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Naming ranges to a map is a hint: any range, even one outside the file, changes
    /// nothing read.
    #[test]
    fn will_need_is_only_a_hint() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.bin");
        let data: Vec<u8> = (0..3 * 4096 + 7).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &data).unwrap();
        let m = map_model_file(&path).unwrap();
        m.will_need(&[0..1, 4095..8193, 9000..data.len()]);
        let n = data.len();
        m.will_need(&[n..n + 4096, (n - 1)..(n - 2), 0..usize::MAX]);
        assert_eq!(&*m, &data[..]);
        let empty = dir.path().join("e.bin");
        std::fs::write(&empty, b"").unwrap();
        map_model_file(&empty).unwrap().will_need(&[0..4, 4..8]);
    }
}

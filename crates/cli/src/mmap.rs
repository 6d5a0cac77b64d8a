//! The one place files are memory-mapped.

use std::fs::File;
use std::path::Path;

use anyhow::{Context, Result};
use memmap2::Mmap;

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
pub unsafe fn map_file(path: &Path) -> Result<Bytes> {
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
    let _ = map.advise(memmap2::Advice::Sequential);
    Ok(Bytes::Mapped(map))
}

/// Maps an input file the user named. Inputs are treated as read-only for the run.
pub fn map_input(path: &Path) -> Result<Bytes> {
    // SAFETY: input files are only read; dspark never writes to a file it maps, and its
    // outputs go to new temporary files, so the only writer could be another process,
    // which the docs ask users not to run against the same files.
    unsafe { map_file(path) }
}

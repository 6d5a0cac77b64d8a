//! Output files that appear whole or not at all, and never over an input.
//!
//! Every file dspark writes (a GGUF, a conversion report, a trace, a synthetic model) goes
//! through [`AtomicFile`]: a temporary file in the destination's folder, named after the
//! destination with the [`PARTIAL_SUFFIX`], locked while its run lives; space reserved up
//! front where the filesystem can ([`AtomicFile::reserve`]); fsynced, renamed over the
//! destination and the folder fsynced at the end ([`AtomicFile::commit`]). Dropped
//! uncommitted (an error, Ctrl-C), it is removed; left behind by a killed run, the next
//! run into that folder removes it (it holds no lock).
//!
//! Before anything is created, [`check_output`] refuses a destination that is one of the
//! command's inputs — the same path, or the same file through a symbolic or hard link —
//! and an existing destination without `force`.
//!
//! # Example
//! ```
//! use std::io::Write;
//! use dspark_output::{check_output, AtomicFile};
//!
//! let dir = tempfile::tempdir()?;
//! let input = dir.path().join("model.gguf");
//! std::fs::write(&input, b"weights")?;
//! // Writing onto the input is refused, whatever `force` says.
//! assert!(check_output(&input, &[&input], true).is_err());
//!
//! let out = dir.path().join("trace.jsonl");
//! check_output(&out, &[&input], false)?;
//! let mut f = AtomicFile::create(&out)?;
//! f.file().write_all(b"{}\n")?;
//! assert!(!out.exists()); // nothing at the destination until commit
//! f.commit()?;
//! assert_eq!(std::fs::read(&out)?, b"{}\n");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]

use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use thiserror::Error;

/// Suffix of every temporary file dspark writes; a stale one (its run was killed) is
/// recognised by it, and by holding no lock.
pub const PARTIAL_SUFFIX: &str = ".dspark-partial";

/// Stale temporaries younger than this are left alone: their run may have created the
/// file and not yet locked it.
const STALE_AFTER: Duration = Duration::from_secs(2);

/// An output could not be written, or must not be.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum OutputError {
    /// The destination is one of the command's inputs.
    #[error("{}: is also an input of this command ({}); choose another output path", out.display(), input.display())]
    IsInput {
        /// The output path given.
        out: PathBuf,
        /// The input it would overwrite.
        input: PathBuf,
    },
    /// The destination exists and replacing it was not asked for.
    #[error("{}: already exists (use --force to replace it, or choose another path)", .0.display())]
    Exists(PathBuf),
    /// The destination's folder does not exist.
    #[error("{}: the output folder does not exist", .0.display())]
    NoFolder(PathBuf),
    /// The destination is not a path to a file.
    #[error("{}: not a file path", .0.display())]
    NotAFilePath(PathBuf),
    /// The destination exists and is not a regular file.
    #[error("{}: exists and is not a regular file", .0.display())]
    NotAFile(PathBuf),
    /// Not enough room for the output.
    #[error("{}: no space left on device: the output needs {need} bytes{}; nothing was written", path.display(), free.map_or(String::new(), |f| format!(", {f} are free")))]
    NoSpace {
        /// The destination.
        path: PathBuf,
        /// Bytes needed.
        need: u64,
        /// Bytes free, when known.
        free: Option<u64>,
    },
    /// Any other I/O failure, with what was being done (the OS error is the source).
    #[error("{}: {what}", path.display())]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// What failed.
        what: &'static str,
        /// The cause.
        source: std::io::Error,
    },
}

fn io<'p>(path: &'p Path, what: &'static str) -> impl FnOnce(std::io::Error) -> OutputError + 'p {
    move |source| OutputError::Io {
        path: path.to_path_buf(),
        what,
        source,
    }
}

/// The folder a path's file lives in (`.` for a bare name).
pub fn parent_or_cwd(p: &Path) -> PathBuf {
    match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// A path as the file system resolves it: the folder canonicalized, the name kept (the
/// file itself may not exist yet).
fn resolved(p: &Path) -> Option<PathBuf> {
    let name = p.file_name()?;
    parent_or_cwd(p).canonicalize().ok().map(|d| d.join(name))
}

/// Whether `a` and `b` name the same file: the same resolved path, or (both existing)
/// the same device and inode, which catches symbolic and hard links.
pub fn same_file(a: &Path, b: &Path) -> bool {
    if let (Ok(x), Ok(y)) = (std::fs::metadata(a), std::fs::metadata(b)) {
        if x.dev() == y.dev() && x.ino() == y.ino() {
            return true;
        }
    }
    // A symbolic link at `a` pointing at `b` (or a dangling one) resolves through here.
    let a_target = std::fs::canonicalize(a).ok().or_else(|| resolved(a));
    let b_target = std::fs::canonicalize(b).ok().or_else(|| resolved(b));
    matches!((a_target, b_target), (Some(x), Some(y)) if x == y)
}

/// Checks that `out` may be written: not one of `inputs` (whatever `force` says), not an
/// existing file unless `force`, not an existing non-file, in a folder that exists.
pub fn check_output(out: &Path, inputs: &[&Path], force: bool) -> Result<(), OutputError> {
    if out.file_name().is_none() {
        return Err(OutputError::NotAFilePath(out.to_path_buf()));
    }
    if let Some(input) = inputs.iter().find(|i| same_file(out, i)) {
        return Err(OutputError::IsInput {
            out: out.to_path_buf(),
            input: input.to_path_buf(),
        });
    }
    if std::fs::symlink_metadata(out).is_ok() {
        if !force {
            return Err(OutputError::Exists(out.to_path_buf()));
        }
        if std::fs::metadata(out).is_ok_and(|m| !m.is_file()) {
            return Err(OutputError::NotAFile(out.to_path_buf()));
        }
    }
    let dir = parent_or_cwd(out);
    if !dir.is_dir() {
        return Err(OutputError::NoFolder(dir));
    }
    Ok(())
}

/// Checks that no two outputs of one command are the same file.
pub fn check_distinct(outputs: &[&Path]) -> Result<(), OutputError> {
    for (i, a) in outputs.iter().enumerate() {
        if let Some(b) = outputs[i + 1..].iter().find(|b| same_file(a, b)) {
            return Err(OutputError::IsInput {
                out: b.to_path_buf(),
                input: a.to_path_buf(),
            });
        }
    }
    Ok(())
}

/// A file being written: a locked temporary beside its destination until
/// [`AtomicFile::commit`] renames it into place. Dropped uncommitted, it is removed.
pub struct AtomicFile {
    tmp: tempfile::NamedTempFile,
    dest: PathBuf,
    dir: PathBuf,
}

impl AtomicFile {
    /// Creates the temporary for `dest` in its folder (after removing stale ones there).
    pub fn create(dest: &Path) -> Result<AtomicFile, OutputError> {
        let name = dest
            .file_name()
            .ok_or_else(|| OutputError::NotAFilePath(dest.to_path_buf()))?
            .to_string_lossy()
            .into_owned();
        let dir = parent_or_cwd(dest);
        if !dir.is_dir() {
            return Err(OutputError::NoFolder(dir));
        }
        remove_stale_temps(&dir);
        let tmp = tempfile::Builder::new()
            .prefix(&format!(".{name}."))
            .suffix(PARTIAL_SUFFIX)
            .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o644))
            .tempfile_in(&dir)
            .map_err(io(
                &dir,
                "cannot create a file in this folder (is it writable?)",
            ))?;
        tmp.as_file().try_lock().map_err(|e| OutputError::Io {
            path: tmp.path().to_path_buf(),
            what: "cannot lock the temporary file",
            source: std::io::Error::other(e.to_string()),
        })?;
        Ok(AtomicFile {
            tmp,
            dest: dest.to_path_buf(),
            dir,
        })
    }

    /// The open temporary file, for writing.
    pub fn file(&self) -> &File {
        self.tmp.as_file()
    }

    /// Where the file will appear.
    pub fn dest(&self) -> &Path {
        &self.dest
    }

    /// Reserves `len` bytes so a full disk is reported before any work, naming how much
    /// is needed and free. Filesystems without `fallocate` are written as usual.
    pub fn reserve(&self, len: u64) -> Result<(), OutputError> {
        use rustix::fs::{fallocate, fstatvfs, FallocateFlags};
        match fallocate(self.file(), FallocateFlags::empty(), 0, len) {
            Ok(()) => Ok(()),
            Err(rustix::io::Errno::NOSPC) => Err(OutputError::NoSpace {
                path: self.dest.clone(),
                need: len,
                free: fstatvfs(self.file()).map(|v| v.f_bavail * v.f_frsize).ok(),
            }),
            Err(rustix::io::Errno::OPNOTSUPP) | Err(rustix::io::Errno::NOSYS) => Ok(()),
            Err(e) => Err(io(&self.dest, "cannot reserve space")(
                std::io::Error::from(e),
            )),
        }
    }

    /// Flushes the data to disk (fsync) without moving the file into place.
    pub fn sync(&self) -> Result<(), OutputError> {
        self.file().sync_all().map_err(|e| {
            if e.kind() == std::io::ErrorKind::StorageFull {
                OutputError::NoSpace {
                    path: self.dest.clone(),
                    need: 0,
                    free: Some(0),
                }
            } else {
                io(&self.dest, "cannot write")(e)
            }
        })
    }

    /// fsync, rename over the destination, fsync the folder.
    pub fn commit(self) -> Result<(), OutputError> {
        self.sync()?;
        let AtomicFile { tmp, dest, dir } = self;
        tmp.persist(&dest)
            .map_err(|e| io(&dest, "cannot move the finished file into place")(e.error))?;
        if let Ok(d) = File::open(&dir) {
            let _ = d.sync_all();
        }
        Ok(())
    }
}

/// Removes temporary files of earlier runs into `dir` that were killed (SIGKILL, power
/// loss): dspark's suffix, no live run holding their lock, and not brand new.
pub fn remove_stale_temps(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if !(name.starts_with('.') && name.ends_with(PARTIAL_SUFFIX)) {
            continue;
        }
        let path = entry.path();
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        let young = meta
            .modified()
            .ok()
            .and_then(|m| m.elapsed().ok())
            .is_none_or(|age| age < STALE_AFTER);
        if !meta.is_file() || young {
            continue;
        }
        let Ok(file) = File::open(&path) else {
            continue;
        };
        if file.try_lock().is_ok() && std::fs::remove_file(&path).is_ok() {
            use std::io::Write;
            // A full or closed stderr must not stop the run: the message is a courtesy.
            let _ = writeln!(
                std::io::stderr(),
                "dspark: removed {}, left by an interrupted run",
                path.display()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inputs_are_never_outputs_through_any_link() {
        let d = tempfile::tempdir().unwrap();
        let input = d.path().join("in.gguf");
        std::fs::write(&input, b"x").unwrap();
        let sym = d.path().join("sym.gguf");
        std::os::unix::fs::symlink(&input, &sym).unwrap();
        let hard = d.path().join("hard.gguf");
        std::fs::hard_link(&input, &hard).unwrap();
        let dotted = d.path().join(".").join("in.gguf");
        for out in [&input, &sym, &hard, &dotted] {
            let e = check_output(out, &[&input], true).unwrap_err();
            assert!(matches!(e, OutputError::IsInput { .. }), "{out:?}: {e}");
        }
        let other = d.path().join("other.gguf");
        check_output(&other, &[&input], false).unwrap();
        std::fs::write(&other, b"y").unwrap();
        assert!(matches!(
            check_output(&other, &[&input], false),
            Err(OutputError::Exists(_))
        ));
        check_output(&other, &[&input], true).unwrap();
        assert!(check_distinct(&[&other, &d.path().join("./other.gguf")]).is_err());
        assert!(matches!(
            check_output(&d.path().join("no/such/x"), &[], false),
            Err(OutputError::NoFolder(_))
        ));
        assert_eq!(std::fs::read(&input).unwrap(), b"x");
    }

    #[test]
    fn uncommitted_files_leave_nothing() {
        let d = tempfile::tempdir().unwrap();
        let out = d.path().join("out.bin");
        {
            let f = AtomicFile::create(&out).unwrap();
            f.reserve(1 << 16).unwrap();
        }
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 0);
    }
}

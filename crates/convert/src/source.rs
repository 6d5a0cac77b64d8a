//! The source checkpoint: `config.json` plus one `model.safetensors` or the shards of a
//! `model.safetensors.index.json`, validated before a byte is converted.
//!
//! Weight files are read with positioned reads (`pread`), never mapped: a file that is
//! truncated or rewritten while we read it gives a short read or a changed `stat`, which
//! are errors, instead of a SIGBUS. Only the headers are read up front; each is validated
//! by the `safetensors` crate's own metadata check (offsets contiguous, byte lengths =
//! shape × dtype, no overflow) plus the checks that crate makes on whole buffers (header
//! size cap, UTF-8, data exactly filling the rest of the file). The shard index must agree
//! with the shards' own headers exactly.

use std::collections::BTreeMap;
use std::fs::File;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use dspark_quant::SourceDtype;
use safetensors::tensor::Metadata;
use sha2::{Digest, Sha256};

use crate::error::{ConvertError, Result};

/// Name of the single-file weights.
pub const SINGLE_FILE: &str = "model.safetensors";
/// Name of the shard index.
pub const INDEX_FILE: &str = "model.safetensors.index.json";
/// Name of the config.
pub const CONFIG_FILE: &str = "config.json";
/// Largest safetensors header accepted (the reference reader's `MAX_HEADER_SIZE`).
pub const MAX_HEADER_LEN: u64 = 100_000_000;
/// Largest `config.json` or shard index read (they are a few KB in practice).
pub const MAX_JSON_LEN: u64 = 16 << 20;

/// Reads a small JSON file, refusing absurd sizes before reading.
pub(crate) fn read_small(path: &Path) -> Result<Vec<u8>> {
    let meta = std::fs::metadata(path).map_err(|e| ConvertError::io(path, e))?;
    if !meta.is_file() {
        return Err(ConvertError::Source {
            path: path.to_path_buf(),
            msg: "not a regular file".into(),
        });
    }
    let len = meta.len();
    if len > MAX_JSON_LEN {
        return Err(ConvertError::Source {
            path: path.to_path_buf(),
            msg: format!("{len} bytes is too large for this file (limit {MAX_JSON_LEN})"),
        });
    }
    std::fs::read(path).map_err(|e| ConvertError::io(path, e))
}

/// Which files make up a checkpoint folder.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceLayout {
    /// The folder.
    pub dir: PathBuf,
    /// Weight files (names relative to `dir`), sorted by name.
    pub files: Vec<String>,
    /// The index's `weight_map` (tensor → file), when sharded.
    pub weight_map: Option<BTreeMap<String, String>>,
}

impl SourceLayout {
    /// Finds the weight files of `dir`: the index when present, else `model.safetensors`.
    pub fn discover(dir: &Path) -> Result<SourceLayout> {
        if !dir.is_dir() {
            return Err(ConvertError::Source {
                path: dir.to_path_buf(),
                msg: "not a folder (expected a Hugging Face model folder with config.json and model.safetensors)".into(),
            });
        }
        let index_path = dir.join(INDEX_FILE);
        if index_path.exists() {
            let text = read_small(&index_path)?;
            let bad = |msg: String| ConvertError::Source {
                path: index_path.clone(),
                msg,
            };
            let json: serde_json::Value =
                serde_json::from_slice(&text).map_err(|e| bad(format!("not valid JSON: {e}")))?;
            let map = json
                .get("weight_map")
                .and_then(|m| m.as_object())
                .ok_or_else(|| bad("no `weight_map` object".into()))?;
            let mut weight_map = BTreeMap::new();
            for (tensor, file) in map {
                let file = file
                    .as_str()
                    .ok_or_else(|| bad(format!("weight_map[`{tensor}`] is not a file name")))?;
                if file.is_empty()
                    || file.contains('/')
                    || file.contains('\\')
                    || file.starts_with('.')
                {
                    return Err(bad(format!(
                        "weight_map[`{tensor}`] = `{file}` is not a plain file name in this folder"
                    )));
                }
                weight_map.insert(tensor.clone(), file.to_string());
            }
            if weight_map.is_empty() {
                return Err(bad("weight_map is empty".into()));
            }
            let mut files: Vec<String> = weight_map.values().cloned().collect();
            files.sort();
            files.dedup();
            return Ok(SourceLayout {
                dir: dir.to_path_buf(),
                files,
                weight_map: Some(weight_map),
            });
        }
        let single = dir.join(SINGLE_FILE);
        if !single.exists() {
            return Err(ConvertError::Source {
                path: dir.to_path_buf(),
                msg: format!("neither {SINGLE_FILE} nor {INDEX_FILE} found"),
            });
        }
        Ok(SourceLayout {
            dir: dir.to_path_buf(),
            files: vec![SINGLE_FILE.to_string()],
            weight_map: None,
        })
    }

    /// Full path of weight file `i`.
    pub fn path(&self, i: usize) -> PathBuf {
        self.dir.join(&self.files[i])
    }

    /// Path of the config.
    pub fn config_path(&self) -> PathBuf {
        self.dir.join(CONFIG_FILE)
    }

    /// The shard index, when the checkpoint is sharded.
    pub fn index_path(&self) -> Option<PathBuf> {
        self.weight_map.as_ref().map(|_| self.dir.join(INDEX_FILE))
    }

    /// Every file a conversion reads: the config, the weight files, the index.
    pub fn input_files(&self) -> Vec<PathBuf> {
        let mut v = vec![self.config_path()];
        v.extend(self.files.iter().map(|f| self.dir.join(f)));
        v.extend(self.index_path());
        v
    }
}

/// One entry of a safetensors header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeaderEntry {
    /// Tensor name.
    pub name: String,
    /// The dtype's safetensors spelling (`BF16`, `F32`, `I64`, ...).
    pub dtype: String,
    /// PyTorch shape.
    pub shape: Vec<u64>,
    /// Start of the data, relative to the end of the header.
    pub begin: u64,
    /// End of the data, relative to the end of the header.
    pub end: u64,
}

/// Parses and validates a safetensors header. `prefix` holds at least the first
/// 8 + N bytes of the file (N = the header length it declares); `file_len` is the whole
/// file's size. Returns N and the entries sorted by offset.
pub fn parse_header(
    prefix: &[u8],
    file_len: u64,
) -> std::result::Result<(u64, Vec<HeaderEntry>), String> {
    let n_bytes: [u8; 8] = prefix
        .get(..8)
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| format!("file of {file_len} bytes is too short for a safetensors header"))?;
    let n = u64::from_le_bytes(n_bytes);
    if n > MAX_HEADER_LEN {
        return Err(format!(
            "header length {n} exceeds the limit of {MAX_HEADER_LEN} bytes"
        ));
    }
    if 8 + n > file_len {
        return Err(format!(
            "header length {n} runs past the end of the file ({file_len} bytes)"
        ));
    }
    let text = prefix
        .get(8..8 + n as usize)
        .ok_or_else(|| "header is incomplete".to_string())?;
    let text = std::str::from_utf8(text).map_err(|e| format!("header is not UTF-8: {e}"))?;
    if !text.starts_with('{') {
        return Err("header is not a JSON object".into());
    }
    let meta: Metadata = serde_json::from_str(text).map_err(|e| format!("invalid header: {e}"))?;
    let data_len = meta.data_len() as u64;
    if 8 + n + data_len != file_len {
        return Err(format!(
            "header says {} bytes of data but the file holds {} after the header",
            data_len,
            file_len - 8 - n
        ));
    }
    let mut entries: Vec<HeaderEntry> = meta
        .tensors()
        .into_iter()
        .map(|(name, info)| HeaderEntry {
            name,
            dtype: format!("{:?}", info.dtype),
            shape: info.shape.iter().map(|&d| d as u64).collect(),
            begin: info.data_offsets.0 as u64,
            end: info.data_offsets.1 as u64,
        })
        .collect();
    entries.sort_by(|a, b| (a.begin, a.end, &a.name).cmp(&(b.begin, b.end, &b.name)));
    Ok((n, entries))
}

/// What identifies a file's contents for change detection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Identity {
    dev: u64,
    ino: u64,
    len: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Identity {
    fn of(m: &std::fs::Metadata) -> Identity {
        Identity {
            dev: m.dev(),
            ino: m.ino(),
            len: m.len(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
        }
    }
}

/// An open source weight file.
#[derive(Debug)]
pub struct SourceFile {
    /// Full path.
    pub path: PathBuf,
    /// Size when opened.
    pub len: u64,
    file: File,
    identity: Identity,
}

/// A tensor of the source.
#[derive(Clone, Debug)]
pub struct SourceTensor {
    /// Name in the checkpoint.
    pub name: String,
    /// Index of its file in [`Checkpoint::files`].
    pub file: usize,
    /// Element type, or the unsupported safetensors dtype's name.
    pub dtype: std::result::Result<SourceDtype, String>,
    /// PyTorch shape (outermost first).
    pub shape: Vec<u64>,
    /// Absolute offset of the data in its file.
    pub offset: u64,
    /// Data bytes.
    pub len: u64,
}

impl SourceTensor {
    /// Number of elements.
    pub fn n_elements(&self) -> u64 {
        self.shape.iter().product()
    }
}

/// Every tensor of a checkpoint, sorted by name, and the open files that hold them.
#[derive(Debug)]
pub struct Checkpoint {
    /// The files, as laid out.
    pub layout: SourceLayout,
    /// Open weight files, in layout order.
    pub files: Vec<SourceFile>,
    /// The tensors, sorted by name.
    pub tensors: Vec<SourceTensor>,
}

fn dtype_of(d: &str) -> std::result::Result<SourceDtype, String> {
    match d {
        "F32" => Ok(SourceDtype::F32),
        "F16" => Ok(SourceDtype::F16),
        "BF16" => Ok(SourceDtype::BF16),
        other => Err(other.to_string()),
    }
}

/// Bytes read per call when hashing.
const HASH_READ: usize = 8 << 20;

fn shrank(path: &Path, what: &str) -> ConvertError {
    ConvertError::Source {
        path: path.to_path_buf(),
        msg: format!("the file shrank while {what}: the source changed during the run"),
    }
}

impl Checkpoint {
    /// Opens and validates every weight file of `layout` (headers only; no data is read).
    pub fn open(layout: SourceLayout) -> Result<Checkpoint> {
        let mut files = Vec::with_capacity(layout.files.len());
        let mut tensors: Vec<SourceTensor> = Vec::new();
        let mut owner: BTreeMap<String, usize> = BTreeMap::new();
        for i in 0..layout.files.len() {
            let path = layout.path(i);
            // Checked before opening: opening a FIFO would block.
            let is_file = std::fs::metadata(&path)
                .map_err(|e| ConvertError::io(&path, e))?
                .is_file();
            if !is_file {
                return Err(ConvertError::Source {
                    path,
                    msg: "not a regular file".into(),
                });
            }
            let file = File::open(&path).map_err(|e| ConvertError::io(&path, e))?;
            let meta = file.metadata().map_err(|e| ConvertError::io(&path, e))?;
            let len = meta.len();
            let bad = |msg: String| ConvertError::Source {
                path: path.clone(),
                msg: format!("not a valid safetensors file: {msg}"),
            };
            let mut n_bytes = [0u8; 8];
            let got = len.min(8) as usize;
            file.read_exact_at(&mut n_bytes[..got], 0)
                .map_err(|e| ConvertError::io(&path, e))?;
            let n = u64::from_le_bytes(n_bytes);
            if len < 8 || n > MAX_HEADER_LEN || 8 + n > len {
                return Err(bad(parse_header(&n_bytes[..got], len)
                    .err()
                    .unwrap_or_default()));
            }
            let mut prefix = vec![0u8; 8 + n as usize];
            file.read_exact_at(&mut prefix, 0)
                .map_err(|e| match e.kind() {
                    std::io::ErrorKind::UnexpectedEof => shrank(&path, "its header was read"),
                    _ => ConvertError::io(&path, e),
                })?;
            let (n, entries) = parse_header(&prefix, len).map_err(bad)?;
            for e in entries {
                if let Some(&first) = owner.get(&e.name) {
                    return Err(ConvertError::Source {
                        path: path.clone(),
                        msg: format!("tensor `{}` is also in {}", e.name, layout.files[first]),
                    });
                }
                owner.insert(e.name.clone(), i);
                tensors.push(SourceTensor {
                    dtype: dtype_of(&e.dtype),
                    shape: e.shape,
                    offset: 8 + n + e.begin,
                    len: e.end - e.begin,
                    name: e.name,
                    file: i,
                });
            }
            files.push(SourceFile {
                path,
                len,
                identity: Identity::of(&meta),
                file,
            });
        }
        if let Some(map) = &layout.weight_map {
            let index_path = layout.dir.join(INDEX_FILE);
            for (tensor, file) in map {
                match owner.get(tensor) {
                    None => {
                        return Err(ConvertError::Source {
                            path: index_path,
                            msg: format!(
                                "weight_map lists `{tensor}` in {file}, but no shard holds it"
                            ),
                        })
                    }
                    Some(&i) if layout.files[i] != *file => {
                        return Err(ConvertError::Source {
                            path: index_path,
                            msg: format!(
                                "weight_map puts `{tensor}` in {file}, but it is in {}",
                                layout.files[i]
                            ),
                        })
                    }
                    Some(_) => {}
                }
            }
            for (tensor, &i) in &owner {
                if !map.contains_key(tensor) {
                    return Err(ConvertError::Source {
                        path: layout.path(i),
                        msg: format!(
                            "holds `{tensor}`, which the index's weight_map does not list"
                        ),
                    });
                }
            }
        }
        tensors.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(Checkpoint {
            layout,
            files,
            tensors,
        })
    }

    /// The tensor called `name`.
    pub fn get(&self, name: &str) -> Option<&SourceTensor> {
        self.tensors
            .binary_search_by(|t| t.name.as_str().cmp(name))
            .ok()
            .map(|i| &self.tensors[i])
    }

    /// Reads `buf.len()` bytes of tensor `t`'s data, starting `start` bytes into it.
    pub fn read(&self, t: &SourceTensor, start: u64, buf: &mut [u8]) -> Result<()> {
        let f = &self.files[t.file];
        assert!(
            start + buf.len() as u64 <= t.len,
            "read past the end of tensor `{}`",
            t.name
        );
        f.file
            .read_exact_at(buf, t.offset + start)
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::UnexpectedEof => {
                    shrank(&f.path, &format!("tensor `{}` was read", t.name))
                }
                _ => ConvertError::io(&f.path, e),
            })
    }

    /// Lowercase hex SHA256 of weight file `i`, read sequentially; `Ok(None)` when `stop`
    /// was raised first.
    pub fn hash_file(&self, i: usize, stop: &AtomicBool) -> Result<Option<String>> {
        let f = &self.files[i];
        let mut h = Sha256::new();
        let mut buf = vec![0u8; HASH_READ];
        let mut pos = 0u64;
        while pos < f.len {
            if stop.load(Ordering::SeqCst) {
                return Ok(None);
            }
            let n = ((f.len - pos) as usize).min(buf.len());
            f.file
                .read_exact_at(&mut buf[..n], pos)
                .map_err(|e| match e.kind() {
                    std::io::ErrorKind::UnexpectedEof => shrank(&f.path, "it was hashed"),
                    _ => ConvertError::io(&f.path, e),
                })?;
            h.update(&buf[..n]);
            pos += n as u64;
        }
        Ok(Some(
            h.finalize().iter().map(|b| format!("{b:02x}")).collect(),
        ))
    }

    /// Fails if any weight file changed since it was opened: its size, modification or
    /// status-change time, or another file put at its path.
    pub fn check_unchanged(&self) -> Result<()> {
        for f in &self.files {
            let now_open = f
                .file
                .metadata()
                .map_err(|e| ConvertError::io(&f.path, e))?;
            let now_path = std::fs::metadata(&f.path).map_err(|e| ConvertError::io(&f.path, e))?;
            let (was, open, path) = (f.identity, Identity::of(&now_open), Identity::of(&now_path));
            if was == open && was == path {
                continue;
            }
            let what = if was.ino != path.ino || was.dev != path.dev {
                "another file was put in its place".to_string()
            } else if was.len != open.len {
                format!("its size went from {} to {} bytes", was.len, open.len)
            } else {
                "it was modified".to_string()
            };
            return Err(ConvertError::Source {
                path: f.path.clone(),
                msg: format!("the source changed during the run ({what}); nothing was written"),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(header: &str, data: usize) -> Vec<u8> {
        let mut v = (header.len() as u64).to_le_bytes().to_vec();
        v.extend_from_slice(header.as_bytes());
        v.resize(v.len() + data, 0);
        v
    }

    #[test]
    fn header_checks() {
        let ok = file(
            r#"{"a":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,12]},"__metadata__":{"format":"pt"}}"#,
            12,
        );
        let (_, e) = parse_header(&ok, ok.len() as u64).unwrap();
        assert_eq!(e[0].shape, vec![2, 3]);
        let cases = [
            (
                file(
                    r#"{"a":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,12]}}"#,
                    13,
                ),
                "file holds 13",
            ),
            (
                file(
                    r#"{"a":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,10]}}"#,
                    10,
                ),
                "invalid header",
            ),
            (
                file(
                    r#"{"a":{"dtype":"BF16","shape":[2,3],"data_offsets":[4,16]}}"#,
                    16,
                ),
                "invalid header",
            ),
            (
                file(
                    r#"{"a":{"dtype":"Q9","shape":[1],"data_offsets":[0,1]}}"#,
                    1,
                ),
                "invalid header",
            ),
            (
                file(
                    r#"{"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}}"#,
                    4,
                ),
                "invalid header",
            ),
            (file("[1]", 0), "not a JSON object"),
            (file("{\u{0}", 0), "invalid header"),
        ];
        for (bytes, want) in cases {
            let e = parse_header(&bytes, bytes.len() as u64).unwrap_err();
            assert!(e.contains(want), "{e}");
        }
        let mut huge = u64::MAX.to_le_bytes().to_vec();
        huge.extend_from_slice(b"{}");
        assert!(parse_header(&huge, 10)
            .unwrap_err()
            .contains("exceeds the limit"));
        assert!(parse_header(&[1, 0], 2).unwrap_err().contains("too short"));
    }
}

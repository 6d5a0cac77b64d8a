//! The source checkpoint: `config.json` plus one `model.safetensors` or the shards of a
//! `model.safetensors.index.json`, validated before a byte is converted.
//!
//! The crate reads small files itself but takes the weight files as byte slices: the
//! caller maps them (the `dspark` binary does, so the model is never held in memory).
//! Each file is validated by the `safetensors` crate (header size cap, JSON, offsets
//! contiguous and in bounds, byte lengths = shape × dtype, no trailing bytes); the shard
//! index must agree with the shards' own headers exactly.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use dspark_quant::SourceDtype;
use safetensors::{Dtype, SafeTensors};

use crate::error::{ConvertError, Result};

/// Name of the single-file weights.
pub const SINGLE_FILE: &str = "model.safetensors";
/// Name of the shard index.
pub const INDEX_FILE: &str = "model.safetensors.index.json";
/// Name of the config.
pub const CONFIG_FILE: &str = "config.json";

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
            let text = std::fs::read(&index_path).map_err(|e| ConvertError::io(&index_path, e))?;
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
}

/// A tensor of the source, borrowing its file's bytes.
#[derive(Clone, Debug)]
pub struct SourceTensor<'a> {
    /// Name in the checkpoint.
    pub name: String,
    /// Index of its file in [`SourceLayout::files`].
    pub file: usize,
    /// Element type, or the unsupported safetensors dtype's name.
    pub dtype: std::result::Result<SourceDtype, String>,
    /// PyTorch shape (outermost first).
    pub shape: Vec<u64>,
    /// The data bytes.
    pub data: &'a [u8],
}

impl SourceTensor<'_> {
    /// Number of elements.
    pub fn n_elements(&self) -> u64 {
        self.shape.iter().product()
    }
}

/// Every tensor of a checkpoint, sorted by name.
#[derive(Clone, Debug)]
pub struct Checkpoint<'a> {
    /// The files.
    pub layout: SourceLayout,
    /// The tensors, sorted by name.
    pub tensors: Vec<SourceTensor<'a>>,
}

fn dtype_of(d: Dtype) -> std::result::Result<SourceDtype, String> {
    match d {
        Dtype::F32 => Ok(SourceDtype::F32),
        Dtype::F16 => Ok(SourceDtype::F16),
        Dtype::BF16 => Ok(SourceDtype::BF16),
        other => Err(format!("{other:?}")),
    }
}

impl<'a> Checkpoint<'a> {
    /// Validates the weight files (`files[i]` holds the bytes of `layout.files[i]`).
    pub fn parse(layout: SourceLayout, files: &[&'a [u8]]) -> Result<Checkpoint<'a>> {
        assert_eq!(
            files.len(),
            layout.files.len(),
            "one byte slice per weight file"
        );
        let mut tensors: Vec<SourceTensor<'a>> = Vec::new();
        let mut owner: BTreeMap<String, usize> = BTreeMap::new();
        for (i, bytes) in files.iter().enumerate() {
            let path = layout.path(i);
            let st = SafeTensors::deserialize(bytes).map_err(|e| ConvertError::Source {
                path: path.clone(),
                msg: format!("not a valid safetensors file: {e}"),
            })?;
            for (name, view) in st.tensors() {
                if let Some(&first) = owner.get(&name) {
                    return Err(ConvertError::Source {
                        path: path.clone(),
                        msg: format!("tensor `{name}` is also in {}", layout.files[first]),
                    });
                }
                owner.insert(name.clone(), i);
                tensors.push(SourceTensor {
                    dtype: dtype_of(view.dtype()),
                    shape: view.shape().iter().map(|&d| d as u64).collect(),
                    data: view.data(),
                    name,
                    file: i,
                });
            }
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
        Ok(Checkpoint { layout, tensors })
    }

    /// The tensor called `name`.
    pub fn get(&self, name: &str) -> Option<&SourceTensor<'a>> {
        self.tensors
            .binary_search_by(|t| t.name.as_str().cmp(name))
            .ok()
            .map(|i| &self.tensors[i])
    }
}

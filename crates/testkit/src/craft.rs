//! Crafted GGUF files: a valid file rebuilt with one key or tensor changed, added or
//! removed, so tests can hand every loader each way a file can lie.

use dspark_gguf::{GgufFile, Header, TensorInfo, Value};

/// The parts of a GGUF file, in order, ready to be edited and written back.
#[derive(Clone, Debug)]
pub struct Parts {
    /// Metadata, in file order.
    pub kvs: Vec<(String, Value)>,
    /// Tensors with their data, in file order.
    pub tensors: Vec<(TensorInfo, Vec<u8>)>,
}

impl Parts {
    /// Splits a valid file.
    ///
    /// # Panics
    /// If `bytes` is not a valid GGUF (crafting starts from good files).
    pub fn of(bytes: &[u8]) -> Parts {
        let f = GgufFile::parse(bytes).expect("crafting starts from a valid GGUF");
        Parts {
            kvs: f.kvs().to_vec(),
            tensors: f
                .tensors()
                .map(|t| (t.info.clone(), t.data.to_vec()))
                .collect(),
        }
    }

    /// Sets `key` (in place if present, else appended).
    pub fn set(mut self, key: &str, value: Value) -> Parts {
        match self.kvs.iter_mut().find(|(k, _)| k == key) {
            Some(slot) => slot.1 = value,
            None => self.kvs.push((key.to_string(), value)),
        }
        self
    }

    /// Removes `key`.
    pub fn remove(mut self, key: &str) -> Parts {
        self.kvs.retain(|(k, _)| k != key);
        self
    }

    /// Appends a tensor.
    pub fn add_tensor(mut self, info: TensorInfo, data: Vec<u8>) -> Parts {
        self.tensors.push((info, data));
        self
    }

    /// Removes tensor `name`.
    pub fn remove_tensor(mut self, name: &str) -> Parts {
        self.tensors.retain(|(t, _)| t.name != name);
        self
    }

    /// Replaces tensor `name`'s info and data.
    pub fn replace_tensor(mut self, name: &str, info: TensorInfo, data: Vec<u8>) -> Parts {
        for t in &mut self.tensors {
            if t.0.name == name {
                *t = (info.clone(), data.clone());
            }
        }
        self
    }

    /// Writes the file.
    ///
    /// # Panics
    /// If the edits made it unwritable (a duplicate key, a data size that does not match).
    pub fn bytes(&self) -> Vec<u8> {
        let mut h = Header::new();
        for (k, v) in &self.kvs {
            h.push_kv(k.clone(), v.clone())
                .expect("unique, well-formed keys");
        }
        for (t, _) in &self.tensors {
            h.push_tensor(t.clone()).expect("well-formed tensor info");
        }
        let blobs: Vec<&[u8]> = self.tensors.iter().map(|(_, d)| &d[..]).collect();
        let mut out = Vec::new();
        h.write_file(&mut out, &blobs).expect("writing to memory");
        out
    }
}

/// `bytes` with `key` set to `value`.
pub fn with_key(bytes: &[u8], key: &str, value: Value) -> Vec<u8> {
    Parts::of(bytes).set(key, value).bytes()
}

/// `bytes` without `key`.
pub fn without_key(bytes: &[u8], key: &str) -> Vec<u8> {
    Parts::of(bytes).remove(key).bytes()
}

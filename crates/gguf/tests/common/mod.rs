//! Raw GGUF field encoders for hand-built (and deliberately broken) files.

#![allow(dead_code)]

/// A GGUF string: u64 length then the bytes.
pub fn s(x: &str) -> Vec<u8> {
    let mut v = (x.len() as u64).to_le_bytes().to_vec();
    v.extend_from_slice(x.as_bytes());
    v
}

/// A key/value record: key, u32 type id, raw payload.
pub fn kv(key: &str, ty: u32, payload: &[u8]) -> Vec<u8> {
    let mut v = s(key);
    v.extend_from_slice(&ty.to_le_bytes());
    v.extend_from_slice(payload);
    v
}

/// A tensor info record: name, n_dims, dims, u32 type id, u64 offset.
pub fn info(name: &str, dims: &[u64], ty: u32, offset: u64) -> Vec<u8> {
    let mut v = s(name);
    v.extend_from_slice(&(dims.len() as u32).to_le_bytes());
    for d in dims {
        v.extend_from_slice(&d.to_le_bytes());
    }
    v.extend_from_slice(&ty.to_le_bytes());
    v.extend_from_slice(&offset.to_le_bytes());
    v
}

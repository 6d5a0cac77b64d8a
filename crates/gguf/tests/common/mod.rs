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

/// A whole file from raw records: the given header counts (which may lie), the KV and
/// tensor-info records, zero padding to 32, then `data_len` zero bytes of data.
pub fn raw_file(
    counts: (u64, u64),
    kvs: &[Vec<u8>],
    infos: &[Vec<u8>],
    data_len: usize,
) -> Vec<u8> {
    let mut b = b"GGUF".to_vec();
    b.extend_from_slice(&3u32.to_le_bytes());
    b.extend_from_slice(&counts.0.to_le_bytes());
    b.extend_from_slice(&counts.1.to_le_bytes());
    for r in kvs.iter().chain(infos) {
        b.extend_from_slice(r);
    }
    while !b.len().is_multiple_of(32) {
        b.push(0);
    }
    b.resize(b.len() + data_len, 0);
    b
}

//! Any bytes into the strict GGUF reader; on success, every view, both contract checks,
//! the output-contract check, and a rewrite that must parse back to the same tensors and
//! rewrite to the same bytes.
#![no_main]

use dspark_gguf::{GgufFile, Header};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(file) = GgufFile::parse(data) else { return };
    for t in file.tensors() {
        assert_eq!(t.data.len() as u64, t.info.n_bytes());
    }
    let types = dspark_quant::matrix_types();
    let _ = dspark_contract::dflash_draft::check(&file, &types);
    let _ = dspark_contract::qwen3::check(&file, &types);
    let _ = dspark_convert::verify::check_output_contract(&file);
    let mut h = Header::new();
    for (k, v) in file.kvs() {
        h.push_kv(k.clone(), v.clone()).expect("a parsed key is writable");
    }
    let mut blobs = Vec::new();
    for t in file.tensors() {
        if t.info.dims.is_empty() {
            return; // the writer refuses scalar (n_dims = 0) tensors by design
        }
        h.push_tensor(t.info.clone()).expect("a parsed tensor info is writable");
        blobs.push(t.data);
    }
    let mut out = Vec::new();
    h.write_file(&mut out, &blobs).expect("writing to memory");
    let again = GgufFile::parse(&out).expect("a rewritten file parses");
    assert_eq!(again.tensor_infos(), file.tensor_infos());
    // Values compare by bytes, not `==` (NaN != NaN): rewriting the rewrite is identical.
    let mut h2 = Header::new();
    for (k, v) in again.kvs() {
        h2.push_kv(k.clone(), v.clone()).expect("a parsed key is writable");
    }
    for t in again.tensors() {
        h2.push_tensor(t.info.clone()).expect("a parsed tensor info is writable");
    }
    let blobs2: Vec<&[u8]> = again.tensors().map(|t| t.data).collect();
    let mut out2 = Vec::new();
    h2.write_file(&mut out2, &blobs2).expect("writing to memory");
    assert_eq!(out, out2, "rewriting is not idempotent");
});

//! The crafted-file suite in `tests/crafted/` (repo root): one small GGUF per attack on
//! GGUF readers (llama.cpp's 2024 CVEs, ggml's zero-dim division, the aborts on empty
//! keys and mistyped alignment). This test builds each file, checks the committed copy
//! is the same bytes, and that the reader refuses it with the expected error. The CLI's
//! tests run `dspark inspect` and `dspark verify` on the same files.
//!
//! Regenerate after changing a case: `DSPARK_REGENERATE_CRAFTED=1 cargo test -p dspark-gguf --test crafted`.

mod common;

use common::{info, kv, raw_file, s};

use std::path::PathBuf;

use dspark_gguf::{GgufError, GgufFile};

/// A file: header counts as given (or the real ones), KVs, infos, padding to 32, data.
fn file(
    counts: Option<(u64, u64)>,
    kvs: &[Vec<u8>],
    infos: &[Vec<u8>],
    data_len: usize,
) -> Vec<u8> {
    let mut all = vec![kv("general.architecture", 8, &s("dflash-draft"))];
    all.extend_from_slice(kvs);
    let counts = counts.unwrap_or((infos.len() as u64, all.len() as u64));
    raw_file(counts, &all, infos, data_len)
}

fn u32b(x: u32) -> Vec<u8> {
    x.to_le_bytes().to_vec()
}

/// (file name, bytes, text the error must contain).
pub fn cases() -> Vec<(&'static str, Vec<u8>, &'static str)> {
    let norm = |off| info("output_norm.weight", &[8], 0, off);
    let mut swapped = file(None, &[], &[norm(0)], 32);
    // Version 3 written big-endian reads as 0x03000000 little-endian.
    swapped[4..8].copy_from_slice(&3u32.to_be_bytes());
    let mut truncated = file(None, &[], &[info("w", &[64], 0, 0)], 256);
    truncated.truncate(truncated.len() - 100);
    let mut trailing = file(None, &[], &[norm(0)], 32);
    trailing.extend_from_slice(b"polyglot");
    let mut long_key = s("x");
    long_key[..8].copy_from_slice(&(1u64 << 60).to_le_bytes());
    vec![
        (
            "huge-tensor-count",
            file(Some((1 << 62, 1)), &[], &[], 0),
            "tensor count",
        ),
        (
            "huge-kv-count",
            file(Some((0, u64::MAX)), &[], &[], 0),
            "key/value count",
        ),
        (
            "huge-string-length",
            {
                let mut b = file(Some((0, 2)), &[], &[], 0);
                b.truncate(24 + kv("general.architecture", 8, &s("dflash-draft")).len());
                b.extend_from_slice(&long_key);
                b.extend_from_slice(&[0u8; 64]);
                b
            },
            "string of 1152921504606846976 bytes",
        ),
        (
            "huge-array-count",
            file(
                None,
                &[kv("a.ids", 9, &[5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10])],
                &[],
                0,
            ),
            "array of",
        ),
        (
            "n-dims-100",
            file(None, &[], &[info("t", &[1; 100], 0, 0)], 32),
            "100 dims",
        ),
        (
            "dims-product-overflow",
            file(
                None,
                &[],
                &[info("t", &[1 << 32, 1 << 32, 1 << 32], 0, 0)],
                32,
            ),
            "overflows",
        ),
        (
            "zero-dim",
            file(None, &[], &[info("t", &[4, 0], 0, 0)], 32),
            "dim 1 is zero",
        ),
        (
            "duplicate-tensor",
            file(None, &[], &[norm(0), norm(32)], 64),
            "duplicate tensor",
        ),
        (
            "duplicate-key",
            file(
                None,
                &[kv("a.n", 4, &u32b(1)), kv("a.n", 4, &u32b(2))],
                &[],
                0,
            ),
            "duplicate key",
        ),
        (
            "empty-key",
            file(None, &[kv("", 4, &u32b(1))], &[], 0),
            "empty metadata key",
        ),
        (
            "offset-past-eof",
            file(None, &[], &[info("t", &[8], 0, 1 << 40)], 32),
            "offset 1099511627776",
        ),
        (
            "data-past-eof",
            file(None, &[], &[info("t", &[4096], 0, 0)], 32),
            "ends past the end",
        ),
        (
            "overlapping-tensors",
            file(
                None,
                &[],
                &[info("a", &[16], 0, 0), info("b", &[16], 0, 32)],
                128,
            ),
            "offset 32, expected 64",
        ),
        (
            "misaligned-offset",
            file(
                None,
                &[],
                &[info("a", &[4], 0, 0), info("b", &[4], 0, 16)],
                64,
            ),
            "offset 16, expected 32",
        ),
        (
            "alignment-0",
            file(None, &[kv("general.alignment", 4, &u32b(0))], &[], 0),
            "general.alignment",
        ),
        (
            "alignment-3",
            file(None, &[kv("general.alignment", 4, &u32b(3))], &[], 0),
            "general.alignment",
        ),
        (
            "alignment-u64",
            file(
                None,
                &[kv("general.alignment", 10, &32u64.to_le_bytes())],
                &[],
                0,
            ),
            "general.alignment",
        ),
        (
            "nested-array",
            file(
                None,
                &[kv(
                    "a.x",
                    9,
                    &[
                        9, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                    ],
                )],
                &[],
                0,
            ),
            "nested arrays",
        ),
        (
            "bool-byte-2",
            file(None, &[kv("a.flag", 7, &[2])], &[], 0),
            "bool byte 2",
        ),
        (
            "value-type-99",
            file(None, &[kv("a.x", 99, &u32b(0))], &[], 0),
            "unknown value type 99",
        ),
        (
            "type-id-99",
            file(None, &[], &[info("t", &[4], 99, 0)], 32),
            "unknown ggml type 99",
        ),
        (
            "removed-type-id-4",
            file(None, &[], &[info("t", &[32], 4, 0)], 32),
            "unknown ggml type 4",
        ),
        (
            "q8-row-not-multiple-of-32",
            file(None, &[], &[info("t", &[33], 8, 0)], 64),
            "not a multiple of Q8_0's block size",
        ),
        (
            "long-tensor-name",
            file(None, &[], &[info(&"n".repeat(64), &[4], 0, 0)], 32),
            "1 to 63 bytes",
        ),
        (
            "invalid-utf8-key",
            file(
                None,
                &[{
                    let mut v = kv("ab", 4, &u32b(1));
                    v[9] = 0xff;
                    v
                }],
                &[],
                0,
            ),
            "not valid UTF-8",
        ),
        ("byte-swapped-version", swapped, "unsupported GGUF version"),
        (
            "version-1",
            {
                let mut b = file(None, &[], &[], 0);
                b[4..8].copy_from_slice(&1u32.to_le_bytes());
                b
            },
            "unsupported GGUF version 1",
        ),
        (
            "bad-magic",
            {
                let mut b = file(None, &[], &[], 0);
                b[..4].copy_from_slice(b"GGML");
                b
            },
            "bad magic",
        ),
        ("truncated-data", truncated, "ends past the end"),
        ("trailing-bytes", trailing, "trailing bytes"),
        ("empty-file", Vec::new(), "magic needs 4 bytes"),
    ]
}

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/crafted")
}

#[test]
fn crafted_files_are_committed_and_refused() {
    let regenerate = std::env::var_os("DSPARK_REGENERATE_CRAFTED").is_some();
    if regenerate {
        std::fs::create_dir_all(dir()).unwrap();
    }
    for (name, bytes, expect) in cases() {
        let path = dir().join(format!("{name}.gguf"));
        if regenerate {
            std::fs::write(&path, &bytes).unwrap();
        }
        let committed = std::fs::read(&path)
            .unwrap_or_else(|e| panic!("{}: {e} (regenerate, see module docs)", path.display()));
        assert_eq!(
            committed, bytes,
            "{name}: committed file differs from its recipe"
        );
        match GgufFile::parse(&bytes) {
            Err(e @ GgufError::Malformed { .. }) => {
                let msg = e.to_string();
                assert!(msg.contains(expect), "{name}: `{msg}` lacks `{expect}`");
            }
            other => panic!("{name}: expected a malformed-file error, got {other:?}"),
        }
    }
    let on_disk = std::fs::read_dir(dir())
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "gguf")
        })
        .count();
    assert_eq!(
        on_disk,
        cases().len(),
        "tests/crafted holds files no case produces"
    );
}

//! The reader against valid files (round trips) and a catalogue of broken ones, each of
//! which must fail with its own error kind, never a panic.

mod common;

use common::{info, kv, raw_file};

use dspark_gguf::{Array, GgmlType, GgufError, GgufFile, Header, Malformed, TensorInfo, Value};
use proptest::prelude::*;

/// A small valid file: three keys, two tensors.
fn valid() -> Vec<u8> {
    let mut h = Header::new();
    h.push_kv("general.architecture", Value::String("dflash-draft".into()))
        .unwrap();
    h.push_kv("a.ids", Value::Array(Array::I32(vec![7, 23, 51])))
        .unwrap();
    h.push_kv("a.flag", Value::Bool(true)).unwrap();
    h.push_tensor(TensorInfo {
        name: "w".into(),
        dims: vec![32, 2],
        ty: GgmlType::Q8_0,
    })
    .unwrap();
    h.push_tensor(TensorInfo {
        name: "n".into(),
        dims: vec![3],
        ty: GgmlType::F32,
    })
    .unwrap();
    let w = vec![1u8; 68];
    let n = vec![2u8; 12];
    let mut out = Vec::new();
    h.write_file(&mut out, &[&w, &n]).unwrap();
    out
}

fn kind(bytes: &[u8]) -> Malformed {
    match GgufFile::parse(bytes) {
        Err(GgufError::Malformed { kind, .. }) => kind,
        other => panic!("expected a malformed-file error, got {other:?}"),
    }
}

#[test]
fn valid_file_parses_and_lends_views() {
    let bytes = valid();
    let f = GgufFile::parse(&bytes).unwrap();
    assert_eq!(f.version(), 3);
    assert_eq!(
        f.get("a.ids"),
        Some(&Value::Array(Array::I32(vec![7, 23, 51])))
    );
    assert_eq!(f.tensor("w").unwrap().data, &[1u8; 68][..]);
    assert_eq!(f.tensor("n").unwrap().offset, 96);
    assert_eq!(
        f.tensor("missing").unwrap_err(),
        GgufError::TensorNotFound("missing".into())
    );
}

#[test]
fn bad_magic() {
    let mut b = valid();
    b[0] = b'X';
    assert!(matches!(kind(&b), Malformed::BadMagic(_)));
}

#[test]
fn unsupported_version_and_byte_swapped() {
    for v in [0u32, 1, 4, 0x0300_0000] {
        let mut b = valid();
        b[4..8].copy_from_slice(&v.to_le_bytes());
        assert_eq!(kind(&b), Malformed::UnsupportedVersion(v));
    }
}

#[test]
fn too_many_tensors_and_kvs() {
    let mut b = valid();
    b[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
    assert!(matches!(kind(&b), Malformed::TooManyTensors { .. }));
    let mut b = valid();
    b[16..24].copy_from_slice(&(1u64 << 40).to_le_bytes());
    assert!(matches!(kind(&b), Malformed::TooManyKvs { .. }));
}

#[test]
fn string_too_long() {
    let mut b = valid();
    b[24..32].copy_from_slice(&(u64::MAX - 3).to_le_bytes());
    assert!(matches!(kind(&b), Malformed::StringTooLong { .. }));
}

#[test]
fn every_truncation_fails_cleanly() {
    let b = valid();
    for len in 0..b.len() {
        assert!(
            GgufFile::parse(&b[..len]).is_err(),
            "truncated to {len} parsed"
        );
    }
}

#[test]
fn trailing_bytes() {
    let mut b = valid();
    b.push(0);
    assert_eq!(kind(&b), Malformed::TrailingBytes { extra: 1 });
}

/// Builds a file by hand from raw KV and tensor-info bytes, for cases the header builder
/// refuses to write.
fn raw(kvs: &[Vec<u8>], infos: &[Vec<u8>], data_len: usize) -> Vec<u8> {
    raw_file((infos.len() as u64, kvs.len() as u64), kvs, infos, data_len)
}

/// A UINT32 key/value whose 2-byte key is `a` followed by the invalid byte 0xff.
fn invalid_utf8_key() -> Vec<u8> {
    let mut v = 2u64.to_le_bytes().to_vec();
    v.extend_from_slice(&[b'a', 0xff]);
    v.extend_from_slice(&4u32.to_le_bytes());
    v.extend_from_slice(&1u32.to_le_bytes());
    v
}

#[test]
fn catalogue_of_broken_headers() {
    let u32v = |x: u32| x.to_le_bytes().to_vec();
    type Case = (&'static str, Vec<u8>, fn(&Malformed) -> bool);
    let cases: Vec<Case> = vec![
        (
            "duplicate key",
            raw(&[kv("a", 4, &u32v(1)), kv("a", 4, &u32v(2))], &[], 0),
            |k| matches!(k, Malformed::DuplicateKey(_)),
        ),
        ("empty key", raw(&[kv("", 4, &u32v(1))], &[], 0), |k| {
            matches!(k, Malformed::EmptyKey)
        }),
        (
            "unknown value type",
            raw(&[kv("a", 13, &u32v(1))], &[], 0),
            |k| matches!(k, Malformed::UnknownValueType { id: 13, .. }),
        ),
        ("bool byte 2", raw(&[kv("a", 7, &[2])], &[], 0), |k| {
            matches!(k, Malformed::BadBool { byte: 2, .. })
        }),
        (
            "nested array",
            raw(&[kv("a", 9, &[9, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0])], &[], 0),
            |k| matches!(k, Malformed::NestedArray { .. }),
        ),
        (
            "huge array",
            raw(
                &[kv("a", 9, &[4, 0, 0, 0, 255, 255, 255, 255, 0, 0, 0, 0])],
                &[],
                0,
            ),
            |k| matches!(k, Malformed::ArrayTooLong { .. }),
        ),
        (
            "alignment 0",
            raw(&[kv("general.alignment", 4, &u32v(0))], &[], 0),
            |k| matches!(k, Malformed::BadAlignment(_)),
        ),
        (
            "alignment 3",
            raw(&[kv("general.alignment", 4, &u32v(3))], &[], 0),
            |k| matches!(k, Malformed::BadAlignment(_)),
        ),
        (
            "alignment as u64",
            raw(&[kv("general.alignment", 10, &32u64.to_le_bytes())], &[], 0),
            |k| matches!(k, Malformed::BadAlignment(_)),
        ),
        (
            "invalid utf-8 key",
            raw(&[invalid_utf8_key()], &[], 0),
            |k| matches!(k, Malformed::InvalidUtf8 { .. }),
        ),
        (
            "n_dims 100",
            raw(&[], &[info("t", &[1; 100], 0, 0)], 32),
            |k| matches!(k, Malformed::TooManyDims { n_dims: 100, .. }),
        ),
        ("zero dim", raw(&[], &[info("t", &[4, 0], 0, 0)], 32), |k| {
            matches!(k, Malformed::ZeroDim { dim: 1, .. })
        }),
        (
            "dims overflow",
            raw(&[], &[info("t", &[1 << 32, 1 << 32], 0, 0)], 32),
            |k| matches!(k, Malformed::SizeOverflow(_)),
        ),
        ("type id 99", raw(&[], &[info("t", &[4], 99, 0)], 32), |k| {
            matches!(k, Malformed::UnknownGgmlType { id: 99, .. })
        }),
        (
            "removed type 4",
            raw(&[], &[info("t", &[32], 4, 0)], 32),
            |k| matches!(k, Malformed::UnknownGgmlType { id: 4, .. }),
        ),
        (
            "row not a block multiple",
            raw(&[], &[info("t", &[33], 8, 0)], 64),
            |k| matches!(k, Malformed::RowNotBlockMultiple { .. }),
        ),
        (
            "duplicate tensor",
            raw(&[], &[info("t", &[4], 0, 0), info("t", &[4], 0, 32)], 64),
            |k| matches!(k, Malformed::DuplicateTensor(_)),
        ),
        (
            "long tensor name",
            raw(&[], &[info(&"x".repeat(64), &[4], 0, 0)], 32),
            |k| matches!(k, Malformed::BadTensorName(_)),
        ),
        (
            "misaligned offset",
            raw(&[], &[info("a", &[4], 0, 0), info("b", &[4], 0, 16)], 64),
            |k| {
                matches!(
                    k,
                    Malformed::BadOffset {
                        offset: 16,
                        expected: 32,
                        ..
                    }
                )
            },
        ),
        (
            "overlapping tensors",
            raw(&[], &[info("a", &[8], 0, 0), info("b", &[8], 0, 0)], 64),
            |k| matches!(k, Malformed::BadOffset { .. }),
        ),
        (
            "offset past the end",
            raw(&[], &[info("a", &[1024], 0, 0)], 32),
            |k| matches!(k, Malformed::TensorOutOfBounds { .. }),
        ),
    ];
    for (what, bytes, check) in cases {
        let k = kind(&bytes);
        assert!(check(&k), "{what}: got {k:?}");
        // Display names the fact without panicking.
        assert!(!format!("{}", GgufError::Malformed { at: 0, kind: k }).is_empty());
    }
}

fn value_strategy() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<u8>().prop_map(Value::U8),
        any::<i16>().prop_map(Value::I16),
        any::<u32>().prop_map(Value::U32),
        any::<i64>().prop_map(Value::I64),
        any::<bool>().prop_map(Value::Bool),
        any::<u32>().prop_map(|b| Value::F32(f32::from_bits(b & 0x7f7f_ffff))),
        "[a-z0-9 ]{0,12}".prop_map(Value::String),
        proptest::collection::vec(any::<i32>(), 0..6).prop_map(|v| Value::Array(Array::I32(v))),
        proptest::collection::vec("[a-z]{0,5}", 0..4).prop_map(|v| Value::Array(Array::String(v))),
    ]
}

proptest! {
    #[test]
    fn write_then_parse_round_trips(
        values in proptest::collection::vec(value_strategy(), 0..8),
        dims in proptest::collection::vec(proptest::collection::vec(1u64..5, 1..4), 0..5),
        align_pow in 0u32..7,
    ) {
        let mut h = Header::new();
        h.push_kv("general.alignment", Value::U32(1 << align_pow)).unwrap();
        for (i, v) in values.iter().enumerate() {
            h.push_kv(format!("k.{i}"), v.clone()).unwrap();
        }
        let mut blobs = Vec::new();
        for (i, d) in dims.iter().enumerate() {
            let info = TensorInfo { name: format!("t{i}"), dims: d.clone(), ty: GgmlType::F32 };
            blobs.push(vec![i as u8; info.n_bytes() as usize]);
            h.push_tensor(info).unwrap();
        }
        let refs: Vec<&[u8]> = blobs.iter().map(|b| &b[..]).collect();
        let mut out = Vec::new();
        h.write_file(&mut out, &refs).unwrap();
        let f = GgufFile::parse(&out).unwrap();
        prop_assert_eq!(f.kvs(), h.kvs());
        prop_assert_eq!(f.tensor_infos(), h.tensors());
        for (t, b) in f.tensors().zip(&blobs) {
            prop_assert_eq!(t.data, &b[..]);
        }
        prop_assert_eq!(out.len() as u64, h.layout().file_size);
    }
}

/// Found by `cargo fuzz run gguf_parse` (2026-11-30): a file with a NaN in a FLOAT32
/// array. The reader was right; the harness compared values with `==` (NaN != NaN).
/// Kept as a test that such values survive parse → write → parse bit for bit.
#[test]
fn fuzz_nan_metadata_round_trips_bit_exactly() {
    let bytes = include_bytes!("../testdata/fuzz-nan-metadata.gguf");
    let f = GgufFile::parse(bytes).unwrap();
    let rewrite = |f: &GgufFile<'_>| {
        let mut h = Header::new();
        for (k, v) in f.kvs() {
            h.push_kv(k.clone(), v.clone()).unwrap();
        }
        for t in f.tensors() {
            h.push_tensor(t.info.clone()).unwrap();
        }
        let blobs: Vec<&[u8]> = f.tensors().map(|t| t.data).collect();
        let mut out = Vec::new();
        h.write_file(&mut out, &blobs).unwrap();
        out
    };
    let once = rewrite(&f);
    let twice = rewrite(&GgufFile::parse(&once).unwrap());
    assert_eq!(once, twice);
    let nan = f.kvs().iter().find_map(|(_, v)| match v {
        Value::Array(Array::F32(xs)) => xs.iter().find(|x| x.is_nan()).copied(),
        _ => None,
    });
    assert!(nan.is_some(), "the fixture holds a NaN");
}

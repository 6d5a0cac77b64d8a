//! Deterministic mutation tests (they run in CI; the coverage-guided fuzzers in `fuzz/`
//! do not): every truncation and thousands of seeded byte flips of valid inputs must
//! give `Ok` or `Err` — never a panic — and stay under a memory bound enforced by a
//! capped global allocator (an allocation past it aborts the test binary).

use std::alloc::System;
use std::path::Path;

use cap::Cap;
use dspark_convert::config::DraftConfig;
use dspark_convert::source::parse_header;
use dspark_convert::verify::check_output_contract;
use dspark_gguf::GgufFile;
use dspark_testkit::mutate::mutants;

#[global_allocator]
static ALLOC: Cap<System> = Cap::new(System, usize::MAX);

/// What any single parse may allocate beyond what the test itself holds.
const MEMORY_BOUND: usize = 256 << 20;

fn seed(name: &str) -> Vec<u8> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(name);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn bounded(f: impl FnOnce()) {
    dspark_testkit::mutate::bounded(&ALLOC, MEMORY_BOUND, f)
}

#[test]
fn mutated_inputs_never_panic_and_stay_bounded() {
    gguf_files();
    safetensors_headers();
    configs();
}

fn gguf_files() {
    for (name, seed_value) in [
        ("gguf_parse/seed-micro-drafter.gguf", 1),
        ("gguf_parse/seed-all-types.gguf", 2),
    ] {
        let valid = seed(name);
        let (mut ok, mut err) = (0usize, 0usize);
        mutants(&valid, 4000, seed_value, |bytes| {
            bounded(|| match GgufFile::parse(bytes) {
                Ok(file) => {
                    ok += 1;
                    for t in file.tensors() {
                        assert_eq!(t.data.len() as u64, t.info.n_bytes());
                    }
                    let _ =
                        dspark_contract::dflash_draft::check(&file, &dspark_quant::matrix_types());
                    let _ = dspark_contract::qwen3::check(&file, &dspark_quant::matrix_types());
                    let _ = check_output_contract(&file);
                }
                Err(e) => {
                    err += 1;
                    assert!(!e.to_string().is_empty());
                }
            })
        });
        // Most mutants must be refused; some (flips inside tensor data) stay valid.
        assert!(err > valid.len() && ok > 0, "{name}: {ok} ok, {err} errors");
    }
}

fn safetensors_headers() {
    let valid = seed("safetensors_header/seed-small.safetensors");
    mutants(&valid, 4000, 3, |bytes| {
        bounded(|| {
            let _ = parse_header(bytes, bytes.len() as u64);
        })
    });
}

fn configs() {
    for (name, s) in [
        ("config/seed-specforge.json", 4),
        ("config/seed-flat-v4.json", 5),
    ] {
        let valid = seed(name);
        mutants(&valid, 3000, s, |bytes| {
            bounded(|| {
                if let Ok(json) = serde_json::from_slice::<serde_json::Value>(bytes) {
                    let _ = DraftConfig::from_json(&json, Path::new("config.json"));
                }
            })
        });
    }
}

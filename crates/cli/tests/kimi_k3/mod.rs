//! Kimi K3 against llama.cpp itself: the greedy steps of `testdata/kimi_k3/k3-tiny-greedy.json`
//! (made by `bench/k3_llama_fixture.py` with llama.cpp's CPU defaults on 2 threads), bit for
//! bit — every step's top logit, not only its token.

use std::fs;
use std::path::Path;
use std::sync::Arc;

use dspark_runtime::generate::{argmax, PREFILL_CHUNK};
use dspark_runtime::{Attention, KimiK3, Logits, Target};

use crate::common::*;

/// Three prompts on the file `synth --geometry kimi-k3-tiny --seed 3` writes: 12 tokens
/// (llama.cpp's one-chunk flash attention), 70 (its tiled kernel for the prompt) and 300
/// (decode steps seeing 512 cells: its split-KV path, one chunk of keys per thread). Each
/// run is 16 greedy steps on a pool of the fixture's thread count, the prompt in one
/// forward in llama.cpp's prompt order, then one token per forward, as `generate` runs it;
/// each step's largest logit must have llama.cpp's bits. Passing means the KDA recurrence,
/// short conv, gates, MLA attention, routing and every product are llama.cpp's to the bit.
#[test]
fn greedy_steps_equal_llama_cpp_bit_for_bit() {
    let fixture: serde_json::Value = serde_json::from_slice(
        &fs::read(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/kimi_k3/k3-tiny-greedy.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let t = Tmp::new();
    let dir = t.path("pair");
    let (geometry, seed) = (
        fixture["geometry"].as_str().unwrap(),
        fixture["seed"].as_u64().unwrap(),
    );
    synth_qwen3_geometry(geometry, &dir, seed);
    let target = dir.join("target.gguf");
    assert_eq!(
        sha256_file(&target),
        fixture["target_sha256"].as_str().unwrap(),
        "`synth --geometry {geometry} --seed {seed}` no longer writes the file the fixture was made on: remake it (bench/k3_llama_fixture.py)"
    );
    let model = Arc::new(KimiK3::open(Arc::new(fs::read(&target).unwrap())).unwrap());
    let threads = fixture["threads"].as_u64().unwrap() as usize;
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap();
    let ints = |v: &serde_json::Value| -> Vec<u32> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as u32)
            .collect()
    };
    for run in fixture["runs"].as_array().unwrap() {
        let (prompt, want_tokens, want_bits) = (
            ints(&run["prompt"]),
            ints(&run["tokens"]),
            ints(&run["top_bits"]),
        );
        assert!(prompt.len() <= PREFILL_CHUNK);
        let (tokens, bits) = pool.install(|| {
            let mut s = model.session(prompt.len() + want_tokens.len(), 1).unwrap();
            s.set_attention(Attention::F16);
            let mut logits = dspark_quant::gemm::prompt_order(|| {
                s.forward_commit(&prompt, &[], Logits::Last).unwrap()
            })
            .logits;
            let (mut tokens, mut bits) = (Vec::new(), Vec::new());
            for step in 0..want_tokens.len() {
                let next = argmax(&logits);
                tokens.push(next);
                bits.push(logits[next as usize].to_bits());
                if step + 1 < want_tokens.len() {
                    logits = s.forward_commit(&[next], &[], Logits::Last).unwrap().logits;
                }
            }
            (tokens, bits)
        });
        assert_eq!(
            tokens,
            want_tokens,
            "{}-token prompt: greedy tokens",
            prompt.len()
        );
        assert_eq!(
            bits,
            want_bits,
            "{}-token prompt: top logits' bits",
            prompt.len()
        );
    }
}

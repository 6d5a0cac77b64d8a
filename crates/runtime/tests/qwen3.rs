//! The Qwen3 target: loads the synthetic GGUF, and batched forwards equal sequential ones.

use dspark_gguf::{GgmlType, GgufFile};
use dspark_runtime::synth::{qwen3_gguf, Qwen3Geometry};
use dspark_runtime::{Qwen3, Target};

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn batched_forward_equals_sequential_and_rollback_replays_exactly() {
    // The small geometry's rows are whole groups of eight Q8_0 blocks plus leftovers, so
    // one-token and multi-token forwards run different kernels there: still the same bits.
    for (g, ty) in [
        (Qwen3Geometry::tiny(), GgmlType::Q8_0),
        (Qwen3Geometry::tiny(), GgmlType::F32),
        (Qwen3Geometry::small(), GgmlType::Q8_0),
    ] {
        let bytes = qwen3_gguf(&g, 7, ty);
        let file = GgufFile::parse(&bytes).unwrap();
        let tokens = [5u32, 17, 300, 2, 511, 42, 42, 9];
        let capture = [1, 0];

        let mut batched = Qwen3::load(&file, 64).unwrap();
        let all = batched.forward(&tokens, &capture).unwrap();
        assert_eq!(batched.len(), tokens.len());
        assert!(all.logits.iter().all(|v| v.is_finite()));

        let mut seq = Qwen3::load(&file, 64).unwrap();
        let (v, hd) = (seq.vocab_size(), seq.hidden_size());
        for (t, &tok) in tokens.iter().enumerate() {
            let one = seq.forward(&[tok], &capture).unwrap();
            assert_eq!(
                bits(&one.logits),
                bits(&all.logits[t * v..(t + 1) * v]),
                "{ty:?} logits at {t}"
            );
            assert_eq!(
                bits(&one.captured),
                bits(&all.captured[t * 2 * hd..(t + 1) * 2 * hd]),
                "{ty:?} capture at {t}"
            );
        }

        // Roll back to 3 positions, replay the rest in two chunks: same bits.
        batched.truncate(3);
        let a = batched.forward(&tokens[3..5], &capture).unwrap();
        let b = batched.forward(&tokens[5..], &capture).unwrap();
        assert_eq!(bits(&a.logits), bits(&all.logits[3 * v..5 * v]));
        assert_eq!(bits(&b.logits), bits(&all.logits[5 * v..]));
    }
}

#[test]
fn requests_beyond_the_model_are_refused() {
    let bytes = qwen3_gguf(&Qwen3Geometry::tiny(), 1, GgmlType::Q8_0);
    let file = GgufFile::parse(&bytes).unwrap();
    let mut m = Qwen3::load(&file, 4).unwrap();
    assert!(m
        .forward(&[1, 2, 3, 4, 5], &[])
        .unwrap_err()
        .to_string()
        .contains("context full"));
    assert!(m
        .forward(&[512], &[])
        .unwrap_err()
        .to_string()
        .contains("outside the vocabulary"));
    assert!(m
        .forward(&[1], &[4])
        .unwrap_err()
        .to_string()
        .contains("cannot capture layer 4"));
}

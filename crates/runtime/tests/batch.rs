//! `TargetModel::forward_batch`: sessions forwarded together, as one forward over all their
//! columns, get exactly what each one's own forward gives (logits and captured features, bit
//! for bit) and end in the same state — whatever the others hold, at decode and verify
//! widths, after prompts of either attention path, with F16 and f32 attention, for the
//! llama and qwen3 decoders; a session of another model in the batch runs alone.

use std::sync::Arc;

use dspark_gguf::GgmlType;
use dspark_runtime::{Attention, Forward, Llama, Logits, SessionOptions, Target, TargetModel};
use dspark_testkit::llama::{llama_gguf, LlamaGeometry};
use dspark_testkit::target::{qwen3_gguf, Qwen3Geometry};

fn tokens(seed: u32, n: usize, vocab: usize) -> Vec<u32> {
    (0..n as u32)
        .map(|i| (seed.wrapping_mul(2_654_435_761).wrapping_add(i * 40_503)) % vocab as u32)
        .collect()
}

fn session(model: &Arc<dyn TargetModel>, attention: Attention) -> Box<dyn Target + Send> {
    Arc::clone(model)
        .session(&SessionOptions {
            positions: 200,
            undo: 9,
            attention,
        })
        .unwrap()
}

fn same(a: &Forward, b: &Forward, what: &str) {
    assert_eq!(a.logits.len(), b.logits.len(), "{what}");
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert!(bits(&a.logits) == bits(&b.logits), "{what}: logits differ");
    assert!(
        bits(&a.captured) == bits(&b.captured),
        "{what}: captured features differ"
    );
}

/// Three sessions with prompts of 5, 9 and 70 tokens (the last past llama.cpp's tiled
/// attention threshold), then rounds of decode and verify widths, batched and alone.
fn batched_equals_alone(model: Arc<dyn TargetModel>, attention: Attention) {
    let vocab = model.shape().vocab;
    let capture = [0, model.shape().layers - 1];
    let prompts = [5usize, 9, 70];
    let mut alone: Vec<_> = prompts.iter().map(|_| session(&model, attention)).collect();
    let mut batched: Vec<_> = prompts.iter().map(|_| session(&model, attention)).collect();
    for (i, &n) in prompts.iter().enumerate() {
        let p = tokens(i as u32 + 1, n, vocab);
        let a = dspark_quant::gemm::prompt_order(|| {
            alone[i].forward_commit(&p, &capture, Logits::Last)
        })
        .unwrap();
        let b = dspark_quant::gemm::prompt_order(|| {
            batched[i].forward_commit(&p, &capture, Logits::Last)
        })
        .unwrap();
        same(&a, &b, "prefill");
    }
    for (round, widths) in [[1usize, 1, 1], [3, 1, 8], [8, 2, 1], [1, 9, 4]]
        .iter()
        .enumerate()
    {
        let steps: Vec<Vec<u32>> = widths
            .iter()
            .enumerate()
            .map(|(i, &w)| tokens((round * 7 + i) as u32 + 11, w, vocab))
            .collect();
        let want: Vec<Forward> = alone
            .iter_mut()
            .zip(&steps)
            .map(|(s, t)| s.forward(t, &capture, Logits::All).unwrap())
            .collect();
        let got = {
            let mut batch: Vec<(&mut dyn Target, &[u32])> = batched
                .iter_mut()
                .zip(&steps)
                .map(|(s, t)| (&mut **s as &mut dyn Target, t.as_slice()))
                .collect();
            model.forward_batch(&mut batch, &capture, Logits::All)
        };
        for (i, (w, g)) in want.iter().zip(got).enumerate() {
            same(w, &g.unwrap(), &format!("round {round}, session {i}"));
            assert_eq!(alone[i].len(), batched[i].len());
        }
        // Each rejects all but one of its tokens, as a verify would.
        for s in alone.iter_mut().chain(batched.iter_mut()) {
            let to = s.committed() + 1;
            s.rollback(to).unwrap();
            s.commit();
        }
    }
    // The last rows only.
    let steps: Vec<Vec<u32>> = (0..3).map(|i| tokens(90 + i, 2, vocab)).collect();
    let want: Vec<Forward> = alone
        .iter_mut()
        .zip(&steps)
        .map(|(s, t)| s.forward(t, &[], Logits::Last).unwrap())
        .collect();
    let mut batch: Vec<(&mut dyn Target, &[u32])> = batched
        .iter_mut()
        .zip(&steps)
        .map(|(s, t)| (&mut **s as &mut dyn Target, t.as_slice()))
        .collect();
    for (w, g) in want
        .iter()
        .zip(model.forward_batch(&mut batch, &[], Logits::Last))
    {
        same(w, &g.unwrap(), "last rows");
    }
}

fn llama() -> Arc<dyn TargetModel> {
    let bytes = llama_gguf(&LlamaGeometry::tiny(), 3, GgmlType::Q8_0);
    Arc::new(Llama::open(Arc::new(bytes)).unwrap())
}

fn qwen3() -> Arc<dyn TargetModel> {
    dspark_testkit::run::target(qwen3_gguf(&Qwen3Geometry::tiny(), 5, GgmlType::Q8_0))
}

#[test]
fn llama_sessions_batched_are_each_alone_f16() {
    batched_equals_alone(llama(), Attention::F16);
}

#[test]
fn llama_sessions_batched_are_each_alone_f32() {
    batched_equals_alone(llama(), Attention::F32);
}

#[test]
fn qwen3_sessions_batched_are_each_alone() {
    batched_equals_alone(qwen3(), Attention::F16);
    batched_equals_alone(qwen3(), Attention::F32);
}

/// A session of another model, or a request a session cannot take, does not spoil the
/// batch: the others get their own forwards, the bad one its error.
#[test]
fn foreign_sessions_and_bad_requests_stay_alone() {
    let (a, b) = (llama(), llama());
    let vocab = a.shape().vocab;
    let t = tokens(1, 3, vocab);
    let mut alone = session(&a, Attention::F16);
    let want = alone.forward(&t, &[], Logits::All).unwrap();
    let (mut s1, mut s2, mut s3) = (
        session(&a, Attention::F16),
        session(&b, Attention::F16),
        session(&a, Attention::F32),
    );
    let mut full = session(&a, Attention::F16);
    let fill = tokens(2, full.capacity(), vocab);
    full.forward(&fill, &[], Logits::Last).unwrap();
    let mut batch: Vec<(&mut dyn Target, &[u32])> = vec![
        (&mut *s1, &t),
        (&mut *s2, &t),
        (&mut *s3, &t),
        (&mut *full, &t),
    ];
    let got = a.forward_batch(&mut batch, &[], Logits::All);
    same(&want, got[0].as_ref().unwrap(), "own model");
    same(
        &want,
        got[1].as_ref().unwrap(),
        "another copy of the model, alone",
    );
    assert!(got[2].is_ok(), "f32 attention, alone");
    assert!(got[3].is_err(), "a full session is refused");
    assert_eq!(full.len(), full.capacity(), "and left unchanged");
}

//! Scaled dot-product attention of a group of query heads over keys and values stored
//! at a fixed stride (a KV cache, a block's own keys): the step both models share. What differs —
//! which keys a query sees — stays in each model.

use dspark_quant::kernels;

use crate::nn::ops::softmax;

/// Keys and values of consecutive positions stored row by row (a KV cache, a block's own
/// keys): position p's head is `keys[p · stride .. p · stride + head_dim]` (the slices
/// start at the head's offset in a row).
#[derive(Clone, Copy)]
pub(crate) struct Span<'k> {
    pub keys: &'k [f32],
    pub values: &'k [f32],
    pub count: usize,
}

/// The query heads sharing one KV head (`qs`: g heads of `head_dim`) attending over the
/// keys of `spans` in order, rows `stride` apart:
/// `out_j = Σ_p softmax_p(q_j·k_p / sqrt(d)) v_p`. Each query's scores come from one
/// strided kernel call and its output from another, so the arithmetic of every query is
/// the same whatever the group or the batch around it, and batched and single-position
/// forwards agree bit for bit.
pub(crate) fn attend_group(
    qs: &[f32],
    head_dim: usize,
    stride: usize,
    spans: &[Span<'_>],
    scores: &mut Vec<f32>,
    out: &mut [f32],
) {
    let k = kernels();
    let g = qs.len() / head_dim;
    let n_keys: usize = spans.iter().map(|s| s.count).sum();
    let scale = 1.0 / (head_dim as f32).sqrt();
    scores.clear();
    scores.resize(g * n_keys, 0.0);
    for (q, row) in qs
        .chunks_exact(head_dim)
        .zip(scores.chunks_exact_mut(n_keys.max(1)))
    {
        let mut at = 0;
        for s in spans {
            (k.dots_f32)(q, s.keys, stride, &mut row[at..at + s.count]);
            at += s.count;
        }
        for v in row.iter_mut() {
            *v *= scale;
        }
        softmax(row);
    }
    out.fill(0.0);
    for (o, row) in out
        .chunks_exact_mut(head_dim)
        .zip(scores.chunks_exact(n_keys.max(1)))
    {
        let mut at = 0;
        for s in spans {
            (k.axpys_f32)(o, &row[at..at + s.count], s.values, stride);
            at += s.count;
        }
    }
}

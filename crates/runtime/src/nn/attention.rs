//! Scaled dot-product attention of a group of query heads over keys and values held
//! anywhere (a KV cache, a block's own keys): the step both models share. What differs —
//! which keys a query sees — stays in each model.

use dspark_quant::kernels;

use crate::nn::ops::softmax;

/// The query heads sharing one KV head (`qs`: g heads of `head_dim`) attending over
/// `n_keys` keys: `out_j = Σ_p softmax_p(q_j·k_p / sqrt(d)) v_p`, keys in position order.
/// Each key and value is read once for the whole group. Every query's arithmetic is the
/// same whatever the group or the batch around it, so batched and single-position forwards
/// agree bit for bit.
pub(crate) fn attend_group<'k>(
    qs: &[f32],
    head_dim: usize,
    n_keys: usize,
    key: impl Fn(usize) -> &'k [f32],
    value: impl Fn(usize) -> &'k [f32],
    scores: &mut Vec<f32>,
    out: &mut [f32],
) {
    let k = kernels();
    let g = qs.len() / head_dim;
    let scale = 1.0 / (head_dim as f32).sqrt();
    scores.clear();
    scores.resize(g * n_keys, 0.0);
    for p in 0..n_keys {
        let kp = key(p);
        for (j, q) in qs.chunks_exact(head_dim).enumerate() {
            scores[j * n_keys + p] = (k.dot_f32)(q, kp) * scale;
        }
    }
    for row in scores.chunks_exact_mut(n_keys.max(1)) {
        softmax(row);
    }
    out.fill(0.0);
    for p in 0..n_keys {
        let vp = value(p);
        for (j, o) in out.chunks_exact_mut(head_dim).enumerate() {
            (k.axpy_f32)(o, scores[j * n_keys + p], vp);
        }
    }
}

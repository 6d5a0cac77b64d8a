//! The decoder layer both contracts hold (`blk.{i}.*`, Qwen3-style).

use crate::check::{Checker, Role, TensorRef};
use crate::names::tensors::{LayerDims, LayerTensor};

/// One decoder layer's tensors, by their GGUF names.
#[derive(Clone, Debug, PartialEq)]
#[allow(missing_docs)]
pub struct LayerRefs<'f> {
    pub attn_norm: TensorRef<'f>,
    pub attn_q: TensorRef<'f>,
    pub attn_k: TensorRef<'f>,
    pub attn_v: TensorRef<'f>,
    pub attn_q_norm: TensorRef<'f>,
    pub attn_k_norm: TensorRef<'f>,
    pub attn_output: TensorRef<'f>,
    pub ffn_norm: TensorRef<'f>,
    pub ffn_gate: TensorRef<'f>,
    pub ffn_up: TensorRef<'f>,
    pub ffn_down: TensorRef<'f>,
}

/// Checks layer `i`'s eleven tensors against `d`.
pub(crate) fn check_layer<'f>(
    c: &mut Checker<'f, '_>,
    i: u64,
    d: &LayerDims,
) -> Option<LayerRefs<'f>> {
    let mut get = |t: LayerTensor| {
        let role = if t.is_norm() {
            Role::Vector
        } else {
            Role::Matrix
        };
        c.tensor(&t.name(i), role, &t.ne(d))
    };
    // Every tensor is looked up (so each gets its finding) before any is required.
    let [attn_norm, attn_q, attn_k, attn_v, attn_q_norm, attn_k_norm, attn_output, ffn_norm, ffn_gate, ffn_up, ffn_down] =
        LayerTensor::ALL.map(&mut get);
    Some(LayerRefs {
        attn_norm: attn_norm?,
        attn_q: attn_q?,
        attn_k: attn_k?,
        attn_v: attn_v?,
        attn_q_norm: attn_q_norm?,
        attn_k_norm: attn_k_norm?,
        attn_output: attn_output?,
        ffn_norm: ffn_norm?,
        ffn_gate: ffn_gate?,
        ffn_up: ffn_up?,
        ffn_down: ffn_down?,
    })
}

/// Checks the attention geometry shared by both kinds: KV heads dividing query heads and
/// an even head size. Returns the dims when they hold.
pub(crate) fn attention_dims(
    c: &mut Checker<'_, '_>,
    kv_key: &str,
    hd_key: &str,
    d: LayerDims,
) -> Option<LayerDims> {
    let mut ok = true;
    if d.kv_heads > d.heads || !d.heads.is_multiple_of(d.kv_heads) {
        c.key_finding(
            kv_key,
            format!(
                "is {}, which must divide the {} query heads",
                d.kv_heads, d.heads
            ),
        );
        ok = false;
    }
    if !d.head_dim.is_multiple_of(2) {
        c.key_finding(
            hd_key,
            format!(
                "is {}, expected an even head size (RoPE rotates pairs)",
                d.head_dim
            ),
        );
        ok = false;
    }
    ok.then_some(d)
}

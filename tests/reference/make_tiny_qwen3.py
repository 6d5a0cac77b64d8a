#!/usr/bin/env python3
"""Write a tiny random Qwen3 GGUF (llama.cpp ``qwen3`` layout) for testing the reference and the runtime.

Defaults: hidden 64, 2 layers, 4 heads, 2 kv heads, head_dim 16, ffn 128, vocab 512, theta 1e6,
eps 1e-6. Norm weights are 1 + N(0, 0.1) (always F32, as llama.cpp stores 1-D tensors); matrices
are N(0, std) with std 0.08, stored as --wtype (f32, f16, bf16 or q8_0, quantized with
gguf.quants.quantize). --tied omits output.weight (lm head tied to token_embd).
No tokenizer metadata is written (the reference does not need one).

  /tmp/pyenv/bin/python tests/reference/make_tiny_qwen3.py /tmp/tiny.gguf --wtype q8_0 --seed 1
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
from gguf import GGUFWriter, GGMLQuantizationType
from gguf.quants import quantize

WTYPES = {
    "f32": GGMLQuantizationType.F32,
    "f16": GGMLQuantizationType.F16,
    "bf16": GGMLQuantizationType.BF16,
    "q8_0": GGMLQuantizationType.Q8_0,
}


def make_weights(hidden=64, layers=2, heads=4, kv_heads=2, head_dim=16, ffn=128, vocab=512,
                 std=0.08, norm_std=0.1, seed=0, tied=False) -> dict[str, np.ndarray]:
    """float32 numpy arrays keyed by GGUF tensor name; matrices have numpy shape (rows, cols)."""
    rng = np.random.default_rng(seed)
    mat = lambda rows, cols: rng.normal(0.0, std, size=(rows, cols)).astype(np.float32)  # noqa: E731
    norm = lambda n: (1.0 + rng.normal(0.0, norm_std, size=n)).astype(np.float32)  # noqa: E731
    qd, kvd = heads * head_dim, kv_heads * head_dim
    w = {"token_embd.weight": mat(vocab, hidden)}
    for i in range(layers):
        b = f"blk.{i}."
        w[b + "attn_norm.weight"] = norm(hidden)
        w[b + "attn_q.weight"] = mat(qd, hidden)
        w[b + "attn_k.weight"] = mat(kvd, hidden)
        w[b + "attn_v.weight"] = mat(kvd, hidden)
        w[b + "attn_output.weight"] = mat(hidden, qd)
        w[b + "attn_q_norm.weight"] = norm(head_dim)
        w[b + "attn_k_norm.weight"] = norm(head_dim)
        w[b + "ffn_norm.weight"] = norm(hidden)
        w[b + "ffn_gate.weight"] = mat(ffn, hidden)
        w[b + "ffn_up.weight"] = mat(ffn, hidden)
        w[b + "ffn_down.weight"] = mat(hidden, ffn)
    w["output_norm.weight"] = norm(hidden)
    if not tied:
        w["output.weight"] = mat(vocab, hidden)
    return w


def write_gguf(path: str, weights: dict[str, np.ndarray], *, hidden, layers, heads, kv_heads, head_dim,
               ffn, theta=1e6, eps=1e-6, wtype="f32", context_length=4096) -> None:
    qtype = WTYPES[wtype]
    wr = GGUFWriter(path, "qwen3")
    wr.add_string("general.name", "dspark-tiny-qwen3-random")
    wr.add_uint32("qwen3.context_length", context_length)
    wr.add_uint32("qwen3.embedding_length", hidden)
    wr.add_uint32("qwen3.block_count", layers)
    wr.add_uint32("qwen3.feed_forward_length", ffn)
    wr.add_uint32("qwen3.attention.head_count", heads)
    wr.add_uint32("qwen3.attention.head_count_kv", kv_heads)
    wr.add_uint32("qwen3.attention.key_length", head_dim)
    wr.add_uint32("qwen3.attention.value_length", head_dim)
    wr.add_float32("qwen3.rope.freq_base", theta)
    wr.add_float32("qwen3.attention.layer_norm_rms_epsilon", eps)
    for name, a in weights.items():
        if a.ndim == 1 or qtype == GGMLQuantizationType.F32:
            wr.add_tensor(name, a.astype(np.float32))
        elif qtype == GGMLQuantizationType.F16:
            wr.add_tensor(name, a.astype(np.float16))
        else:
            wr.add_tensor(name, quantize(a, qtype), raw_dtype=qtype)
    wr.write_header_to_file()
    wr.write_kv_data_to_file()
    wr.write_tensors_to_file()
    wr.close()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--wtype", choices=sorted(WTYPES), default="f32")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tied", action="store_true")
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--head-dim", type=int, default=16)
    ap.add_argument("--ffn", type=int, default=128)
    ap.add_argument("--vocab", type=int, default=512)
    ap.add_argument("--std", type=float, default=0.08)
    ap.add_argument("--theta", type=float, default=1e6)
    ap.add_argument("--eps", type=float, default=1e-6)
    a = ap.parse_args(argv)
    dims = dict(hidden=a.hidden, layers=a.layers, heads=a.heads, kv_heads=a.kv_heads,
                head_dim=a.head_dim, ffn=a.ffn)
    w = make_weights(**dims, vocab=a.vocab, std=a.std, seed=a.seed, tied=a.tied)
    write_gguf(a.out, w, **dims, theta=a.theta, eps=a.eps, wtype=a.wtype)
    return 0


if __name__ == "__main__":
    sys.exit(main())

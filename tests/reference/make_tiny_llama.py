#!/usr/bin/env python3
"""Write a tiny random GGUF in llama.cpp's ``llama`` layout, for the reference's self-test and
the runtime-vs-reference tests (files written apart from dspark's own synthetic writer).

Defaults: hidden 64, 2 layers, 4 heads / 2 kv heads of 16, ffn 128, vocab 512, base 10000,
eps 1e-5, context 4096. Norms are 1 + N(0, 0.1), biases N(0, 0.05), frequency factors
1 + 3 U(0, 1), all F32; matrices N(0, std) stored as --wtype (f32, f16, bf16, q8_0, q4_0,
q4_1, q5_0, q5_1, quantized with gguf.quants.quantize). Options: --tied (no output.weight), --biases
(every bias the llama graph adds), --fused-qkv (attn_qkv instead of attn_q/k/v),
--freq-factors (rope_freqs.weight), --scaling none|linear|yarn with --factor, --orig-ctx,
--attn-factor. The vocabulary is llama.cpp's token-id-only kind (``tokenizer.ggml.model =
none``, ``llama.vocab_size``), so llama.cpp loads the file too.

  PY tests/reference/make_tiny_llama.py /tmp/tiny.gguf --wtype q8_0 --seed 1 --biases
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
from gguf import GGUFWriter, GGMLQuantizationType as T
from gguf.quants import quantize

WTYPES = {"f32": T.F32, "f16": T.F16, "bf16": T.BF16, "q8_0": T.Q8_0, "q4_0": T.Q4_0, "q4_1": T.Q4_1, "q5_0": T.Q5_0,
          "q5_1": T.Q5_1}


def make_weights(hidden=64, layers=2, heads=4, kv_heads=2, head_dim=16, ffn=128, vocab=512, std=0.3,
                 seed=0, tied=False, biases=False, fused_qkv=False, freq_factors=False) -> dict[str, np.ndarray]:
    """float32 arrays keyed by GGUF tensor name; matrices have numpy shape (rows, cols)."""
    rng = np.random.default_rng(seed)
    mat = lambda rows, cols: rng.normal(0.0, std, size=(rows, cols)).astype(np.float32)  # noqa: E731
    norm = lambda n: (1.0 + rng.normal(0.0, 0.1, size=n)).astype(np.float32)  # noqa: E731
    vec = lambda n: rng.normal(0.0, 0.05, size=n).astype(np.float32)  # noqa: E731
    qd, kvd = heads * head_dim, kv_heads * head_dim
    w = {"token_embd.weight": mat(vocab, hidden)}
    if freq_factors:
        w["rope_freqs.weight"] = (1.0 + 3.0 * rng.uniform(size=head_dim // 2)).astype(np.float32)
    for i in range(layers):
        b = f"blk.{i}."
        w[b + "attn_norm.weight"] = norm(hidden)
        if fused_qkv:
            w[b + "attn_qkv.weight"] = mat(qd + 2 * kvd, hidden)
            if biases:
                w[b + "attn_qkv.bias"] = vec(qd + 2 * kvd)
        else:
            w[b + "attn_q.weight"] = mat(qd, hidden)
            w[b + "attn_k.weight"] = mat(kvd, hidden)
            w[b + "attn_v.weight"] = mat(kvd, hidden)
            if biases:
                w[b + "attn_q.bias"] = vec(qd)
                w[b + "attn_k.bias"] = vec(kvd)
                w[b + "attn_v.bias"] = vec(kvd)
        w[b + "attn_output.weight"] = mat(hidden, qd)
        w[b + "ffn_norm.weight"] = norm(hidden)
        w[b + "ffn_gate.weight"] = mat(ffn, hidden)
        w[b + "ffn_up.weight"] = mat(ffn, hidden)
        w[b + "ffn_down.weight"] = mat(hidden, ffn)
        if biases:
            w[b + "attn_output.bias"] = vec(hidden)
            w[b + "ffn_gate.bias"] = vec(ffn)
            w[b + "ffn_up.bias"] = vec(ffn)
            w[b + "ffn_down.bias"] = vec(hidden)
    w["output_norm.weight"] = norm(hidden)
    if not tied:
        w["output.weight"] = mat(vocab, hidden)
    return w


def write_gguf(path: str, weights: dict[str, np.ndarray], *, hidden, layers, heads, kv_heads, head_dim, ffn,
               vocab, wtype="f32", base=10000.0, eps=1e-5, context=4096, scaling=None, factor=None,
               orig_ctx=None, attn_factor=None) -> None:
    qtype = WTYPES[wtype]
    wr = GGUFWriter(path, "llama")
    wr.add_string("general.name", "dspark tiny llama (make_tiny_llama.py)")
    wr.add_uint32("llama.context_length", context)
    wr.add_uint32("llama.embedding_length", hidden)
    wr.add_uint32("llama.block_count", layers)
    wr.add_uint32("llama.feed_forward_length", ffn)
    wr.add_uint32("llama.attention.head_count", heads)
    wr.add_uint32("llama.attention.head_count_kv", kv_heads)
    wr.add_uint32("llama.attention.key_length", head_dim)
    wr.add_uint32("llama.attention.value_length", head_dim)
    wr.add_uint32("llama.rope.dimension_count", head_dim)
    wr.add_float32("llama.rope.freq_base", base)
    wr.add_float32("llama.attention.layer_norm_rms_epsilon", eps)
    wr.add_uint32("llama.vocab_size", vocab)
    if scaling is not None:
        wr.add_string("llama.rope.scaling.type", scaling)
    if factor is not None:
        wr.add_float32("llama.rope.scaling.factor", factor)
    if orig_ctx is not None:
        wr.add_uint32("llama.rope.scaling.original_context_length", orig_ctx)
    if attn_factor is not None:
        wr.add_float32("llama.rope.scaling.attn_factor", attn_factor)
    wr.add_string("tokenizer.ggml.model", "none")
    for name, a in weights.items():
        if a.ndim == 1 or qtype == T.F32:
            wr.add_tensor(name, a.astype(np.float32))
        elif qtype == T.F16:
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
    ap.add_argument("--biases", action="store_true")
    ap.add_argument("--fused-qkv", action="store_true")
    ap.add_argument("--freq-factors", action="store_true")
    ap.add_argument("--scaling", choices=["none", "linear", "yarn"])
    ap.add_argument("--factor", type=float)
    ap.add_argument("--orig-ctx", type=int)
    ap.add_argument("--attn-factor", type=float)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--head-dim", type=int, default=16)
    ap.add_argument("--ffn", type=int, default=128)
    ap.add_argument("--vocab", type=int, default=512)
    ap.add_argument("--context", type=int, default=4096)
    a = ap.parse_args(argv)
    dims = dict(hidden=a.hidden, layers=a.layers, heads=a.heads, kv_heads=a.kv_heads, head_dim=a.head_dim, ffn=a.ffn,
                vocab=a.vocab)
    w = make_weights(**dims, seed=a.seed, tied=a.tied, biases=a.biases, fused_qkv=a.fused_qkv,
                     freq_factors=a.freq_factors)
    write_gguf(a.out, w, **dims, wtype=a.wtype, context=a.context, scaling=a.scaling, factor=a.factor,
               orig_ctx=a.orig_ctx, attn_factor=a.attn_factor)
    return 0


if __name__ == "__main__":
    sys.exit(main())

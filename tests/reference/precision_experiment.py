#!/usr/bin/env python3
"""How far does a float32 Qwen3 forward drift from the float64 reference? (basis of the README tolerance)

Builds random Qwen3 GGUFs in a /tmp directory, runs qwen3_ref.forward_model in float64 (the
reference) and in several float32 variants of the same math, and prints per variant:
  logits  max|d|, max|ref|, scale-relative max|d|/max|ref| (worst row), row-relative ||d||/||ref||,
          argmax agreement and the smallest top-1/top-2 margin of the reference;
  hidden  captured states of every layer: max|d| and max|d| / max|ref| per (row, layer) slice.
Variants (all float32 arithmetic, weights dequantized exactly):
  f32         numpy/BLAS sgemm products, RoPE angles computed in f64 then cast
  f32-seq     every weight product accumulated strictly sequentially in f32 (naive dot loop: the
              worst summation order a scalar Rust loop would have)
  f32-ang32   as f32 but RoPE angles computed in f32 (HF-style p * inv_freq in f32)
  f32-kv16    as f32 with K (post norm+RoPE) and V rounded to f16 (an f16 KV cache)
  f32-q8act   (Q8_0 models only) activations rounded to Q8_0 blocks before each weight product, as
              ggml's CPU Q8_0 x Q8_0 dot product does
Usage: /tmp/pyenv/bin/python tests/reference/precision_experiment.py [--dir DIR] [--quick]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np
from gguf import GGMLQuantizationType
from gguf.quants import dequantize, quantize

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_tiny_qwen3 as mk  # noqa: E402
import qwen3_ref as ref  # noqa: E402

Q8 = GGMLQuantizationType.Q8_0


def mm_seq(a: np.ndarray, w: np.ndarray) -> np.ndarray:
    """a @ w.T with f32 sequential accumulation over the inner dimension."""
    a = a.astype(np.float32)
    w = w.astype(np.float32)
    acc = np.zeros((a.shape[0], w.shape[0]), dtype=np.float32)
    for k in range(a.shape[1]):
        acc += a[:, k:k + 1] * w[:, k][None, :]
    return acc


def mm_q8act(a: np.ndarray, w: np.ndarray) -> np.ndarray:
    aq = dequantize(quantize(a.astype(np.float32), Q8), Q8).reshape(a.shape)
    return aq.astype(np.float32) @ w.T


def kv16(t: np.ndarray) -> np.ndarray:
    return t.astype(np.float16).astype(t.dtype)


def stats(ref_l, ref_c, l, c, D, n_layers):
    ref_l = np.asarray(ref_l, np.float64)
    d = np.abs(np.asarray(l, np.float64) - ref_l)
    row_scale = np.abs(ref_l).max(axis=1)
    srt = np.sort(ref_l, axis=1)
    out = {
        "logit_maxabs": d.max(),
        "logit_refmax": np.abs(ref_l).max(),
        "logit_scalerel": (d.max(axis=1) / row_scale).max(),
        "logit_l2rel": (np.linalg.norm(d, axis=1) / np.linalg.norm(ref_l, axis=1)).max(),
        "argmax_agree": f"{int((np.argmax(l, 1) == np.argmax(ref_l, 1)).sum())}/{len(ref_l)}",
        "ref_min_margin": (srt[:, -1] - srt[:, -2]).min(),
    }
    dc = np.abs(np.asarray(c, np.float64) - ref_c).reshape(len(ref_c), n_layers, D)
    rc = np.abs(ref_c).reshape(len(ref_c), n_layers, D)
    out["hid_maxabs"] = dc.max()
    out["hid_refmax"] = rc.max()
    out["hid_scalerel"] = (dc.max(axis=2) / rc.max(axis=2)).max()
    return out


def run_case(name, path, tokens, positions=None, q8=False, seq=True):
    model = ref.Qwen3Gguf(path)
    hp = model.hp
    cap = list(range(hp.n_layers))
    t0 = time.time()
    rl, rc = ref.forward_model(model, tokens, cap, positions=positions)
    variants = {
        "f32": dict(dtype=np.float32),
        "f32-ang32": dict(dtype=np.float32, angle_dtype=np.float32),
        "f32-kv16": dict(dtype=np.float32, kv_round=kv16),
    }
    if seq:
        variants["f32-seq"] = dict(dtype=np.float32, matmul=mm_seq)
    if q8:
        variants["f32-q8act"] = dict(dtype=np.float32, matmul=mm_q8act)
    print(f"\n## {name}: hidden {hp.hidden}, layers {hp.n_layers}, heads {hp.n_heads}/{hp.n_kv_heads}x{hp.head_dim}, "
          f"ffn {hp.ffn}, vocab {hp.vocab}, n={len(tokens)}, positions "
          f"{'0..n-1' if positions is None else f'{positions[0]}..{positions[-1]}'}")
    print(f"{'variant':10} {'logit max|d|':>12} {'max|ref|':>9} {'scale-rel':>10} {'l2-rel':>9} {'argmax':>7} "
          f"{'ref margin':>10} | {'hid max|d|':>10} {'max|ref|':>9} {'scale-rel':>10}")
    rows = {}
    for vname, kw in variants.items():
        l, c = ref.forward_model(model, tokens, cap, positions=positions, **kw)
        s = stats(rl, rc, l, c, hp.hidden, hp.n_layers)
        rows[vname] = s
        print(f"{vname:10} {s['logit_maxabs']:12.3e} {s['logit_refmax']:9.3f} {s['logit_scalerel']:10.3e} "
              f"{s['logit_l2rel']:9.2e} {s['argmax_agree']:>7} {s['ref_min_margin']:10.2e} | "
              f"{s['hid_maxabs']:10.3e} {s['hid_refmax']:9.3f} {s['hid_scalerel']:10.3e}")
    print(f"({time.time() - t0:.1f}s)")
    return rows


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", help="where to write the GGUFs (default: a fresh /tmp dir)")
    ap.add_argument("--quick", action="store_true", help="tiny models only")
    a = ap.parse_args()
    tmp = a.dir or tempfile.mkdtemp(prefix="qwen3prec_", dir="/tmp")
    os.makedirs(tmp, exist_ok=True)
    rng = np.random.default_rng(7)

    tiny = dict(hidden=64, layers=2, heads=4, kv_heads=2, head_dim=16, ffn=128)
    for wtype in ("f32", "q8_0"):
        p = os.path.join(tmp, f"tiny_{wtype}.gguf")
        mk.write_gguf(p, mk.make_weights(**tiny, vocab=512, seed=1), **tiny, wtype=wtype)
    toks = [int(t) for t in rng.integers(0, 512, size=32)]
    for wtype in ("f32", "q8_0"):
        run_case(f"tiny {wtype}", os.path.join(tmp, f"tiny_{wtype}.gguf"), toks, q8=wtype == "q8_0")
    run_case("tiny f32, far positions", os.path.join(tmp, "tiny_f32.gguf"), toks,
             positions=np.arange(len(toks)) + 30000)

    if not a.quick:
        # Qwen3-0.6B-like widths (hidden 1024, 16/8 heads x 128, ffn 3072), fewer layers, smaller vocab
        med = dict(hidden=1024, layers=8, heads=16, kv_heads=8, head_dim=128, ffn=3072)
        p = os.path.join(tmp, "medium_q8_0.gguf")
        if not os.path.exists(p):
            mk.write_gguf(p, mk.make_weights(**med, vocab=8192, std=0.03, seed=5), **med, wtype="q8_0")
        toks = [int(t) for t in rng.integers(0, 8192, size=64)]
        run_case("medium q8_0", p, toks, q8=True)
        run_case("medium q8_0, far positions", p, toks, positions=np.arange(len(toks)) + 30000, seq=False)
        # depth: 28 layers (as Qwen3-0.6B/1.7B), narrower
        deep = dict(hidden=256, layers=28, heads=4, kv_heads=2, head_dim=64, ffn=768)
        p = os.path.join(tmp, "deep_f32.gguf")
        if not os.path.exists(p):
            mk.write_gguf(p, mk.make_weights(**deep, vocab=4096, std=0.05, seed=9), **deep, wtype="f32")
        run_case("deep f32", p, [int(t) for t in rng.integers(0, 4096, size=128)])
    print(f"\nGGUFs in {tmp}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""How far does a float32 Kimi-K3 forward drift from the float64 reference? (basis of the README tolerance)

Builds random kimi-k3 GGUFs (make_tiny_kimi_k3.py) in a /tmp directory, runs kimi_k3_ref.forward_model in
float64 (the reference) and in float32 variants of the same math, and prints per variant:
  logits  max|d|, max|ref|, worst-row scale-relative max|d| / max(1, max|ref row|), argmax agreement, the
          reference's smallest top-1/top-2 margin;
  taps    every layer's tap, worst (row, layer) max|d| / max(1, max|ref slice|);
  routing how many (token, MoE layer) top-k expert sets differ from the reference's, and the reference's
          smallest routing margin (k-th minus (k+1)-th selection score).
Variants (all float32 arithmetic, weights dequantized exactly):
  f32        numpy/BLAS products, one prefill call
  f32-dec    the same, but fed one token at a time with carried State (decode; KDA state kept in f32)
  f32-seq    every weight product accumulated strictly sequentially in f32 (a naive scalar loop's order)
  f32-kv16   MLA cache rows [c ; k_r] rounded to f16 (llama.cpp's default F16 K cache)
  f32-q8act  (Q8_0 files) activations rounded to Q8_0 before each Q8_0 product, but compared with the plain
             float64 reference (what you would see comparing a q8-activation runtime without --q8-activations)
  f32+q8ref  (Q8_0 files) f32 with Q8_0 activation rounding vs the float64 reference with --q8-activations

  PY tests/reference/kimi_k3_precision.py [--dir DIR] [--quick]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import kimi_k3_ref as ref  # noqa: E402
import make_tiny_kimi_k3 as mk  # noqa: E402


def mm_seq(a: np.ndarray, w: np.ndarray) -> np.ndarray:
    a = a.astype(np.float32)
    w = w.astype(np.float32)
    acc = np.zeros((a.shape[0], w.shape[0]), dtype=np.float32)
    for k in range(a.shape[1]):
        acc += a[:, k:k + 1] * w[:, k][None, :]
    return acc


def f16_rows(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float16).astype(x.dtype)


def run(model, tokens, cap, q8=False, decode=False, **kw):
    tr: dict = {}
    if not decode:
        l, c = ref.forward_model(model, tokens, cap, q8_activations=q8, trace=tr, **kw)
        return l, c, tr.get("route", {})
    st = ref.State(model, kw.get("dtype", np.float64))
    ls, cs, routes = [], [], {}
    for t in tokens:
        tr = {}
        l, c = ref.forward_model(model, [t], cap, state=st, q8_activations=q8, trace=tr, **kw)
        ls.append(l)
        cs.append(c)
        for i, (top, marg) in tr["route"].items():
            routes.setdefault(i, ([], []))
            routes[i][0].append(top)
            routes[i][1].append(marg)
    return (np.concatenate(ls), np.concatenate(cs),
            {i: (np.concatenate(a), np.concatenate(b)) for i, (a, b) in routes.items()})


def stats(rl, rc, rroute, l, c, route, E, L):
    d = np.abs(l.astype(np.float64) - rl)
    srt = np.sort(rl, axis=1)
    dc = np.abs(c.astype(np.float64) - rc).reshape(len(rc), L, E)
    rcs = np.abs(rc).reshape(len(rc), L, E)
    flips = sum(int(np.any(np.sort(route[i][0], 1) != np.sort(rroute[i][0], 1), axis=1).sum()) for i in rroute)
    min_marg = min((float(rroute[i][1].min()) for i in rroute), default=float("inf"))
    return {
        "logit_maxabs": d.max(), "logit_refmax": np.abs(rl).max(),
        "logit_rel": (d.max(axis=1) / np.maximum(1, np.abs(rl).max(axis=1))).max(),
        "argmax": f"{int((np.argmax(l, 1) == np.argmax(rl, 1)).sum())}/{len(rl)}",
        "margin": (srt[:, -1] - srt[:, -2]).min(),
        "tap_maxabs": dc.max(), "tap_rel": (dc.max(axis=2) / np.maximum(1, rcs.max(axis=2))).max(),
        "flips": f"{flips}/{len(rl) * len(rroute)}", "route_margin": min_marg,
    }


def run_case(name, path, tokens, q8=False, seq=True):
    model = ref.KimiK3Gguf(path)
    hp = model.hp
    cap = list(range(hp.n_layers))
    t0 = time.time()
    rl, rc, rroute = run(model, tokens, cap)
    variants = {"f32": dict(dtype=np.float32), "f32-dec": dict(dtype=np.float32, decode=True),
                "f32-kv16": dict(dtype=np.float32, cache_round=f16_rows)}
    if seq:
        variants["f32-seq"] = dict(dtype=np.float32, matmul=mm_seq)
    if q8:
        variants["f32-q8act"] = dict(dtype=np.float32, q8=True)
    print(f"\n## {name}: E {hp.hidden}, {hp.n_layers} layers (MLA {[i for i, m in enumerate(hp.is_mla) if m]}), "
          f"H {hp.n_head} x D {hp.kda_head_dim}, K {hp.conv_kernel}, r_kv {hp.kv_lora_rank}, experts {hp.n_expert} "
          f"top-{hp.n_expert_used}, latent {hp.latent}, A {hp.block_size}, vocab {hp.vocab}, n={len(tokens)}")
    print(f"{'variant':10} {'logit max|d|':>12} {'max|ref|':>8} {'scale-rel':>9} {'argmax':>7} {'margin':>8} | "
          f"{'tap max|d|':>10} {'tap rel':>9} | {'flips':>7} {'route marg':>10}")
    rows = {}
    todo = list(variants.items())
    if q8:
        todo.append(("f32+q8ref", dict(dtype=np.float32, q8=True, _ref_q8=True)))
    rq = None
    for vname, kw in todo:
        kw = dict(kw)
        base = (rl, rc, rroute)
        if kw.pop("_ref_q8", False):
            rq = rq or run(model, tokens, cap, q8=True)
            base = rq
        l, c, route = run(model, tokens, cap, **kw)
        assert l.dtype == np.float32 and c.dtype == np.float32
        s = stats(*base, l, c, route, hp.hidden, hp.n_layers)
        rows[vname] = s
        print(f"{vname:10} {s['logit_maxabs']:12.3e} {s['logit_refmax']:8.3f} {s['logit_rel']:9.2e} {s['argmax']:>7} "
              f"{s['margin']:8.1e} | {s['tap_maxabs']:10.3e} {s['tap_rel']:9.2e} | {s['flips']:>7} {s['route_margin']:10.1e}")
    print(f"({time.time() - t0:.1f}s)")
    return rows


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", help="where to write the GGUFs (default: a fresh /tmp dir)")
    ap.add_argument("--quick", action="store_true", help="tiny models only")
    a = ap.parse_args()
    tmp = a.dir or tempfile.mkdtemp(prefix="kimik3prec_", dir="/tmp")
    os.makedirs(tmp, exist_ok=True)
    rng = np.random.default_rng(7)

    tiny = mk.Config()
    toks = [int(t) for t in rng.integers(0, tiny.vocab - 3, size=32)]
    for wtype in ("f32", "q8_0"):
        p = os.path.join(tmp, f"tiny_{wtype}.gguf")
        mk.build(p, tiny, seed=1, wtype=wtype)
        run_case(f"tiny {wtype}", p, toks, q8=wtype == "q8_0")
    p = os.path.join(tmp, "tiny_softplus_A3_qlora.gguf")
    mk.build(p, tiny.replace(gate_lower_bound=None, block_size=3, q_lora_rank=32, mla_layers=(1, 3)), seed=2)
    run_case("tiny f32, softplus gate, A=3, q LoRA, MLA 1,3", p, toks)

    if not a.quick:
        med = mk.Config(layers=8, hidden=512, heads=4, kda_head_dim=64, mla_layers=(3, 7), q_lora_rank=128,
                        kv_lora_rank=128, rope_dim=32, qk_nope=64, v_head_dim=64, dense_layers=1, ffn=1024, experts=16,
                        experts_used=4, shared_experts=1, expert_ffn=128, latent=256, block_size=4, vocab=4096)
        p = os.path.join(tmp, "medium_q8_0.gguf")
        mk.build(p, med, seed=5, wtype="q8_0")
        toks = [int(t) for t in rng.integers(0, med.vocab - 3, size=64)]
        run_case("medium q8_0", p, toks, q8=True, seq=False)
        deep = mk.Config(layers=16, hidden=256, heads=4, kda_head_dim=64, mla_layers=(3, 7, 11, 15), kv_lora_rank=64,
                         rope_dim=16, qk_nope=32, v_head_dim=32, dense_layers=1, ffn=512, experts=16, experts_used=4,
                         expert_groups=4, expert_groups_used=2, expert_ffn=64, latent=128, block_size=4,
                         weights_scale=2.5, vocab=2048)
        p = os.path.join(tmp, "deep_f32.gguf")
        mk.build(p, deep, seed=9, wtype="f32")
        toks = [int(t) for t in rng.integers(0, deep.vocab - 3, size=96)]
        run_case("deep f32 (groups 4/2, scale 2.5)", p, toks)
    print(f"\nGGUFs in {tmp}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Self-consistency tests of qwen3_ref.py on tiny random Qwen3 GGUFs (F32, F16, BF16, Q8_0, tied head).

Checks:
  * GGUF read-back: every tensor equals the generator's array (F32 exactly; F16/BF16/Q8_0 equal
    to the numpy-side quantize->dequantize round trip, and within the format's error of the original).
  * the vectorized forward equals a deliberately naive per-token / per-head loop with a KV cache
    (explicit 2x2 rotations, explicit kv-head index h // group, scalar softmax);
  * causality: logits of every prefix equal the first rows of the full sequence's logits;
  * RoPE: position 0 is the identity, rotations preserve norms, q.k depends only on the position
    difference, and shifting all positions by a constant leaves logits unchanged;
    frequencies match the base values of docs/RUNTIME-MATH.md 2.3 (theta=1e4, r=64: omega_10, omega_20);
  * captured hidden states: --capture order, layer L-1 + final norm + lm head reproduces logits,
    capture -1 = embedding rows; tied head uses token_embd;
  * the CLI's JSON equals forward().

  /tmp/pyenv/bin/python tests/reference/selftest.py [--keep DIR]
Exit status 0 when all checks pass.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
from gguf.quants import dequantize, quantize

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_tiny_qwen3 as mk  # noqa: E402
import qwen3_ref as ref  # noqa: E402

DIMS = dict(hidden=64, layers=2, heads=4, kv_heads=2, head_dim=16, ffn=128)
VOCAB = 512
FAILS: list[str] = []


def check(cond: bool, what: str) -> None:
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        FAILS.append(what)


def maxabs(a, b) -> float:
    return float(np.max(np.abs(np.asarray(a) - np.asarray(b)))) if np.size(a) else 0.0


# ---- naive independent forward (loops; uses the raw float32 arrays from the generator path) -----

def naive_forward(W: dict[str, np.ndarray], hp: ref.Hparams, tokens, capture):
    H, Hkv, d = hp.n_heads, hp.n_kv_heads, hp.head_dim
    group = H // Hkv
    half = hp.rope_dim // 2
    eps = hp.eps

    def norm(x, w):
        s = 0.0
        for v in x:
            s += v * v
        return w * x / np.sqrt(s / len(x) + eps)

    def rot(vec, p):
        out = vec.copy()
        for j in range(half):
            ang = p * hp.rope_theta ** (-2.0 * j / hp.rope_dim)
            c, s = np.cos(ang), np.sin(ang)
            a, b = vec[j], vec[j + half]
            out[j], out[j + half] = c * a - s * b, s * a + c * b
        return out

    f = {k: v.astype(np.float64) for k, v in W.items()}
    out_w = f.get("output.weight", f["token_embd.weight"])
    kcache = [[] for _ in range(hp.n_layers)]
    vcache = [[] for _ in range(hp.n_layers)]
    logits, caps = [], []
    for p, t in enumerate(tokens):
        x = f["token_embd.weight"][t].copy()
        row_caps = {-1: x.copy()}
        for i in range(hp.n_layers):
            b = f"blk.{i}."
            h = norm(x, f[b + "attn_norm.weight"])
            q = f[b + "attn_q.weight"] @ h
            k = f[b + "attn_k.weight"] @ h
            v = f[b + "attn_v.weight"] @ h
            kh = [rot(norm(k[j * d:(j + 1) * d], f[b + "attn_k_norm.weight"]), p) for j in range(Hkv)]
            kcache[i].append(kh)
            vcache[i].append([v[j * d:(j + 1) * d] for j in range(Hkv)])
            att = np.zeros(H * d)
            for hh in range(H):
                qh = rot(norm(q[hh * d:(hh + 1) * d], f[b + "attn_q_norm.weight"]), p)
                kv = hh // group
                sc = [float(np.dot(qh, kcache[i][s][kv])) / np.sqrt(d) for s in range(p + 1)]
                m = max(sc)
                e = [np.exp(z - m) for z in sc]
                tot = sum(e)
                for s in range(p + 1):
                    att[hh * d:(hh + 1) * d] += (e[s] / tot) * vcache[i][s][kv]
            x = x + f[b + "attn_output.weight"] @ att
            h2 = norm(x, f[b + "ffn_norm.weight"])
            g = f[b + "ffn_gate.weight"] @ h2
            u = f[b + "ffn_up.weight"] @ h2
            x = x + f[b + "ffn_down.weight"] @ ((g / (1 + np.exp(-g))) * u)
            row_caps[i] = x.copy()
        logits.append(out_w @ norm(x, f["output_norm.weight"]))
        caps.append(np.concatenate([row_caps[c] for c in capture]) if capture else np.zeros(0))
    return np.array(logits), np.array(caps)


def roundtrip(a: np.ndarray, wtype: str) -> np.ndarray:
    if a.ndim == 1 or wtype == "f32":
        return a
    if wtype == "f16":
        return a.astype(np.float16).astype(np.float32)
    qt = mk.WTYPES[wtype]
    return dequantize(quantize(a, qt), qt).reshape(a.shape)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--keep", help="directory for the generated GGUFs (default: a fresh /tmp dir)")
    args = ap.parse_args()
    tmp = args.keep or tempfile.mkdtemp(prefix="qwen3ref_", dir="/tmp")
    os.makedirs(tmp, exist_ok=True)
    rng = np.random.default_rng(123)
    tokens = [int(t) for t in rng.integers(0, VOCAB, size=12)]

    # ---- RoPE unit checks ------------------------------------------------------------------
    x = rng.normal(size=(5, 3, 16))
    phi0 = ref.rope_angles(np.zeros(5, dtype=np.int64), 16, 1e6)
    check(np.array_equal(ref.rope_neox(x, phi0, 16), x), "rope: position 0 is exactly the identity")
    pos = np.array([0, 1, 7, 100, 4095])
    xr = ref.rope_neox(x, ref.rope_angles(pos, 16, 1e6), 16)
    check(maxabs(np.linalg.norm(xr, axis=-1), np.linalg.norm(x, axis=-1)) < 1e-12, "rope: preserves norms")
    qv, kv = rng.normal(size=16), rng.normal(size=16)

    def dot_at(pq, pk):
        a = ref.rope_neox(qv[None, None], ref.rope_angles(np.array([pq]), 16, 1e4), 16)[0, 0]
        b = ref.rope_neox(kv[None, None], ref.rope_angles(np.array([pk]), 16, 1e4), 16)[0, 0]
        return float(a @ b)
    check(abs(dot_at(9, 4) - dot_at(1009, 1004)) < 1e-9 and abs(dot_at(5, 5) - float(qv @ kv)) < 1e-12,
          "rope: q.k depends only on the position difference")
    om = ref.rope_angles(np.array([1]), 64, 1e4)[0]
    check(abs(om[0] - 1) < 1e-15 and abs(om[10] - 0.0562341325) < 1e-10 and abs(om[20] - 0.00316227766) < 1e-11,
          "rope: omega_j = theta^(-2j/r) matches RUNTIME-MATH 2.3 base values")
    xp = np.zeros((1, 1, 16)); xp[0, 0, 0] = 1.0  # e_0 at angle phi_0 = p*1 -> (cos p) e_0 + (sin p) e_8
    r = ref.rope_neox(xp, ref.rope_angles(np.array([3]), 16, 1e6), 16)[0, 0]
    check(abs(r[0] - np.cos(3)) < 1e-15 and abs(r[8] - np.sin(3)) < 1e-15 and abs(r).sum() - abs(r[0]) - abs(r[8]) < 1e-15,
          "rope: NeoX pairing (element 0 rotates into element d/2, sign convention)")

    # ---- per-model checks ------------------------------------------------------------------
    # (wtype, tied, seed, dims): the last case has heads*head_dim (128) != hidden (64) and 1 kv head,
    # as in Qwen3-0.6B (16 x 128 = 2048 != 1024), to pin the orientation of attn_q / attn_output.
    wide = dict(DIMS, head_dim=32, kv_heads=1)
    cases = [("f32", False, 1, DIMS), ("f16", False, 1, DIMS), ("bf16", False, 1, DIMS), ("q8_0", False, 1, DIMS),
             ("f32", True, 2, DIMS), ("q8_0", True, 3, DIMS), ("q8_0", False, 4, wide)]
    for wtype, tied, seed, dims in cases:
        wd = dims is wide
        tag = f"[{wtype}{' tied' if tied else ''}{' H*d!=D, Hkv=1' if wd else ''}]"
        stem = f"tiny_{wtype}{'_tied' if tied else ''}{'_wide' if wd else ''}"
        path = os.path.join(tmp, stem + ".gguf")
        W = mk.make_weights(**dims, vocab=VOCAB, seed=seed, tied=tied)
        mk.write_gguf(path, W, **dims, wtype=wtype)
        model = ref.Qwen3Gguf(path)
        hp = model.hp
        check((hp.hidden, hp.n_layers, hp.n_heads, hp.n_kv_heads, hp.head_dim, hp.ffn, hp.vocab, hp.tied_output)
              == (64, 2, 4, dims["kv_heads"], dims["head_dim"], 128, VOCAB, tied) and hp.rope_theta == 1e6 and abs(hp.eps - 1e-6) < 1e-12,
              f"{tag} hyperparameters read back")
        # weights read back in the right orientation
        exact, close = True, True
        Wq = {}
        for name, a in W.items():
            got = model.tensor(name, np.float32)
            want = roundtrip(a, wtype)
            Wq[name] = want
            exact &= got.shape == a.shape and np.array_equal(got, want)
            tol = {"f32": 0, "f16": 1e-3, "bf16": 4e-3, "q8_0": 4e-3}[wtype] * max(1.0, float(np.abs(a).max()))
            close &= maxabs(got, a) <= tol
        check(exact, f"{tag} tensors read back == gguf-py quantize/dequantize round trip, shape (rows, cols)")
        check(close, f"{tag} tensors within format error of the original float32 weights")
        if wtype in ("f32", "q8_0"):
            emb_rows = model.rows("token_embd.weight", [3, 0, 511, 3], np.float32)
            check(np.array_equal(emb_rows, Wq["token_embd.weight"][[3, 0, 511, 3]]), f"{tag} row gather == full tensor rows")

        logits, cap = ref.forward_model(model, tokens, [1, 0, -1])
        nl, ncap = naive_forward(Wq, hp, tokens, [1, 0, -1])
        scale = float(np.abs(nl).max())
        check(maxabs(logits, nl) < 1e-11 * max(1, scale) and maxabs(cap, ncap) < 1e-11,
              f"{tag} vectorized == naive loop forward (max |dlogit| {maxabs(logits, nl):.2e}, |dcap| {maxabs(cap, ncap):.2e})")
        D = hp.hidden
        check(np.array_equal(cap[:, 2 * D:], Wq["token_embd.weight"][tokens].astype(np.float64)),
              f"{tag} capture -1 = embedding rows")
        # final layer capture + final norm + lm head = logits
        lc, c_last = ref.forward_model(model, tokens, [hp.n_layers - 1])
        head = model.tensor(model.output_name())
        if tied:
            check(np.array_equal(head, Wq["token_embd.weight"].astype(np.float64)), f"{tag} tied head = token_embd")
        re = ref.rms_norm(c_last, model.tensor("output_norm.weight"), hp.eps) @ head.T
        check(maxabs(re, logits) < 1e-12 * max(1, scale), f"{tag} last-layer capture -> final norm -> head == logits")
        # capture order
        _, c10 = ref.forward_model(model, tokens, [1, 0])
        _, c01 = ref.forward_model(model, tokens, [0, 1])
        check(np.array_equal(c10, np.concatenate([c01[:, D:], c01[:, :D]], axis=1)) and np.array_equal(c10, cap[:, :2 * D]),
              f"{tag} captured = layers concatenated in --capture order")
        # causality: every prefix
        worst = 0.0
        for m in range(1, len(tokens) + 1):
            lp, cp = ref.forward_model(model, tokens[:m], [0, 1])
            worst = max(worst, maxabs(lp, logits[:m]), maxabs(cp, c01[:m]))
        check(worst < 1e-12 * max(1, scale), f"{tag} causality: prefix logits/captures == first rows of full ({worst:.1e})")
        # later tokens do not influence earlier rows
        t2 = list(tokens); t2[-1] = (t2[-1] + 1) % VOCAB; t2[-3] = (t2[-3] + 7) % VOCAB
        l2, _ = ref.forward_model(model, t2, [])
        check(maxabs(l2[:-3], logits[:-3]) < 1e-12 * max(1, scale) and maxabs(l2[-1], logits[-1]) > 1e-6,
              f"{tag} causality: changing later tokens leaves earlier rows unchanged")
        # RoPE relative: shift all positions
        ls, _ = ref.forward_model(model, tokens, [], positions=np.arange(len(tokens)) + 1000)
        check(maxabs(ls, logits) < 1e-9 * max(1, scale), f"{tag} shifting all positions by 1000 leaves logits unchanged ({maxabs(ls, logits):.1e})")
        # argmax sanity: the model is not degenerate
        check(len(set(np.argmax(logits, -1).tolist())) > 1 and np.all(np.isfinite(logits)),
              f"{tag} logits finite, argmax not constant")

        # CLI round trip
        out = os.path.join(tmp, f"out_{stem}.json")
        subprocess.run([sys.executable, os.path.join(HERE, "qwen3_ref.py"), path,
                        "--tokens", ",".join(map(str, tokens)), "--capture", "1,0", "--out", out], check=True)
        doc = json.load(open(out))
        check(np.array_equal(np.array(doc["logits"]), logits) and np.array_equal(np.array(doc["captured"]), c10)
              and doc["argmax"] == np.argmax(logits, -1).tolist(), f"{tag} CLI JSON == forward() (bit-exact)")

    # Q8_0 vs F32 of the same seed: quantization moves logits, but only a little
    lf, _ = ref.forward(os.path.join(tmp, "tiny_f32.gguf"), tokens, [])
    lq, _ = ref.forward(os.path.join(tmp, "tiny_q8_0.gguf"), tokens, [])
    print(f"info Q8_0 vs F32 weights (same seed): max |dlogit| {maxabs(lf, lq):.3e}, max |logit| {np.abs(lf).max():.3f}")

    print(f"\n{'ALL PASS' if not FAILS else f'{len(FAILS)} FAILED'}  (GGUFs in {tmp})")
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())

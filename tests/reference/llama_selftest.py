#!/usr/bin/env python3
"""Self-consistency tests of llama_ref.py on tiny random llama GGUFs (make_tiny_llama.py).

Checks, for plain files and each option the llama graph reads (biases, fused QKV, Llama 3
frequency factors, linear and YaRN scaling, attn_factor, a tied head) and F32 / F16 / Q8_0:
  * GGUF read-back: hyper-parameters, and every tensor equal to the generator's array (F32
    exactly, others equal to gguf-py's quantize -> dequantize round trip), shape (rows, cols);
  * the vectorized forward equals a deliberately naive per-token / per-head loop with a KV
    cache (scalar angles per pair, explicit 2x2 rotations of adjacent pairs, explicit kv head
    h // group, scalar softmax, its own fused-QKV split);
  * a fused attn_qkv file gives exactly the logits of the separate-q/k/v file it concatenates;
  * RoPE: position 0 is the identity (magnitude 1), NORMAL pairing (element 0 rotates into 1),
    norms scale by the magnitude, q.k depends only on the position difference; linear factor s
    at position s*p is no scaling at p; frequency factors all c at c*p are none at p; YaRN with
    factor 1 is plain RoPE; type none ignores the factor; YaRN's correction dims and magnitude;
  * causality, capture order, last capture -> final norm -> head = logits, capture -1 = embedding,
    tied head = token_embd;
  * --ggml-activations: a no-op on F32 weights; the Q8_K, F16 and BF16 roundings on hand cases;
  * refusals (exit 2, the key or tensor named); the CLI's JSON equals forward().

  PY tests/reference/llama_selftest.py [--keep DIR]
Exit status 0 when all checks pass.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

import numpy as np
from gguf.quants import dequantize, quantize

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import llama_ref as ref  # noqa: E402
import make_tiny_llama as mk  # noqa: E402

DIMS = dict(hidden=64, layers=2, heads=4, kv_heads=2, head_dim=16, ffn=128, vocab=512)
FAILS: list[str] = []


def check(cond: bool, what: str) -> None:
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        FAILS.append(what)


def maxabs(a, b) -> float:
    return float(np.max(np.abs(np.asarray(a) - np.asarray(b)))) if np.size(a) else 0.0


# ---- naive forward: loops over tokens and heads, scalar RoPE --------------------------------

def naive_angle(hp: ref.Hparams, p: int, j: int, ff) -> tuple[float, float]:
    """(angle, magnitude) of pair j at position p, written out per scalar."""
    d = hp.head_dim
    extrap = p * hp.rope_base ** (-2.0 * j / d)
    if ff is not None:
        extrap /= float(ff[j])
    fs = 1.0 if hp.scaling == "none" else 1.0 / hp.factor
    angle, mag = fs * extrap, hp.attn_factor
    if hp.scaling == "yarn":
        def corr(beta):
            return d * math.log(hp.orig_context / (beta * 2 * math.pi)) / (2 * math.log(hp.rope_base))
        lo, hi = max(0.0, math.floor(corr(32.0))), min(d - 1.0, math.ceil(corr(1.0)))
        y = (j - lo) / max(0.001, hi - lo)
        r = 1.0 - min(1.0, max(0.0, y))
        angle = fs * extrap * (1.0 - r) + extrap * r
        if hp.factor > 1:
            mag *= 1.0 + 0.1 * math.log(hp.factor)
    return angle, mag


def naive_forward(W: dict[str, np.ndarray], hp: ref.Hparams, tokens, capture):
    H, Hkv, d = hp.n_heads, hp.n_kv_heads, hp.head_dim
    group = H // Hkv
    f = {k: v.astype(np.float64) for k, v in W.items()}
    ff = f.get("rope_freqs.weight")

    def norm(x, w):
        s = 0.0
        for v in x:
            s += v * v
        return w * x / math.sqrt(s / len(x) + hp.eps)

    def rot(vec, p):
        out = vec.copy()
        for j in range(d // 2):
            ang, mag = naive_angle(hp, p, j, ff)
            c, s = math.cos(ang) * mag, math.sin(ang) * mag
            a, b = vec[2 * j], vec[2 * j + 1]
            out[2 * j], out[2 * j + 1] = c * a - s * b, s * a + c * b
        return out

    def lin(x, name):
        y = f[name + ".weight"] @ x
        return y + f[name + ".bias"] if name + ".bias" in f else y

    kc = [[] for _ in range(hp.n_layers)]
    vc = [[] for _ in range(hp.n_layers)]
    logits, caps = [], []
    for p, t in enumerate(tokens):
        x = f["token_embd.weight"][t].copy()
        row = {-1: x.copy()}
        for i in range(hp.n_layers):
            b = f"blk.{i}."
            h = norm(x, f[b + "attn_norm.weight"])
            if b + "attn_qkv.weight" in f:
                qkv = lin(h, b + "attn_qkv")
                q, k, v = qkv[:H * d], qkv[H * d:(H + Hkv) * d], qkv[(H + Hkv) * d:]
            else:
                q, k, v = lin(h, b + "attn_q"), lin(h, b + "attn_k"), lin(h, b + "attn_v")
            kc[i].append([rot(k[j * d:(j + 1) * d], p) for j in range(Hkv)])
            vc[i].append([v[j * d:(j + 1) * d] for j in range(Hkv)])
            att = np.zeros(H * d)
            for hh in range(H):
                qh = rot(q[hh * d:(hh + 1) * d], p)
                kv = hh // group
                sc = [float(np.dot(qh, kc[i][s][kv])) / math.sqrt(d) for s in range(p + 1)]
                mx = max(sc)
                e = [math.exp(z - mx) for z in sc]
                tot = sum(e)
                for s in range(p + 1):
                    att[hh * d:(hh + 1) * d] += (e[s] / tot) * vc[i][s][kv]
            x = x + lin(att, b + "attn_output")
            h2 = norm(x, f[b + "ffn_norm.weight"])
            g, u = lin(h2, b + "ffn_gate"), lin(h2, b + "ffn_up")
            x = x + lin((g / (1 + np.exp(-g))) * u, b + "ffn_down")
            row[i] = x.copy()
        out_w = f.get("output.weight", f["token_embd.weight"])
        logits.append(out_w @ norm(x, f["output_norm.weight"]))
        caps.append(np.concatenate([row[c] for c in capture]) if capture else np.zeros(0))
    return np.array(logits), np.array(caps)


def roundtrip(a: np.ndarray, wtype: str) -> np.ndarray:
    if a.ndim == 1 or wtype == "f32":
        return a
    if wtype == "f16":
        return a.astype(np.float16).astype(np.float32)
    qt = mk.WTYPES[wtype]
    return dequantize(quantize(a, qt), qt).reshape(a.shape)


def write(tmp: str, stem: str, wtype="f32", seed=1, keys=None, **opts):
    keys = keys or {}
    path = os.path.join(tmp, stem + ".gguf")
    W = mk.make_weights(**DIMS, seed=seed, **opts)
    mk.write_gguf(path, W, **DIMS, wtype=wtype, **keys)
    return path, W


def hp_with(**kw) -> ref.Hparams:
    base = dict(hidden=64, n_layers=1, n_heads=1, n_kv_heads=1, head_dim=64, ffn=8, vocab=8, context=4096,
                eps=1e-5, rope_base=10000.0, scaling="none", factor=1.0, orig_context=4096, attn_factor=1.0,
                tied_output=True, fused_qkv=False, freq_factors=False)
    base.update(kw)
    return ref.Hparams(**base)


def rope_checks(rng) -> None:
    x = rng.normal(size=(5, 3, 16))
    hp = hp_with(head_dim=16)
    th, m = ref.rope_tables(hp, np.zeros(5, dtype=np.int64), None)
    check(np.array_equal(ref.rotate_normal(x, th, m), x), "rope: position 0 is exactly the identity")
    e0 = np.zeros((1, 1, 16))
    e0[0, 0, 0] = 1.0
    th, m = ref.rope_tables(hp, np.array([3]), None)
    r = ref.rotate_normal(e0, th, m)[0, 0]
    check(abs(r[0] - math.cos(3)) < 1e-15 and abs(r[1] - math.sin(3)) < 1e-15 and np.abs(r[2:]).sum() == 0,
          "rope: NORMAL pairing (element 0 rotates into element 1, positive sine)")
    pos = np.array([0, 1, 7, 100, 4095])
    for kw in [dict(), dict(scaling="linear", factor=4.0), dict(scaling="yarn", factor=8.0, orig_context=512),
               dict(scaling="linear", factor=2.0, attn_factor=1.3)]:
        h = hp_with(head_dim=16, **kw)
        th, m = ref.rope_tables(h, pos, None)
        xr = ref.rotate_normal(x, th, m)
        check(maxabs(np.linalg.norm(xr, axis=-1), m * np.linalg.norm(x, axis=-1)) < 1e-12,
              f"rope {kw}: norms scale by the magnitude {m:.6f}")
        qv, kv = rng.normal(size=16), rng.normal(size=16)

        def dot_at(pq, pk):
            a = ref.rotate_normal(qv[None, None], *ref.rope_tables(h, np.array([pq]), None))[0, 0]
            b = ref.rotate_normal(kv[None, None], *ref.rope_tables(h, np.array([pk]), None))[0, 0]
            return float(a @ b)
        check(abs(dot_at(9, 4) - dot_at(1009, 1004)) < 1e-9, f"rope {kw}: q.k depends only on the position difference")
    ps = np.arange(0, 40, 4)
    plain = ref.rope_tables(hp_with(), ps // 4, None)
    lin = ref.rope_tables(hp_with(scaling="linear", factor=4.0), ps, None)
    check(maxabs(plain[0], lin[0]) < 1e-12 and plain[1] == lin[1], "rope: linear factor 4 at 4p = no scaling at p")
    ffc = np.full(32, 4.0)
    withff = ref.rope_tables(hp_with(), ps, ffc)
    check(maxabs(plain[0], withff[0]) < 1e-12, "rope: frequency factors all 4 at 4p = none at p")
    check(maxabs(ref.rope_tables(hp_with(), ps, np.ones(32))[0], ref.rope_tables(hp_with(), ps, None)[0]) == 0,
          "rope: frequency factors all 1 = none")
    y1 = ref.rope_tables(hp_with(scaling="yarn", factor=1.0, orig_context=1024), ps, None)
    check(maxabs(y1[0], ref.rope_tables(hp_with(), ps, None)[0]) < 1e-13 and y1[1] == 1.0, "rope: YaRN with factor 1 = plain")
    none4 = ref.rope_tables(hp_with(scaling="none", factor=4.0), ps, None)
    check(maxabs(none4[0], ref.rope_tables(hp_with(), ps, None)[0]) == 0, "rope: type none ignores the factor")
    # YaRN's correction dims for d = 64, base 1e4, original context 4096: c(32) = 10.47, c(1) = 22.5.
    check(ref.yarn_corr_dims(64, 4096, 1e4) == (10.0, 23.0), f"rope: YaRN corr dims {ref.yarn_corr_dims(64, 4096, 1e4)} = (10, 23)")
    th, m = ref.rope_tables(hp_with(scaling="yarn", factor=16.0, orig_context=4096, attn_factor=0.5), np.array([1]), None)
    inv = 1e4 ** (-2.0 * np.arange(32) / 64)
    check(abs(m - 0.5 * (1 + 0.1 * math.log(16))) < 1e-15 and abs(th[0, 0] - inv[0]) < 1e-15
          and abs(th[0, 31] - inv[31] / 16) < 1e-18 and th[0, 10] == inv[10] and abs(th[0, 23] - inv[23] / 16) < 1e-18,
          "rope: YaRN keeps pairs <= low, interpolates pairs >= high, magnitude attn_factor (1 + 0.1 ln s)")
    j = 16  # inside the ramp: ramp = 1 - (16 - 10) / 13
    r = 1 - 6 / 13
    check(abs(th[0, j] - (inv[j] / 16 * (1 - r) + inv[j] * r)) < 1e-15, "rope: YaRN ramp inside the corr dims")


def activation_checks(rng) -> None:
    b = np.zeros(256, dtype=np.float32)
    b[3], b[9], b[20], b[21], b[22] = -2.0, 2.0, 1.0, 2.0 / 127 * 0.5, 2.0 / 127 * 1.5
    r = ref.round_q8_k(b[None])[0]
    d = np.float32(1.0) / (np.float32(-127.0) / np.float32(-2.0))
    check(r[3] == -127 * d and r[9] == 127 * d and r[21] == 0.0 and r[22] == 2 * d,
          "q8_k: the largest magnitude maps to 127, ties to even (0.5 -> 0, 1.5 -> 2)")
    check(np.array_equal(ref.round_q8_k(np.zeros((2, 256))), np.zeros((2, 256))), "q8_k: an all-zero block stays zero")
    a = rng.normal(size=(3, 512)).astype(np.float32)
    ra = ref.round_q8_k(a)
    bound = np.repeat(np.abs(a.reshape(-1, 256)).max(axis=1) / 127 / 2, 256).reshape(a.shape) * (1 + 1e-6)
    check(bool(np.all(np.abs(ra - a) <= bound)), "q8_k: every value within half a step")
    one = np.float32(1.0)
    c = np.array([1 + 2.0 ** -8, 1 + 3 * 2.0 ** -8, -1 - 2.0 ** -8, 1 + 2.0 ** -12], dtype=np.float32)
    check(np.array_equal(ref.round_bf16(c), [1.0, 1 + 2.0 ** -6, -1.0, 1.0]), "bf16: nearest, ties to even")
    check(ref.round_f16(np.array([one + np.float32(2.0 ** -11)]))[0] == 1.0, "f16: nearest, ties to even")


def q4_1_product_checks(tmp: str, rng) -> None:
    """--ggml-activations on a Q4_1 matrix = a per-block loop over the raw blocks: the
    quants and scales decoded here (not by gguf-py), ggml's d_w d_a sum(q_w q_a) + m_w s."""
    path, _ = write(tmp, "q4_1", "q4_1", seed=3)
    model = ref.LlamaGguf(path)
    name = "blk.0.ffn_down.weight"
    raw = np.asarray(model.tensors[name].data, dtype=np.uint8)
    rows, nb = raw.shape[0], raw.shape[1] // 20
    a = rng.normal(size=(2, nb * 32)).astype(np.float32) * 3
    want = np.zeros((2, rows))
    for r in range(2):
        x = a[r]
        for i in range(rows):
            acc = 0.0
            for b in range(nb):
                blk = raw[i, b * 20:(b + 1) * 20]
                d, m = (float(v) for v in blk[:4].view(np.float16))
                qw = np.concatenate([blk[4:] & 15, blk[4:] >> 4]).astype(np.int64)
                xb = x[b * 32:(b + 1) * 32]
                amax = np.float32(np.abs(xb).max())
                da = np.float32(amax / np.float32(127))
                qa = np.rint((xb * (np.float32(127) / amax)).astype(np.float32)).astype(np.int64)
                sa = float(np.float16(np.float32(da * np.float32(qa.sum()))))
                acc += d * float(np.float16(da)) * int((qw * qa).sum()) + m * sa
            want[r, i] = acc
    prod = ref.product(model, name, a.astype(np.float64), True)
    scale = float(np.abs(want).max())
    check(maxabs(prod, want) < 1e-12 * scale, f"q4_1: the Q8_1 product == a per-block loop over raw blocks ({maxabs(prod, want):.1e})")
    exact = ref.product(model, name, a.astype(np.float64), False)
    check(maxabs(prod, exact) > 1e-6 * scale, "q4_1: the Q8_1 product differs from the exact one (the rounding is in effect)")


def model_checks(tmp: str, tokens: list[int]) -> None:
    cases = [
        ("plain", "f32", {}, {}),
        ("biases", "f32", dict(biases=True), {}),
        ("fused", "f32", dict(fused_qkv=True, biases=True), {}),
        ("freqs", "f32", dict(freq_factors=True), {}),
        ("linear", "f32", {}, dict(scaling="linear", factor=4.0)),
        ("yarn", "f32", dict(freq_factors=True), dict(scaling="yarn", factor=8.0, orig_ctx=512, attn_factor=0.8)),
        ("tied", "f32", dict(tied=True), {}),
        ("f16", "f16", dict(biases=True), {}),
        ("q8_0", "q8_0", dict(tied=True, fused_qkv=True), dict(scaling="yarn", factor=4.0, orig_ctx=1024)),
    ]
    for stem, wtype, opts, keys in cases:
        tag = f"[{stem} {wtype}]"
        path, W = write(tmp, stem, wtype, seed=5, keys=keys, **opts)
        model = ref.LlamaGguf(path)
        hp = model.hp
        want_scaling = keys.get("scaling", "linear")
        check((hp.hidden, hp.n_layers, hp.n_heads, hp.n_kv_heads, hp.head_dim, hp.ffn, hp.vocab) == (64, 2, 4, 2, 16, 128, 512)
              and hp.scaling == want_scaling and hp.factor == keys.get("factor", 1.0)
              and hp.orig_context == keys.get("orig_ctx", 4096) and abs(hp.attn_factor - keys.get("attn_factor", 1.0)) < 1e-7
              and hp.tied_output == opts.get("tied", False) and hp.fused_qkv == opts.get("fused_qkv", False)
              and hp.freq_factors == opts.get("freq_factors", False) and abs(hp.eps - 1e-5) < 1e-12,
              f"{tag} hyper-parameters read back")
        Wq, exact = {}, True
        for name, a in W.items():
            got = model.tensor(name).astype(np.float32)
            Wq[name] = roundtrip(a, wtype)
            exact &= got.shape == a.shape and np.array_equal(got, Wq[name])
        check(exact, f"{tag} tensors read back == the gguf-py round trip, shape (rows, cols)")
        logits, cap = ref.forward_model(model, tokens, [1, 0, -1])
        nl, ncap = naive_forward(Wq, hp, tokens, [1, 0, -1])
        scale = max(1.0, float(np.abs(nl).max()))
        check(maxabs(logits, nl) < 1e-11 * scale and maxabs(cap, ncap) < 1e-11,
              f"{tag} vectorized == naive loop (|dlogit| {maxabs(logits, nl):.1e}, |dcap| {maxabs(cap, ncap):.1e})")
        D = hp.hidden
        check(np.array_equal(cap[:, 2 * D:], Wq["token_embd.weight"][tokens].astype(np.float64)), f"{tag} capture -1 = embedding rows")
        _, c_last = ref.forward_model(model, tokens, [hp.n_layers - 1])
        head = model.tensor(model.output_name())
        if hp.tied_output:
            check(np.array_equal(head, Wq["token_embd.weight"].astype(np.float64)), f"{tag} tied head = token_embd")
        again = ref.rms_norm(c_last, model.tensor("output_norm.weight"), hp.eps) @ head.T
        check(maxabs(again, logits) < 1e-12 * scale, f"{tag} last capture -> final norm -> head == logits")
        _, c10 = ref.forward_model(model, tokens, [1, 0])
        _, c01 = ref.forward_model(model, tokens, [0, 1])
        check(np.array_equal(c10, np.concatenate([c01[:, D:], c01[:, :D]], axis=1)), f"{tag} captures in --capture order")
        worst = 0.0
        for m in range(1, len(tokens) + 1, 3):
            lp, _ = ref.forward_model(model, tokens[:m], [])
            worst = max(worst, maxabs(lp, logits[:m]))
        t2 = list(tokens)
        t2[-1], t2[-3] = (t2[-1] + 1) % 512, (t2[-3] + 7) % 512
        l2, _ = ref.forward_model(model, t2, [])
        check(worst < 1e-12 * scale and maxabs(l2[:-3], logits[:-3]) < 1e-12 * scale and maxabs(l2[-1], logits[-1]) > 1e-6,
              f"{tag} causality: prefixes give the first rows, later tokens leave earlier rows alone")
        ls, _ = ref.forward_model(model, tokens, [], positions=np.arange(len(tokens)) + 1000)
        check(maxabs(ls, logits) < 1e-9 * scale, f"{tag} shifting all positions by 1000 leaves logits unchanged")
        check(len(set(np.argmax(logits, -1).tolist())) > 1 and bool(np.all(np.isfinite(logits))), f"{tag} logits finite, argmax not constant")
        if wtype == "f32":
            la, ca = ref.forward_model(model, tokens, [1], ggml_activations=True)
            check(np.array_equal(la, logits) and np.array_equal(ca, c10[:, :D]), f"{tag} --ggml-activations is a no-op for F32 weights")
        else:
            la, _ = ref.forward_model(model, tokens, [], ggml_activations=True)
            d = maxabs(la, logits)
            check(0 < d < 0.1 * scale, f"{tag} --ggml-activations moves logits a little ({d:.1e})")
        out = os.path.join(tmp, f"out_{stem}.json")
        subprocess.run([sys.executable, os.path.join(HERE, "llama_ref.py"), path, "--tokens", ",".join(map(str, tokens)),
                        "--capture", "1,0", "--out", out], check=True)
        doc = json.load(open(out))
        check(np.array_equal(np.array(doc["logits"]), logits) and np.array_equal(np.array(doc["captured"]), c10)
              and doc["argmax"] == np.argmax(logits, -1).tolist(), f"{tag} CLI JSON == forward() (bit-exact)")

    # A fused attn_qkv is the separate q, k, v (and biases) stacked in that order.
    sep_path, W = write(tmp, "sep", seed=9, biases=True)
    fused = {}
    for name, a in W.items():
        if ".attn_k." in name or ".attn_v." in name:
            continue
        if ".attn_q." in name:
            b, kind = name.split(".attn_q.")
            fused[f"{b}.attn_qkv.{kind}"] = np.concatenate([a, W[f"{b}.attn_k.{kind}"], W[f"{b}.attn_v.{kind}"]])
        else:
            fused[name] = a
    fused_path = os.path.join(tmp, "fused_of_sep.gguf")
    mk.write_gguf(fused_path, fused, **DIMS)
    ls, cs = ref.forward(sep_path, tokens, [0])
    lf, cf = ref.forward(fused_path, tokens, [0])
    check(maxabs(ls, lf) < 1e-12 * max(1.0, float(np.abs(ls).max())) and maxabs(cs, cf) < 1e-12,
          f"fused attn_qkv (rows q, k, v) == the separate tensors ({maxabs(ls, lf):.1e})")


def refusal_checks(tmp: str, tokens: list[int]) -> None:
    from gguf import GGUFWriter
    path, W = write(tmp, "base", seed=2)
    cases = [
        ("experts", dict(key=("llama.expert_count", 8)), "experts"),
        ("longrope", dict(keys=dict(scaling="longrope")), "longrope"),
        ("rope dims", dict(key=("llama.rope.dimension_count", 8)), "rope.dimension_count"),
        ("extra tensor", dict(tensor=("blk.0.attn_q_norm.weight", np.ones(16, np.float32))), "blk.0.attn_q_norm.weight"),
        ("scale tensor", dict(tensor=("blk.0.attn_q.scale", np.ones(1, np.float32))), "blk.0.attn_q.scale"),
        ("missing tensor", dict(drop="blk.1.ffn_up.weight"), "blk.1.ffn_up.weight"),
    ]
    for what, how, want in cases:
        bad = os.path.join(tmp, f"bad_{what.replace(' ', '_')}.gguf")
        w = dict(W)
        if "drop" in how:
            del w[how["drop"]]
        if "tensor" in how:
            w[how["tensor"][0]] = how["tensor"][1]
        keys = dict(how.get("keys", {}))
        if "key" in how:
            # write_gguf has no hook for arbitrary keys: write, then add the key through a fresh writer
            wr = GGUFWriter(bad, "llama")
            wr.add_uint32("llama.context_length", 4096)
            for k, v in [("embedding_length", 64), ("block_count", 2), ("feed_forward_length", 128),
                         ("attention.head_count", 4), ("attention.head_count_kv", 2)]:
                wr.add_uint32(f"llama.{k}", v)
            wr.add_float32("llama.attention.layer_norm_rms_epsilon", 1e-5)
            wr.add_uint32(*how["key"])
            for name, a in w.items():
                wr.add_tensor(name, a.astype(np.float32))
            wr.write_header_to_file()
            wr.write_kv_data_to_file()
            wr.write_tensors_to_file()
            wr.close()
        else:
            mk.write_gguf(bad, w, **DIMS, **keys)
        r = subprocess.run([sys.executable, os.path.join(HERE, "llama_ref.py"), bad, "--tokens", "1,2", "--out", "-"],
                           capture_output=True, text=True)
        check(r.returncode == 2 and want in r.stderr, f"refused with exit 2 naming it: {what} ({r.stderr.strip()[:100]})")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--keep", help="directory for the generated GGUFs (default: a fresh /tmp dir)")
    args = ap.parse_args()
    tmp = args.keep or tempfile.mkdtemp(prefix="llamaref_", dir="/tmp")
    os.makedirs(tmp, exist_ok=True)
    rng = np.random.default_rng(123)
    tokens = [int(t) for t in rng.integers(0, 512, size=10)]
    rope_checks(rng)
    activation_checks(rng)
    q4_1_product_checks(tmp, rng)
    model_checks(tmp, tokens)
    refusal_checks(tmp, tokens)
    print(f"\n{'ALL PASS' if not FAILS else f'{len(FAILS)} FAILED'}  (GGUFs in {tmp})")
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())

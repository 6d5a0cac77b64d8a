#!/usr/bin/env python3
"""Self-consistency tests of dspark_ref.py on tiny random target + drafter GGUFs (built in a fresh /tmp dir).

Checks:
  * YaRN: corr dims, low/high, mscale and the frequencies of docs/RUNTIME-MATH.md section 2.3's table;
    the HF form used by dspark_ref equals an independently written llama.cpp-style form; factor 1
    is plain RoPE.
  * drafter GGUF read-back (hyperparameters, YaRN keys, every tensor in (rows, cols) orientation).
  * the vectorized drafter equals a deliberately naive per-row / per-head loop (explicit 2x2
    rotations scaled by mscale, explicit kv-head index h // group, scalar softmax, its own
    llama.cpp-style YaRN table, its own Markov chain and confidence), with plain RoPE and YaRN, and
    with --q8-activations (the naive loop rounds exactly the products listed in the brief);
  * block rows: the result does not depend on the order rows (or context rows) are computed in;
    attention inside the block is bidirectional (a later block token changes row 0);
  * RoPE relative invariance: shifting context and block positions together leaves h unchanged,
    shifting only the block does not;
  * sample_from_anchor: false -> rows 1..B-1 (B-1 drafts, row 0 unused), true -> rows 0..B-1;
  * Markov/confidence: w2 = 0 gives the base argmax; without a Markov head drafts = base argmax and
    no confidences; confidence with C = H and C = H + R; the chain is seeded with the anchor and
    fed its own choices;
  * target_layer_ids order: swapping the ids and the matching fc column blocks leaves the output
    unchanged; features = qwen3_ref captures; anchor = qwen3_ref argmax; tied target head;
  * --q8-activations is a no-op for F32 weights and small for Q8_0 ones;
  * malformed files are refused; the CLI's JSON equals draft_first_round().

  /tmp/pyenv/bin/python tests/reference/dspark_selftest.py [--keep DIR]
Exit status 0 when all checks pass (< 1 s).
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
from gguf import GGUFWriter, GGMLQuantizationType
from gguf.quants import dequantize, quantize

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_tiny_qwen3 as mk  # noqa: E402
import qwen3_ref as qref  # noqa: E402
import dspark_ref as ref  # noqa: E402

Q8 = GGMLQuantizationType.Q8_0
TDIMS = dict(hidden=64, layers=3, heads=4, kv_heads=2, head_dim=16, ffn=128)
VOCAB = 512
FAILS: list[str] = []


def check(cond: bool, what: str) -> None:
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        FAILS.append(what)


def maxabs(a, b) -> float:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        return float("inf")
    return float(np.max(np.abs(a - b))) if a.size else 0.0


# ---- tiny drafter GGUF ------------------------------------------------------------------------

def make_draft_weights(hidden=64, layers=2, heads=4, kv_heads=2, head_dim=16, ffn=128, n_cap=2, vocab=VOCAB,
                       rank=32, markov=True, conf="markov", seed=0, std=0.08, w2_std=0.6):
    rng = np.random.default_rng(seed)
    mat = lambda r, c, s=std: rng.normal(0.0, s, size=(r, c)).astype(np.float32)  # noqa: E731
    norm = lambda n: (1.0 + rng.normal(0.0, 0.1, size=n)).astype(np.float32)  # noqa: E731
    qd, kvd = heads * head_dim, kv_heads * head_dim
    w = {"dflash.fc.weight": mat(hidden, n_cap * hidden), "dflash.hidden_norm.weight": norm(hidden)}
    for i in range(layers):
        b = f"blk.{i}."
        w[b + "attn_norm.weight"] = norm(hidden)
        w[b + "attn_q.weight"] = mat(qd, hidden, 0.25)
        w[b + "attn_k.weight"] = mat(kvd, hidden, 0.25)
        w[b + "attn_v.weight"] = mat(kvd, hidden)
        w[b + "attn_q_norm.weight"] = norm(head_dim)
        w[b + "attn_k_norm.weight"] = norm(head_dim)
        w[b + "attn_output.weight"] = mat(hidden, qd)
        w[b + "ffn_norm.weight"] = norm(hidden)
        w[b + "ffn_gate.weight"] = mat(ffn, hidden)
        w[b + "ffn_up.weight"] = mat(ffn, hidden)
        w[b + "ffn_down.weight"] = mat(hidden, ffn)
    w["output_norm.weight"] = norm(hidden)
    if markov:
        w["dflash.dspark.markov.w1"] = mat(vocab, rank, 1.0)
        w["dflash.dspark.markov.w2"] = mat(vocab, rank, w2_std)
        if conf:
            c = hidden + rank if conf == "markov" else hidden
            w["dflash.dspark.confidence.weight"] = mat(1, c, 0.3)
            w["dflash.dspark.confidence.bias"] = np.array([0.1], dtype=np.float32)
    return w


def write_draft_gguf(path, w, *, hidden=64, layers=2, heads=4, kv_heads=2, head_dim=16, ffn=128,
                     block=4, layer_ids=(1, 0), mask=511, sample_from_anchor=True, eps=1e-5, theta=1e6,
                     yarn=None, wtype="f32", extra_keys=None, keep_f32=()):
    wr = GGUFWriter(path, "dflash-draft")
    A = "dflash-draft."
    wr.add_uint32(A + "context_length", 4096)
    wr.add_uint32(A + "embedding_length", hidden)
    wr.add_uint32(A + "block_count", layers)
    wr.add_uint32(A + "feed_forward_length", ffn)
    wr.add_uint32(A + "attention.head_count", heads)
    wr.add_uint32(A + "attention.head_count_kv", kv_heads)
    wr.add_uint32(A + "attention.key_length", head_dim)
    wr.add_float32(A + "attention.layer_norm_rms_epsilon", eps)
    wr.add_float32(A + "rope.freq_base", theta)
    if yarn:
        wr.add_string(A + "rope.scaling.type", "yarn")
        wr.add_float32(A + "rope.scaling.factor", yarn["factor"])
        wr.add_uint32(A + "rope.scaling.original_context_length", yarn["orig"])
        for k in ("yarn_beta_fast", "yarn_beta_slow", "attn_factor"):
            if k in yarn:
                wr.add_float32(A + "rope.scaling." + k, yarn[k])
    wr.add_uint32(A + "dflash.block_size", block)
    wr.add_uint32(A + "dflash.n_target_layers", len(layer_ids))
    wr.add_array(A + "dflash.target_layer_ids", [int(v) for v in layer_ids])
    wr.add_uint32(A + "dflash.mask_token_id", mask)
    if sample_from_anchor is not None:
        wr.add_bool(A + "dflash.sample_from_anchor", sample_from_anchor)
    if "dflash.dspark.markov.w1" in w:
        wr.add_uint32(A + "dflash.dspark.enabled", 1)
        wr.add_uint32(A + "dflash.dspark.markov_rank", w["dflash.dspark.markov.w1"].shape[1])
        wr.add_uint32(A + "dflash.dspark.vocab_size", w["dflash.dspark.markov.w1"].shape[0])
    for k, v in (extra_keys or {}).items():
        wr.add_string(A + k, v)
    for name, a in w.items():
        if a.ndim == 1 or wtype == "f32" or "confidence" in name or name in keep_f32:
            wr.add_tensor(name, a.astype(np.float32))
        else:
            wr.add_tensor(name, quantize(a, Q8), raw_dtype=Q8)
    wr.write_header_to_file()
    wr.write_kv_data_to_file()
    wr.write_tensors_to_file()
    wr.close()


def roundtrip(name, a, wtype, keep_f32=()):
    if a.ndim == 1 or wtype == "f32" or "confidence" in name or name in keep_f32:
        return a.astype(np.float64)
    return dequantize(quantize(a, Q8), Q8).reshape(a.shape).astype(np.float64)


# ---- naive independent drafter -----------------------------------------------------------------

def naive_yarn_theta(i, pos, theta, r, s, L0, bf, bs):
    """llama.cpp rope_yarn form: theta_extrap = p*base_i, theta_interp = theta_extrap / s,
    ramp_mix = 1 - clamp((i - low)/max(0.001, high - low), 0, 1); mix them."""
    def cd(nr):
        return r * math.log(L0 / (nr * 2 * math.pi)) / (2 * math.log(theta))
    low, high = max(0.0, math.floor(cd(bf))), min(r - 1.0, math.ceil(cd(bs)))
    y = (i - low) / max(0.001, high - low)
    ramp_mix = 1.0 - min(1.0, max(0.0, y))
    ext = pos * theta ** (-2.0 * i / r)
    return ext / s * (1 - ramp_mix) + ext * ramp_mix


def naive_round(x):
    q = quantize(np.asarray(x, dtype=np.float32)[None, :], Q8)
    return np.asarray(dequantize(q, Q8), dtype=np.float32).reshape(-1).astype(np.float64)


def naive_draft(Wd, Wt, qtypes, cfg, feats, ctx_pos, anchor, bstart, q8=False):
    """Independent loop implementation. Wd / Wt: float64 weights (round-tripped) of draft / target,
    qtypes: set of tensor names stored as Q8_0 (key 'T:' prefix for target tensors)."""
    H, Hh, Hkv, d, B = cfg["hidden"], cfg["heads"], cfg["kv_heads"], cfg["head_dim"], cfg["block"]
    eps, half, group = cfg["eps"], d // 2, cfg["heads"] // cfg["kv_heads"]
    yarn = cfg.get("yarn")

    def mv(W, x, name):
        if q8 and name in qtypes:
            x = naive_round(x)
        return np.array([float(np.dot(W[r], x)) for r in range(W.shape[0])])

    def norm(x, w):
        return w * x / math.sqrt(sum(v * v for v in x) / len(x) + eps)

    if yarn:
        s = yarn["factor"]
        ms = yarn.get("attn_factor", 0.1 * math.log(s) + 1.0 if s > 1 else 1.0)
    else:
        ms = 1.0

    def rot(v, p):
        out = v.copy()
        for j in range(half):
            if yarn:
                ang = naive_yarn_theta(j, p, cfg["theta"], d, yarn["factor"], yarn["orig"],
                                       yarn.get("yarn_beta_fast", 32.0), yarn.get("yarn_beta_slow", 1.0))
            else:
                ang = p * cfg["theta"] ** (-2.0 * j / d)
            c, sn = math.cos(ang) * ms, math.sin(ang) * ms
            out[j], out[j + half] = c * v[j] - sn * v[j + half], sn * v[j] + c * v[j + half]
        return out

    ctx = [norm(mv(Wd["dflash.fc.weight"], f, "dflash.fc.weight"), Wd["dflash.hidden_norm.weight"]) for f in feats]
    toks = [anchor] + [cfg["mask"]] * (B - 1)
    z = [Wt["token_embd.weight"][t].copy() for t in toks]
    bpos = [bstart + i for i in range(B)]
    for li in range(cfg["layers"]):
        b = f"blk.{li}."
        w = {k[len(b):]: v for k, v in Wd.items() if k.startswith(b)}
        keys, vals = [], []  # list of per-row lists of kv heads, context first
        for c, p in zip(ctx, ctx_pos):
            k = mv(w["attn_k.weight"], c, b + "attn_k.weight")
            v = mv(w["attn_v.weight"], c, b + "attn_v.weight")
            keys.append([rot(norm(k[j * d:(j + 1) * d], w["attn_k_norm.weight"]), p) for j in range(Hkv)])
            vals.append([v[j * d:(j + 1) * d] for j in range(Hkv)])
        us = [norm(x, w["attn_norm.weight"]) for x in z]
        for u, p in zip(us, bpos):
            k = mv(w["attn_k.weight"], u, b + "attn_k.weight")
            v = mv(w["attn_v.weight"], u, b + "attn_v.weight")
            keys.append([rot(norm(k[j * d:(j + 1) * d], w["attn_k_norm.weight"]), p) for j in range(Hkv)])
            vals.append([v[j * d:(j + 1) * d] for j in range(Hkv)])
        newz = []
        for r in range(B):
            q = mv(w["attn_q.weight"], us[r], b + "attn_q.weight")
            att = np.zeros(Hh * d)
            for hh in range(Hh):
                qh = rot(norm(q[hh * d:(hh + 1) * d], w["attn_q_norm.weight"]), bpos[r])
                kv = hh // group
                sc = [float(np.dot(qh, kk[kv])) / math.sqrt(d) for kk in keys]
                m = max(sc)
                e = [math.exp(x - m) for x in sc]
                tot = sum(e)
                for t in range(len(keys)):
                    att[hh * d:(hh + 1) * d] += (e[t] / tot) * vals[t][kv]
            x = z[r] + mv(w["attn_output.weight"], att, b + "attn_output.weight")
            y = norm(x, w["ffn_norm.weight"])
            g = mv(w["ffn_gate.weight"], y, b + "ffn_gate.weight")
            up = mv(w["ffn_up.weight"], y, b + "ffn_up.weight")
            x = x + mv(w["ffn_down.weight"], (g / (1 + np.exp(-g))) * up, b + "ffn_down.weight")
            newz.append(x)
        z = newz
    h = [norm(x, Wd["output_norm.weight"]) for x in z]
    rows = list(range(B)) if cfg["sfa"] else list(range(1, B))
    lm_name = "output.weight" if "output.weight" in Wt else "token_embd.weight"
    U = [mv(Wt[lm_name], h[r], "T:" + lm_name) for r in rows]
    base = [int(np.argmax(u)) for u in U]
    drafted, conf, L = [], [], [u.copy() for u in U]
    if "dflash.dspark.markov.w1" in Wd:
        prev = anchor
        for k in range(len(rows)):
            e = Wd["dflash.dspark.markov.w1"][prev]            # plain row, never rounded
            lk = U[k] + mv(Wd["dflash.dspark.markov.w2"], e, "dflash.dspark.markov.w2")
            L[k] = lk
            if "dflash.dspark.confidence.weight" in Wd:
                cw = Wd["dflash.dspark.confidence.weight"][0]
                xin = np.concatenate([h[rows[k]], e]) if len(cw) == H + len(e) else h[rows[k]]
                conf.append(1 / (1 + math.exp(-(float(np.dot(cw, xin)) + float(Wd["dflash.dspark.confidence.bias"][0])))))
            prev = int(np.argmax(lk))
            drafted.append(prev)
    else:
        drafted = list(base)
    return {"hidden": np.array([h[r] for r in rows]), "block_hidden": np.array(h), "drafted": drafted,
            "confidences": np.array(conf), "base_logits_argmax": base, "base_logits": np.array(U),
            "logits": np.array(L)}


# ---- main ----------------------------------------------------------------------------------------

def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--keep", help="directory for the generated GGUFs (default: a fresh /tmp dir)")
    args = ap.parse_args()
    tmp = args.keep or tempfile.mkdtemp(prefix="dsparkref_", dir="/tmp")
    os.makedirs(tmp, exist_ok=True)

    # ---- YaRN table (docs/RUNTIME-MATH.md 2.3: r=64, theta=1e4, s=16) ----------------------------
    for L0, cf, cs, low, high, wl_i, wl, w31, xi, xw in [
            (4096, 10.4722, 22.5134, 10, 23, 10, 0.0562341325, 8.33450895e-06, 16, 0.00567307692),
            (65536, 20.1052, 32.1464, 20, 33, 20, 0.00316227766, 2.75679911e-05, 26, 0.000319020559)]:
        t = ref.yarn_tables(64, 1e4, 16.0, L0)
        om = t["omega"]
        ok = (abs(t["corr_fast"] - cf) < 5e-5 and abs(t["corr_slow"] - cs) < 5e-5 and t["low"] == low
              and t["high"] == high and abs(t["mscale"] - 1.277259) < 5e-7 and om[0] == 1.0
              and abs(om[wl_i] / wl - 1) < 5e-9 and abs(om[31] / w31 - 1) < 5e-9 and abs(om[xi] / xw - 1) < 5e-9)
        check(ok, f"yarn L0={L0}: corr {t['corr_fast']:.4f}/{t['corr_slow']:.4f}, low/high {t['low']:.0f}/{t['high']:.0f}, "
                  f"mscale {t['mscale']:.6f}, omega_{wl_i} {om[wl_i]:.10g}, omega_31 {om[31]:.9g}, omega_{xi} {om[xi]:.9g} == RUNTIME-MATH 2.3")
    t = ref.yarn_tables(64, 1e4, 16.0, 65536)
    check(abs(t["ramp"][31] - (31 - 20) / 13) < 1e-15 and abs((1 - t["ramp"][31]) - 0.153846) < 1e-6,
          "yarn L0=65536: lowest frequency keeps 15.4% extrapolation weight (RUNTIME-MATH 2.3)")
    worst = 0.0
    for (r, th, s, L0, bf, bs) in [(64, 1e4, 16, 4096, 32, 1), (16, 1e4, 4, 64, 32, 1), (128, 1e6, 8, 32768, 16, 2),
                                   (16, 1e6, 2.5, 1e9, 32, 1)]:
        t = ref.yarn_tables(r, th, s, L0, bf, bs)
        for i in range(r // 2):
            worst = max(worst, abs(t["omega"][i] * 7.0 / naive_yarn_theta(i, 7.0, th, r, s, L0, bf, bs) - 1))
    check(worst < 1e-13, f"yarn: HF-form omega == independent llama.cpp-form (ramp_mix) omega ({worst:.1e})")
    t1 = ref.yarn_tables(16, 1e4, 1.0, 64)
    base, _ = ref.rope_tables(ref.RopeParams(theta=1e4, dim=16))
    check(maxabs(t1["omega"], base) < 1e-17 and t1["mscale"] == 1.0, "yarn factor 1 == plain RoPE, mscale 1")
    check(ref.yarn_tables(64, 1e4, 16.0, 4096, attn_factor=0.75)["mscale"] == 0.75, "yarn: attn_factor key overrides mscale")

    # ---- targets ---------------------------------------------------------------------------------
    targets = {}
    for wtype, tied, seed in [("f32", False, 11), ("q8_0", False, 12), ("f32", True, 13)]:
        path = os.path.join(tmp, f"target_{wtype}{'_tied' if tied else ''}.gguf")
        W = mk.make_weights(**TDIMS, vocab=VOCAB, seed=seed, tied=tied)
        mk.write_gguf(path, W, **TDIMS, wtype=wtype)
        Wt = {k: roundtrip(k, v, wtype) for k, v in W.items()}
        qt = {"T:" + k for k, v in W.items() if v.ndim == 2 and wtype == "q8_0"}
        targets[(wtype, tied)] = (path, Wt, qt)

    prompt = [5, 77, 300, 12, 450, 9, 31]
    P = len(prompt)
    base_cfg = dict(hidden=64, layers=2, heads=4, kv_heads=2, head_dim=16, ffn=128, block=4, mask=511, eps=1e-5,
                    theta=1e6, layer_ids=(2, 0), sfa=True)

    def build(tag, wtype="f32", markov=True, conf="markov", yarn=None, sfa=True, seed=1, layer_ids=(2, 0),
              weights=None, block=4, eps=1e-5, keep_f32=(), **dims):
        cfg = dict(base_cfg, **dims)
        cfg.update(block=block, yarn=yarn, sfa=sfa, layer_ids=layer_ids, eps=float(np.float32(eps)))
        w = weights if weights is not None else make_draft_weights(
            **{k: cfg[k] for k in ("hidden", "layers", "heads", "kv_heads", "head_dim", "ffn")},
            n_cap=len(layer_ids), markov=markov, conf=conf, seed=seed)
        path = os.path.join(tmp, f"draft_{tag}.gguf")
        write_draft_gguf(path, w, **{k: cfg[k] for k in ("hidden", "layers", "heads", "kv_heads", "head_dim", "ffn",
                                                         "mask", "theta")},
                         block=block, layer_ids=layer_ids, sample_from_anchor=sfa, eps=eps, yarn=yarn, wtype=wtype,
                         keep_f32=keep_f32)
        Wd = {k: roundtrip(k, v, wtype, keep_f32) for k, v in w.items()}
        qd = {k for k, v in w.items() if v.ndim == 2 and wtype == "q8_0" and "confidence" not in k and k not in keep_f32}
        return path, w, Wd, qd, cfg

    def compare_naive(tag, dpath, Wd, qd, cfg, tkey=("f32", False), q8=False):
        tpath, Wt, qt = targets[tkey]
        res = ref.draft_first_round(tpath, dpath, prompt, q8_activations=q8)
        nv = naive_draft(Wd, Wt, qd | qt, cfg, res["features"], list(range(P)), res["anchor"], P, q8=q8)
        dh = maxabs(res["hidden"], nv["hidden"])
        dU = maxabs(res["base_logits"], nv["base_logits"])
        dc = maxabs(res["confidences"], nv["confidences"])
        dL = maxabs(res["logits"], nv["logits"])
        same = (res["drafted"] == nv["drafted"] and res["base_logits_argmax"] == nv["base_logits_argmax"])
        check(dh < 1e-12 and dU < 1e-12 and dL < 1e-12 and dc < 1e-13 and same,
              f"{tag} vectorized == naive loop (|dh| {dh:.1e}, |dU| {dU:.1e}, |dlogits| {dL:.1e}, |dconf| {dc:.1e}, "
              f"tokens equal {same})")
        return res, nv

    # ---- read-back ---------------------------------------------------------------------------------
    yarn = {"factor": 4.0, "orig": 64}
    for wtype in ("f32", "q8_0"):
        dpath, w, Wd, qd, cfg = build(f"read_{wtype}", wtype=wtype, yarn=yarn)
        dm = ref.DraftGguf(dpath)
        hp = dm.hp
        check((hp.hidden, hp.n_layers, hp.n_heads, hp.n_kv_heads, hp.head_dim, hp.ffn, hp.block_size,
               hp.target_layer_ids, hp.mask_token_id, hp.sample_from_anchor, hp.has_markov, hp.markov_rank,
               hp.markov_vocab, hp.conf_dim) == (64, 2, 4, 2, 16, 128, 4, [2, 0], 511, True, True, 32, VOCAB, 96)
              and hp.eps == float(np.float32(1e-5)) and hp.rope.kind == "yarn" and hp.rope.factor == 4.0
              and hp.rope.orig_ctx == 64 and hp.rope.beta_fast == 32.0 and hp.rope.beta_slow == 1.0
              and hp.rope.attn_factor is None, f"[{wtype}] drafter hyperparameters and YaRN keys read back")
        ok = all(dm.tensor(k).shape == v.shape and np.array_equal(dm.tensor(k), Wd[k]) for k, v in w.items())
        check(ok, f"[{wtype}] drafter tensors read back (numpy (rows, cols) = ne reversed; conf weight (1, C))")

    # ---- naive comparisons ---------------------------------------------------------------------------
    dpath, w, Wd, qd, cfg = build("plain")
    res_plain, _ = compare_naive("[f32 plain rope, Markov + conf(H+R), anchor rows]", dpath, Wd, qd, cfg)
    check(any(a != b for a, b in zip(res_plain["drafted"], res_plain["base_logits_argmax"])),
          "Markov head changes at least one draft vs the base argmax (test is meaningful)")
    dpath_y, wy, Wdy, qdy, cfgy = build("yarn", yarn=yarn, seed=2)
    res_y, _ = compare_naive("[f32 YaRN s=4 L0=64]", dpath_y, Wdy, qdy, cfgy)
    dpath_y2, _, Wdy2, qdy2, cfgy2 = build("yarn_af", yarn=dict(yarn, attn_factor=1.5, yarn_beta_fast=16.0,
                                                                  yarn_beta_slow=2.0), seed=2)
    compare_naive("[f32 YaRN with attn_factor 1.5, beta 16/2]", dpath_y2, Wdy2, qdy2, cfgy2)
    dpath_q, wq, Wdq, qdq, cfgq = build("q8", wtype="q8_0", seed=3)
    res_q, _ = compare_naive("[q8_0 drafter + q8_0 target, --q8-activations]", dpath_q, Wdq, qdq, cfgq,
                             tkey=("q8_0", False), q8=True)
    dpath_m, _, Wdm, qdm, cfgm = build("q8_w1f32", wtype="q8_0", seed=3, keep_f32=("dflash.dspark.markov.w1",))
    compare_naive("[q8_0 drafter with an F32 Markov w1 (w2 product rounds e_k), --q8-activations]", dpath_m, Wdm, qdm,
                  cfgm, tkey=("q8_0", False), q8=True)
    compare_naive("[q8_0 drafter + q8_0 target, no activation rounding]", dpath_q, Wdq, qdq, cfgq, tkey=("q8_0", False))
    compare_naive("[q8_0 drafter + f32 tied target, --q8-activations]", dpath_q, Wdq, qdq, cfgq, tkey=("f32", True), q8=True)
    dpath_c, _, Wdc, qdc, cfgc = build("confH", conf="plain", seed=4, block=5)
    res_c, _ = compare_naive("[conf C=H, block 5]", dpath_c, Wdc, qdc, cfgc)
    check(len(res_c["confidences"]) == 5 and ref.DraftGguf(dpath_c).hp.conf_dim == 64, "conf C=H: one confidence per draft")
    dpath_n, _, Wdn, qdn, cfgn = build("nomarkov", markov=False, seed=5, sfa=False)
    res_n, _ = compare_naive("[no Markov head, rows 1..B-1]", dpath_n, Wdn, qdn, cfgn)
    check(res_n["drafted"] == res_n["base_logits_argmax"] and len(res_n["confidences"]) == 0 and len(res_n["drafted"]) == 3,
          "no Markov head: drafts = base argmax, no confidences, B-1 drafts")
    dpath_g, _, Wdg, qdg, cfgg = build("gqa1", seed=6, kv_heads=1, head_dim=32)
    compare_naive("[heads*hd=128 != H, 1 kv head]", dpath_g, Wdg, qdg, cfgg)

    # ---- block-level properties (direct calls on the opened files) -------------------------------------
    tpath, Wt, _ = targets[("f32", False)]
    target = qref.Qwen3Gguf(tpath)
    for tag, dp in (("plain", dpath), ("yarn", dpath_y)):
        dm = ref.DraftGguf(dp)
        res = ref.draft_first_round(target, dm, prompt)
        c = ref.fuse_context(dm, res["features"])
        z0 = target.rows("token_embd.weight", [res["anchor"]] + [511] * 3)
        bpos = np.arange(P, P + 4)
        h = ref.draft_block_forward(dm, c, np.arange(P), z0, bpos)
        check(maxabs(h, res["block_hidden"]) == 0.0, f"[{tag}] draft_block_forward == draft_first_round's block")
        perm = np.array([2, 0, 3, 1])
        hp_ = ref.draft_block_forward(dm, c, np.arange(P), z0[perm], bpos[perm])
        cperm = np.random.default_rng(0).permutation(P)
        hc = ref.draft_block_forward(dm, c[cperm], np.arange(P)[cperm], z0, bpos)
        check(maxabs(hp_, h[perm]) < 1e-13 and maxabs(hc, h) < 1e-13,
              f"[{tag}] block rows / context rows in any order give the same rows ({maxabs(hp_, h[perm]):.1e}, {maxabs(hc, h):.1e})")
        hs = ref.draft_block_forward(dm, c, np.arange(P) + 1000, z0, bpos + 1000)
        hb = ref.draft_block_forward(dm, c, np.arange(P), z0, bpos + 5)
        check(maxabs(hs, h) < 1e-9 and maxabs(hb, h) > 1e-6,
              f"[{tag}] RoPE relative: shift all positions by 1000 -> same h ({maxabs(hs, h):.1e}); shift only the block -> differs")
        z1 = z0.copy(); z1[3] = target.rows("token_embd.weight", [42])[0]
        h1 = ref.draft_block_forward(dm, c, np.arange(P), z1, bpos)
        c1 = c.copy(); c1[0] *= -1
        h2 = ref.draft_block_forward(dm, c1, np.arange(P), z0, bpos)
        check(maxabs(h1[0], h[0]) > 1e-6 and maxabs(h2[0], h[0]) > 1e-6,
              f"[{tag}] no causal mask: the last block token and context row 0 both reach block row 0")
        _, kvs = ref.draft_block_forward(dm, c, np.arange(P), z0, bpos, return_kv=True)
        _, kvs2 = ref.draft_block_forward(dm, c[:3], np.arange(3), z0, bpos, return_kv=True)
        check(all(maxabs(a[0][:3], b[0]) < 1e-13 and maxabs(a[1][:3], b[1]) < 1e-13 for a, b in zip(kvs, kvs2)),
              f"[{tag}] context K/V rows are per-row (a prefix's K/V = first rows to 1e-13; caching is exact)")

    # ---- sample_from_anchor ------------------------------------------------------------------------------
    dpath_f, _, Wdf, qdf, cfgf = build("sfa_false", weights=w, sfa=False)
    res_f, _ = compare_naive("[sample_from_anchor=false]", dpath_f, Wdf, qdf, cfgf)
    check(res_f["rows"] == [1, 2, 3] and len(res_f["drafted"]) == 3 and maxabs(res_f["block_hidden"], res_plain["block_hidden"]) == 0
          and maxabs(res_f["hidden"], res_plain["block_hidden"][1:]) == 0 and res_plain["rows"] == [0, 1, 2, 3]
          and maxabs(res_plain["hidden"], res_plain["block_hidden"]) == 0,
          "sample_from_anchor: false -> rows 1..B-1 (B-1 drafts), true -> rows 0..B-1; same block forward")
    dmf = ref.DraftGguf(dpath_f)
    junk = res_f["block_hidden"].copy(); junk[0] = 1e3
    hd = ref.draft_heads(dmf, target, junk[ref.draft_rows(dmf.hp)], res_f["anchor"])
    check(hd["drafted"] == res_f["drafted"] and maxabs(hd["confidences"], res_f["confidences"]) == 0,
          "sample_from_anchor=false: block row 0 is unused (garbage there changes nothing)")
    dpath_none, _, _, _, _ = build("sfa_absent", weights=w, sfa=None)
    check(ref.DraftGguf(dpath_none).hp.sample_from_anchor is True, "sample_from_anchor absent + Markov head -> true")

    # ---- Markov head details ---------------------------------------------------------------------------
    w0 = dict(w); w0["dflash.dspark.markov.w2"] = np.zeros_like(w["dflash.dspark.markov.w2"])
    dpath_0, *_ = build("w2zero", weights=w0)
    r0 = ref.draft_first_round(target, dpath_0, prompt)
    check(r0["drafted"] == r0["base_logits_argmax"] and maxabs(r0["hidden"], res_plain["hidden"]) == 0,
          "Markov w2 = 0 -> drafts = base argmax")
    dm = ref.DraftGguf(dpath)
    e0 = Wd["dflash.dspark.markov.w1"][res_plain["anchor"]]
    l1 = res_plain["base_logits"][0] + Wd["dflash.dspark.markov.w2"] @ e0
    z = float(Wd["dflash.dspark.confidence.weight"][0] @ np.concatenate([res_plain["hidden"][0], e0])) \
        + float(Wd["dflash.dspark.confidence.bias"][0])
    check(res_plain["drafted"][0] == int(np.argmax(l1)) and abs(res_plain["confidences"][0] - 1 / (1 + math.exp(-z))) < 1e-12,
          "Markov step 1 is seeded with the anchor; confidence = sigmoid(w.[h; w1[anchor]] + b)")

    # ---- feature order -----------------------------------------------------------------------------------
    ws = dict(w); fc = w["dflash.fc.weight"]
    ws["dflash.fc.weight"] = np.concatenate([fc[:, 64:], fc[:, :64]], axis=1)
    dpath_s, *_ = build("swapped_ids", weights=ws, layer_ids=(0, 2))
    rs = ref.draft_first_round(target, dpath_s, prompt)
    check(maxabs(rs["hidden"], res_plain["hidden"]) < 1e-13 and rs["drafted"] == res_plain["drafted"],
          "target_layer_ids order: swapped ids + swapped fc column blocks -> same drafts")
    lg, cap = qref.forward_model(target, prompt, [2, 0])
    check(np.array_equal(cap, res_plain["features"]) and res_plain["anchor"] == int(np.argmax(lg[-1])),
          "features = qwen3_ref captures in target_layer_ids order; anchor = target argmax of the last prompt row")

    # ---- q8 activations ------------------------------------------------------------------------------------
    rq = ref.draft_first_round(target, dpath, prompt, q8_activations=True)
    check(maxabs(rq["hidden"], res_plain["hidden"]) == 0 and maxabs(rq["confidences"], res_plain["confidences"]) == 0,
          "--q8-activations is a no-op with F32 weights")
    rnq = ref.draft_first_round(targets[("q8_0", False)][0], dpath_q, prompt)
    dq = maxabs(res_q["hidden"], rnq["hidden"])
    check(0 < dq < 0.1, f"--q8-activations on Q8_0 weights moves h a little ({dq:.2e})")

    # ---- refusals ------------------------------------------------------------------------------------------
    def refuses(tag, exc, **kw):
        try:
            build(tag, **kw)
            ref.DraftGguf(os.path.join(tmp, f"draft_{tag}.gguf"))
        except exc:
            return True
        except Exception as e:  # noqa: BLE001
            print(f"     ({tag}: unexpected {type(e).__name__}: {e})")
            return False
        return False
    wbad = dict(w); wbad["dflash.fc.weight"] = fc[:, :64]
    wnob = {k: v for k, v in w.items() if k != "dflash.dspark.confidence.bias"}
    lin = os.path.join(tmp, "draft_linear.gguf")
    write_draft_gguf(lin, w, extra_keys={"rope.scaling.type": "linear"})
    gated = os.path.join(tmp, "draft_gated.gguf")
    write_draft_gguf(gated, w, extra_keys={"dflash.dspark.markov_head_type": "gated"})
    ok = True
    for pth in (lin, gated):
        try:
            ref.DraftGguf(pth); ok = False
        except NotImplementedError:
            pass
    check(refuses("bad_fc", ValueError, weights=wbad) and refuses("no_bias", ValueError, weights=wnob) and ok,
          "refuses: fc ne[0] != len(target_layer_ids)*H, confidence weight without bias, rope scaling 'linear', "
          "markov_head_type 'gated'")

    # ---- CLI ----------------------------------------------------------------------------------------------
    out = os.path.join(tmp, "cli.json")
    subprocess.run([sys.executable, os.path.join(HERE, "dspark_ref.py"), targets[("q8_0", False)][0], dpath_q,
                    "--prompt", ",".join(map(str, prompt)), "--q8-activations", "--out", out], check=True)
    doc = json.load(open(out))
    check(doc == json.loads(json.dumps(ref.to_json(res_q))) and set(doc) == {"anchor", "drafted", "confidences", "hidden",
                                                                          "base_logits_argmax"},
          "CLI JSON == draft_first_round() (bit-exact, schema keys)")

    print(f"\n{'ALL PASS' if not FAILS else f'{len(FAILS)} FAILED'}  (GGUFs in {tmp})")
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())

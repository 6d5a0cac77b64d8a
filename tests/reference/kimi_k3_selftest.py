#!/usr/bin/env python3
"""Self-consistency tests of kimi_k3_ref.py on tiny random Kimi-K3 GGUFs built by make_tiny_kimi_k3.py.

For each configuration (q LoRA on/off, latent on/off, shared experts on/off, dense vs MoE, block size
0/1/2/3, gate lower bound set/unset, sigmoid / softmax / softmax-weight / sqrt-softplus gating, expert groups,
F32/F16/BF16/Q8_0, MLA gate on/off, conv kernel 2 and 4, SiTU with and without the linear branch, d_in != hidden,
all-KDA / all-MLA / MLA at layer 0) it checks:
  * metadata and tokenizer read back; every tensor == the generator's array after the gguf-py round trip of the
    type the converter would use, with the ne of docs/KIMI-K3.md's tensor tables (orientation);
  * the vectorized forward == a separate naive per-token loop below (explicit window conv, loops over heads and
    key dims for KDA, scalar softmaxes, MLA in the *decompressed* form k = K_b c, v = V_b c unless Q8 activation
    rounding needs the absorbed one, explicit checkpoint-stack ResMix, scalar routing) to ~1e-12 relative,
    logits and every tap (and with --q8-activations on the Q8_0 files);
  * causality (prefixes, changed later tokens); prefill in chunks with carried State == all at once (chunk
    sizes 1, 2, 3 and mixed, edges below and above K-1) for logits, taps and the final state; the KDA state and
    conv windows after n tokens == the naive loop's token-by-token ones;
  * taps: with block size 0 the tap == the plain residual P; in general tap l == a_in of layer l+1 (trace);
    the last-layer tap -> output_norm -> output == logits; capture order; -1 = embeddings;
  * the CLI's JSON == forward().

  PY tests/reference/kimi_k3_selftest.py [--keep DIR]          exit 0 = all pass
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
from gguf import GGMLQuantizationType, GGUFReader
from gguf.quants import dequantize, quantize

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import kimi_k3_ref as ref  # noqa: E402
import make_tiny_kimi_k3 as mk  # noqa: E402

Q8 = GGMLQuantizationType.Q8_0
FAILS: list[str] = []


def check(cond: bool, what: str) -> None:
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        FAILS.append(what)


def maxabs(a, b) -> float:
    a, b = np.asarray(a), np.asarray(b)
    return float(np.max(np.abs(a - b))) if a.size else 0.0


def f32(v: float) -> float:
    return float(np.float32(v))


def stored(a: np.ndarray, qt: GGMLQuantizationType) -> np.ndarray:
    """What a reader gets back for `a` stored as `qt` (float64)."""
    if qt == GGMLQuantizationType.F32:
        return a.astype(np.float64)
    if qt == GGMLQuantizationType.F16:
        return a.astype(np.float16).astype(np.float64)
    return np.asarray(dequantize(quantize(a, qt), qt), dtype=np.float64).reshape(a.shape)


def f16_round(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=np.float32).astype(np.float16).astype(np.float64)


def bf16_round(x: np.ndarray) -> np.ndarray:  # round to nearest even, written apart from the reference's
    out = np.empty(np.shape(x))
    for idx, v in np.ndenumerate(np.asarray(x, dtype=np.float32)):
        bits = int(v.view(np.uint32))
        lsb = (bits >> 16) & 1
        out[idx] = np.uint32(((bits + 0x7FFF + lsb) >> 16) << 16 & 0xFFFFFFFF).view(np.float32)
    return out


def q8_round(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    return np.asarray(dequantize(quantize(x.reshape(1, -1), Q8), Q8), dtype=np.float64).reshape(x.shape)


# ---- naive forward: one token at a time, loops everywhere, from the generator's config and arrays ----------

def naive_forward(cfg: mk.Config, W: dict, tokens, capture, rounders=None):
    """rounders: {weight name: function} applied to the input vector of each product with that weight."""
    rounders = rounders or {}
    E, H, D, K = cfg.hidden, cfg.heads, cfg.kda_head_dim, cfg.conv_kernel
    din = H * D
    eps = f32(cfg.eps)
    A = cfg.block_size
    sb, slb = f32(cfg.situ_beta), f32(cfg.situ_linear_beta)
    lb = None if cfg.gate_lower_bound is None else f32(cfg.gate_lower_bound)

    def R(x, name):  # activation rounding before a Q8_0 (F16, BF16) weight product
        return rounders[name](x) if name in rounders else x

    def mv(name, x):  # y = W x, W numpy (out, in)
        return W[name] @ R(x, name)

    def rms(x):
        return math.sqrt(float(np.dot(x, x)) / len(x) + eps)

    def sig(z):
        return 1.0 / (1.0 + np.exp(-z))

    def situ_n(g, u):
        out = np.empty_like(g)
        for j in range(len(g)):
            a = sb * math.tanh(g[j] / sb) * (1.0 / (1.0 + math.exp(-g[j])))
            b = slb * math.tanh(u[j] / slb) if slb > 0 else u[j]
            out[j] = a * b
        return out

    def mix(u, stack, w):
        if not stack:
            return u.copy()
        vecs = list(stack) + [u]
        sc = [float(np.dot(w, v / rms(v))) for v in vecs]
        m = max(sc)
        ex = [math.exp(s - m) for s in sc]
        tot = sum(ex)
        out = np.zeros(E)
        for e_, v in zip(ex, vecs):
            out += (e_ / tot) * v
        return out

    def scalar_softmax(vals):
        m = max(vals)
        ex = [math.exp(v - m) for v in vals]
        s = sum(ex)
        return [e_ / s for e_ in ex]

    kda_st, mla_st = {}, {}
    for i in range(cfg.layers):
        if i in cfg.mla_layers:
            mla_st[i] = []  # list of (c, k_r)
        else:
            kda_st[i] = {"win": [[np.zeros(din) for _ in range(K - 1)] for _ in range(3)],
                         "S": [np.zeros((D, D)) for _ in range(H)]}
    all_logits, all_caps = [], []
    for tok in tokens:
        x0 = W["token_embd.weight"][tok].copy()
        P = x0.copy()
        stack = []
        taps = {-1: x0}
        for i in range(cfg.layers):
            b = f"blk.{i}."
            a_in = mix(P, stack, W[b + "attn_res_score.weight"]) if A > 0 else P.copy()
            if i > 0:
                taps[i - 1] = a_in
            banked = A > 0 and i % A == 0
            if banked:
                stack.append(P.copy())
            h = a_in / rms(a_in) * W[b + "attn_norm.weight"]
            if i in kda_st:
                st = kda_st[i]
                conv_out = []
                for j, x in enumerate("qkv"):
                    p = mv(b + f"attn_{x}.weight", h)
                    seq = st["win"][j] + [p]                      # K vectors, oldest first
                    cw = W[b + f"ssm_conv1d_{x}.weight"]          # (din, 1, K)
                    y = np.zeros(din)
                    for c in range(din):
                        acc = 0.0
                        for tau in range(K):
                            acc += cw[c, 0, tau] * seq[tau][c]
                        y[c] = acc
                    st["win"][j] = seq[1:]
                    conv_out.append(y * sig(y))
                q, k, v = conv_out
                u = mv(b + "ssm_f_b.weight", mv(b + "ssm_f_a.weight", h)) + W[b + "ssm_dt.bias"]
                bet = mv(b + "ssm_beta.weight", h)
                gate = mv(b + "ssm_g.weight", h)
                o_all = np.zeros(din)
                for hh in range(H):
                    sl = slice(hh * D, (hh + 1) * D)
                    qh = q[sl] / math.sqrt(float(np.dot(q[sl], q[sl])) + eps)
                    kh = k[sl] / math.sqrt(float(np.dot(k[sl], k[sl])) + eps)
                    vh = v[sl]
                    An = -W[b + "ssm_a"][hh]
                    beta = 1.0 / (1.0 + math.exp(-bet[hh]))
                    S = st["S"][hh]
                    for ii in range(D):                            # decay along the key index
                        ui = u[hh * D + ii]
                        if lb is not None:
                            gi = lb / (1.0 + math.exp(-An * ui))
                        else:
                            sp = ui if ui > 20 else math.log1p(math.exp(ui))
                            gi = -An * sp
                        S[ii, :] *= math.exp(gi)
                    delta = np.zeros(D)
                    for jj in range(D):
                        rj = 0.0
                        for ii in range(D):
                            rj += S[ii, jj] * kh[ii]
                        delta[jj] = beta * (vh[jj] - rj)
                    for ii in range(D):
                        S[ii, :] += kh[ii] * delta
                    oh = np.zeros(D)
                    for jj in range(D):
                        oh[jj] = float(np.dot(S[:, jj], qh)) / math.sqrt(D)
                    oh = oh / rms(oh) * W[b + "ssm_norm.weight"]
                    o_all[sl] = oh * sig(gate[sl])
                y_att = mv(b + "attn_output.weight", o_all)
            else:
                dn, dr, rkv, dv = cfg.qk_nope, cfg.rope_dim, cfg.kv_lora_rank, cfg.v_head_dim
                dqk = dn + dr
                if cfg.q_lora_rank > 0:
                    qa = mv(b + "attn_q_a.weight", h)
                    Q = mv(b + "attn_q_b.weight", qa / rms(qa) * W[b + "attn_q_a_norm.weight"])
                else:
                    Q = mv(b + "attn_q.weight", h)
                kvr = mv(b + "attn_kv_a_mqa.weight", h)
                c = kvr[:rkv] / rms(kvr[:rkv]) * W[b + "attn_kv_a_norm.weight"]
                mla_st[i].append((c, kvr[rkv:].copy()))
                Kb, Vb = W[b + "attn_k_b.weight"], W[b + "attn_v_b.weight"]   # (H, rkv, dn), (H, dv, rkv)
                absorbed = (b + "attn_k_b.weight") in rounders or (b + "attn_v_b.weight") in rounders
                o_all = np.zeros(H * dv)
                for hh in range(H):
                    qn, qr = Q[hh * dqk: hh * dqk + dn], Q[hh * dqk + dn:(hh + 1) * dqk]
                    if absorbed:
                        q_abs = Kb[hh] @ R(qn, b + "attn_k_b.weight")
                        sc = [(float(np.dot(q_abs, cc)) + float(np.dot(qr, kr))) / math.sqrt(dqk) for cc, kr in mla_st[i]]
                        pr = scalar_softmax(sc)
                        ctx = np.zeros(rkv)
                        for pt, (cc, _) in zip(pr, mla_st[i]):
                            ctx += pt * cc
                        oh = Vb[hh] @ R(ctx, b + "attn_v_b.weight")
                    else:  # decompressed: per cached token k_nope = K_b^T c, v = V_b c
                        sc, vals = [], []
                        for cc, kr in mla_st[i]:
                            kn = Kb[hh].T @ cc
                            sc.append((float(np.dot(qn, kn)) + float(np.dot(qr, kr))) / math.sqrt(dqk))
                            vals.append(Vb[hh] @ cc)
                        pr = scalar_softmax(sc)
                        oh = sum(pt * vv for pt, vv in zip(pr, vals))
                    o_all[hh * dv:(hh + 1) * dv] = oh
                if cfg.mla_gate:
                    o_all = o_all * sig(mv(b + "attn_gate.weight", h))
                y_att = mv(b + "attn_output.weight", o_all)
            P = y_att if banked else P + y_att
            f_in = mix(P, stack, W[b + "ffn_res_score.weight"]) if A > 0 else P.copy()
            h2 = f_in / rms(f_in) * W[b + "ffn_norm.weight"]
            if i < cfg.dense_layers:
                z = mv(b + "ffn_down.weight", situ_n(mv(b + "ffn_gate.weight", h2), mv(b + "ffn_up.weight", h2)))
            else:
                Ne, k_used = cfg.experts, cfg.experts_used
                lg = mv(b + "ffn_gate_inp.weight", h2)
                if cfg.gating == "softmax":
                    p = np.array(scalar_softmax(list(lg)))
                elif cfg.gating == "sigmoid":
                    p = np.array([1.0 / (1.0 + math.exp(-z_)) for z_ in lg])
                elif cfg.gating == "softmax-weight":
                    p = lg.copy()
                else:
                    p = np.array([math.sqrt(z_ if z_ > 20 else math.log1p(math.exp(z_))) for z_ in lg])
                sel = p + W[b + "exp_probs_b.bias"]
                allowed = list(range(Ne))
                if cfg.expert_groups > 1:
                    per = Ne // cfg.expert_groups
                    gsc = []
                    for g_ in range(cfg.expert_groups):
                        vals = sorted(sel[g_ * per:(g_ + 1) * per], reverse=True)
                        gsc.append((-(vals[0] + vals[1]), g_))
                    keep = [g_ for _, g_ in sorted(gsc)[:cfg.expert_groups_used]]
                    allowed = [e for e in range(Ne) if e // per in keep]
                top = sorted(allowed, key=lambda e: (-sel[e], e))[:k_used]
                wts = [p[e] for e in top]
                if cfg.gating == "softmax-weight":
                    wts = scalar_softmax(wts)
                if cfg.weights_norm:
                    s = max(sum(wts), 6.103515625e-5)
                    wts = [x / s for x in wts]
                sc_ = f32(cfg.weights_scale)
                if sc_ not in (0.0, 1.0):
                    wts = [x * sc_ for x in wts]
                r = mv(b + "ffn_routed_down.weight", h2) if cfg.latent > 0 else h2
                y = np.zeros(cfg.latent_width)
                for e, we in zip(top, wts):
                    gname, uname, dname = (b + f"ffn_{x}_exps.weight" for x in ("gate", "up", "down"))
                    ge = W[gname][e] @ R(r, gname)
                    ue = W[uname][e] @ R(r, uname)
                    y += we * (W[dname][e] @ R(situ_n(ge, ue), dname))
                if cfg.latent > 0:
                    if cfg.routed_norm:
                        y = y / rms(y) * W[b + "ffn_routed_norm.weight"]
                    y = mv(b + "ffn_routed_up.weight", y)
                if cfg.shared_experts > 0:
                    y = y + mv(b + "ffn_down_shexp.weight",
                               situ_n(mv(b + "ffn_gate_shexp.weight", h2), mv(b + "ffn_up_shexp.weight", h2)))
                z = y
            P = P + z
        o = mix(P, stack, W["output_res_score.weight"]) if A > 0 else P.copy()
        taps[cfg.layers - 1] = o
        all_logits.append(mv("output.weight", o / rms(o) * W["output_norm.weight"]))
        all_caps.append(np.concatenate([taps[c] for c in capture]) if capture else np.zeros(0))
    final = {}
    for i, st in kda_st.items():
        final[i] = {"conv": np.array([np.array(w_) for w_ in st["win"]]), "S": np.array(st["S"])}
    for i, rows in mla_st.items():
        final[i] = {"cache": np.array([np.concatenate([c, kr]) for c, kr in rows])}
    return np.array(all_logits), np.array(all_caps), final


# ---- configurations ------------------------------------------------------------------------------------

BASE = mk.Config()
CASES = [
    # (tag, config, wtype, seed)
    ("default", BASE, "f32", 1),
    ("default", BASE, "q8_0", 1),
    ("default", BASE, "f16", 1),
    ("default", BASE, "bf16", 1),
    ("qlora, no gate, MLA at 0 and 3, A=3, softplus gate", BASE.replace(q_lora_rank=32, mla_gate=False, mla_layers=(0, 3),
                                                                       block_size=3, gate_lower_bound=None), "f32", 2),
    ("latent 0, no shexp, softmax, scale 2.5, A=1", BASE.replace(latent=0, shared_experts=0, gating="softmax",
                                                                 weights_scale=2.5, block_size=1), "f32", 3),
    ("A=0, all MoE, 8 experts in 4 groups (2 used), top-3, K=2", BASE.replace(block_size=0, dense_layers=0, experts=8,
                                                                                experts_used=3, expert_groups=4,
                                                                                expert_groups_used=2, conv_kernel=2), "f32", 4),
    ("all dense, all KDA, 5 layers, A=2", BASE.replace(layers=5, dense_layers=5, mla_layers=()), "f32", 5),
    ("all MLA, K=2, A=3, qlora, 2 shared", BASE.replace(mla_layers=(0, 1, 2, 3), conv_kernel=2, block_size=3,
                                                        q_lora_rank=16, shared_experts=2), "f32", 6),
    ("SiTU 0.5/1.0, no weights norm, scale 2.5, no routed norm",
     BASE.replace(situ_beta=0.5, situ_linear_beta=1.0, weights_norm=False, weights_scale=2.5, routed_norm=False), "f32", 7),
    ("SiTU lin 0 (linear up), softmax-weight gating, groups 2/1", BASE.replace(situ_linear_beta=0.0, gating="softmax-weight",
                                                                               expert_groups=2, expert_groups_used=1), "f32", 8),
    ("sqrt-softplus gating, no norm, scale 0", BASE.replace(gating="sqrt-softplus", weights_norm=False, weights_scale=0.0), "f32", 9),
    ("q8_0: qlora 32, nope 32, v 32 (Q8 k_b/v_b), softplus", BASE.replace(q_lora_rank=32, qk_nope=32, v_head_dim=32,
                                                                          gate_lower_bound=None, mla_layers=(1, 3)), "q8_0", 10),
    ("H=4 D=16", BASE.replace(heads=4, kda_head_dim=16), "f32", 11),
    ("d_in 96 != hidden 64 (H=2, D=48), MLA H*d_v 32, A=2", BASE.replace(kda_head_dim=48), "q8_0", 12),
    ("6 layers, A=3, MLA 2,5, dense 2, qlora, softmax", BASE.replace(layers=6, block_size=3, mla_layers=(2, 5),
                                                                      dense_layers=2, q_lora_rank=32, gating="softmax"), "bf16", 13),
]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--keep", help="directory for the generated GGUFs (default: a fresh /tmp dir)")
    args = ap.parse_args()
    tmp = args.keep or tempfile.mkdtemp(prefix="kimik3ref_", dir="/tmp")
    os.makedirs(tmp, exist_ok=True)
    t_start = time.time()
    rng = np.random.default_rng(123)

    # unit checks of the helpers against scalar formulas
    z = np.array([-30.0, -1.0, 0.0, 0.7, 19.9, 20.5])
    check(maxabs(ref.softplus(z), [math.log1p(math.exp(v)) if v <= 20 else v for v in z]) < 1e-15, "softplus (ggml threshold 20)")
    x = rng.normal(size=(3, 7))
    check(maxabs(ref.l2_norm(x, 1e-5), x / np.sqrt((x * x).sum(-1, keepdims=True) + 1e-5)) < 1e-15
          and abs(np.linalg.norm(ref.l2_norm(x, 0.0)[0]) - 1) < 1e-15, "l2_norm = x / sqrt(sum x^2 + eps)")
    g, u = rng.normal(size=5) * 3, rng.normal(size=5) * 3
    want = [4 * math.tanh(a / 4) / (1 + math.exp(-a)) * (2 * math.tanh(c / 2)) for a, c in zip(g, u)]
    check(maxabs(ref.situ(g, u, 4.0, 2.0), want) < 1e-14 and maxabs(ref.situ(g, u, 4.0, 0.0), np.array(want) / (2 * np.tanh(u / 2)) * u) < 1e-13,
          "SiTU formula (linear branch on / off)")
    c1, c2, uu, w = (rng.normal(size=(1, 8)) for _ in range(4))
    m = ref.res_mix(uu, [c1, c2], w[0], 1e-5)
    s = [float((v / np.sqrt((v * v).mean() + 1e-5) * w[0]).sum()) for v in (c1[0], c2[0], uu[0])]
    p = np.exp(s) / np.exp(s).sum()
    check(maxabs(m[0], p[0] * c1[0] + p[1] * c2[0] + p[2] * uu[0]) < 1e-14 and np.array_equal(ref.res_mix(uu, [], w[0], 1e-5), uu),
          "ResMix: raw vectors mixed by softmax of normalised scores; empty stack = identity")

    worst = {"naive": 0.0, "chunks": 0.0, "causal": 0.0}
    cli_done = False
    for tag, cfg, wtype, seed in CASES:
        label = f"[{tag} | {wtype}]"
        path = os.path.join(tmp, f"k3_{seed}_{wtype}.gguf")
        weights, types = mk.build(path, cfg, seed=seed, wtype=wtype)
        model = ref.KimiK3Gguf(path)
        hp = model.hp
        W = {name: stored(a, types[name]) for name, a in weights.items()}

        # ---- metadata / tensors read back --------------------------------------------------------
        ok = (hp.hidden == cfg.hidden and hp.n_layers == cfg.layers and hp.n_head == cfg.heads and hp.vocab == cfg.vocab
              and hp.kda_head_dim == cfg.kda_head_dim and hp.conv_kernel == cfg.conv_kernel
              and hp.is_mla == [i in cfg.mla_layers for i in range(cfg.layers)]
              and hp.q_lora_rank == cfg.q_lora_rank and hp.kv_lora_rank == cfg.kv_lora_rank and hp.rope_dim == cfg.rope_dim
              and hp.qk_nope == cfg.qk_nope and hp.value_length_mla == cfg.v_head_dim and hp.n_dense == cfg.dense_layers
              and hp.ffn == cfg.ffn and hp.n_expert == cfg.experts and hp.n_expert_used == cfg.experts_used
              and hp.n_expert_shared == cfg.shared_experts and hp.expert_ffn == cfg.expert_ffn and hp.latent == cfg.latent
              and hp.weights_norm == cfg.weights_norm and hp.weights_scale == f32(cfg.weights_scale)
              and ref.GATING_NAMES[hp.gating] == cfg.gating and hp.n_groups == cfg.expert_groups
              and hp.n_groups_used == cfg.expert_groups_used and hp.block_size == cfg.block_size
              and hp.situ_beta == f32(cfg.situ_beta) and hp.situ_linear_beta == f32(cfg.situ_linear_beta)
              and hp.eps == f32(cfg.eps)
              and (hp.gate_lower_bound == (None if cfg.gate_lower_bound is None else f32(cfg.gate_lower_bound))))
        check(ok, f"{label} hyperparameters read back")
        exact = all(np.array_equal(model.tensor(n), W[n]) and model.qtype(n) == types[n] for n in W)
        exact &= set(model.tensors) == set(W)
        check(exact, f"{label} all {len(W)} tensors read back == round trip of the converter's type, numpy shape = reversed ne")
        ne = {n: tuple(int(v) for v in model.tensors[n].shape) for n in model.tensors}
        E, Hh, D, K = cfg.hidden, cfg.heads, cfg.kda_head_dim, cfg.conv_kernel
        spec_ne = {"token_embd.weight": (E, cfg.vocab), "output.weight": (E, cfg.vocab)}
        for i in range(cfg.layers):
            b = f"blk.{i}."
            if i in cfg.mla_layers:
                spec_ne[b + "attn_k_b.weight"] = (cfg.qk_nope, cfg.kv_lora_rank, Hh)
                spec_ne[b + "attn_v_b.weight"] = (cfg.kv_lora_rank, cfg.v_head_dim, Hh)
                spec_ne[b + "attn_kv_a_mqa.weight"] = (E, cfg.kv_lora_rank + cfg.rope_dim)
                spec_ne[b + "attn_output.weight"] = (Hh * cfg.v_head_dim, E)
            else:
                spec_ne[b + "ssm_conv1d_q.weight"] = (K, 1, Hh * D)
                spec_ne[b + "ssm_f_a.weight"] = (E, D)
                spec_ne[b + "ssm_f_b.weight"] = (D, Hh * D)
                spec_ne[b + "ssm_beta.weight"] = (E, Hh)
                spec_ne[b + "attn_output.weight"] = (Hh * D, E)
            if i >= cfg.dense_layers:
                spec_ne[b + "ffn_gate_exps.weight"] = (cfg.latent_width, cfg.expert_ffn, cfg.experts)
                spec_ne[b + "ffn_down_exps.weight"] = (cfg.expert_ffn, cfg.latent_width, cfg.experts)
                if cfg.latent:
                    spec_ne[b + "ffn_routed_down.weight"] = (E, cfg.latent)
        check(all(ne[n] == v for n, v in spec_ne.items()), f"{label} ne of {len(spec_ne)} tensors == KIMI-K3.md tensors (orientation)")
        forced = [n for n in W if ("ffn_gate_inp" in n or "ssm_conv1d" in n or W[n].ndim == 1)]
        check(all(types[n] == GGMLQuantizationType.F32 for n in forced), f"{label} 1-D / router / conv tensors stored F32")

        if seed == 1 and wtype == "f32":  # tokenizer, once
            rd = GGUFReader(path)
            toks = rd.get_field("tokenizer.ggml.tokens").contents()
            merges = rd.get_field("tokenizer.ggml.merges").contents()
            ttype = rd.get_field("tokenizer.ggml.token_type").contents()
            tset = set(toks)
            b2u = mk.bytes_to_unicode()
            check(len(toks) == cfg.vocab == len(ttype) and toks[:256] == [b2u[i] for i in range(256)]
                  and all(len(mm.split(" ")) == 2 and "".join(mm.split(" ")) in tset and all(pp in tset for pp in mm.split(" "))
                          for mm in merges)
                  and toks[-3:] == mk.CONTROL and ttype[-3:] == [3, 3, 3] and set(ttype[:-3]) == {1}
                  and rd.get_field("tokenizer.ggml.bos_token_id").contents() == cfg.vocab - 3
                  and rd.get_field("tokenizer.ggml.eos_token_id").contents() == cfg.vocab - 1
                  and rd.get_field("tokenizer.ggml.model").contents() == "gpt2"
                  and rd.get_field("tokenizer.ggml.pre").contents() == "qwen2"
                  and rd.get_field("tokenizer.ggml.add_bos_token").contents() is False,
                  f"{label} tokenizer: 256 byte tokens, {len(merges)} valid merges, control tokens, bos/eos ids")

        # ---- vectorized vs naive -------------------------------------------------------------------
        n_tok = 7
        tokens = [int(t) for t in rng.integers(0, cfg.vocab - 3, size=n_tok)]
        cap_all = [-1] + list(range(cfg.layers))
        st_full = ref.State(model)
        tr: dict = {}
        logits, caps = ref.forward_model(model, tokens, cap_all, state=st_full, trace=tr)
        nl, nc, nfinal = naive_forward(cfg, W, tokens, cap_all)
        scale = max(1.0, float(np.abs(nl).max()))
        dl, dc = maxabs(logits, nl) / scale, maxabs(caps, nc) / max(1.0, float(np.abs(nc).max()))
        worst["naive"] = max(worst["naive"], dl, dc)
        check(dl < 1e-12 and dc < 1e-12, f"{label} vectorized == naive loop (rel dlogit {dl:.1e}, dtap {dc:.1e})")
        ds = max(maxabs(st_full.layers[i][key], nfinal[i][key]) for i in nfinal for key in nfinal[i])
        check(ds < 1e-12, f"{label} final KDA S / conv windows / MLA cache == naive token-by-token ({ds:.1e})")
        if wtype == "q8_0":
            rnd = {n: q8_round for n, t in types.items() if t == Q8}
            lq, cq = ref.forward_model(model, tokens, cap_all, q8_activations=True)
            nlq, ncq, _ = naive_forward(cfg, W, tokens, cap_all, rnd)
            d1 = maxabs(lq, nlq) / scale
            check(d1 < 1e-12 and maxabs(cq, ncq) < 1e-12 * max(1, np.abs(ncq).max()) and maxabs(lq, logits) > 1e-6,
                  f"{label} --q8-activations == naive with Q8_0 rounding of every Q8_0 product's input ({d1:.1e}; "
                  f"moves logits by {maxabs(lq, logits):.2e})")
        else:
            lq, _ = ref.forward_model(model, tokens, [], q8_activations=True)
            check(np.array_equal(lq, logits), f"{label} --q8-activations is a no-op without Q8_0 weights")
        if wtype != "f32":
            fn = {GGMLQuantizationType.F16: f16_round, GGMLQuantizationType.BF16: bf16_round, Q8: q8_round}
            rnd = {n: fn[t] for n, t in types.items() if t in fn}
            lg_, cg_ = ref.forward_model(model, tokens, cap_all, ggml_activations=True)
            nlg, ncg, _ = naive_forward(cfg, W, tokens, cap_all, rnd)
            d1 = max(maxabs(lg_, nlg) / scale, maxabs(cg_, ncg) / max(1, np.abs(ncg).max()))
            check(d1 < 1e-12, f"{label} --ggml-activations == naive with Q8_0/F16/BF16 input rounding per weight type ({d1:.1e})")
        check(np.all(np.isfinite(logits)) and len(set(np.argmax(logits, -1).tolist())) > 1,
              f"{label} logits finite, argmax not constant (|logit| <= {np.abs(logits).max():.1f})")

        # ---- taps -----------------------------------------------------------------------------------
        Ec = cfg.hidden
        tap = lambda l: caps[:, (l + 1) * Ec:(l + 2) * Ec]  # noqa: E731  (cap_all = [-1, 0, 1, ...])
        check(np.array_equal(tap(-1), W["token_embd.weight"][tokens]), f"{label} capture -1 = embedding rows")
        check(all(np.array_equal(tap(l), tr["a_in"][l + 1]) for l in range(cfg.layers - 1)),
              f"{label} tap l == attention input a_in of layer l+1")
        if cfg.block_size == 0:
            check(all(np.array_equal(tap(l), tr["P"][l]) for l in range(cfg.layers)), f"{label} block size 0: tap == plain residual P")
        else:
            dmix = min(maxabs(tap(l), tr["P"][l]) for l in range(cfg.layers))
            check(dmix > 1e-3, f"{label} taps differ from the raw partial sum P (min max|d| {dmix:.2e})")
        last = tap(cfg.layers - 1)
        rl = ref.rms_norm(last, W["output_norm.weight"], hp.eps) @ W["output.weight"].T
        check(maxabs(rl, logits) < 1e-12 * scale, f"{label} last-layer tap -> output_norm -> output == logits")
        _, c_ord = ref.forward_model(model, tokens, [cfg.layers - 1, 0])
        check(np.array_equal(c_ord, np.concatenate([tap(cfg.layers - 1), tap(0)], axis=1)), f"{label} captured in --capture order")

        # ---- causality ------------------------------------------------------------------------------
        wc = 0.0
        for mlen in (1, 3, n_tok - 1):
            lp, cp = ref.forward_model(model, tokens[:mlen], cap_all)
            wc = max(wc, maxabs(lp, logits[:mlen]) / scale, maxabs(cp, caps[:mlen]))
        t2 = list(tokens)
        t2[-1] = (t2[-1] + 1) % cfg.vocab
        t2[-2] = (t2[-2] + 7) % cfg.vocab
        l2, _ = ref.forward_model(model, t2, [])
        worst["causal"] = max(worst["causal"], wc)
        check(wc < 1e-12 and maxabs(l2[:-2], logits[:-2]) < 1e-12 * scale and maxabs(l2[-1], logits[-1]) > 1e-6,
              f"{label} causality: prefixes == first rows, later tokens do not change earlier rows")

        # ---- chunks with carried state ----------------------------------------------------------
        Km1 = cfg.conv_kernel - 1
        plans = [[1] * n_tok, [2, 2, 2, 1], [3, 3, 1], [max(1, Km1 - 1), Km1 + 1, 1, n_tok]]
        wch = 0.0
        for plan in plans:
            sess = ref.Session(model)
            outs_l, outs_c, pos = [], [], 0
            for sz in plan:
                if pos >= n_tok:
                    break
                lo, co = sess.run(tokens[pos:pos + sz], cap_all)
                outs_l.append(lo)
                outs_c.append(co)
                pos += sz
            d = max(maxabs(np.concatenate(outs_l), logits) / scale, maxabs(np.concatenate(outs_c), caps),
                    max(maxabs(sess.state.layers[i][k_], st_full.layers[i][k_]) for i in range(cfg.layers) for k_ in st_full.layers[i]))
            wch = max(wch, d)
        worst["chunks"] = max(worst["chunks"], wch)
        check(wch < 1e-12 and sess.state.n_past == n_tok,
              f"{label} chunks {[p_ for p_ in plans]} with carried state == all at once ({wch:.1e})")

        # ---- CLI once --------------------------------------------------------------------------------
        if not cli_done:
            out = os.path.join(tmp, "cli.json")
            subprocess.run([sys.executable, os.path.join(HERE, "kimi_k3_ref.py"), path, "--tokens", ",".join(map(str, tokens)),
                            "--capture=-1,3,1", "--out", out], check=True)
            doc = json.load(open(out))
            _, c_cli = ref.forward_model(model, tokens, [-1, 3, 1])
            check(np.array_equal(np.array(doc["logits"]), logits) and np.array_equal(np.array(doc["captured"]), c_cli)
                  and doc["argmax"] == np.argmax(logits, -1).tolist(), f"{label} CLI JSON == forward_model() (bit-exact)")
            cli_done = True

    # refusals: a tensor llama.cpp would load but never use (attn_q.bias on a KDA layer), and an extra one
    refused = []
    for extra in ("blk.0.attn_q.bias", "blk.1.some_extra.weight"):
        bad = os.path.join(tmp, "bad.gguf")
        w_ = mk.make_weights(BASE, seed=1)
        w_[extra] = np.zeros(BASE.hidden, np.float32)
        mk.write_gguf(bad, BASE, w_)
        try:
            ref.KimiK3Gguf(bad)
            refused.append(False)
        except (ValueError, NotImplementedError):
            refused.append(True)
    check(all(refused), "files with unused / unconsumed tensors are refused")
    print(f"\nworst relative: vectorized vs naive {worst['naive']:.1e}, chunks vs full {worst['chunks']:.1e}, "
          f"causal prefixes {worst['causal']:.1e}  ({time.time() - t_start:.1f}s)")
    print(f"{'ALL PASS' if not FAILS else f'{len(FAILS)} FAILED'}  (GGUFs in {tmp})")
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())

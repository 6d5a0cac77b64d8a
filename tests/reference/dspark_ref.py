#!/usr/bin/env python3
"""Independent float64 numpy reference of a DSpark/DFlash drafter read from a ``dflash-draft`` GGUF.

What it is
----------
A test oracle for dspark's draft step: given a Qwen3 target GGUF (llama.cpp ``qwen3`` layout), a
``dflash-draft`` drafter GGUF and a prompt, it computes the FIRST draft round after prefilling the
prompt: the anchor x0 (the target's greedy next token), the drafter's block forward, the base
logits through the target's lm head, and -- when the file has them -- the vanilla Markov head chain
and the confidence head. Written from the math of docs/RUNTIME-MATH.md sections 1.1-1.8, 2.1-2.3,
3.1 and 3.3 and the GGUF contract (docs/GGUF.md section 5); it shares no code with the Rust
crates. The target part reuses tests/reference/qwen3_ref.py (``Qwen3Gguf``, ``forward_model``,
``rms_norm``, ``rope_neox``, ``silu``). Weights are dequantized exactly with gguf-py and all
arithmetic is float64.

The math (prompt t_0..t_{P-1}; context rows at positions 0..P-1; block at positions P..P+B-1)
-------------------------------------------------------------------------------------------
  target prefill:  logits, F = forward_model(target, prompt, capture=target_layer_ids)
                   x0 = argmax logits[P-1]          (lowest index on ties)
                   f_p = F[p] = concat of the captured residual streams (pre final norm),
                        in target_layer_ids order, dimension n_cap * H
  fusion:          c_p = RMSNorm(W_fc f_p, hidden_norm)                              (1.2)
  block input:     z = token_embd_target[[x0, MASK, ..., MASK]]   (B rows)             (1.3)
  per draft layer (1.4):
      context:  K_c = RoPE(RMSNorm_d(W_k c, k_norm), p),  V_c = W_v c   (NO attn_norm on c)
      block:    u = RMSNorm(z, attn_norm)
                Q   = RoPE(RMSNorm_d(W_q u, q_norm)),  K_b = RoPE(RMSNorm_d(W_k u, k_norm)),  V_b = W_v u
      attention: every block row attends to ALL keys [K_c ; K_b] (no causal mask, no context mask),
                GQA head h -> kv head h // (H / Hkv), scale 1/sqrt(head_dim), softmax over keys
      z += W_o concat_heads(attn);  y = RMSNorm(z, ffn_norm);  z += W_down(silu(W_gate y) * W_up y)
  h = RMSNorm(z, output_norm)                       (B x H; no further norm before the lm head)
  rows (1.7): sample_from_anchor -> rows 0..B-1 give x_1..x_B; else rows 1..B-1 give x_1..x_{B-1}
  base logits (1.8): U_k = W_lm h_row, W_lm = target output.weight (token_embd.weight when tied)
  Markov head (3.1, greedy): e_k = w1[x_{k-1}] (x_0 = anchor), l_k = U_k + w2 e_k, x_k = argmax l_k
  confidence (3.3): c_k = sigmoid(w . [h_row ; e_k] + b) if C = H + R,  sigmoid(w . h_row + b) if C = H
  without a Markov head: x_k = argmax U_k and no confidences.
  RMSNorm(x, w) = w * x / sqrt(mean(x^2) + eps), eps = the drafter's
  attention.layer_norm_rms_epsilon (its float32 value); the target uses its own eps.

RoPE (2.1-2.2), NeoX half rotation over the whole head (r = head_dim), angles p * omega_i in float64:
  plain:  omega_i = theta^(-2i/r)
  YaRN (rope.scaling.type == "yarn"):  s = factor, L0 = original_context_length,
      corr(n) = r ln(L0 / (2 pi n)) / (2 ln theta);  low = max(0, floor(corr(beta_fast)));
      high = min(r - 1, ceil(corr(beta_slow)));  high += 0.001 if low == high;
      ramp_i = clamp((i - low) / (high - low), 0, 1);  omega_i = omega_i^base / s * ramp_i
      + omega_i^base * (1 - ramp_i);  mscale = rope.scaling.attn_factor if present, else
      0.1 ln s + 1 (1 when s <= 1); the rotated q and k are both multiplied by mscale
      (= cos and sin multiplied by mscale).

--q8-activations (dspark's / ggml's CPU matmul numerics): before every product with a Q8_0 weight the
activation row is rounded to Q8_0 (via float32, ggml's x86 recipe, ggml_q8.py): the target's own products
(qwen3_ref), the drafter's fc, q/k/v/o, gate/up/down, the target's lm head when Q8_0 and the Markov
w2 product. Not rounded: the w1 row lookup (a plain dequantized row, used as is by w2's rounding and
by the confidence head), the token embedding lookup, norms, RoPE, attention, the confidence dot
product.

Refused (NotImplementedError / ValueError) rather than approximated: rope.scaling.type other than
none/yarn, partial rotary, markov_head_type other than vanilla, aux hidden norms, attention gates,
Domino heads, context_kv_layer_norm, sliding-window layers, a Markov vocab != the target vocab, a
confidence dim other than H or H + R, fc ne[0] != len(target_layer_ids) * H, missing tensors.

How to run
----------
  /tmp/pyenv/bin/python tests/reference/dspark_ref.py TARGET.gguf DRAFT.gguf --prompt 7,8,9 \
      [--q8-activations] --out OUT.json
writes {"anchor": x0, "drafted": [x_1..], "confidences": [c_1..] (empty without the heads),
        "hidden": [[H floats] per draft row used], "base_logits_argmax": [argmax U_k per draft]}.
As a module: ``draft_first_round(target_path, draft_path, prompt, q8_activations=False) -> dict``
(same keys, numpy arrays for hidden/confidences plus a few extras: "base_logits", "logits",
"block_hidden", "rows"). Lower-level pieces (``DraftGguf``, ``rope_tables``, ``yarn_tables``,
``draft_block_forward``, ``draft_heads``, ``draft_round``) are used by dspark_selftest.py.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
from gguf import GGUFReader, GGMLQuantizationType
from gguf.quants import dequantize, quantize

from ggml_q8 import round_q8_activations

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from qwen3_ref import Qwen3Gguf, forward_model, rms_norm, rope_neox, silu  # noqa: E402

ARCH = "dflash-draft"
Q8_0 = GGMLQuantizationType.Q8_0


@dataclass
class RopeParams:
    theta: float
    dim: int                      # rotary dim r (= head_dim)
    kind: str = "none"            # "none" or "yarn"
    factor: float = 1.0
    orig_ctx: int = 0
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    attn_factor: float | None = None   # rope.scaling.attn_factor when present


@dataclass
class DraftHparams:
    hidden: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    ffn: int
    eps: float
    rope: RopeParams
    block_size: int
    target_layer_ids: list[int]
    mask_token_id: int
    sample_from_anchor: bool
    has_markov: bool
    markov_rank: int = 0
    markov_vocab: int = 0
    conf_dim: int = 0             # 0 = no confidence head
    notes: list[str] = field(default_factory=list)


class DraftGguf(Qwen3Gguf):
    """A dflash-draft GGUF opened lazily (reuses Qwen3Gguf's tensor()/rows()/_field())."""

    def __init__(self, path: str):  # noqa: D401 -- deliberately not calling Qwen3Gguf.__init__
        self.path = path
        self.reader = GGUFReader(path, "r")
        self.tensors = {t.name: t for t in self.reader.tensors}
        arch = self._field("general.architecture")
        if arch != ARCH:
            raise ValueError(f"{path}: general.architecture is {arch!r}, expected {ARCH!r}")
        k = lambda s: f"{ARCH}.{s}"  # noqa: E731
        hidden = int(self._field(k("embedding_length")))
        n_heads = int(self._field(k("attention.head_count")))
        head_dim = int(self._field(k("attention.key_length")))
        rope_dim = int(self._field(k("rope.dimension_count"), head_dim))
        if rope_dim != head_dim:
            raise NotImplementedError(f"rope.dimension_count {rope_dim} != key_length {head_dim} (partial rotary)")
        value_dim = int(self._field(k("attention.value_length"), head_dim))
        if value_dim != head_dim:
            raise ValueError(f"value_length {value_dim} != key_length {head_dim}")
        rope = RopeParams(theta=float(self._field(k("rope.freq_base"))), dim=head_dim)
        kind = str(self._field(k("rope.scaling.type"), "none"))
        if kind == "yarn":
            rope.kind = "yarn"
            orig = self._field(k("rope.scaling.original_context_length"))
            rope.orig_ctx = int(orig)
            fac = self._field(k("rope.scaling.factor"), None)
            if fac is None:  # HF's rule (docs/RUNTIME-MATH.md 2.2): s = max_position_embeddings / L0
                fac = float(self._field(k("context_length"))) / rope.orig_ctx
            rope.factor = float(fac)
            rope.beta_fast = float(self._field(k("rope.scaling.yarn_beta_fast"), 32.0))
            rope.beta_slow = float(self._field(k("rope.scaling.yarn_beta_slow"), 1.0))
            af = self._field(k("rope.scaling.attn_factor"), None)
            rope.attn_factor = None if af is None else float(af)
        elif kind not in ("none", ""):
            raise NotImplementedError(f"rope.scaling.type {kind!r} is not implemented (only none / yarn)")

        # variants this reference does not implement: refuse rather than silently compute something else
        for name in self.tensors:
            if name.startswith(("dflash.aux_hidden_norm.", "dflash.domino.")) or name.endswith("attn_gate.weight"):
                raise NotImplementedError(f"tensor {name}: aux hidden norms / attention gates / Domino not implemented")
        if int(self._field(k("dflash.context_kv_layer_norm"), 0)):
            raise NotImplementedError("dflash.context_kv_layer_norm != 0 is not implemented")
        if self._field(k("attention.sliding_window_pattern"), None) is not None:
            raise NotImplementedError("sliding-window draft layers are not implemented")
        mht = str(self._field(k("dflash.dspark.markov_head_type"), "vanilla"))
        if mht != "vanilla":
            raise NotImplementedError(f"markov_head_type {mht!r} (only vanilla)")
        ids = self._field(k("dflash.target_layer_ids"))
        ids = [int(v) for v in (ids if isinstance(ids, list) else [ids])]
        has_w1, has_w2 = "dflash.dspark.markov.w1" in self.tensors, "dflash.dspark.markov.w2" in self.tensors
        if has_w1 != has_w2:
            raise ValueError("Markov head needs both dflash.dspark.markov.w1 and .w2")
        has_cw = "dflash.dspark.confidence.weight" in self.tensors
        has_cb = "dflash.dspark.confidence.bias" in self.tensors
        if has_cw != has_cb:
            raise ValueError("confidence head needs both dflash.dspark.confidence.weight and .bias")
        notes = []
        sfa = self._field(k("dflash.sample_from_anchor"), None)
        if sfa is None:
            sfa = has_w1
            notes.append(f"dflash.sample_from_anchor absent: using {sfa} (true iff a Markov head is present)")
        self.hp = DraftHparams(
            hidden=hidden,
            n_layers=int(self._field(k("block_count"))),
            n_heads=n_heads,
            n_kv_heads=int(self._field(k("attention.head_count_kv"))),
            head_dim=head_dim,
            ffn=int(self._field(k("feed_forward_length"))),
            eps=float(self._field(k("attention.layer_norm_rms_epsilon"))),
            rope=rope,
            block_size=int(self._field(k("dflash.block_size"))),
            target_layer_ids=ids,
            mask_token_id=int(self._field(k("dflash.mask_token_id"))),
            sample_from_anchor=bool(sfa),
            has_markov=has_w1,
            notes=notes,
        )
        if has_w1:
            r, v = (int(x) for x in self.tensors["dflash.dspark.markov.w1"].shape[:2])
            self.hp.markov_rank, self.hp.markov_vocab = r, v
        if has_cw:
            self.hp.conf_dim = int(self.tensors["dflash.dspark.confidence.weight"].shape[0])
        self._check()

    def _check(self) -> None:
        hp = self.hp
        if min(hp.hidden, hp.n_layers, hp.n_heads, hp.n_kv_heads, hp.head_dim, hp.ffn) <= 0:
            raise ValueError("zero hyperparameter")
        if hp.n_heads % hp.n_kv_heads:
            raise ValueError(f"head_count {hp.n_heads} not a multiple of head_count_kv {hp.n_kv_heads}")
        if hp.block_size < 2:
            raise ValueError(f"dflash.block_size {hp.block_size} < 2")
        if hp.head_dim % 2:
            raise ValueError("odd head_dim")
        n_cap = len(hp.target_layer_ids)
        qd, kvd, H = hp.n_heads * hp.head_dim, hp.n_kv_heads * hp.head_dim, hp.hidden
        want = {"dflash.fc.weight": (n_cap * H, H), "dflash.hidden_norm.weight": (H,),
                "output_norm.weight": (H,)}
        for i in range(hp.n_layers):
            b = f"blk.{i}."
            want.update({
                b + "attn_norm.weight": (H,), b + "attn_q.weight": (H, qd), b + "attn_k.weight": (H, kvd),
                b + "attn_v.weight": (H, kvd), b + "attn_output.weight": (qd, H),
                b + "attn_q_norm.weight": (hp.head_dim,), b + "attn_k_norm.weight": (hp.head_dim,),
                b + "ffn_norm.weight": (H,), b + "ffn_gate.weight": (H, hp.ffn), b + "ffn_up.weight": (H, hp.ffn),
                b + "ffn_down.weight": (hp.ffn, H)})
        if hp.has_markov:
            want["dflash.dspark.markov.w2"] = (hp.markov_rank, hp.markov_vocab)
        if hp.conf_dim:
            want["dflash.dspark.confidence.bias"] = (1,)
        for name, ne in want.items():
            t = self.tensors.get(name)
            if t is None:
                raise KeyError(f"{self.path}: missing tensor {name}")
            got = tuple(int(v) for v in t.shape)
            while len(got) > len(ne) and got[-1] == 1:
                got = got[:-1]
            if got != ne:
                raise ValueError(f"{name}: ne {list(got)}, expected {list(ne)}"
                                 + (" (fc ne[0] must be len(target_layer_ids) * H)" if "fc" in name else ""))
        if hp.conf_dim:
            cw = tuple(int(v) for v in self.tensors["dflash.dspark.confidence.weight"].shape)
            if cw[1:] not in ((), (1,)):
                raise ValueError(f"confidence.weight ne {list(cw)}, expected [C, 1]")

    def is_q8(self, name: str) -> bool:
        return self.tensors[name].tensor_type == Q8_0


# ---- RoPE -------------------------------------------------------------------------------------

def yarn_tables(r: int, theta: float, factor: float, orig_ctx: int, beta_fast: float = 32.0,
                beta_slow: float = 1.0, attn_factor: float | None = None) -> dict:
    """Spec 2.2 (HF _compute_yarn_parameters, truncate=true). Returns omega [r/2], mscale and the
    intermediate values (corr_fast, corr_slow, low, high, ramp)."""
    def corr(n: float) -> float:
        return r * math.log(orig_ctx / (2 * math.pi * n)) / (2 * math.log(theta))
    cf, cs = corr(beta_fast), corr(beta_slow)
    low = max(0.0, float(math.floor(cf)))
    high = min(float(r - 1), float(math.ceil(cs)))
    if low == high:
        high += 0.001
    i = np.arange(r // 2, dtype=np.float64)
    ramp = np.clip((i - low) / (high - low), 0.0, 1.0)
    base = np.power(np.float64(theta), -2.0 * i / r)
    omega = (base / factor) * ramp + base * (1.0 - ramp)   # gamma_i = 1 - ramp_i keeps the base frequency
    if attn_factor is not None:
        mscale = float(attn_factor)
    else:
        mscale = 0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0
    return {"omega": omega, "mscale": mscale, "corr_fast": cf, "corr_slow": cs, "low": low, "high": high,
            "ramp": ramp, "base": base}


def rope_tables(rp: RopeParams) -> tuple[np.ndarray, float]:
    """(omega [r/2], mscale)."""
    if rp.kind == "yarn":
        t = yarn_tables(rp.dim, rp.theta, rp.factor, rp.orig_ctx, rp.beta_fast, rp.beta_slow, rp.attn_factor)
        return t["omega"], t["mscale"]
    i = np.arange(rp.dim // 2, dtype=np.float64)
    return np.power(np.float64(rp.theta), -2.0 * i / rp.dim), 1.0


def apply_rope(x: np.ndarray, positions: Sequence[int], omega: np.ndarray, mscale: float) -> np.ndarray:
    """x [n, heads, d]; NeoX rotation at the given absolute positions, scaled by mscale."""
    phi = np.asarray(positions, dtype=np.float64)[:, None] * omega[None, :]
    out = rope_neox(x, phi, 2 * omega.shape[0])
    return out * mscale if mscale != 1.0 else out


# ---- products -----------------------------------------------------------------------------------

def q8_round(a: np.ndarray) -> np.ndarray:
    """Round each row (last axis, blocks of 32) to Q8_0 through float32, return float64."""
    shp = a.shape
    flat = np.ascontiguousarray(a.reshape(-1, shp[-1]), dtype=np.float32)
    return round_q8_activations(flat).reshape(shp).astype(np.float64)


def _matvec(model: Qwen3Gguf, name: str, a: np.ndarray, q8: bool, W: np.ndarray | None = None) -> np.ndarray:
    """a @ W.T with W = tensor `name` (numpy (rows, cols)); activation rounded when q8 and W is Q8_0."""
    if W is None:
        W = model.tensor(name)
    if q8 and model.tensors[name].tensor_type == Q8_0:
        a = q8_round(a)
    return a @ W.T


def lm_head(target: Qwen3Gguf, h: np.ndarray, q8: bool, chunk: int = 16384) -> np.ndarray:
    """U = W_lm h for rows of h [n, H] -> [n, V] (target output.weight or tied token_embd)."""
    name = target.output_name()
    if q8 and target.tensors[name].tensor_type == Q8_0:
        h = q8_round(h)
    V = target.hp.vocab
    out = np.empty((h.shape[0], V))
    for s in range(0, V, chunk):
        e = min(V, s + chunk)
        out[:, s:e] = h @ target.rows(name, np.arange(s, e)).T
    return out


# ---- drafter forward ---------------------------------------------------------------------------

def full_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Unmasked GQA: q [n, H, d], k/v [m, Hkv, d] -> [n, H*d]. Query head h reads kv head h // (H/Hkv)."""
    n, H, d = q.shape
    group = H // k.shape[1]
    kh, vh = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    s = np.einsum("qhd,khd->hqk", q, kh) / math.sqrt(d)
    s = s - s.max(axis=-1, keepdims=True)
    p = np.exp(s)
    p = p / p.sum(axis=-1, keepdims=True)
    return np.einsum("hqk,khd->qhd", p, vh).reshape(n, H * d)


def fuse_context(draft: DraftGguf, features: np.ndarray, q8: bool = False) -> np.ndarray:
    """c_p = RMSNorm(W_fc f_p, hidden_norm); features [P, n_cap*H] -> [P, H]."""
    hp = draft.hp
    return rms_norm(_matvec(draft, "dflash.fc.weight", features, q8),
                    draft.tensor("dflash.hidden_norm.weight"), hp.eps)


def draft_block_forward(draft: DraftGguf, c: np.ndarray, ctx_pos: Sequence[int], z0: np.ndarray,
                        block_pos: Sequence[int], q8: bool = False, return_kv: bool = False):
    """The drafter's decoder stack. c [P, H] fused context rows at ctx_pos; z0 [B, H] block input
    embeddings at block_pos. Returns h [B, H] = RMSNorm(z, output_norm) (and per-layer context K/V
    if return_kv)."""
    hp = draft.hp
    eps, d, H, Hkv = hp.eps, hp.head_dim, hp.n_heads, hp.n_kv_heads
    omega, mscale = rope_tables(hp.rope)
    P, B = c.shape[0], z0.shape[0]
    z = np.array(z0, dtype=np.float64, copy=True)
    kvs = []
    for i in range(hp.n_layers):
        b = f"blk.{i}."
        Wk, Wv = draft.tensor(b + "attn_k.weight"), draft.tensor(b + "attn_v.weight")
        qn, kn = draft.tensor(b + "attn_q_norm.weight"), draft.tensor(b + "attn_k_norm.weight")
        # context K/V: no input layernorm on c
        kc = _matvec(draft, b + "attn_k.weight", c, q8, Wk).reshape(P, Hkv, d)
        kc = apply_rope(rms_norm(kc, kn, eps), ctx_pos, omega, mscale)
        vc = _matvec(draft, b + "attn_v.weight", c, q8, Wv).reshape(P, Hkv, d)
        # block
        u = rms_norm(z, draft.tensor(b + "attn_norm.weight"), eps)
        q = _matvec(draft, b + "attn_q.weight", u, q8).reshape(B, H, d)
        q = apply_rope(rms_norm(q, qn, eps), block_pos, omega, mscale)
        kb = _matvec(draft, b + "attn_k.weight", u, q8, Wk).reshape(B, Hkv, d)
        kb = apply_rope(rms_norm(kb, kn, eps), block_pos, omega, mscale)
        vb = _matvec(draft, b + "attn_v.weight", u, q8, Wv).reshape(B, Hkv, d)
        kvs.append((kc, vc))
        a = full_attention(q, np.concatenate([kc, kb]), np.concatenate([vc, vb]))
        z = z + _matvec(draft, b + "attn_output.weight", a, q8)
        y = rms_norm(z, draft.tensor(b + "ffn_norm.weight"), eps)
        g = _matvec(draft, b + "ffn_gate.weight", y, q8)
        up = _matvec(draft, b + "ffn_up.weight", y, q8)
        z = z + _matvec(draft, b + "ffn_down.weight", silu(g) * up, q8)
    h = rms_norm(z, draft.tensor("output_norm.weight"), eps)
    return (h, kvs) if return_kv else h


def draft_rows(hp: DraftHparams) -> list[int]:
    """Block rows that produce drafts, in draft order (docs/RUNTIME-MATH.md 1.7)."""
    return list(range(hp.block_size)) if hp.sample_from_anchor else list(range(1, hp.block_size))


def draft_heads(draft: DraftGguf, target: Qwen3Gguf, h_rows: np.ndarray, anchor: int, q8: bool = False) -> dict:
    """Base logits + (Markov chain, confidence) on the draft rows h_rows [n, H], in draft order."""
    hp = draft.hp
    U = lm_head(target, h_rows, q8)
    base_argmax = [int(v) for v in np.argmax(U, axis=-1)]
    out = {"base_logits": U, "base_logits_argmax": base_argmax}
    if not hp.has_markov:
        out.update(drafted=list(base_argmax), confidences=np.zeros(0), logits=U.copy())
        return out
    if hp.markov_vocab != target.hp.vocab:
        raise ValueError(f"Markov vocab {hp.markov_vocab} != target vocab {target.hp.vocab}")
    R, H = hp.markov_rank, hp.hidden
    conf = None
    if hp.conf_dim:
        if hp.conf_dim not in (H, H + R):
            raise ValueError(f"confidence dim {hp.conf_dim} is neither H={H} nor H+R={H + R}")
        cw = draft.tensor("dflash.dspark.confidence.weight").reshape(-1)
        cb = float(draft.tensor("dflash.dspark.confidence.bias").reshape(-1)[0])
        conf = []
    w2 = draft.tensor("dflash.dspark.markov.w2")  # numpy (V, R)
    prev, drafted, logits = int(anchor), [], np.empty_like(U)
    for k in range(h_rows.shape[0]):
        e = draft.rows("dflash.dspark.markov.w1", [prev])[0]          # plain dequantized row, never rounded
        lk = U[k] + _matvec(draft, "dflash.dspark.markov.w2", e[None, :], q8, w2)[0]
        logits[k] = lk
        if conf is not None:
            x = np.concatenate([h_rows[k], e]) if hp.conf_dim == H + R else h_rows[k]
            conf.append(1.0 / (1.0 + math.exp(-(float(cw @ x) + cb))))
        prev = int(np.argmax(lk))
        drafted.append(prev)
    out.update(drafted=drafted, confidences=np.array(conf if conf is not None else []), logits=logits)
    return out


def draft_round(draft: DraftGguf, target: Qwen3Gguf, features: np.ndarray, ctx_pos: Sequence[int],
                anchor: int, block_start: int, q8: bool = False) -> dict:
    """One draft round: context feature rows [P, n_cap*H] at ctx_pos, anchor at position block_start."""
    hp = draft.hp
    if target.hp.hidden != hp.hidden:
        raise ValueError(f"draft hidden {hp.hidden} != target hidden {target.hp.hidden}")
    for t in (anchor, hp.mask_token_id):
        if not 0 <= t < target.hp.vocab:
            raise ValueError(f"token {t} out of range of the target vocab {target.hp.vocab}")
    c = fuse_context(draft, features, q8)
    tokens = [int(anchor)] + [hp.mask_token_id] * (hp.block_size - 1)
    z0 = target.rows("token_embd.weight", tokens)   # the target's embedding (Qwen3: no scaling)
    block_pos = np.arange(block_start, block_start + hp.block_size)
    h = draft_block_forward(draft, c, ctx_pos, z0, block_pos, q8)
    rows = draft_rows(hp)
    res = draft_heads(draft, target, h[rows], anchor, q8)
    res.update(anchor=int(anchor), hidden=h[rows], block_hidden=h, rows=rows)
    return res


def draft_first_round(target_path, draft_path, prompt: Sequence[int], q8_activations: bool = False) -> dict:
    """First round after prefilling `prompt`: anchor = target's argmax after the prompt, context rows
    0..P-1, block at P..P+B-1. Paths or already opened Qwen3Gguf / DraftGguf objects."""
    target = target_path if isinstance(target_path, Qwen3Gguf) and not isinstance(target_path, DraftGguf) \
        else Qwen3Gguf(target_path)
    draft = draft_path if isinstance(draft_path, DraftGguf) else DraftGguf(draft_path)
    prompt = [int(t) for t in prompt]
    logits, feats = forward_model(target, prompt, draft.hp.target_layer_ids, q8_activations=q8_activations)
    anchor = int(np.argmax(logits[-1]))
    P = len(prompt)
    res = draft_round(draft, target, feats, np.arange(P), anchor, P, q8_activations)
    res["target_logits_last"] = logits[-1]
    res["features"] = feats
    return res


def _int_list(s: str) -> list[int]:
    s = s.strip()
    return [int(v) for v in s.split(",") if v.strip()] if s else []


def to_json(res: dict) -> dict:
    return {
        "anchor": int(res["anchor"]),
        "drafted": [int(v) for v in res["drafted"]],
        "confidences": [float(v) for v in res["confidences"]],
        "hidden": np.asarray(res["hidden"]).tolist(),
        "base_logits_argmax": [int(v) for v in res["base_logits_argmax"]],
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="float64 numpy reference of a DSpark/DFlash drafter's first round")
    ap.add_argument("target", help="target model GGUF (llama.cpp qwen3 layout)")
    ap.add_argument("draft", help="drafter GGUF (general.architecture = dflash-draft)")
    ap.add_argument("--prompt", required=True, type=_int_list, help="comma-separated prompt token ids")
    ap.add_argument("--q8-activations", action="store_true",
                    help="round activations to Q8_0 before products with Q8_0 weights (ggml/dspark CPU numerics)")
    ap.add_argument("--out", required=True, help="output JSON path ('-' for stdout)")
    args = ap.parse_args(argv)
    if not args.prompt:
        print("dspark_ref: error: empty prompt", file=sys.stderr)
        return 2
    try:
        res = draft_first_round(args.target, args.draft, args.prompt, args.q8_activations)
    except (ValueError, KeyError, NotImplementedError) as e:
        print(f"dspark_ref: error: {e}", file=sys.stderr)
        return 2
    doc = to_json(res)
    if args.out == "-":
        json.dump(doc, sys.stdout)
        sys.stdout.write("\n")
    else:
        with open(args.out, "w") as f:
            json.dump(doc, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Independent float64 numpy reference forward pass of a Kimi-K3 target read from a llama.cpp ``kimi-k3`` GGUF.

What it is
----------
A test oracle for the dspark Rust runtime, written from docs/KIMI-K3.md (the kimi-k3 layout: keys,
tensors, forward pass) and docs/RUNTIME-MATH.md §1.1 (taps) / §6.3 (KDA), checked against llama.cpp's
src/models/kimi-k3.cpp, llama-graph.cpp build_moe_ffn and ggml-cpu ops.cpp (gated_delta_net, ssm_conv).
It shares no code with the Rust crates. Weights of any type gguf-py can dequantize are dequantized exactly
(gguf.quants.dequantize), then all arithmetic is float64.

The math (tokens t_0..t_{n-1}; no positions anywhere: K3 is NoPE)
----------------------------------------------------------------
  RMSNorm(x)·w = x / sqrt(mean(x²) + ε) · w,  ε = attention.layer_norm_rms_epsilon (its float32 value)
  x_0 = token_embd[t];  P = x_0;  checkpoint stack C = [] (per token);  A = attn_res.block_size
  per layer l:
      a_in = A>0 ? ResMix(P; attn_res_score_l) : P          (ResMix with an empty stack = identity)
      banked = A>0 and l % A == 0;  if banked: C.append(P)  (the RAW input, after a_in was computed)
      h = RMSNorm(a_in)·attn_norm_l;  y = KDA_l(h) if head_count_kv[l] == 0 else MLA_l(h)
      P = y if banked else P + y
      f_in = A>0 ? ResMix(P; ffn_res_score_l) : P;  h2 = RMSNorm(f_in)·ffn_norm_l
      P = P + (DenseSiTU_l(h2) if l < leading_dense_block_count else LatentMoE_l(h2))
  o = A>0 ? ResMix(P; output_res_score) : P;  logits = output · (RMSNorm(o)·output_norm)

  ResMix(u; w): s_j = Σ_d w_d RMSNorm_noweight(c_j)_d, s_cur likewise for u, p = softmax([s_1..s_J, s_cur]),
      result Σ_j p_j c_j + p_cur u (the raw vectors are mixed).
  KDA (H heads of D, d_in = H·D, kernel K): for x in q,k,v: p_x = W_x h, y_x[c] = Σ_τ w_x[c,τ]·[win_x; p_x][t+τ][c]
      (causal depthwise conv over the K−1 previous pre-conv inputs and the current one), SiLU;
      q, k ← x / sqrt(Σx² + ε) per head (same ε); u = f_b·(f_a·h) + dt_bias, A_n = −ssm_a[n] = exp(A_log_n),
      g = lb·σ(A_n u) if kda.gate_lower_bound is set, else −A_n·softplus(u)  (softplus(x) = x for x > 20 as ggml);
      β_n = σ((ssm_beta·h)_n); per head: S[i][:] *= exp(g[i]) (i = key dim); δ = β(v − Sᵀk); S += k δᵀ;
      o = Sᵀq / √D (updated state); out = attn_output · (RMSNorm_head(o)·ssm_norm ⊙ σ(ssm_g·h)).
  MLA (absorbed, MQA cache row [c ; k_r] of r_kv + d_r): Q = attn_q_b(RMSNorm(attn_q_a h)·q_a_norm) or attn_q h,
      per head [q_n (d_n) ; q_r (d_r)]; kvr = attn_kv_a_mqa h, c = RMSNorm(kvr[:r_kv])·kv_a_norm, k_r = kvr[r_kv:];
      q_abs[h][r] = Σ_d k_b[h][r][d]·q_n[h][d] (k_b numpy (H, r_kv, d_n) = ne {d_n, r_kv, H}); score = ([q_abs;q_r]·[c;k_r]) / sqrt(d_n+d_r),
      causal softmax over the cache; o[h] = attn_v_b[h] · Σ_t a_t c_t; o ⊙= σ(attn_gate h) if present; attn_output o.
  SiTU(g, u) = β tanh(g/β) σ(g) · (β_lin tanh(u/β_lin) if β_lin > 0 else u).
  LatentMoE(h): logits = ffn_gate_inp h (full width); p = gating(logits) (1 softmax, 2 sigmoid, 3 raw logits with a
      softmax over the selected ones, 4 sqrt(softplus)); sel = p + exp_probs_b; optional group limit (keep the
      expert_group_used_count groups with the largest sum of their top-2 sel, others −inf); top-k of sel
      (ties → lower index); w = p[top-k]; norm: w /= max(Σw, 6.103515625e-5); scale unless 0 or 1;
      r = ffn_routed_down h (or h); y = Σ_e w_e down_e SiTU(gate_e r, up_e r); y = RMSNorm(y)·ffn_routed_norm
      if present; y = ffn_routed_up y if present; + shared experts on the full-width h.

Taps (docs/RUNTIME-MATH.md §1.1, the project's choice): capturing layer l at a token gives the stream layer l+1
would consume as its attention input — a_in of layer l+1, i.e. ResMix(P after layer l; attn_res_score_{l+1})
with the checkpoint stack as layer l+1's attention mix sees it (without layer l+1's own push); for the last
layer the output mix ResMix(P; output_res_score). With block_size 0 the tap is P. Pre-norm. Id −1 = x_0.

How to run
----------
  PY tests/reference/kimi_k3_ref.py TARGET.gguf --tokens 5,17,300 [--capture 1,3] [--q8-activations] --out OUT.json
writes {"logits": [[V floats] per position], "captured": [[taps concatenated in --capture order] per position],
"argmax": [...], "route_margin": [per position: the smallest MoE routing margin over the MoE layers, null if
none]} (a list starting with −1 must be written --capture=-1,3). --ggml-activations also rounds the inputs of
F16 / BF16 weight products (llama.cpp's CPU numerics).
As a module: ``forward(path, tokens, capture, q8_activations=False) -> (logits, captured)``;
``Session(path)`` runs chunks with carried state (``session.run(tokens, capture)``); ``forward_model(model,
tokens, capture, state=...)`` is the lower-level entry (also runs the math in float32 for the precision study).
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import sys
from dataclasses import dataclass
from typing import Sequence

import numpy as np
from gguf import GGUFReader, GGMLQuantizationType, GGUFValueType
from gguf.quants import dequantize, quantize

from ggml_q8 import round_q8_activations

ARCH = "kimi-k3"
Q8 = GGMLQuantizationType.Q8_0
WEIGHTS_SUM_MIN = 6.103515625e-5  # llama-graph.cpp build_moe_ffn: clamp of the weight sum (smallest F16 normal)
GATING_NAMES = {1: "softmax", 2: "sigmoid", 3: "softmax-weight", 4: "sqrt-softplus"}


@dataclass
class Hparams:
    hidden: int
    n_layers: int
    n_head: int
    vocab: int
    eps: float
    kda_head_dim: int
    conv_kernel: int
    gate_lower_bound: float | None
    is_mla: list
    q_lora_rank: int
    kv_lora_rank: int
    rope_dim: int
    key_length_mla: int
    value_length_mla: int
    n_dense: int
    ffn: int
    n_expert: int
    n_expert_used: int
    n_expert_shared: int
    expert_ffn: int
    latent: int
    weights_norm: bool
    weights_scale: float
    gating: int
    n_groups: int
    n_groups_used: int
    block_size: int
    situ_beta: float
    situ_linear_beta: float

    @property
    def d_inner(self) -> int:
        return self.n_head * self.kda_head_dim

    @property
    def qk_nope(self) -> int:
        return self.key_length_mla - self.rope_dim

    @property
    def latent_width(self) -> int:
        return self.latent if self.latent > 0 else self.hidden


_U32, _F32, _BOOL = GGUFValueType.UINT32, GGUFValueType.FLOAT32, GGUFValueType.BOOL
_MISSING = object()


class KimiK3Gguf:
    """A kimi-k3 GGUF file; tensors are dequantized on first use and cached (float64)."""

    def __init__(self, path: str):
        self.path = path
        self.reader = GGUFReader(path, "r")
        self.tensors = {t.name: t for t in self.reader.tensors}
        self._cache: dict[str, np.ndarray] = {}
        arch = self._field("general.architecture")
        if arch != ARCH:
            raise ValueError(f"{path}: general.architecture is {arch!r}, expected {ARCH!r}")
        self.hp = self._read_hparams()
        self.layer_tensors: list[dict] = []
        self._check_tensors()

    # ---- metadata -------------------------------------------------------------------------
    def _field(self, key: str, default=_MISSING, types=None):
        f = self.reader.get_field(key)
        if f is None:
            if default is _MISSING:
                raise KeyError(f"{self.path}: missing GGUF key {key!r}")
            return default
        if types is not None:
            t = f.types[0]
            if t == GGUFValueType.ARRAY:
                if GGUFValueType.ARRAY not in types or f.types[-1] not in (GGUFValueType.INT32, GGUFValueType.UINT32):
                    raise ValueError(f"{key}: array not accepted here")
            elif t not in types:
                raise ValueError(f"{key}: GGUF type {t.name}, expected {'/'.join(x.name for x in types)}")
        return f.contents()

    def _k(self, name: str, default=_MISSING, types=(_U32,)):
        return self._field(f"{ARCH}.{name}", default, types)

    def _read_hparams(self) -> Hparams:
        U, UA = (_U32,), (_U32, GGUFValueType.ARRAY)
        n_layers = int(self._k("block_count", types=U))

        def first(v):
            return int(v[0]) if isinstance(v, list) else int(v)

        n_head = first(self._k("attention.head_count", types=UA))
        kv = self._k("attention.head_count_kv", None, UA)
        if kv is None:
            kv = [n_head] * n_layers  # llama.cpp default: head_count -> every layer MLA
        elif not isinstance(kv, list):
            kv = [int(kv)] * n_layers
        if len(kv) != n_layers:
            raise ValueError(f"head_count_kv has {len(kv)} entries for {n_layers} layers")
        used = self._k("expert_used_count", 0, UA)
        if isinstance(used, list):
            if len(set(int(u) for u in used)) > 1:
                raise NotImplementedError("per-layer expert_used_count is not supported")
            used = used[0]
        emb = self.tensors.get("token_embd.weight")
        if emb is None:
            raise KeyError(f"{self.path}: missing tensor token_embd.weight")
        lb = self._k("kda.gate_lower_bound", None, (_F32,))
        hp = Hparams(
            hidden=int(self._k("embedding_length", types=U)),
            n_layers=n_layers,
            n_head=n_head,
            vocab=int(emb.shape[1]),
            eps=float(self._k("attention.layer_norm_rms_epsilon", types=(_F32,))),
            kda_head_dim=int(self._k("kda.head_dim", types=U)),
            conv_kernel=int(self._k("ssm.conv_kernel", types=U)),
            gate_lower_bound=None if lb is None else float(lb),
            is_mla=[int(v) != 0 for v in kv],
            q_lora_rank=int(self._k("attention.q_lora_rank", 0, U)),
            kv_lora_rank=int(self._k("attention.kv_lora_rank", types=U)),
            rope_dim=int(self._k("rope.dimension_count", -1, U)),
            key_length_mla=int(self._k("attention.key_length_mla", types=U)),
            value_length_mla=int(self._k("attention.value_length_mla", types=U)),
            n_dense=int(self._k("leading_dense_block_count", 0, U)),
            ffn=first(self._k("feed_forward_length", 0, UA)),
            n_expert=int(self._k("expert_count", 0, U)),
            n_expert_used=int(used),
            n_expert_shared=int(self._k("expert_shared_count", types=U)),
            expert_ffn=first(self._k("expert_feed_forward_length", types=UA)),
            latent=int(self._k("expert_latent_length", 0, U)),
            weights_norm=bool(self._k("expert_weights_norm", False, (_BOOL,))),
            weights_scale=float(self._k("expert_weights_scale", 0.0, (_F32,))),
            gating=int(self._k("expert_gating_func", types=U)),
            n_groups=int(self._k("expert_group_count", 0, U)),
            n_groups_used=int(self._k("expert_group_used_count", 0, U)),
            block_size=int(self._k("attn_res.block_size", types=U)),
            situ_beta=float(self._k("activation.situ_beta", types=(_F32,))),
            situ_linear_beta=float(self._k("activation.situ_linear_beta", types=(_F32,))),
        )
        any_mla = any(hp.is_mla)
        if any_mla:
            if hp.rope_dim < 0:
                raise ValueError("rope.dimension_count missing (llama.cpp would default it to key_length and break the MLA split)")
            if not 0 <= hp.rope_dim < hp.key_length_mla:
                raise ValueError(f"rope.dimension_count {hp.rope_dim} must be < key_length_mla {hp.key_length_mla}")
            kl = self._k("attention.key_length", None, U)
            if kl is not None and int(kl) != hp.kv_lora_rank + hp.rope_dim:
                raise ValueError(f"key_length {kl} != kv_lora_rank + rope ({hp.kv_lora_rank + hp.rope_dim})")
        if hp.situ_beta == 0:
            raise ValueError("activation.situ_beta must be != 0")
        if not all(hp.is_mla):  # some KDA layer
            if hp.conv_kernel < 2:
                raise ValueError("ssm.conv_kernel must be >= 2")
        if hp.gating not in GATING_NAMES:
            raise ValueError(f"expert_gating_func {hp.gating} unknown")
        if hp.n_dense < hp.n_layers:
            if not (0 < hp.n_expert_used <= hp.n_expert <= 1024):
                raise ValueError(f"bad expert counts {hp.n_expert_used}/{hp.n_expert}")
            if hp.n_groups > 1:
                per = hp.n_expert // hp.n_groups
                if (hp.n_groups >= hp.n_expert or hp.n_expert % hp.n_groups or not 0 < hp.n_groups_used < hp.n_groups):
                    raise ValueError("bad expert group counts (llama-model.cpp L1364-1369)")
                if per < 2:
                    raise ValueError("group scoring needs >= 2 experts per group (ggml_argsort_top_k asserts)")
                if hp.n_expert_used > hp.n_groups_used * per:
                    raise NotImplementedError("top-k larger than the unmasked experts (llama.cpp would pick -inf experts)")
        return hp

    # ---- tensors --------------------------------------------------------------------------
    def _check_tensors(self) -> None:
        hp = self.hp
        E, V, H, D, K = hp.hidden, hp.vocab, hp.n_head, hp.kda_head_dim, hp.conv_kernel
        din = hp.d_inner
        want: dict[str, list] = {"token_embd.weight": [(E, V)], "output_norm.weight": [(E,)], "output.weight": [(E, V)]}
        if hp.block_size > 0:
            want["output_res_score.weight"] = [(E,)]
        optional: dict[str, list] = {}
        for i in range(hp.n_layers):
            b = f"blk.{i}."
            lt: dict = {}
            want[b + "attn_norm.weight"] = [(E,)]
            want[b + "ffn_norm.weight"] = [(E,)]
            if hp.block_size > 0:
                want[b + "attn_res_score.weight"] = [(E,)]
                want[b + "ffn_res_score.weight"] = [(E,)]
            if not hp.is_mla[i]:
                for x in "qkv":
                    want[b + f"attn_{x}.weight"] = [(E, din)]
                    want[b + f"ssm_conv1d_{x}.weight"] = [(K, 1, din, 1), (K, 1, din)]
                want.update({b + "ssm_f_a.weight": [(E, D)], b + "ssm_f_b.weight": [(D, din)],
                             b + "ssm_beta.weight": [(E, H)], b + "ssm_a": [(H,)], b + "ssm_dt.bias": [(din,)],
                             b + "ssm_g.weight": [(E, din)], b + "ssm_norm.weight": [(D,)],
                             b + "attn_output.weight": [(din, E)]})
                for x in "qkv":
                    if b + f"attn_{x}.bias" in self.tensors:
                        raise NotImplementedError(f"{b}attn_{x}.bias: loaded by llama.cpp but never used by its graph")
                if b + "attn_qkv.weight" in self.tensors:
                    raise NotImplementedError(f"{b}attn_qkv.weight: fused QKV is not used by the kimi-k3 graph")
            else:
                dqk, dn, dv, rkv = hp.key_length_mla, hp.qk_nope, hp.value_length_mla, hp.kv_lora_rank
                lt["lora_q"] = b + "attn_q_a_norm.weight" in self.tensors
                if lt["lora_q"]:
                    rq = hp.q_lora_rank
                    want.update({b + "attn_q_a_norm.weight": [(rq,)], b + "attn_q_a.weight": [(E, rq)],
                                 b + "attn_q_b.weight": [(rq, H * dqk)]})
                else:
                    want[b + "attn_q.weight"] = [(E, H * dqk)]
                if b + "attn_kv_b.weight" in self.tensors:
                    raise NotImplementedError(f"{b}attn_kv_b.weight: only the absorbed attn_k_b/attn_v_b form runs in llama.cpp")
                want.update({b + "attn_kv_a_mqa.weight": [(E, rkv + hp.rope_dim)], b + "attn_kv_a_norm.weight": [(rkv,)],
                             b + "attn_k_b.weight": [(dn, rkv, H)], b + "attn_v_b.weight": [(rkv, dv, H)],
                             b + "attn_output.weight": [(H * dv, E)]})
                optional[b + "attn_gate.weight"] = [(E, H * dv)]
            if i < hp.n_dense:
                want.update({b + "ffn_gate.weight": [(E, hp.ffn)], b + "ffn_up.weight": [(E, hp.ffn)],
                             b + "ffn_down.weight": [(hp.ffn, E)]})
            else:
                El, Fe, Ne = hp.latent_width, hp.expert_ffn, hp.n_expert
                want.update({b + "ffn_gate_inp.weight": [(E, Ne)], b + "exp_probs_b.bias": [(Ne,)],
                             b + "ffn_gate_exps.weight": [(El, Fe, Ne)], b + "ffn_up_exps.weight": [(El, Fe, Ne)],
                             b + "ffn_down_exps.weight": [(Fe, El, Ne)]})
                if hp.latent > 0:
                    want[b + "ffn_routed_down.weight"] = [(E, El)]
                    want[b + "ffn_routed_up.weight"] = [(El, E)]
                    optional[b + "ffn_routed_norm.weight"] = [(El,)]
                Fs = Fe * max(1, hp.n_expert_shared)
                sh = [b + f"ffn_{x}_shexp.weight" for x in ("gate", "up", "down")]
                present = [s in self.tensors for s in sh]
                if any(present) and not all(present):
                    raise ValueError(f"{b}: shared-expert tensors must be all present or all absent")
                lt["shexp"] = all(present)
                if lt["shexp"]:
                    want.update({sh[0]: [(E, Fs)], sh[1]: [(E, Fs)], sh[2]: [(Fs, E)]})
            self.layer_tensors.append(lt)
        for name, shapes in want.items():
            t = self.tensors.get(name)
            if t is None:
                raise KeyError(f"{self.path}: missing tensor {name}")
            if tuple(int(v) for v in t.shape) not in shapes:
                raise ValueError(f"{name}: ne {list(map(int, t.shape))}, expected {list(shapes[0])}")
        for name, shapes in optional.items():
            t = self.tensors.get(name)
            if t is not None and tuple(int(v) for v in t.shape) not in shapes:
                raise ValueError(f"{name}: ne {list(map(int, t.shape))}, expected {list(shapes[0])}")
        extra = sorted(set(self.tensors) - set(want) - set(optional))
        if extra:
            raise ValueError(f"{self.path}: tensors llama.cpp would not consume: {extra[:8]}")

    def has(self, name: str) -> bool:
        return name in self.tensors

    def qtype(self, name: str) -> GGMLQuantizationType:
        return GGMLQuantizationType(self.tensors[name].tensor_type)

    def numpy_shape(self, name: str) -> tuple[int, ...]:
        return tuple(reversed([int(v) for v in self.tensors[name].shape]))

    def tensor(self, name: str, dtype=np.float64) -> np.ndarray:
        """Whole tensor, dequantized; ggml ne [n0, n1, ...] -> numpy shape (..., n1, n0)."""
        a = self._cache.get(name)
        if a is None:
            t = self.tensors[name]
            a = np.asarray(dequantize(t.data, self.qtype(name)), dtype=np.float32)
            a = a.reshape(self.numpy_shape(name)).astype(np.float64)
            self._cache[name] = a
        return a if dtype == np.float64 else a.astype(dtype)

    def rows(self, name: str, idx, dtype=np.float64) -> np.ndarray:
        """Selected rows of a 2-D tensor (ggml blocks never straddle rows, so this is exact)."""
        if name in self._cache:
            return self._cache[name][np.asarray(idx)].astype(dtype)
        t = self.tensors[name]
        cols = self.numpy_shape(name)[-1]
        a = dequantize(t.data[np.asarray(idx)], self.qtype(name))
        return np.asarray(a, dtype=np.float32).reshape(len(idx), cols).astype(dtype)

    def slab(self, name: str, idx: int, dtype=np.float64) -> np.ndarray:
        """One slab (an expert, a head) of a 3-D tensor, dequantized alone: numpy shape (out, in). A
        stacked expert tensor of a large model does not fit in memory as float64 whole."""
        if name in self._cache:
            return self._cache[name][idx].astype(dtype)
        t = self.tensors[name]
        shape = self.numpy_shape(name)[1:]
        a = dequantize(t.data[idx], self.qtype(name))
        return np.asarray(a, dtype=np.float32).reshape(shape).astype(dtype)


# ---- state carried between chunks --------------------------------------------------------------

class State:
    """Per-sequence recurrent / KV state. KDA layer: ``conv`` [3, K−1, d_in] = the last K−1 *pre-conv*
    projected inputs of q, k, v (oldest first, zeros at the start), ``S`` [H, D, D] with S[h][i][j], i = key
    dim, j = value dim. MLA layer: ``cache`` [m, r_kv + d_r] rows [c ; k_r]. The ResMix checkpoint stack is
    per token, so nothing else carries over."""

    def __init__(self, model: KimiK3Gguf, dtype=np.float64):
        hp = model.hp
        self.n_past = 0
        self.layers: list[dict] = []
        for i in range(hp.n_layers):
            if hp.is_mla[i]:
                self.layers.append({"cache": np.zeros((0, hp.kv_lora_rank + hp.rope_dim), dtype=dtype)})
            else:
                self.layers.append({"conv": np.zeros((3, hp.conv_kernel - 1, hp.d_inner), dtype=dtype),
                                    "S": np.zeros((hp.n_head, hp.kda_head_dim, hp.kda_head_dim), dtype=dtype)})

    def copy(self) -> "State":
        return copy.deepcopy(self)


# ---- math --------------------------------------------------------------------------------------

def rms_norm(x: np.ndarray, w, eps: float) -> np.ndarray:
    """x / sqrt(mean(x²) + eps) over the last axis, times w (None = no weight)."""
    y = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + x.dtype.type(eps))
    return y if w is None else y * w


def l2_norm(x: np.ndarray, eps: float) -> np.ndarray:
    """x / sqrt(Σx² + eps) (ggml: rms_norm(x, eps/n) / sqrt(n), models.h L14-18)."""
    return x / np.sqrt(np.sum(x * x, axis=-1, keepdims=True) + x.dtype.type(eps))


def sigmoid(z: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return 1 / (1 + np.exp(-z))


def silu(z: np.ndarray) -> np.ndarray:
    return z * sigmoid(z)


def softplus(z: np.ndarray) -> np.ndarray:
    """ggml op_softplus: x for x > 20, else log(1 + exp(x))."""
    return np.where(z > 20, z, np.log1p(np.exp(np.minimum(z, 20))))


def softmax(z: np.ndarray, axis: int = -1) -> np.ndarray:
    z = z - np.max(z, axis=axis, keepdims=True)
    e = np.exp(z)
    return e / np.sum(e, axis=axis, keepdims=True)


def situ(g: np.ndarray, u: np.ndarray, beta: float, lin_beta: float) -> np.ndarray:
    t = g.dtype.type
    a = t(beta) * np.tanh(g * t(1.0 / beta)) * sigmoid(g)
    if lin_beta > 0:
        u = t(lin_beta) * np.tanh(u * t(1.0 / lin_beta))
    return a * u


def res_mix(u: np.ndarray, stack: list, w: np.ndarray, eps: float) -> np.ndarray:
    """ResMix over the checkpoint stack (list of [n, E]) and the current u [n, E]; empty stack -> u."""
    if not stack:
        return u
    C = np.stack(stack, axis=1)                              # [n, J, E]
    s = np.sum(rms_norm(C, None, eps) * w, axis=-1)         # [n, J]
    sc = np.sum(rms_norm(u, None, eps) * w, axis=-1)        # [n]
    p = softmax(np.concatenate([s, sc[:, None]], axis=1), axis=1)
    return np.einsum("nj,nje->ne", p[:, :-1], C) + p[:, -1:] * u


def round_bf16(a: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 (round to nearest even, as ggml's GGML_FP32_TO_BF16), returned as float32."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return r.astype(np.uint32).view(np.float32)


def topk_desc(x: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k largest entries per row, largest first; ties -> lower index (stable sort).
    (ggml's CPU argsort is std::sort, whose order on exact ties is unspecified.)"""
    return np.argsort(-x, axis=-1, kind="stable")[..., :k]


def _parse_capture(capture: Sequence[int], n_layers: int) -> list[int]:
    capture = [int(c) for c in capture]
    for c in capture:
        if not -1 <= c < n_layers:
            raise ValueError(f"capture layer {c} out of range [-1, {n_layers})")
    return capture


def forward_model(model: KimiK3Gguf, tokens: Sequence[int], capture: Sequence[int] = (), state: State | None = None,
                  dtype=np.float64, q8_activations: bool = False, matmul=None, cache_round=None,
                  logits_chunk: int = 16384, trace: dict | None = None, ggml_activations: bool = False):
    """Forward of one chunk of tokens; returns (logits [n, V], captured [n, len(capture)·E]) in `dtype`.

    `state` (a State) carries KDA conv windows / S and the MLA caches between chunks and is updated in place;
    None = a fresh sequence. dtype=float32 runs the identical math in float32 (precision study only).
    q8_activations=True rounds the activation rows of every product with a Q8_0 weight to Q8_0 (ggml's x86
    activation recipe, ggml_q8.py), as ggml's CPU matmul does. ggml_activations=True additionally rounds the
    input of every F16 / BF16 weight product to F16 / BF16 (ggml's vec_dot_type for those weights), i.e. the
    full CPU-matmul numerics of llama.cpp. Hooks (None for the reference): `matmul(a, W)`
    replaces every weight product a @ W.T; `cache_round(rows)` is applied to new MLA cache rows (e.g. f16).
    `trace`, a dict, receives per-layer lists "a_in", "y" (attention output), "f_in", "z" (FFN output) and "P"
    (after the layer) and, per MoE layer,
    trace["route"][l] = (top-k expert ids [n, k], routing margin [n]: the k-th minus the (k+1)-th selection
    score, and with groups also the g-th minus the (g+1)-th group score) -- a float32 runtime may route
    differently where the margin is tiny."""
    hp = model.hp
    tokens = [int(t) for t in tokens]
    if not tokens:
        raise ValueError("empty token sequence")
    for t in tokens:
        if not 0 <= t < hp.vocab:
            raise ValueError(f"token {t} out of range [0, {hp.vocab})")
    capture = _parse_capture(capture, hp.n_layers)
    if state is None:
        state = State(model, dtype)
    n = len(tokens)
    E, H, D, K, eps = hp.hidden, hp.n_head, hp.kda_head_dim, hp.conv_kernel, hp.eps
    din = hp.d_inner
    T = np.dtype(dtype).type
    mm0 = matmul or (lambda a, w: a @ w.T)  # noqa: E731

    def wt(name):
        return model.tensor(name, dtype)

    def act(a: np.ndarray, name: str) -> np.ndarray:
        if not (q8_activations or ggml_activations):
            return a
        qt = model.qtype(name)
        if qt == Q8:
            flat = np.ascontiguousarray(a.reshape(-1, a.shape[-1]), dtype=np.float32)
            r = round_q8_activations(flat)
            return r.reshape(a.shape).astype(dtype)
        if ggml_activations and qt == GGMLQuantizationType.F16:
            return a.astype(np.float16).astype(dtype)
        if ggml_activations and qt == GGMLQuantizationType.BF16:
            return round_bf16(a).astype(dtype)
        return a

    def lin(a: np.ndarray, name: str) -> np.ndarray:
        return mm0(act(a, name), wt(name))

    def lin_slice(a: np.ndarray, name: str, idx: int) -> np.ndarray:
        """Product with one slab (head / expert) of a 3-D weight: numpy shape (N, out, in)."""
        return mm0(act(a, name), model.slab(name, idx, dtype))

    # ---- sub-layers ---------------------------------------------------------------------------
    def kda(h, i, st):
        b = f"blk.{i}."
        outs = []
        for j, x in enumerate("qkv"):
            p = lin(h, b + f"attn_{x}.weight")                               # [n, din]
            w = wt(b + f"ssm_conv1d_{x}.weight").reshape(din, K)              # w[c, tau]
            cat = np.concatenate([st["conv"][j], p], axis=0)                  # [K-1+n, din]
            y = np.zeros((n, din), dtype=dtype)
            for tau in range(K):
                y = y + cat[tau:tau + n] * w[:, tau]
            st["conv"][j] = cat[n:].copy()                                    # last K-1 pre-conv inputs
            outs.append(silu(y).reshape(n, H, D))
        q, k, v = outs
        q, k = l2_norm(q, eps), l2_norm(k, eps)
        u = (lin(lin(h, b + "ssm_f_a.weight"), b + "ssm_f_b.weight") + wt(b + "ssm_dt.bias")).reshape(n, H, D)
        An = -wt(b + "ssm_a")[None, :, None]                                  # exp(A_log) per head
        if hp.gate_lower_bound is not None:
            g = T(hp.gate_lower_bound) * sigmoid(An * u)
        else:
            g = -An * softplus(u)
        beta = sigmoid(lin(h, b + "ssm_beta.weight"))                          # [n, H]
        S = st["S"]
        o = np.empty((n, H, D), dtype=dtype)
        scale = T(1.0 / math.sqrt(D))
        for t in range(n):
            S = S * np.exp(g[t])[:, :, None]                                  # S[h][i][:] *= exp(g[h, i])
            r = np.einsum("hij,hi->hj", S, k[t])
            delta = beta[t][:, None] * (v[t] - r)
            S = S + k[t][:, :, None] * delta[:, None, :]
            o[t] = np.einsum("hij,hi->hj", S, q[t]) * scale
        st["S"] = S
        on = rms_norm(o, wt(b + "ssm_norm.weight"), eps)
        gate = sigmoid(lin(h, b + "ssm_g.weight")).reshape(n, H, D)
        return lin((on * gate).reshape(n, din), b + "attn_output.weight")

    def mla(h, i, st):
        b = f"blk.{i}."
        dn, dr, rkv, dv = hp.qk_nope, hp.rope_dim, hp.kv_lora_rank, hp.value_length_mla
        if model.layer_tensors[i]["lora_q"]:
            Q = lin(rms_norm(lin(h, b + "attn_q_a.weight"), wt(b + "attn_q_a_norm.weight"), eps), b + "attn_q_b.weight")
        else:
            Q = lin(h, b + "attn_q.weight")
        Q = Q.reshape(n, H, dn + dr)
        qn, qr = Q[..., :dn], Q[..., dn:]
        kvr = lin(h, b + "attn_kv_a_mqa.weight")
        c = rms_norm(kvr[:, :rkv], wt(b + "attn_kv_a_norm.weight"), eps)
        rows = np.concatenate([c, kvr[:, rkv:]], axis=1)
        if cache_round is not None:
            rows = cache_round(rows)
        m0 = st["cache"].shape[0]
        st["cache"] = Kc = np.concatenate([st["cache"], rows], axis=0)       # [M, rkv + dr]
        q_abs = np.stack([lin_slice(qn[:, hh], b + "attn_k_b.weight", hh) for hh in range(H)], axis=1)  # [n, H, rkv]
        Qp = np.concatenate([q_abs, qr], axis=-1)
        sc = np.einsum("nhk,mk->nhm", Qp, Kc) * T(1.0 / math.sqrt(hp.key_length_mla))
        visible = np.arange(Kc.shape[0])[None, :] <= (m0 + np.arange(n))[:, None]   # causal
        sc = np.where(visible[:, None, :], sc, -np.inf)
        a = softmax(sc, axis=-1)
        ctx = np.einsum("nhm,mr->nhr", a, Kc[:, :rkv])
        o = np.stack([lin_slice(ctx[:, hh], b + "attn_v_b.weight", hh) for hh in range(H)], axis=1)  # [n, H, dv]
        o = o.reshape(n, H * dv)
        if model.has(b + "attn_gate.weight"):
            o = o * sigmoid(lin(h, b + "attn_gate.weight"))
        return lin(o, b + "attn_output.weight")

    def dense(h, i):
        b = f"blk.{i}."
        a = situ(lin(h, b + "ffn_gate.weight"), lin(h, b + "ffn_up.weight"), hp.situ_beta, hp.situ_linear_beta)
        return lin(a, b + "ffn_down.weight")

    def moe(h, i):
        b = f"blk.{i}."
        logits = lin(h, b + "ffn_gate_inp.weight")                            # [n, Ne]
        if hp.gating == 1:
            p = softmax(logits, axis=-1)
        elif hp.gating == 2:
            p = sigmoid(logits)
        elif hp.gating == 3:
            p = logits
        else:
            p = np.sqrt(softplus(logits))
        sel = p + wt(b + "exp_probs_b.bias")
        if hp.n_groups > 1:
            G = hp.n_groups
            grp = sel.reshape(n, G, hp.n_expert // G)
            gscore = np.sort(grp, axis=-1)[..., -2:].sum(axis=-1)             # sum of the top-2 per group
            keep = np.zeros((n, G), dtype=bool)
            np.put_along_axis(keep, topk_desc(gscore, hp.n_groups_used), True, axis=-1)
            sel = np.where(keep[:, :, None], grp, -np.inf).reshape(n, hp.n_expert)
        top = topk_desc(sel, hp.n_expert_used)                                # [n, k]
        if trace is not None:  # routing margin: k-th minus (k+1)-th selection score (inf if none)
            srt = -np.sort(-sel, axis=-1)
            k_ = hp.n_expert_used
            marg = srt[:, k_ - 1] - srt[:, k_] if k_ < hp.n_expert else np.full(n, np.inf)
            if hp.n_groups > 1:
                gs = -np.sort(-gscore, axis=-1)
                marg = np.minimum(marg, gs[:, hp.n_groups_used - 1] - gs[:, hp.n_groups_used])
            trace["route"][i] = (top, marg)
        w = np.take_along_axis(p, top, axis=-1)
        if hp.gating == 3:
            w = softmax(w, axis=-1)
        if hp.weights_norm:
            w = w / np.maximum(np.sum(w, axis=-1, keepdims=True), T(WEIGHTS_SUM_MIN))
        if hp.weights_scale != 0.0 and hp.weights_scale != 1.0:
            w = w * T(hp.weights_scale)
        r = lin(h, b + "ffn_routed_down.weight") if hp.latent > 0 else h
        y = np.zeros((n, hp.latent_width), dtype=dtype)
        for slot in range(hp.n_expert_used):                                  # summed in top-k slot order
            for e in np.unique(top[:, slot]):
                rows = np.nonzero(top[:, slot] == e)[0]
                x = r[rows]
                a = situ(lin_slice(x, b + "ffn_gate_exps.weight", e), lin_slice(x, b + "ffn_up_exps.weight", e),
                         hp.situ_beta, hp.situ_linear_beta)
                y[rows] += lin_slice(a, b + "ffn_down_exps.weight", e) * w[rows, slot][:, None]
        if model.has(b + "ffn_routed_norm.weight"):
            y = rms_norm(y, wt(b + "ffn_routed_norm.weight"), eps)
        if hp.latent > 0:
            y = lin(y, b + "ffn_routed_up.weight")
        if model.layer_tensors[i]["shexp"]:
            a = situ(lin(h, b + "ffn_gate_shexp.weight"), lin(h, b + "ffn_up_shexp.weight"), hp.situ_beta, hp.situ_linear_beta)
            y = y + lin(a, b + "ffn_down_shexp.weight")
        return y

    # ---- layers -------------------------------------------------------------------------------
    A = hp.block_size
    x0 = model.rows("token_embd.weight", tokens, dtype)
    P = x0
    stack: list = []
    taps = {-1: x0.copy()}
    if trace is not None:
        for key in ("a_in", "y", "f_in", "z", "P"):
            trace[key] = []
        trace["route"] = {}
    for i in range(hp.n_layers):
        b = f"blk.{i}."
        a_in = res_mix(P, stack, wt(b + "attn_res_score.weight"), eps) if A > 0 else P
        if i > 0:
            taps[i - 1] = a_in
        banked = A > 0 and i % A == 0
        if banked:
            stack.append(P)
        h = rms_norm(a_in, wt(b + "attn_norm.weight"), eps)
        y = mla(h, i, state.layers[i]) if hp.is_mla[i] else kda(h, i, state.layers[i])
        P = y if banked else P + y
        f_in = res_mix(P, stack, wt(b + "ffn_res_score.weight"), eps) if A > 0 else P
        h2 = rms_norm(f_in, wt(b + "ffn_norm.weight"), eps)
        z = dense(h2, i) if i < hp.n_dense else moe(h2, i)
        P = P + z
        if trace is not None:
            for key, val in (("a_in", a_in), ("y", y), ("f_in", f_in), ("z", z), ("P", P)):
                trace[key].append(val)
    o = res_mix(P, stack, wt("output_res_score.weight"), eps) if A > 0 else P
    taps[hp.n_layers - 1] = o
    state.n_past += n
    hf = rms_norm(o, wt("output_norm.weight"), eps)
    logits = np.empty((n, hp.vocab), dtype=dtype)
    for s in range(0, hp.vocab, logits_chunk):
        e = min(hp.vocab, s + logits_chunk)
        logits[:, s:e] = mm0(act(hf, "output.weight"), model.rows("output.weight", np.arange(s, e), dtype))
    captured = (np.concatenate([taps[c] for c in capture], axis=1) if capture else np.zeros((n, 0), dtype=dtype))
    return logits, captured


class Session:
    """Runs a sequence in chunks with carried state: ``s = Session(path); s.run([5, 17]); s.run([300])``."""

    def __init__(self, model, q8_activations: bool = False, dtype=np.float64, ggml_activations: bool = False):
        self.model = model if isinstance(model, KimiK3Gguf) else KimiK3Gguf(model)
        self.q8_activations = q8_activations
        self.ggml_activations = ggml_activations
        self.dtype = dtype
        self.state = State(self.model, dtype)

    def run(self, tokens: Sequence[int], capture: Sequence[int] = (), **kw):
        return forward_model(self.model, tokens, capture, state=self.state, dtype=self.dtype,
                             q8_activations=self.q8_activations, ggml_activations=self.ggml_activations, **kw)


def forward(path: str, tokens: Sequence[int], capture: Sequence[int] = (), q8_activations: bool = False,
            ggml_activations: bool = False):
    """Float64 reference: (logits [n, V], captured [n, len(capture)·E])."""
    return forward_model(KimiK3Gguf(path), tokens, capture, q8_activations=q8_activations,
                         ggml_activations=ggml_activations)


def _int_list(s: str) -> list[int]:
    s = s.strip()
    return [int(v) for v in s.split(",") if v.strip()] if s else []


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="float64 numpy reference forward of a kimi-k3 GGUF target")
    ap.add_argument("gguf", help="target model, llama.cpp kimi-k3 layout")
    ap.add_argument("--tokens", required=True, type=_int_list, help="comma-separated token ids")
    ap.add_argument("--capture", default=[], type=_int_list,
                    help="comma-separated layer ids whose tap (next layer's attention-input mix; output mix after the "
                         "last layer) to capture, in order; -1 = embeddings (write --capture=-1,0)")
    ap.add_argument("--out", required=True, help="output JSON path ('-' for stdout)")
    ap.add_argument("--q8-activations", action="store_true",
                    help="round activations to Q8_0 before products with Q8_0 weights (ggml/dspark CPU numerics)")
    ap.add_argument("--ggml-activations", action="store_true",
                    help="as --q8-activations, and also round to F16 / BF16 before F16 / BF16 weight products "
                         "(llama.cpp CPU matmul numerics)")
    args = ap.parse_args(argv)
    try:
        tr: dict = {}
        logits, captured = forward_model(KimiK3Gguf(args.gguf), args.tokens, args.capture, trace=tr,
                                         q8_activations=args.q8_activations, ggml_activations=args.ggml_activations)
    except (ValueError, KeyError, NotImplementedError, OSError) as e:
        print(f"kimi_k3_ref: error: {e}", file=sys.stderr)
        return 2
    margins = [m for _, m in tr["route"].values()]
    route_margin = np.min(np.stack(margins), axis=0) if margins else np.full(len(args.tokens), np.inf)
    doc = {"logits": logits.tolist(), "captured": captured.tolist(),
           "argmax": [int(v) for v in np.argmax(logits, axis=-1)],
           "route_margin": [None if not np.isfinite(v) else float(v) for v in route_margin]}
    if args.out == "-":
        json.dump(doc, sys.stdout)
        sys.stdout.write("\n")
    else:
        with open(args.out, "w") as f:
            json.dump(doc, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())

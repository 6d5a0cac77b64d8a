#!/usr/bin/env python3
"""Independent float64 numpy reference of llama.cpp's ``llama`` graph, read from a GGUF file.

What it is
----------
A test oracle for dspark's llama target (Llama 2 / 3.x, SmolLM, Mistral-style models): given a
GGUF in llama.cpp's ``llama`` layout and a token sequence, it computes the logits at every
position and the residual stream after chosen layers (the hidden states a DFlash / DSpark
drafter captures). It is written from llama.cpp's source (``src/models/llama.cpp``: the graph
and the tensors it loads; ``src/llama-model.cpp``: the hyper-parameters and RoPE-scaling keys;
``src/llama-context.cpp``: the YaRN magnitude; ``ggml/src/ggml-cpu/ops.cpp`` and ``ggml.c``:
``rope_yarn``, ``ggml_rope_cache_init``, ``ggml_rope_yarn_corr_dims`` and the NORMAL pairing),
and shares no code with the Rust crates. Weights of any type gguf-py dequantizes are
dequantized exactly to float32 and widened; all arithmetic is float64.

The math (tokens t_0..t_{n-1} at positions 0..n-1)
--------------------------------------------------
  RMSNorm(x, w) = w * x / sqrt(mean(x^2) + eps)
  x = token_embd[t]
  for each layer i:
      h = RMSNorm(x, attn_norm)
      q, k, v = Wq h (+ bq), Wk h (+ bk), Wv h (+ bv)        separate tensors, or
              = split(Wqkv h (+ bqkv)) into H*d, Hkv*d, Hkv*d   the fused attn_qkv (rows q, k, v)
      q, k = RoPE(q), RoPE(k)                                  (no per-head norm in this graph)
      GQA: query head h reads kv head h // (H / Hkv)
      scores = q.k / sqrt(d), causal, softmax;  a = concat_heads(softmax(scores) v)
      x = x + Wo a (+ bo)
      h2 = RMSNorm(x, ffn_norm)
      x = x + Wdown(silu(Wgate h2 (+ bgate)) * (Wup h2 (+ bup))) (+ bdown)
      captured[i] = x
  logits = Woutput RMSNorm(x, output_norm)       (token_embd when output.weight is absent)

RoPE as ggml computes it for llama (rope type NORMAL: element 2j pairs with 2j+1), with
d = head size = rope.dimension_count (llama.cpp asserts they are equal), pair j in [0, d/2):
  theta_extrap_j = p * base^(-2j/d) / ff_j      (ff = rope_freqs.weight, else 1)
  theta_interp_j = freq_scale * theta_extrap_j    (freq_scale = 1/factor; 1 for type none)
  not YaRN:  theta_j = theta_interp_j,  magnitude m = attn_factor
  YaRN:      low  = max(0,   floor(c(beta_fast))),  high = min(d-1, ceil(c(beta_slow))),
             c(b) = d * ln(n_orig / (2 pi b)) / (2 ln base),  beta_fast = 32, beta_slow = 1
             ramp_j = 1 - clamp((j - low) / max(0.001, high - low), 0, 1)
             theta_j = theta_interp_j * (1 - ramp_j) + theta_extrap_j * ramp_j
             m = attn_factor * (1 + 0.1 ln factor if factor > 1 else 1)
             (llama-context.cpp sets yarn_attn_factor = get_mscale(factor) / (1 + 0.1 ln factor)
             and ggml's rope_yarn multiplies by 1 + 0.1 ln(1/freq_scale) again)
  x'_{2j}   = m (x_{2j} cos theta_j - x_{2j+1} sin theta_j)
  x'_{2j+1} = m (x_{2j} sin theta_j + x_{2j+1} cos theta_j)
Keys, as llama.cpp reads them (prefix ``llama.``): embedding_length, block_count,
feed_forward_length, attention.head_count, attention.layer_norm_rms_epsilon, context_length
(required); attention.head_count_kv (default head_count), attention.key_length (default
hidden / heads; value_length and rope.dimension_count must equal it), rope.freq_base (10000),
rope.scaling.type (default ``linear``; none / linear / yarn), rope.scaling.factor or the old
rope.scale_linear (0 or absent = 1), rope.scaling.original_context_length (default
context_length), rope.scaling.attn_factor (1). The graph scales attention by 1/sqrt(d) and
never reads attention.scale. Refused: experts (expert_count > 0), per-layer arrays of head
counts or FFN widths, longrope, per-tensor ``*.scale`` tensors.

``--ggml-activations`` reproduces the CPU matmul numerics of ggml (and dspark): before a
product with a weight of type T, each activation row is rounded to T's ``vec_dot_type`` as
ggml's x86 CPU backend makes it, and the product uses the rounded values; all else stays
float64. F32: none. F16 / BF16: rounded to F16 / BF16 (nearest, ties to even). Q8_0, Q4_0,
Q5_0, IQ4_NL, MXFP4: Q8_0 by ggml's x86 recipe (``ggml_q8.py``). K-quants, i-quants other
than IQ4_NL and ternary: Q8_K by ``quantize_row_q8_K_ref`` (the first value of largest
magnitude, sign kept, ``iscale = -127/max``, ``nearest_int(iscale x)`` capped at 127, ties to
even, ``d = 1/iscale``, all float32). Q4_1 / Q5_1: Q8_1 by ggml's x86 ``quantize_row_q8_1``
(the Q8_0 recipe, plus ``s = f16(d * sum q)`` with the unrounded ``d``), and the product as
ggml's dot forms it: ``d_w d_a sum(q_w q_a) + m_w s`` per block (the block minimum ``m_w``
times the f16-rounded ``s``, not the exact ``m_w d_a sum q_a``).

How to run
----------
  PY tests/reference/llama_ref.py TARGET.gguf --tokens 5,17,300 [--capture 1,0]
      [--ggml-activations] --out OUT.json
writes {"logits": [[vocab floats] per position], "captured": [[captured layers concatenated
in --capture order] per position], "argmax": [per position]} (the schema of qwen3_ref.py;
``compare.py`` applies the tolerance rule). Capture -1 = the embedding output (write
--capture=-1,2). Exit 2 with a message on a file this reference does not run.

As a module: ``forward(path, tokens, capture, ggml_activations=False) -> (logits,
captured)``; ``LlamaGguf``, ``rope_tables``, ``rotate_normal``, ``round_q8_k`` and the
other pieces are importable (``llama_selftest.py`` uses them).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from dataclasses import dataclass
from typing import Sequence

import numpy as np
from gguf import GGUFReader, GGMLQuantizationType as T
from gguf.quants import dequantize

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ggml_q8 import round_q8_activations  # noqa: E402

ARCH = "llama"
BETA_FAST, BETA_SLOW = 32.0, 1.0  # llama.cpp's defaults; the llama loader reads no key for them

# The activation each weight type's product takes on ggml's x86 CPU backend (vec_dot_type).
Q8_0_ACT = {T.Q8_0, T.Q4_0, T.Q5_0, T.IQ4_NL, T.MXFP4}
Q8_1_ACT = {T.Q4_1: 20, T.Q5_1: 24}  # block bytes; the block's f16 min `m` is at bytes 2..4
Q8_K_ACT = {T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K, T.IQ2_XXS, T.IQ2_XS, T.IQ2_S, T.IQ3_XXS,
            T.IQ3_S, T.IQ1_S, T.IQ1_M, T.IQ4_XS, T.TQ1_0, T.TQ2_0}


@dataclass
class Hparams:
    hidden: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    ffn: int
    vocab: int
    context: int
    eps: float
    rope_base: float
    scaling: str          # none / linear / yarn
    factor: float         # 1 when unset
    orig_context: int
    attn_factor: float
    tied_output: bool
    fused_qkv: bool
    freq_factors: bool


class LlamaGguf:
    """A llama-layout GGUF read with gguf-py: hyper-parameters as llama.cpp derives them,
    tensors dequantized on request (ne [cols, rows] -> numpy (rows, cols))."""

    _MISSING = object()

    def __init__(self, path: str):
        self.path = path
        self.reader = GGUFReader(path)
        self.tensors = {t.name: t for t in self.reader.tensors}
        arch = self._field("general.architecture")
        if arch != ARCH:
            raise ValueError(f"{path}: general.architecture is {arch!r}, expected {ARCH!r}")
        k = lambda s: f"{ARCH}.{s}"  # noqa: E731
        hidden = self._scalar(k("embedding_length"))
        n_heads = self._scalar(k("attention.head_count"))
        n_kv = self._scalar(k("attention.head_count_kv"), n_heads)
        ffn = self._scalar(k("feed_forward_length"))
        if int(self._field(k("expert_count"), 0)) > 0:
            raise NotImplementedError("experts (a Mixtral-style MoE) are not in this reference")
        head_dim = int(self._field(k("attention.key_length"), hidden // n_heads))
        for key in ("attention.value_length", "rope.dimension_count"):
            v = int(self._field(k(key), head_dim))
            if v != head_dim:
                raise ValueError(f"{k(key)} is {v}, but the llama graph needs it equal to the head size {head_dim}")
        context = int(self._field(k("context_length")))
        scaling = str(self._field(k("rope.scaling.type"), "linear"))
        if scaling not in ("none", "linear", "yarn"):
            raise NotImplementedError(f"rope.scaling.type {scaling!r} is not in this reference")
        factor = self._field(k("rope.scaling.factor"), None)
        if factor is None:
            factor = self._field(k("rope.scale_linear"), 0.0)
        factor = float(np.float32(factor))
        if factor == 0.0:
            factor = 1.0
        emb = self.tensors["token_embd.weight"]
        self.hp = Hparams(
            hidden=hidden, n_layers=int(self._field(k("block_count"))), n_heads=n_heads, n_kv_heads=n_kv,
            head_dim=head_dim, ffn=ffn, vocab=int(emb.shape[1]), context=context,
            eps=float(np.float32(self._field(k("attention.layer_norm_rms_epsilon")))),
            rope_base=float(np.float32(self._field(k("rope.freq_base"), 10000.0))),
            scaling=scaling, factor=factor,
            orig_context=int(self._field(k("rope.scaling.original_context_length"), context)),
            attn_factor=float(np.float32(self._field(k("rope.scaling.attn_factor"), 1.0))),
            tied_output="output.weight" not in self.tensors,
            fused_qkv="blk.0.attn_qkv.weight" in self.tensors,
            freq_factors="rope_freqs.weight" in self.tensors,
        )
        if n_heads % n_kv:
            raise ValueError(f"head_count {n_heads} is not a multiple of head_count_kv {n_kv}")
        if head_dim % 2:
            raise ValueError(f"head size {head_dim} is odd")
        for name in self.tensors:
            if name.endswith(".scale") or name.endswith("ffn_gate_inp.weight"):
                raise NotImplementedError(f"tensor {name} is not in this reference")
        self._check_shapes()

    # ---- metadata ------------------------------------------------------------------------
    def _field(self, key: str, default=_MISSING):
        f = self.reader.get_field(key)
        if f is None:
            if default is LlamaGguf._MISSING:
                raise KeyError(f"{self.path}: missing GGUF key {key!r}")
            return default
        return f.contents()

    def _scalar(self, key: str, default=_MISSING) -> int:
        v = self._field(key, default)
        if isinstance(v, list):
            raise NotImplementedError(f"{key} is a per-layer array: not in this reference")
        return int(v)

    def _check_shapes(self) -> None:
        hp = self.hp
        qd, kvd = hp.n_heads * hp.head_dim, hp.n_kv_heads * hp.head_dim
        want = {"token_embd.weight": (hp.hidden, hp.vocab), "output_norm.weight": (hp.hidden,)}
        if not hp.tied_output:
            want["output.weight"] = (hp.hidden, hp.vocab)
        if hp.freq_factors:
            want["rope_freqs.weight"] = (hp.head_dim // 2,)
        for i in range(hp.n_layers):
            b = f"blk.{i}."
            want.update({
                b + "attn_norm.weight": (hp.hidden,), b + "attn_output.weight": (qd, hp.hidden),
                b + "ffn_norm.weight": (hp.hidden,), b + "ffn_gate.weight": (hp.hidden, hp.ffn),
                b + "ffn_up.weight": (hp.hidden, hp.ffn), b + "ffn_down.weight": (hp.ffn, hp.hidden),
            })
            if hp.fused_qkv:
                want[b + "attn_qkv.weight"] = (hp.hidden, qd + 2 * kvd)
            else:
                want.update({b + "attn_q.weight": (hp.hidden, qd), b + "attn_k.weight": (hp.hidden, kvd),
                             b + "attn_v.weight": (hp.hidden, kvd)})
        optional = {}
        for i in range(hp.n_layers):
            b = f"blk.{i}."
            optional.update({b + "attn_q.bias": (qd,), b + "attn_k.bias": (kvd,), b + "attn_v.bias": (kvd,),
                             b + "attn_qkv.bias": (qd + 2 * kvd,), b + "attn_output.bias": (hp.hidden,),
                             b + "ffn_gate.bias": (hp.ffn,), b + "ffn_up.bias": (hp.ffn,),
                             b + "ffn_down.bias": (hp.hidden,)})
        for name, ne in want.items():
            if name not in self.tensors:
                raise KeyError(f"{self.path}: missing tensor {name}")
        for name, t in self.tensors.items():
            ne = want.get(name, optional.get(name))
            if ne is None:
                raise ValueError(f"{self.path}: tensor {name} is not one the llama graph reads")
            if tuple(int(v) for v in t.shape) != ne:
                raise ValueError(f"{name}: ne {list(map(int, t.shape))}, expected {list(ne)}")

    # ---- tensors -------------------------------------------------------------------------
    def has(self, name: str) -> bool:
        return name in self.tensors

    def type_of(self, name: str) -> T:
        return T(self.tensors[name].tensor_type)

    def _numpy_shape(self, name: str) -> tuple[int, ...]:
        return tuple(reversed([int(v) for v in self.tensors[name].shape]))

    def tensor(self, name: str) -> np.ndarray:
        """The whole tensor, dequantized, float64, shape (rows, cols)."""
        t = self.tensors[name]
        a = dequantize(t.data, self.type_of(name))
        return np.asarray(a, dtype=np.float32).reshape(self._numpy_shape(name)).astype(np.float64)

    def rows(self, name: str, idx) -> np.ndarray:
        """Rows `idx` of a matrix (blocks never straddle rows, so this is exact)."""
        t = self.tensors[name]
        cols = self._numpy_shape(name)[-1]
        a = dequantize(t.data[np.asarray(idx)], self.type_of(name))
        return np.asarray(a, dtype=np.float32).reshape(len(idx), cols).astype(np.float64)

    def output_name(self) -> str:
        return "token_embd.weight" if self.hp.tied_output else "output.weight"


# ---- activation rounding (--ggml-activations) --------------------------------------------

def round_f16(a: np.ndarray) -> np.ndarray:
    return np.asarray(a, dtype=np.float32).astype(np.float16).astype(np.float64)


def round_bf16(a: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16, nearest with ties to even (finite values), back to float64."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return u.astype(np.uint32).view(np.float32).astype(np.float64)


def round_q8_k(a: np.ndarray) -> np.ndarray:
    """Rows of `a` (last axis, whole blocks of 256) through Q8_K as quantize_row_q8_K_ref makes
    it, float64 out."""
    x = np.ascontiguousarray(a, dtype=np.float32)
    shape = x.shape
    b = x.reshape(-1, 256)
    first = np.argmax(np.abs(b), axis=1)  # the first index of the largest magnitude
    mx = b[np.arange(len(b)), first].astype(np.float32)
    out = np.zeros_like(b)
    nz = mx != 0
    iscale = (np.float32(-127.0) / mx[nz]).astype(np.float32)
    q = np.minimum(np.rint((iscale[:, None] * b[nz]).astype(np.float32)), 127)
    d = (np.float32(1.0) / iscale).astype(np.float32)
    out[nz] = (q.astype(np.float32) * d[:, None]).astype(np.float32)
    return out.reshape(shape).astype(np.float64)


def q8_1_blocks(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows of `a` through Q8_1 as ggml's x86 quantize_row_q8_1 makes them: (the values
    q * f16(d), float64; each block's s = f16(d * sum q) with the unrounded d, [rows, blocks])."""
    x = np.ascontiguousarray(a, dtype=np.float32)
    b = x.reshape(-1, 32)
    amax = np.max(np.abs(b), axis=1, keepdims=True)
    d = (amax / np.float32(127.0)).astype(np.float32)
    with np.errstate(divide="ignore"):
        inv = np.where(amax != 0, np.float32(127.0) / amax, np.float32(0.0)).astype(np.float32)
    q = np.rint((b * inv).astype(np.float32))
    values = (q * d.astype(np.float16).astype(np.float32)).astype(np.float64).reshape(x.shape)
    s = (d[:, 0] * q.sum(axis=1).astype(np.float32)).astype(np.float16).astype(np.float64)
    return values, s.reshape(x.shape[0], -1)


def block_mins(model: "LlamaGguf", name: str, rows=None) -> np.ndarray:
    """The f16 min `m` of every block of a Q4_1 / Q5_1 matrix, [rows, blocks], float64."""
    t = model.tensors[name]
    raw = np.asarray(t.data if rows is None else t.data[np.asarray(rows)], dtype=np.uint8)
    size = Q8_1_ACT[model.type_of(name)]
    blocks = raw.reshape(raw.shape[0], -1, size)
    return blocks[:, :, 2:4].copy().view(np.float16)[..., 0].astype(np.float64)


def activation_rounding(ty: T):
    """The rounding ggml applies to a product's activations for a weight of type `ty`."""
    if ty == T.F32:
        return lambda a: a
    if ty == T.F16:
        return round_f16
    if ty == T.BF16:
        return round_bf16
    if ty in Q8_0_ACT:
        return lambda a: round_q8_activations(a).astype(np.float64)
    if ty in Q8_K_ACT:
        return round_q8_k
    if ty in Q8_1_ACT:
        return lambda a: q8_1_blocks(a)[0]
    raise NotImplementedError(f"--ggml-activations: products with {ty.name} weights are not reproduced")


# ---- math --------------------------------------------------------------------------------

def rms_norm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    return w * (x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps))


def silu(z: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return z / (1.0 + np.exp(-z))


def yarn_corr_dims(d: int, n_orig: int, base: float) -> tuple[float, float]:
    def c(beta: float) -> float:
        return d * math.log(n_orig / (beta * 2.0 * math.pi)) / (2.0 * math.log(base))
    return max(0.0, math.floor(c(BETA_FAST))), min(d - 1.0, math.ceil(c(BETA_SLOW)))


def rope_tables(hp: Hparams, positions: np.ndarray, ff: np.ndarray | None):
    """(theta [n, d/2], magnitude m) as ggml's NORMAL rope computes them for `hp`."""
    d = hp.head_dim
    j = np.arange(d // 2, dtype=np.float64)
    inv = np.power(hp.rope_base, -2.0 * j / d)
    if ff is not None:
        inv = inv / ff
    extrap = np.asarray(positions, dtype=np.float64)[:, None] * inv[None, :]
    freq_scale = 1.0 if hp.scaling == "none" else 1.0 / hp.factor
    interp = freq_scale * extrap
    m = hp.attn_factor
    if hp.scaling != "yarn":
        return interp, m
    low, high = yarn_corr_dims(d, hp.orig_context, hp.rope_base)
    ramp = 1.0 - np.clip((j - low) / max(0.001, high - low), 0.0, 1.0)
    theta = interp * (1.0 - ramp) + extrap * ramp
    factor = 1.0 / freq_scale
    if factor > 1.0:
        m *= 1.0 + 0.1 * math.log(factor)
    return theta, m


def rotate_normal(x: np.ndarray, theta: np.ndarray, m: float) -> np.ndarray:
    """x [n, heads, d] rotated in adjacent pairs (2j, 2j+1) by theta [n, d/2], times m."""
    c = (np.cos(theta) * m)[:, None, :]
    s = (np.sin(theta) * m)[:, None, :]
    a, b = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = a * c - b * s
    out[..., 1::2] = a * s + b * c
    return out


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Causal GQA over positions 0..n-1: q [n, H, d], k/v [n, Hkv, d] -> [n, H*d]."""
    n, n_heads, d = q.shape
    group = n_heads // k.shape[1]
    kh, vh = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    scores = np.einsum("qhd,khd->hqk", q, kh) / math.sqrt(d)
    mask = np.tril(np.ones((n, n), dtype=bool))
    scores = np.where(mask[None], scores, -np.inf)
    p = np.exp(scores - scores.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    return np.einsum("hqk,khd->qhd", p, vh).reshape(n, n_heads * d)


def product(model: LlamaGguf, name: str, a: np.ndarray, ggml_activations: bool,
            w: np.ndarray | None = None, rows=None) -> np.ndarray:
    """a @ W.T for matrix `name` (or its rows `rows`, dequantized as `w`), with ggml's
    activation rounding when asked."""
    w = model.tensor(name) if w is None else w
    if not ggml_activations:
        return a @ w.T
    if model.type_of(name) in Q8_1_ACT:
        # ggml's Q4_1 / Q5_1 dot: d_w d_a sum(q_w q_a) + m_w s_a, with the block sum s_a
        # rounded to f16 (not the exact m_w d_a sum q_a).
        values, sums = q8_1_blocks(a)
        mins = block_mins(model, name, rows)
        return values @ (w - np.repeat(mins, 32, axis=1)).T + sums @ mins.T
    return activation_rounding(model.type_of(name))(a) @ w.T


def forward_model(model: LlamaGguf, tokens: Sequence[int], capture: Sequence[int] = (),
                  ggml_activations: bool = False, positions: Sequence[int] | None = None,
                  logits_chunk: int = 16384):
    """(logits [n, vocab], captured [n, len(capture) * hidden]), float64. `positions`
    defaults to 0..n-1 (attention stays causal in sequence order)."""
    hp = model.hp
    tokens = [int(t) for t in tokens]
    if not tokens:
        raise ValueError("empty token sequence")
    for t in tokens:
        if not 0 <= t < hp.vocab:
            raise ValueError(f"token {t} out of range [0, {hp.vocab})")
    capture = [int(c) for c in capture]
    for c in capture:
        if not -1 <= c < hp.n_layers:
            raise ValueError(f"capture layer {c} out of range [-1, {hp.n_layers})")
    n, d = len(tokens), hp.head_dim
    qd, kvd = hp.n_heads * d, hp.n_kv_heads * d
    pos = np.arange(n) if positions is None else np.asarray(positions, dtype=np.int64)
    ff = model.tensor("rope_freqs.weight") if hp.freq_factors else None
    theta, m = rope_tables(hp, pos, ff)

    def mm(a: np.ndarray, name: str, w: np.ndarray | None = None, rows=None) -> np.ndarray:
        return product(model, name, a, ggml_activations, w, rows)

    def bias(name: str):
        return model.tensor(name) if model.has(name) else 0.0

    x = model.rows("token_embd.weight", tokens)
    taps = {-1: x.copy()} if -1 in capture else {}
    for i in range(hp.n_layers):
        b = f"blk.{i}."
        h = rms_norm(x, model.tensor(b + "attn_norm.weight"), hp.eps)
        if hp.fused_qkv:
            qkv = mm(h, b + "attn_qkv.weight") + bias(b + "attn_qkv.bias")
            q, k, v = qkv[:, :qd], qkv[:, qd:qd + kvd], qkv[:, qd + kvd:]
        else:
            q = mm(h, b + "attn_q.weight") + bias(b + "attn_q.bias")
            k = mm(h, b + "attn_k.weight") + bias(b + "attn_k.bias")
            v = mm(h, b + "attn_v.weight") + bias(b + "attn_v.bias")
        q = rotate_normal(q.reshape(n, hp.n_heads, d), theta, m)
        k = rotate_normal(k.reshape(n, hp.n_kv_heads, d), theta, m)
        a = attention(q, k, v.reshape(n, hp.n_kv_heads, d))
        x = x + mm(a, b + "attn_output.weight") + bias(b + "attn_output.bias")
        h2 = rms_norm(x, model.tensor(b + "ffn_norm.weight"), hp.eps)
        g = mm(h2, b + "ffn_gate.weight") + bias(b + "ffn_gate.bias")
        u = mm(h2, b + "ffn_up.weight") + bias(b + "ffn_up.bias")
        x = x + mm(silu(g) * u, b + "ffn_down.weight") + bias(b + "ffn_down.bias")
        if i in capture:
            taps[i] = x.copy()
    hf = rms_norm(x, model.tensor("output_norm.weight"), hp.eps)
    out = model.output_name()
    logits = np.empty((n, hp.vocab))
    for s in range(0, hp.vocab, logits_chunk):  # bounded memory for large vocabularies
        e = min(hp.vocab, s + logits_chunk)
        logits[:, s:e] = mm(hf, out, model.rows(out, np.arange(s, e)), np.arange(s, e))
    captured = np.concatenate([taps[c] for c in capture], axis=1) if capture else np.zeros((n, 0))
    return logits, captured


def forward(path: str, tokens: Sequence[int], capture: Sequence[int] = (), ggml_activations: bool = False):
    """Float64 reference: (logits [n, vocab], captured [n, len(capture) * hidden])."""
    return forward_model(LlamaGguf(path), tokens, capture, ggml_activations)


def _int_list(s: str) -> list[int]:
    s = s.strip()
    return [int(v) for v in s.split(",") if v.strip()] if s else []


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="float64 numpy reference of llama.cpp's llama graph on a GGUF")
    ap.add_argument("gguf", help="target model, llama.cpp llama layout")
    ap.add_argument("--tokens", required=True, type=_int_list, help="comma-separated token ids (positions 0..n-1)")
    ap.add_argument("--capture", default=[], type=_int_list,
                    help="comma-separated layer ids whose output (pre final norm) to capture, in order; -1 = embeddings")
    ap.add_argument("--ggml-activations", action="store_true",
                    help="round each product's activations to the weight type's vec_dot_type, as ggml's x86 CPU does")
    ap.add_argument("--out", required=True, help="output JSON path ('-' for stdout)")
    args = ap.parse_args(argv)
    try:
        logits, captured = forward(args.gguf, args.tokens, args.capture, args.ggml_activations)
    except (ValueError, KeyError, NotImplementedError) as e:
        print(f"llama_ref: error: {e}", file=sys.stderr)
        return 2
    doc = {"logits": logits.tolist(), "captured": captured.tolist(),
           "argmax": [int(v) for v in np.argmax(logits, axis=-1)]}
    if args.out == "-":
        json.dump(doc, sys.stdout)
        sys.stdout.write("\n")
    else:
        with open(args.out, "w") as f:
            json.dump(doc, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())

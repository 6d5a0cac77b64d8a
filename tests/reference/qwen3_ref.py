#!/usr/bin/env python3
"""Independent float64 numpy reference forward pass of a Qwen3 target model read from a GGUF file.

What it is
----------
A test oracle for the dspark Rust runtime: given a llama.cpp-layout ``qwen3`` GGUF file and a token
sequence, it computes the target's logits at every position and the "captured" hidden states of
chosen layers (the residual stream right after decoder layer i, before the final norm -- the DFlash
target features). It is written from the math (docs/RUNTIME-MATH.md sections
1.4, 1.8, 2.1) and shares no code with the Rust implementation. Every weight type (F32, F16,
BF16, Q8_0, ...) is dequantized with gguf-py (``gguf.quants.dequantize``) to float32, which is
exact, and then widened to float64; all arithmetic is float64, so the result is a more precise
reference than a float32 runtime, not a bit-exact replica of one.

The math (tokens t_0..t_{n-1} at positions 0..n-1; pre-norm decoder; causal attention; no biases)
-------------------------------------------------------------------------------------------------
  RMSNorm(x, w) = w * x / sqrt(mean(x^2) + eps)        (weight used plain, not 1 + w)
  x = embed[t]                                           (token_embd.weight, shape [vocab, hidden])
  for each layer i:
      h = RMSNorm(x, attn_norm)
      q = Wq h -> [n, H, d];  k = Wk h, v = Wv h -> [n, Hkv, d]
      q = RoPE(RMSNorm_d(q, attn_q_norm)); k = RoPE(RMSNorm_d(k, attn_k_norm))
          (per-head RMSNorm over d with a [d] weight shared by all heads; same eps)
      RoPE NeoX / half rotation over the first r = rope.dimension_count (default d) dims:
          pair element j with j + r/2, omega_j = theta^(-2j/r), phi = pos * omega_j,
          a' = a cos phi - b sin phi,  b' = b cos phi + a sin phi    (angles in float64)
      GQA: query head h reads kv head h // (H / Hkv)
      scores = q.k / sqrt(d), causal (position p sees keys 0..p), softmax over keys
      x = x + Wo concat_heads(softmax(scores) v)
      h2 = RMSNorm(x, ffn_norm)
      x = x + Wdown( silu(Wgate h2) * (Wup h2) ),  silu(z) = z / (1 + exp(-z))
      captured[i] = x
  logits = Woutput RMSNorm(x, output_norm)   (output.weight, or token_embd.weight when absent = tied)

GGUF layout: a ggml tensor with ne = [cols, rows] is the numpy matrix W of shape (rows, cols) and
y = W @ x. Hyperparameters: qwen3.{embedding_length, block_count, attention.head_count,
attention.head_count_kv, attention.key_length, feed_forward_length, rope.freq_base,
attention.layer_norm_rms_epsilon}. llama.cpp runs the qwen3 architecture with NeoX rope
(LLAMA_ROPE_TYPE_NEOX) directly on the stored q/k weights (no row permutation, unlike its
interleaved-rope LLaMA path), so the NeoX pairing applies to the weights as stored.

How to run
----------
  /tmp/pyenv/bin/python tests/reference/qwen3_ref.py TARGET.gguf --tokens 5,17,300 \
      [--capture 1,0] --out OUT.json
writes {"logits": [[vocab floats] per position],
        "captured": [[captured layers' hidden states concatenated in --capture order] per position],
        "argmax": [argmax of logits per position]}.
Capture id -1 (an extension, DeepSpec convention) means the embedding output; a list starting with
it must be written --capture=-1,3 (argparse would read "-1,3" as an option).

As a module: ``forward(path, tokens, capture) -> (logits [n, vocab], captured [n, m*hidden])``,
float64 numpy arrays. ``forward_model(model, tokens, capture, dtype=..., ...)`` runs on an already
opened ``Qwen3Gguf`` and can also run the same math in float32 (used by precision_experiment.py).
Only numpy and gguf (tests/python/requirements.txt) are needed.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from typing import Sequence

import numpy as np
from gguf import GGUFReader, GGMLQuantizationType
from gguf.quants import dequantize, quantize

from ggml_q8 import round_q8_activations

ARCH = "qwen3"


@dataclass
class Hparams:
    hidden: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    ffn: int
    vocab: int
    rope_theta: float
    rope_dim: int
    eps: float
    tied_output: bool


class Qwen3Gguf:
    """A Qwen3 GGUF file opened lazily: tensors are dequantized only when asked for."""

    def __init__(self, path: str):
        self.path = path
        self.reader = GGUFReader(path, "r")
        self.tensors = {t.name: t for t in self.reader.tensors}
        arch = self._field("general.architecture")
        if arch != ARCH:
            raise ValueError(f"{path}: general.architecture is {arch!r}, expected {ARCH!r}")
        self._check_rope_scaling()
        hidden = int(self._field(f"{ARCH}.embedding_length"))
        n_heads = int(self._field(f"{ARCH}.attention.head_count"))
        head_dim = int(self._field(f"{ARCH}.attention.key_length", hidden // n_heads))
        value_dim = int(self._field(f"{ARCH}.attention.value_length", head_dim))
        if value_dim != head_dim:
            raise ValueError(f"value_length {value_dim} != key_length {head_dim} is not Qwen3")
        emb = self.tensors["token_embd.weight"]
        self.hp = Hparams(
            hidden=hidden,
            n_layers=int(self._field(f"{ARCH}.block_count")),
            n_heads=n_heads,
            n_kv_heads=int(self._field(f"{ARCH}.attention.head_count_kv", n_heads)),
            head_dim=head_dim,
            ffn=int(self._field(f"{ARCH}.feed_forward_length")),
            vocab=int(emb.shape[1]),
            rope_theta=float(self._field(f"{ARCH}.rope.freq_base", 10000.0)),
            rope_dim=int(self._field(f"{ARCH}.rope.dimension_count", head_dim)),
            eps=float(self._field(f"{ARCH}.attention.layer_norm_rms_epsilon")),
            tied_output="output.weight" not in self.tensors,
        )
        self._check_shapes()

    # ---- metadata -------------------------------------------------------------------------
    _MISSING = object()

    def _field(self, key: str, default=_MISSING):
        f = self.reader.get_field(key)
        if f is None:
            if default is Qwen3Gguf._MISSING:
                raise KeyError(f"{self.path}: missing GGUF key {key!r}")
            return default
        return f.contents()

    def _check_rope_scaling(self) -> None:
        kind = self._field(f"{ARCH}.rope.scaling.type", "none")
        factor = float(self._field(f"{ARCH}.rope.scaling.factor", 1.0))
        if kind not in ("none", "") and factor != 1.0:
            raise NotImplementedError(f"rope scaling {kind!r} x{factor} is not implemented (target uses plain RoPE)")

    def _check_shapes(self) -> None:
        hp = self.hp
        if hp.n_heads % hp.n_kv_heads:
            raise ValueError(f"head_count {hp.n_heads} not a multiple of head_count_kv {hp.n_kv_heads}")
        if hp.rope_dim % 2 or hp.rope_dim > hp.head_dim:
            raise ValueError(f"bad rope dimension {hp.rope_dim} for head_dim {hp.head_dim}")
        qd, kvd = hp.n_heads * hp.head_dim, hp.n_kv_heads * hp.head_dim
        want = {"token_embd.weight": (hp.hidden, hp.vocab), "output_norm.weight": (hp.hidden,)}
        if not hp.tied_output:
            want["output.weight"] = (hp.hidden, hp.vocab)
        for i in range(hp.n_layers):
            b = f"blk.{i}."
            want.update({
                b + "attn_norm.weight": (hp.hidden,),
                b + "attn_q.weight": (hp.hidden, qd),
                b + "attn_k.weight": (hp.hidden, kvd),
                b + "attn_v.weight": (hp.hidden, kvd),
                b + "attn_output.weight": (qd, hp.hidden),
                b + "attn_q_norm.weight": (hp.head_dim,),
                b + "attn_k_norm.weight": (hp.head_dim,),
                b + "ffn_norm.weight": (hp.hidden,),
                b + "ffn_gate.weight": (hp.hidden, hp.ffn),
                b + "ffn_up.weight": (hp.hidden, hp.ffn),
                b + "ffn_down.weight": (hp.ffn, hp.hidden),
            })
        for name, ne in want.items():
            t = self.tensors.get(name)
            if t is None:
                raise KeyError(f"{self.path}: missing tensor {name}")
            if tuple(int(v) for v in t.shape) != ne:
                raise ValueError(f"{name}: ne {list(map(int, t.shape))}, expected {list(ne)}")

    # ---- tensors --------------------------------------------------------------------------
    def _numpy_shape(self, name: str) -> tuple[int, ...]:
        return tuple(reversed([int(v) for v in self.tensors[name].shape]))

    def tensor(self, name: str, dtype=np.float64) -> np.ndarray:
        """Whole tensor, dequantized; ne [cols, rows] -> shape (rows, cols)."""
        t = self.tensors[name]
        a = dequantize(t.data, GGMLQuantizationType(t.tensor_type))
        return np.asarray(a, dtype=np.float32).reshape(self._numpy_shape(name)).astype(dtype)

    def rows(self, name: str, idx, dtype=np.float64) -> np.ndarray:
        """Selected rows of a 2-D tensor (ggml blocks never straddle rows, so this is exact)."""
        t = self.tensors[name]
        cols = self._numpy_shape(name)[-1]
        raw = t.data[np.asarray(idx)]
        a = dequantize(raw, GGMLQuantizationType(t.tensor_type))
        return np.asarray(a, dtype=np.float32).reshape(len(idx), cols).astype(dtype)

    def output_name(self) -> str:
        return "token_embd.weight" if self.hp.tied_output else "output.weight"


# ---- math ------------------------------------------------------------------------------------

def rms_norm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    """w * x / sqrt(mean(x^2) + eps) over the last axis."""
    ms = np.mean(x * x, axis=-1, keepdims=True)
    return w * (x / np.sqrt(ms + x.dtype.type(eps)))


def silu(z: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):  # exp(-z) -> inf for very negative z gives the correct 0
        return z / (1 + np.exp(-z))


def rope_angles(positions: np.ndarray, rot_dim: int, theta: float, angle_dtype=np.float64) -> np.ndarray:
    """phi[p, j] = pos_p * theta^(-2j/r), j in [0, r/2). Shape [n, r/2]."""
    j = np.arange(rot_dim // 2, dtype=angle_dtype)
    omega = np.power(angle_dtype(theta), -2.0 * j / rot_dim).astype(angle_dtype)
    return np.asarray(positions, dtype=angle_dtype)[:, None] * omega[None, :]


def rope_neox(x: np.ndarray, phi: np.ndarray, rot_dim: int) -> np.ndarray:
    """NeoX half rotation of x [n, heads, d] over its first rot_dim dims; phi [n, rot_dim/2]."""
    half = rot_dim // 2
    cos = np.cos(phi).astype(x.dtype)[:, None, :]
    sin = np.sin(phi).astype(x.dtype)[:, None, :]
    a, b = x[..., :half], x[..., half:rot_dim]
    out = x.copy()
    out[..., :half] = a * cos - b * sin
    out[..., half:rot_dim] = b * cos + a * sin
    return out


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, q_pos: np.ndarray, k_pos: np.ndarray) -> np.ndarray:
    """Causal GQA. q [n, H, d], k/v [m, Hkv, d]; query at position p sees keys with position <= p.
    Returns [n, H*d]."""
    n, n_heads, d = q.shape
    group = n_heads // k.shape[1]
    kh = np.repeat(k, group, axis=1)  # query head h -> kv head h // group
    vh = np.repeat(v, group, axis=1)
    scores = np.einsum("qhd,khd->hqk", q, kh) / q.dtype.type(math.sqrt(d))
    mask = k_pos[None, :] <= q_pos[:, None]  # [n, m]
    scores = np.where(mask[None], scores, -np.inf)
    scores = scores - scores.max(axis=-1, keepdims=True)
    p = np.exp(scores)
    p = p / p.sum(axis=-1, keepdims=True)
    out = np.einsum("hqk,khd->qhd", p, vh)
    return out.reshape(n, n_heads * d)


def _parse_capture(capture: Sequence[int], n_layers: int) -> list[int]:
    capture = [int(c) for c in capture]
    for c in capture:
        if not -1 <= c < n_layers:
            raise ValueError(f"capture layer {c} out of range [-1, {n_layers})")
    return capture


def forward_model(model: Qwen3Gguf, tokens: Sequence[int], capture: Sequence[int] = (),
                  dtype=np.float64, positions: Sequence[int] | None = None,
                  angle_dtype=np.float64, logits_chunk: int = 16384,
                  matmul=None, kv_round=None, q8_activations: bool = False):
    """Forward pass; returns (logits [n, vocab], captured [n, len(capture)*hidden]) in `dtype`.

    dtype=float64 is the reference. dtype=float32 runs the identical math in float32 (used only
    to estimate how far an f32 implementation should drift from the reference). `positions`
    defaults to 0..n-1. Experiment hooks (None for the reference): `matmul(a, W) -> a @ W.T`
    replaces every weight product (x, q, k, v, o, gate, up, down, lm head); `kv_round(t)` is applied
    to k (after norm + RoPE) and v before attention, e.g. to emulate an f16 KV cache.

    q8_activations=True reproduces the CPU matmul numerics of ggml and dspark: before a
    product with a Q8_0 weight, each activation row is rounded to Q8_0 (ggml's x86
    activation recipe, ggml_q8.py), and the product uses the rounded values;
    everything else stays float64."""
    hp = model.hp
    tokens = [int(t) for t in tokens]
    if not tokens:
        raise ValueError("empty token sequence")
    for t in tokens:
        if not 0 <= t < hp.vocab:
            raise ValueError(f"token {t} out of range [0, {hp.vocab})")
    capture = _parse_capture(capture, hp.n_layers)
    n = len(tokens)
    pos = np.arange(n) if positions is None else np.asarray(positions, dtype=np.int64)
    assert pos.shape == (n,)
    phi = rope_angles(pos, hp.rope_dim, hp.rope_theta, angle_dtype)
    eps, d = hp.eps, hp.head_dim
    def W(name: str) -> np.ndarray:  # noqa: N802
        nonlocal names
        if name.endswith(("attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight",
                          "ffn_gate.weight", "ffn_up.weight", "ffn_down.weight")):
            names = iter((name,))
        return model.tensor(name, dtype)
    mm0 = matmul or (lambda a, w: a @ w.T)  # noqa: E731

    def act(a: np.ndarray, name: str) -> np.ndarray:
        if not q8_activations or model.tensors[name].tensor_type != GGMLQuantizationType.Q8_0:
            return a
        flat = np.ascontiguousarray(a.reshape(a.shape[0], -1), dtype=np.float32)
        return round_q8_activations(flat).reshape(a.shape).astype(dtype)

    names = iter(())

    def mm(a: np.ndarray, w: np.ndarray) -> np.ndarray:
        return mm0(act(a, next(names)), w)
    kvr = kv_round or (lambda t: t)  # noqa: E731

    x = model.rows("token_embd.weight", tokens, dtype)  # [n, hidden]
    taps = {}
    if -1 in capture:
        taps[-1] = x.copy()
    for i in range(hp.n_layers):
        b = f"blk.{i}."
        h = rms_norm(x, W(b + "attn_norm.weight"), eps)
        q = mm(h, W(b + "attn_q.weight")).reshape(n, hp.n_heads, d)
        k = mm(h, W(b + "attn_k.weight")).reshape(n, hp.n_kv_heads, d)
        v = mm(h, W(b + "attn_v.weight")).reshape(n, hp.n_kv_heads, d)
        q = rope_neox(rms_norm(q, W(b + "attn_q_norm.weight"), eps), phi, hp.rope_dim)
        k = rope_neox(rms_norm(k, W(b + "attn_k_norm.weight"), eps), phi, hp.rope_dim)
        a = attention(q, kvr(k), kvr(v), pos, pos)
        x = x + mm(a, W(b + "attn_output.weight"))
        h2 = rms_norm(x, W(b + "ffn_norm.weight"), eps)
        g = mm(h2, W(b + "ffn_gate.weight"))
        u = mm(h2, W(b + "ffn_up.weight"))
        x = x + mm(silu(g) * u, W(b + "ffn_down.weight"))
        if i in capture:
            taps[i] = x.copy()
    hf = rms_norm(x, W("output_norm.weight"), eps)
    out_name = model.output_name()
    logits = np.empty((n, hp.vocab), dtype=dtype)
    for s in range(0, hp.vocab, logits_chunk):  # bounded memory for large vocabularies
        e = min(hp.vocab, s + logits_chunk)
        names = iter((out_name,))
        logits[:, s:e] = mm(hf, model.rows(out_name, np.arange(s, e), dtype))
    captured = (np.concatenate([taps[c] for c in capture], axis=1) if capture
                else np.zeros((n, 0), dtype=dtype))
    return logits, captured


def forward(path: str, tokens: Sequence[int], capture: Sequence[int] = (), q8_activations: bool = False):
    """Float64 reference: (logits [n, vocab], captured [n, len(capture)*hidden])."""
    return forward_model(Qwen3Gguf(path), tokens, capture, dtype=np.float64, q8_activations=q8_activations)


def _int_list(s: str) -> list[int]:
    s = s.strip()
    return [int(v) for v in s.split(",") if v.strip()] if s else []


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="float64 numpy reference forward of a qwen3 GGUF target")
    ap.add_argument("gguf", help="target model, llama.cpp qwen3 layout")
    ap.add_argument("--tokens", required=True, type=_int_list, help="comma-separated token ids (positions 0..n-1)")
    ap.add_argument("--capture", default=[], type=_int_list,
                    help="comma-separated layer ids whose output (pre final norm) to capture, in order; "
                         "-1 = embeddings (write --capture=-1,0 when the list starts with -1)")
    ap.add_argument("--out", required=True, help="output JSON path ('-' for stdout)")
    ap.add_argument("--q8-activations", action="store_true",
                    help="round activations to Q8_0 before products with Q8_0 weights (ggml/dspark CPU numerics)")
    args = ap.parse_args(argv)
    try:
        logits, captured = forward(args.gguf, args.tokens, args.capture, args.q8_activations)
    except (ValueError, KeyError, NotImplementedError) as e:
        print(f"qwen3_ref: error: {e}", file=sys.stderr)
        return 2
    doc = {
        "logits": logits.tolist(),
        "captured": captured.tolist(),
        "argmax": [int(v) for v in np.argmax(logits, axis=-1)],
    }
    if args.out == "-":
        json.dump(doc, sys.stdout)
        sys.stdout.write("\n")
    else:
        with open(args.out, "w") as f:
            json.dump(doc, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())

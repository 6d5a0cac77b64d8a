#!/usr/bin/env python3
"""Independent check of a llama.cpp-layout drafter written by `dspark convert --layout
llama.cpp`, on top of llama.cpp's own `gguf` Python package.

Written from docs/LLAMA-CPP.md §2 (llama.cpp's converter and
loader), not from the Rust code:

* metadata: `general.architecture` = `dflash`; the keys llama.cpp's loader reads with
  their types (UINT32 scalars, FLOAT32 eps / rope base, BOOL flags, `dflash.target_layers`
  an INT32 array of 1-based layer inputs); every `tokenizer.*` key identical (type and
  value, in order) to the target GGUF's; `tokenizer.ggml.mask_token_id` inside the vocab;
* tensors: exactly the set llama.cpp's `load_arch_tensors` creates for a Qwen3-backbone
  DSpark drafter, with the ggml shapes of §2.4, every 2-D `.weight` at the file type's
  matrix type (F16 when its rows are not whole Q8_0 blocks) and the rest F32 (§2.5);
* with `--dflash-draft OTHER.gguf` (the default-layout conversion of the same source):
  every tensor's bytes equal its counterpart's, the confidence weight equal to gguf-py's
  own quantization of the counterpart's F32 values; the geometry keys agree, and
  `target_layers` is `dflash.target_layer_ids` + 1.

Usage: check_llama_layout.py DRAFT.gguf --target TARGET.gguf [--dflash-draft OTHER.gguf]
Prints one line per failure and exits 1 if any, else prints `ok` and exits 0.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

import gguf
from gguf import GGMLQuantizationType as QT
from gguf import GGUFValueType as VT

FILE_TYPE_MATRIX = {0: QT.F32, 1: QT.F16, 7: QT.Q8_0, 32: QT.BF16}

fails: list[str] = []


def fail(msg: str) -> None:
    fails.append(msg)


def fields(r: gguf.GGUFReader) -> dict[str, gguf.ReaderField]:
    return {f.name: f for f in r.fields.values()}


def value(f: gguf.ReaderField):
    if f.types[0] == VT.ARRAY:
        return [f.contents(i) for i in range(len(f.data))]
    return f.contents()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("draft")
    ap.add_argument("--target", required=True)
    ap.add_argument("--dflash-draft")
    a = ap.parse_args()

    r = gguf.GGUFReader(a.draft)
    kv = fields(r)
    t_kv = fields(gguf.GGUFReader(a.target))

    def want(key: str, vtype: VT, required: bool = True):
        f = kv.get(key)
        if f is None:
            if required:
                fail(f"key {key} missing")
            return None
        if f.types[0] != vtype:
            fail(f"key {key} is {f.types[0].name}, llama.cpp reads {vtype.name}")
            return None
        return value(f)

    if want("general.architecture", VT.STRING) != "dflash":
        fail("general.architecture is not dflash")
    E = want("dflash.embedding_length", VT.UINT32)
    n_layer = want("dflash.block_count", VT.UINT32)
    F = want("dflash.feed_forward_length", VT.UINT32)
    H = want("dflash.attention.head_count", VT.UINT32)
    H_kv = want("dflash.attention.head_count_kv", VT.UINT32)
    want("dflash.context_length", VT.UINT32)
    D = want("dflash.attention.key_length", VT.UINT32)
    if want("dflash.attention.value_length", VT.UINT32) != D:
        fail("value_length differs from key_length")
    want("dflash.attention.layer_norm_rms_epsilon", VT.FLOAT32)
    want("dflash.rope.freq_base", VT.FLOAT32)
    B = want("dflash.block_size", VT.UINT32)
    ftype = want("general.file_type", VT.UINT32)
    tl = kv.get("dflash.target_layers")
    if tl is None or tl.types != [VT.ARRAY, VT.INT32]:
        fail("dflash.target_layers missing or not ARRAY[INT32]")
        layers = []
    else:
        layers = value(tl)
        if any(v < 1 for v in layers) or len(set(layers)) != len(layers):
            fail(f"dflash.target_layers {layers}: values must be distinct layer inputs >= 1")
    has_markov = "markov_w1.weight" in {t.name for t in r.tensors}
    if has_markov:
        want("dflash.sample_from_anchor", VT.BOOL)
        want("dflash.has_confidence_head", VT.BOOL)

    # The carried vocabulary: the target's tokenizer keys, same types, values and order.
    t_tok = [k for k in t_kv if k.startswith("tokenizer.") and k != "tokenizer.ggml.mask_token_id"]
    d_tok = [k for k in kv if k.startswith("tokenizer.") and k != "tokenizer.ggml.mask_token_id"]
    if t_tok != d_tok:
        fail(f"tokenizer keys {d_tok} differ from the target's {t_tok}")
    for k in t_tok:
        if k in kv and (kv[k].types != t_kv[k].types or value(kv[k]) != value(t_kv[k])):
            fail(f"{k} differs from the target's")
    V = len(value(t_kv["tokenizer.ggml.tokens"]))
    mask = want("tokenizer.ggml.mask_token_id", VT.UINT32)
    if mask is not None and not 0 <= mask < V:
        fail(f"mask id {mask} outside the vocabulary of {V}")

    # Tensors: the set and ggml shapes of load_arch_tensors (docs/LLAMA-CPP.md §2.4).
    if None in (E, n_layer, F, H, H_kv, D, ftype):
        return report()
    k = len(layers)
    expect: dict[str, list[int]] = {
        "fc.weight": [k * E, E],
        "enc.output_norm.weight": [E],
        "output_norm.weight": [E],
    }
    for i in range(n_layer):
        p = f"blk.{i}."
        expect |= {
            p + "attn_norm.weight": [E],
            p + "attn_q.weight": [E, D * H],
            p + "attn_k.weight": [E, D * H_kv],
            p + "attn_v.weight": [E, D * H_kv],
            p + "attn_output.weight": [D * H, E],
            p + "attn_q_norm.weight": [D],
            p + "attn_k_norm.weight": [D],
            p + "ffn_norm.weight": [E],
            p + "ffn_gate.weight": [E, F],
            p + "ffn_up.weight": [E, F],
            p + "ffn_down.weight": [F, E],
        }
    tensors = {t.name: t for t in r.tensors}
    if has_markov:
        R = int(tensors["markov_w1.weight"].shape[0])
        expect |= {"markov_w1.weight": [R, V], "markov_w2.weight": [R, V]}
        if "conf_proj.weight" in tensors:
            expect |= {"conf_proj.weight": [E + R, 1], "conf_proj.bias": [1]}
    for opt in ("token_embd.weight", "output.weight"):
        if opt in tensors:
            expect[opt] = [E, V]
    if set(tensors) != set(expect):
        fail(f"tensors {sorted(set(tensors) ^ set(expect))} are extra or missing")
    mtype = FILE_TYPE_MATRIX.get(ftype)
    for name, t in tensors.items():
        shape = [int(x) for x in t.shape]
        want_shape = expect.get(name)
        if want_shape is not None and shape[: len(want_shape)] != want_shape and shape != want_shape:
            fail(f"{name}: shape {shape}, llama.cpp wants {want_shape}")
        matrix = len([d for d in shape if d != 1]) >= 2 or name == "conf_proj.weight"
        matrix = matrix and name.endswith(".weight") and not name.endswith("_norm.weight")
        ty = mtype if matrix else QT.F32
        if ty == QT.Q8_0 and shape[0] % 32 != 0:
            ty = QT.F16
        if t.tensor_type != ty:
            fail(f"{name}: type {t.tensor_type.name}, llama.cpp's converter writes {ty.name}")

    if a.dflash_draft:
        o = gguf.GGUFReader(a.dflash_draft)
        okv = fields(o)
        ids = value(okv["dflash-draft.dflash.target_layer_ids"])
        if layers != [i + 1 for i in ids]:
            fail(f"target_layers {layers} is not target_layer_ids {ids} + 1")
        for key in ("embedding_length", "block_count", "feed_forward_length",
                    "attention.head_count", "attention.head_count_kv", "attention.key_length",
                    "context_length", "attention.layer_norm_rms_epsilon", "rope.freq_base"):
            if value(okv["dflash-draft." + key]) != value(kv["dflash." + key]):
                fail(f"dflash.{key} differs from dflash-draft.{key}")
        if value(okv["dflash-draft.dflash.block_size"]) != B:
            fail("block_size differs")
        if has_markov and value(okv["dflash-draft.dflash.mask_token_id"]) != mask:
            fail("mask id differs")
        rename = {
            "dflash.fc.weight": "fc.weight",
            "dflash.hidden_norm.weight": "enc.output_norm.weight",
            "dflash.dspark.markov.w1": "markov_w1.weight",
            "dflash.dspark.markov.w2": "markov_w2.weight",
            "dflash.dspark.confidence.weight": "conf_proj.weight",
            "dflash.dspark.confidence.bias": "conf_proj.bias",
        }
        others = {rename.get(t.name, t.name): t for t in o.tensors}
        if set(others) != set(tensors):
            fail(f"tensor sets differ: {sorted(set(others) ^ set(tensors))}")
        for name, t in tensors.items():
            ot = others.get(name)
            if ot is None:
                continue
            mine = np.asarray(t.data).tobytes()
            if t.tensor_type == ot.tensor_type:
                if mine != np.asarray(ot.data).tobytes():
                    fail(f"{name}: bytes differ from the dflash-draft file's")
            else:
                values = np.asarray(ot.data, dtype=np.float32).reshape(-1, int(t.shape[0]))
                ref = gguf.quants.quantize(values, t.tensor_type).tobytes()
                if mine != ref:
                    fail(f"{name}: not gguf-py's {t.tensor_type.name} quantization of the F32 values")
    return report()


def report() -> int:
    for f in fails:
        print(f)
    if fails:
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())

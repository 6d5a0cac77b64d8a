#!/usr/bin/env python3
"""Speed anchor: the DSpark -> Q8_0 GGUF conversion done the gguf-py way.

What a typical user would write with llama.cpp's `gguf` package: read the safetensors
source with numpy memmaps, widen each tensor to f32, quantize matrices with
`gguf.quants.quantize(..., Q8_0)` (norms and the confidence head stay F32), and write with
`gguf.GGUFWriter` (add_tensor, then write_tensors_to_file) using the `dflash-draft` arch,
the contract's tensor names and canonical order and the main geometry keys. No hashing,
no fsync, no report. Prints the wall time in seconds at the end.

Usage (deps: tests/python/requirements.txt):
    python bench/gguf_py_convert.py SRC_DIR OUT.gguf
"""

from __future__ import annotations

import json
import re
import struct
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

import gguf
from gguf import GGMLQuantizationType as QT

# source layer suffix -> GGUF suffix, in the contract's canonical per-layer order
LAYER = {
    "input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v", "self_attn.q_norm": "attn_q_norm", "self_attn.k_norm": "attn_k_norm",
    "self_attn.o_proj": "attn_output", "post_attention_layernorm": "ffn_norm",
    "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
}
FIXED = {"fc.weight": "dflash.fc.weight", "hidden_norm.weight": "dflash.hidden_norm.weight",
         "norm.weight": "output_norm.weight"}
HEADS = ["dflash.dspark.markov.w1", "dflash.dspark.markov.w2",
         "dflash.dspark.confidence.weight", "dflash.dspark.confidence.bias"]


def gguf_name(name: str) -> str | None:
    if name in FIXED:
        return FIXED[name]
    if m := re.fullmatch(r"layers\.(\d+)\.(.+)\.weight", name):
        return f"blk.{m[1]}.{LAYER[m[2]]}.weight" if m[2] in LAYER else None
    if m := re.search(r"markov_head\.markov_w([12])\.weight$", name):
        return f"dflash.dspark.markov.w{m[1]}"
    if m := re.search(r"confidence_head(?:\.proj)?\.(weight|bias)$", name):
        return f"dflash.dspark.confidence.{m[1]}"
    return None


def read_headers(src: Path) -> dict[str, tuple[Path, dict[str, Any], int]]:
    """GGUF name -> (file, safetensors header entry, data start)."""
    index = src / "model.safetensors.index.json"
    files = (sorted(set(json.loads(index.read_text())["weight_map"].values()))
             if index.exists() else ["model.safetensors"])
    out = {}
    for f in files:
        with open(src / f, "rb") as fh:
            n = struct.unpack("<Q", fh.read(8))[0]
            header = json.loads(fh.read(n))
        for name, info in header.items():
            if name != "__metadata__" and (g := gguf_name(name)) is not None:
                out[g] = (src / f, info, 8 + n)
    return out


def load_f32(path: Path, info: dict[str, Any], base: int) -> np.ndarray:
    begin, end = info["data_offsets"]
    dt = np.dtype({"BF16": "<u2", "F16": "<f2", "F32": "<f4"}[info["dtype"]])
    a = np.memmap(path, dtype=dt, mode="r", offset=base + begin, shape=((end - begin) // dt.itemsize,))
    f32 = (a.astype(np.uint32) << 16).view(np.float32) if info["dtype"] == "BF16" else a.astype(np.float32)
    return f32.reshape(info["shape"])


def main() -> None:
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    t0 = time.perf_counter()
    src, out = Path(sys.argv[1]), sys.argv[2]
    cfg = json.loads((src / "config.json").read_text())
    dc = cfg.get("dflash_config", {})
    rope = cfg.get("rope_parameters") or {}
    tensors = read_headers(src)
    n_layer = cfg["num_hidden_layers"]
    order = ["dflash.fc.weight", "dflash.hidden_norm.weight"]
    for i in range(n_layer):
        order += [f"blk.{i}.{s}.weight" for s in LAYER.values()]
    order += ["output_norm.weight"] + [h for h in HEADS if h in tensors]

    w = gguf.GGUFWriter(out, "dflash-draft")
    a = "dflash-draft."
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0)
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    w.add_uint32(a + "context_length", cfg["max_position_embeddings"])
    w.add_uint32(a + "embedding_length", cfg["hidden_size"])
    w.add_uint32(a + "block_count", n_layer)
    w.add_uint32(a + "feed_forward_length", cfg["intermediate_size"])
    w.add_uint32(a + "attention.head_count", cfg["num_attention_heads"])
    w.add_uint32(a + "attention.head_count_kv", cfg["num_key_value_heads"])
    w.add_uint32(a + "attention.key_length", cfg["head_dim"])
    w.add_float32(a + "attention.layer_norm_rms_epsilon", cfg["rms_norm_eps"])
    w.add_float32(a + "rope.freq_base", cfg.get("rope_theta", rope.get("rope_theta", 10000.0)))
    w.add_uint32(a + "dflash.block_size", cfg["block_size"])
    ids = dc.get("target_layer_ids", cfg.get("target_layer_ids"))
    w.add_uint32(a + "dflash.n_target_layers", len(ids))
    w.add_array(a + "dflash.target_layer_ids", [int(i) for i in ids])
    if "dflash.dspark.markov.w1" in tensors:
        v, r = tensors["dflash.dspark.markov.w1"][1]["shape"]
        w.add_uint32(a + "dflash.dspark.enabled", 1)
        w.add_uint32(a + "dflash.dspark.markov_rank", r)
        w.add_uint32(a + "dflash.dspark.vocab_size", v)
    if "dflash.dspark.confidence.weight" in tensors:
        w.add_uint32(a + "dflash.dspark.confidence_dim", tensors["dflash.dspark.confidence.weight"][1]["shape"][-1])

    for name in order:
        x = load_f32(*tensors[name])
        if name.endswith("norm.weight") or name.startswith("dflash.dspark.confidence"):
            w.add_tensor(name, x)  # F32
        elif x.shape[-1] % 32 == 0:
            w.add_tensor(name, gguf.quants.quantize(x, QT.Q8_0), raw_dtype=QT.Q8_0)
        else:
            w.add_tensor(name, x.astype(np.float16))
        del x

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wall_seconds {time.perf_counter() - t0:.2f}")


if __name__ == "__main__":
    main()

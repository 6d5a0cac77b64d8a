#!/usr/bin/env python3
"""Independent checker for the GGUF files written by `dspark convert`.

Written from the project's docs (docs/OUTPUT-CONTRACT.md, docs/GGUF.md),
not from the Rust code, on top of llama.cpp's own `gguf` Python package:

* the file is read with `gguf.GGUFReader` (so gguf-py can read it), then its layout
  (version, dense aligned offsets, zero padding, exact file size), metadata key types
  and order, required keys, geometry consistency, tensor names / canonical order /
  shapes / type policy are checked against the output contract;
* with ``--source DIR`` the source checkpoint (config.json + model.safetensors or a
  sharded model.safetensors.index.json) is read here with numpy, every GGUF tensor is
  paired with its source tensor through this script's own name map, and the data bytes
  must equal gguf-py's reference (`gguf.quants.quantize` for Q8_0 / BF16, numpy casts
  for F32 / F16); provenance keys and a few config values are cross-checked too;
* with ``--report REPORT_JSON`` the conversion report is checked against the file
  (sizes, hashes, per-tensor offsets / bytes / sha256, counts, metadata, geometry) and,
  with ``--source``, its error figures are recomputed.

Usage:
    python3 -m venv /tmp/pyenv && /tmp/pyenv/bin/pip install -r tests/python/requirements.txt
    /tmp/pyenv/bin/python tests/python/check_gguf.py OUT.gguf [--source SRC_DIR] [--report REPORT.json]

Output: one line per failure on stderr, then one JSON line on stdout:
    {"ok": bool, "tensors": n, "checked_bytes": n, "failures": [...]}
where "tensors" is the GGUF's tensor count and "checked_bytes" the tensor data bytes that
matched the source reference or the report's sha256 (each tensor counted once).
Beyond the key types, the checker also fails on keys the contract does not list, on keys
out of the contract's order, and on missing keys the contract always writes.
Exit status: 0 all checks passed, 1 some check failed (including a GGUF or report that
cannot be parsed), 2 usage or I/O error (missing file, unreadable or malformed source).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import re
import struct
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import numpy as np

import gguf
from gguf import GGMLQuantizationType as QT
from gguf import GGUFValueType as VT

ARCH = "dflash-draft"
A = ARCH + "."
Q8_BLOCK = 32
CHUNK_ELEMS = 1 << 24  # elements of source data handled at once (bounds memory)
HASH_CHUNK = 1 << 24

# ----------------------------------------------------------------------------------------
# Metadata contract (docs/OUTPUT-CONTRACT.md §3), in file order.
# presence: "required" (runtimes read it), "always" (the contract always writes it),
# "optional" (written only in some cases), "markov" / "confidence" (written when that head
# is present).
# ----------------------------------------------------------------------------------------
STR, U32, U64, I32, F32, BOOL = VT.STRING, VT.UINT32, VT.UINT64, VT.INT32, VT.FLOAT32, VT.BOOL
ARR_STR = (VT.ARRAY, VT.STRING)
ARR_I32 = (VT.ARRAY, VT.INT32)

KEY_SPEC: list[tuple[str, Any, str]] = [
    ("general.architecture", STR, "required"),
    ("general.type", STR, "always"),
    ("general.name", STR, "always"),
    ("general.size_label", STR, "always"),
    ("general.file_type", U32, "required"),
    ("general.quantization_version", U32, "required"),
    ("general.source.repo_url", STR, "optional"),
    ("general.base_model.count", U32, "optional"),
    # general.base_model.{n}.{name,organization,repo_url} are handled by BASE_MODEL_RE
    ("general.tags", ARR_STR, "always"),
    (A + "context_length", U32, "always"),
    (A + "embedding_length", U32, "required"),
    (A + "block_count", U32, "required"),
    (A + "feed_forward_length", U32, "required"),
    (A + "attention.head_count", U32, "required"),
    (A + "attention.head_count_kv", U32, "required"),
    (A + "attention.key_length", U32, "required"),
    (A + "attention.value_length", U32, "always"),
    (A + "attention.layer_norm_rms_epsilon", F32, "always"),
    (A + "rope.freq_base", F32, "required"),
    (A + "rope.scaling.type", STR, "optional"),
    (A + "rope.scaling.factor", F32, "optional"),
    (A + "rope.scaling.original_context_length", U32, "optional"),
    (A + "rope.scaling.yarn_beta_fast", F32, "optional"),
    (A + "rope.scaling.yarn_beta_slow", F32, "optional"),
    (A + "rope.scaling.attn_factor", F32, "optional"),
    (A + "rope.scaling.yarn_attn_factor", F32, "optional"),  # spelling of ".attn_factor" is ambiguous
    (A + "vocab_size", U32, "always"),
    (A + "dflash.block_size", U32, "required"),
    (A + "dflash.n_target_layers", U32, "required"),
    (A + "dflash.n_target_features", U32, "always"),
    (A + "dflash.target_layer_ids", ARR_I32, "required"),
    (A + "dflash.target_block_count", U32, "always"),
    (A + "dflash.target_hidden_size", U32, "always"),
    (A + "dflash.mask_token_id", U32, "optional"),
    (A + "dflash.sample_from_anchor", BOOL, "always"),
    (A + "dflash.dspark.enabled", U32, "markov"),
    (A + "dflash.dspark.markov_rank", U32, "markov"),
    (A + "dflash.dspark.vocab_size", U32, "markov"),
    (A + "dflash.dspark.confidence_dim", U32, "confidence"),
    (A + "dflash.dspark.markov_head_type", STR, "markov"),
    (A + "dflash.dspark.confidence_with_markov", BOOL, "confidence"),
    ("provenance.source.repository", STR, "always"),
    ("provenance.source.revision", STR, "always"),
    ("provenance.source.files", ARR_STR, "always"),
    ("provenance.source.sha256", ARR_STR, "always"),
    ("provenance.source.parameters", U64, "always"),
    ("provenance.converter", STR, "always"),
    ("provenance.policy", STR, "always"),
]
KEY_RANK = {k: i for i, (k, _, _) in enumerate(KEY_SPEC)}
BASE_MODEL_RE = re.compile(r"^general\.base_model\.(\d+)\.(name|organization|repo_url)$")
BASE_MODEL_FIELDS = ["name", "organization", "repo_url"]

FILE_TYPE_TO_MATRIX = {0: QT.F32, 1: QT.F16, 7: QT.Q8_0, 32: QT.BF16}

# ----------------------------------------------------------------------------------------
# Tensor contract (docs/OUTPUT-CONTRACT.md §1, §2; docs/GGUF.md §6.2, §6.3)
# ----------------------------------------------------------------------------------------
LAYER_SUFFIXES = [
    "attn_norm.weight", "attn_q.weight", "attn_k.weight", "attn_v.weight",
    "attn_q_norm.weight", "attn_k_norm.weight", "attn_output.weight", "ffn_norm.weight",
    "ffn_gate.weight", "ffn_up.weight", "ffn_down.weight",
]
HEAD_NAMES = [
    "dflash.dspark.markov.w1", "dflash.dspark.markov.w2",
    "dflash.dspark.confidence.weight", "dflash.dspark.confidence.bias",
]
OPTIONAL_TAIL = ["token_embd.weight", "output.weight"]

SOURCE_FIXED = {
    "fc.weight": "dflash.fc.weight",
    "hidden_norm.weight": "dflash.hidden_norm.weight",
    "norm.weight": "output_norm.weight",
    "embed_tokens.weight": "token_embd.weight",
    "lm_head.weight": "output.weight",
}
for _prefix in ("markov_head.", "logit_head.markov_head.", "dspark_markov_head.", "mtp.2.markov_head."):
    SOURCE_FIXED[_prefix + "markov_w1.weight"] = "dflash.dspark.markov.w1"
    SOURCE_FIXED[_prefix + "markov_w2.weight"] = "dflash.dspark.markov.w2"
for _prefix in ("confidence_head.proj.", "logit_head.confidence_head.proj.",
                "dspark_confidence_head.", "mtp.2.confidence_head.proj."):
    SOURCE_FIXED[_prefix + "weight"] = "dflash.dspark.confidence.weight"
    SOURCE_FIXED[_prefix + "bias"] = "dflash.dspark.confidence.bias"

SOURCE_LAYER = {
    "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.q_norm.weight": "attn_q_norm.weight",
    "self_attn.k_norm.weight": "attn_k_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}
SOURCE_LAYER_RE = re.compile(r"^layers\.(\d+)\.(.+)$")


def source_to_gguf_name(name: str) -> str | None:
    """Map a SpecForge-style source tensor name to its GGUF name (None: not mappable)."""
    if name in SOURCE_FIXED:
        return SOURCE_FIXED[name]
    m = SOURCE_LAYER_RE.match(name)
    if m and m.group(2) in SOURCE_LAYER:
        return f"blk.{int(m.group(1))}.{SOURCE_LAYER[m.group(2)]}"
    return None


def tensor_role(name: str) -> str:
    """Role of a GGUF tensor for the type policy: matrix, norm or confidence."""
    if name.startswith("dflash.dspark.confidence."):
        return "confidence"
    if name.endswith("_norm.weight") or name in ("dflash.hidden_norm.weight", "output_norm.weight"):
        return "norm"
    return "matrix"


def strip_ones(shape: Any) -> tuple[int, ...]:
    """Shape with trailing 1s dropped ([5] and [5, 1] compare equal; [] equals [1])."""
    dims = [int(d) for d in shape]
    while dims and dims[-1] == 1:
        dims.pop()
    return tuple(dims)


def pad_to(n: int, align: int) -> int:
    return (n + align - 1) // align * align


# ----------------------------------------------------------------------------------------
# Source checkpoint reader (safetensors, own implementation)
# ----------------------------------------------------------------------------------------
ST_DTYPE_SIZE = {
    "BOOL": 1, "U8": 1, "I8": 1, "U16": 2, "I16": 2, "U32": 4, "I32": 4, "U64": 8, "I64": 8,
    "F16": 2, "BF16": 2, "F32": 4, "F64": 8, "C64": 8, "F8_E4M3": 1, "F8_E5M2": 1,
    "F8_E8M0": 1, "F8_E4M3FNUZ": 1, "F8_E5M2FNUZ": 1,
}
ST_MAX_HEADER = 100_000_000


class SourceError(Exception):
    """The source checkpoint cannot be read (an input problem: exit status 2)."""


@dataclass
class SrcTensor:
    name: str
    file: str
    dtype: str
    shape: tuple[int, ...]
    start: int  # absolute byte offset in the file
    nbytes: int

    @property
    def n_elements(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) if self.shape else 1


@dataclass
class Source:
    root: Path
    files: list[str]
    tensors: dict[str, SrcTensor]
    config: dict[str, Any] | None
    _maps: dict[str, np.memmap] = field(default_factory=dict)

    def raw(self, t: SrcTensor) -> np.ndarray:
        mm = self._maps.get(t.file)
        if mm is None:
            mm = np.memmap(self.root / t.file, dtype=np.uint8, mode="r")
            self._maps[t.file] = mm
        return mm[t.start:t.start + t.nbytes]

    def f32_rows(self, t: SrcTensor, row_len: int, first_row: int, n_rows: int) -> np.ndarray:
        """Rows [first_row, first_row + n_rows) of the tensor (row = last dim) as f32."""
        size = ST_DTYPE_SIZE[t.dtype]
        raw = self.raw(t)[first_row * row_len * size:(first_row + n_rows) * row_len * size]
        if t.dtype == "BF16":
            out = (raw.view("<u2").astype(np.uint32) << 16).view(np.float32)
        elif t.dtype == "F16":
            out = raw.view("<f2").astype(np.float32)
        elif t.dtype == "F32":
            out = raw.view("<f4").astype(np.float32)
        else:
            raise SourceError(f"source tensor {t.name}: dtype {t.dtype} is not a float type this checker reads")
        return out.reshape(n_rows, row_len)


def read_safetensors_header(path: Path) -> dict[str, SrcTensor]:
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) != 8:
            raise SourceError(f"{path.name}: shorter than 8 bytes")
        (n,) = struct.unpack("<Q", head)
        if n > ST_MAX_HEADER or 8 + n > size:
            raise SourceError(f"{path.name}: header length {n} is invalid for a {size}-byte file")
        try:
            header = json.loads(f.read(n).decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise SourceError(f"{path.name}: header is not JSON: {e}") from None
    if not isinstance(header, dict):
        raise SourceError(f"{path.name}: header is not a JSON object")
    base = 8 + n
    out: dict[str, SrcTensor] = {}
    spans: list[tuple[int, int, str]] = []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype = str(info["dtype"])
            shape = tuple(int(d) for d in info["shape"])
            begin, end = (int(x) for x in info["data_offsets"])
        except (KeyError, TypeError, ValueError):
            raise SourceError(f"{path.name}: malformed header entry for {name!r}") from None
        if dtype in ST_DTYPE_SIZE:
            want = int(np.prod(shape, dtype=np.int64)) * ST_DTYPE_SIZE[dtype] if shape else ST_DTYPE_SIZE[dtype]
            if end - begin != want:
                raise SourceError(f"{path.name}: {name}: {end - begin} data bytes, shape {list(shape)} {dtype} needs {want}")
        if not 0 <= begin <= end or base + end > size:
            raise SourceError(f"{path.name}: {name}: data_offsets [{begin}, {end}] outside the file")
        spans.append((begin, end, name))
        out[name] = SrcTensor(name, path.name, dtype, shape, base + begin, end - begin)
    spans.sort()
    pos = 0
    for begin, end, name in spans:
        if begin != pos:
            raise SourceError(f"{path.name}: {name}: data does not tile the buffer (begins at {begin}, expected {pos})")
        pos = end
    if base + pos != size:
        raise SourceError(f"{path.name}: data ends at {base + pos}, file has {size} bytes")
    return out


def load_source(root: Path) -> Source:
    if not root.is_dir():
        raise SourceError(f"source {root} is not a directory")
    config = None
    cfg_path = root / "config.json"
    if cfg_path.is_file():
        try:
            config = json.loads(cfg_path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise SourceError(f"config.json: {e}") from None
    index = root / "model.safetensors.index.json"
    tensors: dict[str, SrcTensor] = {}
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as e:
            raise SourceError(f"{index.name}: {e!r}") from None
        # The contract lists shard files sorted by name (docs/OUTPUT-CONTRACT.md §3, decisions).
        files: list[str] = sorted(set(weight_map.values()))
        for shard in files:
            if "/" in shard or "\\" in shard or not (root / shard).is_file():
                raise SourceError(f"{index.name}: shard {shard!r} not found")
            for name, t in read_safetensors_header(root / shard).items():
                if name in tensors:
                    raise SourceError(f"tensor {name} appears in {tensors[name].file} and {shard}")
                if weight_map.get(name) != shard:
                    raise SourceError(f"tensor {name} is in {shard} but the index says {weight_map.get(name)!r}")
                tensors[name] = t
        missing = sorted(set(weight_map) - set(tensors))
        if missing:
            raise SourceError(f"{index.name}: tensors not found in their shards: {missing[:5]}")
    elif (root / "model.safetensors").is_file():
        files = ["model.safetensors"]
        tensors = read_safetensors_header(root / "model.safetensors")
    else:
        raise SourceError(f"{root}: neither model.safetensors.index.json nor model.safetensors")
    return Source(root, files, tensors, config)


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(HASH_CHUNK):
            h.update(chunk)
    return h.hexdigest()


# ----------------------------------------------------------------------------------------
# GGUF access helpers
# ----------------------------------------------------------------------------------------
def field_sig(f: Any) -> Any:
    """(ARRAY, element type) for arrays, else the scalar GGUFValueType."""
    t0 = VT(int(f.types[0]))
    if t0 == VT.ARRAY:
        return (VT.ARRAY, VT(int(f.parts[3][0])))  # element type as stored, even for empty arrays
    return t0


def sig_name(sig: Any) -> str:
    if isinstance(sig, tuple):
        return f"ARRAY[{sig[1].name}]"
    return sig.name


def field_value(f: Any) -> Any:
    sig = field_sig(f)
    if isinstance(sig, tuple) and sig[1] == VT.ARRAY:
        return None  # nested arrays are never valid here; reported by the type check
    v = f.contents()
    if sig == VT.BOOL:
        return bool(v)
    return v


@dataclass
class GTensor:
    index: int
    name: str
    qtype: QT
    ne: tuple[int, ...]
    n_elements: int
    n_bytes: int
    abs_offset: int
    rel_offset: int


class Checker:
    def __init__(self) -> None:
        self.allowed_skips: set[str] = set()
        self.failures: list[str] = []
        self.checked: dict[str, int] = {}  # tensor name -> bytes verified (counted once)
        self.src_hashes: dict[str, str] = {}  # source weight file -> sha256 (with --source)

    def fail(self, msg: str) -> None:
        self.failures.append(msg)
        print(f"FAIL: {msg}", file=sys.stderr)

    def mark_checked(self, t: GTensor) -> None:
        self.checked[t.name] = t.n_bytes

    # ------------------------------------------------------------------ GGUF structure
    def open_gguf(self, path: Path) -> bool:
        self.path = path
        self.file_size = path.stat().st_size
        try:
            self.reader = gguf.GGUFReader(path)
        except Exception as e:  # any parse error is a finding about the file
            self.fail(f"gguf-py cannot read {path.name}: {type(e).__name__}: {e}")
            return False
        r = self.reader
        self.data = r.data
        self.fields = {k: f for k, f in r.fields.items() if not k.startswith("GGUF.")}
        self.version = int(r.fields["GGUF.version"].parts[0][0])
        self.tensors: list[GTensor] = []
        for i, t in enumerate(r.tensors):
            ne = tuple(int(d) for d in t.shape)
            self.tensors.append(GTensor(i, t.name, QT(int(t.tensor_type)), ne, int(t.n_elements),
                                        int(t.n_bytes), int(t.data_offset), int(t.data_offset) - int(r.data_offset)))
        self.by_name = {t.name: t for t in self.tensors}
        return True

    def tensor_bytes(self, t: GTensor) -> np.ndarray:
        return self.data[t.abs_offset:t.abs_offset + t.n_bytes]

    def check_layout(self) -> None:
        r = self.reader
        if self.version != 3:
            self.fail(f"GGUF version is {self.version}, expected 3")
        align = int(r.alignment)
        if align != 32:
            self.fail(f"alignment is {align}, the contract uses the default 32")
        pos = 0
        for t in self.tensors:
            block, tsize = gguf.GGML_QUANT_SIZES[t.qtype]
            if len(t.ne) > 4:
                self.fail(f"tensor {t.name}: {len(t.ne)} dims (max 4)")
            if len(t.name.encode()) >= 64:
                self.fail(f"tensor {t.name}: name is {len(t.name.encode())} bytes (max 63)")
            if t.ne and t.ne[0] % block != 0:
                self.fail(f"tensor {t.name}: ne0 {t.ne[0]} is not a multiple of the {t.qtype.name} block size {block}")
            if t.rel_offset != pos:
                self.fail(f"tensor {t.name}: offset {t.rel_offset}, expected {pos} (blobs must be dense, in info order)")
                pos = t.rel_offset
            pos += pad_to(t.n_bytes, align)
        end = int(r.data_offset) + pos
        if self.file_size != end:
            self.fail(f"file is {self.file_size} bytes, layout says {end} (data section start + padded blobs)")
        # padding bytes: between the tensor infos and the data section, and after each blob
        gaps: list[tuple[int, int, str]] = []
        info_fields = [t.field for t in r.tensors] or list(r.fields.values())
        last_info = max(f.offset + sum(int(p.nbytes) for p in f.parts) for f in info_fields)
        gaps.append((last_info, int(r.data_offset), "before the data section"))
        for t in self.tensors:
            s = t.abs_offset + t.n_bytes
            gaps.append((s, min(t.abs_offset + pad_to(t.n_bytes, align), self.file_size), f"after {t.name}"))
        for s, e, where in gaps:
            if e > s and np.any(self.data[s:e]):
                self.fail(f"non-zero padding bytes {where} (file bytes {s}..{e})")

    # ------------------------------------------------------------------ metadata
    def val(self, key: str, default: Any = None) -> Any:
        f = self.fields.get(key)
        return default if f is None else field_value(f)

    def check_metadata(self) -> None:
        markov = "dflash.dspark.markov.w1" in self.by_name or "dflash.dspark.markov.w2" in self.by_name
        conf = ("dflash.dspark.confidence.weight" in self.by_name
                or "dflash.dspark.confidence.bias" in self.by_name)
        keys = list(self.fields)
        if keys and keys[0] != "general.architecture":
            self.fail(f"first key is {keys[0]}, expected general.architecture")
        arch = self.val("general.architecture")
        if arch != ARCH:
            self.fail(f"general.architecture is {arch!r}, expected {ARCH!r}")
        # types and presence
        for key, sig, presence in KEY_SPEC:
            f = self.fields.get(key)
            if f is None:
                needed = (presence in ("required", "always") or (presence == "markov" and markov)
                          or (presence == "confidence" and conf))
                if needed:
                    self.fail(f"missing key {key} ({sig_name(sig)}, {presence})")
                continue
            got = field_sig(f)
            if got != sig:
                self.fail(f"key {key} has type {sig_name(got)}, expected {sig_name(sig)}")
        count = self.val("general.base_model.count")
        base_ids: set[int] = set()
        for key, f in self.fields.items():
            m = BASE_MODEL_RE.match(key)
            if m:
                base_ids.add(int(m.group(1)))
                if field_sig(f) != VT.STRING:
                    self.fail(f"key {key} has type {sig_name(field_sig(f))}, expected STRING")
            elif key not in KEY_RANK:
                self.fail(f"key {key} ({sig_name(field_sig(f))}) is not in the output contract")
        if isinstance(count, int) and base_ids and max(base_ids) >= count:
            self.fail(f"general.base_model.{max(base_ids)}.* present but general.base_model.count is {count}")
        # order (docs/OUTPUT-CONTRACT.md §3)
        prev: tuple[int, ...] | None = None
        prev_key = ""
        base_rank = KEY_RANK["general.base_model.count"]
        for key in keys:
            m = BASE_MODEL_RE.match(key)
            if m:
                rank: tuple[int, ...] = (base_rank, 1 + int(m.group(1)), BASE_MODEL_FIELDS.index(m.group(2)))
            elif key in KEY_RANK:
                rank = (KEY_RANK[key], 0, 0)
            else:
                continue
            if prev is not None and rank < prev:
                self.fail(f"key {key} comes after {prev_key}; the contract orders it before")
            prev, prev_key = rank, key

    def check_values(self) -> None:
        v = self.val
        t = self.by_name
        if v("general.type") not in (None, "model"):
            self.fail(f"general.type is {v('general.type')!r}, expected 'model'")
        if v("general.quantization_version") not in (None, 2):
            self.fail(f"general.quantization_version is {v('general.quantization_version')}, expected 2")
        tags = v("general.tags")
        if isinstance(tags, list):
            if "speculative-decoding" not in tags or not ({"dspark", "dflash"} & set(tags)):
                self.fail(f"general.tags {tags} lacks 'speculative-decoding' and 'dspark' or 'dflash'")
        H = v(A + "embedding_length")
        n_cap = v(A + "dflash.n_target_layers")
        ids = v(A + "dflash.target_layer_ids")
        fc = t.get("dflash.fc.weight")
        if isinstance(ids, list) and isinstance(n_cap, int) and len(ids) != n_cap:
            self.fail(f"len(target_layer_ids) = {len(ids)} != n_target_layers = {n_cap}")
        if fc is not None and isinstance(n_cap, int) and isinstance(H, int) and fc.ne[0] != n_cap * H:
            self.fail(f"dflash.fc.weight ne0 = {fc.ne[0]} != n_target_layers * embedding_length = {n_cap} * {H}")
        if isinstance(ids, list):
            depth = v(A + "dflash.target_block_count")
            for i in ids:
                if i < 0 or (isinstance(depth, int) and i >= depth):
                    self.fail(f"target_layer_ids {ids}: id {i} outside [0, target_block_count={depth})")
                    break
        ntf = v(A + "dflash.n_target_features")
        if fc is not None and isinstance(ntf, int) and ntf != fc.ne[0]:
            self.fail(f"dflash.n_target_features = {ntf} != dflash.fc.weight ne0 = {fc.ne[0]}")
        th = v(A + "dflash.target_hidden_size")
        if fc is not None and isinstance(th, int) and isinstance(n_cap, int) and n_cap * th != fc.ne[0]:
            self.fail(f"n_target_layers * target_hidden_size = {n_cap} * {th} != fc ne0 = {fc.ne[0]}")
        n_head, n_kv = v(A + "attention.head_count"), v(A + "attention.head_count_kv")
        if isinstance(n_head, int) and isinstance(n_kv, int) and (n_kv == 0 or n_kv > n_head or n_head % n_kv):
            self.fail(f"head_count_kv {n_kv} must be > 0, <= head_count {n_head} and divide it")
        for key in ("embedding_length", "block_count", "feed_forward_length", "attention.head_count",
                    "attention.key_length", "dflash.block_size"):
            if v(A + key) == 0:
                self.fail(f"{A + key} is 0")
        hd = v(A + "attention.key_length")
        if v(A + "attention.value_length") not in (None, hd):
            self.fail(f"attention.value_length {v(A + 'attention.value_length')} != key_length {hd}")
        # DSpark keys vs tensors
        w1 = t.get("dflash.dspark.markov.w1")
        cw = t.get("dflash.dspark.confidence.weight")
        en = v(A + "dflash.dspark.enabled")
        if en is not None and en != (1 if w1 is not None else 0):
            self.fail(f"dflash.dspark.enabled = {en} but the Markov head is {'present' if w1 else 'absent'}")
        if w1 is not None and len(w1.ne) >= 2:
            for key, want in (("dflash.dspark.markov_rank", w1.ne[0]), ("dflash.dspark.vocab_size", w1.ne[1]),
                              ("vocab_size", w1.ne[1])):
                if v(A + key) not in (None, want):
                    self.fail(f"{A + key} = {v(A + key)} but dflash.dspark.markov.w1 ne = {list(w1.ne)}")
        if v(A + "dflash.dspark.markov_head_type") not in (None, "vanilla"):
            self.fail(f"markov_head_type {v(A + 'dflash.dspark.markov_head_type')!r}: only 'vanilla' is allowed")
        if cw is not None:
            C = cw.ne[0]
            if v(A + "dflash.dspark.confidence_dim") not in (None, C):
                self.fail(f"confidence_dim = {v(A + 'dflash.dspark.confidence_dim')} but confidence.weight ne0 = {C}")
            cwm = v(A + "dflash.dspark.confidence_with_markov")
            R = w1.ne[0] if w1 is not None else None
            if cwm is not None and isinstance(H, int):
                want_c = H + R if (cwm and R is not None) else H
                if C != want_c:
                    self.fail(f"confidence_with_markov = {cwm} implies confidence input {want_c}, weight has {C}")
        # file type / provenance
        ft = v("general.file_type")
        if ft is not None and ft not in FILE_TYPE_TO_MATRIX:
            self.fail(f"general.file_type = {ft}, expected one of {sorted(FILE_TYPE_TO_MATRIX)}")
        params = sum(x.n_elements for x in self.tensors)
        if v("provenance.source.parameters") not in (None, params):
            self.fail(f"provenance.source.parameters = {v('provenance.source.parameters')}, tensors hold {params}")
        files, shas = v("provenance.source.files"), v("provenance.source.sha256")
        if isinstance(files, list) and isinstance(shas, list):
            if len(files) != len(shas):
                self.fail(f"provenance.source.files has {len(files)} entries, sha256 has {len(shas)}")
            for s in shas:
                if not re.fullmatch(r"[0-9a-f]{64}", s):
                    self.fail(f"provenance.source.sha256 entry {s!r} is not lowercase hex SHA256")
                    break
        rev = v("provenance.source.revision")
        if rev == "":
            self.fail("provenance.source.revision is empty (contract: the revision or 'unknown')")

    # ------------------------------------------------------------------ tensors
    def expected_names(self) -> list[str]:
        n_layer = self.val(A + "block_count")
        if not isinstance(n_layer, int):
            n_layer = 1 + max((int(m.group(1)) for m in (re.match(r"^blk\.(\d+)\.", t.name) for t in self.tensors)
                               if m), default=-1)
        names = ["dflash.fc.weight", "dflash.hidden_norm.weight"]
        for i in range(n_layer):
            names += [f"blk.{i}.{s}" for s in LAYER_SUFFIXES]
        names.append("output_norm.weight")
        names += [n for n in HEAD_NAMES + OPTIONAL_TAIL if n in self.by_name]
        return names

    def check_tensor_order(self) -> None:
        got = [t.name for t in self.tensors]
        want = self.expected_names()
        if got == want:
            return
        missing = [n for n in want if n not in self.by_name]
        extra = [n for n in got if n not in set(want)]
        for n in missing:
            self.fail(f"missing tensor {n}")
        for n in extra:
            self.fail(f"unexpected tensor {n} (not in the output contract)")
        if not missing and not extra:
            i = next(i for i, (a, b) in enumerate(zip(got, want)) if a != b)
            self.fail(f"tensor order: position {i} holds {got[i]}, canonical order wants {want[i]}")
        if "dflash.dspark.markov.w1" in self.by_name and "dflash.dspark.markov.w2" not in self.by_name:
            self.fail("markov.w1 present without markov.w2")

    def expected_ne(self) -> dict[str, tuple[int, ...]]:
        """ne (trailing 1s stripped) each tensor must have, from the geometry keys."""
        v = self.val
        H, ff = v(A + "embedding_length"), v(A + "feed_forward_length")
        nh, nkv, hd = v(A + "attention.head_count"), v(A + "attention.head_count_kv"), v(A + "attention.key_length")
        n_cap, n_layer = v(A + "dflash.n_target_layers"), v(A + "block_count")
        if not all(isinstance(x, int) for x in (H, ff, nh, nkv, hd, n_cap, n_layer)):
            return {}
        exp = {"dflash.fc.weight": (n_cap * H, H), "dflash.hidden_norm.weight": (H,), "output_norm.weight": (H,)}
        for i in range(n_layer):
            b = f"blk.{i}."
            exp.update({b + "attn_norm.weight": (H,), b + "ffn_norm.weight": (H,),
                        b + "attn_q.weight": (H, nh * hd), b + "attn_k.weight": (H, nkv * hd),
                        b + "attn_v.weight": (H, nkv * hd), b + "attn_output.weight": (nh * hd, H),
                        b + "attn_q_norm.weight": (hd,), b + "attn_k_norm.weight": (hd,),
                        b + "ffn_gate.weight": (H, ff), b + "ffn_up.weight": (H, ff), b + "ffn_down.weight": (ff, H)})
        R, V = v(A + "dflash.dspark.markov_rank"), v(A + "dflash.dspark.vocab_size")
        if isinstance(R, int) and isinstance(V, int):
            exp["dflash.dspark.markov.w1"] = exp["dflash.dspark.markov.w2"] = (R, V)
        C = v(A + "dflash.dspark.confidence_dim")
        if isinstance(C, int):
            exp["dflash.dspark.confidence.weight"] = (C,)
        exp["dflash.dspark.confidence.bias"] = ()
        vocab = v(A + "vocab_size")
        if isinstance(vocab, int):
            exp["token_embd.weight"] = exp["output.weight"] = (H, vocab)
        return {k: strip_ones(s) for k, s in exp.items()}

    def check_tensor_shapes_and_types(self) -> None:
        exp = self.expected_ne()
        ft = self.val("general.file_type")
        matrix_type = FILE_TYPE_TO_MATRIX.get(ft) if isinstance(ft, int) else None
        for t in self.tensors:
            if t.name in exp and strip_ones(t.ne) != exp[t.name]:
                self.fail(f"tensor {t.name}: ne {list(t.ne)}, geometry keys imply {list(exp[t.name]) or [1]}")
            role = tensor_role(t.name)
            if role in ("norm", "confidence"):
                want = QT.F32
            elif matrix_type is None:
                continue
            elif matrix_type == QT.Q8_0 and t.ne and t.ne[0] % Q8_BLOCK != 0:
                want = QT.F16  # Q8_0 fallback for rows that are not a multiple of 32
            else:
                want = matrix_type
            if t.qtype != want:
                self.fail(f"tensor {t.name} ({role}): type {t.qtype.name}, policy for file_type {ft} wants {want.name}")
        m1, m2 = self.by_name.get("dflash.dspark.markov.w1"), self.by_name.get("dflash.dspark.markov.w2")
        if m1 is not None and m2 is not None and strip_ones(m1.ne) != strip_ones(m2.ne):
            self.fail(f"markov.w1 ne {list(m1.ne)} != markov.w2 ne {list(m2.ne)}")

    # ------------------------------------------------------------------ source comparison
    def check_source(self, src: Source, want_errors: bool) -> dict[str, tuple[float, float]]:
        """Pair tensors with the source and compare bytes; returns name -> (rel_rmse, max_abs)."""
        paired: dict[str, SrcTensor] = {}
        for name, st in src.tensors.items():
            g = source_to_gguf_name(name)
            if g is None and name in self.allowed_skips:
                continue  # left out with --allow-extra and listed in the report's `skipped`
            if g is None:
                self.fail(f"source tensor {name} has no GGUF name in the contract's map (unmapped or refused)")
            elif g in paired:
                self.fail(f"source tensors {paired[g].name} and {name} both map to {g}")
            else:
                paired[g] = st
        used = set()
        errors: dict[str, tuple[float, float]] = {}
        for t in self.tensors:
            found = paired.get(t.name)
            if found is None:
                self.fail(f"tensor {t.name} has no source tensor")
                continue
            st = found
            used.add(t.name)
            if strip_ones(t.ne) != strip_ones(reversed(st.shape)):
                self.fail(f"tensor {t.name}: ne {list(t.ne)} != reversed source shape {list(st.shape)} of {st.name}")
                continue
            if st.dtype not in ("BF16", "F16", "F32"):
                self.fail(f"tensor {t.name}: source {st.name} has dtype {st.dtype}, expected BF16/F16/F32")
                continue
            err = self.compare_tensor(src, t, st, want_errors)
            if err is not None:
                errors[t.name] = err
        for g, st in paired.items():
            if g not in used:
                self.fail(f"source tensor {st.name} (-> {g}) is not in the GGUF")
        self.check_provenance_vs_source(src)
        if src.config is not None:
            self.check_config(src.config)
        return errors

    def compare_tensor(self, src: Source, t: GTensor, st: SrcTensor,
                       want_errors: bool) -> tuple[float, float] | None:
        row_len = st.shape[-1] if st.shape else 1
        n_rows = st.n_elements // row_len if row_len else 0
        block, tsize = gguf.GGML_QUANT_SIZES[t.qtype]
        if row_len % block:
            self.fail(f"tensor {t.name}: row length {row_len} is not a multiple of the {t.qtype.name} block size")
            return None
        row_bytes = row_len // block * tsize
        if row_bytes * n_rows != t.n_bytes:
            self.fail(f"tensor {t.name}: {t.n_bytes} bytes, source implies {row_bytes * n_rows}")
            return None
        data = self.tensor_bytes(t)
        chunk_rows = max(1, CHUNK_ELEMS // max(1, row_len))
        n_diff, first = 0, None
        err2 = ref2 = 0.0
        max_abs = 0.0
        nonfinite = False
        for r0 in range(0, n_rows, chunk_rows):
            r1 = min(n_rows, r0 + chunk_rows)
            x = src.f32_rows(st, row_len, r0, r1 - r0)
            with np.errstate(all="ignore"):
                if not nonfinite and not np.isfinite(x).all():
                    nonfinite = True
                try:
                    exp = self.reference_bytes(x, t.qtype)
                except NotImplementedError:
                    self.fail(f"tensor {t.name}: no reference quantizer for {t.qtype.name}")
                    return None
                got = data[r0 * row_bytes:r1 * row_bytes]
                if not np.array_equal(exp, got):
                    diff = np.any(exp.reshape(-1, tsize) != got.reshape(-1, tsize), axis=1)
                    n_diff += int(diff.sum())
                    if first is None:
                        b = int(np.argmax(diff))
                        first = (r0 * row_bytes // tsize + b, bytes(exp.reshape(-1, tsize)[b]).hex(),
                                 bytes(got.reshape(-1, tsize)[b]).hex())
                if want_errors:
                    y = gguf.quants.dequantize(np.ascontiguousarray(got).reshape(r1 - r0, row_bytes), t.qtype)
                    d = (y.astype(np.float64) - x)
                    err2 += float(np.dot(d.ravel(), d.ravel()))
                    ref2 += float(np.dot(x.ravel().astype(np.float64), x.ravel().astype(np.float64)))
                    if d.size:
                        m = float(np.max(np.abs(d)))  # NaN propagates (e.g. a Q8_0 scale that overflowed f16)
                        if math.isnan(m) or not m <= max_abs:
                            max_abs = m if not math.isnan(max_abs) else max_abs
        if n_diff:
            assert first is not None
            note = " (source has non-finite values: the reference is not defined for them)" if nonfinite else ""
            self.fail(f"tensor {t.name} ({t.qtype.name}): {n_diff} differing blocks; first block {first[0]}: "
                      f"expected {first[1]} got {first[2]}{note}")
        else:
            self.mark_checked(t)
        if not want_errors:
            return None
        rel = math.sqrt(err2 / ref2) if ref2 > 0 else (0.0 if err2 == 0 else math.inf)
        return rel, max_abs

    @staticmethod
    def reference_bytes(x: np.ndarray, qtype: QT) -> np.ndarray:
        """gguf-py's bytes for f32 rows `x` stored as `qtype`, flattened to uint8."""
        if qtype == QT.F32:
            out = x.astype("<f4")
        elif qtype == QT.F16:
            out = x.astype("<f2")
        else:
            out = gguf.quants.quantize(x, qtype)
        return np.ascontiguousarray(out).view(np.uint8).ravel()

    def check_provenance_vs_source(self, src: Source) -> None:
        self.src_hashes = {f: sha256_file(src.root / f) for f in src.files}
        files, shas = self.val("provenance.source.files"), self.val("provenance.source.sha256")
        if isinstance(files, list):
            if sorted(files) != sorted(src.files):
                self.fail(f"provenance.source.files {files} != source weight files {src.files}")
            elif files != src.files:
                self.fail(f"provenance.source.files {files} not sorted by name (the contract's order)")
            if isinstance(shas, list) and len(shas) == len(files):
                for f, s in zip(files, shas):
                    if f in self.src_hashes and s != self.src_hashes[f]:
                        self.fail(f"provenance.source.sha256 for {f} is {s}, file hashes to {self.src_hashes[f]}")

    def check_config(self, cfg: dict[str, Any]) -> None:
        """Cross-check the values a runtime needs against config.json (docs/GGUF.md §6.4 rules)."""
        scopes = [cfg.get("dflash_config") or {}, cfg, cfg.get("transformer_layer_config") or {}]

        def get(*names: str) -> Any:
            for s in scopes:
                if isinstance(s, dict):
                    for n in names:
                        if n in s and s[n] is not None:
                            return s[n]
            return None

        rope = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
        if not isinstance(rope, dict):
            rope = {}
        theta = cfg.get("rope_theta", rope.get("rope_theta"))
        rtype = rope.get("rope_type", rope.get("type"))
        scaled = rtype not in (None, "default", "none")
        ids = None
        for path in (("dflash_config", "target_layer_ids"), ("target_layer_ids",),
                     ("dspark_target_layer_ids",), ("eagle_aux_hidden_state_layer_ids",)):
            node: Any = cfg
            for p in path:
                node = node.get(p) if isinstance(node, dict) else None
            if node is not None:
                ids = [int(i) - 1 for i in node] if path[0].startswith("eagle") else [int(i) for i in node]
                break
        checks: list[tuple[str, Any]] = [
            ("embedding_length", get("hidden_size")),
            ("block_count", get("num_hidden_layers")),
            ("feed_forward_length", get("intermediate_size")),
            ("attention.head_count", get("num_attention_heads")),
            ("attention.head_count_kv", get("num_key_value_heads")),
            ("attention.key_length", get("head_dim")),
            ("attention.layer_norm_rms_epsilon", get("rms_norm_eps")),
            ("context_length", get("max_position_embeddings")),
            ("rope.freq_base", theta),
            ("dflash.block_size", get("block_size", "dspark_block_size")),
            ("dflash.target_layer_ids", ids),
            ("dflash.target_block_count", get("num_target_layers")),
            ("dflash.mask_token_id", get("mask_token_id", "dspark_noise_token_id")),
            ("dflash.dspark.markov_rank", get("markov_rank", "dspark_markov_rank")),
            ("dflash.dspark.markov_head_type", get("markov_head_type")),
        ]
        sfa = get("sample_from_anchor")
        markov = "dflash.dspark.markov.w1" in self.by_name
        # docs/GGUF.md §6.4: absent from the config -> true with a Markov head, false without
        checks.append(("dflash.sample_from_anchor", bool(sfa) if sfa is not None else markov))
        if "dflash.dspark.confidence.weight" in self.by_name:
            checks.append(("dflash.dspark.confidence_with_markov", get("confidence_head_with_markov")))
        if scaled:
            checks += [("rope.scaling.type", rtype), ("rope.scaling.factor", rope.get("factor")),
                       ("rope.scaling.original_context_length", rope.get("original_max_position_embeddings"))]
        for key, want in checks:
            if want is None:
                continue
            f = self.fields.get(A + key)
            if f is None:
                if key in ("dflash.mask_token_id", "rope.scaling.type", "rope.scaling.factor",
                           "rope.scaling.original_context_length"):
                    self.fail(f"config gives {key} = {want!r} but {A + key} is missing")
                continue  # absence of other keys is reported by the metadata check
            got = field_value(f)
            if field_sig(f) == VT.FLOAT32:
                ok = isinstance(want, (int, float)) and np.float32(want) == np.float32(got)
            else:
                ok = got == want
            if not ok:
                self.fail(f"{A + key} = {got!r}, config.json says {want!r}")

    # ------------------------------------------------------------------ report
    def check_report(self, rep: Any, errors: dict[str, tuple[float, float]] | None,
                     src: Source | None) -> None:
        if not isinstance(rep, dict):
            self.fail("report: not a JSON object")
            return
        order = ["format", "converter", "source", "output", "output_to_source_ratio", "tensor_counts",
                 "error", "geometry", "metadata", "tensors"]
        present = [k for k in rep if k in order]
        for k in order:
            if k not in rep:
                self.fail(f"report: missing top-level key {k!r}")
        if present != [k for k in order if k in rep]:
            self.fail(f"report: top-level keys {list(rep)} not in the schema's order")
        for k in rep:
            # `skipped` (tensors left out with --allow-extra) is a documented addition.
            if k not in order and not (k == "skipped" and isinstance(rep[k], list)):
                self.fail(f"report: unexpected top-level key {k!r}")
        if rep.get("format") != "dspark-conversion-report/1":
            self.fail(f"report: format is {rep.get('format')!r}")
        if "converter" in rep and rep["converter"] != self.val("provenance.converter", rep["converter"]):
            self.fail(f"report: converter {rep['converter']!r} != provenance.converter {self.val('provenance.converter')!r}")
        out: dict[str, Any] = rep["output"] if isinstance(rep.get("output"), dict) else {}
        if out.get("size_bytes") != self.file_size:
            self.fail(f"report: output.size_bytes {out.get('size_bytes')} != file size {self.file_size}")
        digest = sha256_file(self.path)
        if out.get("sha256") != digest:
            self.fail(f"report: output.sha256 {out.get('sha256')} != file sha256 {digest}")
        if out.get("format") != "GGUF" or out.get("gguf_version") != self.version:
            self.fail(f"report: output.format/gguf_version {out.get('format')!r}/{out.get('gguf_version')!r}")
        fname = out.get("file")
        if not isinstance(fname, str) or "/" in fname or "\\" in fname:
            self.fail(f"report: output.file {fname!r} must be a bare file name")
        ft = self.val("general.file_type")
        try:
            ft_name = gguf.LlamaFileType(ft).name
        except ValueError:
            ft_name = None
        if out.get("file_type") != ft_name:
            self.fail(f"report: output.file_type {out.get('file_type')!r} != {ft_name!r} (general.file_type {ft})")
        # per-tensor
        rts = rep.get("tensors")
        if not isinstance(rts, list):
            self.fail("report: tensors is not a list")
            rts = []
        if len(rts) != len(self.tensors):
            self.fail(f"report: {len(rts)} tensor entries, file has {len(self.tensors)}")
        for i, (rt, t) in enumerate(zip(rts, self.tensors)):
            if not isinstance(rt, dict):
                self.fail(f"report: tensors[{i}] is not an object")
                continue
            for k, want in (("name", t.name), ("type", t.qtype.name), ("offset", t.rel_offset), ("bytes", t.n_bytes)):
                if rt.get(k) != want:
                    self.fail(f"report: tensors[{i}].{k} = {rt.get(k)!r}, file has {want!r}")
            h = hashlib.sha256(np.ascontiguousarray(self.tensor_bytes(t)).data).hexdigest()
            if rt.get("sha256") != h:
                self.fail(f"report: tensors[{i}] ({t.name}).sha256 {rt.get('sha256')} != {h}")
            else:
                self.mark_checked(t)
            if src is not None:
                st = None
                for name, cand in src.tensors.items():
                    if source_to_gguf_name(name) == t.name:
                        st = cand
                if st is not None:
                    if rt.get("source_name") != st.name:
                        self.fail(f"report: tensors[{i}].source_name {rt.get('source_name')!r} != {st.name!r}")
                    if rt.get("source_dtype") != st.dtype:
                        self.fail(f"report: tensors[{i}].source_dtype {rt.get('source_dtype')!r} != {st.dtype!r}")
                    if list(rt.get("source_shape") or []) != list(st.shape):
                        self.fail(f"report: tensors[{i}].source_shape {rt.get('source_shape')} != {list(st.shape)}")
            if errors is not None and t.name in errors:
                rel, mx = errors[t.name]
                for fig, want_f in (("relative_rmse", rel), ("max_abs_error", mx)):
                    got = rt.get(fig)
                    if not figure_matches(got, want_f):
                        self.fail(f"report: tensors[{i}] ({t.name}).{fig} = {got!r}, recomputed {want_f!r}")
        # counts
        counts: dict[str, int] = {}
        for t in self.tensors:
            counts[t.qtype.name] = counts.get(t.qtype.name, 0) + 1
        rc = rep.get("tensor_counts")
        if not isinstance(rc, dict) or {k: v for k, v in rc.items() if v} != counts:
            self.fail(f"report: tensor_counts {rc} != file {counts}")
        self.check_report_error_block(rep.get("error"), rts)
        self.check_report_metadata(rep.get("metadata"))
        self.check_report_geometry(rep.get("geometry"))
        self.check_report_source(rep.get("source"), rep.get("output_to_source_ratio"), src)

    def check_report_error_block(self, err: Any, rts: list[Any]) -> None:
        if not isinstance(err, dict):
            self.fail("report: error is not an object")
            return
        if err.get("metric") != "relative_rmse" or err.get("elements") != "all":
            self.fail(f"report: error.metric/elements {err.get('metric')!r}/{err.get('elements')!r}")
        figs: dict[Any, tuple[Any, float]] = {}
        for rt in rts:
            if isinstance(rt, dict):
                x = rt.get("relative_rmse")
                if x is not None and (isinstance(x, bool) or not isinstance(x, (int, float))):
                    self.fail(f"report: tensors[].relative_rmse of {rt.get('name')} is not a number")
                    return
                figs[rt.get("name")] = (rt.get("type"), math.nan if x is None else float(x))
        # "quantized" is read either as Q8_0 only or as everything not F32; accept both
        ok = False
        for sel in (lambda ty: ty == "Q8_0", lambda ty: ty != "F32"):
            vals = [(n, f[1]) for n, f in figs.items() if sel(f[0])]
            rms = math.sqrt(sum(v * v for _, v in vals) / len(vals)) if vals else 0.0
            finite = [p for p in vals if math.isfinite(p[1])]
            candidates = [max(finite, key=lambda p: p[1], default=(None, 0.0))]
            if len(finite) != len(vals):  # a non-finite figure: max may be reported as such or over the rest
                candidates.append((None, math.nan))
            for mx in candidates:
                if (figure_matches(err.get("rms"), rms) and figure_matches(err.get("max"), mx[1])
                        and (mx[0] is None or err.get("max_tensor") == mx[0]
                             or figs.get(err.get("max_tensor"), (None, math.nan))[1] == mx[1])):
                    ok = True
        if not ok:
            self.fail(f"report: error {{rms {err.get('rms')}, max {err.get('max')}, max_tensor "
                      f"{err.get('max_tensor')!r}}} does not follow from tensors[].relative_rmse")

    @staticmethod
    def _type_spelled(text: str, sig: Any) -> bool:
        short = {VT.UINT8: "u8", VT.INT8: "i8", VT.UINT16: "u16", VT.INT16: "i16", VT.UINT32: "u32",
                 VT.INT32: "i32", VT.FLOAT32: "f32", VT.BOOL: "bool", VT.STRING: "str", VT.UINT64: "u64",
                 VT.INT64: "i64", VT.FLOAT64: "f64"}

        def names(t: VT) -> set[str]:
            s = {t.name.lower(), short[t]}
            if t == VT.STRING:
                s.add("string")
            if t == VT.FLOAT32:
                s.add("float")
            return s

        tokens = re.findall(r"[a-z0-9]+", text.lower())
        if isinstance(sig, tuple):
            el = names(sig[1])
            return (bool(set(tokens) & el) and set(tokens) <= el | {"array", "arr"}
                    and ("array" in tokens or "arr" in tokens or "[" in text))
        return len(tokens) == 1 and tokens[0] in names(sig)

    def check_report_metadata(self, md: Any) -> None:
        if not isinstance(md, list):
            self.fail("report: metadata is not a list")
            return
        keys = [m.get("key") if isinstance(m, dict) else None for m in md]
        if keys != list(self.fields):
            self.fail(f"report: metadata keys differ from the file's KV list in file order "
                      f"(report {len(keys)} keys, file {len(self.fields)})")
        for m in md:
            if not isinstance(m, dict) or m.get("key") not in self.fields:
                continue
            f = self.fields[m["key"]]
            sig = field_sig(f)
            if not isinstance(m.get("type"), str) or not self._type_spelled(m["type"], sig):
                self.fail(f"report: metadata {m['key']} type {m.get('type')!r} does not denote {sig_name(sig)}")
            if not values_equal(m.get("value"), field_value(f), sig):
                self.fail(f"report: metadata {m['key']} value {m.get('value')!r} != file {field_value(f)!r}")
            if not isinstance(m.get("from"), str) or not m["from"]:
                self.fail(f"report: metadata {m['key']} has no 'from'")

    def check_report_geometry(self, geo: Any) -> None:
        if not isinstance(geo, dict):
            self.fail("report: geometry is not an object")
            return

        def flat(d: dict[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
            for k, x in d.items():
                if isinstance(x, dict):
                    yield from flat(x, prefix + k + ".")
                else:
                    yield prefix + k, x

        for k, x in flat(geo):
            f = self.fields.get(A + k) or self.fields.get(k)
            if f is None:
                self.fail(f"report: geometry.{k} has no {A + k} key in the file")
            elif not values_equal(x, field_value(f), field_sig(f)):
                self.fail(f"report: geometry.{k} = {x!r}, file has {field_value(f)!r}")

    def check_report_source(self, rs: Any, ratio: Any, src: Source | None) -> None:
        if not isinstance(rs, dict):
            self.fail("report: source is not an object")
            return
        for k, key in (("repository", "provenance.source.repository"), ("revision", "provenance.source.revision")):
            if key in self.fields and rs.get(k) != self.val(key):
                self.fail(f"report: source.{k} {rs.get(k)!r} != {key} {self.val(key)!r}")
        if rs.get("format") != "safetensors":
            self.fail(f"report: source.format {rs.get('format')!r}")
        files: list[Any] = rs["files"] if isinstance(rs.get("files"), list) else []
        names = [f.get("name") for f in files if isinstance(f, dict)]
        if names != (self.val("provenance.source.files") or names):
            self.fail(f"report: source.files {names} != provenance.source.files {self.val('provenance.source.files')}")
        size = rs.get("size_bytes")
        if isinstance(size, int) and files and size != sum(int(f.get("size_bytes") or 0) for f in files if isinstance(f, dict)):
            self.fail(f"report: source.size_bytes {size} != sum of source.files[].size_bytes")
        if isinstance(size, int) and size > 0:
            if not isinstance(ratio, (int, float)) or not math.isclose(ratio, self.file_size / size, rel_tol=1e-6):
                self.fail(f"report: output_to_source_ratio {ratio!r} != {self.file_size / size!r}")
        converted = sum(t.n_elements for t in self.tensors)
        if self.allowed_skips:
            # The source also holds the skipped tensors (checked exactly with --source).
            if not isinstance(rs.get("parameters"), int) or rs["parameters"] < converted:
                self.fail(f"report: source.parameters {rs.get('parameters')} < {converted} converted")
        elif rs.get("parameters") != converted:
            self.fail(f"report: source.parameters {rs.get('parameters')} != {converted}")
        if src is None:
            return
        for f in files:
            if not isinstance(f, dict):
                continue
            p = src.root / str(f.get("name"))
            if f.get("name") not in src.files:
                self.fail(f"report: source file {f.get('name')!r} is not a weight file of the source")
                continue
            if f.get("size_bytes") != p.stat().st_size:
                self.fail(f"report: source file {f['name']} size {f.get('size_bytes')} != {p.stat().st_size}")
            if f.get("sha256") != self.src_hashes.get(f["name"]):
                self.fail(f"report: source file {f['name']} sha256 {f.get('sha256')} != {self.src_hashes.get(f['name'])}")
        if names != src.files:
            self.fail(f"report: source.files {names} != source weight files {src.files}")
        dt: dict[str, int] = {}
        for t in src.tensors.values():
            dt[t.dtype] = dt.get(t.dtype, 0) + 1
        if rs.get("dtypes") != dt:
            self.fail(f"report: source.dtypes {rs.get('dtypes')} != {dt}")
        if rs.get("parameters") != sum(t.n_elements for t in src.tensors.values()):
            self.fail(f"report: source.parameters {rs.get('parameters')} != source elements "
                      f"{sum(t.n_elements for t in src.tensors.values())}")


def figure_matches(got: Any, want: float) -> bool:
    """Report figure vs recomputed one: close when finite; a non-finite figure may be written
    as NaN/Infinity or as null (what serde_json makes of a non-finite f64)."""
    if not math.isfinite(want):
        return got is None or (isinstance(got, float) and not math.isfinite(got)
                               and (math.isnan(got) == math.isnan(want)))
    return (isinstance(got, (int, float)) and not isinstance(got, bool)
            and math.isclose(got, want, rel_tol=1e-6, abs_tol=1e-12))


def values_equal(rep_val: Any, file_val: Any, sig: Any) -> bool:
    if isinstance(sig, tuple):
        if not isinstance(rep_val, list) or not isinstance(file_val, list) or len(rep_val) != len(file_val):
            return False
        return all(values_equal(a, b, sig[1]) for a, b in zip(rep_val, file_val))
    if sig == VT.BOOL:
        return rep_val is file_val or (isinstance(rep_val, bool) and rep_val == file_val)
    if sig in (VT.FLOAT32, VT.FLOAT64):
        return (isinstance(rep_val, (int, float)) and not isinstance(rep_val, bool)
                and np.float32(rep_val) == np.float32(file_val))
    if sig == VT.STRING:
        return rep_val == file_val
    return isinstance(rep_val, int) and not isinstance(rep_val, bool) and rep_val == file_val


def summary(ok: bool, tensors: int, checked: int, failures: list[str]) -> None:
    print(json.dumps({"ok": ok, "tensors": tensors, "checked_bytes": checked, "failures": failures}))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Check a dspark GGUF against the output contract.")
    ap.add_argument("gguf", type=Path, metavar="GGUF")
    ap.add_argument("--source", type=Path, metavar="DIR", help="source checkpoint folder to compare bytes with")
    ap.add_argument("--report", type=Path, metavar="REPORT_JSON", help="conversion-report.json to verify")
    args = ap.parse_args(argv)

    def io_error(msg: str) -> int:
        print(f"ERROR: {msg}", file=sys.stderr)
        summary(False, 0, 0, [msg])
        return 2

    for p, what in ((args.gguf, "GGUF"), (args.report, "report")):
        if p is not None and (not p.is_file() or not os.access(p, os.R_OK)):
            return io_error(f"{what} {p} is not a readable file")
    src: Source | None = None
    if args.source is not None:
        try:
            src = load_source(args.source)
        except (SourceError, OSError) as e:
            return io_error(f"source: {e}")
    report: Any = None
    c = Checker()
    if args.report is not None:
        try:
            report = json.loads(args.report.read_text(encoding="utf-8"))
        except OSError as e:
            return io_error(f"report: {e}")
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            c.fail(f"report {args.report.name} is not valid JSON: {e}")
            report = None
        if isinstance(report, dict) and isinstance(report.get("skipped"), list):
            c.allowed_skips = {n for n in report["skipped"] if isinstance(n, str)}
    try:
        if not c.open_gguf(args.gguf):
            summary(False, 0, 0, c.failures)
            return 1
    except OSError as e:
        return io_error(f"GGUF: {e}")

    errors: dict[str, tuple[float, float]] | None = None
    stages: list[tuple[str, Any]] = [
        ("layout", c.check_layout), ("metadata", c.check_metadata), ("values", c.check_values),
        ("tensor order", c.check_tensor_order), ("tensor shapes/types", c.check_tensor_shapes_and_types),
    ]
    for label, fn in stages:
        try:
            fn()
        except Exception as e:  # a malformed file must not produce a traceback
            c.fail(f"{label} check could not complete: {type(e).__name__}: {e}")
    if src is not None:
        try:
            errors = c.check_source(src, want_errors=report is not None)
        except SourceError as e:
            return io_error(f"source: {e}")
        except OSError as e:
            return io_error(f"source: {e}")
        except Exception as e:
            c.fail(f"source comparison could not complete: {type(e).__name__}: {e}")
    if report is not None:
        try:
            c.check_report(report, errors, src)
        except OSError as e:
            return io_error(f"report: {e}")
        except Exception as e:
            c.fail(f"report check could not complete: {type(e).__name__}: {e}")
    ok = not c.failures
    summary(ok, len(c.tensors), sum(c.checked.values()), c.failures)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Compare two llama.cpp-layout drafter GGUFs key by key and tensor by tensor.

Meant for llama.cpp's own converter (`convert_hf_to_gguf.py SRC --target-model-dir TGT
--outtype q8_0`) against `dspark convert SRC --layout llama.cpp --vocab-from TARGET.gguf
--outtype q8_0`, but works for any two GGUFs. Uses only llama.cpp's `gguf` Python package
(gguf-py) and numpy; nothing from the dspark Rust code.

What is compared:

* metadata: every key of either file: present in both, same GGUF value type (and array
  element type), same value (arrays element by element; the first differing index is
  shown); key order is reported when it differs;
* tensors: every tensor of either file: present in both, same ggml shape (ne order),
  same ggml type, and the data: bytes equal, or else both dequantized to float32 with
  `gguf.quants.dequantize` and the max abs difference, the number of differing elements
  and (for block types) of differing blocks are reported; tensor order and data offsets
  are reported when they differ.

Exit status: 0 no structural mismatch (value differences may still be listed),
1 structural mismatch: a key or tensor missing on one side, a key whose GGUF type differs,
a tensor whose shape differs, or (unless --allow-type-diff) a tensor whose ggml type
differs; 2 usage or I/O error. Keys under an --ignore-key-prefix (e.g. `provenance.`,
which llama.cpp's loader never reads) are still listed but are not structural.

Usage:
    python tests/python/compare_llama_conversion.py A.gguf B.gguf [--allow-type-diff]
        [--ignore-key-prefix PREFIX ...] [--json OUT.json]
If `gguf` is not importable, point PYTHONPATH at llama.cpp's gguf-py folder.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import numpy as np

try:
    import gguf
    from gguf import GGMLQuantizationType as QT
    from gguf import GGUFValueType as VT
    from gguf.quants import dequantize
except ImportError as e:  # pragma: no cover
    print(f"cannot import gguf-py ({e}); pip install gguf or set PYTHONPATH to llama.cpp/gguf-py", file=sys.stderr)
    sys.exit(2)


def field_type(f) -> str:
    t = VT(f.types[0]).name
    if f.types[0] == VT.ARRAY:
        sub = VT(f.types[1]).name if len(f.types) > 1 else "?"
        return f"ARRAY[{sub}]"
    return t


def field_value(f) -> Any:
    if f.types[0] == VT.ARRAY:
        return [f.contents(i) for i in range(len(f.data))]
    return f.contents()


def short(v: Any, n: int = 60) -> str:
    if isinstance(v, list):
        if len(v) <= 8:
            s = json.dumps(v)
        else:
            s = f"[{len(v)} items: {json.dumps(v[:3])[1:-1]}, ...]"
    else:
        s = json.dumps(v) if not isinstance(v, float) else repr(v)
    return s if len(s) <= n else s[: n - 3] + "..."


def first_diff(a: list, b: list) -> str:
    if len(a) != len(b):
        return f"length {len(a)} vs {len(b)}"
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return f"first diff at [{i}]: {short(x, 30)} vs {short(y, 30)}"
    return "equal"


def tensor_info(r) -> dict:
    out = {}
    for i, t in enumerate(r.tensors):
        out[t.name] = {
            "index": i,
            "shape": [int(x) for x in t.shape],  # ne order (ne0 first)
            "type": QT(t.tensor_type),
            "offset": int(t.data_offset),
            "nbytes": int(t.n_bytes),
            "raw": np.asarray(t.data).view(np.uint8).reshape(-1),
        }
    return out


def dequant(t: dict) -> np.ndarray:
    qt = t["type"]
    raw = t["raw"]
    if qt == QT.F32:
        return raw.view(np.float32).astype(np.float64)
    if qt == QT.F16:
        return raw.view(np.float16).astype(np.float64)
    if qt in (QT.I8, QT.I16, QT.I32, QT.I64):
        dt = {QT.I8: np.int8, QT.I16: np.int16, QT.I32: np.int32, QT.I64: np.int64}[qt]
        return raw.view(dt).astype(np.float64)
    # quantized / bf16: gguf-py's reference dequantizer (row-major, ne0 fastest)
    ne0 = t["shape"][0]
    block, tsize = gguf.GGML_QUANT_SIZES[qt]
    rows = raw.reshape(-1, ne0 // block * tsize)
    return dequantize(rows, qt).astype(np.float64).reshape(-1)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("a", help="first GGUF (e.g. llama.cpp converter's)")
    ap.add_argument("b", help="second GGUF (e.g. dspark convert --layout llama.cpp)")
    ap.add_argument("--allow-type-diff", action="store_true", help="a tensor ggml-type difference is not structural")
    ap.add_argument("--ignore-key-prefix", action="append", default=[], metavar="PREFIX",
                    help="a key missing on one side under this prefix is listed but not structural (repeatable)")
    ap.add_argument("--json", help="also write the comparison as JSON here")
    args = ap.parse_args()
    try:
        ra, rb = gguf.GGUFReader(args.a, "r"), gguf.GGUFReader(args.b, "r")
    except Exception as e:  # noqa: BLE001
        print(f"cannot read: {e}", file=sys.stderr)
        return 2

    structural: list[str] = []
    notes: list[str] = []
    report: dict[str, Any] = {"a": args.a, "b": args.b, "keys": [], "tensors": []}

    # ---------------- metadata ----------------
    fa = {f.name: f for f in ra.fields.values() if not f.name.startswith("GGUF.")}
    fb = {f.name: f for f in rb.fields.values() if not f.name.startswith("GGUF.")}
    names = list(fa) + [k for k in fb if k not in fa]
    rows = []
    for k in names:
        if k not in fb or k not in fa:
            side = "A only" if k in fa else "B only"
            f = fa.get(k) or fb.get(k)
            rows.append((k, field_type(f), side, short(field_value(f))))
            if any(k.startswith(p) for p in args.ignore_key_prefix):
                notes.append(f"key {k}: {side} (ignored prefix)")
            else:
                structural.append(f"key {k}: {side}")
            report["keys"].append({"key": k, "status": side})
            continue
        ta, tb = field_type(fa[k]), field_type(fb[k])
        va, vb = field_value(fa[k]), field_value(fb[k])
        if ta != tb:
            status, detail = "TYPE", f"{ta} vs {tb}: {short(va, 30)} vs {short(vb, 30)}"
            structural.append(f"key {k}: type {ta} vs {tb}")
        elif va == vb:
            status, detail = "equal", short(va)
        else:
            status = "VALUE"
            detail = first_diff(va, vb) if isinstance(va, list) else f"{short(va, 40)} vs {short(vb, 40)}"
        rows.append((k, ta if ta == tb else f"{ta}/{tb}", status, detail))
        report["keys"].append({"key": k, "type_a": ta, "type_b": tb, "status": status, "detail": detail})
    common = [k for k in fa if k in fb]
    if common != [k for k in fb if k in fa]:
        notes.append("metadata key order differs (common keys): A " + ", ".join(common[:6]) + " ... / B "
                     + ", ".join([k for k in fb if k in fa][:6]) + " ...")
    w = max(len(r[0]) for r in rows) if rows else 10
    print(f"# metadata: A={args.a}  B={args.b}")
    print(f"{'key':<{w}}  {'type':<16} {'status':<7} detail")
    for k, t, s, d in rows:
        print(f"{k:<{w}}  {t:<16} {s:<7} {d}")

    # ---------------- tensors ----------------
    ta_, tb_ = tensor_info(ra), tensor_info(rb)
    tnames = list(ta_) + [n for n in tb_ if n not in ta_]
    print()
    print("# tensors (shape in ggml ne order)")
    w = max(len(n) for n in tnames) if tnames else 10
    print(f"{'tensor':<{w}}  {'shape':<14} {'type A':<6} {'type B':<6} {'status':<11} max|A-B|   diff elems / blocks")
    n_equal = 0
    for n in tnames:
        x, y = ta_.get(n), tb_.get(n)
        if x is None or y is None:
            side = "A only" if y is None else "B only"
            t = x or y
            print(f"{n:<{w}}  {str(t['shape']):<14} {t['type'].name if x else '-':<6} {t['type'].name if y else '-':<6} {side}")
            structural.append(f"tensor {n}: {side}")
            report["tensors"].append({"name": n, "status": side})
            continue
        ent: dict[str, Any] = {"name": n, "shape_a": x["shape"], "shape_b": y["shape"],
                               "type_a": x["type"].name, "type_b": y["type"].name}
        if x["shape"] != y["shape"]:
            status = "SHAPE"
            structural.append(f"tensor {n}: shape {x['shape']} vs {y['shape']}")
            print(f"{n:<{w}}  {str(x['shape'])}/{str(y['shape'])} {x['type'].name:<6} {y['type'].name:<6} {status}")
            ent["status"] = status
            report["tensors"].append(ent)
            continue
        if x["type"] != y["type"]:
            (notes if args.allow_type_diff else structural).append(f"tensor {n}: type {x['type'].name} vs {y['type'].name}")
        if x["type"] == y["type"] and np.array_equal(x["raw"], y["raw"]):
            status, mad, extra = "bytes-equal", 0.0, ""
            n_equal += 1
        else:
            da, db = dequant(x), dequant(y)
            d = np.abs(da - db)
            mad = float(d.max()) if d.size else 0.0
            nd = int((d != 0).sum())
            extra = f"{nd}/{d.size} elems"
            if x["type"] == y["type"] and x["type"] not in (QT.F32, QT.F16, QT.BF16, QT.I64, QT.I32):
                block, tsize = gguf.GGML_QUANT_SIZES[x["type"]]
                ba = x["raw"].reshape(-1, tsize)
                bb = y["raw"].reshape(-1, tsize)
                nb = int((ba != bb).any(axis=1).sum())
                extra += f", {nb}/{ba.shape[0]} blocks"
                ent["diff_blocks"] = nb
            status = "VALUE" if mad > 0 else "same-value"  # same values, different bytes (e.g. -0.0, scale bits)
            ent["diff_elems"] = nd
            ent["max_abs_ref"] = float(max(np.abs(da).max(), np.abs(db).max())) if d.size else 0.0
        ent.update({"status": status, "max_abs_diff": mad})
        report["tensors"].append(ent)
        print(f"{n:<{w}}  {str(x['shape']):<14} {x['type'].name:<6} {y['type'].name:<6} {status:<11} {mad:<10.3g} {extra}")
    common_t = [n for n in ta_ if n in tb_]
    if common_t != [n for n in tb_ if n in ta_]:
        notes.append("tensor order differs: A " + ", ".join(common_t[:5]) + " ... / B "
                     + ", ".join([n for n in tb_ if n in ta_][:5]) + " ...")
    elif any(ta_[n]["offset"] != tb_[n]["offset"] for n in common_t):
        notes.append("tensor data offsets differ (metadata sizes differ)")

    print()
    print(f"# summary: {len(names)} keys, {len(tnames)} tensors, {n_equal} tensors bytes-equal")
    for s in notes:
        print(f"note: {s}")
    for s in structural:
        print(f"STRUCTURAL: {s}")
    print("result:", "STRUCTURAL MISMATCH" if structural else "structurally identical")
    report.update({"structural": structural, "notes": notes, "tensors_bytes_equal": n_equal})
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(report, fh, indent=1)
    return 1 if structural else 0


if __name__ == "__main__":
    sys.exit(main())

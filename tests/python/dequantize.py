"""Dequantizes raw GGUF blocks with gguf-py (llama.cpp's own Python package), for dspark's
bit-for-bit dequantization tests.

usage: dequantize.py BATCH.json
BATCH.json: [{"type": "Q4_K", "blocks": "in.bin", "out": "out.f32"}, ...]; each `blocks`
file holds whole blocks of `type`; `out` receives the values as little-endian f32.
A type gguf-py cannot dequantize is an error (exit 2) naming it.
"""

import json
import sys

import numpy as np
from gguf import GGMLQuantizationType, quants


def main() -> int:
    with open(sys.argv[1], encoding="utf-8") as f:
        batch = json.load(f)
    for item in batch:
        qtype = GGMLQuantizationType[item["type"]]
        data = np.fromfile(item["blocks"], dtype=np.uint8)
        try:
            values = quants.dequantize(data, qtype)
        except NotImplementedError:
            print(f"gguf-py cannot dequantize {item['type']}", file=sys.stderr)
            return 2
        values.astype("<f4").tofile(item["out"])
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Compare a runtime's results (JSON, same schema as qwen3_ref.py's output) against the reference.

  /tmp/pyenv/bin/python tests/reference/compare.py REF.json GOT.json [--tol 1e-4] [--slices M]

Per position row r (tolerance rule of README.md):
  logits    max_j |got - ref| <= tol * max(1, max_j |ref|)
  captured  split the row into M equal slices (M = number of captured layers, default 1); per slice
            max |got - ref| <= tol * max(1, max |ref slice|)
  argmax    must agree where the reference's top-1 minus top-2 logit margin exceeds twice the
            allowed logit error of that row; rows with a smaller margin are reported, not failed.
Prints the worst ratios (error / allowed) and exits 1 on any failure.
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("ref")
    ap.add_argument("got")
    ap.add_argument("--tol", type=float, default=1e-4, help="scale-relative tolerance (default 1e-4)")
    ap.add_argument("--slices", type=int, default=1, help="number of captured layers in each row")
    a = ap.parse_args(argv)
    R, G = json.load(open(a.ref)), json.load(open(a.got))
    ok = True

    rl, gl = np.asarray(R["logits"], np.float64), np.asarray(G["logits"], np.float64)
    if rl.shape != gl.shape:
        print(f"FAIL logits shape {gl.shape} != reference {rl.shape}")
        return 1
    allowed = a.tol * np.maximum(1.0, np.abs(rl).max(axis=1))
    ratio = np.abs(gl - rl).max(axis=1) / allowed
    bad = np.nonzero(ratio > 1)[0]
    print(f"logits: worst error/allowed {ratio.max():.3g} (row {int(ratio.argmax())}), "
          f"max|d| {np.abs(gl - rl).max():.3e}")
    if len(bad):
        ok = False
        print(f"FAIL logits out of tolerance at rows {bad.tolist()[:20]}")

    srt = np.sort(rl, axis=1)
    margin = srt[:, -1] - srt[:, -2] if rl.shape[1] > 1 else np.full(len(rl), np.inf)
    ra, ga = np.argmax(rl, axis=1), np.asarray(G.get("argmax", np.argmax(gl, axis=1).tolist()))
    for r in np.nonzero(ra != ga)[0]:
        if margin[r] > 2 * allowed[r]:
            ok = False
            print(f"FAIL argmax row {r}: got {ga[r]}, reference {ra[r]} (margin {margin[r]:.3g})")
        else:
            print(f"note argmax row {r} differs within a near-tie (margin {margin[r]:.3g})")

    rc, gc = np.asarray(R.get("captured", []), np.float64), np.asarray(G.get("captured", []), np.float64)
    if rc.size or gc.size:
        if rc.shape != gc.shape or rc.shape[1] % a.slices:
            print(f"FAIL captured shape {gc.shape} vs reference {rc.shape} (slices {a.slices})")
            return 1
        n = len(rc)
        rs, gs = rc.reshape(n, a.slices, -1), gc.reshape(n, a.slices, -1)
        allowed_c = a.tol * np.maximum(1.0, np.abs(rs).max(axis=2))
        ratio_c = np.abs(gs - rs).max(axis=2) / allowed_c
        print(f"captured: worst error/allowed {ratio_c.max():.3g}, max|d| {np.abs(gs - rs).max():.3e}")
        if (ratio_c > 1).any():
            ok = False
            rows, sl = np.nonzero(ratio_c > 1)
            print(f"FAIL captured out of tolerance at (row, slice) {list(zip(rows.tolist(), sl.tolist()))[:20]}")
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

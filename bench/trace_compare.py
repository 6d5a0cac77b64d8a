"""Compare dspark's traced intermediates (DSPARK_TRACE=DIR) with llama.cpp's dumped nodes
(bench/llama_dump --dump DIR): for each traced tensor, in order, the llama.cpp node of the
same size nearest to it (fewest differing elements), how many elements differ and by how
much. The first traced tensor with no exact twin is where the two forwards part.

    python bench/trace_compare.py DSPARK_TRACE_DIR LLAMA_DUMP_DIR [--all]
"""
import os
import sys

import numpy as np


def load(d, names):
    out = []
    for n in names:
        a = np.fromfile(os.path.join(d, n), dtype="<f4")
        out.append((n[:-4], a))
    return out


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    show_all = "--all" in sys.argv
    tdir, ldir = args
    traced = load(tdir, sorted(f for f in os.listdir(tdir) if f.endswith(".f32")))
    lnames = []
    with open(os.path.join(ldir, "index.txt")) as f:
        for line in f:
            fs = line.split()
            lnames.append((fs[0], fs[-1]))
    by_size = {}
    for name, op in lnames:
        a = np.fromfile(os.path.join(ldir, name + ".f32"), dtype="<f4")
        by_size.setdefault(a.size, []).append((name, op, a))
    first = True
    for name, a in traced:
        best = None
        for lname, op, b in by_size.get(a.size, []):
            differ = int(np.count_nonzero(a.view("<u4") != b.view("<u4")))
            if best is None or differ < best[0]:
                with np.errstate(invalid="ignore"):
                    md = float(np.nanmax(np.abs(a - b))) if a.size else 0.0
                best = (differ, md, lname, op)
                if differ == 0:
                    break
        if best is None:
            line = f"{name:28} (no llama.cpp node of {a.size} values)"
        else:
            differ, md, lname, op = best
            mark = "exact" if differ == 0 else "DIFF "
            line = f"{name:28} {mark} {differ:7} of {a.size:7}  max|d| {md:.3e}  ~ {lname} {op}"
            if differ and first:
                line += "   <== first"
                first = False
        if show_all or best is None or best[0] or True:
            print(line)


main()

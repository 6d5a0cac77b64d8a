"""Evaluation prompts: a few hundred characters cut from files, ending mid-code.

* heldout  - the held-out stdlib files (never trained on) -> examples/code-pair/heldout.jsonl
* pip      - pip's and setuptools' own sources in the training venv (not stdlib, never trained on),
             a proxy for "real Python from other projects"
* thirdparty - flask, werkzeug, click and jinja2 from the base interpreter's site-packages, when
             installed there (a second proxy; skipped otherwise)
Each cut starts at a line start and ends just before a space inside a non-empty
line (so the next token is a natural " word" token), 250-600 characters long.
"""
import json
import sys
import sysconfig
from pathlib import Path

import numpy as np

from common import CORPUS, EXAMPLE_DIR, SEED, WORK, log, sha256_bytes


def cuts(text, rng, n, lo=250, hi=600):
    out = []
    line_starts = [0] + [i + 1 for i, c in enumerate(text) if c == "\n"]
    for _ in range(n * 20):
        if len(out) == n:
            break
        start = line_starts[int(rng.integers(0, len(line_starts)))]
        end = start + int(rng.integers(lo, hi))
        if end >= len(text):
            continue
        # move forward to just before a space that is inside a line with code after it
        while end < len(text) and not (text[end] == " " and text[end - 1] not in " \n"
                                        and text.rfind("\n", 0, end) < end - 1):
            end += 1
        if end >= len(text) - 1 or end - start > hi + 200:
            continue
        p = text[start:end]
        if p.strip() and not any(abs(start - s) < hi for s, _ in out):
            out.append((start, p))
    return [p for _, p in out]


def write(path, prompts):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        for p in prompts:
            f.write(json.dumps({"prompt": p}) + "\n")


def from_files(files, per_file, rng, limit):
    prompts = []
    for rel, text in files:
        for p in cuts(text, rng, per_file):
            prompts.append(p)
    idx = rng.permutation(len(prompts))[:limit]
    return [prompts[i] for i in sorted(idx)]


def main():
    rng = np.random.default_rng(SEED)
    held = []
    with open(CORPUS / "heldout.jsonl") as f:
        for line in f:
            d = json.loads(line)
            if len(d["text"]) > 2000:
                held.append((d["path"], d["text"]))
    prompts = from_files(held, 3, rng, 64)
    write(WORK / "prompts_heldout.jsonl", prompts)
    write(EXAMPLE_DIR / "heldout.jsonl", prompts)
    log(f"prompts: heldout {len(prompts)} from {len(held)} files")

    site = Path(sysconfig.get_paths()["purelib"])  # the training venv's site-packages
    files = []
    for pkg in ("pip/_internal", "setuptools"):
        for p in sorted((site / pkg).rglob("*.py")):
            rel = p.relative_to(site).as_posix()
            if "/tests/" in rel or "/_vendor/" in rel:
                continue
            t = p.read_text(encoding="utf-8", errors="replace")
            if len(t) > 3000:
                files.append((rel, t))
    # one cut per file from a deterministic subset of files
    files = [f for f in files if int(sha256_bytes(f[0].encode())[:8], 16) % 3 == 0]
    prompts = from_files(files, 1, rng, 64)
    write(WORK / "prompts_pip.jsonl", prompts)
    log(f"prompts: pip/setuptools {len(prompts)} from {len(files)} files under {site}")

    # the base interpreter's own site-packages (outside the venv), when it has these projects
    base_site = Path(sysconfig.get_paths(vars={"base": sys.base_prefix, "platbase": sys.base_prefix})["purelib"])
    files = []
    for pkg in ("flask", "werkzeug", "click", "jinja2"):
        for p in sorted((base_site / pkg).rglob("*.py")):
            rel = p.relative_to(base_site).as_posix()
            if "/tests/" in rel:
                continue
            t = p.read_text(encoding="utf-8", errors="replace")
            if len(t) > 3000:
                files.append((rel, t))
    if files:
        prompts = from_files(files, 1, rng, 64)
        write(WORK / "prompts_thirdparty.jsonl", prompts)
        log(f"prompts: flask/werkzeug/click/jinja2 {len(prompts)} from {len(files)} files under {base_site}")


if __name__ == "__main__":
    sys.exit(main())

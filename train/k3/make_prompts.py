"""Step 1b - evaluation prompts, cut as the code pair's (train/prompts.py: 250-600 characters from a line start
to just before a space inside a code line) from the held-out stdlib files (never trained on):
WORK/prompts_heldout.jsonl and examples/k3-pair/heldout.jsonl (64 prompts), and pip/setuptools
(WORK/prompts_pip.jsonl, 64). Same seed and rule as the code pair, so the held-out set equals
examples/code-pair/heldout.jsonl when the corpus is the same."""
import json
import sys
import sysconfig
from pathlib import Path

import numpy as np

from k3common import CORPUS, EXAMPLE_DIR, SEED, WORK, log, sha256_bytes
from prompts import from_files, write  # train/prompts.py


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
    site = Path(sysconfig.get_paths()["purelib"])
    files = []
    for pkg in ("pip/_internal", "setuptools"):
        for p in sorted((site / pkg).rglob("*.py")):
            rel = p.relative_to(site).as_posix()
            if "/tests/" in rel or "/_vendor/" in rel:
                continue
            t = p.read_text(encoding="utf-8", errors="replace")
            if len(t) > 3000:
                files.append((rel, t))
    files = [f for f in files if int(sha256_bytes(f[0].encode())[:8], 16) % 3 == 0]
    prompts = from_files(files, 1, rng, 64)
    write(WORK / "prompts_pip.jsonl", prompts)
    log(f"prompts: pip/setuptools {len(prompts)} from {len(files)} files under {site}")


if __name__ == "__main__":
    sys.exit(main())

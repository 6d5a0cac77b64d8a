"""Step 1 - corpus: the .py files of this machine's CPython standard library.

Excludes every test/ and tests/ directory, idlelib/ and site-packages/.
Deterministic file-level split: a file is held out when the first 8 hex digits
of sha256(relative path) mod 20 == 0 (about 5 %).  Writes
WORK/corpus/{train,heldout}.jsonl ({"path", "text"} per file) and
WORK/corpus/manifest.json (Python version, licence, per-file sha256 and split).
"""
import json
import platform
import sys
import sysconfig
from pathlib import Path

from common import CORPUS, log, sha256_bytes, write_json

EXCLUDED_DIRS = {"test", "tests", "idlelib", "site-packages", "__pycache__"}


def is_heldout(rel: str) -> bool:
    return int(sha256_bytes(rel.encode())[:8], 16) % 20 == 0


def main():
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    files = []
    for p in sorted(stdlib.rglob("*.py")):
        rel = p.relative_to(stdlib).as_posix()
        if any(part in EXCLUDED_DIRS for part in rel.split("/")[:-1]):
            continue
        files.append((rel, p))
    CORPUS.mkdir(parents=True, exist_ok=True)
    manifest = {
        "source": "CPython standard library (.py files)",
        "python_version": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "stdlib_path": str(stdlib),
        "licence": "PSF License Agreement (Python Software Foundation License Version 2); "
                   "see https://docs.python.org/3/license.html",
        "excluded_directories": sorted(EXCLUDED_DIRS),
        "split_rule": "heldout iff int(sha256(relpath)[:8], 16) % 20 == 0",
        "files": [],
    }
    counts = {"train": [0, 0], "heldout": [0, 0]}
    outs = {s: open(CORPUS / f"{s}.jsonl", "w") for s in counts}
    for rel, p in files:
        raw = p.read_bytes()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            log(f"skip (not UTF-8): {rel}")
            continue
        split = "heldout" if is_heldout(rel) else "train"
        manifest["files"].append(
            {"path": rel, "sha256": sha256_bytes(raw), "bytes": len(raw), "split": split})
        outs[split].write(json.dumps({"path": rel, "text": text}) + "\n")
        counts[split][0] += 1
        counts[split][1] += len(raw)
    for f in outs.values():
        f.close()
    manifest["counts"] = {s: {"files": c[0], "bytes": c[1]} for s, c in counts.items()}
    write_json(CORPUS / "manifest.json", manifest)
    log(f"corpus: Python {platform.python_version()} at {stdlib}: "
        + ", ".join(f"{s} {c[0]} files {c[1]/1e6:.2f} MB" for s, c in counts.items()))


if __name__ == "__main__":
    sys.exit(main())

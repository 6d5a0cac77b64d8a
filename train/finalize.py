"""Step 10 - finalize examples/code-pair/: training.log (target, continuation and
drafter logs), corpus-manifest.json (Python version, licence, every corpus file's
sha256 and split) and MANIFEST (sha256 and size of every committed file, plus the
headline figures read from WORK/eval/*.json and the widened report)."""
import json
import sys
from pathlib import Path

from common import CORPUS, EXAMPLE_DIR, WIDENED, WORK, read_json, sha256_bytes


def main():
    parts = []
    for name, title in (("target_train.log", "target training (train/train_target.py)"),
                        ("gen.log", "greedy continuations (train/gen_continuations.py)"),
                        ("draft_train.log", "drafter training (train/train_drafter.py)")):
        p = WORK / name
        if p.exists():
            parts.append(f"##### {title}\n" + p.read_text())
    (EXAMPLE_DIR / "training.log").write_text("\n".join(parts))
    m = read_json(CORPUS / "manifest.json")
    (EXAMPLE_DIR / "corpus-manifest.json").write_text(json.dumps(m, indent=1) + "\n")

    lines = ["dspark code-pair: a Qwen3 target (llama.cpp GGUF, Q8_0) and its DSpark drafter",
             "(SpecForge 0.2.0 HF folder), trained from scratch on CPU by train/run.sh.",
             f"corpus: CPython {m['python_version']} standard library .py files "
             f"({m['counts']['train']['files']} train / {m['counts']['heldout']['files']} held-out files); "
             f"licence: {m['licence']}", ""]
    ev = WORK / "eval" / "eval.json"
    if ev.exists():
        e = read_json(ev)
        for k, v in e.items():
            if isinstance(v, dict) and "tau" in v:
                lines.append(f"tau {k}: {v['tau']:.3f} ({v['prompts']} prompts, {e['max_new']} new tokens, greedy)")
    lc = WORK / "eval" / "llama_check.json"
    if lc.exists():
        c = read_json(lc)
        n = len(c["prompts"])
        lines.append(f"llama.cpp greedy == transformers greedy ({c['n_tokens']} tokens): "
                     f"{c['fp32_identical']}/{n} vs fp32 weights, {c['q8_weights_identical']}/{n} vs the Q8_0 weights")
    wr = WIDENED / "widen_report.json"
    if wr.exists():
        w = read_json(wr)
        g = w["greedy_check"]
        lines.append(f"widened copy (not committed): greedy == small on {g['prompts'] - g['differ']}/{g['prompts']} "
                     f"prompts; tau widened {w['tau']['widened']['tau']:.3f} vs small {w['tau']['small']['tau']:.3f} "
                     f"({w['tau']['prompts']} prompts)")
    lines += ["", "files (sha256, bytes):"]
    for p in sorted(EXAMPLE_DIR.rglob("*")):
        if p.is_file() and p.name != "MANIFEST":
            b = p.read_bytes()
            lines.append(f"{sha256_bytes(b)}  {len(b):>9}  {p.relative_to(EXAMPLE_DIR).as_posix()}")
    (EXAMPLE_DIR / "MANIFEST").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())

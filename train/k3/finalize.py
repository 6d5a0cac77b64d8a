"""Step 8 - finalize examples/k3-pair/: training.log (the model checks, target training, export, agreement,
continuations, drafter training, evaluation logs, in order) and MANIFEST (headline figures from WORK/*.json and
the sha256 and size of every committed file). The corpus is the code pair's, file for file
(examples/code-pair/corpus-manifest.json; checked here)."""
import json
import sys

from k3common import CORPUS, EXAMPLE_DIR, REPO, WORK, read_json, sha256_bytes


def main():
    parts = []
    for name, title in (("test_model.log", "model.py checks (train/k3/test_model.py)"),
                        ("target_train.log", "target training (train/k3/train_target.py)"),
                        ("eval/agree.log", "three-way agreement (train/k3/agree.py)"),
                        ("gen.log", "greedy continuations (train/k3/gen_continuations.py)"),
                        ("draft_train.log", "drafter training (train/k3/train_drafter.py)"),
                        ("eval/eval.log", "evaluation in PyTorch (train/k3/eval.py)"),
                        ("eval/runtime.log", "evaluation by dspark (train/k3/runtime_eval.py)")):
        p = WORK / name
        if p.exists():
            parts.append(f"##### {title}\n" + p.read_text())
    (EXAMPLE_DIR / "training.log").write_text("\n".join(parts))
    m = read_json(CORPUS / "manifest.json")
    same = m == read_json(REPO / "examples" / "code-pair" / "corpus-manifest.json")
    lines = ["dspark k3-pair: a Kimi-K3-layout target (llama.cpp kimi-k3 GGUF, routed experts MXFP4, the rest Q8_0 /",
             "F32) and its DSpark drafter (SpecForge 0.2.0 HF folder, bf16) on K3 taps, trained from scratch on CPU by",
             "train/k3/run.sh.",
             f"corpus: CPython {m['python_version']} standard library .py files ({m['counts']['train']['files']} train / "
             f"{m['counts']['heldout']['files']} held-out files), "
             + ("identical to examples/code-pair/corpus-manifest.json" if same else "DIFFERENT from the code pair's"),
             ""]
    s = WORK / "target" / "train_summary.json"
    if s.exists():
        t = read_json(s)
        lines.append(f"target: {t['params'] / 1e6:.2f}M params, held-out loss {t['heldout_loss_nats']:.3f} nats/token, "
                     f"train {t['train_loss_nats']:.3f} ({t['steps']} steps, {t['wall_minutes']:.0f} min)")
    a = WORK / "eval" / "agree.json"
    if a.exists():
        for k, v in read_json(a)["summary"].items():
            lines.append(f"agree {k}: {json.dumps(v)}")
    for fname, key in (("eval.json", None), ("runtime.json", None)):
        p = WORK / "eval" / fname
        if not p.exists():
            continue
        for k, v in read_json(p).items():
            if isinstance(v, dict) and "tau" in v:
                lines.append(f"tau (PyTorch) {k}: {v['tau']:.3f} ({v['prompts']} prompts, greedy)")
            elif isinstance(v, dict) and "mean_acceptance_length" in v:
                lines.append(f"tau (dspark eval) {k}: {v['mean_acceptance_length']:.3f} ({v['prompts']} prompts, "
                             f"T={v['sampling']['temp']}, identical to AR: {v.get('identical_prompts')}/{v['prompts']})")
    lines += ["", "files (sha256, bytes):"]
    for p in sorted(EXAMPLE_DIR.rglob("*")):
        if p.is_file() and p.name != "MANIFEST":
            b = p.read_bytes()
            lines.append(f"{sha256_bytes(b)}  {len(b):>9}  {p.relative_to(EXAMPLE_DIR).as_posix()}")
    (EXAMPLE_DIR / "MANIFEST").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())

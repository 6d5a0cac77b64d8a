"""Step 8 - which rollback the planner chose on the committed K3 pair, and what it cost: `dspark generate
--trace` (adaptive schedule, --rollback auto, T = 0) on the first PROMPTS held-out prompts, each also decoded
plainly (no drafter) for the speed beside it. Per round the trace names the KDA rollback option the planner
took (`snapshots`: the verify kept a state per position; `replay`: the kept positions' recurrence re-run from
the round's start) and its seconds; this tallies them with the verify widths, the plain steps the schedule
chose, and tokens/s. Speculative output == plain output is checked per prompt. -> WORK/eval/rollback.json

  K3_WORK=/tmp/train/k3work python3 train/k3/rollback_mix.py [--prompts 16] [-n 128] [--rollback auto]
"""
import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from k3common import DSPARK, EVAL_DIR, EXAMPLE_DIR, WORK, log, write_json


def generate(args, prompt_file, trace=None, draft=None):
    cmd = [str(DSPARK), "generate", "-m", str(EXAMPLE_DIR / "target.gguf"), "-f", str(prompt_file),
           "-n", str(args.n), "-t", str(args.threads), "--json"]
    if draft:
        cmd += ["--draft", str(draft), "--rollback", args.rollback, "--trace", str(trace)]
    r = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return json.loads(r.stdout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rollback", default="auto")
    ap.add_argument("--draft", default=str(WORK / "draft.gguf"), help="runtime_eval.py's converted drafter")
    ap.add_argument("--out", default=str(EVAL_DIR / "rollback.json"))
    args = ap.parse_args()
    prompts = [json.loads(l)["prompt"] for l in open(WORK / "prompts_heldout.jsonl")][: args.prompts]
    options, widths, accepted = {}, {}, []
    plain_steps = rounds = 0
    spec_tps, plain_tps, identical = [], [], 0
    with tempfile.TemporaryDirectory() as tmp:
        for i, text in enumerate(prompts):
            pf, tf = Path(tmp) / f"p{i}.txt", Path(tmp) / f"t{i}.jsonl"
            pf.write_text(text)
            plain = generate(args, pf)
            spec = generate(args, pf, trace=tf, draft=args.draft)
            identical += plain["tokens"] == spec["tokens"]
            plain_tps.append(plain["stats"]["eval_tokens_per_second"])
            spec_tps.append(spec["stats"]["eval_tokens_per_second"])
            for line in tf.read_text().splitlines():
                r = json.loads(line)
                if r.get("plain"):
                    plain_steps += 1
                    continue
                rounds += 1
                o = options.setdefault(r.get("rollback", "none"), {"rounds": 0, "seconds": [], "verify_seconds": []})
                o["rounds"] += 1
                o["seconds"].append(r.get("rollback_seconds", 0.0))
                o["verify_seconds"].append(r["verify_seconds"])
                widths[r["verified"] + 1] = widths.get(r["verified"] + 1, 0) + 1
                accepted.append(r["accepted"])
    summary = {
        "prompts": len(prompts), "tokens_per_prompt": args.n, "rollback_flag": args.rollback,
        "identical_to_plain": identical, "rounds": rounds, "plain_steps": plain_steps,
        "tau_rounds": (sum(accepted) + len(accepted)) / max(len(accepted), 1),
        "verify_widths": dict(sorted(widths.items())),
        "options": {k: {"rounds": v["rounds"],
                        "rollback_ms_median": statistics.median(v["seconds"]) * 1e3,
                        "rollback_ms_total": sum(v["seconds"]) * 1e3,
                        "verify_ms_median": statistics.median(v["verify_seconds"]) * 1e3}
                    for k, v in options.items()},
        "eval_tok_s_median": {"speculative": statistics.median(spec_tps), "plain": statistics.median(plain_tps)},
    }
    summary["speculative_over_plain"] = summary["eval_tok_s_median"]["speculative"] / summary["eval_tok_s_median"]["plain"]
    log(f"rollback mix: {json.dumps(summary)}", EVAL_DIR / "rollback.log")
    write_json(Path(args.out), summary)
    if identical != len(prompts):
        print(f"speculative output differs from plain on {len(prompts) - identical} prompts", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

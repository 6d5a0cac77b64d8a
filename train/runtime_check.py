"""Optional cross-check: the same held-out prompts through the Rust runtime
(`dspark convert` the drafter to a dflash-draft GGUF, then `dspark generate`
speculatively on examples/code-pair/target.gguf) and its tau
(stats.mean_acceptance_length pooled over rounds) next to eval.py's.  Needs a
built dspark binary: $DSPARK_BIN, else target/release/dspark of this repo;
skipped when there is none.  The runtime runs the Q8_0 target and a Q8_0
drafter, eval.py the fp32 target and the bf16-stored drafter, so the figures
differ by quantization near-ties only."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from common import EVAL_DIR, EXAMPLE_DIR, REPO, WORK, log, write_json


def main():
    exe = os.environ.get("DSPARK_BIN") or str(REPO / "target" / "release" / "dspark")
    if not Path(exe).exists():
        log(f"runtime check skipped: no dspark binary at {exe}")
        return 0
    tmp = Path(tempfile.mkdtemp(prefix="dspark-rt-"))
    bin_copy = tmp / "dspark"
    shutil.copy(exe, bin_copy)  # a concurrent cargo build must not swap it mid-run
    draft_gguf = EVAL_DIR / "draft-q8_0.gguf"
    subprocess.run([str(bin_copy), "convert", str(EXAMPLE_DIR / "draft"), "-o", str(draft_gguf),
                    "--force", "-q"], check=True)
    res = {"binary": exe, "draft_gguf": str(draft_gguf)}
    for name in sys.argv[1:] or ["heldout", "pip", "thirdparty"]:
        prompts = [json.loads(l)["prompt"] for l in open(WORK / f"prompts_{name}.jsonl")]
        rounds = acc = same = 0
        hist = []
        for i, p in enumerate(prompts):
            pf = tmp / "p.txt"
            pf.write_text(p)
            base = [str(bin_copy), "generate", "-m", str(EXAMPLE_DIR / "target.gguf"), "-f", str(pf),
                    "-n", "128", "-t", "2", "--json"]
            r = json.loads(subprocess.run(base + ["--draft", str(draft_gguf)], check=True,
                                          capture_output=True).stdout)
            plain = json.loads(subprocess.run(base, check=True, capture_output=True).stdout)
            same += int(plain["tokens"] == r["tokens"])
            st = r["stats"]
            rounds += st["rounds"]
            acc += st["drafts_accepted"]
            h = st["acceptance_histogram"]
            hist += [0] * (len(h) - len(hist))
            for k, v in enumerate(h):
                hist[k] += v
        tau = (rounds + acc) / rounds
        res[name] = {"prompts": len(prompts), "rounds": rounds, "tau": tau, "accepted_hist_m": hist,
                     "speculative_equals_plain": same}
        log(f"runtime ({Path(exe).name}) {name}: tau {tau:.3f} over {rounds} rounds, "
            f"speculative == plain greedy on {same}/{len(prompts)} prompts; hist(m) {hist}")
    write_json(EVAL_DIR / "runtime_check.json", res)
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

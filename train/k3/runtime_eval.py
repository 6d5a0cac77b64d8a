"""Step 7 - the committed pair through dspark itself (the frozen binary $DSPARK, default /tmp/dspark-k3/dspark):
`dspark convert` of examples/k3-pair/draft (Q8_0 dflash-draft GGUF, WORK/draft.gguf), then `dspark eval --json`
on the held-out and pip prompt sets: greedy (T = 0) with the Markov head and without it (--no-markov, the
ablation), and sampled at T = 0.7 (τ at T > 0; exactness in law is the runtime's rejection sampling, tested in
crates/runtime). dspark eval checks that speculative output == plain (AR) greedy output on every prompt.
-> WORK/eval/runtime.json, WORK/eval/runtime.log."""
import json
import subprocess
import sys

from k3common import DSPARK, EVAL_DIR, EXAMPLE_DIR, WORK, log, write_json


def main():
    gguf = WORK / "draft.gguf"
    subprocess.run([str(DSPARK), "convert", str(EXAMPLE_DIR / "draft"), "-o", str(gguf), "--force",
                    "--name", "dspark k3-pair drafter", "-q"], check=True)
    res = {}
    for name in ("heldout", "pip"):
        for variant, extra in (("markov", []), ("no_markov", ["--no-markov"]), ("markov_T0.7", ["--temp", "0.7"])):
            r = subprocess.run([str(DSPARK), "eval", "--target", str(EXAMPLE_DIR / "target.gguf"), "--draft", str(gguf),
                                "--prompts", str(WORK / f"prompts_{name}.jsonl"), "-n", "128", "-t", "2", "--json"] + extra,
                               check=True, capture_output=True, text=True)
            res[f"{name}/{variant}"] = json.loads(r.stdout)
            log(f"dspark eval {name}/{variant}: {r.stdout[:600]}", EVAL_DIR / "runtime.log")
    write_json(EVAL_DIR / "runtime.json", res)


if __name__ == "__main__":
    sys.exit(main())

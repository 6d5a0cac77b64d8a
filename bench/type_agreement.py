"""type_agreement.py — per GGUF, dspark's greedy ids against llama.cpp's, and whether every
step's top logit is the same f32 in both (bit-exact arithmetic), on the first NP prompts of
a JSONL file ({"prompt": ...} per line).

Usage: python3 bench/type_agreement.py FILE.gguf [FILE.gguf ...] PROMPTS.jsonl

Environment: NP prompts [6], T greedy tokens [32], THREADS [2],
LLAMA_DUMP (bench/llama_dump.sh's binary) [/tmp/llama_dump], LLAMA_FLAGS (more
llama_dump flags, e.g. `--no-repack`, with DSPARK_REPACK=0 for dspark) [],
GREEDY_TOP (cargo build --release -p dspark-runtime --example greedy_top)
[target/release/examples/greedy_top].

llama.cpp runs at its defaults (flash attention auto, F16 cache, weight repacking) with
the prompt as text; dspark runs on llama.cpp's prompt ids, the prompt in one forward, then
one token per forward.
"""
import json
import os
import struct
import subprocess
import sys
import tempfile


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    files, prompts_path = sys.argv[1:-1], sys.argv[-1]
    n_prompts, n_tokens = int(os.environ.get("NP", 6)), int(os.environ.get("T", 32))
    threads = os.environ.get("THREADS", "2")
    dump = os.environ.get("LLAMA_DUMP", "/tmp/llama_dump")
    greedy_top = os.environ.get("GREEDY_TOP", "target/release/examples/greedy_top")
    prompts = [json.loads(l)["prompt"] for l in open(prompts_path) if l.strip()][:n_prompts]
    env = dict(os.environ, OMP_WAIT_POLICY="passive")
    flags = os.environ.get("LLAMA_FLAGS", "").split()
    f32 = lambda v: struct.pack("<f", v)
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "l.json")
        for f in files:
            equal = exact = 0
            for p in prompts:
                subprocess.run([dump, f, "--prompt", p, "--greedy", str(n_tokens), "--gen-top", "1",
                                "--no-logits", "-t", threads, "--out", out, *flags],
                               check=True, env=env, capture_output=True)
                theirs = json.load(open(out))
                ours = json.loads(subprocess.run(
                    [greedy_top, f, "--tokens", ",".join(map(str, theirs["tokens"])), "-n", str(n_tokens),
                     "-k", "1", "-t", threads], check=True, capture_output=True, text=True).stdout)
                same = theirs["generated"][:n_tokens] == ours["tokens"][:n_tokens]
                equal += same
                exact += same and all(f32(a[0][1]) == f32(b[0][1])
                                      for a, b in zip(theirs["gen_top"], ours["top"]))
            name = os.path.basename(f).removesuffix(".gguf")
            print(f"{name:14} greedy equal {equal}/{len(prompts)}  "
                  f"top logit bit-exact every step {exact}/{len(prompts)}", flush=True)


if __name__ == "__main__":
    main()

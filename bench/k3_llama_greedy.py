"""Greedy tokens of dspark and llama.cpp on the same Kimi K3 GGUFs and prompts.

Writes kimi-k3 files with the numpy reference's independent generator
(tests/reference/make_tiny_kimi_k3.py) across the layout's options and weight types,
decodes N greedy tokens after P random prompts with `dspark generate` and with
`llama_dump --greedy` (bench/llama_dump.sh builds it), and prints per file how many
tokens agree before the first difference.

    PY bench/k3_llama_greedy.py [--n 48] [--prompts 8] [--attention f16|f32] [-- LLAMA_DUMP_FLAGS]

With llama.cpp's defaults (flash attention) compare `--attention f16`; with
`-- --fa off --ctk f32` compare `--attention f32`. PY needs numpy and gguf
(tests/python/requirements.txt).
"""
import argparse
import json
import os
import random
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = {
    "default": [],
    "lora-latent-shared": ["--q-lora-rank", "32", "--block-size", "3", "--weights-scale", "2.5", "--layers", "6", "--mla-layers", "1,3,5"],
    "nolatent-noshared": ["--latent", "0", "--shared-experts", "0", "--block-size", "0", "--no-gate-lower-bound"],
    "softmax-groups": ["--gating", "softmax", "--experts", "8", "--experts-used", "3", "--expert-groups", "4", "--expert-groups-used", "2", "--no-weights-norm"],
    "q8": ["--wtype", "q8_0", "--hidden", "128", "--kda-head-dim", "32", "--qk-nope", "32", "--kv-lora-rank", "64", "--latent", "64", "--expert-ffn", "64"],
    "f16": ["--wtype", "f16", "--block-size", "5", "--layers", "8", "--mla-layers", "3,7", "--dense-layers", "2"],
    "bf16": ["--wtype", "bf16", "--conv-kernel", "2"],
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=48)
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--attention", default="f16")
    ap.add_argument("--dspark", default=os.path.join(REPO, "target", "release", "dspark"))
    ap.add_argument("--llama-dump", default="/tmp/llama_dump")
    ap.add_argument("--threads", default="2")
    ap.add_argument("llama_flags", nargs="*")
    a = ap.parse_args()
    total = same = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, args in CONFIGS.items():
            path = os.path.join(tmp, f"{name}.gguf")
            subprocess.run([sys.executable, os.path.join(REPO, "tests", "reference", "make_tiny_kimi_k3.py"), path, "--seed", "7"] + args,
                           check=True, capture_output=True)
            rng = random.Random(name)
            agree = []
            for p in range(a.prompts):
                toks = ",".join(str(rng.randrange(0, 500)) for _ in range(3 + 4 * p))
                out = os.path.join(tmp, "l.json")
                subprocess.run([a.llama_dump, path, "--tokens", toks, "--greedy", str(a.n), "--out", out, "--threads", a.threads] + a.llama_flags,
                               check=True, capture_output=True)
                theirs = json.load(open(out))["generated"]
                o = subprocess.run([a.dspark, "generate", "-m", path, "--prompt-tokens", toks, "-n", str(a.n), "--ignore-eos", "--json",
                                    "-t", a.threads, "--attention", a.attention], check=True, capture_output=True, text=True)
                ours = json.loads(o.stdout)["tokens"]
                k = next((i for i, (x, y) in enumerate(zip(ours, theirs)) if x != y), min(len(ours), len(theirs)))
                agree.append(k)
                total += 1
                same += k == a.n
            print(f"{name:20s} tokens agreeing before the first difference: {agree}")
    print(f"identical: {same}/{total}")


if __name__ == "__main__":
    main()

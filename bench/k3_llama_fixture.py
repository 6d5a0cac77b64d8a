#!/usr/bin/env python3
"""k3_llama_fixture.py — llama.cpp's greedy steps on the Kimi K3 target `dspark synth`
writes, as the JSON fixture the CLI tests hold dspark to bit for bit
(crates/cli/testdata/kimi_k3/k3-tiny-greedy.json).

Usage:  bench/k3_llama_fixture.py DSPARK SEED OUT.json [LLAMA_DUMP]

Runs `DSPARK synth --geometry kimi-k3-tiny --seed SEED`, then bench/llama_dump (build it
with bench/llama_dump.sh) on its target.gguf with llama.cpp's CPU defaults and 2 threads
(flash attention auto: on; F16 cache; the prompt as one batch, only its last row's logits
asked for, as llama-completion asks; then one token per decode) for three prompts: 12
tokens (the one-chunk flash attention), 70 (its tiled kernel for the prompt) and 300
(decode steps past 256 cells: its split-KV path, two chunks on 2 threads). Writes each
prompt's 16 greedy tokens and each step's top logit as f32 bits, with the target's
SHA-256, so a test can tell a changed synthetic file from a changed forward.
"""

import hashlib
import json
import pathlib
import random
import struct
import subprocess
import sys
import tempfile


def main() -> None:
    dspark, seed, out_path = sys.argv[1:4]
    tool = sys.argv[4] if len(sys.argv) > 4 else "/tmp/llama_dump"
    rng = random.Random(int(seed))
    with tempfile.TemporaryDirectory() as d:
        pair = pathlib.Path(d) / "pair"
        subprocess.run([dspark, "synth", "--geometry", "kimi-k3-tiny", "--seed", seed, "--out", str(pair), "-q"],
                       check=True)
        target = pair / "target.gguf"
        runs = []
        for length in (12, 70, 300):
            prompt = [rng.randrange(512) for _ in range(length)]
            out = pathlib.Path(d) / "l.json"
            subprocess.run([tool, str(target), "--tokens", ",".join(map(str, prompt)), "--greedy", "16",
                            "--gen-top", "1", "--no-logits", "--threads", "2", "--n-ctx", "4096",
                            "--out", str(out)], check=True, capture_output=True)
            dumped = json.loads(out.read_text())
            runs.append({
                "prompt": prompt,
                "tokens": dumped["generated"],
                "top_bits": [struct.unpack("<I", struct.pack("<f", top[0][1]))[0] for top in dumped["gen_top"]],
            })
        fixture = {
            "geometry": "kimi-k3-tiny",
            "seed": int(seed),
            "target_sha256": hashlib.sha256(target.read_bytes()).hexdigest(),
            "threads": 2,
            "runs": runs,
        }
    pathlib.Path(out_path).write_text(json.dumps(fixture) + "\n")


if __name__ == "__main__":
    main()

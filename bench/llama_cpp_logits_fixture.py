#!/usr/bin/env python3
"""llama_cpp_logits_fixture.py — llama.cpp's logits on a target `dspark synth` writes, as the
JSON fixture the CLI tests compare dspark's F16 attention with
(crates/cli/testdata/llama/llama-tiny-options-logits.json).

Usage:  bench/llama_cpp_logits_fixture.py DSPARK GEOMETRY SEED TOKENS OUT.json [LLAMA_DUMP]

Runs `DSPARK synth --geometry GEOMETRY --seed SEED` into a temporary folder, then
bench/llama_dump (build it with bench/llama_dump.sh) on its target.gguf with llama.cpp's
CPU defaults (`--tokens TOKENS --threads 2`: flash attention auto, which is on for the CPU,
F16 K/V cache, weight repacking on; the whole prompt as one batch), and writes the logits of
every position (8 significant digits) with the target's SHA-256, so a test can tell a
changed synthetic file from a changed forward. LLAMA_DUMP defaults to /tmp/llama_dump.
"""

import hashlib
import json
import pathlib
import subprocess
import sys
import tempfile


def main() -> None:
    dspark, geometry, seed, tokens, out_path = sys.argv[1:6]
    tool = sys.argv[6] if len(sys.argv) > 6 else "/tmp/llama_dump"
    with tempfile.TemporaryDirectory() as d:
        pair = pathlib.Path(d) / "pair"
        subprocess.run([dspark, "synth", "--geometry", geometry, "--seed", seed, "--out", str(pair), "-q"], check=True)
        target = pair / "target.gguf"
        out = pathlib.Path(d) / "dump.json"
        subprocess.run([tool, str(target), "--tokens", tokens, "--threads", "2", "--out", str(out)], check=True,
                       capture_output=True)
        run = json.loads(out.read_text())
        sha = hashlib.sha256(target.read_bytes()).hexdigest()
    assert run["flash_attn"] and run["type_k"] == "f16", (run["flash_attn"], run["type_k"])
    doc = {
        "about": ("llama.cpp's logits (bench/llama_cpp_logits_fixture.py): bench/llama_dump TARGET --tokens TOKENS "
                  "--threads 2 on the target `dspark synth` writes, with llama.cpp's CPU defaults (flash attention "
                  "on, F16 K/V cache), the prompt as one batch. llama.cpp as vendored in llama-cpp-python 0.3.36 "
                  "(MIT), built for this x86-64 CPU."),
        "geometry": geometry,
        "seed": int(seed),
        "target_sha256": sha,
        "tokens": [int(t) for t in tokens.split(",")],
        "logits": [[float(f"{v:.8g}") for v in row] for row in run["logits"]],
    }
    pathlib.Path(out_path).write_text(json.dumps(doc, separators=(",", ":")) + "\n")
    print(f"{out_path}: {len(doc['logits'])} positions of {len(doc['logits'][0])} logits", file=sys.stderr)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""smollm2_greedy_fixture.py — llama.cpp's greedy continuations of chat prompts on a model,
as the JSON fixture the CLI tests compare `dspark generate` with
(crates/cli/testdata/llama/smollm2-greedy.json).

Usage:  bench/smollm2_greedy_fixture.py MODEL.gguf OUT.json [N] [LLAMA_BIN] [LLAMA_DUMP]

Each prompt is a user message in the ChatML form SmolLM2's chat template renders (with its
default system message):

    <|im_start|>system\\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\\n
    <|im_start|>user\\n{message}<|im_end|>\\n<|im_start|>assistant\\n

tokenized by `llama-tokenize -m MODEL -f FILE --ids --no-escape --log-disable` (its defaults:
BOS as the vocabulary says, special tokens parsed), then continued for N (default 32) tokens
by bench/llama_dump (build it with bench/llama_dump.sh): `llama_dump MODEL --tokens IDS
--greedy N --threads 2`, i.e. llama.cpp's CPU backend with its defaults (flash attention
auto, which is on for the CPU, F16 K/V cache, weight repacking on), pure argmax, one token
per decode, not stopping at end-of-generation tokens. `margins` are each generated token's
lead over the runner-up in llama.cpp's logits of the whole sequence evaluated again as one
batch (close to, not the same bits as, the token-by-token run): how near a tie each step was.
LLAMA_BIN defaults to /tmp/llamacpp/build/bin, LLAMA_DUMP to /tmp/llama_dump.
"""

import hashlib
import json
import pathlib
import subprocess
import sys
import tempfile

SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
MESSAGES = [
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "Explain what a hash map is in one sentence.",
    "List three primary colors.",
    "Translate 'good morning' into Spanish.",
    "What is 12 times 7?",
    "Write a Python function that returns the square of a number.",
    "Give me one tip for sleeping better.",
]


def chat(message: str) -> str:
    return (f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n{message}<|im_end|>\n"
            "<|im_start|>assistant\n")


def tokenize(bin_dir: str, model: str, text: str) -> list[int]:
    with tempfile.NamedTemporaryFile("wb", suffix=".txt") as f:
        f.write(text.encode("utf-8"))
        f.flush()
        out = subprocess.run([f"{bin_dir}/llama-tokenize", "-m", model, "-f", f.name, "--ids", "--no-escape",
                              "--log-disable"], check=True, capture_output=True).stdout.decode()
    return json.loads(out.strip().splitlines()[-1])


def dump(tool: str, model: str, tokens: list[int], extra: list[str]) -> dict:
    with tempfile.TemporaryDirectory() as d:
        out = pathlib.Path(d) / "out.json"
        subprocess.run([tool, model, "--tokens", ",".join(map(str, tokens)), "--threads", "2", *extra,
                        "--out", str(out)], check=True, capture_output=True)
        return json.loads(out.read_text())


def main() -> None:
    model, out_path = sys.argv[1:3]
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 32
    bin_dir = sys.argv[4] if len(sys.argv) > 4 else "/tmp/llamacpp/build/bin"
    tool = sys.argv[5] if len(sys.argv) > 5 else "/tmp/llama_dump"
    cases = []
    for m in MESSAGES:
        text = chat(m)
        ids = tokenize(bin_dir, model, text)
        run = dump(tool, model, ids, ["--greedy", str(n)])
        assert run["flash_attn"] and run["type_k"] == "f16", run["flash_attn"]
        gen = run["generated"]
        again = dump(tool, model, ids + gen[:-1], [])["logits"][len(ids) - 1:]
        margins = []
        for row, tok in zip(again, gen):
            top = sorted(row, reverse=True)
            margins.append(round(row[tok] - (top[1] if row[tok] == top[0] else top[0]), 4))
        cases.append({"message": m, "prompt": text, "prompt_tokens": ids, "greedy": gen, "margins": margins})
        print(f"{m!r}: {len(ids)} prompt tokens, smallest margin {min(margins)}", file=sys.stderr)
    doc = {
        "about": ("llama.cpp's greedy continuations (bench/smollm2_greedy_fixture.py): llama-tokenize's ids of "
                  "each ChatML prompt, then bench/llama_dump --tokens IDS --greedy N --threads 2 (CPU, flash "
                  "attention auto = on, F16 K/V cache, repacking on, argmax per decode, not stopping at "
                  "end-of-generation). llama.cpp as vendored in llama-cpp-python 0.3.36 (MIT), built for this "
                  "x86-64 CPU. margins: each token's lead in a batched re-evaluation."),
        "model": pathlib.Path(model).name,
        "model_sha256": hashlib.sha256(pathlib.Path(model).read_bytes()).hexdigest(),
        "tokens": n,
        "cases": cases,
    }
    pathlib.Path(out_path).write_text(json.dumps(doc, ensure_ascii=False, indent=1) + "\n")
    print(f"{out_path}: {len(cases)} prompts", file=sys.stderr)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""tokenizer_fixture.py — the ids llama.cpp's `llama-tokenize` gives texts, as a JSON
Lines fixture for the runtime's tokenizer tests (crates/runtime/tests/data/tokenizer/).

Usage:  bench/tokenizer_fixture.py MODEL.gguf TEXTS.json OUT.jsonl [LLAMA_BIN]

TEXTS.json is a JSON list of strings. Each text is written to a file and tokenized with
`llama-tokenize -m MODEL -f FILE --ids --no-escape --log-disable`, so with llama-tokenize's
defaults (BOS as the vocabulary says, special tokens parsed), then again with `--no-bos
--no-parse-special`; each output line is {"text", "ids", "ids_plain"}. LLAMA_BIN defaults
to /tmp/llamacpp/build/bin.
"""

import json
import pathlib
import subprocess
import sys
import tempfile


def ids(bin_dir: str, model: str, path: str, extra: list[str]) -> list[int]:
    out = subprocess.run(
        [f"{bin_dir}/llama-tokenize", "-m", model, "-f", path, "--ids", "--no-escape", "--log-disable", *extra],
        check=True,
        capture_output=True,
    ).stdout.decode()
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    model, texts_path, out_path = sys.argv[1:4]
    bin_dir = sys.argv[4] if len(sys.argv) > 4 else "/tmp/llamacpp/build/bin"
    texts = json.loads(pathlib.Path(texts_path).read_text())
    with tempfile.TemporaryDirectory() as d, open(out_path, "w") as out:
        f = pathlib.Path(d) / "text"
        for t in texts:
            f.write_bytes(t.encode("utf-8"))
            row = {
                "text": t,
                "ids": ids(bin_dir, model, str(f), []),
                "ids_plain": ids(bin_dir, model, str(f), ["--no-bos", "--no-parse-special"]),
            }
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(f"{out_path}: {len(texts)} texts")


if __name__ == "__main__":
    main()

"""Step 8b - llama.cpp's greedy text on the committed target, as a fixture for CI.

Writes examples/code-pair/llama-greedy.jsonl: for the first 12 held-out prompts, the
text llama.cpp's `llama-completion` (greedy) continues it with, and how many characters of
it this repo's `dspark generate` (plain decoding, 64 tokens) reproduces. CI
(crates/cli/tests/code_pair) holds dspark to those prefixes, so a change in the runtime's
numerics that flips a token shows up. Where dspark stops agreeing early, the top-2 logit
margin at that token (transformers with the GGUF's dequantized weights) is recorded: a
near-tie, which any change of summation order may flip.

Needs llama.cpp's tools ($LLAMACPP/build/bin) and a built dspark (target/release/dspark).
"""
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from common import EXAMPLE_DIR, REPO, TARGET_DIR, load_tokenizer, log, setup_torch
from export import gguf_weights_model, llama_greedy

N_PROMPTS = 12
N_TOKENS = 64


def dspark_greedy(binary: Path, gguf: Path, prompt_file: Path):
    o = subprocess.run([str(binary), "generate", "-m", str(gguf), "-f", str(prompt_file), "-n", str(N_TOKENS),
                        "--ignore-eos", "--json", "-t", "1"], capture_output=True, check=True)
    return json.loads(o.stdout)


def main():
    binary = REPO / "target" / "release" / "dspark"
    gguf = EXAMPLE_DIR / "target.gguf"
    prompts = [json.loads(l)["prompt"] for l in (EXAMPLE_DIR / "heldout.jsonl").read_text().splitlines() if l.strip()]
    torch = setup_torch()
    tok = load_tokenizer()
    q8 = None
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for i, p in enumerate(prompts[:N_PROMPTS]):
            # llama-completion prints n-1..n+1 of its -n tokens: ask for more than dspark makes.
            text = llama_greedy(gguf, p, N_TOKENS + 3, tmp)
            pf = tmp / "p.txt"
            pf.write_text(p)
            d = dspark_greedy(binary, gguf, pf)
            ours = d["text"]
            agree = next((k for k in range(min(len(ours), len(text))) if ours[k] != text[k]), len(ours))
            row = {"index": i, "prompt": p, "llama_text": text, "dspark_agrees_chars": agree,
                   "dspark_chars": len(ours)}
            if agree < len(ours):
                if q8 is None:
                    q8, _ = gguf_weights_model(gguf, TARGET_DIR)
                    q8.eval()
                # the first of dspark's tokens whose decoded prefix leaves llama.cpp's text
                pos = next(k for k in range(len(d["tokens"]))
                           if not text.startswith(tok.decode(d["tokens"][:k + 1])))
                n_p = len(d["prompt_tokens"])
                with torch.no_grad():
                    logits = q8(torch.tensor([d["prompt_tokens"] + d["tokens"]])).logits[0]
                top = torch.topk(logits[n_p - 1 + pos], 2)
                row["near_tie"] = {"token": pos, "top2_margin": float(top.values[0] - top.values[1])}
            rows.append(row)
            log(f"prompt {i}: dspark agrees with llama.cpp on {agree}/{len(ours)} chars {row.get('near_tie', '')}")
    out = EXAMPLE_DIR / "llama-greedy.jsonl"
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    log(f"wrote {out}")


if __name__ == "__main__":
    sys.exit(main())

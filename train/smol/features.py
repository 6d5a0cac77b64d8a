"""The frozen target's features for every training conversation, computed once.

For each conversation of WORK/convs.jsonl (prompt tokens + the target's response) the HF
target (hf_target.py) runs under bf16 autocast (AVX512-BF16: 5x fp32's speed here) and we
keep, as bf16, the outputs of the CAPTURE layers concatenated (what the drafter reads; pre
final norm) and the post-norm last hidden state (SpecForge's `target_last_hidden_states`,
the L1 / confidence targets). One flat memmap per kind plus an index:
WORK/features/{feats,last}.u16, index.json [{offset, len, prompt_len}] in convs order.

Usage: features.py [--convs FILE] [--out DIR] [--tokens-per-batch N]
"""
import argparse
import json
import sys
import time

import numpy as np

from paths import CAPTURE, CONVS, FEATS, HF_DIR, log, read_jsonl, setup_torch, write_json

torch = setup_torch()
from transformers import LlamaForCausalLM  # noqa: E402


def bf16_bits(x):
    """fp32 tensor -> bf16 bit patterns (uint16, round to nearest even, as torch does)."""
    return x.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--convs", default=str(CONVS))
    ap.add_argument("--out", default=str(FEATS))
    ap.add_argument("--tokens-per-batch", type=int, default=4096)
    args = ap.parse_args()
    from pathlib import Path
    out = Path(args.out)
    if (out / "index.json").exists():
        log(f"{out} exists; skipping")
        return
    out.mkdir(parents=True, exist_ok=True)
    convs = read_jsonl(args.convs)
    seqs = [c["prompt_tokens"] + c["tokens"] for c in convs]
    offsets = np.cumsum([0] + [len(s) for s in seqs])
    total = int(offsets[-1])
    model = LlamaForCausalLM.from_pretrained(HF_DIR, dtype=torch.float32).eval()
    hidden = model.config.hidden_size
    feats = np.lib.format.open_memmap(out / "feats.tmp.npy", "w+", np.uint16, (total, hidden * len(CAPTURE)))
    last = np.lib.format.open_memmap(out / "last.tmp.npy", "w+", np.uint16, (total, hidden))
    order = sorted(range(len(seqs)), key=lambda i: len(seqs[i]))
    t0, done, i = time.time(), 0, 0
    while i < len(order):
        L = len(seqs[order[i]])
        j = i
        while j < len(order) and (j - i + 1) * len(seqs[order[j]]) <= args.tokens_per_batch:
            j += 1
        j = max(j, i + 1)
        batch = order[i:j]
        L = max(len(seqs[k]) for k in batch)
        ids = torch.zeros(len(batch), L, dtype=torch.long)
        mask = torch.zeros(len(batch), L, dtype=torch.long)
        for r, k in enumerate(batch):
            ids[r, : len(seqs[k])] = torch.tensor(seqs[k])
            mask[r, : len(seqs[k])] = 1
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            o = model.model(input_ids=ids, attention_mask=mask, output_hidden_states=True)
        f = torch.cat([o.hidden_states[c + 1] for c in CAPTURE], dim=-1).float()
        h = o.last_hidden_state.float()
        for r, k in enumerate(batch):
            n = len(seqs[k])
            feats[offsets[k]: offsets[k] + n] = bf16_bits(f[r, :n])
            last[offsets[k]: offsets[k] + n] = bf16_bits(h[r, :n])
            done += n
        i = j
        if len(batch) and (i // len(batch)) % 20 == 0:
            log(f"features: {done}/{total} tokens, {time.time()-t0:.0f} s")
    feats.flush()
    last.flush()
    del feats, last
    (out / "feats.tmp.npy").rename(out / "feats.npy")
    (out / "last.tmp.npy").rename(out / "last.npy")
    index = [{"offset": int(offsets[k]), "len": len(seqs[k]), "prompt_len": len(convs[k]["prompt_tokens"])}
             for k in range(len(seqs))]
    write_json(out / "index.json", {"capture": CAPTURE, "hidden": hidden, "tokens": total,
                                    "seconds": time.time() - t0, "seqs": index})
    log(f"features: {total} tokens of {len(seqs)} conversations in {time.time()-t0:.0f} s -> {out}")


if __name__ == "__main__":
    sys.exit(main())

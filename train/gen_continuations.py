"""Step 4 - drafter data: greedy continuations of the FROZEN target.

Real prefixes are cut from random offsets of random training-split files
(prefix length drawn per batch from [--min-prefix, --max-prefix] tokens so a
batch needs no padding); the target continues each one greedily (KV cache,
batched, fp32) for --gen tokens.  Shards are cached in WORK/continuations/ as
cont_NNNN.npz {tokens [n, P+G] int16, prefix_len}; existing shards are skipped,
so reruns only generate what is missing.
"""
import argparse
import json
import sys
import time

from common import CONT_DIR, CORPUS, SEED, TARGET_DIR, WORK, load_tokenizer, log, setup_torch, special_ids

torch = setup_torch()
import numpy as np  # noqa: E402
from transformers import DynamicCache, Qwen3ForCausalLM  # noqa: E402


def load_docs(split, tok, min_len):
    docs = []
    with open(CORPUS / f"{split}.jsonl") as f:
        for line in f:
            ids = tok.encode(json.loads(line)["text"]).ids
            if len(ids) >= min_len:
                docs.append(np.asarray(ids, dtype=np.int64))
    return docs


@torch.inference_mode()
def greedy(model, prefix, n_new):
    """prefix [b, P] -> [b, n_new] greedy tokens (KV-cached)."""
    cache = DynamicCache()
    out = model(input_ids=prefix, past_key_values=cache, use_cache=True, logits_to_keep=1)
    nxt = out.logits[:, -1].argmax(-1)
    toks = [nxt]
    for _ in range(n_new - 1):
        out = model(input_ids=nxt[:, None], past_key_values=cache, use_cache=True)
        nxt = out.logits[:, -1].argmax(-1)
        toks.append(nxt)
    return torch.stack(toks, 1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shards", type=int, default=96)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--min-prefix", type=int, default=32)
    ap.add_argument("--max-prefix", type=int, default=384)
    ap.add_argument("--gen", type=int, default=160)
    args = ap.parse_args()
    CONT_DIR.mkdir(parents=True, exist_ok=True)
    tok = load_tokenizer()
    eot, _ = special_ids(tok)
    model = Qwen3ForCausalLM.from_pretrained(TARGET_DIR, dtype=torch.float32).eval()
    docs = load_docs("train", tok, args.min_prefix + 1)
    weights = np.asarray([len(d) for d in docs], dtype=np.float64)
    weights /= weights.sum()
    t0 = time.time()
    made = 0
    for shard in range(args.shards):
        path = CONT_DIR / f"cont_{shard:04d}.npz"
        rng = np.random.default_rng(SEED * 1000 + shard)  # per-shard: skipping keeps the rest identical
        plen = int(rng.integers(args.min_prefix, args.max_prefix + 1))
        if path.exists():
            continue
        rows = []
        for _ in range(args.batch):
            while True:
                d = docs[rng.choice(len(docs), p=weights)]
                if len(d) > plen:
                    break
            s = int(rng.integers(0, len(d) - plen + 1))
            rows.append(d[s:s + plen])
        prefix = torch.from_numpy(np.stack(rows))
        gen = greedy(model, prefix, args.gen)
        tokens = torch.cat([prefix, gen], 1).numpy().astype(np.int16)
        np.savez(path, tokens=tokens, prefix_len=np.int64(plen))
        made += 1
        el = time.time() - t0
        log(f"shard {shard}: prefix {plen}, {made * args.batch * args.gen / el:.0f} generated tok/s, "
            f"{el / 60:.1f} min; sample: {tok.decode(gen[0, :40].tolist())!r}", WORK / "gen.log")
    log(f"continuations: {args.shards} shards in {CONT_DIR} ({made} new, {(time.time() - t0) / 60:.1f} min)", WORK / "gen.log")


if __name__ == "__main__":
    sys.exit(main())

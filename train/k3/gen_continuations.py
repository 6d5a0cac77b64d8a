"""Step 4 - drafter data: greedy continuations of the FROZEN, exported target (the GGUF's dequantized
weights in PyTorch, float32, KDA state and MLA cache carried token by token).

Real prefixes are cut from random offsets of random training-split files (prefix length drawn per shard from
[--min-prefix, --max-prefix] so a shard needs no padding); the target continues each greedily for --gen
tokens. Shards WORK/continuations/cont_NNNN.npz {tokens [n, P+G] int16, prefix_len}; existing shards are
skipped, so a rerun only generates what is missing (and an interrupted run resumes).
"""
import argparse
import json
import sys
import time

from k3common import CONT_DIR, CORPUS, SEED, WORK, load_tokenizer, log, setup_torch

torch = setup_torch()
import numpy as np  # noqa: E402

from dequant_target import load_exported  # noqa: E402


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
    """prefix [b, P] -> [b, n_new] greedy tokens, with carried state."""
    st = model.new_state(prefix.shape[0])
    logits = model(prefix, state=st)[0]
    nxt = logits[:, -1].argmax(-1)
    toks = [nxt]
    for _ in range(n_new - 1):
        nxt = model(nxt[:, None], state=st, chunked=False)[0][:, -1].argmax(-1)
        toks.append(nxt)
    return torch.stack(toks, 1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shards", type=int, default=64)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--min-prefix", type=int, default=32)
    ap.add_argument("--max-prefix", type=int, default=384)
    ap.add_argument("--gen", type=int, default=160)
    args = ap.parse_args()
    CONT_DIR.mkdir(parents=True, exist_ok=True)
    tok = load_tokenizer()
    model = load_exported()
    docs = load_docs("train", tok, args.min_prefix + 1)
    weights = np.asarray([len(d) for d in docs], dtype=np.float64)
    weights /= weights.sum()
    t0 = time.time()
    made = 0
    for shard in range(args.shards):
        path = CONT_DIR / f"cont_{shard:04d}.npz"
        rng = np.random.default_rng(SEED * 1000 + shard)  # per shard: skipping keeps the rest identical
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
        tmp = path.with_suffix(".tmp.npz")
        np.savez(tmp, tokens=tokens, prefix_len=np.int64(plen))
        tmp.rename(path)
        made += 1
        el = time.time() - t0
        log(f"shard {shard}: prefix {plen}, {made * args.batch * args.gen / el:.0f} generated tok/s, "
            f"{el / 60:.1f} min; sample: {tok.decode(gen[0, :40].tolist())!r}", WORK / "gen.log")
    log(f"continuations: {args.shards} shards in {CONT_DIR} ({made} new, {(time.time() - t0) / 60:.1f} min)",
        WORK / "gen.log")


if __name__ == "__main__":
    sys.exit(main())

"""Training conversations by self-synthesis (Magpie-style), all from the target itself.

1. User turns: the chat template rendered up to where a user's text would start (SmolLM2's
   template puts its default system message first: `<|im_start|>system ... <|im_end|>\n
   <|im_start|>user\n`), continued by the target at T = 1 (no top-k / top-p / min-p) until
   its `<|im_end|>`, one seed per candidate. Kept: finished turns (end-of-turn reached) of
   12-600 characters with no chat markup, deduplicated on their first 48 lower-cased
   alphanumeric characters, mostly letters (>= 80 %), at most 6 line breaks, no
   4-space runs. A turn is held out (never trained on) when sha256(text) % 16 == 0.
2. Responses: the kept training turns rendered as a conversation and answered by the target,
   greedy for even indices and T = 0.7 (seeded) for odd ones, at most 256 tokens.
3. The held-out turns answered greedily (WORK/heldout_convs.jsonl): validation only.

Everything runs `dspark generate --json` on the GGUF (plain decoding; dspark's greedy equals
llama.cpp's, docs/PERFORMANCE.md), WORKERS processes of one thread each. Both stages append
to their JSONL as they go and skip finished indices when rerun.

Usage: synth.py [--candidates N] [--workers W] [--max-response N]
"""
import argparse
import hashlib
import json
import os
import re
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

from paths import CONVS, HELDOUT_CONVS, EXAMPLE, USERS, WORK, dspark_generate, log, read_jsonl

LOG = WORK / "synth.log"
END_OF_TURN = 2  # <|im_end|>, the GGUF's eos


def user_prefix():
    """Token ids of the template rendered up to a user's text (checked, not assumed)."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump([{"role": "user", "content": ""}], f)
    r = dspark_generate(["--messages", f.name, "-n", "1", "--chat-date", "2026-12-03"])
    os.unlink(f.name)
    ids, text = r["prompt_tokens"], r["chat_prompt"]
    tail = "<|im_end|>\n<|im_start|>assistant\n"
    assert text.endswith("<|im_start|>user\n" + tail), text
    # the rendering of an empty user text = prefix + tail; the tail is 6 tokens here
    assert ids[-6:] == [2, 198, 1, 520, 9531, 198], ids
    prefix = ids[:-6]
    assert prefix[-3:] == [1, 4093, 198], prefix
    return prefix, text[: -len(tail)]


def key(text):
    return re.sub(r"[^a-z0-9]+", "", text.lower())[:48]


def is_clean(text):
    """Finished prose: 12-600 characters, no chat markup, mostly letters, few line breaks."""
    t = text.strip()
    if not 12 <= len(t) <= 600 or "<|" in t or t.count("\n") > 6 or "    " in t:
        return False
    return sum(c.isalpha() or c == " " for c in t) >= 0.8 * len(t)


def gen_user(prefix, i):
    r = dspark_generate(["--prompt-tokens", ",".join(map(str, prefix)), "--temp", "1",
                         "--seed", str(i), "-n", "128"])
    done = r["stats"]["stop_reason"] == "eos"
    text = r["text"].removesuffix("<|im_end|>").strip()
    return {"i": i, "text": text, "finished": done, "tokens": len(r["tokens"])}


def gen_response(conv):
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump({"messages": conv["messages"]}, f)
    sampled = conv["i"] % 2 == 1
    args = ["--messages", f.name, "-n", str(conv["max"]), "--chat-date", "2026-12-03"]
    if sampled:
        args += ["--temp", "0.7", "--seed", str(conv["i"])]
    try:
        r = dspark_generate(args)
    finally:
        os.unlink(f.name)
    return {"i": conv["i"], "messages": conv["messages"], "temp": 0.7 if sampled else 0.0,
            "prompt_tokens": r["prompt_tokens"], "tokens": r["tokens"], "text": r["text"],
            "stop": r["stats"]["stop_reason"]}


def run_pool(fn, items, out_path, workers, what):
    done = {x["i"] for x in read_jsonl(out_path)} if out_path.exists() else set()
    todo = [x for x in items if (x if isinstance(x, int) else x["i"]) not in done]
    log(f"{what}: {len(done)} done, {len(todo)} to go", LOG)
    n = 0
    with ThreadPoolExecutor(workers) as ex, open(out_path, "a") as out:
        for res in ex.map(fn, todo):
            out.write(json.dumps(res) + "\n")
            out.flush()
            n += 1
            if n % 200 == 0:
                log(f"{what}: {n}/{len(todo)}", LOG)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--candidates", type=int, default=3200)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--max-response", type=int, default=256)
    args = ap.parse_args()
    WORK.mkdir(parents=True, exist_ok=True)

    prefix, prefix_text = user_prefix()
    log(f"user prefix: {len(prefix)} tokens {prefix_text!r}", LOG)
    run_pool(lambda i: gen_user(prefix, i), list(range(args.candidates)), USERS, args.workers, "user turns")

    users = sorted(read_jsonl(USERS), key=lambda x: x["i"])
    seen, kept = set(), []
    for u in users:
        if not u["finished"] or not is_clean(u["text"]):
            continue
        k = key(u["text"])
        if len(k) < 8 or k in seen:
            continue
        seen.add(k)
        kept.append(u)
    held = [u for u in kept if int(hashlib.sha256(u["text"].encode()).hexdigest(), 16) % 16 == 0]
    train = [u for u in kept if u not in held]
    log(f"user turns: {len(users)} sampled, {sum(u['finished'] for u in users)} finished, "
        f"{len(kept)} kept after filter + dedup, {len(held)} held out, {len(train)} for training", LOG)
    EXAMPLE.mkdir(parents=True, exist_ok=True)
    with open(EXAMPLE / "heldout.jsonl", "w") as f:
        for u in held:
            f.write(json.dumps({"messages": [{"role": "user", "content": u["text"]}]}) + "\n")
    convs = [{"i": u["i"], "max": args.max_response,
              "messages": [{"role": "user", "content": u["text"]}]} for u in train]
    run_pool(gen_response, convs, CONVS, args.workers, "responses")
    # the held-out turns answered greedily, for validation only (never trained on)
    hconvs = [{"i": u["i"] * 2, "max": args.max_response,
               "messages": [{"role": "user", "content": u["text"]}]} for u in held]
    run_pool(gen_response, hconvs, HELDOUT_CONVS, args.workers, "held-out responses")
    rs = read_jsonl(CONVS)
    log(f"responses: {len(rs)}, {sum(len(r['tokens']) for r in rs)} response tokens, "
        f"{sum(len(r['prompt_tokens']) for r in rs)} prompt tokens, "
        f"{sum(r['stop'] == 'eos' for r in rs)} ended by the target", LOG)


if __name__ == "__main__":
    sys.exit(main())

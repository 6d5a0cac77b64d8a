"""Step 3 - target: a small transformers Qwen3ForCausalLM trained from scratch
on the train split (AdamW, linear warm-up + cosine decay, random 512-token
windows of the document stream, documents separated by <|endoftext|>).

Reports train and held-out loss in nats/token.  Writes WORK/target/ (HF folder).
"""
import argparse
import json
import math
import sys
import time

from common import cosine_lr, CORPUS, SEED, TARGET_DIR, WORK, load_tokenizer, log, setup_torch, special_ids

torch = setup_torch()
import numpy as np  # noqa: E402
from transformers import Qwen3Config, Qwen3ForCausalLM  # noqa: E402

import os
AUTOCAST = os.environ.get("TARGET_BF16", "0") == "1"
LOG = WORK / "target_train.log"


def target_config(vocab, eot):
    return Qwen3Config(
        vocab_size=vocab,
        hidden_size=256,
        intermediate_size=768,
        num_hidden_layers=6,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        max_position_embeddings=2048,
        rope_theta=10000.0,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
        attention_bias=False,
        bos_token_id=eot,
        eos_token_id=eot,
        pad_token_id=eot,
        use_cache=True,
    )


def token_stream(split, tok, eot):
    ids = []
    with open(CORPUS / f"{split}.jsonl") as f:
        for line in f:
            ids.extend(tok.encode(json.loads(line)["text"]).ids)
            ids.append(eot)
    return np.asarray(ids, dtype=np.int64)


@torch.no_grad()
def heldout_loss(model, data, seq, max_windows=None):
    model.eval()
    n = (len(data) - 1) // seq
    if max_windows:
        n = min(n, max_windows)
    tot = cnt = 0.0
    for b in range(0, n, 16):
        idx = range(b, min(n, b + 16))
        x = torch.from_numpy(np.stack([data[i * seq:(i + 1) * seq + 1] for i in idx]))
        logits = model(input_ids=x[:, :-1]).logits
        loss = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]).float(), x[:, 1:].reshape(-1), reduction="sum")
        tot += loss.item()
        cnt += x[:, 1:].numel()
    model.train()
    return tot / cnt


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=1400)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--eval-every", type=int, default=200)
    ap.add_argument("--bench", type=int, default=0, help="time N steps and exit")
    args = ap.parse_args()

    tok = load_tokenizer()
    eot, _ = special_ids(tok)
    train = token_stream("train", tok, eot)
    held = token_stream("heldout", tok, eot)
    log(f"target: train {len(train)} tokens, heldout {len(held)} tokens", LOG)

    torch.manual_seed(SEED)
    cfg = target_config(tok.get_vocab_size(), eot)
    model = Qwen3ForCausalLM(cfg)
    model.train()
    n_params = sum(p.numel() for p in model.parameters())
    log(f"target: {n_params/1e6:.2f}M params, steps {args.steps} x batch {args.batch} x seq {args.seq} "
        f"= {args.steps*args.batch*args.seq/len(train):.2f} epochs", LOG)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8)

    def lr_at(step):
        return cosine_lr(step, args.lr, args.warmup, args.steps)

    rng = np.random.default_rng(SEED)
    t0 = time.time()
    ema = None
    steps = args.bench or args.steps
    for step in range(steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        starts = rng.integers(0, len(train) - args.seq - 1, size=args.batch)
        x = torch.from_numpy(np.stack([train[s:s + args.seq + 1] for s in starts]))
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=AUTOCAST):
            logits = model(input_ids=x[:, :-1]).logits
        loss = torch.nn.functional.cross_entropy(
            logits.float().reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        ema = loss.item() if ema is None else 0.98 * ema + 0.02 * loss.item()
        if args.bench:
            if step in (2, steps - 1):
                el = time.time() - t0
                log(f"bench step {step}: {el:.1f}s")
            continue
        if (step + 1) % 50 == 0:
            el = time.time() - t0
            log(f"step {step+1}/{steps} loss {loss.item():.4f} ema {ema:.4f} lr {lr_at(step):.2e} "
                f"{el/60:.1f} min {(step+1)*args.batch*args.seq/el:.0f} tok/s", LOG)
        if (step + 1) % args.eval_every == 0 or step + 1 == steps:
            hl = heldout_loss(model, held, args.seq, max_windows=64 if step + 1 < steps else None)
            log(f"step {step+1}: heldout loss {hl:.4f} nats/token", LOG)
            TARGET_DIR.mkdir(parents=True, exist_ok=True)
            model.save_pretrained(TARGET_DIR)
    if args.bench:
        return
    el = time.time() - t0
    tl = heldout_loss(model, train[: len(held) + 1], args.seq)
    hl = heldout_loss(model, held, args.seq)
    model.save_pretrained(TARGET_DIR)
    tok.save(str(TARGET_DIR / "tokenizer.json"))
    summary = {"train_loss_nats": tl, "heldout_loss_nats": hl, "wall_minutes": el / 60,
               "steps": args.steps, "batch": args.batch, "seq": args.seq, "lr": args.lr,
               "params": n_params, "train_tokens": int(len(train))}
    (TARGET_DIR / "train_summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    log(f"target done: train loss {tl:.4f}, heldout loss {hl:.4f} nats/token, {el/60:.1f} min", LOG)


if __name__ == "__main__":
    sys.exit(main())

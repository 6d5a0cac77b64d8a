"""Step 2 - the K3 target (model.py) trained from scratch on the CPython stdlib train split with the code
pair's tokenizer: AdamW, linear warm-up + cosine decay, random windows of the document stream (documents
separated by <|endoftext|>), fp32, the routing bias balanced without gradients (update_routing_bias).

Resumable: a checkpoint (model, optimizer, data RNG, step) is written atomically every --ckpt-every steps to
WORK/target/ckpt.pt and picked up on restart; SIGTERM writes one and exits. When done: WORK/target/model.pt
and train_summary.json (train and held-out loss in nats/token).

  K3_WORK=/tmp/train/k3work nice -n 19 python train/k3/train_target.py [--steps N]
"""
import argparse
import json
import signal
import sys
import time

from k3common import CORPUS, SEED, TARGET_DIR, WORK, cosine_lr, load_tokenizer, log, save_atomic, setup_torch, special_ids

torch = setup_torch()
import numpy as np  # noqa: E402

from model import K3Config, KimiK3  # noqa: E402

LOG = WORK / "target_train.log"


def token_stream(split, tok, eot):
    cache = WORK / f"tokens_{split}.npy"
    if cache.exists():
        return np.load(cache)
    ids = []
    with open(CORPUS / f"{split}.jsonl") as f:
        for line in f:
            ids.extend(tok.encode(json.loads(line)["text"]).ids)
            ids.append(eot)
    a = np.asarray(ids, dtype=np.int16)
    np.save(cache, a)
    return a


@torch.no_grad()
def heldout_loss(model, data, seq, max_windows=None):
    model.eval()
    n = (len(data) - 1) // seq
    if max_windows:
        n = min(n, max_windows)
    tot = cnt = 0.0
    for b in range(0, n, 8):
        idx = range(b, min(n, b + 8))
        x = torch.from_numpy(np.stack([data[i * seq:(i + 1) * seq + 1] for i in idx]).astype(np.int64))
        logits = model(x[:, :-1])[0]
        tot += torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1),
                                                 reduction="sum").item()
        cnt += x[:, 1:].numel()
    model.train()
    return tot / cnt


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=60)
    ap.add_argument("--bias-rate", type=float, default=1e-3, help="routing-bias balancing step per update")
    ap.add_argument("--eval-every", type=int, default=200)
    ap.add_argument("--ckpt-every", type=int, default=50)
    ap.add_argument("--bench", type=int, default=0, help="time N steps and exit")
    args = ap.parse_args()

    tok = load_tokenizer()
    eot, _ = special_ids(tok)
    train = token_stream("train", tok, eot)
    held = token_stream("heldout", tok, eot)
    torch.manual_seed(SEED)
    cfg = K3Config(vocab=tok.get_vocab_size(), eot_id=eot)
    model = KimiK3(cfg)
    model.train()
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8)
    rng = np.random.default_rng(SEED)
    start, elapsed, ema = 0, 0.0, None
    ck_path = TARGET_DIR / "ckpt.pt"
    if ck_path.exists() and not args.bench:
        ck = torch.load(ck_path, map_location="cpu", weights_only=False)
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        rng.bit_generator.state = ck["rng"]
        start, elapsed, ema = ck["step"], ck["elapsed"], ck["ema"]
        if ck["args"]["steps"] != args.steps:
            log(f"resume: --steps {args.steps} differs from the checkpoint's {ck['args']['steps']}: new horizon", LOG)
        log(f"resumed at step {start} ({elapsed / 60:.1f} min so far)", LOG)
    n_params = sum(p.numel() for p in model.parameters())
    if start == 0:
        log(f"target: K3 {cfg.layers} layers (MLA {list(cfg.mla_layers)}), hidden {cfg.hidden}, {n_params / 1e6:.2f}M params; "
            f"train {len(train)} tokens, heldout {len(held)}; {args.steps} steps x {args.batch} x {args.seq} "
            f"= {args.steps * args.batch * args.seq / len(train):.2f} epochs", LOG)

    def checkpoint(step):
        save_atomic({"model": model.state_dict(), "opt": opt.state_dict(), "rng": rng.bit_generator.state,
                     "step": step, "elapsed": elapsed + time.time() - t0, "ema": ema, "args": vars(args),
                     "config": cfg.to_dict()}, ck_path)

    stop = {"now": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.update(now=True))
    t0 = time.time()
    steps = args.bench or args.steps
    step = start
    for step in range(start, steps):
        for g in opt.param_groups:
            g["lr"] = cosine_lr(step, args.lr, args.warmup, args.steps)
        starts = rng.integers(0, len(train) - args.seq - 1, size=args.batch)
        x = torch.from_numpy(np.stack([train[s:s + args.seq + 1] for s in starts]).astype(np.int64))
        logits = model(x[:, :-1])[0]
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        model.update_routing_bias(args.bias_rate)
        ema = loss.item() if ema is None else 0.98 * ema + 0.02 * loss.item()
        if args.bench:
            log(f"bench step {step}: {time.time() - t0:.1f}s loss {loss.item():.4f}")
            continue
        if (step + 1) % 10 == 0:
            el = elapsed + time.time() - t0
            log(f"step {step + 1}/{steps} loss {loss.item():.4f} ema {ema:.4f} lr {opt.param_groups[0]['lr']:.2e} "
                f"{el / 60:.1f} min {(step + 1 - start) * args.batch * args.seq / (time.time() - t0):.0f} tok/s", LOG)
        if (step + 1) % args.eval_every == 0 and step + 1 < steps:
            log(f"step {step + 1}: heldout loss {heldout_loss(model, held, args.seq, 32):.4f} nats/token (32 windows)", LOG)
        if (step + 1) % args.ckpt_every == 0 or stop["now"]:
            checkpoint(step + 1)
        if stop["now"]:
            log(f"SIGTERM: checkpoint at step {step + 1}, exiting", LOG)
            return 0
    if args.bench:
        return 0
    checkpoint(steps)
    el = elapsed + time.time() - t0
    hl = heldout_loss(model, held, args.seq)
    tl = heldout_loss(model, train[: len(held) + 1], args.seq)
    save_atomic({"model": model.state_dict(), "config": cfg.to_dict()}, TARGET_DIR / "model.pt")
    summary = {"train_loss_nats": tl, "heldout_loss_nats": hl, "wall_minutes": el / 60, "steps": args.steps,
               "batch": args.batch, "seq": args.seq, "lr": args.lr, "params": n_params,
               "train_tokens": int(len(train)), "heldout_tokens": int(len(held)), "config": cfg.to_dict()}
    (TARGET_DIR / "train_summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    log(f"target done: train loss {tl:.4f}, heldout loss {hl:.4f} nats/token, {el / 60:.1f} min", LOG)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The drafter: SpecForge 0.2.0's DSparkDraftModel trained with its own OnlineDSparkModel loss
(both unchanged, attention_backend="sdpa") on the features features.py stored.

Block 8; 3 Qwen3-style layers at the target's width (hidden 576, 9 heads / 3 KV heads,
head_dim 64, FFN 1536, rope theta 1e5 as the target's); captures CAPTURE; vanilla Markov head
rank 64; confidence head with the Markov embedding; mask token 16 (`<empty_output>`, a
special token chat text never holds); anchor-row convention (sample_from_anchor). The
target's tied embedding is both SpecForge's `target_embed_tokens` and `target_lm_head`.
Loss mask: the response tokens (the target's own output) through its end-of-turn.
bf16 autocast (AVX512-BF16), AdamW, warm-up + cosine to 5 % over --steps.

Resumable: every --ckpt-every steps (and on SIGTERM / Ctrl-C) the drafter, the optimizer and
the step go to WORK/draft/ckpt.pt atomically; a rerun continues from there. Batches are a
function of the step (one seeded permutation per epoch), so a resumed run sees the batches
an uninterrupted one would. Every --eval-every steps: loss, accuracy and SpecForge's
tau_probabilistic on the held-out conversations' features (never trained on).

Usage: train_drafter.py [--steps N] [--batch-tokens N] [--layers N] [--bench K]
"""
import argparse
import json
import math
import os
import signal
import sys
import time

import numpy as np

from paths import BLOCK, CAPTURE, DRAFT_WORK, FEATS, HF_DIR, SEED, WORK, log, setup_torch, write_json

torch = setup_torch()
from transformers import LlamaForCausalLM, Qwen3Config  # noqa: E402

LOG = WORK / "draft_train.log"
MASK_ID = 16
METRICS = ("ce_loss", "l1_loss", "confidence_loss", "acc", "tau_probabilistic")


def draft_config(tcfg, args):
    cfg = Qwen3Config(
        vocab_size=tcfg.vocab_size, hidden_size=tcfg.hidden_size, intermediate_size=tcfg.intermediate_size,
        num_hidden_layers=args.layers, num_attention_heads=tcfg.num_attention_heads,
        num_key_value_heads=tcfg.num_key_value_heads, head_dim=tcfg.hidden_size // tcfg.num_attention_heads,
        max_position_embeddings=tcfg.max_position_embeddings, rope_theta=tcfg.rope_parameters["rope_theta"]
        if getattr(tcfg, "rope_parameters", None) else tcfg.rope_theta,
        rms_norm_eps=tcfg.rms_norm_eps, tie_word_embeddings=False, attention_bias=False,
        bos_token_id=tcfg.bos_token_id, eos_token_id=tcfg.eos_token_id, pad_token_id=tcfg.pad_token_id,
    )
    cfg.architectures = ["DSparkDraftModel"]
    cfg.block_size = BLOCK
    cfg.num_target_layers = tcfg.num_hidden_layers
    cfg.layer_types = ["full_attention"] * args.layers
    cfg.sliding_window = None
    cfg.use_sliding_window = False
    cfg.dflash_config = {
        "target_layer_ids": list(CAPTURE), "mask_token_id": MASK_ID, "markov_rank": args.rank,
        "markov_head_type": "vanilla", "enable_confidence_head": True,
        "confidence_head_with_markov": True, "projector_type": "dspark", "attention_mode": "gqa",
        "sample_from_anchor": True,
    }
    cfg._attn_implementation = "sdpa"
    cfg._name_or_path = "dspark smol-pair drafter (DSpark, SpecForge 0.2.0) for SmolLM2-135M-Instruct"
    return cfg


class Data:
    def __init__(self, folder):
        meta = json.loads((folder / "index.json").read_text())
        assert meta["capture"] == CAPTURE, (meta["capture"], CAPTURE)
        self.seqs = meta["seqs"]
        self.feats = np.load(folder / "feats.npy", mmap_mode="r")
        self.last = np.load(folder / "last.npy", mmap_mode="r")
        self.tokens = None

    def attach_tokens(self, convs):
        self.tokens = [c["prompt_tokens"] + c["tokens"] for c in convs]
        assert [len(t) for t in self.tokens] == [s["len"] for s in self.seqs]

    def batches(self, batch_tokens, epoch):
        """Sequences of similar length together, at most batch_tokens padded tokens a batch."""
        rng = np.random.default_rng(SEED + epoch)
        order = sorted(range(len(self.seqs)), key=lambda i: (self.seqs[i]["len"], rng.random()))
        out, cur = [], []
        for i in order:
            if cur and (len(cur) + 1) * self.seqs[i]["len"] > batch_tokens:
                out.append(cur)
                cur = []
            cur.append(i)
        if cur:
            out.append(cur)
        return [out[k] for k in rng.permutation(len(out))]

    def tensors(self, rows):
        L = max(self.seqs[i]["len"] for i in rows)
        n = len(rows)
        ids = torch.zeros(n, L, dtype=torch.long)
        lm = torch.zeros(n, L)
        f = torch.zeros(n, L, self.feats.shape[1])
        h = torch.zeros(n, L, self.last.shape[1])
        for r, i in enumerate(rows):
            s = self.seqs[i]
            o, m = s["offset"], s["len"]
            ids[r, :m] = torch.tensor(self.tokens[i])
            lm[r, s["prompt_len"]: m] = 1.0
            f[r, :m] = torch.from_numpy(np.asarray(self.feats[o: o + m]).astype(np.int32) << 16).view(torch.float32)
            h[r, :m] = torch.from_numpy(np.asarray(self.last[o: o + m]).astype(np.int32) << 16).view(torch.float32)
        return ids, lm, f, h


def lr_at(step, args):
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    p = (step - args.warmup) / max(1, args.steps - args.warmup)
    return args.lr * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * min(p, 1.0))))


def run_metrics(model, data, rows_list, args):
    agg = {}
    total = 0.0
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        for rows in rows_list:
            ids, lm, f, h = data.tensors(rows)
            loss, _, metrics = model(input_ids=ids, hidden_states=f, loss_mask=lm, target_last_hidden_states=h)
            total += float(loss)
            for k in METRICS:
                n, d = metrics["ratio_metrics"][k]
                a = agg.setdefault(k, [0.0, 0.0])
                a[0] += float(n)
                a[1] += float(d)
    return {"loss": total / max(1, len(rows_list)), **{k: a[0] / max(a[1], 1e-9) for k, a in agg.items()}}


def main():
    global LOG
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--batch-tokens", type=int, default=2400)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--warmup", type=int, default=60)
    ap.add_argument("--layers", type=int, default=3)
    ap.add_argument("--rank", type=int, default=64)
    ap.add_argument("--num-anchors", type=int, default=48)
    ap.add_argument("--decay-gamma", type=float, default=4.0)
    ap.add_argument("--ckpt-every", type=int, default=50)
    ap.add_argument("--eval-every", type=int, default=200)
    ap.add_argument("--bench", type=int, default=0)
    ap.add_argument("--ce-alpha", type=float, default=0.1, help="SpecForge's dspark_ce_loss_alpha")
    ap.add_argument("--l1-alpha", type=float, default=0.9, help="SpecForge's dspark_l1_loss_alpha")
    ap.add_argument("--dir", default=str(DRAFT_WORK), help="checkpoint folder (resumed from)")
    ap.add_argument("--log", default=str(LOG), help="the training log")
    args = ap.parse_args()
    LOG = args.log

    from specforge.algorithms.common.dflash_family_model import OnlineDSparkModel
    from specforge.export.checkpoint_io import apply_legacy_rope_scaling
    from specforge.modeling.draft.dspark import DSparkDraftModel
    from paths import CONVS, read_jsonl

    target = LlamaForCausalLM.from_pretrained(HF_DIR, dtype=torch.float32).eval()
    for p in target.parameters():
        p.requires_grad_(False)
    data = Data(FEATS)
    data.attach_tokens(read_jsonl(CONVS))
    val = None
    if (WORK / "features_heldout" / "index.json").exists():
        val = Data(WORK / "features_heldout")
        val.attach_tokens(read_jsonl(WORK / "heldout_convs.jsonl"))
    torch.manual_seed(SEED)
    cfg = draft_config(target.config, args)
    draft = DSparkDraftModel(cfg)
    model = OnlineDSparkModel(
        draft_model=draft, target_lm_head=target.lm_head, target_embed_tokens=target.model.embed_tokens,
        mask_token_id=MASK_ID, block_size=BLOCK, attention_backend="sdpa", num_anchors=args.num_anchors,
        loss_decay_gamma=args.decay_gamma, objective_chunk_blocks=0,
        dspark_ce_loss_alpha=args.ce_alpha, dspark_l1_loss_alpha=args.l1_alpha,
    )
    model.train()
    params = [p for p in draft.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=args.lr, betas=(0.9, 0.95), weight_decay=0.01)
    from pathlib import Path
    draft_dir = Path(args.dir)
    draft_dir.mkdir(parents=True, exist_ok=True)
    ckpt = draft_dir / "ckpt.pt"
    step, wall = 0, 0.0
    if ckpt.exists() and not args.bench:
        st = torch.load(ckpt, weights_only=False)
        assert st["args"]["layers"] == args.layers, "ckpt from other options"
        if st["args"]["steps"] != args.steps:
            # a new horizon for the cosine schedule (the run had to end sooner or later)
            log(f"horizon {st['args']['steps']} -> {args.steps} steps at step {st['step']}", LOG)
        for key in ("ce_alpha", "l1_alpha", "lr"):
            if st["args"].get(key) != getattr(args, key):
                log(f"{key} {st['args'].get(key)} -> {getattr(args, key)} at step {st['step']}", LOG)
        draft.load_state_dict(st["draft"])
        opt.load_state_dict(st["opt"])
        step, wall = st["step"], st["wall"]
        torch.set_rng_state(st["torch_rng"])
        log(f"resumed at step {step} ({wall/60:.1f} min trained)", LOG)
    n_params = sum(p.numel() for p in params)
    per_epoch = len(data.batches(args.batch_tokens, 0))
    if step == 0:
        log(f"drafter {n_params/1e6:.2f}M trainable, {args.layers} layers, block {BLOCK}, captures {CAPTURE}; "
            f"{len(data.seqs)} conversations, {sum(s['len']-s['prompt_len'] for s in data.seqs)} supervised tokens, "
            f"{per_epoch} batches/epoch of <= {args.batch_tokens} tokens; {args.steps} steps "
            f"({args.steps/per_epoch:.2f} epochs)", LOG)
    val_rows = None
    if val is not None:
        val_rows = val.batches(args.batch_tokens, 0)

    def save(final=False):
        tmp = ckpt.with_suffix(".tmp")
        torch.save({"draft": draft.state_dict(), "opt": opt.state_dict(), "step": step, "wall": wall,
                    "torch_rng": torch.get_rng_state(), "args": vars(args)}, tmp)
        os.replace(tmp, ckpt)
        out = draft_dir / "hf"
        draft.save_pretrained(out)
        apply_legacy_rope_scaling(str(out))

    stop = {"now": False}

    def on_signal(sig, frame):
        stop["now"] = True
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    agg = {}
    t_last = time.time()
    epoch_cache = {}
    end = args.bench or args.steps
    while step < end and not stop["now"]:
        epoch, k = divmod(step, per_epoch)
        if epoch not in epoch_cache:
            epoch_cache = {epoch: data.batches(args.batch_tokens, epoch)}
        rows = epoch_cache[epoch][k]
        for g in opt.param_groups:
            g["lr"] = lr_at(step, args)
        ids, lm, f, h = data.tensors(rows)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss, _, metrics = model(input_ids=ids, hidden_states=f, loss_mask=lm, target_last_hidden_states=h)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        step += 1
        now = time.time()
        wall += now - t_last
        t_last = now
        for key in METRICS:
            n, d = metrics["ratio_metrics"][key]
            a = agg.setdefault(key, [0.0, 0.0])
            a[0] += float(n)
            a[1] += float(d)
        if args.bench:
            log(f"bench step {step}: {wall:.1f} s, loss {float(loss):.4f}, batch {ids.shape}")
            continue
        if step % 25 == 0:
            vals = " ".join(f"{key} {a[0]/max(a[1],1e-9):.4f}" for key, a in agg.items())
            log(f"step {step}/{args.steps} loss {float(loss):.4f} {vals} lr {lr_at(step-1, args):.2e} "
                f"{wall/60:.1f} min", LOG)
            agg = {}
        if step % args.ckpt_every == 0 or step == args.steps:
            save()
        if val_rows is not None and (step % args.eval_every == 0 or step == args.steps):
            model.eval()
            m = run_metrics(model, val, val_rows, args)
            model.train()
            log("held-out " + " ".join(f"{key} {v:.4f}" for key, v in m.items()) + f" at step {step}", LOG)
    if args.bench:
        return
    save()
    if stop["now"] and step < args.steps:
        log(f"stopped at step {step}/{args.steps} ({wall/60:.1f} min); rerun to resume", LOG)
        return 3
    summary = {"steps": args.steps, "batch_tokens": args.batch_tokens, "lr": args.lr, "block": BLOCK,
               "draft_layers": args.layers, "captures": CAPTURE, "rank": args.rank,
               "num_anchors": args.num_anchors, "decay_gamma": args.decay_gamma,
               "wall_minutes": wall / 60, "trainable_params": n_params, "conversations": len(data.seqs)}
    if val_rows is not None:
        summary["heldout"] = run_metrics(model.eval(), val, val_rows, args)
    write_json(WORK / "draft_summary.json", summary)
    log(f"drafter done: {step} steps in {wall/60:.1f} min -> {draft_dir / 'hf'}", LOG)


if __name__ == "__main__":
    sys.exit(main())

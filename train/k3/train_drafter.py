"""Step 5 - the drafter: SpecForge 0.2.0's DSparkDraftModel trained with its own OnlineDSparkModel loss (both
unchanged, attention_backend="sdpa") on the frozen K3 target's greedy continuations (WORK/continuations/).

The features are K3 **taps** (docs/KIMI-K3.md): tap(l) = ResMix(P after layer l; attn_res_score_{l+1}), the
stream layer l + 1 consumes, pre-norm; tap(last) = the output mix. They are computed per step by the exported
target (the GGUF's dequantized weights, float32, model.py's forward), at the MLA layers CAPTURE = 3, 7, 11 —
all three of the target's MLA layers, as the seed's captures (7, 23, 51, 67, 83 of K3's 93) are all MLA layers
spread over the depth; 11 is the last layer (its tap is the output mix the LM head reads), the strongest
single feature for greedy next-token drafting. SpecForge's target_last_hidden_states is the post-final-norm
hidden state (the LM head's input); its lm_head / embed_tokens are the target's `output` / `token_embd`.

Drafter: 2 Qwen3-style layers at the target's width (256, 4 heads / 2 KV heads, head_dim 64, FFN 768), block 8,
vanilla Markov head rank 64, confidence head with the Markov embedding, mask token 1 (<|mask|>), anchor-row
convention (`sample_from_anchor: true`: OnlineDSparkModel trains block row i on the token at anchor + i + 1).
loss_mask = 1 on the continuation (the target's own greedy tokens), 0 on the real-text prefix.

Resumable: every --ckpt-every steps (and on SIGTERM / SIGINT) the drafter, optimizer, RNG and step go to
WORK/draft/ckpt.pt atomically and the HF folder to WORK/draft/hf; a rerun continues. Batches are a function of
the step (a seeded permutation per epoch), so a resumed run sees the batches an uninterrupted one would.
"""
import argparse
import glob
import os
import signal
import sys
import time

from k3common import CAPTURE, CONT_DIR, DRAFT_DIR, SEED, WORK, cosine_lr, load_tokenizer, log, setup_torch, \
    special_ids, write_json

torch = setup_torch()
import numpy as np  # noqa: E402
from transformers import Qwen3Config  # noqa: E402

from dequant_target import load_exported  # noqa: E402

LOG = WORK / "draft_train.log"
METRICS = ("ce_loss", "l1_loss", "confidence_loss", "acc", "tau_probabilistic")


def draft_config(tc, args, eot, mask_id):
    cfg = Qwen3Config(
        vocab_size=tc.vocab, hidden_size=tc.hidden, intermediate_size=args.intermediate,
        num_hidden_layers=args.draft_layers, num_attention_heads=4, num_key_value_heads=2, head_dim=64,
        max_position_embeddings=tc.context, rope_theta=10000.0, rms_norm_eps=tc.eps, tie_word_embeddings=False,
        attention_bias=False, bos_token_id=eot, eos_token_id=eot, pad_token_id=eot,
    )
    cfg.architectures = ["DSparkDraftModel"]
    cfg.block_size = args.block
    cfg.num_target_layers = tc.layers
    cfg.layer_types = ["full_attention"] * args.draft_layers
    cfg.sliding_window = None
    cfg.use_sliding_window = False
    cfg.dflash_config = {
        "target_layer_ids": list(CAPTURE), "mask_token_id": mask_id, "markov_rank": args.rank,
        "markov_head_type": "vanilla", "enable_confidence_head": True, "confidence_head_with_markov": True,
        "projector_type": "dspark", "attention_mode": "gqa",
        "sample_from_anchor": True,   # OnlineDSparkModel's labels: row i -> anchor + i + 1
    }
    cfg._attn_implementation = "sdpa"
    return cfg


def load_shards():
    shards = []
    for p in sorted(glob.glob(str(CONT_DIR / "cont_*.npz"))):
        z = np.load(p)
        shards.append((z["tokens"].astype(np.int64), int(z["prefix_len"])))
    return shards


def loss_mask_for(tokens, plen, eos):
    m = np.zeros_like(tokens, dtype=np.float32)
    m[:, plen:] = 1.0
    for i in range(tokens.shape[0]):
        hits = np.nonzero(tokens[i, plen:] == eos)[0]
        if len(hits):
            m[i, plen + hits[0] + 1:] = 0.0  # supervise up to and including the first EOS
    return m


def epoch_batches(shards, batch, epoch):
    """Batches (shard, rows) of one epoch, a function of the epoch only; never mixing shards."""
    rng = np.random.default_rng(SEED * 7919 + epoch)
    order = []
    for si, (t, _) in enumerate(shards):
        perm = rng.permutation(t.shape[0])
        order += [(si, perm[j:j + batch]) for j in range(0, len(perm) - batch + 1, batch)]
    return [order[k] for k in rng.permutation(len(order))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=1200)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--lr", type=float, default=1.5e-3)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--block", type=int, default=8)
    ap.add_argument("--draft-layers", type=int, default=2)
    ap.add_argument("--intermediate", type=int, default=768)
    ap.add_argument("--rank", type=int, default=64)
    ap.add_argument("--num-anchors", type=int, default=64)
    ap.add_argument("--decay-gamma", type=float, default=4.0)
    ap.add_argument("--ce-alpha", type=float, default=1.0, help="SpecForge's dspark_ce_loss_alpha (code pair: 1.0 "
                    "helped greedy acceptance)")
    ap.add_argument("--l1-alpha", type=float, default=0.9, help="SpecForge's dspark_l1_loss_alpha")
    ap.add_argument("--ckpt-every", type=int, default=50)
    ap.add_argument("--bench", type=int, default=0)
    args = ap.parse_args()

    from specforge.algorithms.common.dflash_family_model import OnlineDSparkModel
    from specforge.export.checkpoint_io import apply_legacy_rope_scaling
    from specforge.modeling.draft.dspark import DSparkDraftModel

    tok = load_tokenizer()
    eos, mask_id = special_ids(tok)
    target = load_exported()
    for p in target.parameters():
        p.requires_grad_(False)
    tc = target.c
    lm_head = torch.nn.Linear(tc.hidden, tc.vocab, bias=False)
    lm_head.weight.data.copy_(target.output.data)
    embed = torch.nn.Embedding(tc.vocab, tc.hidden)
    embed.weight.data.copy_(target.token_embd.data)
    for p in list(lm_head.parameters()) + list(embed.parameters()):
        p.requires_grad_(False)
    with torch.no_grad():  # the post-norm hidden state through lm_head gives the target's logits
        ids = torch.arange(2, 50).unsqueeze(0)
        lg, _, hf = target(ids)
        assert torch.allclose(lm_head(hf), lg, atol=1e-4)

    torch.manual_seed(SEED)
    cfg = draft_config(tc, args, eos, mask_id)
    draft = DSparkDraftModel(cfg)
    model = OnlineDSparkModel(
        draft_model=draft, target_lm_head=lm_head, target_embed_tokens=embed, mask_token_id=mask_id,
        block_size=args.block, attention_backend="sdpa", num_anchors=args.num_anchors,
        loss_decay_gamma=args.decay_gamma if args.decay_gamma > 0 else None, objective_chunk_blocks=0,
        dspark_ce_loss_alpha=args.ce_alpha, dspark_l1_loss_alpha=args.l1_alpha,
    )
    model.train()
    params = [p for p in draft.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=args.lr, betas=(0.9, 0.95), weight_decay=0.01)
    DRAFT_DIR.mkdir(parents=True, exist_ok=True)
    ckpt = DRAFT_DIR / "ckpt.pt"
    step, wall = 0, 0.0
    if ckpt.exists() and not args.bench:
        st = torch.load(ckpt, weights_only=False)
        if st["args"]["steps"] != args.steps:
            log(f"horizon {st['args']['steps']} -> {args.steps} steps at step {st['step']}", LOG)
        draft.load_state_dict(st["draft"])
        opt.load_state_dict(st["opt"])
        step, wall = st["step"], st["wall"]
        torch.set_rng_state(st["torch_rng"])
        log(f"resumed at step {step} ({wall / 60:.1f} min trained)", LOG)
    shards = load_shards()
    n_seq = sum(t.shape[0] for t, _ in shards)
    per_epoch = len(epoch_batches(shards, args.batch, 0))
    n_params = sum(p.numel() for p in params)
    if step == 0:
        n_sup = sum(int(loss_mask_for(t, pl, eos).sum()) for t, pl in shards)
        log(f"drafter: {n_params / 1e6:.2f}M trainable params, {args.draft_layers} layers, block {args.block}, "
            f"captures {list(CAPTURE)} (K3 taps), rank {args.rank}, CE alpha {args.ce_alpha}; data {len(shards)} "
            f"shards, {n_seq} sequences, {n_sup} supervised tokens; {args.steps} steps x {args.batch} seqs "
            f"= {args.steps / per_epoch:.2f} epochs", LOG)

    def save():
        tmp = ckpt.with_suffix(".tmp")
        torch.save({"draft": draft.state_dict(), "opt": opt.state_dict(), "step": step, "wall": wall,
                    "torch_rng": torch.get_rng_state(), "args": vars(args)}, tmp)
        os.replace(tmp, ckpt)
        out = DRAFT_DIR / "hf"
        draft.save_pretrained(out)
        apply_legacy_rope_scaling(str(out))

    stop = {"now": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.update(now=True))
    signal.signal(signal.SIGINT, lambda *_: stop.update(now=True))
    agg, cache = {}, {}
    t_last = time.time()
    end = args.bench or args.steps
    while step < end and not stop["now"]:
        epoch, k = divmod(step, per_epoch)
        if epoch not in cache:
            cache = {epoch: epoch_batches(shards, args.batch, epoch)}
        si, rows = cache[epoch][k]
        for g in opt.param_groups:
            g["lr"] = cosine_lr(step, args.lr, args.warmup, args.steps)
        toks, plen = shards[si]
        x = torch.from_numpy(toks[rows])
        lm = torch.from_numpy(loss_mask_for(toks[rows], plen, eos))
        with torch.no_grad():
            _, feats, last = target(x, CAPTURE, logits=False)
        loss, _, metrics = model(input_ids=x, hidden_states=feats, loss_mask=lm, target_last_hidden_states=last)
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
            log(f"bench step {step}: {wall:.1f} s, loss {float(loss):.4f}")
            continue
        if step % 25 == 0:
            vals = " ".join(f"{key} {a[0] / max(a[1], 1e-9):.4f}" for key, a in agg.items())
            log(f"step {step}/{args.steps} loss {float(loss):.4f} {vals} lr {cosine_lr(step - 1, args.lr, args.warmup, args.steps):.2e} "
                f"{wall / 60:.1f} min", LOG)
            agg = {}
        if step % args.ckpt_every == 0 or step == args.steps:
            save()
    if args.bench:
        return 0
    save()
    if stop["now"] and step < args.steps:
        log(f"stopped at step {step}/{args.steps} ({wall / 60:.1f} min); rerun to resume", LOG)
        return 3
    write_json(WORK / "draft_summary.json", {
        "steps": args.steps, "batch": args.batch, "lr": args.lr, "block": args.block, "draft_layers": args.draft_layers,
        "captures": list(CAPTURE), "rank": args.rank, "num_anchors": args.num_anchors, "ce_alpha": args.ce_alpha,
        "l1_alpha": args.l1_alpha, "decay_gamma": args.decay_gamma, "wall_minutes": wall / 60,
        "sequences": n_seq, "trainable_params": n_params})
    log(f"drafter done: {step} steps in {wall / 60:.1f} min -> {DRAFT_DIR / 'hf'}", LOG)
    return 0


if __name__ == "__main__":
    sys.exit(main())

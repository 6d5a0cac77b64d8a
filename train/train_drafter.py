"""Step 5 - drafter: SpecForge 0.2.0's DSparkDraftModel trained with SpecForge's
own OnlineDSparkModel loss (both used unchanged, attention_backend="sdpa") on the
frozen target's greedy continuations (WORK/continuations/).

Per step the frozen target runs over the batch (no grad) to give the captured
features (outputs of layers `--layers`, pre final norm, concatenated) and the
post-norm last hidden state (SpecForge's target_last_hidden_states, used for the
L1 and confidence targets).  loss_mask = 1 on the continuation tokens (the
target's own greedy output), 0 on the real-text prefix, so every anchor is a
token the target produced and every label is the target's argmax.
Writes WORK/draft/ (config.json + model.safetensors, SpecForge's HF layout).
"""
import argparse
import glob
import json
import math
import sys
import time

from common import cosine_lr, CONT_DIR, DRAFT_DIR, SEED, TARGET_DIR, WORK, load_tokenizer, log, setup_torch, special_ids

torch = setup_torch()
import numpy as np  # noqa: E402
from transformers import Qwen3Config, Qwen3ForCausalLM  # noqa: E402

LOG = WORK / "draft_train.log"


def draft_config(tcfg, args, mask_id):
    cfg = Qwen3Config(
        vocab_size=tcfg.vocab_size,
        hidden_size=tcfg.hidden_size,          # MUST equal the target's
        intermediate_size=args.intermediate,
        num_hidden_layers=args.draft_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        max_position_embeddings=tcfg.max_position_embeddings,
        rope_theta=10000.0,
        rms_norm_eps=tcfg.rms_norm_eps,
        tie_word_embeddings=False,
        attention_bias=False,
        bos_token_id=tcfg.bos_token_id,
        eos_token_id=tcfg.eos_token_id,
        pad_token_id=tcfg.pad_token_id,
    )
    cfg.architectures = ["DSparkDraftModel"]
    cfg.block_size = args.block
    cfg.num_target_layers = tcfg.num_hidden_layers
    cfg.layer_types = ["full_attention"] * args.draft_layers
    cfg.sliding_window = None
    cfg.use_sliding_window = False
    cfg.dflash_config = {
        "target_layer_ids": [int(x) for x in args.layers.split(",")],
        "mask_token_id": mask_id,
        "markov_rank": args.rank,
        "markov_head_type": "vanilla",
        "enable_confidence_head": True,
        "confidence_head_with_markov": True,
        "projector_type": "dspark",
        "attention_mode": "gqa",
        # SpecForge's OnlineDSparkModel trains row i of the block to predict the
        # token at anchor + i + 1 (labels anchor+1..anchor+B): anchor-row convention.
        "sample_from_anchor": True,
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


@torch.no_grad()
def target_features(target, ids, layer_ids):
    out = target.model(input_ids=ids, output_hidden_states=True)
    hs = out.hidden_states
    feats = torch.cat([hs[i + 1] for i in layer_ids], dim=-1)
    return feats, out.last_hidden_state  # last_hidden_state is post final norm


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=1300)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--lr", type=float, default=1.5e-3)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--block", type=int, default=8)
    ap.add_argument("--draft-layers", type=int, default=2)
    ap.add_argument("--intermediate", type=int, default=768)
    ap.add_argument("--layers", default="1,3,4")
    ap.add_argument("--rank", type=int, default=64)
    ap.add_argument("--num-anchors", type=int, default=64)
    ap.add_argument("--decay-gamma", type=float, default=4.0)
    ap.add_argument("--out", default=str(DRAFT_DIR))
    ap.add_argument("--bench", type=int, default=0)
    ap.add_argument("--bf16", type=int, default=0, help="bf16 autocast (CPU AVX512-BF16)")
    args = ap.parse_args()

    from specforge.algorithms.common.dflash_family_model import OnlineDSparkModel
    from specforge.export.checkpoint_io import apply_legacy_rope_scaling
    from specforge.modeling.draft.dspark import DSparkDraftModel

    tok = load_tokenizer()
    eos, mask_id = special_ids(tok)
    target = Qwen3ForCausalLM.from_pretrained(TARGET_DIR, dtype=torch.float32).eval()
    for p in target.parameters():
        p.requires_grad_(False)
    # sanity: the post-norm hidden state through lm_head gives the target's logits
    ids = torch.arange(2, 50).unsqueeze(0)
    f, last = target_features(target, ids, [0])
    assert torch.allclose(target.lm_head(last), target(input_ids=ids).logits, atol=1e-4)

    torch.manual_seed(SEED)
    cfg = draft_config(target.config, args, mask_id)
    assert max(cfg.dflash_config["target_layer_ids"]) < target.config.num_hidden_layers - 1
    draft = DSparkDraftModel(cfg)
    layer_ids = list(draft.target_layer_ids)
    model = OnlineDSparkModel(
        draft_model=draft,
        target_lm_head=target.lm_head,
        target_embed_tokens=target.model.embed_tokens,
        mask_token_id=mask_id,
        block_size=args.block,
        attention_backend="sdpa",
        num_anchors=args.num_anchors,
        loss_decay_gamma=args.decay_gamma if args.decay_gamma > 0 else None,
        objective_chunk_blocks=0,
    )
    model.train()
    params = [p for p in draft.parameters() if p.requires_grad]
    n_params = sum(p.numel() for p in params)
    shards = load_shards()
    n_seq = sum(t.shape[0] for t, _ in shards)
    n_sup = sum(int(loss_mask_for(t, pl, eos).sum()) for t, pl in shards)
    log(f"drafter: {n_params/1e6:.2f}M trainable params, {args.draft_layers} layers, block {args.block}, "
        f"captures {layer_ids}, rank {args.rank}; data {len(shards)} shards, {n_seq} sequences, "
        f"{n_sup} supervised tokens; {args.steps} steps x {args.batch} seqs "
        f"= {args.steps*args.batch/n_seq:.2f} epochs", LOG)
    opt = torch.optim.AdamW(params, lr=args.lr, betas=(0.9, 0.95), weight_decay=0.01)

    def lr_at(step):
        return cosine_lr(step, args.lr, args.warmup, args.steps)

    # batches never mix shards (all sequences of a shard have one length)
    rng = np.random.default_rng(SEED)

    def batches():
        while True:
            order = []
            for si, (t, _) in enumerate(shards):
                perm = rng.permutation(t.shape[0])
                order += [(si, perm[j:j + args.batch]) for j in range(0, len(perm) - args.batch + 1, args.batch)]
            for k in rng.permutation(len(order)):
                yield order[k]

    it = batches()
    t0 = time.time()
    agg = {}
    steps = args.bench or args.steps
    for step in range(steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        si, rows = next(it)
        toks, plen = shards[si]
        x = torch.from_numpy(toks[rows])
        lm = torch.from_numpy(loss_mask_for(toks[rows], plen, eos))
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bool(args.bf16)):
            feats, last = target_features(target, x, layer_ids)
            loss, acc, metrics = model(input_ids=x, hidden_states=feats.float(), loss_mask=lm,
                                       target_last_hidden_states=last.float())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        rm = metrics["ratio_metrics"]
        for k in ("ce_loss", "l1_loss", "confidence_loss", "acc", "tau_probabilistic"):
            n, d = rm[k]
            a = agg.setdefault(k, [0.0, 0.0])
            a[0] += float(n)
            a[1] += float(d)
        if args.bench and step in (1, steps - 1):
            log(f"bench step {step}: {time.time()-t0:.1f}s loss {loss.item():.4f}")
        if (step + 1) % 50 == 0 and not args.bench:
            el = time.time() - t0
            vals = " ".join(f"{k} {a[0]/max(a[1],1e-9):.4f}" for k, a in agg.items())
            log(f"step {step+1}/{steps} loss {loss.item():.4f} {vals} lr {lr_at(step):.2e} {el/60:.1f} min", LOG)
            agg = {}
        if (step + 1) % 100 == 0 or step + 1 == steps:
            if not args.bench:
                draft.save_pretrained(args.out)
                apply_legacy_rope_scaling(args.out)
    if not args.bench:
        summary = {"steps": args.steps, "batch": args.batch, "lr": args.lr, "block": args.block,
                   "draft_layers": args.draft_layers, "captures": layer_ids, "rank": args.rank,
                   "decay_gamma": args.decay_gamma, "wall_minutes": (time.time() - t0) / 60,
                   "sequences": n_seq, "supervised_tokens": n_sup, "trainable_params": n_params}
        (WORK / "draft_summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        log(f"drafter done in {(time.time()-t0)/60:.1f} min -> {args.out}", LOG)


if __name__ == "__main__":
    sys.exit(main())

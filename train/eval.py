"""Step 6 - evaluation: greedy (T=0) DSpark speculative decoding in PyTorch with
exactly the runtime's math (dspark runtime, docs/RUNTIME-MATH.md):

  prefill: target over the prompt, capture features f_p (residual stream after
           the capture layers, pre final norm, concatenated in id order); anchor
           x0 = argmax of the last row.
  round:   drafter context = hidden_norm(fc(f_0..f_{s-1})) (SpecForge's own
           DSparkDraftModel.forward), block [x0, MASK x (B-1)] at positions
           s..s+B-1 embedded with the target's table, bidirectional, final norm;
           draft rows -> target lm_head -> U_k; Markov chain x_k = argmax(U_k +
           W2 W1[x_{k-1}]) seeded with the anchor; confidence sigma(w.[h_k; W1[x_{k-1}]] + b).
           Rows: sample_from_anchor=true -> rows 0..B-1 (B drafts), false -> rows 1..B-1.
  verify:  target over [x0, x_1..x_g] at s..s+g; m = longest prefix with x_i = argmax
           row i-1; bonus = argmax row m; commit x0..x_m (their verify rows become
           features), next anchor = bonus.  tau = m + 1 per round (bonus included).

Reports tau, per-position conditional acceptance, the acceptance-length
histogram and confidence calibration (mean predicted vs observed greedy
acceptance per position, ECE over 10 bins), with and without the Markov bias,
and for the other row convention (to check which one the checkpoint uses).
"""
import argparse
import json
import sys
import time
from pathlib import Path

from common import DRAFT_DIR, EVAL_DIR, TARGET_DIR, WORK, log, setup_torch, write_json

torch = setup_torch()
from transformers import DynamicCache, Qwen3ForCausalLM  # noqa: E402


def load_pair(target_dir, draft_dir):
    from specforge.modeling.draft.dspark import DSparkDraftModel
    target = Qwen3ForCausalLM.from_pretrained(target_dir, dtype=torch.float32).eval()
    draft = DSparkDraftModel.from_pretrained(draft_dir, dtype=torch.float32, attn_implementation="sdpa").eval()
    return target, draft


def features(out, layer_ids):
    # hidden_states[0] = embeddings, hidden_states[i+1] = output of layer i (pre final norm)
    return torch.cat([out.hidden_states[i + 1] for i in layer_ids], dim=-1)


class Drafter:
    """The drafter's round with the runtime's math (SpecForge module for the backbone)."""

    def __init__(self, target, draft, anchor_row=True, markov=True):
        self.t, self.d = target, draft
        self.B = draft.block_size
        self.mask = draft.mask_token_id
        self.anchor_row = anchor_row
        self.markov = markov and draft.markov_head is not None
        self.ids = list(draft.target_layer_ids)

    @torch.inference_mode()
    def propose(self, feats, anchor):
        s = feats.shape[1]
        block = torch.full((1, self.B), self.mask, dtype=torch.long)
        block[0, 0] = anchor
        emb = self.t.model.embed_tokens(block)
        pos = torch.arange(s + self.B).unsqueeze(0)
        h = self.d(position_ids=pos, noise_embedding=emb, target_hidden=feats,
                   attention_mask=None, is_causal=False)[0]
        rows = h if self.anchor_row else h[1:]
        base = self.t.lm_head(rows)
        drafts, confs = [], []
        prev = int(anchor)
        mh, ch = self.d.markov_head, self.d.confidence_head
        for k in range(rows.shape[0]):
            e = mh.markov_w1.weight[prev] if mh is not None else None
            logits = base[k] + mh.markov_w2(e) if self.markov else base[k]
            if ch is not None:
                inp = torch.cat([rows[k], e]) if self.d.confidence_head_with_markov else rows[k]
                confs.append(torch.sigmoid(ch.proj(inp)).item())
            x = int(torch.argmax(logits))  # lowest index on ties, like the runtime
            drafts.append(x)
            prev = x
        return drafts, confs


@torch.inference_mode()
def spec_decode(target, drafter, prompt_ids, max_new, eos):
    """The runtime's loop (crates/runtime/src/generate.rs): the output starts with the
    prefill's argmax (the first anchor); each round verifies at most remaining-1 drafts;
    tokens are kept up to and including the first EOS, at most max_new of them."""
    cache = DynamicCache()
    out = target(input_ids=torch.tensor([prompt_ids]), past_key_values=cache, use_cache=True,
                 output_hidden_states=True)
    feats = features(out, drafter.ids)
    emitted = [int(out.logits[0, -1].argmax())]
    rounds = []
    s = len(prompt_ids)
    while len(emitted) < max_new and emitted[-1] != eos:
        anchor = emitted[-1]
        drafts, confs = drafter.propose(feats, anchor)
        n = min(len(drafts), max_new - len(emitted) - 1)
        inp = torch.tensor([[anchor] + drafts[:n]])
        out = target(input_ids=inp, past_key_values=cache, use_cache=True, output_hidden_states=True,
                     position_ids=torch.arange(s, s + inp.shape[1]).unsqueeze(0))
        post = out.logits[0].argmax(-1).tolist()
        m = 0
        while m < n and drafts[m] == post[m]:
            m += 1
        rounds.append({"m": m, "n": n, "g": len(drafts), "confs": confs,
                       "match": [int(drafts[i] == post[i]) for i in range(n)]})
        cache.crop(s + m + 1)
        feats = torch.cat([feats, features(out, drafter.ids)[:, :m + 1]], dim=1)
        s += m + 1
        for t in drafts[:m] + [post[m]]:
            emitted.append(t)
            if t == eos or len(emitted) >= max_new:
                break
    return emitted, rounds


@torch.inference_mode()
def greedy_reference(target, prompt_ids, n):
    cache = DynamicCache()
    out = target(input_ids=torch.tensor([prompt_ids]), past_key_values=cache, use_cache=True)
    toks = []
    for _ in range(n):
        x = int(out.logits[0, -1].argmax())
        toks.append(x)
        out = target(input_ids=torch.tensor([[x]]), past_key_values=cache, use_cache=True)
    return toks


def summarize(rounds, g):
    """tau = mean(m + 1) over rounds (bonus included, like the runtime's
    mean_acceptance_length); per-position stats over the rounds that verified and
    reached position k (all earlier drafts accepted)."""
    n = len(rounds)
    ms = [r["m"] for r in rounds]
    tau = sum(m + 1 for m in ms) / n
    hist = [sum(1 for m in ms if m + 1 == L) for L in range(1, g + 2)]
    cond = []
    for k in range(1, g + 1):
        reach = [r for r in rounds if r["n"] >= k and r["m"] >= k - 1]
        cond.append(sum(1 for r in reach if r["m"] >= k) / len(reach) if reach else None)
    full = [r for r in rounds if r["n"] == g]
    res = {"rounds": n, "tau": tau, "accept_hist": hist, "cond_accept": cond,
           "full_rounds": len(full), "tau_full_rounds": sum(r["m"] + 1 for r in full) / max(1, len(full))}
    if rounds and rounds[0]["confs"]:
        pred_pos, obs_pos, pairs = [], [], []
        for k in range(g):
            ps = [(r["confs"][k], r["match"][k]) for r in rounds if r["n"] > k and r["m"] >= k]
            pairs += ps
            pred_pos.append(sum(p for p, _ in ps) / len(ps) if ps else None)
            obs_pos.append(sum(o for _, o in ps) / len(ps) if ps else None)
        ece = 0.0
        for b in range(10):
            sel = [(p, o) for p, o in pairs if b / 10 <= p < (b + 1) / 10 or (b == 9 and p == 1.0)]
            if sel:
                ece += len(sel) / len(pairs) * abs(sum(p for p, _ in sel) / len(sel) - sum(o for _, o in sel) / len(sel))
        res.update({"conf_pred_mean": pred_pos, "conf_obs_accept": obs_pos, "ece": ece,
                    "conf_pairs": len(pairs)})
    return res


def run(target, draft, prompts, tok, max_new=128, anchor_row=True, markov=True, check_lossless=0):
    drafter = Drafter(target, draft, anchor_row=anchor_row, markov=markov)
    eos = tok.token_to_id("<|endoftext|>")
    all_rounds = []
    mismatches = 0
    for i, p in enumerate(prompts):
        ids = tok.encode(p).ids
        out, rounds = spec_decode(target, drafter, ids, max_new, eos)
        all_rounds += rounds
        if i < check_lossless:
            ref = greedy_reference(target, ids, len(out))
            mismatches += int(ref != out)
    res = summarize(all_rounds, all_rounds[0]["g"])
    if check_lossless:
        res["lossless_checked"] = check_lossless
        res["lossless_mismatches"] = mismatches
    return res


def fmt(name, r):
    s = f"{name}: tau {r['tau']:.3f} over {r['rounds']} rounds; cond accept " + \
        " ".join(f"{c:.2f}" for c in r["cond_accept"] if c is not None)
    s += "; hist " + " ".join(map(str, r["accept_hist"]))
    if "ece" in r:
        s += "; conf pred " + " ".join(f"{c:.2f}" for c in r["conf_pred_mean"] if c is not None)
        s += " obs " + " ".join(f"{c:.2f}" for c in r["conf_obs_accept"] if c is not None)
        s += f"; ECE {r['ece']:.3f}"
    return s


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", default=str(TARGET_DIR))
    ap.add_argument("--draft", default=str(DRAFT_DIR))
    ap.add_argument("--sets", default="heldout,pip,thirdparty")
    ap.add_argument("--merge", action="store_true", help="add to an existing --out file")
    ap.add_argument("--max-new", type=int, default=128)
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--out", default=str(EVAL_DIR / "eval.json"))
    ap.add_argument("--quick", action="store_true", help="anchor-row with Markov only")
    args = ap.parse_args()
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(str(WORK / "tokenizer.json"))
    target, draft = load_pair(args.target, args.draft)
    cfg_anchor = bool(draft.config.dflash_config.get("sample_from_anchor", True))
    results = {"target": args.target, "draft": args.draft, "max_new": args.max_new,
               "config_sample_from_anchor": cfg_anchor}
    if args.merge and Path(args.out).exists():
        results = {**json.load(open(args.out)), **results}
    for name in args.sets.split(","):
        if not (WORK / f"prompts_{name}.jsonl").exists():
            log(f"no prompts_{name}.jsonl: skipped")
            continue
        prompts = [json.loads(l)["prompt"] for l in open(WORK / f"prompts_{name}.jsonl")]
        if args.limit:
            prompts = prompts[:args.limit]
        variants = [("markov", True, True)] if args.quick else [
            ("markov", True, True), ("no_markov", True, False), ("rows_1_to_B-1", False, True)]
        for vname, anchor_row, markov in variants:
            t0 = time.time()
            r = run(target, draft, prompts, tok, args.max_new, anchor_row, markov,
                    check_lossless=min(8, len(prompts)) if vname == "markov" else 0)
            r["seconds"] = time.time() - t0
            r["prompts"] = len(prompts)
            results[f"{name}/{vname}"] = r
            log(fmt(f"{name}/{vname} ({len(prompts)} prompts)", r))
    write_json(args.out, results)


if __name__ == "__main__":
    sys.exit(main())

"""Step 6 - evaluation in PyTorch with the runtime's math (train/eval.py's loop, docs/RUNTIME-MATH.md), the
target being the exported K3 (the GGUF's dequantized weights, float32) and the features its taps at the
drafter's target_layer_ids:

  prefill: the target over the prompt with carried state, taps f_p; anchor x0 = argmax of the last row.
  round:   SpecForge's DSparkDraftModel forward (context hidden_norm(fc(f_0..f_{s−1})), block [x0, MASK×(B−1)]
           embedded with the target's token_embd, bidirectional), rows -> target output head -> U_k; Markov chain
           x_k = argmax(U_k + W2·W1[x_{k−1}]) seeded with the anchor; confidence σ(w·[h_k; W1[x_{k−1}]] + b).
  verify:  the target over [x0, x_1..x_n] on a copy of the state; m = accepted prefix; bonus = argmax row m;
           the state is rolled back by re-running x0..x_m from the round's start state (KDA is recurrent), their
           verify rows' taps become context features.  tau = mean(m + 1) (bonus included).

Reports τ, per-position conditional acceptance, the histogram, confidence calibration, with and without the
Markov bias (the ablation) and for the other row convention; speculative == plain greedy is checked on the
first 8 prompts of each set. -> WORK/eval/eval.json

  K3_WORK=/tmp/train/k3work nice -n 19 python train/k3/eval.py --draft examples/k3-pair/draft
"""
import argparse
import copy
import json
import sys
import time
from pathlib import Path

from k3common import DRAFT_DIR, EVAL_DIR, WORK, load_tokenizer, log, setup_torch, special_ids, write_json

torch = setup_torch()

from dequant_target import load_exported  # noqa: E402


def _code_pair_eval():
    """train/eval.py (this file shadows its module name): the same statistics and formatting as the code pair."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("code_pair_eval", Path(__file__).resolve().parent.parent / "eval.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


summarize, fmt = _code_pair_eval().summarize, _code_pair_eval().fmt


class Drafter:
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
        emb = self.t.token_embd[block]
        pos = torch.arange(s + self.B).unsqueeze(0)
        h = self.d(position_ids=pos, noise_embedding=emb, target_hidden=feats, attention_mask=None, is_causal=False)[0]
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
            x = int(torch.argmax(logits))
            drafts.append(x)
            prev = x
        return drafts, confs


@torch.inference_mode()
def spec_decode(target, drafter, prompt_ids, max_new, eos):
    st = target.new_state(1)
    lg, feats, _ = target(torch.tensor([prompt_ids]), drafter.ids, state=st)
    emitted = [int(lg[0, -1].argmax())]
    rounds = []
    while len(emitted) < max_new and emitted[-1] != eos:
        anchor = emitted[-1]
        drafts, confs = drafter.propose(feats, anchor)
        n = min(len(drafts), max_new - len(emitted) - 1)
        inp = torch.tensor([[anchor] + drafts[:n]])
        trial = copy.deepcopy(st)
        lg, f, _ = target(inp, drafter.ids, state=trial, chunked=False)
        post = lg[0].argmax(-1).tolist()
        m = 0
        while m < n and drafts[m] == post[m]:
            m += 1
        rounds.append({"m": m, "n": n, "g": len(drafts), "confs": confs,
                       "match": [int(drafts[i] == post[i]) for i in range(n)]})
        if m == n:
            st = trial
        else:  # roll back: the round's start state, then the accepted tokens
            target(inp[:, :m + 1], drafter.ids, state=st, chunked=False, logits=False)
        feats = torch.cat([feats, f[:, :m + 1]], dim=1)
        for t in drafts[:m] + [post[m]]:
            emitted.append(t)
            if t == eos or len(emitted) >= max_new:
                break
    return emitted, rounds


@torch.inference_mode()
def greedy_reference(target, prompt_ids, n):
    st = target.new_state(1)
    lg = target(torch.tensor([prompt_ids]), state=st)[0]
    toks = []
    for _ in range(n):
        x = int(lg[0, -1].argmax())
        toks.append(x)
        lg = target(torch.tensor([[x]]), state=st, chunked=False)[0]
    return toks


def run(target, draft, prompts, tok, max_new, anchor_row=True, markov=True, check_lossless=0):
    drafter = Drafter(target, draft, anchor_row=anchor_row, markov=markov)
    eos, _ = special_ids(tok)
    all_rounds, mismatches = [], 0
    for i, p in enumerate(prompts):
        ids = tok.encode(p).ids
        out, rounds = spec_decode(target, drafter, ids, max_new, eos)
        all_rounds += rounds
        if i < check_lossless:
            mismatches += int(greedy_reference(target, ids, len(out)) != out)
    res = summarize(all_rounds, all_rounds[0]["g"])
    if check_lossless:
        res["lossless_checked"] = check_lossless
        res["lossless_mismatches"] = mismatches
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--draft", default=str(DRAFT_DIR / "hf"))
    ap.add_argument("--sets", default="heldout,pip")
    ap.add_argument("--max-new", type=int, default=128)
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--out", default=str(EVAL_DIR / "eval.json"))
    ap.add_argument("--quick", action="store_true", help="anchor-row with Markov only")
    args = ap.parse_args()
    from specforge.modeling.draft.dspark import DSparkDraftModel
    tok = load_tokenizer()
    target = load_exported()
    draft = DSparkDraftModel.from_pretrained(args.draft, dtype=torch.float32, attn_implementation="sdpa").eval()
    results = {"draft": args.draft, "max_new": args.max_new,
               "config_sample_from_anchor": bool(draft.config.dflash_config.get("sample_from_anchor", True))}
    for name in args.sets.split(","):
        path = WORK / f"prompts_{name}.jsonl"
        if not path.exists():
            log(f"no {path}: skipped")
            continue
        prompts = [json.loads(line)["prompt"] for line in open(path)]
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
            log(fmt(f"{name}/{vname} ({len(prompts)} prompts)", r), EVAL_DIR / "eval.log")
    write_json(args.out, results)


if __name__ == "__main__":
    sys.exit(main())

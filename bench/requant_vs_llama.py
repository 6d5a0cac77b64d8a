"""Runs and report of bench/requant_vs_llama.sh (see its header for what is measured).

Per model and quantized file: the tensor type histogram (gguf-py), then per prompt dspark's
greedy ids (`dspark generate --json`), llama.cpp's (bench/llama_dump --gen-top), dspark's
per-step top logits (crates/runtime/examples/greedy_top.rs) and, for the code pair, dspark's
speculative ids. Each file's runs are kept in OUT/<model>/runs/<TYPE>.json (reused unless
--redo 1); the report is OUT/results.md and OUT/results.json.
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter

TIMEOUT = 900  # seconds per engine run: far above any run seen (a hang is a failure)
TIE_FLOOR = 0.05  # a near-tie margin is never judged tighter than this many logits
TIE_FACTOR = 2.0  # ... nor tighter than this many times the prompt's own logit Δ


# llama.cpp's OpenMP workers sleep instead of spinning between ops: the same split of the
# work (so the same logits), but on a machine other jobs share, spinning -t 2 workers made
# a 48-token SmolLM2 run take 43 s instead of 6 s.
LLAMA_ENV = dict(os.environ, OMP_WAIT_POLICY="passive")


def run(cmd, env=None):
    """(returncode, stdout, stderr) of cmd; a timeout is returncode None."""
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT, env=env)
        return p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        return None, e.stdout or "", (e.stderr or "") + f"\ntimeout after {TIMEOUT} s"


def tail(text):
    """An error output, shortened: its first two lines and its last (a refusal names the
    file and the first finding first; a crash's cause is often last)."""
    lines = text.strip().splitlines()
    if len(lines) <= 4:
        return "\n".join(lines)
    return "\n".join(lines[:2] + [f"… ({len(lines) - 3} more lines)", lines[-1]])


def prompts(repo, model, n):
    path = {
        "code": os.path.join(repo, "examples/code-pair/heldout.jsonl"),
        "smol": os.path.join(repo, "bench/requant/chat.jsonl"),
    }[model]
    with open(path) as f:
        return [json.loads(line)["prompt"] for line in f][:n]


def histogram(dspark, path):
    """{type: count} of the matrices (tensors of 2+ dims) and of the vectors of a GGUF, as
    `dspark inspect --json` lists them (gguf-py when that fails: it knows fewer types)."""
    rc, out, _ = run([dspark, "inspect", "--json", path])
    if rc == 0:
        tensors = [(t["type"], t["ne"]) for t in json.loads(out)["tensors"]]
    else:
        from gguf import GGUFReader

        tensors = [(t.tensor_type.name, list(t.shape)) for t in GGUFReader(path).tensors]
    mats, vecs = Counter(), Counter()
    for ty, ne in tensors:
        (mats if len([d for d in ne if d > 1]) >= 2 else vecs)[ty] += 1
    return dict(sorted(mats.items())), dict(sorted(vecs.items()))


def fallbacks(log_path):
    """llama-quantize's fallback lines: tensor, wanted type, type used."""
    out = []
    if not os.path.exists(log_path):
        return out
    pat = re.compile(r"(\S+)\s+- ncols\s+(\d+) not divisible by\s+(\d+) \(required for type\s+(\S+)\).*falling back to\s+(\S+)")
    with open(log_path, errors="replace") as f:
        for line in f:
            m = pat.search(line)
            if m:
                out.append({"tensor": m[1], "cols": int(m[2]), "wanted": m[4], "used": m[5]})
    return out


def common_prefix(a, b):
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def llama(a, path, text, *extra):
    """llama.cpp's greedy run: ({prompt_tokens, tokens, top}, None) or (None, error)."""
    with tempfile.NamedTemporaryFile(suffix=".json") as tmp:
        rc, out, err = run([a.llama_dump, path, "--prompt", text, "--greedy", str(a.tokens),
                            "--gen-top", str(a.top), "--no-logits", "--threads", str(a.threads),
                            "--out", tmp.name, *extra], env=LLAMA_ENV)
        if rc != 0:
            return None, f"exit {rc}: {tail(err)}"
        d = json.load(open(tmp.name))
        return {"prompt_tokens": d["tokens"], "tokens": d["generated"], "top": d["gen_top"]}, None


def one_prompt(a, model, path, text, draft):
    """Every engine on one prompt of one file."""
    rec = {}
    rc, out, err = run([a.dspark, "generate", "-m", path, "-p", text, "-n", str(a.tokens),
                        "--ignore-eos", "--json", "-t", str(a.threads)])
    if rc != 0:
        rec["dspark_error"] = f"exit {rc}: {tail(err)}"
    else:
        g = json.loads(out)
        rec["dspark"] = {"prompt_tokens": g["prompt_tokens"], "tokens": g["tokens"],
                         "tokens_per_second": g["stats"]["tokens_per_second"]}
    rec["llama"], err = llama(a, path, text)
    if err:
        rec["llama_error"] = err
    if "dspark" in rec and os.path.exists(a.greedy_top):
        rc, out, err = run([a.greedy_top, path, "--tokens", ",".join(map(str, rec["dspark"]["prompt_tokens"])),
                            "-n", str(a.tokens), "-k", str(a.top), "-t", str(a.threads)])
        if rc != 0:
            rec["greedy_top_error"] = f"exit {rc}: {tail(err)}"
        else:
            rec["dspark_top"] = json.loads(out)
    if "dspark" in rec and draft:
        rc, out, err = run([a.dspark, "generate", "-m", path, "--draft", draft, "-p", text,
                            "-n", str(a.tokens), "--ignore-eos", "--json", "-t", str(a.threads)])
        if rc != 0:
            rec["spec_error"] = f"exit {rc}: {tail(err)}"
        else:
            g = json.loads(out)
            rec["spec"] = {"tokens": g["tokens"], "tokens_per_second": g["stats"]["tokens_per_second"],
                           "mean_acceptance_length": g["stats"]["mean_acceptance_length"]}
    fa_off(a, path, text, rec)
    return rec


def fa_off(a, path, text, rec):
    """llama.cpp against itself: without flash attention (F16 cache still), a reference for
    how far its own arithmetic choices move logits and tokens. Added to runs kept from
    before it was measured."""
    if rec.get("llama") and "llama_fa_off" not in rec and "llama_fa_off_error" not in rec:
        rec["llama_fa_off"], err = llama(a, path, text, "--fa", "off")
        if err:
            del rec["llama_fa_off"]
            rec["llama_fa_off_error"] = err


def deltas(a, b, steps):
    """|a − b| of every logit in both top lists, over the first `steps` steps."""
    out = []
    for s in range(min(steps, len(a["top"]), len(b["top"]))):
        bm = dict((i, v) for i, v in b["top"][s])
        out += [abs(v - bm[i]) for i, v in a["top"][s] if i in bm]
    return out


def compare(rec):
    """Adds the comparison of one prompt's runs to rec."""
    if "dspark" not in rec or "llama" not in rec:
        return
    d, l = rec["dspark"], rec["llama"]
    c = rec["cmp"] = {}
    c["prompt_equal"] = d["prompt_tokens"] == l["prompt_tokens"]
    c["equal"] = c["prompt_equal"] and d["tokens"] == l["tokens"]
    c["prefix"] = common_prefix(d["tokens"], l["tokens"]) if c["prompt_equal"] else 0
    if "spec" in rec:
        c["spec_equal"] = rec["spec"]["tokens"] == d["tokens"]
    off = rec.get("llama_fa_off")
    if off and off["prompt_tokens"] == l["prompt_tokens"]:
        # llama.cpp -fa on against -fa off: tokens, and logit Δ up to their first divergence.
        c["self_equal"] = off["tokens"] == l["tokens"]
        c["dspark_equal_fa_off"] = c["prompt_equal"] and off["tokens"] == d["tokens"]
        c["self_deltas"] = deltas(off, l, common_prefix(off["tokens"], l["tokens"]) + 1)
    t = rec.get("dspark_top")
    if not t or not c["prompt_equal"]:
        return
    c["greedy_top_equal"] = t["tokens"] == d["tokens"]
    # Logit Δ over the steps both engines saw with the same context (the divergence step's
    # included).
    c["deltas"] = deltas(t, l, c["prefix"] + 1)
    c["max_delta"] = max(c["deltas"], default=None)
    if c["equal"] or not c["greedy_top_equal"] or c["prefix"] >= len(l["top"]):
        return
    k = c["prefix"]
    lt, dt = l["top"][k], t["top"][k]
    lp, dp = l["tokens"][k], d["tokens"][k]
    lmap, dmap = dict((i, v) for i, v in lt), dict((i, v) for i, v in dt)
    # llama.cpp without flash attention at the same step, when it got there the same way.
    off = rec.get("llama_fa_off")
    if off and off["prompt_tokens"] == l["prompt_tokens"] and common_prefix(off["tokens"], l["tokens"]) >= k \
            and len(off["tokens"]) > k:
        fa_off = "dspark's" if off["tokens"][k] == dp else "llama.cpp's" if off["tokens"][k] == lp else "other"
    else:
        fa_off = "—"
    # Each engine's margin of its own pick over the other's pick; where the other's pick is
    # not in its top-K, only a lower bound (its best minus its K-th logit) is known.
    ml, ml_bound = (lmap[lp] - lmap[dp], False) if dp in lmap else (lt[0][1] - lt[-1][1], True)
    md, md_bound = (dmap[dp] - dmap[lp], False) if lp in dmap else (dt[0][1] - dt[-1][1], True)
    tie_eps = max(TIE_FLOOR, TIE_FACTOR * (c["max_delta"] or 0.0))
    within = ml <= tie_eps and md <= tie_eps
    c["divergence"] = {
        "position": k, "llama_top": lt[:2], "dspark_top": dt[:2],
        "llama_margin": ml, "llama_margin_is_bound": ml_bound,
        "dspark_margin": md, "dspark_margin_is_bound": md_bound,
        "tie_eps": tie_eps, "llama_fa_off_pick": fa_off,
        # "unsure": within the tolerance by a lower bound only (the other's pick lies below
        # this engine's K-th logit, but that K-th is within the tolerance of its best).
        "near_tie": "no" if not within else "unsure" if ml_bound or md_bound else "yes",
    }


def mean(xs):
    return statistics.mean(xs) if xs else None


def summarize(model, name, path, recs, hist, fb, has_draft):
    cmps = [r.get("cmp") for r in recs]
    done = [c for c in cmps if c]
    errors = sorted({f"{k[:-len('_error')]}: {r[k]}" for r in recs
                     for k in ("dspark_error", "llama_error", "greedy_top_error", "spec_error", "llama_fa_off_error")
                     if k in r})
    s = {
        "model": model, "type": name, "file": path, "bytes": os.path.getsize(path),
        "matrices": hist[0], "vectors": hist[1], "fallbacks": fb,
        "prompts": len(recs), "compared": len(done),
        "prompt_equal": sum(c["prompt_equal"] for c in done),
        "equal": sum(c["equal"] for c in done),
        "mean_prefix": statistics.mean(c["prefix"] for c in done) if done else None,
        "max_delta": max((x for c in done for x in c.get("deltas", [])), default=None),
        "mean_delta": mean([x for c in done for x in c.get("deltas", [])]),
        "divergences": [dict(prompt=i, **c["divergence"]) for i, c in enumerate(cmps) if c and "divergence" in c],
        "unexplained": [i for i, c in enumerate(cmps) if c and not c["equal"] and "divergence" not in c],
        "greedy_top_mismatch": [i for i, c in enumerate(cmps) if c and c.get("greedy_top_equal") is False],
        "errors": errors,
        "tokens_per_second": statistics.median(r["dspark"]["tokens_per_second"] for r in recs if "dspark" in r)
        if any("dspark" in r for r in recs) else None,
    }
    s["per_prompt"] = [
        {k: v for k, v in (c or {"error": True}).items() if k not in ("deltas", "self_deltas", "divergence")}
        | {"dspark_tokens": r.get("dspark", {}).get("tokens"), "llama_tokens": (r.get("llama") or {}).get("tokens")}
        for c, r in zip(cmps, recs)
    ]
    s["near_ties"] = sum(d["near_tie"] == "yes" for d in s["divergences"])
    s["unsure_ties"] = sum(d["near_tie"] == "unsure" for d in s["divergences"])
    selfs = [c for c in done if "self_equal" in c]
    s["self_runs"] = len(selfs)
    s["self_equal"] = sum(c["self_equal"] for c in selfs)
    s["dspark_equal_fa_off"] = sum(c["dspark_equal_fa_off"] for c in selfs)
    s["self_max_delta"] = max((x for c in selfs for x in c["self_deltas"]), default=None)
    s["self_mean_delta"] = mean([x for c in selfs for x in c["self_deltas"]])
    s["fa_off_picks_dspark"] = sum(d["llama_fa_off_pick"] == "dspark's" for d in s["divergences"])
    if has_draft:
        specs = [c["spec_equal"] for c in done if "spec_equal" in c]
        s["spec_equal"] = sum(specs)
        s["spec_runs"] = len(specs)
        spec = [r["spec"] for r in recs if "spec" in r]
        s["spec_tokens_per_second"] = statistics.median(x["tokens_per_second"] for x in spec) if spec else None
        s["spec_mean_acceptance_length"] = statistics.mean(x["mean_acceptance_length"] for x in spec) if spec else None
    return s


def fmt_types(h):
    return ", ".join(f"{k} {v}" for k, v in sorted(h.items(), key=lambda kv: (-kv[1], kv[0])))


def fmt_top(top):
    return " ".join(f"{i}:{v:.4f}" for i, v in top)


def fmt_margin(m, bound):
    return f"≥ {m:.4f}" if bound else f"{m:.4f}"


def fmt_num(x, spec):
    return "—" if x is None else format(x, spec)


def report(a, summaries, wall):
    lines = ["# dspark vs llama.cpp on requantized targets",
             "",
             f"bench/requant_vs_llama.sh: {a.tokens} greedy tokens per prompt (end of sequence ignored), "
             f"{a.threads} threads; {wall}.",
             "",
             "- matrix types: tensors of 2+ dimensions (norms stay F32).",
             "- prompt ids: dspark's tokenization of the prompt == llama.cpp's.",
             "- = llama.cpp: dspark's greedy ids == llama.cpp's (llama-completion's defaults: flash "
             "attention auto, F16 cache, weight repacking); common prefix: mean leading ids in common.",
             f"- ties: divergences where each engine's margin of its own pick over the other's pick is "
             f"≤ max({TIE_FLOOR}, {TIE_FACTOR} × the prompt's max Δ); unsure: the same, but one margin is "
             f"only bounded (≥ best − {a.top}th logit: the other's pick is not in that engine's top {a.top}).",
             f"- Δ: |dspark − llama.cpp| of each logit in both top-{a.top} lists, over the steps both "
             f"engines saw with the same context: mean (max).",
             "- llama.cpp self: llama.cpp with -fa off against itself with its default (the weights and "
             "everything else unchanged): equal runs, and the same Δ between those two.",
             "- dspark tok/s: median of `dspark generate`'s tokens_per_second (prefill included) on a "
             "shared 2-core machine: indicative only.",
             ""]
    for model in a.models:
        ss = [s for s in summaries if s["model"] == model]
        if not ss:
            continue
        draft = model == "code"
        lines += [f"## {model}", ""]
        head = ("| type | MiB | matrix types | prompt ids | = llama.cpp | common prefix | divergences (ties, unsure) "
                "| Δ mean (max) | llama.cpp self: equal | self Δ mean (max) |")
        sep = "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|"
        if draft:
            head += " spec = AR | τ |"
            sep += "---|---:|"
        head += " dspark tok/s |"
        sep += "---:|"
        lines += [head, sep]
        for s in ss:
            n = s["compared"]
            pct = f" ({100 * s['equal'] / n:.0f} %)" if n else ""
            row = (f"| {s['type']} | {s['bytes'] / 2**20:.2f} | {fmt_types(s['matrices'])} | "
                   f"{s['prompt_equal']}/{n} | **{s['equal']}/{n}**{pct} | {fmt_num(s['mean_prefix'], '.1f')} | "
                   f"{len(s['divergences']) + len(s['unexplained'])} ({s['near_ties']}, {s['unsure_ties']}) | "
                   f"{fmt_num(s['mean_delta'], '.4f')} ({fmt_num(s['max_delta'], '.3f')}) | "
                   f"{s['self_equal']}/{s['self_runs']} | "
                   f"{fmt_num(s['self_mean_delta'], '.4f')} ({fmt_num(s['self_max_delta'], '.3f')}) |")
            if draft:
                ok = "yes" if s["spec_runs"] == s["prompts"] and s["spec_equal"] == s["spec_runs"] and s["spec_runs"] else "**NO**"
                row += f" {ok} ({s['spec_equal']}/{s['spec_runs']}) | {fmt_num(s['spec_mean_acceptance_length'], '.2f')} |"
            row += f" {fmt_num(s['tokens_per_second'], '.0f')} |"
            if not n:
                row = (f"| {s['type']} | {s['bytes'] / 2**20:.2f} | {fmt_types(s['matrices'])} | "
                       f"not run (below) |")
            lines.append(row)
        lines.append("")
        for s in ss:
            if s["errors"]:
                lines.append(f"- **{s['type']}**: " + "; ".join(e.replace("\n", " ⏎ ") for e in s["errors"]))
            if s["fallbacks"]:
                fb = Counter(f"{f['wanted']}→{f['used']}" for f in s["fallbacks"])
                lines.append(f"- {s['type']}: llama-quantize fell back on {len(s['fallbacks'])} tensors ("
                             + ", ".join(f"{k} ×{v}" for k, v in fb.items()) + ")")
            if s["greedy_top_mismatch"]:
                lines.append(f"- {s['type']}: greedy_top ≠ dspark generate on prompts {s['greedy_top_mismatch']}")
            if s["unexplained"]:
                lines.append(f"- {s['type']}: differing without a divergence record on prompts {s['unexplained']}")
        lines += ["", f"### {model}: divergences", "",
                  "| type | prompt | step | llama.cpp top 2 (id:logit) | dspark top 2 | llama.cpp margin | dspark margin | near-tie | llama.cpp -fa off picks |",
                  "|---|---:|---:|---|---|---:|---:|---|---|"]
        for s in ss:
            for d in s["divergences"]:
                lines.append(f"| {s['type']} | {d['prompt']} | {d['position']} | {fmt_top(d['llama_top'])} | "
                             f"{fmt_top(d['dspark_top'])} | {fmt_margin(d['llama_margin'], d['llama_margin_is_bound'])} | "
                             f"{fmt_margin(d['dspark_margin'], d['dspark_margin_is_bound'])} | "
                             f"{ {'yes': 'yes', 'unsure': 'unsure', 'no': '**no**'}[d['near_tie']]} | "
                             f"{d['llama_fa_off_pick']} |")
        lines.append("")
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--repo", required=True)
    p.add_argument("--models", nargs="+", required=True)
    p.add_argument("--types", nargs="+", required=True)
    p.add_argument("--n-code", type=int, default=12)
    p.add_argument("--n-chat", type=int, default=12)
    p.add_argument("--tokens", type=int, default=48)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--top", type=int, default=5)
    p.add_argument("--dspark", required=True)
    p.add_argument("--greedy-top", required=True)
    p.add_argument("--llama-dump", required=True)
    p.add_argument("--redo", default="0")
    a = p.parse_args()
    summaries = []
    t0 = time.time()
    reused = 0
    for model in a.models:
        texts = prompts(a.repo, model, a.n_code if model == "code" else a.n_chat)
        draft = os.path.join(a.out, "code", "draft.gguf") if model == "code" else None
        for name in a.types:
            path = os.path.join(a.out, model, f"{name}.gguf")
            if not os.path.exists(path):
                print(f"requant: {model} {name}: no file (llama-quantize failed?)", file=sys.stderr)
                continue
            cache = os.path.join(a.out, model, "runs", f"{name}.json")
            key = {"prompts": texts, "tokens": a.tokens, "threads": a.threads, "top": a.top,
                   "file_bytes": os.path.getsize(path), "file_mtime": os.path.getmtime(path)}
            old = json.load(open(cache)) if os.path.exists(cache) else {}
            if a.redo != "1" and old.get("key") == key:
                recs = old["runs"]
                reused += 1
                if any("llama_fa_off" not in r and "llama_fa_off_error" not in r and r.get("llama") for r in recs):
                    print(f"requant: {model} {name}: llama.cpp -fa off", file=sys.stderr)
                    for r, t in zip(recs, texts):
                        fa_off(a, path, t, r)
                    with open(cache + ".tmp", "w") as f:
                        json.dump({"key": key, "runs": recs}, f)
                    os.replace(cache + ".tmp", cache)
            else:
                print(f"requant: {model} {name}: {len(texts)} prompts", file=sys.stderr)
                recs = [one_prompt(a, model, path, t, draft) for t in texts]
                with open(cache + ".tmp", "w") as f:
                    json.dump({"key": key, "runs": recs}, f)
                os.replace(cache + ".tmp", cache)
            for r in recs:
                compare(r)
            s = summarize(model, name, path, recs, histogram(a.dspark, path),
                          fallbacks(os.path.join(a.out, model, f"{name}.quantize.log")), draft is not None)
            summaries.append(s)
            print(f"requant: {model} {name}: equal {s['equal']}/{s['compared']}, prefix {s['mean_prefix']}, "
                  f"errors {len(s['errors'])}", file=sys.stderr)
    wall = f"this step took {time.time() - t0:.0f} s" + (
        f", reusing the kept runs of {reused} of the {len(summaries)} files" if reused else "")
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump({"tokens": a.tokens, "threads": a.threads, "summaries": summaries}, f, indent=1)
    with open(os.path.join(a.out, "results.md"), "w") as f:
        f.write(report(a, summaries, wall) + "\n")


if __name__ == "__main__":
    main()

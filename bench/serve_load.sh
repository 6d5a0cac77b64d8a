#!/usr/bin/env bash
# serve_load.sh — dspark serve against llama-server on the same files and slots: streamed chat
# completions of held-out conversations at several concurrencies (tests/python/load.py, the
# openai client), each server started afresh per run; aggregate and per-request tokens/s,
# time to first token, p50 / p99 latency, server memory through the run, and whether each
# engine's replies at T = 0 equal its own one-at-a-time replies.
#
# Usage:  bench/serve_load.sh
#
# Environment (defaults in brackets):
#   CONCURRENCY  concurrencies to run ["1 4 8"]; -np is set to each
#   REQUESTS     requests per run [32]
#   MAX_TOKENS   max_tokens per request [64]
#   THREADS      threads of every server [2]
#   PROMPTS      conversations, {"messages": [...]} per line [examples/smol-pair/heldout.jsonl, first 16]
#   ENGINES      which servers ["dspark-plain dspark-spec llama-plain llama-spec"]
#   LLAMA_BIN    llama.cpp's build [/tmp/llamacpp/build/bin]
#   P_MIN        llama-server --spec-draft-p-min [0]
#   OUT          outputs: serve-load.{md,json} and one JSON per run [/tmp/bench/serve]
#
# Files: the pair's target (examples/smol-pair/target.gguf, fetch.sh), its drafter converted
# by dspark in both layouts (the dflash-draft file for dspark, the llama.cpp layout with the
# target's vocabulary for llama-server's --spec-type draft-dspark). llama-server's -c is
# 2048 × slots (its -c is split among slots; dspark's slots get the same 2048 each).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CONCURRENCY=${CONCURRENCY:-"1 4 8"}
REQUESTS=${REQUESTS:-32}
MAX_TOKENS=${MAX_TOKENS:-64}
THREADS=${THREADS:-2}
ENGINES=${ENGINES:-"dspark-plain dspark-spec llama-plain llama-spec"}
LLAMA_BIN=${LLAMA_BIN:-/tmp/llamacpp/build/bin}
P_MIN=${P_MIN:-0}
OUT=${OUT:-/tmp/bench/serve}
DSPARK=${DSPARK:-$REPO/target/release/dspark}
PY=${PY:-$REPO/.venv/bin/python}
TARGET=$REPO/examples/smol-pair/target.gguf
mkdir -p "$OUT"
PROMPTS=${PROMPTS:-$OUT/prompts.jsonl}
[ -f "$PROMPTS" ] || head -16 "$REPO/examples/smol-pair/heldout.jsonl" > "$PROMPTS"
[ -f "$TARGET" ] || { echo "missing $TARGET: run examples/smol-pair/fetch.sh" >&2; exit 1; }

"$DSPARK" convert "$REPO/examples/smol-pair/draft" -o "$OUT/draft.gguf" --force -q
"$DSPARK" convert "$REPO/examples/smol-pair/draft" -o "$OUT/draft-llama.gguf" --force -q \
  --layout llama.cpp --vocab-from "$TARGET"

port=8390
run() {  # engine concurrency
  local engine=$1 c=$2 pid
  port=$((port + 1))
  case $engine in
    dspark-plain) "$DSPARK" serve -m "$TARGET" --port $port -np "$c" -c $((2048 * c)) -t "$THREADS" 2>"$OUT/$engine-$c.log" & ;;
    dspark-spec)  "$DSPARK" serve -m "$TARGET" -md "$OUT/draft.gguf" --port $port -np "$c" -c $((2048 * c)) -t "$THREADS" 2>"$OUT/$engine-$c.log" & ;;
    llama-plain)  "$LLAMA_BIN/llama-server" -m "$TARGET" --port $port -np "$c" -c $((2048 * c)) -t "$THREADS" -tb "$THREADS" 2>"$OUT/$engine-$c.log" >/dev/null & ;;
    llama-spec)   "$LLAMA_BIN/llama-server" -m "$TARGET" -md "$OUT/draft-llama.gguf" --spec-type draft-dspark \
                    --spec-draft-n-max 8 --spec-draft-p-min "$P_MIN" --port $port -np "$c" -c $((2048 * c)) \
                    -t "$THREADS" -tb "$THREADS" 2>"$OUT/$engine-$c.log" >/dev/null & ;;
  esac
  pid=$!
  for _ in $(seq 200); do
    curl -sf "localhost:$port/health" >/dev/null 2>&1 && { sleep 0.5; break; }
    sleep 0.1
  done
  "$PY" "$REPO/tests/python/load.py" "http://127.0.0.1:$port" --requests "$REQUESTS" --concurrency "$c" \
    --messages "$PROMPTS" --max-tokens "$MAX_TOKENS" --pid "$pid" > "$OUT/$engine-$c.json"
  kill -TERM "$pid"; wait "$pid" 2>/dev/null || true
}

for c in $CONCURRENCY; do
  for e in $ENGINES; do
    echo "[$(date +%T)] $e, concurrency $c" >&2
    run "$e" "$c"
  done
done

"$PY" - "$OUT" "$CONCURRENCY" "$ENGINES" "$REQUESTS" "$MAX_TOKENS" "$THREADS" <<'EOF'
import json, sys
out, cs, engines, requests, max_tokens, threads = sys.argv[1], sys.argv[2].split(), sys.argv[3].split(), *sys.argv[4:]
rows, doc = [], {}
for c in cs:
    base = {}
    for e in engines:
        d = json.load(open(f"{out}/{e}-{c}.json"))
        doc[f"{e}-{c}"] = {k: v for k, v in d.items() if k != "texts"}
        base[e] = d["texts"]
        f = lambda v, s=1.0: "-" if v is None else f"{v * s:.1f}"  # noqa: E731
        rows.append(f"| {c} | {e} | {d['ok']}/{d['requests']} | {d['aggregate_tokens_per_s']:.1f} | "
                    f"{f(d['per_request_tokens_per_s_median'])} | {f(d['ttft_p50_s'], 1e3)} | "
                    f"{f(d['latency_p50_s'], 1e3)} | {f(d['latency_p99_s'], 1e3)} | "
                    f"{d['rss_kib']['first'] // 1024 if d['rss_kib']['first'] else '-'} → "
                    f"{d['rss_kib']['max'] // 1024 if d['rss_kib']['max'] else '-'} |")
    # T = 0: each engine's replies at this concurrency against its replies one at a time.
    for e in engines:
        try:
            one = json.load(open(f"{out}/{e}-{cs[0]}.json"))["texts"]
            same = sum(a == b for a, b in zip(base[e], one))
            doc[f"{e}-{c}"]["equal_to_concurrency_" + cs[0]] = same
        except FileNotFoundError:
            pass
md = [f"# Serving, one run — {requests} streamed chat requests of max_tokens {max_tokens}, "
      f"{threads} threads, -np = concurrency, T = 0", "",
      "| concurrency | engine | ok | aggregate tok/s | per-request tok/s (median) | TTFT p50 ms | "
      "latency p50 ms | latency p99 ms | RSS MiB first → max |", "|---|---|---|---|---|---|---|---|---|", *rows, ""]
for k, v in doc.items():
    if "equal_to_concurrency_" + cs[0] in v:
        md.append(f"- {k}: replies equal to its concurrency-{cs[0]} replies: {v['equal_to_concurrency_' + cs[0]]}/{v['requests']}")
open(f"{out}/serve-load.md", "w").write("\n".join(md) + "\n")
json.dump(doc, open(f"{out}/serve-load.json", "w"), indent=1)
print("\n".join(md))
EOF

#!/bin/sh
# The seed drafter's block under two dspark binaries, alternated in one run (the host's
# bandwidth swings by ±30 % within minutes, so only paired runs compare):
#
#   bench/draft_ab.sh BEFORE_BIN AFTER_BIN [DRAFT.gguf]
#
# DRAFT defaults to the seed's full geometry, `dspark synth --geometry kimi-k3-dspark`
# converted to Q8_0 (2.39 GB; bench/draft_k3.sh makes it). ROUNDS [3] pairs, RUNS [10]
# timed blocks each; `bench --draft` without --target drafts on a random head-only target.
set -eu
BEFORE=$1
AFTER=$2
DRAFT=${3:-/tmp/dspark-bench/kimi-k3-dspark-Q8_0.gguf}
ROUNDS=${ROUNDS:-3}
RUNS=${RUNS:-10}
i=1
while [ "$i" -le "$ROUNDS" ]; do
    for b in "$BEFORE" "$AFTER"; do
        printf 'round %s %s: ' "$i" "$b"
        "$b" bench --draft "$DRAFT" --runs "$RUNS" --json | python3 -c '
import json, sys
d = json.load(sys.stdin)
r = d["drafter"]
p = {k: round(v["median_ms"], 1) for k, v in r["phases"].items()}
block, append = r["draft"]["median_ms"], r["append_context"]["median_ms"]
bw, ratio = d["memory_bandwidth_gb_s"], r["draft_over_bound"]
print(f"block {block:.1f} ms {p} append {append:.1f} ms; bandwidth {bw:.1f} GB/s; block / bound {ratio:.3f}")'
    done
    i=$((i + 1))
done

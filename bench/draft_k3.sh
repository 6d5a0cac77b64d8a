#!/usr/bin/env bash
# Kimi K3 drafter block time against the memory-bandwidth bound of the bytes it streams.
# The K3 target is far too large to build, so `dspark bench --draft` drafts on a random
# head-only target of the drafter's vocabulary and hidden size (its Q8_0 LM head, 1.25 GB,
# is part of the block's bytes). Reuses the synthetic K3 checkpoint and conversion of
# bench/convert_k3.sh when present in $WORK.
#
# Usage: bash bench/draft_k3.sh         WORK=/path THREADS=2 RUNS=10 ROUNDS=3 bash bench/draft_k3.sh
set -euo pipefail
cd "$(dirname "$0")/.."
WORK=${WORK:-/tmp/dspark-bench}
THREADS=${THREADS:-2}
RUNS=${RUNS:-10}
ROUNDS=${ROUNDS:-3}
DSPARK=target/release/dspark
cargo build --release -q
mkdir -p "$WORK"
SRC="$WORK/kimi-k3-dspark"
[ -f "$SRC/model.safetensors" ] || "$DSPARK" synth --geometry kimi-k3-dspark --out "$SRC" -q
GGUF="$WORK/kimi-k3-dspark-Q8_0.gguf"
[ -f "$GGUF" ] || "$DSPARK" convert "$SRC" -o "$GGUF" --report "$WORK/kimi-k3-dspark-Q8_0.report.json" -q
cat "$GGUF" > /dev/null
for r in $(seq "$ROUNDS"); do
  "$DSPARK" bench --draft "$GGUF" --threads "$THREADS" --runs "$RUNS" --json > "$WORK/draft_k3.$r.json"
done
python3 - "$WORK" "$ROUNDS" <<'PY'
import json, sys
work, rounds = sys.argv[1], int(sys.argv[2])
for r in range(1, rounds + 1):
    d = json.load(open(f"{work}/draft_k3.{r}.json"))
    k = d["drafter"]
    p = {n: v["median_ms"] for n, v in k["phases"].items()}
    print(f"run {r}: bandwidth {d['memory_bandwidth_gb_s']:.1f} GB/s | block {k['draft']['median_ms']:.1f} ms"
          f" (layers {p['layers']:.1f}, LM head {p['lm_head']:.1f}, heads {p['heads']:.1f})"
          f" | bound {k['bound_ms']['block']:.1f} ms (drafter {k['bound_ms']['drafter']:.1f} + LM head {k['bound_ms']['lm_head']:.1f})"
          f" | ratio {k['draft_over_bound']:.2f} | append {k['append_context']['median_ms']:.1f} ms")
PY

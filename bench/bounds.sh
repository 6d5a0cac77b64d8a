#!/usr/bin/env bash
# Issue #22's bound criterion in one run: the seed's Kimi K3 drafter block (`bench --draft`,
# the files of bench/draft_k3.sh) and a Qwen3-0.6B-shaped Q8_0 decode step (`bench --target
# --verify 1`), alternated ROUNDS times, each against the bandwidth `bench` reads beside
# it (a plain multi-threaded read of the step's own mapped pages, before and after the
# steps; the bound takes the higher), and each timed run against a read just before it
# (`--paired-reads`: the host's bandwidth changes from minute to minute, and a run is then
# set against the memory it met). Prints one line per round and the medians of both; the
# raw JSON stays in $WORK.
#
# Usage: bash bench/bounds.sh          WORK=/path THREADS=2 RUNS=8 ROUNDS=5 bash bench/bounds.sh
set -euo pipefail
cd "$(dirname "$0")/.."
WORK=${WORK:-/tmp/dspark-bench}
THREADS=${THREADS:-2}
RUNS=${RUNS:-8}
ROUNDS=${ROUNDS:-5}
DSPARK=target/release/dspark
# The drafter's files (no timed rounds here).
WORK="$WORK" ROUNDS=0 bash bench/draft_k3.sh
Q06="$WORK/qwen3-0.6b"
[ -f "$Q06/target.gguf" ] || "$DSPARK" synth --geometry qwen3-0.6b --seed 1 --out "$Q06" -q
cat "$Q06/target.gguf" > /dev/null
for r in $(seq "$ROUNDS"); do
  "$DSPARK" bench --draft "$WORK/kimi-k3-dspark-Q8_0.gguf" --threads "$THREADS" --runs "$RUNS" \
    --paired-reads --json > "$WORK/bounds.draft.$r.json"
  "$DSPARK" bench --target "$Q06/target.gguf" --verify 1 --threads "$THREADS" --runs 20 \
    --paired-reads --json > "$WORK/bounds.decode.$r.json"
done
python3 - "$WORK" "$ROUNDS" <<'PY'
import json, statistics, sys
work, rounds = sys.argv[1], int(sys.argv[2])
block, decode, pblock, pdecode = [], [], [], []
for r in range(1, rounds + 1):
    d = json.load(open(f"{work}/bounds.draft.{r}.json"))
    k = d["drafter"]
    q = json.load(open(f"{work}/bounds.decode.{r}.json"))
    t = q["target"]
    b = k["draft_over_bound"]
    s = t["decode"]["median_ms"] / t["decode_bound_ms"]
    pb = k["paired"]["over_bound"]["median"]
    ps = t["decode"]["paired"]["over_bound"]["median"]
    block.append(b)
    decode.append(s)
    pblock.append(pb)
    pdecode.append(ps)
    print(f"round {r}: drafter block {k['draft']['median_ms']:.1f} ms / bound {k['bound_ms']['block']:.1f}"
          f" = {b:.2f} (read {d['memory_bandwidth_gb_s']:.1f} GB/s)"
          f" | decode {t['decode']['median_ms']:.1f} ms / bound {t['decode_bound_ms']:.1f}"
          f" = {s:.2f} (read {q['memory_bandwidth_gb_s']:.1f} GB/s)"
          f" | paired: block {pb:.2f} (reads {k['paired']['reads_gb_s']['min']:.1f}-{k['paired']['reads_gb_s']['max']:.1f}),"
          f" decode {ps:.2f} (reads {t['decode']['paired']['reads_gb_s']['min']:.1f}-{t['decode']['paired']['reads_gb_s']['max']:.1f})")
print(f"median: drafter block {statistics.median(block):.2f}x, decode {statistics.median(decode):.2f}x its bound")
print(f"median, each run against its own read: drafter block {statistics.median(pblock):.2f}x,"
      f" decode {statistics.median(pdecode):.2f}x")
PY

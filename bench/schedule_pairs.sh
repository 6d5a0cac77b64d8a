#!/usr/bin/env bash
# schedule_pairs.sh — does the adaptive schedule ever lose? Paired runs of plain decoding,
# whole-block speculation (--schedule fixed) and the adaptive schedule on one pair, the
# three modes run back to back (their order rotated run by run, so a machine's drift
# spreads over all three), each run scored against the better of the other two of its
# own triple.
#
# Usage:  bench/schedule_pairs.sh code|smol|zero
#
#   code   examples/code-pair (a Qwen3 target and its drafter trained on CPython; drafts
#          accepted often: whole blocks win), prompt examples/code-pair/prompt.txt
#   smol   examples/smol-pair (SmolLM2-135M-Instruct and the drafter trained for it), a
#          chat turn (`generate --chat -p MESSAGE`)
#   zero   the smol target with a random drafter of the smol drafter's shape (ZERO_DRAFT,
#          made by train/random_drafter.py): acceptance ~ 0, speculation can only cost
#
# Environment (defaults in brackets):
#   RUNS      triples [15]
#   TOKENS    new tokens per run, EOS ignored [512]
#   THREADS   worker threads [2]
#   MESSAGE   the chat turn of smol and zero ["Give me three tips for sleeping better."]
#   ZERO_DRAFT  the random drafter folder [/tmp/zero/draft]
#   DSPARK    dspark binary [REPO/target/release/dspark]
#   OUT       output dir: schedule-$PAIR.{md,json}, work-schedule-$PAIR/ [/tmp/bench]
#   NICE      prefix for every measured command ["nice -n 5"]
#   REPORT_ONLY  1: no runs, the report again from the work dir's outputs [0]
#
# Figures: each run's generation-phase rate, dspark's own `eval_tokens_per_second`
# (tokens after the first / seconds after the prefill; loading and prefill excluded, the
# same for the three modes). Per triple: adaptive ÷ max(plain, fixed). Reported: median
# and minimum of that ratio; the median adaptive rate over the better of the plain and
# fixed medians (where plain and fixed run about as fast, the better of each triple's two
# is biased upwards by the noise, the ratio of medians is not); medians of each mode's
# rate; the adaptive runs' rounds and plain steps.
set -euo pipefail

PAIR=${1:-}
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
RUNS=${RUNS:-15}
TOKENS=${TOKENS:-512}
THREADS=${THREADS:-2}
MESSAGE=${MESSAGE:-"Give me three tips for sleeping better."}
ZERO_DRAFT=${ZERO_DRAFT:-/tmp/zero/draft}
DSPARK=${DSPARK:-$REPO/target/release/dspark}
OUT=${OUT:-/tmp/bench}
NICE=${NICE:-nice -n 5}

case "$PAIR" in
  code)
    TARGET=$REPO/examples/code-pair/target.gguf
    DRAFT_SRC=$REPO/examples/code-pair/draft
    INPUT=(-f "$REPO/examples/code-pair/prompt.txt") ;;
  smol)
    TARGET=$REPO/examples/smol-pair/target.gguf
    DRAFT_SRC=$REPO/examples/smol-pair/draft
    INPUT=(--chat --chat-date 2026-12-03 -p "$MESSAGE") ;;
  zero)
    TARGET=$REPO/examples/smol-pair/target.gguf
    DRAFT_SRC=$ZERO_DRAFT
    INPUT=(--chat --chat-date 2026-12-03 -p "$MESSAGE") ;;
  *) echo "usage: $0 code|smol|zero   (see the header for the environment)" >&2; exit 2 ;;
esac
for f in "$TARGET" "$DRAFT_SRC/config.json" "$DSPARK"; do
  [ -e "$f" ] || { echo "missing: $f" >&2; exit 2; }
done

W=$OUT/work-schedule-$PAIR
mkdir -p "$W"
log() { echo "[$(date +%T)] $*" >&2; }
DRAFT=$W/draft.gguf
[ "${REPORT_ONLY:-0}" = 1 ] || "$DSPARK" convert "$DRAFT_SRC" -o "$DRAFT" --force -q

MODES=(plain fixed adaptive)
run() {  # mode run-index
  local o=$W/r$(printf %02d "$2")-$1.json extra=()
  case $1 in
    fixed) extra=(--draft "$DRAFT" --schedule fixed) ;;
    adaptive) extra=(--draft "$DRAFT" --schedule adaptive) ;;
  esac
  $NICE "$DSPARK" generate -m "$TARGET" "${INPUT[@]}" -n "$TOKENS" --ignore-eos -t "$THREADS" \
    "${extra[@]}" --json > "$o" 2> "$o.err"
}
for ((r = 0; r < RUNS; r++)); do
  [ "${REPORT_ONLY:-0}" = 1 ] && break
  order=()
  for ((k = 0; k < 3; k++)); do order+=("${MODES[(r + k) % 3]}"); done
  log "run $((r + 1))/$RUNS: ${order[*]}"
  for m in "${order[@]}"; do run "$m" "$r"; done
done
[ "${REPORT_ONLY:-0}" = 1 ] || cut -d' ' -f1-3 /proc/loadavg > "$W/load"

python3 - "$W" "$OUT/schedule-$PAIR" "$PAIR" "$RUNS" "$TOKENS" "$THREADS" <<'EOF'
import json, pathlib, statistics, sys
W, base, pair, runs, tokens, threads = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5], sys.argv[6]
rows = []
for r in range(runs):
    d = {m: json.loads((W / f"r{r:02d}-{m}.json").read_text()) for m in ("plain", "fixed", "adaptive")}
    assert d["plain"]["tokens"] == d["fixed"]["tokens"] == d["adaptive"]["tokens"], f"run {r}: outputs differ"
    tps = {m: d[m]["stats"]["eval_tokens_per_second"] for m in d}
    best = max(tps["plain"], tps["fixed"])
    st = d["adaptive"]["stats"]
    rows.append({"run": r, "tps": tps, "adaptive_vs_best": tps["adaptive"] / best,
                 "adaptive_vs_plain": tps["adaptive"] / tps["plain"], "fixed_vs_plain": tps["fixed"] / tps["plain"],
                 "adaptive_rounds": st["rounds"], "adaptive_plain_steps": st["plain_steps"],
                 "adaptive_tau": st["mean_acceptance_length"], "fixed_tau": d["fixed"]["stats"]["mean_acceptance_length"]})
med = lambda k: statistics.median(x[k] for x in rows)
summary = {"pair": pair, "runs": runs, "tokens": int(tokens), "threads": int(threads),
           "load": (W / "load").read_text().strip(),
           "median_tps": {m: statistics.median(x["tps"][m] for x in rows) for m in ("plain", "fixed", "adaptive")},
           "adaptive_vs_best": {"median": med("adaptive_vs_best"), "min": min(x["adaptive_vs_best"] for x in rows),
                                "max": max(x["adaptive_vs_best"] for x in rows)},
           "adaptive_median_vs_best_median": statistics.median(x["tps"]["adaptive"] for x in rows)
           / max(statistics.median(x["tps"]["plain"] for x in rows), statistics.median(x["tps"]["fixed"] for x in rows)),
           "adaptive_vs_plain_median": med("adaptive_vs_plain"), "fixed_vs_plain_median": med("fixed_vs_plain"),
           "outputs_identical": True, "per_run": rows}
pathlib.Path(base + ".json").write_text(json.dumps(summary, indent=1))
f = lambda x, d=3: f"{x:.{d}f}"
L = [f"# Schedule, paired runs — {pair}", "",
     f"{runs} triples (plain, fixed, adaptive; order rotated), {tokens} tokens each, EOS ignored, {threads} threads; "
     f"load average after: {summary['load']}. The three outputs of every triple are identical token for token.", "",
     f"Median tok/s: plain {f(summary['median_tps']['plain'], 1)}, fixed {f(summary['median_tps']['fixed'], 1)}, "
     f"adaptive {f(summary['median_tps']['adaptive'], 1)}; fixed ÷ plain (median) {f(summary['fixed_vs_plain_median'])}.", "",
     f"**adaptive ÷ max(plain, fixed)**: median {f(summary['adaptive_vs_best']['median'])}, "
     f"min {f(summary['adaptive_vs_best']['min'])}, max {f(summary['adaptive_vs_best']['max'])}; "
     f"median adaptive ÷ the better median of plain and fixed: {f(summary['adaptive_median_vs_best_median'])}.", "",
     "| run | plain tok/s | fixed tok/s | adaptive tok/s | adaptive ÷ best | adaptive rounds / plain steps | τ fixed / adaptive |",
     "|---|---|---|---|---|---|---|"]
for x in rows:
    t = x["tps"]
    L.append(f"| {x['run']} | {f(t['plain'], 1)} | {f(t['fixed'], 1)} | {f(t['adaptive'], 1)} | {f(x['adaptive_vs_best'])} | "
             f"{x['adaptive_rounds']} / {x['adaptive_plain_steps']} | {f(x['fixed_tau'], 2)} / {f(x['adaptive_tau'], 2)} |")
pathlib.Path(base + ".md").write_text("\n".join(L) + "\n")
print("\n".join(L))
EOF
log "wrote $OUT/schedule-$PAIR.md and $OUT/schedule-$PAIR.json"

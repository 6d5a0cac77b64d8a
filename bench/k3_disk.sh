#!/bin/sh
# Speculation where Kimi K3 runs: a kimi-k3 file larger than memory, its routed experts
# mapped from disk. In one run, from a dropped page cache each time:
#   1. `dspark bench --fresh --widths 1..9 --draft`: a decode step and a verify forward of
#      every width on new tokens (each routes to experts of its own, as decoding does),
#      the routed experts and bytes each reads (the union of its tokens'), and a block
#      of the drafter;
#   2. ROUNDS × (plain `generate` and speculative `generate` with the adaptive schedule,
#      alternating which goes first): tokens/s of the tokens after the first, and whether
#      the two outputs are the same;
#   3. ROUNDS × llama.cpp's decode of the same prompt (llama-completion, mmap on,
#      --no-repack, --no-warmup: what a file larger than memory needs): its eval tokens/s;
#   4. with EVAL (a `dspark eval --json` report of a trained pair: its acceptance per
#      position), what that acceptance would gain on these measured per-width costs: per
#      verified-draft count ℓ, E(ℓ) = 1 + Σ_{j≤ℓ} a_j tokens per round over a block's draft
#      + verify(ℓ + 1) time, against a decode step — a prediction, stated as such.
#
#   bench/k3_disk.sh [MODEL.gguf]
#
# Without MODEL, `dspark synth --geometry kimi-k3-large --seed 1` writes the 38.6 GB target
# and its (random) drafter into $DIR (default /work/k3big/large) unless they are there.
# Environment (defaults in brackets): DSPARK [target/release/dspark], DRAFT [$DIR/draft.gguf,
# converted from $DIR/draft when missing], LLAMA_BIN [/tmp/llamacpp/build/bin; empty to
# skip llama.cpp], THREADS [2], N [32 tokens], ROUNDS [3], PROMPT [Once upon a time there
# was], WIDTHS [1,2,3,4,5,6,7,8,9], RUNS [5 timed runs per width], EVAL [none], OUT [a
# temporary folder]. The page cache is dropped before every run (`echo 3 >
# /proc/sys/vm/drop_caches`, else the model's pages are evicted with
# posix_fadvise(POSIX_FADV_DONTNEED)).
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DSPARK=${DSPARK:-$ROOT/target/release/dspark}
DIR=${DIR:-/work/k3big/large}
MODEL=${1:-$DIR/target.gguf}
DRAFT=${DRAFT:-$(dirname "$MODEL")/draft.gguf}
LLAMA_BIN=${LLAMA_BIN-/tmp/llamacpp/build/bin}
THREADS=${THREADS:-2}
N=${N:-32}
ROUNDS=${ROUNDS:-3}
PROMPT=${PROMPT:-Once upon a time there was}
WIDTHS=${WIDTHS:-1,2,3,4,5,6,7,8,9}
RUNS=${RUNS:-5}
EVAL=${EVAL:-}
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"

if [ ! -f "$MODEL" ]; then
    [ $# -eq 0 ] || { echo "k3_disk: $MODEL: no such file" >&2; exit 2; }
    echo "writing $DIR (dspark synth --geometry kimi-k3-large --seed 1)" >&2
    "$DSPARK" synth --geometry kimi-k3-large --out "$DIR" --seed 1 -q
fi
if [ ! -f "$DRAFT" ]; then
    "$DSPARK" convert "$(dirname "$MODEL")/draft" -o "$DRAFT" -q
fi
mem=$(awk '/^MemTotal:/ { printf "%.0f", $2 * 1024 }' /proc/meminfo)
size=$(stat -c %s "$MODEL")
echo "model $MODEL: $size bytes, $(awk "BEGIN { printf \"%.2f\", $size / $mem }")x the memory ($mem bytes); drafter $DRAFT; $THREADS threads; logs in $OUT"

drop_caches() {
    sync
    if ! (echo 3 > /proc/sys/vm/drop_caches) 2>/dev/null; then
        python3 -c 'import os, sys
for p in sys.argv[1:]:
    fd = os.open(p, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)' "$MODEL" "$DRAFT"
    fi
}

drop_caches
"$DSPARK" bench --target "$MODEL" --draft "$DRAFT" --context 16 --fresh --widths "$WIDTHS" \
    --runs "$RUNS" -t "$THREADS" --json > "$OUT/widths.json"

for r in $(seq "$ROUNDS"); do
    order="plain adaptive"
    [ $((r % 2)) -eq 1 ] || order="adaptive plain"
    for mode in $order; do
        drop_caches
        if [ "$mode" = plain ]; then
            "$DSPARK" generate -m "$MODEL" --prompt "$PROMPT" -n "$N" --ignore-eos -t "$THREADS" \
                --json > "$OUT/$mode.$r.json" 2> "$OUT/$mode.$r.err"
        else
            "$DSPARK" generate -m "$MODEL" --draft "$DRAFT" --prompt "$PROMPT" -n "$N" \
                --ignore-eos -t "$THREADS" --trace "$OUT/$mode.$r.trace" --force --json \
                > "$OUT/$mode.$r.json" 2> "$OUT/$mode.$r.err"
        fi
    done
    if [ -n "$LLAMA_BIN" ]; then
        drop_caches
        "$LLAMA_BIN/llama-completion" -m "$MODEL" -p "$PROMPT" -n "$N" --ignore-eos --temp 0 \
            -t "$THREADS" -tb "$THREADS" --no-repack --no-warmup -no-cnv -c 256 \
            --no-display-prompt > "$OUT/llama.$r.txt" 2> "$OUT/llama.$r.err" < /dev/null
    fi
done

python3 - "$OUT" "$ROUNDS" "$EVAL" <<'PY'
import json, re, statistics, sys
out, rounds, eval_path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
w = json.load(open(f"{out}/widths.json"))
t = w["target"]
print(f"\nper-width cost, new tokens every run (median of the timed runs; routed = the union of the tokens' experts):")
print(f"{'tokens':>6} {'ms':>9} {'x decode':>9} {'experts':>8} {'routed GB':>10} {'GB/s':>6}")
dec = t["decode"]["median_ms"]
cost = {}
for x in t["widths"]:
    n, ms, r = x["tokens"], x["median_ms"], x["routed"]
    cost[n] = ms
    print(f"{n:>6} {ms:>9.1f} {ms / dec:>9.2f} {r['experts']:>8} {r['bytes'] / 1e9:>10.3f} {r['bytes'] / ms / 1e6:>6.2f}")
draft_ms = w["drafter"]["draft"]["median_ms"]
print(f"decode step {dec:.1f} ms (routed {t['decode']['routed']['bytes'] / 1e6:.0f} MB); drafter block {draft_ms:.1f} ms")

def stats(p):
    d = json.load(open(p))
    return d["stats"], d["tokens"] if "tokens" in d else d["text"]
rows = {"plain": [], "adaptive": []}
same = True
for r in range(1, rounds + 1):
    (sp, tp), (sa, ta) = stats(f"{out}/plain.{r}.json"), stats(f"{out}/adaptive.{r}.json")
    same &= tp == ta
    rows["plain"].append(sp["eval_tokens_per_second"])
    rows["adaptive"].append(sa["eval_tokens_per_second"])
    print(f"round {r}: plain {sp['eval_tokens_per_second']:.3f} tok/s, adaptive {sa['eval_tokens_per_second']:.3f} tok/s"
          f" ({sa['rounds']} rounds, {sa['plain_steps']} plain steps, {sa['drafts_accepted']}/{sa['drafts_verified']} drafts accepted)")
    # Within the run, free of the host's swings between runs: what its rounds cost beyond
    # plain steps (each round's draft + verify + rollback, less a median plain step per
    # token it committed), over what its tokens would have cost as plain steps.
    lines = [json.loads(l) for l in open(f"{out}/adaptive.{r}.trace")]
    plain_s = statistics.median([x["seconds"] for x in lines if x.get("plain")] or [float("nan")])
    rounds_ = [x for x in lines if not x.get("plain")]
    extra = sum(x["draft_seconds"] + x["verify_seconds"] + x.get("rollback_seconds", 0.0)
                - len(x["committed"]) * plain_s for x in rounds_)
    tokens = sum(len(x["committed"]) for x in lines)
    print(f"         within the run: rounds cost {extra:.3f} s beyond plain steps of {plain_s * 1e3:.0f} ms"
          f" = {extra / (tokens * plain_s) * 100:.1f} % of {tokens} tokens as plain steps")
mp, ma = statistics.median(rows["plain"]), statistics.median(rows["adaptive"])
print(f"median: plain {mp:.3f}, adaptive {ma:.3f} tok/s: adaptive / plain {ma / mp:.3f}; outputs {'identical' if same else 'DIFFER'}")
llama = []
for r in range(1, rounds + 1):
    try:
        err = open(f"{out}/llama.{r}.err").read()
    except FileNotFoundError:
        break
    m = re.findall(r"eval time =\s*([0-9.]+) ms /\s*([0-9]+) runs", err)
    if m:
        ms, k = m[-1]
        llama.append(int(k) / (float(ms) / 1e3))
if llama:
    ml = statistics.median(llama)
    print(f"llama.cpp decode: {', '.join(f'{x:.3f}' for x in llama)} tok/s (median {ml:.3f}); dspark plain / llama.cpp {mp / ml:.2f}")
if eval_path:
    e = json.load(open(eval_path))
    hist = e["acceptance_histogram"]
    total = sum(hist)
    # a_j = P(at least j drafts accepted) over rounds that verified every draft.
    surv = [sum(hist[j + 1:]) / total for j in range(len(hist))][: len(hist) - 1]
    print(f"\nprediction from {eval_path} (τ {sum((k + 1) * c for k, c in enumerate(hist)) / total:.3f};"
          f" survivals {' '.join(f'{a:.2f}' for a in surv)}) on the costs above:")
    best = (1 / dec, 0)
    for l in range(1, len(surv) + 1):
        if l + 1 not in cost:
            continue
        e_l = 1 + sum(surv[:l])
        rate = e_l / (draft_ms + cost[l + 1])
        print(f"  verify {l} drafts: {e_l:.3f} tokens per {draft_ms + cost[l + 1]:.1f} ms = {rate * 1e3:.2f} tok/s, {rate * dec:.2f}x decode")
        best = max(best, (rate, l))
    print(f"  best: {best[1]} drafts, {best[0] * dec:.2f}x plain decoding (predicted)")
PY

#!/usr/bin/env bash
# side_by_side.sh — dspark and llama.cpp on the same target, drafter files, prompts and
# threads, in one run: speed, acceptance and lossless-ness of both engines.
#
# Usage:  bench/side_by_side.sh small|widened|zero|smol
#
#   smol     examples/smol-pair (SmolLM2-135M-Instruct Q4_1, fetched by its fetch.sh; the
#            DSpark drafter trained for it, draft/): held-out conversations rendered with the
#            target's chat template by `dspark generate --chat` (CHAT_DATE), the rendered text
#            then given to every engine as its prompt; llama.cpp's converter is not run
#            (LLAMA_CONVERT=none: no HF tokenizer beside the rebuilt target), so llama.cpp
#            runs the llama-layout file dspark wrote, with every P_MIN
#   small    examples/code-pair (target.gguf, draft/, HF target /tmp/train/work/target)
#   widened  the "widened copy" of that pair in /tmp/train/widened (Qwen3-0.6B-shaped,
#            the padding computes nothing; target.gguf, draft/, target-hf/)
#   zero     the widened target with a random drafter of the widened drafter's shape
#            (/tmp/train/widened-random/draft, train/random_drafter.py): a zero-acceptance
#            pair, where speculation can only cost
#
# Environment (defaults in brackets):
#   THREADS        thread counts to measure, space separated ["1 2"]
#   N              prompts, the first N lines of PROMPTS [16]
#   TOKENS         new tokens per prompt [128]
#   PROMPTS        JSONL, one {"prompt": ...} or {"messages": [...]} per line [the pair's heldout.jsonl]
#   CHAT_DATE      the date chat templates see when rendering "messages" lines [2026-12-03]
#   LLAMA_BIN      llama.cpp build bin dir [/tmp/llamacpp/build/bin]
#   DSPARK         dspark binary [REPO/target/release/dspark]
#   PY             python with gguf-py (for the converter and the file comparison) [/tmp/train/venv/bin/python]
#   LLAMA_CONVERT  llama.cpp's convert_hf_to_gguf.py [/tmp/train/llamacpp-convert/convert_hf_to_gguf.py,
#                  a copy that accepts this tokenizer's pre-tokenizer hash as gpt-2]; `none`
#                  skips llama.cpp's converter (and its file's runs) [none for smol]
#   OUTTYPE        matrix type of every converted drafter [q8_0]
#   N_MAX          llama.cpp --spec-draft-n-max [8 = the block size; sample_from_anchor drafters draft 8]
#   TEMP           sampling temperature of every engine [0 = greedy]; above 0 every engine
#                  samples with --temp TEMP --top-p TOP_P (llama.cpp also --top-k 0 --min-p 0,
#                  its defaults being 40 and 0.05) and seed SEED + prompt index
#   TOP_P          [0.95 when TEMP > 0]
#   SEED           [1]
#   P_MIN          extra llama.cpp --spec-draft-p-min values run with the llama.cpp-converted
#                  drafter besides 0, space separated [""; e.g. "0.3 0.5 0.7"]; the report
#                  names the fastest
#   CTX            llama.cpp context (-c) [1024]
#   BENCH_REPS     llama-bench repetitions of tg$TOKENS [3]
#   OUT            output dir: results-$PAIR[-tTEMP].{md,json}, work-$PAIR[-tTEMP]/ [/tmp/bench]
#   NICE           prefix for every measured command ["nice -n 5"]
#   QUIET_BUSY     before each prompt, wait until the CPUs were busier than this fraction for
#                  less than 1 s (other jobs on a shared machine) [0.3] ...
#   QUIET_MAX      ... but at most this many seconds [90]; the busy fraction is recorded
#   FOREIGN_MAX    after each prompt's block of runs, the CPU time other processes took
#                  during it, as a fraction of all CPU time (from /proc/stat minus this
#                  script's children); above this the block is run again [0.25] ...
#   RETRIES        ... at most this many times [2]; the last attempt is kept either way.
#   REPORT_ONLY    1: no conversions and no runs, the report again from the work dir [0]
#                  (llama.cpp's spinning thread pool collapses when another job takes a core
#                  while -t equals the core count: hundreds of ms per token were seen here.)
#
# What it does:
#   1. converts the drafter three times at $OUTTYPE: `dspark convert` (dflash-draft layout,
#      dspark's own file), `dspark convert --layout llama.cpp --vocab-from TARGET.gguf`, and
#      llama.cpp's convert_hf_to_gguf.py --target-model-dir HF_TARGET; compares the two
#      llama-layout files key by key / tensor by tensor (tests/python/compare_llama_conversion.py).
#   2. for each thread count:
#      * `dspark eval --stop-at-eos` over the N prompts (its τ, AR and speculative tok/s over the
#        whole run including prefill, identical_to_ar);
#      * per prompt, engines alternated (order reversed on odd prompts, to spread drift on a
#        noisy machine): dspark generate AR, dspark generate speculative (dflash-draft file;
#        the default adaptive schedule, and --schedule fixed: every draft of every block),
#        llama-completion (greedy AR), llama-speculative-simple --spec-type draft-dspark with
#        dspark's llama-layout file and with llama.cpp converter's file;
#      * llama-bench tg$TOKENS (target only).
#   3. writes results-$PAIR.md (tables) and results-$PAIR.json (everything, per prompt).
#
# Definitions (greedy unless TEMP > 0: --temp 0 --top-k 1; every engine stops at the target's EOS):
#   τ (mean acceptance length) = tokens committed per draft–verify round, bonus included.
#     dspark: from its round histogram. llama.cpp: speculative-simple prints n_predict and
#     n_accept; every round commits accepted+1 tokens, so rounds = n_predict − n_accept and
#     τ = n_predict / (n_predict − n_accept). Pooled over prompts: Σ committed / Σ rounds.
#   Token budget: llama-speculative-simple -n K ends its loop once n_predict > K, and when the
#     remaining budget is 0 it does NOT truncate the draft (common_speculative_draft only
#     truncates when n_max > 0), so it makes K+1 … K+1+N_MAX tokens; it gets -n TOKENS-1
#     (TOKENS … TOKENS+N_MAX tokens, τ over what it made). dspark gets -n TOKENS. So that
#     llama.cpp's speculative text can be checked against its AR text, llama-completion
#     gets -n TOKENS+N_MAX and the check is "AR text starts with the speculative text"
#     (equality of the first n_predict tokens, by text).
#     llama.cpp's first round is anchored on the last prompt token (the prompt minus its
#     last token is prefilled); dspark takes its first token from the prefill's logits.
#   Generation-phase tok/s, pooled (Σ tokens / Σ seconds) and the median of the per-prompt
#     rates (a run stalled by another process on a shared machine moves the pooled figure a
#     lot, the median little; /proc/loadavg is recorded per thread count): dspark generate
#     eval_tokens_per_second (tokens after the first / time after the prefill);
#     llama-completion "eval time" (runs / eval time, the first token comes from the
#     prompt eval); llama-speculative-simple "decoded N tokens in S seconds" (all N tokens
#     / time after the prompt; it includes the round that makes the first token).
#   dspark eval tok/s = tokens / whole run time including the prefill (its own definition).
#   spec == AR: dspark by token ids (generate) and by eval's identical_to_ar; llama.cpp by
#     generated text (its tools print no ids): speculative-simple's stdout minus the echoed
#     prompt must be a prefix of llama-completion's stdout (--no-display-prompt).
#     Cross-engine: dspark's AR text must be a prefix of llama.cpp's AR text.
set -euo pipefail

PAIR=${1:-}
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
THREADS=${THREADS:-"1 2"}
N=${N:-16}
TOKENS=${TOKENS:-128}
CHAT_DATE=${CHAT_DATE:-2026-12-03}
LLAMA_BIN=${LLAMA_BIN:-/tmp/llamacpp/build/bin}
DSPARK=${DSPARK:-$REPO/target/release/dspark}
PY=${PY:-/tmp/train/venv/bin/python}
OUTTYPE=${OUTTYPE:-q8_0}
N_MAX=${N_MAX:-8}
CTX=${CTX:-1024}
BENCH_REPS=${BENCH_REPS:-3}
OUT=${OUT:-/tmp/bench}
NICE=${NICE:-nice -n 5}
COMPARE=$REPO/tests/python/compare_llama_conversion.py
TEMP=${TEMP:-0}
SAMPLED=$(awk -v t="$TEMP" 'BEGIN{print (t > 0) ? 1 : 0}')
TOP_P=${TOP_P:-$( ((SAMPLED)) && echo 0.95 || echo 1)}
SEED=${SEED:-1}
P_MIN=${P_MIN:-}

case "$PAIR" in
  small)
    LABEL="code-pair (small)"
    TARGET=$REPO/examples/code-pair/target.gguf
    DRAFT_SRC=$REPO/examples/code-pair/draft
    TARGET_HF=/tmp/train/work/target ;;
  widened)
    LABEL="code-pair widened copy (Qwen3-0.6B-shaped, padding computes nothing)"
    TARGET=/tmp/train/widened/target.gguf
    DRAFT_SRC=/tmp/train/widened/draft
    TARGET_HF=/tmp/train/widened/target-hf ;;
  zero)
    LABEL="zero-acceptance pair (the widened target, a random drafter of the widened drafter's shape)"
    TARGET=/tmp/train/widened/target.gguf
    DRAFT_SRC=/tmp/train/widened-random/draft
    TARGET_HF=/tmp/train/widened/target-hf ;;
  smol)
    LABEL="smol-pair (SmolLM2-135M-Instruct Q4_1, the DSpark drafter trained for it)"
    TARGET=$REPO/examples/smol-pair/target.gguf
    DRAFT_SRC=${DRAFT_SRC:-$REPO/examples/smol-pair/draft}
    PROMPTS=${PROMPTS:-$REPO/examples/smol-pair/heldout.jsonl}
    LLAMA_CONVERT=${LLAMA_CONVERT:-none}
    TARGET_HF=- ;;
  *) echo "usage: $0 small|widened|zero|smol   (see the header for the environment)" >&2; exit 2 ;;
esac
PROMPTS=${PROMPTS:-$REPO/examples/code-pair/heldout.jsonl}
LLAMA_CONVERT=${LLAMA_CONVERT:-/tmp/train/llamacpp-convert/convert_hf_to_gguf.py}
CONVERTED=$([ "$LLAMA_CONVERT" = none ] && echo 0 || echo 1)

NEED=("$TARGET" "$DRAFT_SRC/config.json" "$PROMPTS" "$DSPARK" "$LLAMA_BIN/llama-completion"
      "$LLAMA_BIN/llama-speculative-simple" "$LLAMA_BIN/llama-bench")
((CONVERTED)) && NEED+=("$TARGET_HF/config.json" "$LLAMA_CONVERT" "$COMPARE")
for f in "${NEED[@]}"; do
  [ -e "$f" ] || { echo "missing: $f" >&2; exit 2; }
done

SUFFIX=$( ((SAMPLED)) && echo "-t$TEMP" || true)
W=$OUT/work-$PAIR$SUFFIX   # its own folder per temperature
mkdir -p "$W/prompts" "$W/runs"
log() { echo "[$(date +%T)] $*" >&2; }
QUIET_BUSY=${QUIET_BUSY:-0.3}
QUIET_MAX=${QUIET_MAX:-90}
cpu_busy_1s() {  # fraction of all CPUs busy over one second, from /proc/stat
  local a b
  # cpu user nice system idle iowait irq softirq steal: busy = all but idle and iowait
  a=$(awk '/^cpu /{b=$2+$3+$4+$7+$8+$9; print b, b+$5+$6}' /proc/stat); sleep 1
  b=$(awk '/^cpu /{b=$2+$3+$4+$7+$8+$9; print b, b+$5+$6}' /proc/stat)
  awk -v a="$a" -v b="$b" 'BEGIN{split(a,x," "); split(b,y," "); d=y[2]-x[2]; printf "%.2f", (d > 0 ? (y[1]-x[1])/d : 0)}'
}
stat_ticks() { awk '/^cpu /{b=$2+$3+$4+$7+$8+$9; print b, b+$5+$6}' /proc/stat; }
our_ticks() { awk '{print $16 + $17}' "/proc/$$/stat"; }  # cutime + cstime of this shell
FOREIGN_MAX=${FOREIGN_MAX:-0.25}
RETRIES=${RETRIES:-2}
wait_quiet() {  # prints the busy fraction it ended on and the seconds waited
  local t0=$SECONDS busy
  while :; do
    busy=$(cpu_busy_1s)
    awk -v b="$busy" -v q="$QUIET_BUSY" 'BEGIN{exit !(b < q)}' && break
    ((SECONDS - t0 >= QUIET_MAX)) && break
  done
  echo "$busy $((SECONDS - t0))"
}

# ---------------------------------------------------------------- 1. drafter files
DS_DRAFT=$W/dspark-draft.gguf            # dspark's own dflash-draft layout
DS_LLAMA=$W/dspark-llama-draft.gguf      # dspark convert --layout llama.cpp
LC_LLAMA=$W/llama-conv-draft.gguf        # llama.cpp's convert_hf_to_gguf.py
REPORT_ONLY=${REPORT_ONLY:-0}
if [ "$REPORT_ONLY" != 1 ]; then
log "converting $DRAFT_SRC ($OUTTYPE)"
$NICE "$DSPARK" convert "$DRAFT_SRC" --outtype "$OUTTYPE" -o "$DS_DRAFT" --report "$W/dspark-draft.report.json" --force -q
$NICE "$DSPARK" convert "$DRAFT_SRC" --layout llama.cpp --vocab-from "$TARGET" --outtype "$OUTTYPE" \
  -o "$DS_LLAMA" --report "$W/dspark-llama-draft.report.json" --force -q
if ((CONVERTED)); then
  $NICE "$PY" "$LLAMA_CONVERT" "$DRAFT_SRC" --target-model-dir "$TARGET_HF" --outtype "$OUTTYPE" \
    --outfile "$LC_LLAMA" > "$W/llama-convert.log" 2>&1 \
    || { echo "llama.cpp converter failed, see $W/llama-convert.log" >&2; exit 1; }
  set +e
  "$PY" "$COMPARE" "$LC_LLAMA" "$DS_LLAMA" --ignore-key-prefix provenance. --ignore-key-prefix general.tags \
    --json "$W/compare.json" > "$W/compare.txt"
  COMPARE_RC=$?
  set -e
  log "llama-layout files compared (rc $COMPARE_RC): $(grep -E '^# summary' "$W/compare.txt")"
else
  # No llama.cpp-converted file: its runs (and the p-min sweep) take dspark's llama-layout file.
  LC_LLAMA=$DS_LLAMA
  COMPARE_RC=-1
  rm -f "$W/compare.json"
fi
fi
[ "$REPORT_ONLY" = 1 ] && { ((CONVERTED)) || LC_LLAMA=$DS_LLAMA; COMPARE_RC=$([ -f "$W/compare.json" ] && echo 0 || echo -1); }

# ---------------------------------------------------------------- prompts
# A "messages" line becomes the text `dspark generate --chat` renders for it (the target's
# template, CHAT_DATE), which every engine then tokenizes as its prompt.
"$PY" - "$PROMPTS" "$N" "$W/prompts" "$DSPARK" "$TARGET" "$CHAT_DATE" <<'EOF'
import json, subprocess, sys, pathlib
src, n, d, dspark, target, date = sys.argv[1], int(sys.argv[2]), pathlib.Path(sys.argv[3]), *sys.argv[4:7]
rows = [json.loads(l) for l in open(src, encoding="utf-8") if l.strip()][:n]
with open(d / "subset.jsonl", "w", encoding="utf-8") as fh:
    for i, r in enumerate(rows):
        if "messages" in r:
            m = d / f"m{i:03d}.json"
            m.write_text(json.dumps(r["messages"]), encoding="utf-8")
            out = subprocess.run([dspark, "generate", "-m", target, "--chat", "--messages", str(m), "-n", "1",
                                  "-t", "1", "--chat-date", date, "--json"], capture_output=True, check=True)
            r = {"prompt": json.loads(out.stdout)["chat_prompt"]}
        (d / f"p{i:03d}.txt").write_text(r["prompt"], encoding="utf-8")  # exact bytes, no newline added
        # llama.cpp's -f drops one trailing newline of the file (common/arg.cpp): one more
        # makes its prompt these exact bytes too (a chat rendering ends with one).
        (d / f"p{i:03d}.llama.txt").write_text(r["prompt"] + "\n", encoding="utf-8")
        fh.write(json.dumps({"prompt": r["prompt"]}) + "\n")
print(len(rows))
EOF
NP=$(wc -l < "$W/prompts/subset.jsonl")
[ "$NP" -gt 0 ] || { echo "no prompts" >&2; exit 2; }

# ---------------------------------------------------------------- runners
# LC_SAMPLE / DS_SAMPLE: llama.cpp's and dspark's sampling options, set per prompt by run_step
# (--no-escape: llama.cpp unescapes \n, \' ... even in -f files by default).
run_dspark_ar()   { $NICE "$DSPARK" generate -m "$TARGET" -f "$2" -n "$TOKENS" -t "$1" "${DS_SAMPLE[@]}" --json > "$3" 2> "$3.err"; }
run_dspark_spec() { $NICE "$DSPARK" generate -m "$TARGET" --draft "$DS_DRAFT" -f "$2" -n "$TOKENS" -t "$1" "${DS_SAMPLE[@]}" --json > "$3" 2> "$3.err"; }
run_dspark_spec_fixed() { $NICE "$DSPARK" generate -m "$TARGET" --draft "$DS_DRAFT" --schedule fixed -f "$2" -n "$TOKENS" -t "$1" "${DS_SAMPLE[@]}" --json > "$3" 2> "$3.err"; }
run_llama_ar() {
  $NICE "$LLAMA_BIN/llama-completion" -m "$TARGET" -f "${2%.txt}.llama.txt" -n $((TOKENS + N_MAX)) "${LC_SAMPLE[@]}" -t "$1" -tb "$1" \
    -c "$CTX" -no-cnv --no-display-prompt > "$3" 2> "$3.err" < /dev/null
}
run_llama_spec() {  # $4 = drafter file, $5 = --spec-draft-p-min
  $NICE "$LLAMA_BIN/llama-speculative-simple" -m "$TARGET" -md "$4" --spec-type draft-dspark \
    --spec-draft-n-max "$N_MAX" --spec-draft-p-min "${5:-0}" -n $((TOKENS - 1)) "${LC_SAMPLE[@]}" -t "$1" -tb "$1" -c "$CTX" \
    -f "${2%.txt}.llama.txt" > "$3" 2> "$3.err" < /dev/null
}
PMINS=($P_MIN)
run_step() {  # thread prompt-index engine
  local t=$1 i=$2 e=$3 p=$W/prompts/p$(printf %03d "$2").txt o=$W/runs/t$1-p$(printf %03d "$2")-$3.out rc=0
  if ((SAMPLED)); then
    DS_SAMPLE=(--temp "$TEMP" --top-p "$TOP_P" --seed $((SEED + i)))
    LC_SAMPLE=(--temp "$TEMP" --top-k 0 --top-p "$TOP_P" --min-p 0 --seed $((SEED + i)) --no-escape)
  else
    DS_SAMPLE=()
    LC_SAMPLE=(--temp 0 --top-k 1 --seed 1 --no-escape)
  fi
  case $e in
    dspark_ar) run_dspark_ar "$t" "$p" "$o" ;;
    dspark_spec) run_dspark_spec "$t" "$p" "$o" ;;
    dspark_spec_fixed) run_dspark_spec_fixed "$t" "$p" "$o" ;;
    llama_ar) run_llama_ar "$t" "$p" "$o" ;;
    llama_spec_dsparkfile) run_llama_spec "$t" "$p" "$o" "$DS_LLAMA" ;;
    llama_spec_llamafile) run_llama_spec "$t" "$p" "$o" "$LC_LLAMA" ;;
    llama_spec_pm*) run_llama_spec "$t" "$p" "$o" "$LC_LLAMA" "${PMINS[${e#llama_spec_pm}]}" ;;
  esac || rc=$?
  echo "$rc" > "$o.rc"
  ((rc == 0)) || { echo "FAILED (rc $rc): $e thread $t prompt $i (see $o.err)" >&2; echo "$e $t $i rc=$rc" >> "$W/runs/failures"; }
}

[ "$REPORT_ONLY" = 1 ] || rm -f "$W/runs/failures"
ENGINES=(dspark_ar dspark_spec dspark_spec_fixed llama_ar llama_spec_dsparkfile)
((CONVERTED)) && ENGINES+=(llama_spec_llamafile)
for k in "${!PMINS[@]}"; do ENGINES+=("llama_spec_pm$k"); done
for t in $THREADS; do
  [ "$REPORT_ONLY" = 1 ] && continue
  cut -d' ' -f1-3 /proc/loadavg > "$W/runs/t$t-load"
  rm -f "$W/runs/t$t-quiet"
  log "threads $t: dspark eval over $NP prompts"
  EVAL_SAMPLE=(); ((SAMPLED)) && EVAL_SAMPLE=(--temp "$TEMP" --top-p "$TOP_P" --seed "$SEED")
  $NICE "$DSPARK" eval --target "$TARGET" --draft "$DS_DRAFT" --prompts "$W/prompts/subset.jsonl" \
    -n "$TOKENS" -t "$t" --stop-at-eos "${EVAL_SAMPLE[@]}" --json > "$W/runs/t$t-dspark-eval.json" 2> "$W/runs/t$t-dspark-eval.err" \
    || echo "dspark_eval $t -" >> "$W/runs/failures"
  for ((i = 0; i < NP; i++)); do
    if ((i % 2 == 0)); then order=("${ENGINES[@]}"); else order=(); for ((k = ${#ENGINES[@]} - 1; k >= 0; k--)); do order+=("${ENGINES[k]}"); done; fi
    for ((attempt = 1; attempt <= RETRIES + 1; attempt++)); do
      q=$(wait_quiet)
      log "threads $t: prompt $((i + 1))/$NP attempt $attempt (CPU busy before: ${q% *}, waited ${q#* } s)"
      read -r b0 tot0 < <(stat_ticks); o0=$(our_ticks)
      for e in "${order[@]}"; do run_step "$t" "$i" "$e"; done
      read -r b1 tot1 < <(stat_ticks); o1=$(our_ticks)
      foreign=$(awk -v b=$((b1 - b0)) -v o=$((o1 - o0)) -v d=$((tot1 - tot0)) \
        'BEGIN{f = d > 0 ? (b - o) / d : 0; if (f < 0) f = 0; printf "%.2f", f}')
      awk -v f="$foreign" -v m="$FOREIGN_MAX" 'BEGIN{exit !(f <= m)}' && break
      log "threads $t: prompt $((i + 1)): other processes took $foreign of the CPU during the runs, again"
    done
    echo "$i $q $foreign $((attempt > RETRIES + 1 ? RETRIES + 1 : attempt))" >> "$W/runs/t$t-quiet"
  done
  log "threads $t: llama-bench tg$TOKENS"
  $NICE "$LLAMA_BIN/llama-bench" -m "$TARGET" -p 0 -n "$TOKENS" -t "$t" -r "$BENCH_REPS" -o json \
    > "$W/runs/t$t-llama-bench.json" 2> "$W/runs/t$t-llama-bench.err" || echo "llama_bench $t -" >> "$W/runs/failures"
  cut -d' ' -f1-3 /proc/loadavg >> "$W/runs/t$t-load"
done

# ---------------------------------------------------------------- 3. report
"$PY" - "$W" "$OUT/results-$PAIR$SUFFIX" "$PAIR" "$LABEL" "$TARGET" "$DS_DRAFT" "$DS_LLAMA" "$LC_LLAMA" \
  "$NP" "$TOKENS" "$N_MAX" "$OUTTYPE" "$COMPARE_RC" "$THREADS" "$TEMP" "$TOP_P" "$SEED" "$P_MIN" "$CONVERTED" <<'EOF'
import json, re, sys, pathlib
W, base, pair, label, target, ds_draft, ds_llama, lc_llama, NP, TOK, NMAX, OUTTYPE, CRC, THREADS = sys.argv[1:15]
TEMP, TOP_P, SEED, PMIN = float(sys.argv[15]), sys.argv[16], sys.argv[17], sys.argv[18].split()
SAMPLED = TEMP > 0
CONVERTED = sys.argv[19] == "1"
BASE0 = "llama_spec_llamafile" if CONVERTED else "llama_spec_dsparkfile"  # p-min 0 of the sweep
PM = [f"llama_spec_pm{k}" for k in range(len(PMIN))]
W = pathlib.Path(W); NP = int(NP); TOK = int(TOK); threads = THREADS.split()
runs = W / "runs"
def rd(p):
    try: return p.read_text(encoding="utf-8", errors="surrogateescape")
    except FileNotFoundError: return None

def dspark_gen(p):
    s = rd(p)
    if not s: return None
    d = json.loads(s); st = d["stats"]
    committed = sum((m + 1) * n for m, n in enumerate(st["acceptance_histogram"]))
    text = d.get("text", "")
    return {"tokens": d["tokens"], "text": text, "generated": st["generated"], "rounds": st["rounds"],
            "plain_steps": st.get("plain_steps", 0),
            "prompt_tokens": st["prompt_tokens"],
            "committed": committed, "eval_s": st["seconds"]["eval"], "eval_tokens": max(st["generated"] - 1, 0),
            "eval_tps": st["eval_tokens_per_second"], "stop": st["stop_reason"]}

def llama_ar(p):
    s = rd(p); e = rd(pathlib.Path(str(p) + ".err"))
    if s is None or not e: return None
    m = re.search(r"eval time =\s*([\d.]+) ms /\s*(\d+) runs", e)
    text = s[:-2] if s.endswith("\n\n") else s
    eos = text.endswith(" [end of text]\n")
    if eos: text = text[: -len(" [end of text]\n")]
    return {"text": text, "eos": eos, "eval_s": float(m.group(1)) / 1e3 if m else None,
            "eval_tokens": int(m.group(2)) if m else None}

def llama_spec(p, prompt):
    s = rd(p); e = rd(pathlib.Path(str(p) + ".err"))
    if s is None or not e: return None
    g = lambda k: (lambda m: int(m.group(1)) if m else None)(re.search(k + r"\s*=\s*(\d+)", e))
    m = re.search(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds", e)
    enc = re.search(r"encoded\s+(\d+) tokens", e)
    body = s[2:] if s.startswith("\n\n") else s
    echoed = body.startswith(prompt)
    text = body[len(prompt):] if echoed else body
    if text.endswith("\n\n\n\n"): text = text[:-4]
    npred, nacc, ndraft = g("n_predict"), g("n_accept"), g("n_drafted")
    ok = npred is not None and nacc is not None
    return {"text": text, "prompt_echo_ok": echoed, "n_predict": npred, "n_accept": nacc, "n_drafted": ndraft,
            "rounds": npred - nacc if ok else None, "committed": npred,
            "prompt_tokens": int(enc.group(1)) if enc else None,
            "dec_s": float(m.group(2)) if m else None, "dec_tokens": int(m.group(1)) if m else None,
            "refused": None if ok else (e.strip().splitlines() or ["?"])[-1][:300]}

def pooled(num, den): return num / den if den else None
def median(xs):
    xs = sorted(x for x in xs if x is not None)
    return None if not xs else (xs[len(xs) // 2] if len(xs) % 2 else (xs[len(xs) // 2 - 1] + xs[len(xs) // 2]) / 2)
res = {"pair": pair, "label": label, "target": target, "drafters": {"dspark dflash-draft": ds_draft,
       "dspark llama.cpp layout": ds_llama, "llama.cpp converter": lc_llama}, "outtype": OUTTYPE,
       "prompts": NP, "tokens": TOK, "spec_draft_n_max": NMAX,
       "sampling": {"temp": TEMP, "top_p": float(TOP_P), "seed": SEED, "spec_draft_p_min_extra": PMIN} if SAMPLED else "greedy",
       "compare_llama_layout_files": json.loads(rd(W / "compare.json") or "{}"), "compare_rc": int(CRC),
       "failures": (rd(runs / "failures") or "").split("\n")[:-1], "threads": {}}
prompts = [(W / "prompts" / f"p{i:03d}.txt").read_text(encoding="utf-8") for i in range(NP)]
for t in threads:
    ev = json.loads(rd(runs / f"t{t}-dspark-eval.json") or "null")
    bench = json.loads(rd(runs / f"t{t}-llama-bench.json") or "null")
    per = []
    quiet = {int(l.split()[0]): {"cpu_busy_before": float(l.split()[1]), "waited_s": int(l.split()[2]),
             "foreign_cpu_during": float(l.split()[3]), "attempts": int(l.split()[4])}
             for l in (rd(runs / f"t{t}-quiet") or "").splitlines() if l.strip()}
    A = {k: {"tok": 0, "s": 0.0, "committed": 0, "rounds": 0, "plain_steps": 0, "same": 0, "n": 0, "rates": []} for k in
         ["dspark_ar", "dspark_spec", "dspark_spec_fixed", "llama_ar", "llama_spec_dsparkfile", "llama_spec_llamafile"] + PM}
    cross_same = 0
    for i in range(NP):
        f = lambda e: runs / f"t{t}-p{i:03d}-{e}.out"
        da, dsp, la = dspark_gen(f("dspark_ar")), dspark_gen(f("dspark_spec")), llama_ar(f("llama_ar"))
        dsf = dspark_gen(f("dspark_spec_fixed"))
        l1, l2 = llama_spec(f("llama_spec_dsparkfile"), prompts[i]), llama_spec(f("llama_spec_llamafile"), prompts[i])
        row = {"prompt": i}
        for k, v in [("dspark_ar", da), ("dspark_spec", dsp), ("dspark_spec_fixed", dsf), ("llama_ar", la),
                     ("llama_spec_dsparkfile", l1), ("llama_spec_llamafile", l2)] + \
                    [(k, llama_spec(f(k), prompts[i])) for k in PM]:
            a = A[k]
            if v is None: row[k] = None; continue
            if k.startswith("dspark"):
                a["tok"] += v["eval_tokens"]; a["s"] += v["eval_s"]; a["rates"].append(pooled(v["eval_tokens"], v["eval_s"]))
                row[k] = {"generated": v["generated"], "eval_tps": v["eval_tps"], "stop": v["stop"]}
                if k.startswith("dspark_spec"):
                    a["committed"] += v["committed"]; a["rounds"] += v["rounds"]
                    a["plain_steps"] += v["plain_steps"]
                    same = None if SAMPLED else (da is not None and v["tokens"] == da["tokens"])
                    a["same"] += bool(same); a["n"] += 1
                    row[k].update({"tau": pooled(v["committed"], v["rounds"]), "identical_to_ar_tokens": same,
                                   "rounds": v["rounds"], "plain_steps": v["plain_steps"]})
            elif k == "llama_ar":
                if v["eval_s"]:
                    a["tok"] += v["eval_tokens"]; a["s"] += v["eval_s"]; a["rates"].append(v["eval_tokens"] / v["eval_s"])
                row[k] = {"eval_tokens": v["eval_tokens"], "eval_s": v["eval_s"], "eos": v["eos"]}
            else:
                if v["refused"]:
                    row[k] = {"no_stats": v["refused"], "rc": (rd(pathlib.Path(str(f(k)) + ".rc")) or "?").strip()}
                    continue
                a["tok"] += v["dec_tokens"]; a["s"] += v["dec_s"]; a["rates"].append(pooled(v["dec_tokens"], v["dec_s"]))
                a["committed"] += v["committed"]; a["rounds"] += v["rounds"]
                same = None if SAMPLED else (la is not None and la["text"].startswith(v["text"]))  # AR ran N_MAX tokens longer
                a["same"] += bool(same); a["n"] += 1
                row[k] = {"n_predict": v["n_predict"], "n_accept": v["n_accept"], "n_drafted": v["n_drafted"],
                          "rounds": v["rounds"], "tau": pooled(v["committed"], v["rounds"]),
                          "decoded_tps": pooled(v["dec_tokens"], v["dec_s"]), "identical_to_ar_text": same,
                          "prompt_echo_ok": v["prompt_echo_ok"], "prompt_tokens": v["prompt_tokens"],
                          "prompt_tokens_equal_dspark": da is not None and v["prompt_tokens"] == da["prompt_tokens"]}
        if la is not None and da is not None and not SAMPLED:
            # dspark's text holds the end-of-sequence token's text (<|endoftext|>, <|im_end|>, ...)
            dt = re.sub(r"<\|[^|>]+\|>\Z", "", da["text"]) if da["stop"] == "eos" else da["text"]
            c = la["text"].startswith(dt)  # dspark: TOKENS tokens; llama-completion: TOKENS+N_MAX
            cross_same += c; row["llama_ar_text_equals_dspark_ar_text"] = c
        row["machine"] = quiet.get(i)
        per.append(row)
    summ = {k: {"gen_phase_tps": pooled(a["tok"], a["s"]), "median_prompt_tps": median(a["rates"]),
                "tau": pooled(a["committed"], a["rounds"]) if "spec" in k else None,
                "identical_to_ar": (f"{a['same']}/{a['n']}" if not SAMPLED else "n/a (sampled)") if "spec" in k else None,
                "rounds": a["rounds"] if "spec" in k else None,
                "plain_steps": a["plain_steps"] if k.startswith("dspark_spec") else None,
                "runs_with_stats": len(a["rates"])} for k, a in A.items()}
    tg = None
    if bench:
        tg = [{"avg_ts": b.get("avg_ts"), "stddev_ts": b.get("stddev_ts"), "n_gen": b.get("n_gen")} for b in bench]
    dev = {}
    if ev:
        dev = {k: ev.get(k) for k in ["mean_acceptance_length", "rounds", "ar_tokens_per_second",
               "spec_tokens_per_second", "speedup", "identical_to_ar", "identical_prompts", "prompts"]}
        dev["per_prompt_tau"] = [p["mean_acceptance_length"] for p in ev.get("per_prompt", [])]
        dev["acceptance_per_position"] = ev.get("acceptance_per_position")
        dev["calibration"] = ev.get("calibration")
    tau_ds = dev.get("mean_acceptance_length")
    cmp = {}
    for k in ["llama_spec_dsparkfile", "llama_spec_llamafile"]:
        tl = summ[k]["tau"]
        cmp[k] = {"tau_llama": tl, "tau_dspark_eval": tau_ds,
                  "rel_diff": (tl - tau_ds) / tau_ds if tl and tau_ds else None,
                  "within_5pct": abs(tl - tau_ds) / tau_ds <= 0.05 if tl and tau_ds else None}
    best = max([BASE0] + PM, key=lambda k: summ[k]["gen_phase_tps"] or 0)
    res["threads"][t] = {"llama_best_p_min": {"engine": best, "p_min": 0.0 if best == BASE0 else float(PMIN[PM.index(best)]),
                                              "gen_phase_tps": summ[best]["gen_phase_tps"], "tau": summ[best]["tau"]},"load": (rd(runs / f"t{t}-load") or "").split("\n")[:-1], "dspark_eval": dev, "llama_bench_tg": tg, "summary": summ, "tau_vs_dspark": cmp,
                         "llama_ar_text_equals_dspark_ar_text": f"{cross_same}/{NP}", "per_prompt": per}

pathlib.Path(base + ".json").write_text(json.dumps(res, indent=1))
f2 = lambda x, d=2: "–" if x is None else f"{x:.{d}f}"
pct = lambda x: "–" if x is None else f"{100 * x:+.1f}%"
L = [f"# dspark vs llama.cpp side by side — {label}", "",
     f"Target `{target}`; drafter converted at {OUTTYPE.upper()} {'three' if CONVERTED else 'two'} ways; {NP} prompts, {TOK} new tokens, "
     + (f"sampled at temperature {TEMP}, top-p {TOP_P} (llama.cpp: --top-k 0 --min-p 0), seed {SEED} + prompt index"
      if SAMPLED else "greedy") + f", stop at EOS; llama.cpp `--spec-type draft-dspark --spec-draft-n-max {NMAX}`.", "",
     (f"llama-layout files (llama.cpp converter vs dspark --layout llama.cpp): "
      f"{res['compare_llama_layout_files'].get('tensors_bytes_equal', '?')}/"
      f"{len(res['compare_llama_layout_files'].get('tensors', []))} tensors byte-identical; structural differences "
      f"(provenance.*/general.tags ignored): {res['compare_llama_layout_files'].get('structural', '?') or 'none'}."
      if CONVERTED else "llama.cpp's converter not run (LLAMA_CONVERT=none): llama.cpp runs dspark's llama-layout file."), ""]
for t, r in res["threads"].items():
    s, ev = r["summary"], r["dspark_eval"]
    ARk = {"dspark": "dspark_ar", "llama": "llama_ar"}
    L += [f"## threads = {t}", "", f"Load average before / after: {r.get('load')}", "",
          "| engine | drafter file | AR tok/s pooled | AR median | spec tok/s pooled | spec median | speedup (pooled / median) | τ | spec == own AR |",
          "|---|---|---|---|---|---|---|---|---|"]
    def row(eng, file, ark, k):
        ar, arm = s[ark]["gen_phase_tps"], s[ark]["median_prompt_tps"]
        sp, spm = s[k]["gen_phase_tps"], s[k]["median_prompt_tps"]
        L.append(f"| {eng} | {file} | {f2(ar,1)} | {f2(arm,1)} | {f2(sp,1)} | {f2(spm,1)} | "
                 f"{f2(sp/ar if sp and ar else None)} / {f2(spm/arm if spm and arm else None)} | "
                 f"{f2(s[k]['tau'],3)} | {s[k]['identical_to_ar']} |")
    row("dspark generate (adaptive schedule)", "dspark dflash-draft", "dspark_ar", "dspark_spec")
    row("dspark generate --schedule fixed", "dspark dflash-draft", "dspark_ar", "dspark_spec_fixed")
    row("llama.cpp", "dspark --layout llama.cpp", "llama_ar", "llama_spec_dsparkfile")
    if CONVERTED:
        row("llama.cpp", "llama.cpp converter" + (", p-min 0" if PM else ""), "llama_ar", "llama_spec_llamafile")
    for k, v in zip(PM, PMIN):
        row("llama.cpp", f"{'llama.cpp converter' if CONVERTED else 'dspark --layout llama.cpp'}, p-min {v}", "llama_ar", k)
    if ev:
        L.append(f"| dspark eval (whole run incl. prefill) | dspark dflash-draft | {f2(ev['ar_tokens_per_second'],1)} | – | "
                 f"{f2(ev['spec_tokens_per_second'],1)} | – | {f2(ev['speedup'])} | {f2(ev['mean_acceptance_length'],3)} | "
                 f"{'n/a (sampled)' if SAMPLED else str(ev['identical_prompts']) + '/' + str(ev['prompts'])} |")
    if r["llama_bench_tg"]:
        b = r["llama_bench_tg"][0]
        L.append(f"| llama-bench tg{b['n_gen']} (target only) | – | {f2(b['avg_ts'],1)} ± {f2(b['stddev_ts'],1)} | – | – | – | – | – | – |")
    if ev and ev.get("acceptance_per_position"):
        cal = ev.get("calibration") or {}
        pred = {c["position"]: c.get("mean_predicted") for c in cal.get("per_position", [])}
        L += ["", "dspark eval, acceptance per draft position (reached → accepted, rate / the confidence head's mean "
              "prediction): " + "; ".join(
                  f"{q['position'] + 1}: {q['reached']} → {q['accepted']} ({f2(q['rate'])} / {f2(pred.get(q['position']))})"
                  for q in ev["acceptance_per_position"]) + f"; calibration ECE {f2(cal.get('ece'), 4)}."]
    L += ["", "τ, llama.cpp vs dspark eval: " + "; ".join(
        f"{'dspark file' if k.endswith('dsparkfile') else 'llama.cpp-converted file'} {f2(c['tau_llama'],3)} vs {f2(c['tau_dspark_eval'],3)} "
        f"({pct(c['rel_diff'])}, within 5%: {c['within_5pct']})"
        for k, c in r["tau_vs_dspark"].items() if CONVERTED or k == "llama_spec_dsparkfile") + (
        " (sampled: the rules differ, dspark's rejection sampling against llama.cpp's sample-and-match,"
        " so the τ are not expected to agree)" if SAMPLED else "") + ".",
        f"llama.cpp AR text == dspark AR text: {r['llama_ar_text_equals_dspark_ar_text'] if not SAMPLED else 'n/a (sampled)'}.",
        f"llama.cpp's fastest --spec-draft-p-min: {r['llama_best_p_min']['p_min']} "
        f"({f2(r['llama_best_p_min']['gen_phase_tps'],1)} tok/s, τ {f2(r['llama_best_p_min']['tau'],3)}).", "",
        f"dspark adaptive: {s['dspark_spec']['rounds']} rounds and {s['dspark_spec']['plain_steps']} plain steps "
        f"(fixed: {s['dspark_spec_fixed']['rounds']} rounds).", "",
        "| prompt | dspark τ (fixed / adaptive) | llama.cpp τ (dspark file) | llama.cpp τ (llama.cpp file) | dspark spec==AR (adaptive / fixed) | llama.cpp spec==AR (d/l) | other CPU during / attempts |",
        "|---|---|---|---|---|---|---|"]
    for p in r["per_prompt"]:
        g = lambda k, f: (p.get(k) or {}).get(f)
        L.append(f"| {p['prompt']} | {f2(g('dspark_spec_fixed','tau'),2)} / {f2(g('dspark_spec','tau'),2)} | {f2(g('llama_spec_dsparkfile','tau'),2)} | "
                 f"{f2(g('llama_spec_llamafile','tau'),2)} | {g('dspark_spec','identical_to_ar_tokens')} / {g('dspark_spec_fixed','identical_to_ar_tokens')} | "
                 f"{g('llama_spec_dsparkfile','identical_to_ar_text')}/{g('llama_spec_llamafile','identical_to_ar_text')} | "
                 f"{g('machine','foreign_cpu_during')} / {g('machine','attempts')} |")
    L.append("")
L += ["Speeds are generation-phase rates (see the script header): pooled = Σ tokens / Σ seconds over prompts, "
      "median = median of the per-prompt rates (robust to a stalled run on a shared machine); "
      "the dspark eval row uses its whole-run definition.",
      f"Failures: {res['failures'] or 'none'}.", ""]
pathlib.Path(base + ".md").write_text("\n".join(L))
print("\n".join(L))
EOF
log "wrote $OUT/results-$PAIR$SUFFIX.md and $OUT/results-$PAIR$SUFFIX.json"

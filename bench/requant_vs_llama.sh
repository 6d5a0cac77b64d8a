#!/usr/bin/env bash
# requant_vs_llama.sh — every weight type llama-quantize makes, run by dspark and by
# llama.cpp side by side: a trained Qwen3 target (examples/code-pair, Q8_0) and a real
# Llama (SmolLM2-135M-Instruct, Q4_1) requantized with an importance matrix into each
# type; per type and prompt, dspark's greedy tokens against llama.cpp's, and (code-pair)
# dspark's speculative tokens against its own plain decoding.
#
# Usage:  bench/requant_vs_llama.sh
#
# Environment (defaults in brackets):
#   MODELS      which targets, space separated ["code smol"]
#                 code  examples/code-pair/target.gguf (qwen3, Q8_0; rows of 256 and 768),
#                       prompts examples/code-pair/heldout.jsonl, drafter examples/code-pair/draft
#                 smol  $SMOL (llama, Q4_1; rows of 576 and 1536, so 256-blocks fall back),
#                       prompts bench/requant/chat.jsonl (ChatML)
#   SMOL        [$DSPARK_ASSETS/SmolLM2-135M-Instruct.Q4_1.gguf, DSPARK_ASSETS defaulting to
#               REPO/.cache/assets, where scripts/fetch-assets.sh puts it]
#   TYPES       llama-quantize types, space separated [all below]; NAME+pure adds --pure
#               (every matrix in the one type, no mixture): MXFP4_MOE gives a dense model
#               Q8_0 everywhere, so MXFP4_MOE+pure is the only way MXFP4 is exercised. Q2_0
#               is not among the types dspark runs; it is there to see how a refusal reads.
#   N_CODE      code prompts: the first N_CODE lines of heldout.jsonl [12]
#   N_CHAT      chat prompts: the first N_CHAT lines of chat.jsonl [12]
#   TOKENS      greedy tokens per prompt, end of sequence ignored [48]
#   THREADS     threads of every engine [2]
#   TOP         logits kept per step for the divergence analysis [5]
#   LLAMA_BIN   llama.cpp build bin dir (llama-imatrix, llama-quantize, libllama) [/tmp/llamacpp/build/bin]
#   LLAMA_SRC   llama.cpp source tree, for building bench/llama_dump
#               [/tmp/llamacpp/llama_cpp_python-0.3.36/vendor/llama.cpp]
#   DSPARK      dspark binary [REPO/target/release/dspark]
#   GREEDY_TOP  the runtime's per-step top logits (crates/runtime/examples/greedy_top.rs:
#               cargo build --release -p dspark-runtime --example greedy_top)
#               [REPO/target/release/examples/greedy_top]
#   PY          python with gguf-py (tensor type histograms) [REPO/.venv/bin/python]
#   OUT         work and output dir [/tmp/requant]
#   REDO        1: remake importance matrices, quantized files and runs that exist [0]
#
# What it does:
#   1. builds bench/llama_dump into $OUT (libllama: greedy ids and each step's top logits);
#      converts the code-pair drafter (`dspark convert`, Q8_0) to $OUT/code/draft.gguf.
#   2. importance matrices, `llama-imatrix -c 128` on text neither prompt set holds:
#      code  the last 32 lines of heldout.jsonl (prompts 33..64, held-out CPython stdlib,
#            PSF licence; the test prompts are the first N_CODE <= 32);
#      smol  bench/requant/english.txt (≈ 5.6 kB of plain English written for this bench).
#   3. `llama-quantize --allow-requantize --imatrix IMAT SRC OUT/<model>/<TYPE>.gguf TYPE`
#      for each type (log beside it: llama.cpp's fallbacks for rows its block does not divide).
#   4. bench/requant_vs_llama.py: per file, the tensor type histogram (`dspark inspect
#      --json`, gguf-py if that fails); per prompt
#      `dspark generate -p TEXT -n TOKENS --ignore-eos --json -t THREADS`, llama_dump
#      --prompt TEXT --greedy TOKENS --gen-top TOP (libllama's tokenizer, BOS as the vocabulary
#      says, special tokens parsed; CPU with its default weight repacking, flash attention
#      auto, F16 cache: llama-completion's defaults), greedy_top on dspark's prompt ids;
#      code-pair also `dspark generate --draft` (default adaptive schedule); llama_dump
#      again with --fa off (the llama.cpp self reference). llama_dump runs
#      with OMP_WAIT_POLICY=passive: the same work split, but idle workers sleep (spinning
#      workers made a run 7× slower on a shared machine).
#
# Definitions:
#   equal          dspark's TOKENS greedy ids == llama.cpp's (and the prompt ids agree).
#   common prefix  leading ids the two agree on (TOKENS when equal), mean over prompts.
#   logit Δ        at every step up to the first divergence (same context in both engines),
#                  |dspark − llama.cpp| of the logit of every token in both top-TOP lists;
#                  mean and max over the type's prompts (quantization and accumulation-order
#                  noise; a kernel or dequantization error shows as a large Δ even where the
#                  tokens agree).
#   llama.cpp self llama.cpp with -fa off against llama.cpp's default, on every prompt: how
#                  often its own greedy ids agree, and the same logit Δ between the two. A
#                  dspark Δ no larger than this one is noise of the size llama.cpp's own
#                  arithmetic choices make.
#   divergence     the first differing step (same context in both): each engine's two best
#                  (id, logit) and its margin of its own pick over the other engine's pick. A
#                  near-tie when both margins are at most TIE = max(0.05, 2 × that prompt's
#                  logit Δ). Which token llama.cpp -fa off picks there is shown.
#   spec = AR      speculative ids == plain ids on every prompt (code-pair only).
#   tok/s          dspark generate's tokens_per_second (whole run, prefill included), the median
#                  over prompts; the machine is shared, so these are indicative only.
#
# Outputs: $OUT/results.md (one table per model, then every divergence), $OUT/results.json
# (per type: the table's figures, tensor types, fallbacks, divergences, and per prompt both
# engines' ids and the comparison), $OUT/<model>/<TYPE>.{gguf,quantize.log}, and every
# engine's raw output per prompt in $OUT/<model>/runs/<TYPE>.json (reused by later runs
# with the same prompts, TOKENS, THREADS, TOP and file; REDO=1 remakes them).
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
MODELS=${MODELS:-code smol}
SMOL=${SMOL:-${DSPARK_ASSETS:-$REPO/.cache/assets}/SmolLM2-135M-Instruct.Q4_1.gguf}
TYPES=${TYPES:-Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K Q2_K_S Q3_K_S Q3_K_M Q3_K_L Q4_K_S Q4_K_M \
Q5_K_S Q5_K_M Q6_K IQ1_S IQ1_M IQ2_XXS IQ2_XS IQ2_S IQ2_M IQ3_XXS IQ3_XS IQ3_S IQ3_M \
IQ4_NL IQ4_XS TQ1_0 TQ2_0 MXFP4_MOE MXFP4_MOE+pure Q1_0 Q2_0}
N_CODE=${N_CODE:-12}
N_CHAT=${N_CHAT:-12}
TOKENS=${TOKENS:-48}
THREADS=${THREADS:-2}
TOP=${TOP:-5}
LLAMA_BIN=${LLAMA_BIN:-/tmp/llamacpp/build/bin}
LLAMA_SRC=${LLAMA_SRC:-/tmp/llamacpp/llama_cpp_python-0.3.36/vendor/llama.cpp}
DSPARK=${DSPARK:-$REPO/target/release/dspark}
GREEDY_TOP=${GREEDY_TOP:-$REPO/target/release/examples/greedy_top}
PY=${PY:-$REPO/.venv/bin/python}
OUT=${OUT:-/tmp/requant}
REDO=${REDO:-0}
log() { echo "requant: $*" >&2; }
fresh() { [ "$REDO" = 1 ] || [ ! -s "$1" ]; }   # true when $1 must be (re)made

mkdir -p "$OUT"
started=$(date +%s)

# 1. llama_dump and the drafter.
if [ ! -x "$OUT/llama_dump" ] || [ "$REPO/bench/llama_dump.cpp" -nt "$OUT/llama_dump" ]; then
  LLAMA_SRC=$LLAMA_SRC LLAMA_BIN=$LLAMA_BIN OUT=$OUT/llama_dump sh "$REPO/bench/llama_dump.sh" >&2
fi
for m in $MODELS; do
  mkdir -p "$OUT/$m/runs"
  case $m in
    code) src=$REPO/examples/code-pair/target.gguf
          tail -n 32 "$REPO/examples/code-pair/heldout.jsonl" \
            | "$PY" -c 'import json,sys; [print(json.loads(l)["prompt"]) for l in sys.stdin]' \
            > "$OUT/code/imatrix.txt"
          if fresh "$OUT/code/draft.gguf"; then
            "$DSPARK" convert "$REPO/examples/code-pair/draft" -o "$OUT/code/draft.gguf" --force -q
          fi ;;
    smol) src=$SMOL
          cp "$REPO/bench/requant/english.txt" "$OUT/smol/imatrix.txt" ;;
    *) log "unknown model $m (code or smol)"; exit 2 ;;
  esac
  ln -sf "$src" "$OUT/$m/SRC.gguf"

  # 2. The importance matrix.
  if fresh "$OUT/$m/imatrix.gguf"; then
    log "$m: llama-imatrix"
    "$LLAMA_BIN/llama-imatrix" -m "$src" -f "$OUT/$m/imatrix.txt" -o "$OUT/$m/imatrix.gguf" \
      -c 128 -t "$THREADS" > "$OUT/$m/imatrix.log" 2>&1
  fi

  # 3. Every type.
  for t in $TYPES; do
    name=${t/+pure/_pure}
    flags=(--allow-requantize --imatrix "$OUT/$m/imatrix.gguf")
    [ "$t" != "$name" ] && flags+=(--pure)
    if fresh "$OUT/$m/$name.gguf"; then
      log "$m: llama-quantize $t"
      if ! "$LLAMA_BIN/llama-quantize" "${flags[@]}" "$src" "$OUT/$m/$name.gguf" "${t%+pure}" "$THREADS" \
          > "$OUT/$m/$name.quantize.log" 2>&1; then
        log "$m: llama-quantize $t failed (see $OUT/$m/$name.quantize.log)"
        rm -f "$OUT/$m/$name.gguf"
      fi
    fi
  done
done

# 4. Runs and the report.
if [ ! -x "$GREEDY_TOP" ]; then
  log "no $GREEDY_TOP (cargo build --release -p dspark-runtime --example greedy_top):"
  log "dspark's logits are not read; Δ and the divergence analysis are left out"
fi
"$PY" "$REPO/bench/requant_vs_llama.py" --out "$OUT" --repo "$REPO" --models $MODELS \
  --types $(for t in SRC $TYPES; do echo "${t/+pure/_pure}"; done) \
  --n-code "$N_CODE" --n-chat "$N_CHAT" --tokens "$TOKENS" --threads "$THREADS" --top "$TOP" \
  --dspark "$DSPARK" --greedy-top "$GREEDY_TOP" --llama-dump "$OUT/llama_dump" --redo "$REDO"
log "wall time $(( $(date +%s) - started )) s; $OUT/results.md"

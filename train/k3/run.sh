#!/usr/bin/env bash
# Rebuild the dspark K3 pair (examples/k3-pair/) with ONE command:  train/k3/run.sh
#
# Uses the code pair's venv ($TRAIN_VENV, default /tmp/train/venv: torch, transformers, specforge 0.2.0, gguf,
# tokenizers; train/run.sh creates it), keeps every intermediate under $K3_WORK (default /tmp/train/k3work),
# and writes the committed pair to examples/k3-pair/. Every stage is skipped when its output exists; the
# target and the drafter resume from their last checkpoint (written every 50 steps, and on SIGTERM), the
# continuations per shard. K3_FORCE=1 redoes the export. Needs /tmp/llamacpp (built; for agree.py's
# llama_dump and export.py's libggml MXFP4 check) and a dspark binary ($DSPARK, default /tmp/dspark-k3/dspark).
set -euo pipefail
cd "$(dirname "$0")"
VENV=${TRAIN_VENV:-/tmp/train/venv}
WORK=${K3_WORK:-/tmp/train/k3work}
export K3_WORK=$WORK TRAIN_WORK=$WORK OMP_WAIT_POLICY=PASSIVE PYTHONUNBUFFERED=1
mkdir -p "$WORK"
PY="nice -n 19 $VENV/bin/python"
stage() { echo "=== $1 ($(date -u +%H:%M:%S))" | tee -a "$WORK/run.log"; }
timed() { local t0=$SECONDS; "$@"; echo "    $(( (SECONDS - t0) / 60 )) min $(( (SECONDS - t0) % 60 )) s: $*" | tee -a "$WORK/run.log"; }

stage corpus;   [ -f "$WORK/corpus/manifest.json" ] || timed $PY ../corpus.py
stage prompts;  [ -f "$WORK/prompts_heldout.jsonl" ] || timed $PY make_prompts.py
stage checks;   [ -f "$WORK/test_model.log" ] || { timed $PY test_model.py > "$WORK/test_model.log.tmp" && mv "$WORK/test_model.log.tmp" "$WORK/test_model.log"; }
stage target;   [ -f "$WORK/target/model.pt" ] || timed $PY train_target.py --steps 600 --seq 256 --batch 8 --warmup 40 --eval-every 100
stage export;   timed $PY export.py
stage llama_dump; [ -x "$WORK/llama_dump" ] || LLAMA_SRC=${LLAMA_SRC:-/tmp/llamacpp/src} OUT="$WORK/llama_dump" sh ../../bench/llama_dump.sh
stage agree;    [ -f "$WORK/eval/agree.json" ] || timed $PY agree.py --prompts 8 --n 32
stage continuations; timed $PY gen_continuations.py --shards 32
stage drafter;  [ -f "$WORK/draft_summary.json" ] || timed $PY train_drafter.py --steps 1200
stage export_draft; timed $PY export_draft.py
stage eval;     [ -f "$WORK/eval/eval.json" ] || timed $PY eval.py --draft ../../examples/k3-pair/draft
stage runtime;  [ -f "$WORK/eval/runtime.json" ] || timed $PY runtime_eval.py
stage rollback; [ -f "$WORK/eval/rollback.json" ] || timed $PY rollback_mix.py
stage finalize; timed $PY finalize.py

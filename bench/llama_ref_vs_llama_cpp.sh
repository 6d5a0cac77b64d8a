#!/usr/bin/env bash
# llama_ref_vs_llama_cpp.sh — the numpy reference of llama.cpp's `llama` graph
# (tests/reference/llama_ref.py --ggml-activations) against llama.cpp itself, on tiny files
# of every option and several weight types written by tests/reference/make_tiny_llama.py:
# llama.cpp's logits (bench/llama_dump, `--fa off --ctk f32`, the prompt as one batch)
# through tests/reference/compare.py's rule (1e-4 of each row's largest logit). Prints one
# line per file: the worst error / allowed ratio. The figures are in tests/reference/README.md.
#
# Usage:  bench/llama_ref_vs_llama_cpp.sh
# Environment: PY (a Python with gguf-py and numpy) [.venv/bin/python],
#              LLAMA_DUMP [/tmp/llama_dump] (build it with bench/llama_dump.sh),
#              OUT [/tmp/llama_ref_vs_llama_cpp].
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PY:-$PWD/.venv/bin/python}"
LLAMA_DUMP="${LLAMA_DUMP:-/tmp/llama_dump}"
OUT="${OUT:-/tmp/llama_ref_vs_llama_cpp}"
R=tests/reference
TOKENS=7,8,9,300,42,5,511,0,77,3,250,19
mkdir -p "$OUT"
one() {
  local name=$1
  shift
  "$PY" $R/make_tiny_llama.py "$OUT/$name.gguf" --seed 3 "$@"
  "$LLAMA_DUMP" "$OUT/$name.gguf" --tokens $TOKENS --fa off --ctk f32 --threads 2 \
    --out "$OUT/$name.llama.json" >/dev/null 2>"$OUT/$name.err"
  "$PY" $R/llama_ref.py "$OUT/$name.gguf" --tokens $TOKENS --ggml-activations --out "$OUT/$name.ref.json"
  printf '%-28s %s\n' "$name" "$("$PY" $R/compare.py "$OUT/$name.ref.json" "$OUT/$name.llama.json" | sed -n 1p)"
}
one plain
one biases --biases
one fused-qkv --fused-qkv --biases
one rope-freqs --freq-factors
one linear --scaling linear --factor 4
one linear-attn-factor --scaling linear --factor 2 --attn-factor 1.3
one yarn --scaling yarn --factor 4 --orig-ctx 1024
one yarn-attn-factor-freqs --scaling yarn --factor 8 --orig-ctx 512 --attn-factor 0.8 --freq-factors
one none-with-factor --scaling none --factor 4
one tied --tied
one q8_0 --wtype q8_0 --biases --fused-qkv
one q4_0 --wtype q4_0
one q5_0 --wtype q5_0
one q4_1-256 --wtype q4_1 --hidden 256 --head-dim 64 --ffn 512
one q5_1-256 --wtype q5_1 --hidden 256 --head-dim 64 --ffn 512
one bf16 --wtype bf16
one f16 --wtype f16
# F16 weights are the one exception (about 2x the allowance): llama.cpp's batched products
# with F16 weights do not round activations to F16 as its one-row path (and the reference)
# do; `llama_dump --batch 1` on the same file agrees with the reference.

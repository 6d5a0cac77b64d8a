#!/usr/bin/env bash
# Runtime benchmark on the synthetic Qwen3-0.6B-shaped pair, side by side with llama.cpp,
# same GGUF, same threads, alternating runs in one session:
#   - llama.cpp (built from source by the llama-cpp-python sdist into $WORK/llama-venv,
#     ≈ 5 min on 2 cores the first time), driven by bench/llama_cpp_qwen3.py: decode step
#     and 8-token verify forward;
#   - `dspark bench`: the same two steps, plus the drafter's block, a speculative round and
#     the break-even acceptance length.
# Then the same two steps after longer prefills (LONG, default 1024 and 2048 positions),
# where attention over the KV cache weighs in: one alternating pair per length.
# Prints tables; the raw JSON of every run stays in $WORK.
#
# Usage: bash bench/runtime_qwen3.sh
#        WORK=/path THREADS=2 RUNS=20 ROUNDS=3 LONG="1024 2048" bash bench/runtime_qwen3.sh
set -euo pipefail
cd "$(dirname "$0")/.."
WORK=${WORK:-/tmp/dspark-runtime-bench}
THREADS=${THREADS:-2}
RUNS=${RUNS:-20}
ROUNDS=${ROUNDS:-3}
LONG=${LONG:-1024 2048}
DSPARK=target/release/dspark
cargo build --release -q
mkdir -p "$WORK"

LLAMA_PY="$WORK/llama-venv/bin/python"
# Every SIMD extension this machine runs, named explicitly rather than GGML_NATIVE: the
# Xeon VMs here advertise AMX, but the hypervisor does not enable its tile state, so a
# native build (which uses AMX tiles) dies of SIGILL in its first matmul.
LLAMA_FLAGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON"
if grep -qw avx512f /proc/cpuinfo; then
  LLAMA_FLAGS="$LLAMA_FLAGS -DGGML_AVX512=ON"
  for f in avx512_vbmi:VBMI avx512_vnni:VNNI avx512_bf16:BF16; do
    grep -qw "${f%%:*}" /proc/cpuinfo && LLAMA_FLAGS="$LLAMA_FLAGS -DGGML_AVX512_${f##*:}=ON"
  done
fi
grep -qw avx_vnni /proc/cpuinfo && LLAMA_FLAGS="$LLAMA_FLAGS -DGGML_AVX_VNNI=ON"
if ! "$LLAMA_PY" -c "import llama_cpp" 2>/dev/null; then
  echo "building llama.cpp (llama-cpp-python 0.3.36 from source) into $WORK/llama-venv"
  python3 -m venv "$WORK/llama-venv"
  CMAKE_ARGS="$LLAMA_FLAGS -DLLAMA_CURL=OFF" CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) \
    "$WORK/llama-venv/bin/pip" install -q --no-cache-dir llama-cpp-python==0.3.36
fi

PAIR="$WORK/qwen3-0.6b"
[ -f "$PAIR/target.gguf" ] || "$DSPARK" synth --geometry qwen3-0.6b --out "$PAIR" -q
[ -f "$PAIR/draft.gguf" ] || "$DSPARK" convert "$PAIR/draft" -o "$PAIR/draft.gguf" -q --force
cat "$PAIR/target.gguf" "$PAIR/draft.gguf" > /dev/null   # page cache, for both engines

for r in $(seq "$ROUNDS"); do
  "$LLAMA_PY" bench/llama_cpp_qwen3.py "$PAIR/target.gguf" --threads "$THREADS" \
    --runs "$RUNS" > "$WORK/llama.$r.json"
  "$DSPARK" bench --target "$PAIR/target.gguf" --draft "$PAIR/draft.gguf" \
    --threads "$THREADS" --runs "$RUNS" --json > "$WORK/dspark.$r.json"
done

for ctx in $LONG; do
  "$LLAMA_PY" bench/llama_cpp_qwen3.py "$PAIR/target.gguf" --threads "$THREADS" \
    --runs 5 --context "$ctx" > "$WORK/llama.ctx$ctx.json"
  "$DSPARK" bench --target "$PAIR/target.gguf" --threads "$THREADS" --runs 5 \
    --context "$ctx" --json > "$WORK/dspark.ctx$ctx.json"
done

python3 - "$WORK" "$ROUNDS" $LONG <<'PY'
import json, sys
work, rounds, long = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
print(f"{'run':>3} | {'llama.cpp decode':>16} | {'dspark decode':>13} | {'llama.cpp verify 8':>18} | {'dspark verify 8':>15} | {'draft':>7} | {'round':>7} | break-even")
for r in range(1, rounds + 1):
    l = json.load(open(f"{work}/llama.{r}.json"))
    d = json.load(open(f"{work}/dspark.{r}.json"))
    t, dr, ro = d["target"], d["drafter"], d["round"]
    print(f"{r:>3} | {l['decode']['median_ms']:13.2f} ms | {t['decode']['median_ms']:10.2f} ms |"
          f" {l['verify']['median_ms']:15.2f} ms | {t['verify']['median_ms']:12.2f} ms |"
          f" {dr['draft']['median_ms']:4.2f} ms | {ro['round_ms']:4.1f} ms |"
          f" {ro['break_even_acceptance_length']:.2f} (verify {ro['verify_tokens']} tokens)")
print(f"kernels: {d['kernels']}, threads {d['threads']}, memory bandwidth {d['memory_bandwidth_gb_s']:.1f} GB/s;"
      f" llama.cpp: {l['engine']}; {l['system_info']}")
print()
print(f"{'context':>7} | {'llama.cpp decode':>16} | {'dspark decode':>13} | {'llama.cpp verify 8':>18} | {'dspark verify 8':>15}")
for ctx in long:
    l = json.load(open(f"{work}/llama.ctx{ctx}.json"))
    t = json.load(open(f"{work}/dspark.ctx{ctx}.json"))["target"]
    print(f"{ctx:>7} | {l['decode']['median_ms']:13.2f} ms | {t['decode']['median_ms']:10.2f} ms |"
          f" {l['verify']['median_ms']:15.2f} ms | {t['verify']['median_ms']:12.2f} ms")
PY

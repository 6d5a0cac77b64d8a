#!/usr/bin/env bash
# Full-geometry conversion benchmark, all in one run on this machine:
#   1. the floor: the unavoidable work done by standard tools one after another
#      (openssl sha256 of the source and of the output, dd conv=fdatasync of the output);
#   2. `dspark convert` (hashes, quantizes, writes, fsyncs, reports), three runs;
#   3. the gguf-py path (bench/gguf_py_convert.py: quantize + GGUFWriter, no hashing,
#      no fsync).
# Peak anonymous memory (RssAnon) is sampled from /proc every 20 ms.
#
# Usage: bash bench/convert_k3.sh            (needs ~12 GB free in $WORK, default /tmp)
#        WORK=/path PY=.venv/bin/python bash bench/convert_k3.sh
set -euo pipefail
cd "$(dirname "$0")/.."
WORK=${WORK:-/tmp/dspark-bench}
PY=${PY:-.venv/bin/python}
DSPARK=target/release/dspark
cargo build --release -q
mkdir -p "$WORK"
SRC="$WORK/kimi-k3-dspark"
if [ ! -f "$SRC/model.safetensors" ]; then
  echo "synthesizing $SRC"
  /usr/bin/time -f "synth: %e s" "$DSPARK" synth --geometry kimi-k3-dspark --out "$SRC" -q
fi
cat "$SRC/model.safetensors" > /dev/null   # warm page cache, as for every tool below

now() { date +%s.%N; }
# run_sampled LABEL CMD...: wall time and peak RssAnon / VmHWM of CMD
run_sampled() {
  local label=$1; shift
  local t0; t0=$(now)
  "$@" & local pid=$!
  local anon=0 hwm=0 v
  while kill -0 "$pid" 2>/dev/null; do
    v=$(awk '/^RssAnon/{print $2}' "/proc/$pid/status" 2>/dev/null || true)
    [ -n "$v" ] && [ "$v" -gt "$anon" ] && anon=$v
    v=$(awk '/^VmHWM/{print $2}' "/proc/$pid/status" 2>/dev/null || true)
    [ -n "$v" ] && [ "$v" -gt "$hwm" ] && hwm=$v
    sleep 0.02
  done
  wait "$pid"
  local t1; t1=$(now)
  printf '%-28s %7.2f s   peak RssAnon %6d MiB   VmHWM %6d MiB\n' "$label" "$(echo "$t1 - $t0" | bc)" $((anon / 1024)) $((hwm / 1024))
}

echo "== dspark convert (3 runs) =="
for i in 1 2 3; do
  rm -f "$WORK/out.gguf" "$WORK/conversion-report.json"
  run_sampled "dspark convert #$i" "$DSPARK" convert "$SRC" -o "$WORK/out.gguf" -q \
    --source-repo RadixArk/Kimi-K3-DSpark --source-revision 56ce616ad7486f0e96cbb51ef23ed5a1bce1d92d
done
"$DSPARK" verify "$WORK/out.gguf" --report "$WORK/conversion-report.json" | tail -n 1
python3 - "$WORK/conversion-report.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print(f"tensors {r['tensor_counts']}, parameters {r['source']['parameters']:,}, "
      f"output {r['output']['size_bytes']:,} B / source {r['source']['size_bytes']:,} B = {r['output_to_source_ratio']:.4f}, "
      f"relative RMSE rms {r['error']['rms']:.6f} max {r['error']['max']:.6f}")
PY

echo "== floor: standard tools one after another =="
t0=$(now)
openssl dgst -sha256 "$SRC/model.safetensors" > /dev/null; t1=$(now)
openssl dgst -sha256 "$WORK/out.gguf" > /dev/null; t2=$(now)
dd if="$WORK/out.gguf" of="$WORK/dd-copy" bs=16M conv=fdatasync status=none; t3=$(now)
rm -f "$WORK/dd-copy"
printf 'sha256 source %.2f s + sha256 output %.2f s + dd fdatasync %.2f s = floor %.2f s\n' \
  "$(echo "$t1 - $t0" | bc)" "$(echo "$t2 - $t1" | bc)" "$(echo "$t3 - $t2" | bc)" "$(echo "$t3 - $t0" | bc)"

echo "== gguf-py path =="
rm -f "$WORK/out-gguf-py.gguf"
run_sampled "gguf-py quantize+write" "$PY" bench/gguf_py_convert.py "$SRC" "$WORK/out-gguf-py.gguf"
rm -f "$WORK/out-gguf-py.gguf"

#!/bin/sh
# A Kimi K3 file larger than this machine's memory, decoded greedily by dspark and by
# llama.cpp from a cold page cache: time to first token, wall time, peak RSS, bytes read
# from disk, and whether the two greedy continuations are the same.
#
#   bench/k3_larger_than_memory.sh [MODEL.gguf]
#
# Without MODEL, `dspark synth --geometry kimi-k3-large --seed 1` writes the 38.6 GB
# target into $DIR (default /work/k3big/large; about 2 minutes, written as a stream) unless
# it is there already. Environment (defaults in brackets): DSPARK [target/release/dspark],
# LLAMA_BIN [/tmp/llamacpp/build/bin], LLAMA_DUMP [/tmp/llama_dump, bench/llama_dump.sh
# builds it; empty to skip the token-id check], THREADS [2], N [8 tokens], PROMPT [The
# quick brown fox], RUNS ["dspark llama llama-warmup"], LOGS [a temporary folder].
#
# llama.cpp runs as llama-completion with mmap on (its default), --no-repack, no --mlock,
# greedy (--temp 0), the same threads, context 256; `llama` adds --no-warmup, `llama-warmup`
# keeps llama.cpp's default warm-up (a decode with every expert active: it reads the whole
# file before the prompt). Before each run the page cache is dropped: `echo 3 >
# /proc/sys/vm/drop_caches` when permitted, else the model file's own pages are evicted
# with posix_fadvise(POSIX_FADV_DONTNEED) (what an unprivileged process can do; the
# script says which).
#
# Time to first token = wall − the time both tools report for the tokens after the first
# (dspark's stats.seconds.eval, llama.cpp's "eval time"): load, prefill and the first
# token. Peak RSS and bytes read come from /usr/bin/time -v (maximum resident set size;
# file system inputs × 512); peak RSS counts the mapped file's pages a process has touched,
# so the script also samples /proc/PID/status every 0.2 s for the largest anonymous part
# (RssAnon: what the process allocated, its working memory) beside the file-backed one. The greedy continuations are compared as text (llama-completion
# prints text; informative, as the two print bytes of an incomplete UTF-8 character
# differently) and, with LLAMA_DUMP, as token ids (a libllama greedy run on the same prompt
# ids, not timed; exit status 1 when they differ).
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DSPARK=${DSPARK:-$ROOT/target/release/dspark}
LLAMA_BIN=${LLAMA_BIN:-/tmp/llamacpp/build/bin}
LLAMA_DUMP=${LLAMA_DUMP-/tmp/llama_dump}
THREADS=${THREADS:-2}
N=${N:-8}
PROMPT=${PROMPT:-The quick brown fox}
RUNS=${RUNS:-dspark llama llama-warmup}
DIR=${DIR:-/work/k3big/large}
LOGS=${LOGS:-$(mktemp -d)}
MODEL=${1:-$DIR/target.gguf}

if [ ! -f "$MODEL" ]; then
    [ $# -eq 0 ] || { echo "k3_larger_than_memory: $MODEL: no such file" >&2; exit 2; }
    echo "writing $MODEL (dspark synth --geometry kimi-k3-large --seed 1)" >&2
    "$DSPARK" synth --geometry kimi-k3-large --out "$DIR" --seed 1 -q
fi

mkdir -p "$LOGS"
mem=$(awk '/^MemTotal:/ { printf "%.0f", $2 * 1024 }' /proc/meminfo)
size=$(stat -c %s "$MODEL")
echo "model $MODEL: $size bytes; memory $mem bytes ($(awk "BEGIN { printf \"%.1f\", $size / $mem }")x)"
[ "$size" -gt "$mem" ] || echo "warning: the file fits in memory; this is not the larger-than-memory case" >&2

drop_caches() {
    sync
    if (echo 3 > /proc/sys/vm/drop_caches) 2>/dev/null; then
        echo "drop_caches"
    else
        python3 -c 'import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
os.close(fd)' "$MODEL"
        echo "fadvise-dontneed"
    fi
}

# sampled CMD...: runs CMD under /usr/bin/time -v -o "$t", sampling the peak RssAnon and
# RssFile (kB) of the process it starts into "$t.rss".
sampled() {
    /usr/bin/time -v -o "$t" "$@" &
    tp=$!
    anon=0 file=0
    while kill -0 "$tp" 2>/dev/null; do
        for c in $(pgrep -P "$tp" 2>/dev/null); do
            set -- $(awk '/^RssAnon:/ { a = $2 } /^RssFile:/ { f = $2 } END { print a + 0, f + 0 }' \
                "/proc/$c/status" 2>/dev/null || echo 0 0)
            [ "$1" -le "$anon" ] || anon=$1
            [ "$2" -le "$file" ] || file=$2
        done
        sleep 0.2
    done
    wait "$tp" || return $?
    echo "$anon $file" > "$t.rss"
}

# time_field FILE NAME: a field of /usr/bin/time -v's report.
time_field() { sed -n "s/^[[:space:]]*$2: //p" "$1"; }
secs() { # h:mm:ss or m:ss.ss -> seconds
    echo "$1" | awk -F: '{ s = 0; for (i = 1; i <= NF; i++) s = s * 60 + $i; print s }'
}

printf '%-14s %-16s %8s %8s %12s %9s %9s %8s  %s\n' run cache ttft_s wall_s peak_rss_MB anon_MB file_MB read_GB output
for run in $RUNS; do
    how=$(drop_caches)
    t="$LOGS/$run.time"
    case $run in
    dspark)
        sampled "$DSPARK" generate -m "$MODEL" --prompt "$PROMPT" -n "$N" \
            --ignore-eos --json -t "$THREADS" > "$LOGS/dspark.json" 2> "$LOGS/dspark.err"
        eval_s=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["stats"]["seconds"]["eval"])' "$LOGS/dspark.json")
        python3 -c 'import json, sys; sys.stdout.write(json.load(open(sys.argv[1]))["text"])' "$LOGS/dspark.json" > "$LOGS/dspark.txt"
        ;;
    llama | llama-warmup)
        warm=--no-warmup
        [ "$run" = llama ] || warm=
        sampled "$LLAMA_BIN/llama-completion" -m "$MODEL" -p "$PROMPT" -n "$N" \
            --ignore-eos --temp 0 -t "$THREADS" -tb "$THREADS" --no-repack -no-cnv -c 256 \
            --no-display-prompt $warm > "$LOGS/$run.txt" 2> "$LOGS/$run.err" < /dev/null
        eval_s=$(sed -n 's/.* eval time = *\([0-9.]*\) ms.*/\1/p' "$LOGS/$run.err" | grep -v '^$' | tail -1 |
            awk '{ print $1 / 1000 }')
        ;;
    *) echo "k3_larger_than_memory: unknown run $run" >&2; exit 2 ;;
    esac
    wall=$(secs "$(time_field "$t" 'Elapsed (wall clock) time (h:mm:ss or m:ss)')")
    rss=$(time_field "$t" 'Maximum resident set size (kbytes)')
    inputs=$(time_field "$t" 'File system inputs')
    read -r anon file < "$t.rss"
    printf '%-14s %-16s %8.1f %8.1f %12.0f %9.0f %9.0f %8.2f  %s\n' "$run" "$how" \
        "$(awk "BEGIN { print $wall - $eval_s }")" "$wall" "$(awk "BEGIN { print $rss / 1024 }")" \
        "$(awk "BEGIN { print $anon / 1024 }")" "$(awk "BEGIN { print $file / 1024 }")" \
        "$(awk "BEGIN { print $inputs * 512 / 1e9 }")" "$(head -c 48 "$LOGS/$run.txt" | tr '\n' ' ')"
done

status=0
case " $RUNS " in *" dspark "*)
    for run in llama llama-warmup; do
        case " $RUNS " in *" $run "*)
            # llama-completion ends its output with a newline of its own.
            # Informative only: dspark's JSON text replaces bytes of an incomplete UTF-8
            # character by U+FFFD, llama-completion prints them raw; the ids decide.
            if python3 -c 'import sys
a, b = (open(p, "rb").read().rstrip(b"\n") for p in sys.argv[1:])
sys.exit(a != b.decode("utf-8", "replace").encode())' "$LOGS/dspark.txt" "$LOGS/$run.txt"; then
                echo "greedy text: dspark = $run"
            else
                echo "greedy text: dspark != $run"
            fi ;;
        esac
    done
    if [ -n "$LLAMA_DUMP" ] && [ -x "$LLAMA_DUMP" ]; then
        ids=$(python3 -c 'import json, sys; print(",".join(map(str, json.load(open(sys.argv[1]))["prompt_tokens"])))' "$LOGS/dspark.json")
        "$LLAMA_DUMP" "$MODEL" --tokens "$ids" --greedy "$N" --no-logits --mmap --no-repack --threads "$THREADS" \
            --out "$LOGS/llama_dump.json" 2> "$LOGS/llama_dump.err"
        python3 - "$LOGS/dspark.json" "$LOGS/llama_dump.json" <<'EOF' || status=1
import json, sys
ours = json.load(open(sys.argv[1]))["tokens"]
theirs = json.load(open(sys.argv[2]))["generated"]
print(f"greedy ids: dspark {ours}")
print(f"            llama  {theirs}")
k = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs)))
print(f"greedy ids: {'equal' if ours == theirs else f'first difference at token {k}'}")
sys.exit(0 if ours == theirs else 1)
EOF
    fi ;;
esac
echo "logs: $LOGS"
exit $status

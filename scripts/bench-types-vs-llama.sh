#!/bin/bash
# hasten vs llama-bench on the same GGUF files, interleaved: per round and
# file hasten tg128, llama-bench tg128 (-r 2), hasten pp512, llama-bench
# pp512; prints "round file hasten_tg llama_tg hasten_pp llama_pp" (tokens/s).
# Usage: LLAMA_BIN=DIR HASTEN=BIN BENCH=DIR bash scripts/bench-types-vs-llama.sh "1b-q4_0 1b-q3_k ..."
# (files DIR/NAME.gguf from `hasten synth --shape 1b --type T`; llama.cpp
# found, and repacking turned off on AMX CPUs, by scripts/lib/llama-cpp-env.sh;
# BENCHMARKS.md).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
H=${HASTEN:?set HASTEN to the hasten binary}
WORK=${WORK:-/tmp/hasten-bench}
mkdir -p "$WORK"
# shellcheck source=lib/llama-cpp-env.sh
. "$root/scripts/lib/llama-cpp-env.sh"
BENCH=${BENCH:?set BENCH to the folder of the .gguf files}
for round in 1 2; do
for f in $1; do
  m=$BENCH/$f.gguf
  htg=$($H run --model $m --random-prompt 4 -n 128 -t 2 --ignore-eos --temperature 0 --json-stats 2>&1 >/dev/null | tail -1 | python3 -c "import json,sys; print(round(json.load(sys.stdin)['decode_tokens_per_s'],1))")
  ltg=$($LLAMA_BIN/llama-bench "${LLAMA_BENCH_ARGS[@]}" -m $m -t 2 -p 0 -n 128 -r 2 -o json 2>/dev/null | python3 -c "import json,sys; print(round(json.load(sys.stdin)[0]['avg_ts'],1))")
  hpp=$($H run --model $m --random-prompt 512 -n 1 -t 2 --temperature 0 --json-stats 2>&1 >/dev/null | tail -1 | python3 -c "import json,sys; print(round(json.load(sys.stdin)['prefill_tokens_per_s'],1))")
  lpp=$($LLAMA_BIN/llama-bench "${LLAMA_BENCH_ARGS[@]}" -m $m -t 2 -p 512 -n 0 -r 2 -o json 2>/dev/null | python3 -c "import json,sys; print(round(json.load(sys.stdin)[0]['avg_ts'],1))")
  echo "$round $f $htg $ltg $hpp $lpp"
done
done

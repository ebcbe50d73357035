#!/usr/bin/env bash
# Single-stream decode with and without prompt-lookup speculation
# (`hasten run --speculate ngram|off`), interleaved rounds on the same
# files: planted-pattern models (`hasten synth --pattern 16`: their
# greedy text loops, so drafts are accepted), random weights (drafts
# rejected) and the built-in default model. Prints decode tok/s medians
# and the ratio. Usage:
#   HASTEN=target/release/hasten bash scripts/bench-speculate.sh [ROUNDS] [TOKENS] [THREADS]
# (BENCHMARKS.md, issue 24.)
set -euo pipefail
HASTEN=${HASTEN:-target/release/hasten}
ROUNDS=${1:-3}
TOK=${2:-256}
T=${3:-2}
dir=${BENCH_DIR:-$(mktemp -d)}
root=$(cd "$(dirname "$0")/.." && pwd)
hasten=$HASTEN
# shellcheck source=lib/spec-files.sh
. "$root/scripts/lib/spec-files.sh"
rate() { # model-args... -> decode tok/s
  "$HASTEN" run "$@" -n "$TOK" --temperature 0 --ignore-eos -p "Once upon a time" -t "$T" 2>&1 >/dev/null \
    | grep -o 'decode [0-9.]* tok/s' | grep -o '[0-9.]*'
}
lscpu | grep 'Model name' || true
for m in pattern-135m random-135m pattern-1b random-1b default; do
  args=(--model "$dir/$m.gguf")
  [ "$m" = default ] && args=()
  off=(); on=()
  for r in $(seq "$ROUNDS"); do
    off+=("$(rate "${args[@]}" --speculate off)")
    on+=("$(rate "${args[@]}" --speculate ngram)")
  done
  python3 - "$m" "${off[*]}" "${on[*]}" <<'PY'
import statistics, sys
m, off, on = sys.argv[1], [float(x) for x in sys.argv[2].split()], [float(x) for x in sys.argv[3].split()]
a, b = statistics.median(off), statistics.median(on)
print(f"{m:14s} off {a:8.1f} tok/s  ngram {b:8.1f} tok/s  ratio {b / a:.2f}   (rounds: off {off}, ngram {on})")
PY
done

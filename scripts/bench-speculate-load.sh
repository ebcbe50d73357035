#!/usr/bin/env bash
# Speculative decoding under load: `hasten bench` at 1 and 8 concurrent
# streams against `hasten serve --speculate off`, `--speculate ngram` and
# a draft model (`--draft-model`, the 135m file of the same kind), on a
# planted-pattern 1b Q4_0 file (drafts accepted) and on random weights
# (drafts rejected). Prints aggregate output tok/s per level and the ratio
# to `off` (the same file, the same run). Usage:
#   BENCH_DIR=/work/bench/spec bash scripts/bench-speculate-load.sh [REQUESTS] [OUTPUT] [THREADS]
# (BENCHMARKS.md, issue 24.)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
hasten=${HASTEN:-$root/target/release/hasten}
n=${1:-16}
out=${2:-96}
t=${3:-2}
dir=${BENCH_DIR:-$(mktemp -d)}
# shellcheck source=lib/servers.sh
. "$root/scripts/lib/servers.sh"
# shellcheck source=lib/spec-files.sh
. "$root/scripts/lib/spec-files.sh"
lscpu | grep 'Model name' || true
for kind in pattern random; do
  for mode in off ngram draft; do
    args=(--speculate "$mode")
    [ "$mode" = draft ] && args+=(--draft-model "$dir/$kind-135m.gguf")
    port=$(free_port)
    "$hasten" serve --model "$dir/$kind-1b.gguf" --port "$port" -t "$t" "${args[@]}" >"$dir/serve.log" 2>&1 &
    pid=$!
    wait_ready "http://127.0.0.1:$port" "$pid"
    "$hasten" bench --url "http://127.0.0.1:$port" --api completions --concurrency 1,8 -n "$n" \
      --warmup 2 --input-len 64 --output-len "$out" --temperature 0 --quiet \
      --out "$dir/load-$kind-$mode.json" >/dev/null
    kill "$pid"; wait "$pid" 2>/dev/null || true
  done
done
python3 - "$dir" <<'PY'
import json, sys
d = sys.argv[1]
for kind in ("pattern", "random"):
    base = {}
    for mode in ("off", "ngram", "draft"):
        levels = json.load(open(f"{d}/load-{kind}-{mode}.json"))["levels"]
        for lv in levels:
            s = lv["summary"]
            label = s["label"]
            tps = s["output_tokens_per_s"]
            base.setdefault(label, tps) if mode == "off" else None
            acc = s.get("acceptance_rate")
            acc = f"{acc * 100:.0f}% accepted" if acc is not None else ""
            print(f"{kind:8s} {mode:6s} {label:16s} {tps:8.1f} tok/s  x{tps / base[label]:.2f}  {acc}")
PY

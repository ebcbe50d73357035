#!/usr/bin/env bash
# A bounded soak of `hasten serve` on loopback (issue 5): SECS seconds of
# CLIENTS concurrent clients (streaming, some leaving early at random, some
# non-streaming) against the tiny synthetic model; fails on any unexpected
# error or a KV block still in use at the end, and prints the server's RSS.
# --resume-grace 0, so a client that leaves is cancelled at once.
# Usage: scripts/soak.sh [SECS=300] [CLIENTS=16]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
secs=${1:-300}
clients=${2:-16}
export HASTEN_TESTDATA=${HASTEN_TESTDATA:-$root/testdata}
cargo build --release --quiet -p hasten
cargo build --release --quiet -p hasten-server --example soak
work=$(mktemp -d)
./target/release/hasten synth --shape tiny --type q8_0 \
  --vocab "$HASTEN_TESTDATA/tokenizer/ggml-vocab-llama-spm.gguf" -o "$work/tiny.gguf" >/dev/null 2>&1
./target/release/hasten serve --model "$work/tiny.gguf" --port 0 --resume-grace 0 2>"$work/serve.log" &
pid=$!
trap 'kill $pid 2>/dev/null || true; rm -rf "$work"' EXIT
for _ in $(seq 1 300); do
  addr=$(grep -o 'listening on http://[0-9.:]*' "$work/serve.log" | sed 's|listening on ||' || true)
  [ -n "${addr:-}" ] && curl -sf "$addr/ready" >/dev/null && break
  sleep 0.1
done
./target/release/examples/soak "$addr" "$pid" "$secs" "$clients"

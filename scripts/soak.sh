#!/usr/bin/env bash
# A bounded soak of `hasten serve` on loopback (issues 5 and 21): SECS
# seconds of CLIENTS concurrent clients (streaming, some leaving early at
# random, some non-streaming, 5% faults: malformed JSON, oversized bodies,
# prompts longer than the context) against the tiny synthetic model, with
# one SIGTERM and restart of the server half-way. Fails on any unexpected
# error or a KV block still in use at the end; prints the server's RSS.
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
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
addr="http://127.0.0.1:$port"

start_server() {
  for _ in $(seq 1 100); do
    ./target/release/hasten serve --model "$work/tiny.gguf" --port "$port" --resume-grace 0 \
      2>>"$work/serve.log" &
    echo $! >"$work/pid"
    for _ in $(seq 1 100); do
      if curl -sf "$addr/ready" >/dev/null 2>&1; then return 0; fi
      kill -0 "$(cat "$work/pid")" 2>/dev/null || break
      sleep 0.1
    done
    sleep 0.2 # the port is still held by the draining server
  done
  echo "soak: the server did not start" >&2
  return 1
}

trap 'kill "$(cat "$work/pid" 2>/dev/null)" 2>/dev/null || true; rm -rf "$work"' EXIT
start_server
./target/release/examples/soak "$addr" "$work/pid" "$secs" "$clients" &
soak=$!
sleep $((secs / 2))
old=$(cat "$work/pid")
echo "soak: SIGTERM to the server ($old) at $((secs / 2)) s; restarting" >&2
kill -TERM "$old"
start_server
wait "$old" && echo "soak: the old server drained and exited 0" >&2 \
  || { echo "soak: the old server exited with $?" >&2; exit 1; }
wait "$soak"

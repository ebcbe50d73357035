#!/usr/bin/env bash
# `hasten estimate --measure` predictions beside what `hasten run` measures,
# on the synthetic SmolLM2-135M and TinyLlama-1.1B shapes (Q4_0): prefill of
# 512 tokens and TPOT of 128 tokens after it. Rounds alternate probe and
# run so both see the same machine; prints a markdown table of medians.
#
#   bash scripts/estimate-vs-run.sh [ROUNDS] [THREADS]
#
# Needs a release build (`cargo build --release`); writes models to $WORK
# (default /tmp/hasten-estimate).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
THREADS=${2:-2}
WORK=${WORK:-/tmp/hasten-estimate}
H=${HASTEN:-target/release/hasten}
export HASTEN_TESTDATA=${HASTEN_TESTDATA:-testdata}
mkdir -p "$WORK"
for shape in 135m 1b; do
  f="$WORK/syn-$shape-q4_0.gguf"
  [ -f "$f" ] || "$H" synth --shape "$shape" --type q4_0 -o "$f" >/dev/null
done
out="$WORK/results.jsonl"
: >"$out"
for r in $(seq "$ROUNDS"); do
  for shape in 135m 1b; do
    f="$WORK/syn-$shape-q4_0.gguf"
    est=$("$H" estimate --model "$f" --measure -t "$THREADS" --prompt 512 --output 128 --json)
    pp=$("$H" run --model "$f" --random-prompt 512 -n 1 -t "$THREADS" --json-stats 2>&1 >/dev/null | tail -1)
    tg=$("$H" run --model "$f" --random-prompt 512 -n 129 --ignore-eos -t "$THREADS" --vs-estimate --json-stats 2>&1 >/dev/null | tail -1)
    python3 - "$shape" "$est" "$pp" "$tg" >>"$out" <<'PY'
import json, sys
shape, est, pp, tg = sys.argv[1], *map(json.loads, sys.argv[2:])
e, m = est["estimate"], est["measured"]
print(json.dumps({
    "shape": shape,
    "pred_prefill_ms": max(e["prefill"]["memory_s"], e["prefill"]["compute_s"]) * 1e3,
    "pred_tpot_ms": e["tpot_s"] * 1e3,
    "meas_prefill_ms": pp["prompt_tokens"] / pp["prefill_tokens_per_s"] * 1e3,
    "meas_tpot_ms": 1e3 / tg["decode_tokens_per_s"],
    "read_gbs": m["read_gbs"], "stream_gbs": m["decode_stream_gbs"],
    "matmul_gflops": m["prefill_gflops"], "attention_gflops": m["attention_gflops"],
    "run_read_gbs": tg["read_gb_per_s"], "run_decode_gbs": tg["decode_gb_per_s"],
}))
PY
    echo "round $r $shape done" >&2
  done
done
python3 - "$out" "$ROUNDS" "$THREADS" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
med = lambda s, k: statistics.median(r[k] for r in rows if r["shape"] == s)
print(f"medians of {sys.argv[2]} rounds, {sys.argv[3]} threads\n")
print("| model | probe: read GB/s, decode stream GB/s, matmul GFLOP/s, attention GFLOP/s | phase | predicted | measured | measured / predicted |")
print("|---|---|---|---|---|---|")
for s in ("135m", "1b"):
    probe = f'{med(s,"read_gbs"):.1f}, {med(s,"stream_gbs"):.1f}, {med(s,"matmul_gflops"):.0f}, {med(s,"attention_gflops"):.0f}'
    for ph, p, m in (("prefill 512", "pred_prefill_ms", "meas_prefill_ms"), ("TPOT at 512..640", "pred_tpot_ms", "meas_tpot_ms")):
        print(f"| {s} Q4_0 | {probe} | {ph} | {med(s,p):.1f} ms | {med(s,m):.1f} ms | {med(s,m)/med(s,p):.2f} |")
    print(f"| {s} Q4_0 | | decode GB/s vs read GB/s (hasten run --vs-estimate) | | {med(s,'run_decode_gbs'):.1f} / {med(s,'run_read_gbs'):.1f} | {med(s,'run_decode_gbs')/med(s,'run_read_gbs'):.2f} |")
PY

#!/usr/bin/env bash
# `hasten estimate --measure` predictions beside what `hasten run` measures,
# on the synthetic SmolLM2-135M and TinyLlama-1.1B shapes (Q4_0): prefill of
# 512 tokens and TPOT of 128 tokens after it, and the 1.1B shape's at a
# 4096-token depth (a file declaring 8192 positions). Rounds alternate
# probe and run so both see the same machine; prints a markdown table of
# medians.
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
# label shape context prompt
ROWS=${ROWS:-"135m 135m 2048 512
1b 1b 2048 512
1b@4096 1b 8192 4096"}
while read -r _ shape ctx _; do
  f="$WORK/syn-$shape-q4_0-ctx$ctx.gguf"
  [ -f "$f" ] || "$H" synth --shape "$shape" --type q4_0 --context "$ctx" -o "$f" >/dev/null
done <<<"$ROWS"
out="$WORK/results.jsonl"
: >"$out"
for r in $(seq "$ROUNDS"); do
  while read -r label shape ctx prompt; do
    f="$WORK/syn-$shape-q4_0-ctx$ctx.gguf"
    est=$("$H" estimate --model "$f" --measure -t "$THREADS" --prompt "$prompt" --output 128 --json)
    pp=$("$H" run --model "$f" --random-prompt "$prompt" -n 1 -t "$THREADS" --json-stats 2>&1 >/dev/null </dev/null | tail -1)
    tg=$("$H" run --model "$f" --random-prompt "$prompt" -n 129 --ignore-eos -t "$THREADS" --vs-estimate --json-stats 2>&1 >/dev/null </dev/null | tail -1)
    python3 - "$label" "$est" "$pp" "$tg" >>"$out" <<'PY'
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
    "prompt": pp["prompt_tokens"], "fixed_ms": m["step_fixed_ms"],
    "decode_attention_gflops": m["decode_attention_gflops"],
}))
PY
    echo "round $r $label done" >&2
  done <<<"$ROWS"
done
python3 - "$out" "$ROUNDS" "$THREADS" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
med = lambda s, k: statistics.median(r[k] for r in rows if r["shape"] == s)
print(f"medians of {sys.argv[2]} rounds, {sys.argv[3]} threads\n")
print("| model | probe: read GB/s, decode stream GB/s, matmul GFLOP/s, attention GFLOP/s (decode), fixed ms/step | phase | predicted | measured | measured / predicted |")
print("|---|---|---|---|---|---|")
for s in dict.fromkeys(r["shape"] for r in rows):
    probe = f'{med(s,"read_gbs"):.1f}, {med(s,"stream_gbs"):.1f}, {med(s,"matmul_gflops"):.0f}, {med(s,"attention_gflops"):.0f} ({med(s,"decode_attention_gflops"):.0f}), {med(s,"fixed_ms"):.2f}'
    n = int(med(s, "prompt"))
    for ph, p, m in ((f"prefill {n}", "pred_prefill_ms", "meas_prefill_ms"), (f"TPOT at {n}..{n + 128}", "pred_tpot_ms", "meas_tpot_ms")):
        print(f"| {s} Q4_0 | {probe} | {ph} | {med(s,p):.1f} ms | {med(s,m):.1f} ms | {med(s,m)/med(s,p):.2f} |")
    print(f"| {s} Q4_0 | | decode GB/s vs read GB/s (hasten run --vs-estimate) | | {med(s,'run_decode_gbs'):.1f} / {med(s,'run_read_gbs'):.1f} | {med(s,'run_decode_gbs')/med(s,'run_read_gbs'):.2f} |")
PY

"""Single-stream TPOT: `hasten run` against `hasten serve` /v1/completions,
unary and streamed (server-side `timing.decode_ms`), rounds interleaved,
the server SIGSTOPped while `run` runs. 64-token random prompt, greedy.
Usage: python3 scripts/tpot-serve-vs-run.py BIN MODEL ROUNDS TOKENS [THREADS]
(BENCHMARKS.md, issue 20)."""
import json, subprocess, sys, time, urllib.request, statistics, re
BIN, MODEL, ROUNDS, TOK = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
T = sys.argv[5] if len(sys.argv) > 5 else "2"
import os
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from ttft_probe import server_tpot
from serve import start
p = start(BIN, MODEL, 18600, T)
time.sleep(0.5)
url = "http://127.0.0.1:18600/v1/completions"
def serve(stream, seed):
    return server_tpot(url, TOK, stream, seed)
def run(seed):
    o = subprocess.run([BIN, "run", "--model", MODEL, "--random-prompt", "64", "--seed", str(seed), "-n", str(TOK), "--ignore-eos", "--temperature", "0", "-t", T, "--json-stats"], capture_output=True, text=True)
    return 1e3 / json.loads(o.stderr.strip().splitlines()[-1])["decode_tokens_per_s"]
serve(False, 1); run(1)
res = {"run": [], "unary": [], "stream": []}
seed = 10
for r in range(ROUNDS):
    for k in (["run", "unary", "stream"] if r % 2 == 0 else ["stream", "unary", "run"]):
        seed += 1
        p.send_signal(19) if k == "run" else None  # SIGSTOP the server while run runs
        v = run(seed) if k == "run" else serve(k == "stream", seed)
        p.send_signal(18) if k == "run" else None
        res[k].append(v)
med = {k: statistics.median(v) for k, v in res.items()}
print({k: [round(x, 2) for x in v] for k, v in res.items()})
print("medians ms:", {k: round(v, 3) for k, v in med.items()}, "unary/run %.3f stream/run %.3f" % (med["unary"] / med["run"], med["stream"] / med["run"]))
p.terminate(); p.wait()

"""What a response_format grammar costs: single-stream TPOT (server-side
`timing.decode_ms`) with no grammar, a JSON-schema mask (inside a long
string, so every step is masked) and a regex, interleaved rounds, with
STREAMS requests at once (each its own grammar); and the time to first
token of a request with a large schema (its compile time) against none.
Usage:
  python3 scripts/bench-grammar.py BIN MODEL [ROUNDS] [TOKENS] [THREADS] [STREAMS]
(BENCHMARKS.md, issue 23)."""
import json
import os
from concurrent.futures import ThreadPoolExecutor
import statistics
import subprocess
import sys
import time
import urllib.request

BIN, MODEL = sys.argv[1], sys.argv[2]
ROUNDS = int(sys.argv[3]) if len(sys.argv) > 3 else 4
TOK = int(sys.argv[4]) if len(sys.argv) > 4 else 128
T = sys.argv[5] if len(sys.argv) > 5 else "2"
STREAMS = int(sys.argv[6]) if len(sys.argv) > 6 else 1
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from ttft_probe import random_tokens  # noqa: E402
from serve import start  # noqa: E402

p = start(BIN, MODEL, 18610, T)
time.sleep(0.5)
URL = "http://127.0.0.1:18610/v1/completions"

LONG_STRING = {"type": "json_schema", "json_schema": {"name": "t", "schema": {
    "type": "object", "properties": {"t": {"type": "string", "minLength": 100000}},
    "required": ["t"]}}}
REGEX = {"type": "regex", "regex": "[a-z ]{100000}"}
# 60 properties, nested objects, enums, arrays: compile time shows in TTFT.
BIG = {"type": "json_schema", "json_schema": {"name": "big", "schema": {
    "type": "object",
    "properties": {f"f{i}": {"type": "object", "properties": {
        "a": {"type": "string", "pattern": "^[A-Z]{2}[0-9]{4}$"},
        "b": {"enum": ["x", "y", "z"]},
        "c": {"type": "array", "items": {"type": "integer"}, "maxItems": 5}},
        "required": ["a", "b", "c"]} for i in range(60)},
    "required": [f"f{i}" for i in range(60)]}}}


def request(fmt, seed, max_tokens):
    body = {"prompt": random_tokens(64, 32000, seed), "max_tokens": max_tokens,
            "temperature": 0, "stream": False}
    if fmt is None:
        body["ignore_eos"] = True
    else:
        body["response_format"] = fmt
    r = urllib.request.Request(URL, json.dumps(body).encode(), {"content-type": "application/json"})
    t0 = time.time()
    with urllib.request.urlopen(r) as resp:
        d = json.load(resp)
    wall = time.time() - t0
    return d["timing"], d["usage"]["completion_tokens"], wall


request(None, 1, 4)
request(LONG_STRING, 1, 4)
res = {"none": [], "json": [], "regex": []}
seed = 10
for r in range(ROUNDS):
    for k, fmt in ([("none", None), ("json", LONG_STRING), ("regex", REGEX)] if r % 2 == 0
                   else [("regex", REGEX), ("json", LONG_STRING), ("none", None)]):
        seeds = list(range(seed + 1, seed + 1 + STREAMS))
        seed += STREAMS
        with ThreadPoolExecutor(STREAMS) as pool:
            for timing, n, _ in pool.map(lambda s, fmt=fmt: request(fmt, s, TOK), seeds):
                res[k].append(timing["decode_ms"] / max(n - 1, 1))
med = {k: statistics.median(v) for k, v in res.items()}
print(f"{STREAMS} stream(s) at once")
print("TPOT ms per request:", {k: [round(x, 3) for x in v] for k, v in res.items()})
print("medians ms:", {k: round(v, 3) for k, v in med.items()},
      "json/none %.3f regex/none %.3f" % (med["json"] / med["none"], med["regex"] / med["none"]))
ttft = {"none": [], "big schema": []}
for r in range(ROUNDS):
    for k, fmt in [("none", None), ("big schema", BIG)]:
        seed += 1
        _, _, wall = request(fmt, seed, 1)
        ttft[k].append(wall * 1e3)
print("1-token request wall ms:", {k: round(statistics.median(v), 1) for k, v in ttft.items()})
p.terminate()
p.wait()

"""Context switches per thread of `hasten serve` (from /proc) during one
200-token /v1/completions request, unary and streamed.
Usage: python3 scripts/lib/ctx_switches.py BIN MODEL (BENCHMARKS.md, issue 20)."""
import json, subprocess, sys, time, urllib.request, glob, os
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve import start
BIN, MODEL = sys.argv[1], sys.argv[2]
p = start(BIN, MODEL, 18601)
time.sleep(0.3)
def switches():
    out = {}
    for t in glob.glob(f"/proc/{p.pid}/task/*"):
        try:
            name = open(t + "/comm").read().strip()
            st = open(t + "/status").read()
        except OSError: continue
        v = sum(int(l.split()[1]) for l in st.splitlines() if "ctxt_switches" in l)
        out[name] = out.get(name, 0) + v
    return out
def req(stream, n=200):
    body = {"prompt": "hello", "max_tokens": n, "temperature": 0, "ignore_eos": True, "stream": stream}
    r = urllib.request.Request("http://127.0.0.1:18601/v1/completions", json.dumps(body).encode(), {"content-type": "application/json"})
    with urllib.request.urlopen(r) as resp: resp.read()
req(False, 4)
for stream in (False, True):
    a = switches(); req(stream); b = switches()
    d = {k: b.get(k, 0) - a.get(k, 0) for k in b}
    print("stream" if stream else "unary ", {k: v for k, v in d.items() if v})
p.terminate(); p.wait()

"""Memory after a burst: 16 (argv[3]) concurrent chat requests of CHARS
characters against `hasten serve` (argv[1] binary, argv[2] model); prints
the server's RSS before, at its peak, just after and WAIT seconds later,
split into mappings of 256 MiB and more (the KV pool) and the rest.
Usage: REP=8000 CHARS=250000 WAIT=20 python3 scripts/memory-burst.py BIN MODEL 16
(BENCHMARKS.md, "Memory after a burst")."""
import json, subprocess, sys, time, threading, urllib.request, re, os
BIN, MODEL = sys.argv[1], sys.argv[2]
N = int(sys.argv[3]) if len(sys.argv) > 3 else 16
env = dict(os.environ)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from serve import start
p = start(BIN, MODEL, 18501, "2", env)
url = "http://127.0.0.1:18501"
def maps():
    # RSS of anonymous mappings >= 256 MiB (the KV pool) vs the rest, MiB
    big = small = 0
    cur = None
    for l in open(f"/proc/{p.pid}/smaps"):
        if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", l):
            a, b = [int(x, 16) for x in l.split()[0].split("-")]
            cur = b - a
        elif l.startswith("Rss:"):
            kb = int(l.split()[1])
            if cur >= 256 << 20: big += kb
            else: small += kb
    return big // 1024, small // 1024
def rss():
    s = open(f"/proc/{p.pid}/status").read()
    g = lambda k: int(re.search(k + r":\s+(\d+)", s).group(1)) // 1024
    return g("VmRSS"), g("VmHWM")
time.sleep(0.5)
# warm: one short request
def post(text, mt=1):
    body = json.dumps({"messages": [{"role": "user", "content": text}], "max_tokens": mt}).encode()
    r = urllib.request.Request(url + "/v1/chat/completions", body, {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(r, timeout=300) as resp: return resp.status
    except urllib.error.HTTPError as e:
        e.read(); return e.code
post("hi", 4)
base = rss()
m_before = maps()
words = "the quick brown fox jumps over a lazy dog "
# ~1900 tokens of varied text (distinct per request: no prefix cache reuse)
def prompt(i): return " ".join(f"{w}{i}{k}" for k, w in enumerate((words * int(os.environ.get("REP","400"))).split()))[:int(os.environ.get("CHARS","6500"))]
t0 = time.time()
res = []
ths = [threading.Thread(target=lambda i=i: res.append(post(prompt(i)))) for i in range(N)]
[t.start() for t in ths]; [t.join() for t in ths]
dt = time.time() - t0
after = rss()
m_after = maps()
time.sleep(float(os.environ.get("WAIT","5")))
later = rss()
print("before (big, rest)", m_before, "after", m_after, "later", maps())
print(f"statuses {sorted(set(res))} x{len(res)} in {dt:.1f}s; RSS MiB before {base[0]}, peak {after[1]}, just after {after[0]}, +5s {later[0]}")
p.terminate(); p.wait()

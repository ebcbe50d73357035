"""Where a streamed request's extra TPOT goes: CPU time per token of the
client process and of each server thread (by name, from /proc), unary vs
streamed, 135m-class model, -t 2. Usage: python3 scripts/lib/stream_cpu_split.py
BIN MODEL (BENCHMARKS.md, issue 20)."""
import json, subprocess, sys, time, urllib.request, os, collections
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ttft_probe import server_tpot
from serve import start
BIN, MODEL, TOK = sys.argv[1], sys.argv[2], 200
p = start(BIN, MODEL, 18601)
time.sleep(0.5)
HZ = os.sysconf("SC_CLK_TCK")
def threads():
    out = collections.Counter()
    for t in os.listdir(f"/proc/{p.pid}/task"):
        try:
            st = open(f"/proc/{p.pid}/task/{t}/stat").read()
        except FileNotFoundError: continue
        name = st[st.index("(")+1:st.rindex(")")]
        f = st[st.rindex(")")+2:].split()
        out[name] += (int(f[11]) + int(f[12])) / HZ
    return out
def serve(stream, seed):
    return server_tpot("http://127.0.0.1:18601/v1/completions", TOK, stream, seed)
serve(True, 1)
for stream in [False, True, False, True]:
    a = threads(); c0 = time.process_time(); w0 = time.time()
    tpot = serve(stream, 5)
    b = threads(); c1 = time.process_time(); w1 = time.time()
    d = {k: round((b[k] - a[k]) * 1e3 / TOK, 3) for k in b if b[k] - a[k] > 0}
    print("stream" if stream else "unary ", "tpot %.3f ms" % tpot, "client cpu/token %.3f ms" % ((c1 - c0) * 1e3 / TOK), "server cpu ms/token", d)
p.terminate(); p.wait()

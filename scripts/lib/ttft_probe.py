"""Lone-prompt TTFT against an OpenAI-compatible /v1/completions endpoint.

Sends the same seeded random token ids that `hasten run --random-prompt N
--seed S` feeds (the xorshift of crates/cli/src/run.rs), with max_tokens 1
(or --max-tokens for a TPOT figure), streaming, one request at a time, and
prints one JSON line per request: ttft_ms (send to first content chunk),
e2e_ms, and tpot_ms when more than one token came back (server_tpot_ms too
when the server reports hasten's `timing` extension).

Usage: ttft_probe.py URL N_TOKENS SEED [--vocab V] [--max-tokens K]
"""
import argparse
import json
import time
import urllib.request


def random_tokens(n, vocab, seed):
    mask = (1 << 64) - 1
    x = seed ^ 0x9E3779B97F4A7C15
    out = []
    for _ in range(n):
        x ^= (x << 13) & mask
        x ^= x >> 7
        x ^= (x << 17) & mask
        out.append(3 + x % (max(vocab, 4) - 3))
    return out


def server_tpot(url, tokens, stream, seed):
    """TPOT (ms) of one greedy request of `tokens` tokens after a 64-token
    random prompt, from the server's `timing.decode_ms`, unary or streamed."""
    body = {"prompt": random_tokens(64, 32000, seed), "max_tokens": tokens, "temperature": 0,
            "ignore_eos": True, "stream": stream}
    r = urllib.request.Request(url, json.dumps(body).encode(), {"content-type": "application/json"})
    timing = None
    with urllib.request.urlopen(r) as resp:
        if stream:
            for line in resp:
                line = line.strip()
                if line.startswith(b"data: {"):
                    d = json.loads(line[6:])
                    if d.get("timing"):
                        timing = d["timing"]
        else:
            timing = json.load(resp).get("timing")
    return timing["decode_ms"] / (tokens - 1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("n", type=int)
    ap.add_argument("seed", type=int)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--max-tokens", type=int, default=1)
    a = ap.parse_args()
    base = a.url.rstrip("/")
    with urllib.request.urlopen(base + "/v1/models", timeout=60) as r:
        model = json.load(r)["data"][0]["id"]
    body = {
        "model": model,
        "prompt": random_tokens(a.n, a.vocab, a.seed),
        "max_tokens": a.max_tokens,
        "temperature": 0,
        "stream": True,
        "ignore_eos": True,
    }
    req = urllib.request.Request(
        base + "/v1/completions",
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json"},
    )
    t0 = time.perf_counter()
    first = None
    stamps = []
    timing = None
    with urllib.request.urlopen(req, timeout=600) as r:
        for line in r:
            line = line.strip()
            if not line.startswith(b"data:") or line == b"data: [DONE]":
                continue
            chunk = json.loads(line[5:])
            if chunk.get("timing"):
                timing = chunk["timing"]
            choices = chunk.get("choices") or []
            if choices and (choices[0].get("text") or choices[0].get("finish_reason") is None):
                now = time.perf_counter()
                if first is None:
                    first = now
                stamps.append(now)
    end = time.perf_counter()
    out = {"ttft_ms": (first - t0) * 1e3 if first else None, "e2e_ms": (end - t0) * 1e3}
    if len(stamps) > 1:
        out["tpot_ms"] = (stamps[-1] - stamps[0]) / (len(stamps) - 1) * 1e3
        # hasten's own figure (the `timing` extension): decode time over
        # the steps after the first token, as the engine measured it.
        if timing and timing.get("decode_ms") is not None:
            out["server_tpot_ms"] = timing["decode_ms"] / (len(stamps) - 1)
    print(json.dumps(out))


if __name__ == "__main__":
    main()

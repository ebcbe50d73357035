#!/usr/bin/env python3
"""Writes crates/model/tests/golden/llama_cpp.json: llama.cpp's greedy
continuations and top-20 logits on hasten's seeded fixture models.

Each fixture is written by `hasten synth --shape tiny --type T [--qwen2]`
(seed 42, the llama-spm vocabulary from $HASTEN_TESTDATA), loaded by
llama.cpp through the PyPI package `llama-cpp-python`, and decoded greedily
for 64 steps from a few prompts (tokenized by llama.cpp). At every step the
golden keeps the chosen token and the reference's 20 largest logits.

Run: pip install llama-cpp-python numpy && python3 tools/goldens/model_goldens.py
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import llama_cpp

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
OUT = os.path.join(ROOT, "crates", "model", "tests", "golden", "llama_cpp.json")

FIXTURES = [
    ("llama-f32", ["--type", "f32"]),
    ("llama-f16", ["--type", "f16"]),
    ("llama-q8_0", ["--type", "q8_0"]),
    ("llama-q4_0", ["--type", "q4_0"]),
    ("llama-q4_k", ["--type", "q4_k"]),
    ("llama-q6_k", ["--type", "q6_k"]),
    ("qwen2-f32", ["--type", "f32", "--qwen2"]),
    ("qwen2-q8_0", ["--type", "q8_0", "--qwen2"]),
    ("qwen2-q4_k", ["--type", "q4_k", "--qwen2"]),
]
PROMPTS = [b"Hello world, how are you?", b"The quick brown fox", b"1 2 3 4 5"]
STEPS = 64
TOP = 20


def synth(path, args):
    cmd = ["cargo", "run", "--quiet", "--release", "-p", "hasten", "--", "synth", "--shape", "tiny", "-o", path] + args
    subprocess.run(cmd, cwd=ROOT, check=True)


def run_fixture(path):
    llm = llama_cpp.Llama(model_path=path, n_ctx=512, n_batch=512, n_threads=2, logits_all=True, verbose=False, seed=0)
    prompts = []
    for text in PROMPTS:
        tokens = llm.tokenize(text, add_bos=True)
        llm.reset()
        llm.eval(tokens)
        steps = []
        for _ in range(STEPS):
            logits = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
            top = np.argsort(-logits, kind="stable")[:TOP]
            tok = int(top[0])
            steps.append({"token": tok, "top": [[int(i), float(logits[i])] for i in top]})
            llm.eval([tok])
        prompts.append({"text": text.decode(), "tokens": [int(t) for t in tokens], "steps": steps})
    return prompts


def main():
    golden = {"reference": f"llama-cpp-python {llama_cpp.__version__}", "steps": STEPS, "fixtures": []}
    with tempfile.TemporaryDirectory() as tmp:
        for name, args in FIXTURES:
            path = os.path.join(tmp, name + ".gguf")
            synth(path, args)
            golden["fixtures"].append({"name": name, "synth_args": args, "prompts": run_fixture(path)})
            print(f"{name}: done", file=sys.stderr)
    with open(OUT, "w") as f:
        json.dump(golden, f, separators=(",", ":"))
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()

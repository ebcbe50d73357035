#!/usr/bin/env bash
# End-to-end tests of `hasten serve` with the official `openai` and
# `anthropic` Python packages, plus the README's curl examples, against real servers on
# loopback ports. Installs the package into a virtualenv under target/.
# Usage: scripts/test-openai.sh   (HASTEN_TESTDATA as for cargo test)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
export HASTEN_TESTDATA=${HASTEN_TESTDATA:-$root/testdata}

venv=target/pyenv-openai
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv" || {
    # No venv module (Debian without python3-venv): a plain target folder.
    rm -rf "$venv"
    mkdir -p "$venv/bin"
    python3 -m pip install --quiet --disable-pip-version-check --target "$venv/lib" "openai>=1.50,<3" "anthropic>=0.40,<1" "jsonschema>=4,<5"
    printf '#!/bin/sh\nPYTHONPATH="%s/lib" exec python3 "$@"\n' "$root/$venv" >"$venv/bin/python"
    chmod +x "$venv/bin/python"
  }
fi
[ -x "$venv/bin/pip" ] && "$venv/bin/pip" install --quiet --disable-pip-version-check "openai>=1.50,<3" "anthropic>=0.40,<1" "jsonschema>=4,<5"

# The binaries of `cargo test --workspace`'s build (test profile, optimized;
# see Cargo.toml), built here if missing.
export HASTEN_BIN=${HASTEN_BIN:-$(bash scripts/lib/test-exe.sh bin hasten)}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export HASTEN_MODEL=$work/tiny.gguf
"$HASTEN_BIN" synth --shape tiny --type q8_0 \
  --vocab "$HASTEN_TESTDATA/tokenizer/ggml-vocab-llama-spm.gguf" -o "$HASTEN_MODEL" >/dev/null

# A private CA and a certificate for 127.0.0.1, for the HTTPS case.
export HASTEN_TEST_PKI=$work/pki
"$(bash scripts/lib/test-exe.sh example test_certs)" "$HASTEN_TEST_PKI"

"$venv/bin/python" tests/openai/test_openai.py
PYTHONPATH=tests/openai "$venv/bin/python" tests/openai/test_anthropic.py
PYTHONPATH=tests/openai "$venv/bin/python" tests/openai/test_responses.py
PYTHONPATH=tests/openai "$venv/bin/python" tests/openai/test_embeddings.py
OPENAI_PYTHON=$root/$venv/bin/python bash tests/openai/readme-curl.sh

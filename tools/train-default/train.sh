#!/usr/bin/env bash
# Rebuilds hasten's default demo model from scratch, reproducibly (fixed
# seed, fixed corpus): fetches the KJV text from Debian's packages, trains
# the tokenizer and the model (candle, CPU), checks hasten reads the result
# as trained, and installs it as crates/cli/assets/hasten-default.gguf plus
# the word list the out-of-the-box test uses. About 25 minutes on 2 cores.
# Usage: tools/train-default/train.sh [STEPS=1000]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
steps=${1:-1000}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
bash "$here/fetch-corpus.sh" "$work/kjv.txt"
(cd "$here" && cargo build --release --quiet)
"$here/target/release/train-default" "$work/kjv.txt" "$work/hasten-default.gguf" "$steps" 2>&1 | tee "$work/train.log"
cp "$work/hasten-default.gguf" "$root/crates/cli/assets/hasten-default.gguf"
python3 - "$work/kjv.txt" "$root/crates/cli/tests/data/kjv-words.txt" <<'PY'
import re, sys
words = {w.lower() for w in re.findall(r"[A-Za-z]+", open(sys.argv[1]).read())}
open(sys.argv[2], "w").write("\n".join(sorted(words)) + "\n")
PY
echo "installed crates/cli/assets/hasten-default.gguf; update MODEL_CARD.md from the log above"

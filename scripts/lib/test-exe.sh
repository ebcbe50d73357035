#!/usr/bin/env bash
# Prints the path of a binary that `cargo test --workspace` builds (test
# profile): `test-exe.sh KIND NAME`, KIND one of test, bin, example. Builds
# what is missing first. Other commands (`cargo build --profile test -p X`,
# `cargo test --test X`) resolve dev-dependency features differently and
# rebuild every crate of ours (and tokenizers) as a second variant: in CI
# that cost minutes after `cargo test --workspace` had built them all.
set -euo pipefail
kind=$1 name=$2
# Cargo's progress stays on stderr; compiler errors come as JSON and are
# printed as the compiler rendered them, so a failed build says why.
cargo test --workspace --no-run --quiet --message-format=json | python3 -c '
import json, sys
kind, name = sys.argv[1:3]
found = None
for line in sys.stdin:
    j = json.loads(line)
    if j.get("reason") == "compiler-message" and j["message"]["level"] == "error":
        sys.stderr.write(j["message"]["rendered"])
    # A bin or example is also built as a unit-test harness: not that one.
    if (j.get("reason") == "compiler-artifact" and j.get("executable")
            and j["target"]["name"] == name and kind in j["target"]["kind"]
            and (kind == "test" or not j["profile"]["test"])):
        found = found or j["executable"]
# Read to the end: leaving early breaks cargo'"'"'s pipe.
if not found:
    sys.exit(f"no {kind} {name} among the test build'"'"'s binaries")
print(found)
' "$kind" "$name"

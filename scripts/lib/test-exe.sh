#!/usr/bin/env bash
# Prints the path of a binary that `cargo test --workspace` builds (test
# profile): `test-exe.sh KIND NAME`, KIND one of test, bin, example. Builds
# what is missing first. Other commands (`cargo build --profile test -p X`,
# `cargo test --test X`) resolve dev-dependency features differently and
# rebuild every crate of ours (and tokenizers) as a second variant: in CI
# that cost minutes after `cargo test --workspace` had built them all.
set -euo pipefail
kind=$1 name=$2
cargo test --workspace --no-run --message-format=json 2>/dev/null | python3 -c '
import json, sys
kind, name = sys.argv[1:3]
for line in sys.stdin:
    j = json.loads(line)
    # A bin or example is also built as a unit-test harness: not that one.
    if (j.get("reason") == "compiler-artifact" and j.get("executable")
            and j["target"]["name"] == name and kind in j["target"]["kind"]
            and (kind == "test" or not j["profile"]["test"])):
        print(j["executable"])
        sys.exit(0)
sys.exit(f"no {kind} {name} among the test build'"'"'s binaries")
' "$kind" "$name"

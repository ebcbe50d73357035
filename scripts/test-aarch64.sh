#!/usr/bin/env bash
# The AArch64 tiers, tested on this x86-64 machine: the kernel tests are
# cross-compiled for aarch64-unknown-linux-gnu and run under qemu-user, once
# on an emulated CPU with the dot-product extension (both NEON tiers against
# the scalar references) and once on a Cortex-A53 (no SDOT: detection must
# find the plain NEON tier and nothing may use the instruction).
#
#   bash scripts/test-aarch64.sh            # kernel tests (what CI runs)
#   bash scripts/test-aarch64.sh --model    # also the end-to-end model tests
#                                           # (llama.cpp goldens; ~10 min under qemu)
#
# Installs what it needs: the Rust target (rustup) and Debian's qemu-user
# and aarch64 cross gcc.
set -euo pipefail
cd "$(dirname "$0")/.."
target=aarch64-unknown-linux-gnu

rustup target list --installed | grep -qx "$target" || rustup target add "$target"
if ! command -v qemu-aarch64 >/dev/null || ! command -v aarch64-linux-gnu-gcc >/dev/null; then
  pkgs="qemu-user gcc-aarch64-linux-gnu libc6-dev-arm64-cross"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y --no-install-recommends $pkgs || { apt-get update && apt-get install -y --no-install-recommends $pkgs; }
fi

export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
export HASTEN_TESTDATA="${HASTEN_TESTDATA:-$PWD/testdata}"
runner() { echo "qemu-aarch64 -cpu $1 -L /usr/aarch64-linux-gnu"; }

cargo clippy -p hasten-kernels --target "$target" -- -D warnings
for cpu_isa in max:neondot cortex-a53:neon; do
  cpu=${cpu_isa%%:*} isa=${cpu_isa##*:}
  echo "== kernels on an emulated $cpu (expecting the $isa tier)"
  CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="$(runner "$cpu")" HASTEN_EXPECT_ISA=$isa \
    cargo test -p hasten-kernels --lib --target "$target"
done
if [ "${1:-}" = "--model" ]; then
  echo "== model tests on an emulated CPU with SDOT (NEON tier)"
  CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="$(runner max)" \
    cargo test -p hasten-model --test model --target "$target"
fi

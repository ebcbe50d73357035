#!/usr/bin/env bash
# The training corpus of the default model: the King James Version of the
# Bible (1611; public domain) from Debian's bible-kjv-text package, printed
# as plain text by the package's own `bible` program (bible-kjv).
# Usage: tools/train-default/fetch-corpus.sh OUT.txt
set -euo pipefail
out=${1:?usage: fetch-corpus.sh OUT.txt}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && apt-get download bible-kjv-text bible-kjv >/dev/null 2>&1) || {
  echo "apt-get download failed: needs Debian's package archive" >&2
  exit 1
}
for d in "$work"/*.deb; do dpkg-deb -x "$d" "$work/root"; done
"$work/root/usr/bin/bible" -p "$work/root/usr/lib" "Gen1:1-Rev22:21" >"$out"
echo "wrote $out ($(wc -w <"$out") words)"

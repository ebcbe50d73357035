#!/usr/bin/env bash
# Refetches the web page's third-party files (crates/server/ui/vendor/)
# from npm at the pinned versions and rebuilds the highlight.js language
# bundle; with --check, fails when the committed files differ from what
# npm gives (run by hand: CI does not fetch from npm).
# Usage: scripts/vendor-ui.sh [--check]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
UPLOT=1.6.32 MARKED=18.3.0 HLJS=11.11.1
LANGS="bash c cpp css go java javascript json markdown python rust shell sql typescript xml yaml"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
out=$tmp/vendor; mkdir -p "$out"
(cd "$tmp" && npm pack -q "uplot@$UPLOT" "marked@$MARKED" "@highlightjs/cdn-assets@$HLJS" >/dev/null)
for f in "$tmp"/*.tgz; do d=${f%.tgz}; mkdir -p "$d"; tar xzf "$f" -C "$d"; done
u=$tmp/uplot-$UPLOT/package; m=$tmp/marked-$MARKED/package; h=$tmp/highlightjs-cdn-assets-$HLJS/package
cp "$u/dist/uPlot.iife.min.js" "$u/dist/uPlot.min.css" "$out/"
cp "$u/LICENSE" "$out/LICENSE.uPlot"
cp "$m/lib/marked.esm.js" "$out/"; cp "$m/LICENSE" "$out/LICENSE.marked"
cp "$h/es/core.min.js" "$out/highlight.core.min.js"; cp "$h/LICENSE" "$out/LICENSE.highlight.js"
cp "$h/styles/github.min.css" "$out/hl-github.min.css"
cp "$h/styles/github-dark.min.css" "$out/hl-github-dark.min.css"
{
  echo "// Highlight.js $HLJS grammars (BSD-3-Clause), ES modules from @highlightjs/cdn-assets, bundled: see VENDOR.md"
  for l in $LANGS; do
    sed -e "s/^var hljsGrammar=/const g_$l=/" -e "s/export default hljsGrammar;//" "$h/es/languages/$l.min.js"; echo
  done
  printf 'export default {'; for l in $LANGS; do printf '%s: g_%s, ' "$l" "$l"; done; echo '};'
} > "$out/highlight.languages.js"
dst=$root/crates/server/ui/vendor
if [ "${1:-}" = --check ]; then
  diff -r -x VENDOR.md "$out" "$dst" && echo "vendor files match npm"
else
  cp "$out"/* "$dst/"; echo "wrote $dst"
fi

# Sourced by the speculative-decoding benchmarks: writes (once) into $dir
# the planted-pattern and random-weight files at the 135m and 1b shapes,
# Q4_0 (`hasten synth --pattern 16`: greedy text loops every 16 tokens, so
# drafts are accepted; the 135m pattern file drafts the 1b one: same
# vocabulary, same planted successors). In: hasten, dir.
mk() { [ -f "$dir/$1.gguf" ] || "$hasten" synth "${@:2}" -o "$dir/$1.gguf" >/dev/null 2>&1; }
mk pattern-135m --shape 135m --type q4_0 --pattern 16
mk random-135m --shape 135m --type q4_0
mk pattern-1b --shape 1b --type q4_0 --pattern 16
mk random-1b --shape 1b --type q4_0

#!/usr/bin/env bash
# Runs the README's `curl` examples (the fenced block after the
# `<!-- curl-examples -->` marker) against a real `hasten serve`, with the
# README's 127.0.0.1:8080 replaced by the test server's address. Every
# example uses `curl -f`, so an HTTP error fails the run.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
: "${HASTEN_BIN:?}"
work=$(mktemp -d)
log=$work/serve.log
# No --model: the README's examples are about the built-in demo model.
HASTEN_CACHE="$work/cache" "$HASTEN_BIN" serve --port 0 --threads 1 2>"$log" &
pid=$!
trap 'kill $pid 2>/dev/null || true; rm -rf "$work"' EXIT
addr=
for _ in $(seq 1 300); do
  addr=$(grep -o 'listening on http://[0-9.:]*' "$log" | sed 's|listening on http://||' || true)
  [ -n "$addr" ] && curl -sf "http://$addr/ready" >/dev/null && break
  sleep 0.1
done
[ -n "$addr" ] || { cat "$log"; echo "server did not start" >&2; exit 1; }

awk '/<!-- curl-examples -->/{on=1; next} on && /^```/{if (inblock) exit; inblock=1; next} inblock{print}' \
  "$root/README.md" | sed "s|127.0.0.1:8080|$addr|g" >"$work/examples.sh"
n=$(grep -c '^curl' "$work/examples.sh" || true)
[ "$n" -ge 3 ] || { echo "expected the README's curl examples, found $n" >&2; exit 1; }
out=$(bash -euo pipefail "$work/examples.sh")
echo "$out" | grep -q '"object":"list"' || { echo "models example: $out" >&2; exit 1; }
echo "$out" | grep -q 'data: \[DONE\]' || { echo "streaming example did not end with [DONE]" >&2; exit 1; }
echo "$out" | grep -qi '^server-timing: queue;dur=' || { echo "no Server-Timing header shown" >&2; exit 1; }
echo "README curl examples: $n commands ran against $addr"

# The structured-output example: its answer's content is JSON with the
# schema's two keys, whatever the demo model's weights say.
awk '/<!-- curl-structured -->/{on=1; next} on && /^```/{if (inblock) exit; inblock=1; next} inblock{print}' \
  "$root/README.md" | sed "s|127.0.0.1:8080|$addr|g" >"$work/structured.sh"
grep -q '^curl' "$work/structured.sh" || { echo "no structured-output curl example in the README" >&2; exit 1; }
bash -euo pipefail "$work/structured.sh" | python3 -c '
import json, sys
content = json.load(sys.stdin)["choices"][0]["message"]["content"]
person = json.loads(content)
assert set(person) == {"name", "age"} and isinstance(person["age"], int), person
print("README structured-output example answered", content)
'

# The tool-calling example: a required call to the one tool, whose
# arguments match its parameters.
block() {
  awk -v m="<!-- $1 -->" '$0 == m {on=1; next} on && /^```/{if (inblock) exit; inblock=1; next} inblock{print}' \
    "$root/README.md" | sed "s|127.0.0.1:8080|$addr|g"
}
block curl-tools >"$work/tools.sh"
grep -q '^curl' "$work/tools.sh" || { echo "no tool-calling curl example in the README" >&2; exit 1; }
bash -euo pipefail "$work/tools.sh" | python3 -c '
import json, sys
ch = json.load(sys.stdin)["choices"][0]
calls = ch["message"]["tool_calls"]
assert ch["finish_reason"] == "tool_calls" and len(calls) == 1, ch
args = json.loads(calls[0]["function"]["arguments"])
assert calls[0]["function"]["name"] == "get_weather" and set(args) == {"city"}, calls
print("README tool-calling example called", calls[0]["function"]["name"], args)
'
# The reasoning example: the usage counts reasoning tokens.
block curl-reasoning >"$work/reasoning.sh"
bash -euo pipefail "$work/reasoning.sh" | python3 -c '
import json, sys
r = json.load(sys.stdin)
assert "reasoning_tokens" in r["usage"]["completion_tokens_details"], r
print("README reasoning example answered", json.dumps(r["choices"][0]["message"]))
'

# The README's Python examples (the first ```python block, and the one
# after <!-- python-tools -->), if a Python with the openai package was given.
if [ -n "${OPENAI_PYTHON:-}" ]; then
  awk '/^```python/{on=1; next} on && /^```/{exit} on{print}' "$root/README.md" \
    | sed "s|127.0.0.1:8080|$addr|g" >"$work/example.py"
  [ -s "$work/example.py" ] || { echo "no python example in the README" >&2; exit 1; }
  said=$("$OPENAI_PYTHON" "$work/example.py")
  [ -n "$said" ] || { echo "the README's python example printed nothing" >&2; exit 1; }
  echo "README python example printed: $said"
  awk '/<!-- python-tools -->/{on=1; next} on && /^```python/{inblock=1; next} inblock && /^```/{exit} inblock{print}' \
    "$root/README.md" | sed "s|127.0.0.1:8080|$addr|g" >"$work/tools.py"
  [ -s "$work/tools.py" ] || { echo "no python tool-calling example in the README" >&2; exit 1; }
  said=$("$OPENAI_PYTHON" "$work/tools.py")
  echo "$said" | head -1 | grep -q '^get_weather {' || { echo "python tool example printed: $said" >&2; exit 1; }
  echo "README python tool example printed: $said"
fi
kill -TERM $pid
wait $pid

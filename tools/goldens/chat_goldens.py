#!/usr/bin/env python3
"""Writes crates/model/tests/golden/chat_templates.json.

Renders every template in $HASTEN_TESTDATA/chat-templates (default
the repository's testdata/) and in crates/model/tests/chat-templates
(more of llama.cpp's models/templates: Qwen3, Phi-3.5, Granite 3.3, Llama
3.2, DeepSeek-R1; and the models' own Gemma 3 and Phi-4-mini templates,
see that folder's SOURCES.md) with Python jinja2 the way Hugging Face transformers'
`apply_chat_template` does (sandboxed environment, trim_blocks,
lstrip_blocks, loop controls, `raise_exception`, `strftime_now`, a `tojson`
that keeps non-ASCII) over a few conversations, and records the text or the
fact that the template raised.

Run: pip install jinja2 && python3 tools/goldens/chat_goldens.py
"""
import json
import os
from datetime import datetime

from jinja2.exceptions import TemplateError
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
TESTDATA = os.environ.get("HASTEN_TESTDATA", os.path.join(ROOT, "testdata"))
MORE = os.path.join(ROOT, "crates", "model", "tests", "chat-templates")
OUT = os.path.join(ROOT, "crates", "model", "tests", "golden", "chat_templates.json")

CONVERSATIONS = [
    ("one user turn", [{"role": "user", "content": "Hello there!"}], True),
    ("system and multi-turn", [
        {"role": "system", "content": "You are terse. Answer in one line."},
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "4"},
        {"role": "user", "content": "And 3+3? Ünïcödé ✓"},
    ], True),
    ("no generation prompt", [
        {"role": "user", "content": "  Spaces around  "},
        {"role": "assistant", "content": "Noted.\nTwo lines."},
    ], False),
    # Templates that check turn order (Gemma 3, Mistral) raise here.
    ("two user turns in a row", [
        {"role": "user", "content": "First."},
        {"role": "user", "content": "Second."},
    ], True),
]
# chat_template_kwargs cases: (label, messages, add_generation_prompt, kwargs).
KWARG_CASES = [
    ("thinking off", [{"role": "user", "content": "Hi"}], True, {"enable_thinking": False}),
    ("thinking on", [{"role": "user", "content": "Hi"}], True, {"enable_thinking": True}),
]

# Tool use, for templates that read `tools`: two functions, then a call and
# its result (arguments as a dict, as transformers expects; content "" as
# vLLM and llama.cpp pass a null content; as hasten
# passes them). Mistral wants 9-character call ids; Llama 3.1 one call a turn.
TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Current weather in a city.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "City name"},
            "unit": {"type": "string", "enum": ["c", "f"]}}, "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "get_time", "description": "Local time in a time zone.",
        "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}, "required": ["tz"]}}},
]
TOOL_TURN = [
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": "", "tool_calls": [
        {"id": "call12345", "type": "function",
         "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}}]},
    {"role": "tool", "tool_call_id": "call12345", "name": "get_weather", "content": "{\"temp\": 18}"},
]
TOOL_CASES = [
    ("tools offered", [{"role": "user", "content": "Weather in Paris?"}], True, {"tools": TOOLS}),
    ("tool call and result", TOOL_TURN, True, {"tools": TOOLS}),
]


def raise_exception(message):
    raise TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def render(source, messages, add_generation_prompt, kwargs=None):
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime(2026, 1, 2).strftime(fmt)
    t = env.from_string(source)
    return t.render(messages=messages, add_generation_prompt=add_generation_prompt, bos_token="<s>", eos_token="</s>",
                    **(kwargs or {}))


def main():
    cases = []
    for folder in [os.path.join(TESTDATA, "chat-templates"), MORE]:
        for name in sorted(f for f in os.listdir(folder) if f.endswith(".jinja")):
            source = open(os.path.join(folder, name), encoding="utf-8").read()
            runs = [(l, m, g, None) for l, m, g in CONVERSATIONS]
            # Template variables matter to templates that read them.
            runs += [c for c in KWARG_CASES if any(k in source for k in c[3])]
            if "tools" in source:
                runs += TOOL_CASES
            for label, messages, gen, kwargs in runs:
                case = {"template": name, "label": label, "messages": messages, "add_generation_prompt": gen}
                if kwargs:
                    case["kwargs"] = kwargs
                try:
                    case["expected"] = render(source, messages, gen, kwargs)
                except TemplateError as e:
                    case["error"] = str(e)
                cases.append(case)
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump(cases, f, ensure_ascii=False, indent=1)
    print(f"wrote {len(cases)} cases to {OUT}")


if __name__ == "__main__":
    main()

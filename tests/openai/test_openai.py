"""hasten serve driven by the official `openai` Python package.

Starts real servers on loopback ports (`hasten serve --port 0`) over a tiny
synthetic model and checks what users of the OpenAI SDK rely on: chat and
completions, streaming and not, include_usage, n > 1, stop strings,
reproducible seeds, structured output (`parse` with Pydantic models,
json_schema over 20 application schemas validated with `jsonschema`, the
regex extension), tool calling (required and named choices, streamed deltas
that assemble to the unary call, a two-step tool loop) and reasoning
content on a server given Qwen3's real template, errors raised as the SDK's
exception classes, and a stream over HTTPS (`--tls-cert`) with a private CA.

Run through scripts/test-openai.sh, which installs the package and builds
the model; it needs HASTEN_BIN, HASTEN_MODEL and HASTEN_TEST_PKI (a folder with
ca.pem, cert.pem and key.pem).
"""

import collections
import os
import re
import ssl
import subprocess
import threading
import time
import unittest
import urllib.request

import json

import jsonschema
import openai

BIN = os.environ["HASTEN_BIN"]
MODEL = os.environ["HASTEN_MODEL"]
PKI = os.environ["HASTEN_TEST_PKI"]
KEY = "sk-hasten-test"
# The tiny model is nearly deterministic; a flat bias over 64 tokens makes
# sampling (and so seeds) matter.
FLAT = {str(1000 + i): 100 for i in range(64)}


class Server:
    """A `hasten serve` process on a free loopback port."""

    def __init__(self, *args, ssl_context=None):
        self.proc = subprocess.Popen(
            [BIN, "serve", "--model", MODEL, "--port", "0", "--threads", "1", *args],
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.time() + 60
        self.url = None
        while self.url is None:
            line = self.proc.stderr.readline()
            if not line:
                raise RuntimeError("hasten serve exited before listening")
            m = re.search(r"listening on (https?://\S+)", line)
            if m:
                self.url = m.group(1)
            if time.time() > deadline:
                raise RuntimeError("hasten serve did not start")
        # Keep reading the log: a full stderr pipe would block the server
        # mid-request (a test that polls /metrics hundreds of times hung
        # CI that way). The last lines stay for a failing test to print.
        self.log = collections.deque(maxlen=200)
        threading.Thread(target=self._drain, daemon=True).start()
        while True:
            try:
                with urllib.request.urlopen(self.url + "/ready", context=ssl_context) as r:
                    if r.status == 200:
                        break
            except Exception:
                pass
            if time.time() > deadline:
                raise RuntimeError("hasten serve never became ready")
            time.sleep(0.05)

    def _drain(self):
        for line in self.proc.stderr:
            self.log.append(line)

    def client(self, key=KEY, **kw):
        return openai.OpenAI(base_url=self.url + "/v1", api_key=key, max_retries=0, **kw)

    def stop(self):
        self.proc.terminate()
        rc = self.proc.wait(timeout=30)
        assert rc == 0, f"hasten serve exited with {rc} after SIGTERM"


TRUST = ssl.create_default_context(cafile=os.path.join(PKI, "ca.pem"))


HERE = os.path.dirname(os.path.abspath(__file__))
QWEN3 = os.path.join(HERE, "..", "..", "crates", "model", "tests", "chat-templates", "Qwen-Qwen3-0.6B.jinja")


def setUpModule():
    global SERVER, FULL, HTTPS, AGENT
    SERVER = Server("--api-key", KEY)
    FULL = Server("--max-running", "1", "--max-waiting", "0")
    AGENT = Server("--chat-template", QWEN3)
    HTTPS = Server(
        "--tls-cert",
        os.path.join(PKI, "cert.pem"),
        "--tls-key",
        os.path.join(PKI, "key.pem"),
        ssl_context=TRUST,
    )


def tearDownModule():
    SERVER.stop()
    FULL.stop()
    HTTPS.stop()
    AGENT.stop()


MSG = [{"role": "user", "content": "Hello there"}]


class Chat(unittest.TestCase):
    def setUp(self):
        self.c = SERVER.client()

    def test_non_streaming(self):
        r = self.c.chat.completions.create(model="tiny", messages=MSG, max_tokens=8, temperature=0)
        self.assertEqual(r.object, "chat.completion")
        self.assertEqual(r.choices[0].message.role, "assistant")
        self.assertEqual(r.choices[0].finish_reason, "length")
        self.assertEqual(r.usage.completion_tokens, 8)
        self.assertEqual(r.usage.total_tokens, r.usage.prompt_tokens + 8)
        self.assertTrue(r.choices[0].message.content)

    def test_streaming_matches_non_streaming(self):
        whole = self.c.chat.completions.create(model="tiny", messages=MSG, max_tokens=10, temperature=0)
        stream = self.c.chat.completions.create(
            model="tiny", messages=MSG, max_tokens=10, temperature=0, stream=True,
            stream_options={"include_usage": True},
        )
        text, usage, reasons = "", None, []
        chunks = list(stream)
        for ch in chunks:
            if ch.usage is not None:
                usage = ch.usage
                self.assertEqual(ch.choices, [])
            for c in ch.choices:
                text += c.delta.content or ""
                if c.finish_reason:
                    reasons.append(c.finish_reason)
        self.assertEqual(text, whole.choices[0].message.content)
        self.assertEqual(reasons, ["length"])
        self.assertIsNotNone(chunks[-1].usage, "usage comes in the last chunk")
        self.assertEqual(usage.completion_tokens, 10)
        self.assertEqual(chunks[0].choices[0].delta.role, "assistant")

    def test_no_usage_unless_asked(self):
        chunks = list(self.c.chat.completions.create(model="tiny", messages=MSG, max_tokens=3, stream=True))
        self.assertTrue(all(ch.usage is None for ch in chunks))

    def test_n_and_seeds(self):
        kw = dict(model="tiny", messages=MSG, max_tokens=12, temperature=1.0, logit_bias=FLAT)
        a = self.c.chat.completions.create(seed=5, **kw)
        b = self.c.chat.completions.create(seed=5, **kw)
        other = self.c.chat.completions.create(seed=6, **kw)
        self.assertEqual(a.choices[0].message.content, b.choices[0].message.content)
        self.assertNotEqual(a.choices[0].message.content, other.choices[0].message.content)
        n = self.c.chat.completions.create(seed=5, n=2, **kw)
        self.assertEqual([c.index for c in n.choices], [0, 1])
        self.assertEqual(n.choices[0].message.content, a.choices[0].message.content)
        self.assertEqual(n.choices[1].message.content, other.choices[0].message.content)
        self.assertEqual(n.usage.completion_tokens, 24)
        # Streaming n > 1: each choice's deltas, by index.
        texts = {0: "", 1: ""}
        for ch in self.c.chat.completions.create(seed=5, n=2, stream=True, **kw):
            for c in ch.choices:
                texts[c.index] += c.delta.content or ""
        self.assertEqual(texts[0], a.choices[0].message.content)
        self.assertEqual(texts[1], other.choices[0].message.content)

    def test_stop_strings(self):
        full = self.c.chat.completions.create(model="tiny", messages=MSG, max_tokens=16, temperature=0)
        text = full.choices[0].message.content
        cut = text[len(text) // 2 : len(text) // 2 + 3]
        r = self.c.chat.completions.create(model="tiny", messages=MSG, max_tokens=16, temperature=0, stop=[cut])
        self.assertEqual(r.choices[0].finish_reason, "stop")
        self.assertEqual(r.choices[0].message.content, text[: text.index(cut)])
        streamed = "".join(
            c.delta.content or ""
            for ch in self.c.chat.completions.create(
                model="tiny", messages=MSG, max_tokens=16, temperature=0, stop=cut, stream=True
            )
            for c in ch.choices
        )
        self.assertEqual(streamed, r.choices[0].message.content)

    def test_logprobs(self):
        r = self.c.chat.completions.create(
            model="tiny", messages=MSG, max_tokens=4, temperature=0, logprobs=True, top_logprobs=2
        )
        lp = r.choices[0].logprobs.content
        self.assertEqual(len(lp), 4)
        self.assertEqual(len(lp[0].top_logprobs), 2)
        self.assertLessEqual(lp[0].logprob, 0.0)

    def test_raw_response_headers(self):
        raw = self.c.chat.completions.with_raw_response.create(model="tiny", messages=MSG, max_tokens=2)
        self.assertIn("prefill;dur=", raw.headers["server-timing"])
        self.assertTrue(raw.headers["x-request-id"])
        self.assertEqual(raw.parse().usage.completion_tokens, 2)


class Completions(unittest.TestCase):
    def setUp(self):
        self.c = SERVER.client()

    def test_text_and_stream(self):
        r = self.c.completions.create(model="tiny", prompt="Once upon a time", max_tokens=6, temperature=0)
        self.assertEqual(r.object, "text_completion")
        self.assertEqual(r.usage.completion_tokens, 6)
        streamed = "".join(
            c.text
            for ch in self.c.completions.create(
                model="tiny", prompt="Once upon a time", max_tokens=6, temperature=0, stream=True
            )
            for c in ch.choices
        )
        self.assertEqual(streamed, r.choices[0].text)

    def test_batch_and_token_prompts(self):
        r = self.c.completions.create(model="tiny", prompt=["Hello", "World"], max_tokens=2, temperature=0)
        self.assertEqual(sorted(c.index for c in r.choices), [0, 1])
        ids = self.c.completions.create(model="tiny", prompt=[1, 15043], max_tokens=2, temperature=0)
        self.assertEqual(ids.usage.prompt_tokens, 2)

    def test_models(self):
        models = self.c.models.list()
        self.assertEqual([m.id for m in models.data], ["tiny"])


class StructuredOutput(unittest.TestCase):
    """A grammar makes even random weights answer in shape (issue 23)."""

    def setUp(self):
        self.c = SERVER.client()

    def parse(self, model, **kw):
        # `parse` moved out of `beta` in later SDKs; both send a strict json_schema.
        chat = self.c.chat.completions
        fn = getattr(chat, "parse", None) or self.c.beta.chat.completions.parse
        return fn(model="tiny", messages=MSG, response_format=model, max_tokens=400, temperature=1.0, **kw)

    def test_pydantic_models_are_parsed(self):
        from enum import Enum
        from typing import List, Literal, Optional

        from pydantic import BaseModel, Field

        class Person(BaseModel):
            name: str = Field(max_length=16)
            age: int = Field(ge=0, le=130)
            tags: List[Literal["red", "green"]] = Field(max_length=3)
            nickname: Optional[str] = Field(default=None, max_length=8)

        class Status(str, Enum):
            open = "open"
            shipped = "shipped"

        class Item(BaseModel):
            sku: str = Field(pattern=r"^[A-Z]{3}[0-9]{2}$")
            qty: int = Field(ge=1, le=9)

        class Order(BaseModel):
            status: Status
            items: List[Item] = Field(min_length=1, max_length=3)
            buyer: Person

        for model, seed in [(Person, 1), (Order, 2), (Person, 3)]:
            r = self.parse(model, seed=seed)
            ch = r.choices[0]
            self.assertEqual(ch.finish_reason, "stop", ch.message.content)
            self.assertIsInstance(ch.message.parsed, model)

    def test_json_object_streamed(self):
        import json

        stream = self.c.chat.completions.create(
            model="tiny", messages=MSG, max_tokens=300, temperature=1.0, seed=5, stream=True,
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "n", "schema": {
                    "type": "object", "properties": {"n": {"type": "integer"}},
                    "required": ["n"], "additionalProperties": False}},
            },
        )
        text = "".join(c.delta.content or "" for ch in stream for c in ch.choices)
        self.assertIsInstance(json.loads(text)["n"], int)

    def test_regex_extension_and_completions(self):
        r = self.c.chat.completions.create(
            model="tiny", messages=MSG, max_tokens=20, temperature=1.0,
            response_format={"type": "regex", "regex": "[0-9]{3}-[a-z]{2}"},
        )
        self.assertRegex(r.choices[0].message.content, r"^[0-9]{3}-[a-z]{2}$")
        r = self.c.completions.create(
            model="tiny", prompt="Once", max_tokens=20, temperature=1.0,
            extra_body={"response_format": {"type": "regex", "regex": "(yes|no)"}},
        )
        self.assertIn(r.choices[0].text, ("yes", "no"))

    def test_schemas_that_cannot_be_enforced_are_a_400(self):
        for fmt in [
            {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "fancy"}}},
            {"type": "regex", "regex": "(unclosed"},
            {"type": "yaml"},
        ]:
            with self.assertRaises(openai.BadRequestError) as e:
                self.c.chat.completions.create(model="tiny", messages=MSG, response_format=fmt)
            self.assertEqual(e.exception.body["param"], "response_format", fmt)


class ApplicationSchemas(unittest.TestCase):
    """json_schema answers validate for 20 schemas of real applications."""

    def test_every_answer_validates(self):
        from concurrent.futures import ThreadPoolExecutor

        with open(os.path.join(HERE, "schemas.json")) as f:
            schemas = {k: v for k, v in json.load(f).items() if not k.startswith("_")}
        self.assertEqual(len(schemas), 20)
        c = SERVER.client()

        def ask(item):
            name, schema = item
            r = c.chat.completions.create(
                model="tiny", messages=MSG, max_tokens=450, temperature=1.0, seed=len(name),
                response_format={"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}},
            )
            return name, schema, r.choices[0]

        with ThreadPoolExecutor(8) as pool:
            for name, schema, ch in pool.map(ask, schemas.items()):
                self.assertEqual(ch.finish_reason, "stop", f"{name}: {ch.message.content}")
                jsonschema.validate(json.loads(ch.message.content), schema)


WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city.", "strict": True,
    "parameters": {"type": "object", "additionalProperties": False, "required": ["city", "unit"],
                   "properties": {"city": {"type": "string", "maxLength": 12}, "unit": {"enum": ["c", "f"]}}}}}
CLOCK = {"type": "function", "function": {
    "name": "get_time", "description": "Local time in a time zone.",
    "parameters": {"type": "object", "additionalProperties": False, "required": ["tz"],
                   "properties": {"tz": {"type": "string", "pattern": "^[A-Z][a-z]{2,8}/[A-Z][a-z]{2,8}$"}}}}}
TOOLS = [WEATHER, CLOCK]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
ASK = [{"role": "user", "content": "What's the weather in Paris, and the time there?"}]


class ToolCalls(unittest.TestCase):
    """Qwen3's template (Hermes <tool_call> syntax, thinking blocks)."""

    def setUp(self):
        self.c = AGENT.client()

    def create(self, **kw):
        # The tiny model's context is 512 tokens; the prompt with tools ~350.
        args = dict(model="tiny", messages=ASK, tools=TOOLS, max_tokens=140, temperature=1.0)
        args.update(kw)
        return self.c.chat.completions.create(**args)

    def check_calls(self, calls):
        self.assertTrue(calls)
        for call in calls:
            self.assertTrue(call.id.startswith("call_"))
            self.assertEqual(call.type, "function")
            jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])

    def test_required_calls_are_valid_unary_and_streamed_alike(self):
        for seed in (1, 2, 3):
            r = self.create(tool_choice="required", seed=seed)
            ch = r.choices[0]
            self.assertEqual(ch.finish_reason, "tool_calls")
            self.assertIsNone(ch.message.content)
            self.check_calls(ch.message.tool_calls)
            # The same request streamed: deltas assemble to the same calls.
            calls, finish, names_seen = {}, None, 0
            for chunk in self.create(tool_choice="required", seed=seed, stream=True):
                for c in chunk.choices:
                    finish = c.finish_reason or finish
                    for d in c.delta.tool_calls or []:
                        if d.id is not None:
                            names_seen += 1
                            calls[d.index] = {"id": d.id, "name": d.function.name, "arguments": ""}
                        else:
                            self.assertIsNone(d.function.name)
                        calls[d.index]["arguments"] += d.function.arguments or ""
            self.assertEqual(finish, "tool_calls")
            self.assertEqual(names_seen, len(calls))
            unary = [(t.function.name, t.function.arguments) for t in ch.message.tool_calls]
            self.assertEqual([(calls[i]["name"], calls[i]["arguments"]) for i in sorted(calls)], unary)

    def test_named_choice_and_one_call_only(self):
        for seed in (4, 5):
            r = self.create(tool_choice={"type": "function", "function": {"name": "get_time"}},
                            parallel_tool_calls=False, seed=seed)
            calls = r.choices[0].message.tool_calls
            self.check_calls(calls)
            self.assertEqual([c.function.name for c in calls], ["get_time"])

    def test_a_tool_loop_call_result_answer(self):
        r = self.create(tool_choice={"type": "function", "function": {"name": "get_weather"}}, seed=6)
        msg = r.choices[0].message
        call = msg.tool_calls[0]
        history = ASK + [msg.model_dump(exclude_none=True),
                         {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"temp_c": 18})}]
        final = self.create(messages=history, tool_choice="none", max_tokens=8, seed=7)
        self.assertIn(final.choices[0].finish_reason, ("stop", "length"))
        self.assertIsNone(final.choices[0].message.tool_calls)
        # The template showed the result to the model: /tokenize agrees.
        def count(**body):
            req = urllib.request.Request(AGENT.url + "/tokenize", json.dumps(dict(model="tiny", **body)).encode(),
                                         {"content-type": "application/json"})
            with urllib.request.urlopen(req) as t:
                return json.load(t)["count"]

        # /tokenize shows what the model is shown: the tools cost tokens,
        # the call and its result are in the prompt, and tool_choice none
        # leaves the tools out.
        self.assertLess(count(messages=history), count(messages=history, tools=TOOLS))
        self.assertLess(count(messages=ASK), count(messages=history))
        self.assertEqual(final.usage.prompt_tokens, count(messages=history))

    def test_reasoning_is_split_from_the_answer(self):
        fmt = {"type": "regex", "regex": "<think>[a-z]{3,12}</think>\n\n[a-z]{2,8}"}
        r = self.create(tools=None, response_format=fmt, seed=8, max_tokens=60)
        m = r.choices[0].message
        self.assertRegex(m.model_extra["reasoning_content"], r"^[a-z]{3,12}$")
        self.assertRegex(m.content, r"^[a-z]{2,8}$")
        self.assertGreater(r.usage.completion_tokens_details.reasoning_tokens, 0)
        self.assertLess(r.usage.completion_tokens_details.reasoning_tokens, r.usage.completion_tokens)
        text, thought = "", ""
        for chunk in self.create(tools=None, response_format=fmt, seed=8, max_tokens=60, stream=True):
            for c in chunk.choices:
                text += c.delta.content or ""
                thought += (c.delta.model_extra or {}).get("reasoning_content") or ""
        self.assertEqual((thought, text), (m.model_extra["reasoning_content"], m.content))

    def test_bad_tools_are_a_400_naming_the_field(self):
        for kw, param in [
            (dict(tool_choice={"type": "function", "function": {"name": "nope"}}), "tool_choice"),
            (dict(tools=[{"type": "function", "function": {"name": "f", "parameters": {"type": "fancy"}}}]),
             "tools[0].function.parameters"),
            (dict(tools=[{"type": "function", "function": {"name": "bad name"}}]), "tools[0].function.name"),
        ]:
            with self.assertRaises(openai.BadRequestError) as e:
                self.create(**kw)
            self.assertEqual(e.exception.body["param"], param, kw)


class Errors(unittest.TestCase):
    def test_bad_request(self):
        c = SERVER.client()
        with self.assertRaises(openai.BadRequestError) as e:
            c.chat.completions.create(model="tiny", messages=MSG, temperature=5)
        self.assertEqual(e.exception.body["param"], "temperature")
        with self.assertRaises(openai.BadRequestError) as e:
            c.chat.completions.create(model="tiny", messages=MSG, max_tokens=100000)
        self.assertEqual(e.exception.code, "context_length_exceeded")
        with self.assertRaises(openai.BadRequestError) as e:
            c.chat.completions.create(
                model="tiny", messages=MSG,
                tools=[{"type": "function", "function": {"name": "f", "parameters": {"type": "fancy"}}}],
            )
        self.assertEqual(e.exception.body["param"], "tools[0].function.parameters")

    def test_unknown_model(self):
        with self.assertRaises(openai.NotFoundError):
            SERVER.client().chat.completions.create(model="gpt-4o", messages=MSG)

    def test_bad_key(self):
        with self.assertRaises(openai.AuthenticationError):
            SERVER.client(key="sk-wrong").chat.completions.create(model="tiny", messages=MSG)

    def test_overload(self):
        # FULL takes one request and queues none: a long stream holds it.
        held = FULL.client().completions.create(
            model="tiny", prompt="Hi", max_tokens=400, stream=True, extra_body={"ignore_eos": True}
        )
        try:
            next(iter(held))  # admitted: the stream has started
            with self.assertRaises(openai.RateLimitError) as e:
                FULL.client().chat.completions.create(model="tiny", messages=MSG, max_tokens=2)
            self.assertGreaterEqual(int(e.exception.response.headers["retry-after"]), 1)
            self.assertGreaterEqual(int(e.exception.response.headers["retry-after-ms"]), 100)
        finally:
            held.close()


class Https(unittest.TestCase):
    def test_stream_with_a_private_ca(self):
        self.assertTrue(HTTPS.url.startswith("https://127.0.0.1:"))
        c = HTTPS.client(http_client=openai.DefaultHttpxClient(verify=TRUST))
        chunks = list(
            c.chat.completions.create(model="tiny", messages=MSG, max_tokens=6, stream=True)
        )
        text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
        self.assertTrue(text)
        self.assertEqual(chunks[-1].choices[0].finish_reason, "length")

    def test_untrusted_certificate_fails(self):
        # The system's roots do not include our private CA.
        with self.assertRaises(openai.APIConnectionError) as e:
            HTTPS.client().chat.completions.create(model="tiny", messages=MSG, max_tokens=2)
        self.assertIn("CERTIFICATE_VERIFY_FAILED", repr(e.exception.__cause__))

    def test_plain_http_to_the_tls_port_says_so(self):
        plain = HTTPS.url.replace("https://", "http://")
        c = openai.OpenAI(base_url=plain + "/v1", api_key=KEY, max_retries=0)
        with self.assertRaises(openai.BadRequestError) as e:
            c.chat.completions.create(model="tiny", messages=MSG, max_tokens=2)
        self.assertIn("https://", e.exception.response.text)


if __name__ == "__main__":
    unittest.main(verbosity=2)

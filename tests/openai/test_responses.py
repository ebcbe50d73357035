"""hasten serve's Responses API (`/v1/responses`) driven by the official
`openai` Python package: a response and the same request streamed (the
deltas assemble to the unary text, the final event carries the same
output), a function-tool round trip through `previous_response_id` on
Qwen3's template, `text.format` JSON schema, `store: false`, retrieving,
listing the input items of and deleting stored responses, background
responses (polled, continued, cancelled), and the SDK's typed errors.

Run through scripts/test-openai.sh (HASTEN_BIN, HASTEN_MODEL).
"""

import json
import time
import unittest
import urllib.request

import jsonschema
import openai

from test_openai import KEY, QWEN3, Server

WEATHER = {
    "type": "function", "name": "get_weather", "description": "Current weather in a city.", "strict": True,
    "parameters": {"type": "object", "additionalProperties": False, "required": ["city", "unit"],
                   "properties": {"city": {"type": "string", "maxLength": 12}, "unit": {"enum": ["c", "f"]}}},
}
PERSON = {"type": "object", "additionalProperties": False, "required": ["name", "age"],
          "properties": {"name": {"type": "string", "maxLength": 20}, "age": {"type": "integer", "minimum": 0, "maximum": 150}}}


def setUpModule():
    global SERVER, AGENT
    SERVER = Server("--api-key", KEY)
    AGENT = Server("--chat-template", QWEN3)


def tearDownModule():
    SERVER.stop()
    AGENT.stop()


class Responses(unittest.TestCase):
    def test_unary_and_streamed_agree(self):
        c = SERVER.client()
        r = c.responses.create(model="tiny", input="Hello there", max_output_tokens=16, temperature=0)
        self.assertEqual(r.object, "response")
        self.assertTrue(r.output_text)
        self.assertIn(r.status, ("completed", "incomplete"))
        self.assertGreater(r.usage.input_tokens, 0)
        self.assertEqual(r.usage.output_tokens, 16 if r.status == "incomplete" else r.usage.output_tokens)
        deltas, final, kinds = [], None, []
        for ev in c.responses.create(model="tiny", input="Hello there", max_output_tokens=16, temperature=0, stream=True):
            kinds.append(ev.type)
            if ev.type == "response.output_text.delta":
                deltas.append(ev.delta)
            if ev.type in ("response.completed", "response.incomplete"):
                final = ev.response
        self.assertEqual(kinds[0], "response.created")
        self.assertIn("response.output_item.added", kinds)
        self.assertEqual("".join(deltas), r.output_text)
        self.assertEqual(final.output_text, r.output_text)
        self.assertEqual(final.status, r.status)
        self.assertEqual(final.usage.output_tokens, r.usage.output_tokens)

    def test_instructions_and_conversation_state(self):
        c = SERVER.client()
        first = c.responses.create(model="tiny", instructions="Be brief.", input="Hello there", max_output_tokens=6)
        second = c.responses.create(model="tiny", previous_response_id=first.id, input="And then?", max_output_tokens=6)
        # The second prompt holds the first exchange.
        self.assertGreater(second.usage.input_tokens, first.usage.input_tokens + first.usage.output_tokens)
        self.assertEqual(second.previous_response_id, first.id)

    def test_store_false_is_not_kept(self):
        c = SERVER.client()
        r = c.responses.create(model="tiny", input="Hello there", max_output_tokens=2, store=False)
        with self.assertRaises(openai.NotFoundError):
            c.responses.create(model="tiny", previous_response_id=r.id, input="More", max_output_tokens=2)

    def test_json_schema_format(self):
        r = SERVER.client().responses.create(
            model="tiny", input="A person", max_output_tokens=120, temperature=1.0,
            text={"format": {"type": "json_schema", "name": "person", "schema": PERSON, "strict": True}},
        )
        jsonschema.validate(json.loads(r.output_text), PERSON)


class Tools(unittest.TestCase):
    def test_function_call_round_trip(self):
        c = AGENT.client()
        args = dict(model="tiny", input="What's the weather in Paris?", tools=[WEATHER], max_output_tokens=140,
                    temperature=0, tool_choice={"type": "function", "name": "get_weather"})
        r = c.responses.create(**args)
        calls = [o for o in r.output if o.type == "function_call"]
        self.assertEqual([x.name for x in calls], ["get_weather"])
        jsonschema.validate(json.loads(calls[0].arguments), WEATHER["parameters"])
        # Streamed: the same call, its arguments from deltas.
        streamed, done_args = "", None
        for ev in c.responses.create(stream=True, **args):
            if ev.type == "response.function_call_arguments.delta":
                streamed += ev.delta
            if ev.type == "response.function_call_arguments.done":
                done_args = ev.arguments
        self.assertEqual(streamed, calls[0].arguments)
        self.assertEqual(done_args, calls[0].arguments)
        # The result goes back by reference to the stored response.
        out = c.responses.create(model="tiny", previous_response_id=r.id, tools=[WEATHER], tool_choice="none",
                                 max_output_tokens=8, temperature=0,
                                 input=[{"type": "function_call_output", "call_id": calls[0].call_id,
                                         "output": json.dumps({"temp_c": 18})}])
        self.assertFalse([o for o in out.output if o.type == "function_call"])
        # Its prompt holds the question, the call and the result (tool_choice
        # none leaves the tool list out): longer than the question alone.
        alone = c.responses.create(model="tiny", input=args["input"], max_output_tokens=1)
        self.assertGreater(out.usage.input_tokens, alone.usage.input_tokens + 20)


class Stored(unittest.TestCase):
    def test_retrieve_input_items_and_delete(self):
        c = SERVER.client()
        r = c.responses.create(model="tiny", input="Hello there", max_output_tokens=8, temperature=0)
        got = c.responses.retrieve(r.id)
        self.assertEqual((got.id, got.output_text, got.status), (r.id, r.output_text, r.status))
        self.assertEqual(got.usage.output_tokens, r.usage.output_tokens)
        items = c.responses.input_items.list(r.id)
        self.assertEqual(len(items.data), 1)
        self.assertEqual(items.data[0].role, "user")
        self.assertEqual(items.data[0].content[0].text, "Hello there")
        # A streamed response is stored as its final event showed it.
        final = None
        for ev in c.responses.create(model="tiny", input="Hi", max_output_tokens=4, stream=True):
            if ev.type in ("response.completed", "response.incomplete"):
                final = ev.response
        self.assertEqual(c.responses.retrieve(final.id).output_text, final.output_text)
        c.responses.delete(r.id)
        with self.assertRaises(openai.NotFoundError):
            c.responses.retrieve(r.id)
        with self.assertRaises(openai.NotFoundError):
            c.responses.delete(r.id)
        with self.assertRaises(openai.NotFoundError):
            c.responses.input_items.list(r.id)
        # A deleted response cannot be continued; store: false is never kept.
        with self.assertRaises(openai.NotFoundError):
            c.responses.create(model="tiny", input="more", previous_response_id=r.id, max_output_tokens=2)
        r2 = c.responses.create(model="tiny", input="x", max_output_tokens=2, store=False)
        with self.assertRaises(openai.NotFoundError):
            c.responses.retrieve(r2.id)


class Background(unittest.TestCase):
    def poll(self, c, rid):
        for _ in range(400):
            got = c.responses.retrieve(rid)
            if got.status not in ("queued", "in_progress"):
                return got
            time.sleep(0.05)
        self.fail(f"{rid} never ended")

    def test_poll_continue_and_cancel(self):
        c = SERVER.client()
        r = c.responses.create(model="tiny", input="Hello there", max_output_tokens=8, temperature=0, background=True)
        self.assertIn(r.status, ("queued", "in_progress"))
        self.assertEqual(r.output, [])
        done = self.poll(c, r.id)
        self.assertIn(done.status, ("completed", "incomplete"))
        # The same answer a foreground request gives.
        fg = c.responses.create(model="tiny", input="Hello there", max_output_tokens=8, temperature=0)
        self.assertEqual(done.output_text, fg.output_text)
        self.assertEqual(done.usage.output_tokens, fg.usage.output_tokens)
        # A finished background response can be continued.
        nxt = c.responses.create(model="tiny", input="more", previous_response_id=r.id, max_output_tokens=2)
        self.assertGreater(nxt.usage.input_tokens, fg.usage.input_tokens)
        # A long one cancelled once the engine has it ends cancelled (400
        # tokens with no end-of-text take far longer than the cancel's
        # round trip), and its engine request is cancelled too. (Cancelled
        # before its task ran, it never reaches the engine: nothing there
        # to count; CI saw that once on a loaded machine.)
        before = metric("hasten_requests_cancelled_total")
        admitted = metric("hasten_requests_admitted_total")
        long = c.responses.create(model="tiny", input="Once upon a time", max_output_tokens=400,
                                  background=True, extra_body={"ignore_eos": True})
        deadline = time.time() + 10
        while metric("hasten_requests_admitted_total") <= admitted:
            self.assertLess(time.time(), deadline, "the engine never admitted the request")
            time.sleep(0.002)
        cancelled = c.responses.cancel(long.id)
        self.assertEqual(cancelled.status, "cancelled")
        self.assertEqual(c.responses.retrieve(long.id).status, "cancelled")
        deadline = time.time() + 10
        while metric("hasten_requests_cancelled_total") <= before:
            self.assertLess(time.time(), deadline, "the engine request was never cancelled")
            time.sleep(0.02)
        # Only background responses can be cancelled; background needs store.
        with self.assertRaises(openai.BadRequestError):
            c.responses.cancel(fg.id)
        with self.assertRaises(openai.BadRequestError):
            c.responses.create(model="tiny", input="x", background=True, store=False)


def metric(name):
    """A sample of the server's /metrics (0 when absent)."""
    with urllib.request.urlopen(SERVER.url + "/metrics") as r:
        for line in r.read().decode().splitlines():
            k, _, v = line.partition(" ")
            if k == name:
                return float(v)
    return 0.0


class Errors(unittest.TestCase):
    def test_bad_request(self):
        with self.assertRaises(openai.BadRequestError) as e:
            SERVER.client().responses.create(model="tiny", input="Hi", temperature=5)
        self.assertEqual(e.exception.body["param"], "temperature")
        with self.assertRaises(openai.BadRequestError):
            SERVER.client().responses.create(model="tiny", input="Hi", tools=[{"type": "web_search"}])

    def test_unknown_model_and_bad_key(self):
        with self.assertRaises(openai.NotFoundError):
            SERVER.client().responses.create(model="gpt-5", input="Hi")
        with self.assertRaises(openai.AuthenticationError):
            SERVER.client(key="sk-wrong").responses.create(model="tiny", input="Hi")


if __name__ == "__main__":
    unittest.main(verbosity=2)

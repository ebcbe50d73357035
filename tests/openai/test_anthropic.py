"""hasten serve's Anthropic Messages API driven by the official `anthropic`
Python package: a message, the same message streamed (the stream's events
assemble to the unary answer), a tool_use -> tool_result round trip on
Qwen3's template (unary and streamed alike), stop sequences, count_tokens,
and the SDK's typed errors (bad request, unknown model, bad x-api-key).

Run through scripts/test-openai.sh (HASTEN_BIN, HASTEN_MODEL, as for
test_openai.py).
"""

import json
import os
import unittest

import anthropic
import jsonschema

from test_openai import KEY, QWEN3, Server

MSG = [{"role": "user", "content": "Hello there"}]
WEATHER = {
    "name": "get_weather",
    "description": "Current weather in a city.",
    "input_schema": {"type": "object", "additionalProperties": False, "required": ["city", "unit"],
                     "properties": {"city": {"type": "string", "maxLength": 12}, "unit": {"enum": ["c", "f"]}}},
}
ASK = [{"role": "user", "content": "What's the weather in Paris?"}]


def setUpModule():
    global SERVER, AGENT
    SERVER = Server("--api-key", KEY)
    AGENT = Server("--chat-template", QWEN3)


def tearDownModule():
    SERVER.stop()
    AGENT.stop()


def client(server, key=KEY):
    return anthropic.Anthropic(base_url=server.url, api_key=key, max_retries=0)


class Messages(unittest.TestCase):
    def test_message_and_stream_agree(self):
        c = client(SERVER)
        m = c.messages.create(model="tiny", max_tokens=24, temperature=0, messages=MSG)
        self.assertEqual(m.type, "message")
        self.assertEqual(m.role, "assistant")
        self.assertEqual(m.content[0].type, "text")
        self.assertTrue(m.content[0].text)
        self.assertIn(m.stop_reason, ("end_turn", "max_tokens"))
        self.assertGreater(m.usage.input_tokens, 0)
        self.assertGreater(m.usage.output_tokens, 0)
        with c.messages.stream(model="tiny", max_tokens=24, temperature=0, messages=MSG) as s:
            text = "".join(s.text_stream)
            final = s.get_final_message()
        self.assertEqual(text, m.content[0].text)
        self.assertEqual(final.content[0].text, m.content[0].text)
        self.assertEqual(final.stop_reason, m.stop_reason)
        self.assertEqual(final.usage.output_tokens, m.usage.output_tokens)
        self.assertEqual(final.usage.input_tokens, m.usage.input_tokens)

    def test_system_and_stop_sequences(self):
        c = client(SERVER)
        free = c.messages.create(model="tiny", max_tokens=40, temperature=0, system="Be brief.", messages=MSG)
        text = free.content[0].text
        words = text.split()
        self.assertGreater(len(words), 2, text)
        stop = " " + words[2]
        m = c.messages.create(model="tiny", max_tokens=40, temperature=0, system="Be brief.", messages=MSG,
                              stop_sequences=[stop])
        self.assertEqual(m.content[0].text, text[: text.index(stop)])
        self.assertEqual(m.stop_reason, "stop_sequence")
        self.assertEqual(m.stop_sequence, stop)
        with c.messages.stream(model="tiny", max_tokens=40, temperature=0, system="Be brief.", messages=MSG,
                               stop_sequences=[stop]) as s:
            final = s.get_final_message()
        self.assertEqual((final.stop_reason, final.stop_sequence), ("stop_sequence", stop))

    def test_count_tokens_is_the_prompt(self):
        c = client(SERVER)
        n = c.messages.count_tokens(model="tiny", messages=MSG, system="Be brief.")
        m = c.messages.create(model="tiny", max_tokens=2, messages=MSG, system="Be brief.")
        self.assertEqual(n.input_tokens, m.usage.input_tokens)


class Tools(unittest.TestCase):
    def test_tool_use_then_tool_result(self):
        c = client(AGENT)
        args = dict(model="tiny", max_tokens=140, temperature=0, tools=[WEATHER], messages=ASK,
                    tool_choice={"type": "tool", "name": "get_weather"})
        m = c.messages.create(**args)
        self.assertEqual(m.stop_reason, "tool_use")
        uses = [b for b in m.content if b.type == "tool_use"]
        self.assertEqual([u.name for u in uses], ["get_weather"])
        jsonschema.validate(uses[0].input, WEATHER["input_schema"])
        # Streamed: the same call, its input assembled from JSON deltas.
        with c.messages.stream(**args) as s:
            final = s.get_final_message()
        self.assertEqual([(b.name, b.input) for b in final.content if b.type == "tool_use"],
                         [(u.name, u.input) for u in uses])
        self.assertEqual(final.stop_reason, "tool_use")
        # The result goes back as a tool_result block; the model answers.
        history = ASK + [
            {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in m.content]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": uses[0].id,
                                          "content": json.dumps({"temp_c": 18})}]},
        ]
        answer = c.messages.create(model="tiny", max_tokens=8, temperature=0, tools=[WEATHER],
                                   tool_choice={"type": "none"}, messages=history)
        self.assertIn(answer.stop_reason, ("end_turn", "max_tokens"))
        self.assertFalse([b for b in answer.content if b.type == "tool_use"])
        # The call and its result were in the prompt.
        self.assertGreater(c.messages.count_tokens(model="tiny", messages=history).input_tokens,
                           c.messages.count_tokens(model="tiny", messages=ASK).input_tokens + 10)


class Errors(unittest.TestCase):
    def test_bad_request(self):
        with self.assertRaises(anthropic.BadRequestError) as e:
            client(SERVER).messages.create(model="tiny", max_tokens=8, messages=MSG, temperature=5)
        self.assertEqual(e.exception.body["type"], "error")
        self.assertEqual(e.exception.body["error"]["type"], "invalid_request_error")
        self.assertIn("temperature", e.exception.body["error"]["message"])
        with self.assertRaises(anthropic.BadRequestError) as e:
            client(SERVER).messages.create(model="tiny", max_tokens=8, messages=[
                {"role": "user", "content": [{"type": "image", "source": {"type": "url", "url": "http://x/y.png"}}]}])
        self.assertIn("image", e.exception.body["error"]["message"])

    def test_missing_max_tokens(self):
        # The SDK insists on max_tokens; a raw request without it is a 400.
        with self.assertRaises(anthropic.BadRequestError) as e:
            client(SERVER).post("/v1/messages", body={"model": "tiny", "messages": MSG}, cast_to=object)
        self.assertIn("max_tokens", e.exception.body["error"]["message"])

    def test_unknown_model(self):
        with self.assertRaises(anthropic.NotFoundError) as e:
            client(SERVER).messages.create(model="claude-sonnet-4-5", max_tokens=8, messages=MSG)
        self.assertEqual(e.exception.body["error"]["type"], "not_found_error")

    def test_bad_key(self):
        with self.assertRaises(anthropic.AuthenticationError) as e:
            client(SERVER, key="sk-wrong").messages.create(model="tiny", max_tokens=8, messages=MSG)
        self.assertEqual(e.exception.body["error"]["type"], "authentication_error")


if __name__ == "__main__":
    unittest.main(verbosity=2)

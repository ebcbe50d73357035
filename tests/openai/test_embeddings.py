"""hasten serve's `/v1/embeddings` driven by the official `openai` Python
package: unit vectors, the same text alone and in a batch of 64 (within
1e-5), float and base64 encodings, `dimensions`, and bad inputs as 400s.

Run through scripts/test-openai.sh (HASTEN_BIN, HASTEN_MODEL).
"""

import math
import unittest

import openai

from test_openai import KEY, Server


def setUpModule():
    global SERVER
    SERVER = Server("--api-key", KEY)


def tearDownModule():
    SERVER.stop()


def dot(a, b):
    return sum(x * y for x, y in zip(a, b))


class Embeddings(unittest.TestCase):
    def test_alone_and_in_a_batch(self):
        c = SERVER.client()
        text = "The LORD is my shepherd; I shall not want."
        one = c.embeddings.create(model="tiny", input=text, encoding_format="float")
        v = one.data[0].embedding
        self.assertAlmostEqual(math.sqrt(dot(v, v)), 1.0, places=5)
        self.assertGreater(one.usage.prompt_tokens, 5)
        batch = [f"verse {i}: and it was so" for i in range(63)]
        batch.insert(40, text)
        many = c.embeddings.create(model="tiny", input=batch)  # the SDK asks for base64
        self.assertEqual([d.index for d in many.data], list(range(64)))
        w = many.data[40].embedding
        self.assertLess(max(abs(a - b) for a, b in zip(v, w)), 1e-5)
        self.assertAlmostEqual(dot(v, v), 1.0, places=5)
        self.assertLess(dot(many.data[0].embedding, many.data[1].embedding), 0.99999)

    def test_dimensions_and_tokens(self):
        c = SERVER.client()
        r = c.embeddings.create(model="tiny", input=[[1, 2, 3], [4, 5]], dimensions=16, encoding_format="float")
        self.assertEqual([len(d.embedding) for d in r.data], [16, 16])
        self.assertAlmostEqual(dot(r.data[0].embedding, r.data[0].embedding), 1.0, places=5)
        self.assertEqual(r.usage.prompt_tokens, 5)

    def test_bad_inputs_are_400s(self):
        c = SERVER.client()
        for kw in [dict(input=[]), dict(input=""), dict(input="word " * 2000),
                   dict(input="x", dimensions=100000), dict(input="x", encoding_format="hex"),
                   dict(input=[[999999]])]:
            with self.assertRaises(openai.BadRequestError, msg=str(kw)[:80]):
                c.embeddings.create(model="tiny", **kw)
        with self.assertRaises(openai.BadRequestError):
            c.post("/embeddings", body={"model": "tiny", "input": [1.5, "x"]}, cast_to=object)
        with self.assertRaises(openai.AuthenticationError):
            SERVER.client(key="sk-wrong").embeddings.create(model="tiny", input="x")


if __name__ == "__main__":
    unittest.main(verbosity=2)

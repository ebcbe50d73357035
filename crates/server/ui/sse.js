// A chat completion (or Responses) stream read with fetch (EventSource cannot POST):
// SSE frames parsed as they arrive, `: queued` and `: prefill` comments
// passed on, and a dropped connection resumed from the last event id with
// `GET /v1/streams/{id}` and `Last-Event-ID`, so no text is lost or
// repeated.
import { api as api_, errorText } from "./app.js";

/** Parses SSE text; calls onEvent({id, data}) or onComment(text) per frame. */
export class SseParser {
  constructor(onEvent, onComment) {
    this.buf = "";
    this.onEvent = onEvent;
    this.onComment = onComment;
  }
  push(text) {
    this.buf += text.replace(/\r\n/g, "\n");
    let end;
    while ((end = this.buf.indexOf("\n\n")) >= 0) {
      const frame = this.buf.slice(0, end);
      this.buf = this.buf.slice(end + 2);
      let id = null;
      const data = [];
      for (const line of frame.split("\n")) {
        if (line.startsWith(":")) this.onComment(line.slice(1).trim());
        else if (line.startsWith("id:")) id = line.slice(3).trim();
        else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
      }
      if (data.length) this.onEvent({ id, data: data.join("\n") });
    }
  }
}

function requestId() {
  const a = new Uint8Array(12);
  crypto.getRandomValues(a);
  return "ui-" + Array.from(a, (b) => b.toString(16).padStart(2, "0")).join("");
}

/** An error event in the stream (not a network failure: no resume). */
class StreamError extends Error {}

/** A Responses event as the chat chunk it amounts to (null: none). */
export function responsesChunk(ev) {
  const delta = (d) => ({ choices: [{ index: 0, delta: d }] });
  switch (ev.type) {
    case "response.output_text.delta":
      return delta({ content: ev.delta });
    case "response.reasoning_text.delta":
      return delta({ reasoning_content: ev.delta });
    case "response.output_item.done":
      if (ev.item.type !== "function_call") return null;
      return delta({
        tool_calls: [{ id: ev.item.call_id, type: "function",
          function: { name: ev.item.name, arguments: ev.item.arguments } }],
      });
    case "response.completed":
    case "response.incomplete": {
      const r = ev.response;
      const u = r.usage;
      const finish = r.status === "incomplete" ? "length" : "stop";
      return {
        choices: [{ index: 0, delta: {}, finish_reason: finish }],
        usage: u && {
          prompt_tokens: u.input_tokens,
          completion_tokens: u.output_tokens,
          prompt_tokens_details: { cached_tokens: (u.input_tokens_details || {}).cached_tokens || 0 },
        },
        timing: r.timing,
      };
    }
    case "response.failed":
      throw new StreamError((ev.response.error || {}).message || "the response failed");
    case "error":
      throw new StreamError(ev.message || "error");
  }
  return null;
}

const APIS = {
  // Chat completions end with [DONE] and can be resumed by request id.
  chat: { path: "/v1/chat/completions", resumable: true },
  // Responses events end with response.completed (or .incomplete); they
  // carry no event ids, so a dropped stream is an error, not a resume.
  responses: { path: "/v1/responses", resumable: false },
};

/**
 * Streams `body` to the `api` ("chat" or "responses"). `on` has
 * chunk(json) (chat chunks; Responses events are converted),
 * comment(text), resumed(n); resolves when the stream ends, rejects on an
 * API error or after `maxResumes` failed resumptions. `signal` stops it.
 */
export async function streamChat(body, on, signal, api = "chat", maxResumes = 5) {
  const { path, resumable } = APIS[api];
  const rid = requestId();
  let lastId = null;
  let done = false;
  const parser = new SseParser((ev) => {
    if (ev.id !== null) lastId = ev.id;
    if (ev.data === "[DONE]") {
      done = true;
      return;
    }
    const j = JSON.parse(ev.data);
    if (api === "chat") return on.chunk(j);
    const c = responsesChunk(j);
    if (j.type === "response.completed" || j.type === "response.incomplete") done = true;
    if (c) on.chunk(c);
  }, (c) => on.comment(c));

  const read = async (res) => {
    const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
    for (;;) {
      const { value, done: end } = await reader.read();
      if (end) return;
      parser.push(value);
      if (done) return;
    }
  };

  const first = await api_(path, {
    method: "POST",
    headers: { "Content-Type": "application/json", "x-request-id": rid },
    body: JSON.stringify(body),
    signal,
  });
  if (!first.ok) throw new Error(await errorText(first));
  on.open && on.open();
  let res = first;
  let resumes = 0;
  for (;;) {
    try {
      await read(res);
    } catch (e) {
      if (signal && signal.aborted) throw e;
      if (e instanceof StreamError) throw e;
    }
    if (done || (signal && signal.aborted)) return;
    if (!resumable) throw new Error("the stream dropped before the response completed");
    // The connection ended before [DONE]: attach again where we were.
    if (resumes >= maxResumes) throw new Error("the stream dropped and could not be resumed");
    resumes++;
    parser.buf = "";
    await new Promise((r) => setTimeout(r, 100 * resumes));
    const headers = lastId === null ? {} : { "Last-Event-ID": lastId };
    try {
      res = await api_(`/v1/streams/${rid}`, { headers, signal });
    } catch (e) {
      if (signal && signal.aborted) throw e;
      continue;
    }
    if (!res.ok) throw new Error("resuming the stream: " + (await errorText(res)));
    on.resumed && on.resumed(resumes);
  }
}

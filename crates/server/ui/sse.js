// A chat completion stream read with fetch (EventSource cannot POST):
// SSE frames parsed as they arrive, `: queued` and `: prefill` comments
// passed on, and a dropped connection resumed from the last event id with
// `GET /v1/streams/{id}` and `Last-Event-ID`, so no text is lost or
// repeated.
import { api, errorText } from "./app.js";

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

/**
 * Streams `body` to /v1/chat/completions. `on` has chunk(json),
 * comment(text), resumed(n); resolves when `[DONE]` arrives, rejects on an
 * API error or after `maxResumes` failed resumptions. `signal` stops it.
 */
export async function streamChat(body, on, signal, maxResumes = 5) {
  const rid = requestId();
  let lastId = null;
  let done = false;
  const parser = new SseParser((ev) => {
    if (ev.id !== null) lastId = ev.id;
    if (ev.data === "[DONE]") {
      done = true;
      return;
    }
    on.chunk(JSON.parse(ev.data));
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

  const first = await api("/v1/chat/completions", {
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
    }
    if (done || (signal && signal.aborted)) return;
    // The connection ended before [DONE]: attach again where we were.
    if (resumes >= maxResumes) throw new Error("the stream dropped and could not be resumed");
    resumes++;
    parser.buf = "";
    await new Promise((r) => setTimeout(r, 100 * resumes));
    const headers = lastId === null ? {} : { "Last-Event-ID": lastId };
    try {
      res = await api(`/v1/streams/${rid}`, { headers, signal });
    } catch (e) {
      if (signal && signal.aborted) throw e;
      continue;
    }
    if (!res.ok) throw new Error("resuming the stream: " + (await errorText(res)));
    on.resumed && on.resumed(resumes);
  }
}

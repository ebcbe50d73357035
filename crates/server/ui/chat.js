// The chat view: conversations (kept in IndexedDB, exportable as JSON),
// streaming Markdown replies, stop / regenerate / edit, and per reply a
// live timeline of where its time went (network, queue, prefill, decode),
// TTFT, tokens/s and an ITL sparkline.
import { streamChat } from "./sse.js";
import { renderMarkdown } from "./markdown.js";
import * as store from "./store.js";
import { Timeline } from "./timeline.js";

const $ = (id) => document.getElementById(id);
let conv = null; // the open conversation
let running = null; // AbortController of the reply being streamed

function newConversation() {
  return { id: crypto.randomUUID(), created: Date.now(), title: "New chat", messages: [] };
}

function settings() {
  const num = (id) => {
    const v = $(id).value;
    return v === "" ? undefined : Number(v);
  };
  return {
    temperature: num("temperature"),
    top_p: num("top_p"),
    max_tokens: num("max_tokens"),
    seed: num("seed"),
  };
}

async function refreshList() {
  const list = $("conv-list");
  list.replaceChildren();
  for (const c of await store.all()) {
    const li = document.createElement("li");
    const b = document.createElement("button");
    b.type = "button";
    b.textContent = c.title;
    if (conv && c.id === conv.id) b.setAttribute("aria-current", "true");
    b.addEventListener("click", () => open(c));
    li.append(b);
    list.append(li);
  }
}

function open(c) {
  conv = c;
  $("system").value = c.system || "";
  const ol = $("messages");
  ol.replaceChildren();
  c.messages.forEach((m, i) => ol.append(messageView(m, i)));
  refreshList();
}

/** One message's element; an assistant message keeps its timeline. */
function messageView(m, index) {
  const li = document.createElement("li");
  li.className = "msg " + m.role;
  const who = document.createElement("div");
  who.className = "who";
  who.textContent = m.role === "user" ? "You" : "Assistant";
  li.append(who);
  if (m.reasoning) {
    const d = document.createElement("details");
    d.className = "reasoning";
    d.innerHTML = "<summary>Reasoning</summary>";
    const body = document.createElement("div");
    body.textContent = m.reasoning;
    d.append(body);
    li.append(d);
  }
  const body = document.createElement("div");
  body.className = "body";
  if (m.role === "user") body.textContent = m.content;
  else body.innerHTML = renderMarkdown(m.content || "");
  li.append(body);
  if (m.tool_calls && m.tool_calls.length) {
    const pre = document.createElement("pre");
    pre.className = "tools";
    pre.textContent = JSON.stringify(m.tool_calls, null, 2);
    li.append(pre);
  }
  if (m.role === "user") {
    const edit = document.createElement("button");
    edit.type = "button";
    edit.className = "edit";
    edit.textContent = "Edit";
    edit.setAttribute("aria-label", "Edit this message and resend");
    edit.addEventListener("click", () => {
      if (running) return;
      $("prompt").value = m.content;
      conv.messages = conv.messages.slice(0, index);
      open(conv);
      $("prompt").focus();
    });
    li.append(edit);
  }
  if (m.stats) new Timeline(li).final(m.stats);
  return li;
}

/** The request for `msgs` on `api`: a chat completion, or a Responses
 * request (system prompt as `instructions`, turns as input messages, not
 * stored: the page keeps its own history). */
function requestBody(api, msgs) {
  const model = $("model-name").textContent || undefined;
  if (api !== "responses") {
    return { model, messages: msgs, stream: true, stream_options: { include_usage: true }, ...settings() };
  }
  const s = settings();
  return {
    model,
    instructions: msgs[0] && msgs[0].role === "system" ? msgs[0].content : undefined,
    input: msgs.filter((m) => m.role !== "system"),
    stream: true,
    store: false,
    temperature: s.temperature,
    top_p: s.top_p,
    max_output_tokens: s.max_tokens,
    seed: s.seed,
  };
}

async function send(text) {
  if (running) return;
  if (!conv) conv = newConversation();
  conv.system = $("system").value;
  if (text) {
    conv.messages.push({ role: "user", content: text });
    if (conv.title === "New chat") conv.title = text.slice(0, 40);
  }
  open(conv);
  const msgs = [];
  if (conv.system) msgs.push({ role: "system", content: conv.system });
  for (const m of conv.messages) msgs.push({ role: m.role, content: m.content || "" });
  const reply = { role: "assistant", content: "", reasoning: "", tool_calls: [] };
  const li = messageView(reply, conv.messages.length);
  $("messages").append(li);
  const body = li.querySelector(".body");
  const tl = new Timeline(li);
  running = new AbortController();
  $("stop").disabled = false;
  $("send").disabled = true;
  let frame = 0;
  const paint = () => {
    frame = 0;
    body.innerHTML = renderMarkdown(reply.content);
    li.scrollIntoView({ block: "end" });
  };
  let usage = null;
  let timing = null;
  try {
    const api = $("api").value;
    await streamChat(
      requestBody(api, msgs),
      {
        open: () => tl.opened(),
        comment: (c) => tl.comment(c),
        resumed: (n) => tl.resumed(n),
        chunk: (j) => {
          if (j.usage) usage = j.usage;
          if (j.timing) timing = j.timing;
          for (const ch of j.choices || []) {
            const d = ch.delta || {};
            if (d.reasoning_content) {
              reply.reasoning += d.reasoning_content;
              tl.token();
            }
            if (d.content) {
              reply.content += d.content;
              tl.token();
              if (!frame) frame = requestAnimationFrame(paint);
            }
            if (d.tool_calls) reply.tool_calls.push(...d.tool_calls);
          }
        },
      },
      running.signal,
      api,
    );
  } catch (e) {
    if (!running.signal.aborted) {
      const err = document.createElement("p");
      err.className = "error";
      err.setAttribute("role", "alert");
      err.textContent = "Error: " + e.message;
      li.append(err);
    }
  } finally {
    if (frame) cancelAnimationFrame(frame);
    paint();
    reply.stats = tl.done(timing, usage, running.signal.aborted);
    running = null;
    $("stop").disabled = true;
    $("send").disabled = false;
  }
  if (!reply.reasoning) delete reply.reasoning;
  if (!reply.tool_calls.length) delete reply.tool_calls;
  conv.messages.push(reply);
  li.replaceWith(messageView(reply, conv.messages.length - 1));
  await store.put(conv);
  refreshList();
}

function exportJson() {
  if (!conv) return;
  const blob = new Blob([JSON.stringify(conv, null, 2)], { type: "application/json" });
  const a = document.createElement("a");
  a.href = URL.createObjectURL(blob);
  a.download = `hasten-chat-${conv.id}.json`;
  a.click();
  URL.revokeObjectURL(a.href);
}

export function initChat() {
  $("composer").addEventListener("submit", (e) => {
    e.preventDefault();
    const text = $("prompt").value.trim();
    if (!text) return;
    $("prompt").value = "";
    send(text);
  });
  $("prompt").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      $("composer").requestSubmit();
    }
  });
  $("stop").addEventListener("click", () => running && running.abort());
  $("regenerate").addEventListener("click", () => {
    if (running || !conv || !conv.messages.length) return;
    if (conv.messages[conv.messages.length - 1].role === "assistant") conv.messages.pop();
    send(null);
  });
  $("new-chat").addEventListener("click", () => {
    if (running) return;
    open(newConversation());
  });
  $("export-chat").addEventListener("click", exportJson);
  store.all().then((cs) => open(cs[0] || newConversation()));
}

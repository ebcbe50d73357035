// The page's entry point: the API helper (API key kept in session
// storage, asked for once on a 401), view switching by URL hash, and the
// model's name in the header.
import { initChat } from "./chat.js";
import { initServer } from "./server.js";
import { initBench } from "./bench.js";

const KEY = "hasten-api-key";

/** Headers for an API call: JSON and the key, if one was given. */
export function authHeaders(extra = {}) {
  const h = { ...extra };
  const key = sessionStorage.getItem(KEY);
  if (key) h["Authorization"] = "Bearer " + key;
  return h;
}

/** Asks for the API key in a modal dialog; resolves once one is set. */
function askKey() {
  const dlg = document.getElementById("key-dialog");
  const input = document.getElementById("key-input");
  return new Promise((resolve) => {
    dlg.addEventListener("close", () => {
      if (input.value) sessionStorage.setItem(KEY, input.value.trim());
      input.value = "";
      resolve();
    }, { once: true });
    dlg.showModal();
    input.focus();
  });
}

/** fetch() with the key; on 401 asks for a key and tries again (twice at most). */
export async function api(path, opts = {}) {
  for (let i = 0; ; i++) {
    const res = await fetch(path, { ...opts, headers: authHeaders(opts.headers || {}) });
    if (res.status !== 401 || i >= 2) return res;
    await askKey();
  }
}

/** The text of an API error body ({"error": {"message"}}), else the status. */
export async function errorText(res) {
  try {
    const j = await res.json();
    return (j.error && j.error.message) || res.statusText;
  } catch {
    return `${res.status} ${res.statusText}`;
  }
}

const views = ["chat", "server", "bench"];
let serverView = null;

function show() {
  const want = views.includes(location.hash.slice(1)) ? location.hash.slice(1) : "chat";
  for (const v of views) {
    document.getElementById("view-" + v).hidden = v !== want;
    const tab = document.getElementById("tab-" + v);
    if (v === want) tab.setAttribute("aria-current", "page");
    else tab.removeAttribute("aria-current");
  }
  if (serverView) serverView.visible(want === "server");
}

async function main() {
  window.addEventListener("hashchange", show);
  show();
  initChat();
  initBench();
  serverView = initServer();
  show();
  const res = await api("/v1/models");
  if (res.ok) {
    const j = await res.json();
    const m = j.data && j.data[0];
    if (m) document.getElementById("model-name").textContent = m.id;
  }
}

main();

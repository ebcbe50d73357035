// The server view: the model card (`/info`) and live charts from
// `/metrics` (polled every second while the view is shown, the last five
// minutes kept): requests running and waiting, KV blocks, step time and
// batch size, throughput, and TTFT / ITL p50 and p99 per ten seconds from
// the histograms' bucket counts.
import { api } from "./app.js";

const WINDOW_S = 300;
const $ = (id) => document.getElementById(id);

/** Prometheus text to { "name{labels}": value } (labels as written). */
export function parseMetrics(text) {
  const out = {};
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const sp = line.lastIndexOf(" ");
    out[line.slice(0, sp)] = Number(line.slice(sp + 1));
  }
  return out;
}

/** Cumulative buckets of histogram `name`: [[le, count], ...] by le. */
function buckets(m, name) {
  const out = [];
  const pre = name + '_bucket{le="';
  for (const [k, v] of Object.entries(m)) {
    if (k.startsWith(pre)) out.push([k.slice(pre.length, -2) === "+Inf" ? Infinity : Number(k.slice(pre.length, -2)), v]);
  }
  return out.sort((a, b) => a[0] - b[0]);
}

/** The q-quantile (upper bucket bound) of the observations between two bucket snapshots. */
function bucketQuantile(now, then, q) {
  const diff = now.map(([le, c], i) => [le, c - (then[i] ? then[i][1] : 0)]);
  const total = diff.length ? diff[diff.length - 1][1] : 0;
  if (total <= 0) return null;
  for (const [le, c] of diff) if (c >= q * total) return le;
  return null;
}

function chart(el, series, opts = {}) {
  const width = Math.max(280, Math.min(560, el.clientWidth || 480));
  return new uPlot(
    {
      width,
      height: 180,
      scales: { x: { time: true } },
      axes: [{}, { size: 50 }],
      series: [{}, ...series.map((s) => ({ label: s.label, stroke: s.color, width: 1.5, spanGaps: true }))],
      legend: { live: false },
      ...opts,
    },
    [[], ...series.map(() => [])],
    el,
  );
}

class Series {
  constructor(el, series) {
    this.plot = chart(el, series);
    this.data = [[], ...series.map(() => [])];
  }
  push(t, values) {
    this.data[0].push(t);
    values.forEach((v, i) => this.data[i + 1].push(v));
    while (this.data[0].length && this.data[0][0] < t - WINDOW_S) this.data.forEach((d) => d.shift());
    this.plot.setData(this.data);
  }
}

function card(info) {
  rows($("card"), [
    ["Model", info.model],
    ["File", info.path],
    ["Architecture", info.arch],
    ["Weights", info.file_mb != null ? `${info.file_mb.toFixed(1)} MB` + (info.format ? ` (${info.format})` : "") : null],
    ["Layers", info.layers],
    ["Context", info.context_length != null ? `${info.context_length} tokens` : null],
    ["KV cache", info.kv_tokens != null ? `${info.kv_tokens} tokens, ${info.kv_type}, ${info.kv_bytes_per_token} bytes/token` : null],
    ["Kernels", info.kernels],
    ["Threads", info.threads],
    ["Speculation", info.speculation],
  ]);
}

/** Rows of a definition list. */
function rows(dl, list) {
  dl.replaceChildren();
  for (const [k, v] of list) {
    if (v == null || v === "") continue;
    const dt = document.createElement("dt");
    dt.textContent = k;
    const dd = document.createElement("dd");
    dd.textContent = String(v);
    dl.append(dt, dd);
  }
}

export function initServer() {
  let charts = null;
  let timer = null;
  let prev = null;
  let est = null;
  let measured = { stepMs: null, itlP50: null, steps: 0 };
  const showEstimate = () => {
    const e = est;
    const m = measured;
    rows($("estimate"), [
      ["Estimate", e ? `TPOT ${e.tpot_ms.toFixed(2)} ms (${e.decode_tokens_per_s.toFixed(1)} tokens/s), TTFT ${e.ttft_ms.toFixed(0)} ms for ${e.prompt_tokens} prompt tokens` : null],
      ["Probed", e ? `read ${e.read_gbs.toFixed(1)} GB/s; decode matmuls stream ${e.decode_stream_gbs.toFixed(1)} GB/s; ${(e.weight_bytes_read / 1e6).toFixed(1)} MB of weights per step (${e.probe_s.toFixed(1)} s)` : null],
      ["Command", e ? e.command : null],
      ["Measured", m.steps > 0 ? `mean step ${m.stepMs.toFixed(2)} ms over ${m.steps} steps in the last five minutes` + (m.itlP50 != null ? `; ITL p50 ≤ ${m.itlP50.toFixed(1)} ms` : "") : "no decode steps yet"],
    ]);
  };
  const runEstimate = async () => {
    const btn = $("estimate-btn");
    btn.disabled = true;
    btn.textContent = "Estimating…";
    try {
      const res = await api("/info/estimate", { method: "POST" });
      if (res.ok) est = await res.json();
      else rows($("estimate"), [["Estimate", "failed: " + res.status]]);
    } finally {
      btn.disabled = false;
      btn.textContent = "Estimate on this machine";
      if (est) showEstimate();
    }
  };
  $("estimate-btn").addEventListener("click", runEstimate);
  const hist = []; // [t, ttft buckets, itl buckets]
  let first = null; // the metrics when polling began

  const tick = async () => {
    const res = await api("/metrics").catch(() => null);
    if (!res || !res.ok) return;
    const m = parseMetrics(await res.text());
    const t = Date.now() / 1000;
    charts.requests.push(t, [m.hasten_requests_running, m.hasten_requests_waiting]);
    charts.kv.push(t, [m.hasten_kv_blocks_used, m.hasten_kv_blocks_cached, m.hasten_kv_blocks_free]);
    $("kv-now").textContent = `KV blocks now: ${m.hasten_kv_blocks_used} used, ${m.hasten_kv_blocks_cached} cached, ${m.hasten_kv_blocks_free} free of ${m.hasten_kv_blocks_total}`;
    $("kv-now").dataset.used = m.hasten_kv_blocks_used;
    if (prev) {
      const dt = t - prev.t;
      const steps = m.hasten_engine_steps_total - prev.m.hasten_engine_steps_total;
      const stepS = m.hasten_step_time_seconds_sum - prev.m.hasten_step_time_seconds_sum;
      const gen = m.hasten_generation_tokens_total - prev.m.hasten_generation_tokens_total;
      const prompt = m.hasten_prompt_tokens_total - prev.m.hasten_prompt_tokens_total;
      charts.step.push(t, [steps > 0 ? (1000 * stepS) / steps : null, m.hasten_batch_size]);
      charts.tput.push(t, [gen / dt, prompt / dt]);
    }
    prev = { t, m };
    hist.push([t, buckets(m, "hasten_time_to_first_token_seconds"), buckets(m, "hasten_inter_token_latency_seconds")]);
    while (hist.length && hist[0][0] < t - WINDOW_S) hist.shift();
    const then = hist.find((h) => h[0] >= t - 10) || hist[0];
    const q = (i, p) => {
      const v = bucketQuantile(hist[hist.length - 1][i], then[i], p);
      return v == null || !isFinite(v) ? null : v * 1000;
    };
    charts.ttft.push(t, [q(1, 0.5), q(1, 0.99)]);
    charts.itl.push(t, [q(2, 0.5), q(2, 0.99)]);
    // The window's mean step and ITL median, beside the estimate.
    if (!first) first = m;
    const steps = m.hasten_engine_steps_total - first.hasten_engine_steps_total;
    const itl = bucketQuantile(hist[hist.length - 1][2], hist[0][2], 0.5);
    measured = {
      steps,
      stepMs: steps > 0 ? (1000 * (m.hasten_step_time_seconds_sum - first.hasten_step_time_seconds_sum)) / steps : null,
      itlP50: itl == null || !isFinite(itl) ? null : itl * 1000,
    };
    showEstimate();
  };

  const start = async () => {
    if (!charts) {
      charts = {
        requests: new Series($("ch-requests"), [{ label: "running", color: "#2b7" }, { label: "waiting", color: "#d63" }]),
        kv: new Series($("ch-kv"), [
          { label: "used", color: "#36c" },
          { label: "cached", color: "#a6c" },
          { label: "free", color: "#999" },
        ]),
        step: new Series($("ch-step"), [{ label: "step ms", color: "#36c" }, { label: "batch", color: "#d63" }]),
        tput: new Series($("ch-tput"), [{ label: "generated", color: "#2b7" }, { label: "prompt", color: "#36c" }]),
        ttft: new Series($("ch-ttft"), [{ label: "p50", color: "#36c" }, { label: "p99", color: "#d63" }]),
        itl: new Series($("ch-itl"), [{ label: "p50", color: "#36c" }, { label: "p99", color: "#d63" }]),
      };
      const res = await api("/info").catch(() => null);
      if (res && res.ok) card(await res.json());
    }
    if (!timer) {
      tick();
      timer = setInterval(tick, 1000);
    }
  };

  return {
    visible(on) {
      if (on) start();
      else if (timer) {
        clearInterval(timer);
        timer = null;
      }
    },
  };
}

// Where one reply's time went, live: a bar split into network, queue (with
// the position while waiting), prefill (with progress) and decode, then
// TTFT, tokens/s, an ITL sparkline with p50/p99, prompt and cached tokens
// and resumes. While streaming the split comes from what the page sees
// (the server's `: queued` and `: prefill` comments, token arrivals); at
// the end the server's own `timing` replaces queue, prefill and decode,
// and network is what is left of the end-to-end time the page measured.
const now = () => performance.now();

function quantile(sorted, q) {
  if (!sorted.length) return NaN;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1));
  return sorted[i];
}

const fmt = (ms) => (ms >= 1000 ? (ms / 1000).toFixed(2) + " s" : ms.toFixed(0) + " ms");

export class Timeline {
  constructor(li) {
    this.el = document.createElement("div");
    this.el.className = "timeline";
    this.el.innerHTML =
      '<div class="bar" role="img"></div><div class="facts"></div><svg class="spark" viewBox="0 0 100 20" preserveAspectRatio="none" aria-hidden="true"><polyline fill="none" stroke="currentColor" stroke-width="1"/></svg>';
    li.append(this.el);
    this.t0 = now();
    this.tOpen = null;
    this.tQueued = null;
    this.tPrefill = null;
    this.tFirst = null;
    this.arrivals = [];
    this.position = null;
    this.prefill = null;
    this.resumes = 0;
    this.timer = setInterval(() => this.render(), 100);
  }

  opened() {
    this.tOpen = now();
  }

  comment(c) {
    const kv = Object.fromEntries(c.split(/\s+/).slice(1).map((p) => p.split("=")));
    if (c.startsWith("queued")) {
      this.tQueued = now();
      this.position = Number(kv.position);
    } else if (c.startsWith("prefill")) {
      if (this.tPrefill === null) this.tPrefill = now();
      this.prefill = { done: Number(kv.done), total: Number(kv.total) };
    }
  }

  resumed(n) {
    this.resumes = n;
  }

  token() {
    const t = now();
    if (this.tFirst === null) this.tFirst = t;
    this.arrivals.push(t);
  }

  /** Live segments (ms) from what the page saw so far. */
  live() {
    const t = now();
    const open = this.tOpen ?? t;
    const prefillAt = this.tPrefill ?? this.tFirst ?? t;
    const first = this.tFirst ?? t;
    return {
      network: open - this.t0,
      queue: Math.max(0, Math.min(prefillAt, t) - open),
      prefill: this.tPrefill === null && this.tFirst === null ? 0 : Math.max(0, first - prefillAt),
      decode: this.tFirst === null ? 0 : t - first,
    };
  }

  render(seg = this.live(), stats = null) {
    const total = seg.network + seg.queue + seg.prefill + seg.decode || 1;
    const bar = this.el.querySelector(".bar");
    bar.replaceChildren();
    const label = [];
    for (const k of ["network", "queue", "prefill", "decode"]) {
      const s = document.createElement("span");
      s.className = "seg " + k;
      s.dataset.ms = seg[k].toFixed(1);
      s.style.width = ((100 * seg[k]) / total).toFixed(3) + "%";
      let text = `${k} ${fmt(seg[k])}`;
      if (!stats && k === "queue" && this.position !== null && this.tPrefill === null && this.tFirst === null)
        text += ` (position ${this.position})`;
      if (!stats && k === "prefill" && this.prefill && this.tFirst === null)
        text += ` (${this.prefill.done}/${this.prefill.total})`;
      s.title = text;
      label.push(text);
      bar.append(s);
    }
    bar.setAttribute("aria-label", label.join(", "));
    const facts = [];
    const st = stats || this.clientStats();
    if (!stats && this.tFirst === null) {
      if (this.prefill) facts.push(`prefill ${this.prefill.done}/${this.prefill.total} tokens`);
      else if (this.position !== null && this.position > 0) facts.push(`waiting: position ${this.position} in the queue`);
      else facts.push("waiting for the first token");
    }
    if (st.ttft_ms != null) facts.push(`TTFT ${fmt(st.ttft_ms)}`);
    if (st.tokens_per_s != null) facts.push(`${st.tokens_per_s.toFixed(1)} tokens/s`);
    if (st.itl_p50 != null) facts.push(`ITL p50 ${fmt(st.itl_p50)} p99 ${fmt(st.itl_p99)}`);
    if (stats && stats.prompt_tokens != null)
      facts.push(`prompt ${stats.prompt_tokens} tokens (${stats.cached_tokens ?? 0} cached)`);
    if (stats) facts.push(["network", "queue", "prefill", "decode"].map((k) => `${k} ${fmt(seg[k])}`).join(", "));
    if (this.resumes || (stats && stats.resumes)) facts.push(`resumed ${stats ? stats.resumes : this.resumes}×`);
    if (stats && stats.stopped) facts.push("stopped");
    this.el.querySelector(".facts").textContent = facts.join(" · ");
    this.spark(st.itl || []);
  }

  clientStats() {
    const itl = [];
    for (let i = 1; i < this.arrivals.length; i++) itl.push(this.arrivals[i] - this.arrivals[i - 1]);
    const sorted = [...itl].sort((a, b) => a - b);
    const n = this.arrivals.length;
    const span = n > 1 ? this.arrivals[n - 1] - this.arrivals[0] : 0;
    return {
      ttft_ms: this.tFirst === null ? null : this.tFirst - this.t0,
      tokens_per_s: span > 0 ? ((n - 1) * 1000) / span : null,
      itl_p50: sorted.length ? quantile(sorted, 0.5) : null,
      itl_p99: sorted.length ? quantile(sorted, 0.99) : null,
      itl,
    };
  }

  spark(itl) {
    const line = this.el.querySelector("polyline");
    if (itl.length < 2) {
      line.setAttribute("points", "");
      return;
    }
    const max = Math.max(...itl) || 1;
    const pts = itl.map((v, i) => `${((100 * i) / (itl.length - 1)).toFixed(2)},${(20 - (19 * v) / max).toFixed(2)}`);
    line.setAttribute("points", pts.join(" "));
  }

  /** The reply ended: the server's timing, if it came, fixes the split. Returns the stats kept with the message. */
  done(timing, usage, stopped) {
    clearInterval(this.timer);
    const e2e = now() - this.t0;
    const c = this.clientStats();
    let seg = this.live();
    if (timing) {
      const server = timing.queue_ms + timing.prefill_ms + timing.decode_ms;
      seg = {
        network: Math.max(0, e2e - server),
        queue: timing.queue_ms,
        prefill: timing.prefill_ms,
        decode: timing.decode_ms,
      };
    }
    const stats = {
      e2e_ms: e2e,
      segments: seg,
      timing: timing || null,
      ttft_ms: c.ttft_ms,
      tokens_per_s: c.tokens_per_s,
      itl_p50: c.itl_p50,
      itl_p99: c.itl_p99,
      itl: c.itl,
      prompt_tokens: timing ? timing.prompt_tokens : usage ? usage.prompt_tokens : null,
      cached_tokens: timing
        ? timing.cached_prompt_tokens
        : usage && usage.prompt_tokens_details
          ? usage.prompt_tokens_details.cached_tokens
          : null,
      resumes: this.resumes,
      stopped: !!stopped,
    };
    this.final(stats);
    return stats;
  }

  /** Shows a finished reply's stats (also for replies loaded from storage). */
  final(stats) {
    clearInterval(this.timer);
    this.el.dataset.final = "true";
    if (stats.timing) this.el.dataset.timing = JSON.stringify(stats.timing);
    this.el.dataset.e2eMs = stats.e2e_ms.toFixed(1);
    this.resumes = stats.resumes || 0;
    this.render(stats.segments, stats);
  }
}

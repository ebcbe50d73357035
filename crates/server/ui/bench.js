// The bench viewer: one or two `hasten bench --out` files (dropped or
// chosen) shown as CDFs of TTFT, TPOT, ITL and E2E per load level,
// throughput against load, and a table of each level's summary.
const $ = (id) => document.getElementById(id);
const COLORS = ["#36c", "#d63", "#2b7", "#a6c", "#c90", "#099", "#666", "#c36"];

function cdf(values) {
  const v = values.filter((x) => x != null && isFinite(x)).sort((a, b) => a - b);
  return [v, v.map((_, i) => (i + 1) / v.length)];
}

/** One uPlot of several CDFs (each its own x values, merged on one axis). */
function cdfChart(el, title, curves) {
  const xs = [...new Set(curves.flatMap((c) => c.points[0]))].sort((a, b) => a - b);
  const ys = curves.map((c) => {
    const [x, y] = c.points;
    let j = -1;
    return xs.map((v) => {
      while (j + 1 < x.length && x[j + 1] <= v) j++;
      return j < 0 ? 0 : y[j];
    });
  });
  const fig = document.createElement("figure");
  fig.innerHTML = `<figcaption>${title} (ms), CDF</figcaption>`;
  const div = document.createElement("div");
  fig.append(div);
  el.append(fig);
  new uPlot(
    {
      width: Math.max(280, Math.min(560, el.clientWidth || 480)),
      height: 200,
      scales: { x: { time: false } },
      series: [{}, ...curves.map((c, i) => ({ label: c.label, stroke: COLORS[i % COLORS.length], width: 1.5 }))],
      legend: { live: false },
    },
    [xs, ...ys],
    div,
  );
}

function fmt(d, key) {
  return d && d[key] != null ? d[key].toFixed(1) : "";
}

function render(runs) {
  const out = $("bench-out");
  out.replaceChildren();
  const levels = [];
  runs.forEach((r, ri) =>
    r.run.levels.forEach((lv) => levels.push({ file: r.name, ri, lv, label: `${runs.length > 1 ? r.name + " · " : ""}${lv.summary.label}` })),
  );
  const charts = document.createElement("div");
  charts.className = "charts";
  out.append(charts);
  const ok = (lv) => lv.records.filter((x) => x.ok && !x.warmup);
  for (const [key, title] of [["ttft_ms", "TTFT"], ["tpot_ms", "TPOT"], ["itl_ms", "ITL"], ["e2e_ms", "E2E"]]) {
    const curves = levels.map((l) => ({
      label: l.label,
      points: cdf(ok(l.lv).flatMap((x) => (Array.isArray(x[key]) ? x[key] : [x[key]]))),
    }));
    cdfChart(charts, title, curves);
  }
  // Throughput against offered load, one line per file.
  const fig = document.createElement("figure");
  fig.innerHTML = "<figcaption>Output tokens/s against load level</figcaption>";
  const div = document.createElement("div");
  fig.append(div);
  charts.append(fig);
  const n = Math.max(...runs.map((r) => r.run.levels.length));
  const xs = Array.from({ length: n }, (_, i) => i + 1);
  new uPlot(
    {
      width: Math.max(280, Math.min(560, charts.clientWidth || 480)),
      height: 200,
      scales: { x: { time: false } },
      series: [{ label: "level" }, ...runs.map((r, i) => ({ label: r.name, stroke: COLORS[i], width: 1.5, points: { show: true } }))],
      legend: { live: false },
    },
    [xs, ...runs.map((r) => xs.map((i) => (r.run.levels[i - 1] ? r.run.levels[i - 1].summary.output_tokens_per_s : null)))],
    div,
  );
  const table = document.createElement("table");
  table.innerHTML =
    "<caption>Per level (ms; p50 / p99)</caption><thead><tr><th scope=col>run · level</th><th scope=col>ok / failed</th><th scope=col>out tok/s</th><th scope=col>req/s</th><th scope=col>goodput/s</th><th scope=col>TTFT p50</th><th scope=col>TTFT p99</th><th scope=col>TPOT p50</th><th scope=col>TPOT p99</th><th scope=col>ITL p99</th><th scope=col>E2E p50</th></tr></thead>";
  const tb = document.createElement("tbody");
  for (const l of levels) {
    const s = l.lv.summary;
    const tr = document.createElement("tr");
    const cells = [
      l.label,
      `${s.ok} / ${s.failed}`,
      s.output_tokens_per_s.toFixed(1),
      s.requests_per_s.toFixed(2),
      s.goodput_per_s != null ? s.goodput_per_s.toFixed(2) : "",
      fmt(s.ttft, "p50"),
      fmt(s.ttft, "p99"),
      fmt(s.tpot, "p50"),
      fmt(s.tpot, "p99"),
      fmt(s.itl, "p99"),
      fmt(s.e2e, "p50"),
    ];
    for (const c of cells) {
      const td = document.createElement("td");
      td.textContent = c;
      tr.append(td);
    }
    tb.append(tr);
  }
  table.append(tb);
  out.append(table);
}

async function load(files) {
  const runs = [];
  for (const f of [...files].slice(0, 2)) {
    try {
      const run = JSON.parse(await f.text());
      if (!Array.isArray(run.levels)) throw new Error("no levels: not a hasten bench --out file");
      runs.push({ name: f.name, run });
    } catch (e) {
      const p = document.createElement("p");
      p.className = "error";
      p.setAttribute("role", "alert");
      p.textContent = `${f.name}: ${e.message}`;
      $("bench-out").replaceChildren(p);
      return;
    }
  }
  if (runs.length) render(runs);
}

export function initBench() {
  const drop = $("drop");
  drop.addEventListener("dragover", (e) => {
    e.preventDefault();
    drop.classList.add("over");
  });
  drop.addEventListener("dragleave", () => drop.classList.remove("over"));
  drop.addEventListener("drop", (e) => {
    e.preventDefault();
    drop.classList.remove("over");
    load(e.dataTransfer.files);
  });
  $("bench-files").addEventListener("change", (e) => load(e.target.files));
}

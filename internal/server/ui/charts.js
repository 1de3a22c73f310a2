// Sluice dashboard charts: uPlot (vendored, ui/vendor/uplot, `make
// ui-vendor`), one per upstream and meaning, kept across refreshes and fed
// new data (setData). Time axes in local time; every series' unit in the
// legend and on the y axis.
"use strict";

const CLASS_COLORS = { critical: "#d64545", high: "#d69e2e", normal: "#3b6fd8", low: "#8a94a6" };
const CHART_CLASSES = ["critical", "high", "normal", "low"];
const DIM_UNITS = { requests: "req", input_tokens: "tok", output_tokens: "tok", tokens: "tok" };

// charts holds the live uPlot instances by id; exposed for the browser test.
const charts = new Map();
window.sluiceCharts = charts;

function fmtNum(v, digits) {
  if (v === null || v === undefined || Number.isNaN(v)) return "–";
  const a = Math.abs(v);
  if (a >= 1e6) return (v / 1e6).toFixed(1) + "M";
  if (a >= 1e4) return (v / 1e3).toFixed(1) + "k";
  return Number.isInteger(v) ? String(v) : v.toFixed(digits);
}

// unitValue formats a legend value with its unit.
function unitValue(unit, digits) {
  return (u, v) => (v === null || v === undefined ? "–" : fmtNum(v, digits) + " " + unit);
}

// chartSpecs are the charts of one upstream: title, y unit, series and how
// each series reads a history sample.
function chartSpecs(samples) {
  const specs = [
    { key: "queue", title: "Queue depth per class", unit: "req", digits: 0,
      series: CHART_CLASSES.map((c) => ({ label: c, stroke: CLASS_COLORS[c], get: (s) => s.queued[c] || 0 })) },
    { key: "rates", title: "Admitted and provider answers per second", unit: "req/s", digits: 2,
      series: [
        { label: "admitted", stroke: "#1f9d55", get: (s) => s.rates.admitted || 0 },
        { label: "provider 429", stroke: "#d69e2e", get: (s) => s.rates["429"] || 0 },
        { label: "provider 529", stroke: "#d64545", get: (s) => s.rates["529"] || 0 },
        { label: "shed by Sluice", stroke: "#6b3fa0", dash: [4, 3], get: (s) => s.rates.shed || 0 },
      ] },
    { key: "latency", title: "Latency p95 per class (time in the gateway)", unit: "s", digits: 2,
      series: CHART_CLASSES.map((c) => ({ label: c + " p95", stroke: CLASS_COLORS[c], get: (s) => (s.latency[c] ? s.latency[c].p95 : null) })) },
  ];
  const dims = new Set();
  for (const s of samples) for (const d of Object.keys(s.buckets || {})) dims.add(d);
  for (const d of [...dims].sort()) {
    const unit = DIM_UNITS[d] || "";
    specs.push({ key: "bucket-" + d, title: `Quota bucket: ${d}, available vs the provider's view`, unit, digits: 0,
      series: [
        { label: "available (Sluice)", stroke: "#3b6fd8", get: (s) => (s.buckets && s.buckets[d] ? s.buckets[d].available : null) },
        { label: "depth", stroke: "#8a94a6", dash: [2, 3], get: (s) => (s.buckets && s.buckets[d] ? s.buckets[d].depth : null) },
        { label: "provider reports left", stroke: "#1d2330", dash: [6, 3], points: true,
          get: (s) => (s.buckets && s.buckets[d] && s.buckets[d].provider_remaining !== undefined ? s.buckets[d].provider_remaining : null) },
      ] });
  }
  return specs;
}

// drawCharts draws (or feeds) the charts of upstream name into el from its
// history samples.
function drawCharts(name, el, samples) {
  const xs = samples.map((s) => new Date(s.time).getTime() / 1000);
  for (const spec of chartSpecs(samples)) {
    const id = name + "/" + spec.key;
    const data = [xs, ...spec.series.map((sr) => samples.map(sr.get))];
    let c = charts.get(id);
    if (!c || !el.contains(c.root)) {
      const box = document.createElement("div");
      box.className = "chart";
      box.dataset.chart = spec.key;
      box.innerHTML = `<h3></h3>`;
      box.querySelector("h3").textContent = `${spec.title} (${spec.unit})`;
      el.appendChild(box);
      const width = Math.max(Math.min(box.clientWidth || 460, 640), 320);
      const opts = {
        width, height: 170,
        scales: { x: { time: true } },
        axes: [
          { label: "time", stroke: "#6b7385", grid: { stroke: "#eef1f5" } },
          { label: spec.unit, stroke: "#6b7385", grid: { stroke: "#eef1f5" }, size: 60 },
        ],
        series: [
          { label: "time", value: (u, v) => (v === null ? "–" : new Date(v * 1000).toLocaleTimeString()) },
          ...spec.series.map((sr) => ({ label: `${sr.label} (${spec.unit})`, stroke: sr.stroke, width: 2, dash: sr.dash, spanGaps: false,
            points: { show: sr.points || samples.length < 3 }, value: unitValue(spec.unit, spec.digits) })),
        ],
        legend: { live: true },
      };
      // uPlot's y range needs a span: a flat zero series gets 0..1.
      opts.scales.y = { range: (u, min, max) => [Math.min(0, min ?? 0), Math.max(max ?? 1, spec.unit === "s" ? 0.1 : 1)] };
      c = new uPlot(opts, data, box);
      charts.set(id, c);
    } else {
      c.setData(data);
    }
    // Without the pointer over it, the legend shows the latest sample.
    if (xs.length && !(c.cursor.left >= 0)) c.setLegend({ idx: xs.length - 1 });
  }
}

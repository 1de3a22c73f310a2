// Sluice dashboard: polls /v1/status, /v1/status/history, /metrics and the
// jobs API. The charts are uPlot's (charts.js, vendored: works offline).
"use strict";

const POLL_MS = 2000;
const CLASSES = ["critical", "high", "normal", "low"];
const UNITS = { requests: "req", input_tokens: "tok", output_tokens: "tok", tokens: "tok" };

let key = localStorage.getItem("sluice-key") || "";
const $ = (sel) => document.querySelector(sel);

function esc(s) {
  return String(s ?? "").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
}
function num(v) {
  if (v === null || v === undefined) return "–";
  const a = Math.abs(v);
  if (a >= 1e6) return (v / 1e6).toFixed(1) + "M";
  if (a >= 1e4) return (v / 1e3).toFixed(1) + "k";
  return Number.isInteger(v) ? String(v) : v.toFixed(1);
}
function secs(v) {
  if (v === null || v === undefined) return "–";
  if (v < 1) return (v * 1000).toFixed(0) + " ms";
  if (v < 120) return v.toFixed(1) + " s";
  return (v / 60).toFixed(1) + " min";
}
function clock(t) { return t ? new Date(t).toLocaleTimeString() : "–"; }
function ago(t, now) { return t ? secs(Math.max((now - new Date(t)) / 1000, 0)) + " ago" : "–"; }

async function api(method, path, body) {
  const headers = {};
  if (key) headers["x-api-key"] = key;
  if (body !== undefined) headers["content-type"] = "application/json";
  const resp = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await resp.text();
  let data = null;
  try { data = JSON.parse(text); } catch (e) { data = text; }
  if (!resp.ok) {
    const msg = data && data.error ? (data.error.message || data.error) : text;
    throw new Error(method + " " + path + ": " + resp.status + " " + msg);
  }
  return data;
}

// parseMetrics sums sluice_requests_total per upstream and outcome.
function parseMetrics(text) {
  const out = {};
  for (const line of text.split("\n")) {
    if (!line.startsWith("sluice_requests_total{")) continue;
    const labels = line.slice(line.indexOf("{") + 1, line.lastIndexOf("}"));
    const value = parseFloat(line.slice(line.lastIndexOf(" ") + 1));
    const up = /upstream="([^"]*)"/.exec(labels), oc = /outcome="([^"]*)"/.exec(labels);
    if (!up) continue;
    const u = (out[up[1]] = out[up[1]] || { total: 0, success: 0 });
    u.total += value;
    if (oc && oc[1] === "success") u.success += value;
  }
  return out;
}

// gauge is one quota bucket: used (taken and not yet refilled, striped
// where requests in flight hold it) against the depth; available is the
// room now; the black tick is what the provider's headers last said was
// used (its limit minus its remaining).
function gauge(dim, b) {
  const depth = Math.max(b.depth, 1);
  const unit = UNITS[dim] || "";
  const used = Math.min(Math.max(b.used / depth, 0), 1) * 100;
  const reserved = Math.min(Math.max((b.reserved || 0) / depth, 0), 1) * 100;
  let prov = "";
  let provText = "";
  if (b.provider_remaining !== undefined && b.provider_remaining !== null) {
    const pl = b.provider_limit || b.limit_per_minute;
    const p = Math.min(Math.max(1 - b.provider_remaining / Math.max(pl, 1), 0), 1) * 100;
    prov = `<div class="prov" style="left:${p.toFixed(1)}%" title="the provider's last reported used"></div>`;
    provText = `; provider reports <span data-k="provider-${esc(dim)}">${num(b.provider_remaining)}</span> of ${num(pl)} ${unit} left`;
  }
  const urgent = Object.entries(b.urgent_room || {}).map(([c, r]) => `${c} ${num(r)}`).join(", ");
  const urgentText = urgent ? `; kept for more urgent classes (headroom): ${esc(urgent)} ${unit}` : "";
  return `<div class="gauge" data-k="gauge-${esc(dim)}"><div class="t"><b>${esc(dim)}</b>: used ${num(b.used)} ${unit} (reserved ${num(b.reserved || 0)}) of ${num(b.depth)} ${unit}, available <span data-k="available-${esc(dim)}">${num(b.level)}</span> ${unit}, limit <span data-k="limit-${esc(dim)}">${num(b.limit_per_minute)}</span> ${unit}/min${provText}${urgentText}</div><div class="bar"><div class="used" style="width:${used.toFixed(1)}%"></div><div class="reserved" style="width:${Math.min(reserved, used).toFixed(1)}%"></div>${prov}</div></div>`;
}

const GAUGE_KEY = `<div class="gauge-key" data-k="gauge-key"><span><i class="used"></i>used (taken, not yet refilled)</span><span><i class="reserved"></i>reserved by requests in flight</span><span><i class="prov"></i>provider's last reported used (its limit − its remaining)</span></div>`;

function waitingText(w, now) {
  if (!w) return `<span class="waiting none" data-k="waiting">nothing waits</span>`;
  let s = "waiting on " + w.reason.replace("_", " ");
  if (w.dimension) s += ": " + w.dimension;
  if (w.limit) s += ": " + w.limit;
  if (w.until) s += " until " + clock(w.until) + " (in " + secs(Math.max((new Date(w.until) - now) / 1000, 0)) + ")";
  if (w.key) s += " · key " + w.key;
  return `<span class="waiting" data-k="waiting">${esc(s)}</span>`;
}

function throttleText(label, t, now) {
  if (!t) return `<div class="throttle muted">${label}: none</div>`;
  let s = `${label}: ${ago(t.at, now)} (${t.status}${t.error_type ? " " + t.error_type : ""})`;
  if (t.retry_after_seconds !== undefined) s += ", hint " + secs(t.retry_after_seconds);
  if (t.message) s += " — " + t.message;
  return `<div class="throttle">${esc(s)}</div>`;
}

function stat(k, v, l) {
  return `<div class="stat"><div class="v" data-k="${esc(k)}">${esc(v)}</div><div class="l">${esc(l)}</div></div>`;
}

// upstreamInfo is an upstream card's text part (its charts are kept
// apart, charts.js).
function upstreamInfo(u, samples, counts, now) {
  const lat = CLASSES.map((c) => {
    const last = [...samples].reverse().find((s) => s.latency[c]);
    return last ? `${c}: p50 ${secs(last.latency[c].p50)}, p95 ${secs(last.latency[c].p95)}, p99 ${secs(last.latency[c].p99)}` : "";
  }).filter(Boolean).join(" · ");
  const queued = CLASSES.map((c) => stat(`queued-${c}`, String(u.queued[c] || 0), `queued ${c}` + (u.oldest_wait_seconds[c] ? ` (oldest ${secs(u.oldest_wait_seconds[c])})` : ""))).join("");
  const jobs = u.jobs ? stat("jobs-queued", String(u.jobs.queued), `jobs queued (${u.jobs.delayed} delayed)`) + stat("jobs-running", String(u.jobs.running), "jobs running") + stat("jobs-dead", String(u.jobs.dead) + (u.jobs.dead_capped ? "+" : ""), "jobs dead") : "";
  const m = counts || { total: 0, success: 0 };
  const gauges = Object.keys(u.buckets).sort().map((d) => gauge(d, u.buckets[d])).join("") || `<div class="muted">no quota limit known yet</div>`;
  const history = (u.breaker_history || []).slice(-8).reverse().map((e) => `<li>${esc(clock(e.at))}: ${esc(e.from)} → ${esc(e.to)} (${esc(e.cause)})</li>`).join("") || `<li class="muted">no change since start</li>`;
  const keys = (u.keys || []).length > 1 ? `<table><thead><tr><th>key</th><th>in flight</th><th>requests</th><th>429s</th><th>state</th></tr></thead><tbody>` +
    u.keys.map((k) => `<tr><td>${esc(k.key)}</td><td class="num">${k.in_flight}/${k.max_concurrency}</td><td class="num">${k.requests}</td><td class="num">${k.rate_limited}</td><td>${k.out ? "out: " + esc(k.out_reason) : k.paused_until ? "paused until " + esc(clock(k.paused_until)) : "in"}</td></tr>`).join("") + `</tbody></table>` : "";
  const open = (u.oldest_open_requests || []).length ? `<h3 style="font-size:13px;margin:10px 0 4px">Open requests: the oldest of ${u.open_requests}</h3><table class="open"><thead><tr><th>request</th><th>client</th><th>class</th><th>age</th></tr></thead><tbody>` +
    u.oldest_open_requests.slice(0, 5).map((o) => `<tr><td>${esc(o.id)}</td><td>${esc(o.client)}</td><td>${esc(o.priority)}</td><td class="num">${esc(secs(o.age_seconds))}</td></tr>`).join("") + `</tbody></table>` : "";
  return `<h2>${esc(u.name)} <span class="muted">${esc(u.protocol)}</span>
    <span class="badge ${esc(u.breaker)}" data-k="breaker">${esc(u.breaker)}${u.breaker_held ? " (held)" : ""}</span>
    ${waitingText(u.waiting_on, now)}
    <span style="margin-left:auto"></span>
    <button class="primary" data-action="breaker-reset" data-name="${esc(u.name)}">Reset breaker</button>
    <button class="danger" data-action="breaker-open" data-name="${esc(u.name)}">Hold breaker open</button>
  </h2>
  <div class="stats">
    ${stat("in-flight", String(u.in_flight), `in flight (limit ${u.concurrency_limit})`)}
    ${stat("open", String(u.open_requests), "open requests" + (u.oldest_open_requests && u.oldest_open_requests.length ? ` (oldest ${secs(u.oldest_open_requests[0].age_seconds)})` : ""))}
    ${queued}
    ${jobs}
    ${stat("requests-total", num(m.total), "requests (metrics)")}
    ${stat("requests-success", num(m.success), "succeeded (metrics)")}
  </div>
  <div class="grid">
    <div><h3 style="font-size:13px;margin:4px 0">Quota</h3>${gauges}${GAUGE_KEY}
      ${throttleText("last 429", u.last_429, now)}${throttleText("last 529", u.last_529, now)}
      <h3 style="font-size:13px;margin:8px 0 4px">Breaker history</h3><ul class="history">${history}</ul>${keys}</div>
    <div>${open}<div class="muted" style="font-size:12px;margin-top:6px" data-k="latency-last">${esc(lat ? "last interval: " + lat : "no request finished in the last interval")}</div></div>
  </div>`;
}

// renderUpstreams keeps one card per upstream: its text redrawn each
// refresh, its charts fed new data.
function renderUpstreams(status, history, counts, now) {
  const root = $("#upstreams");
  const names = status.upstreams.map((u) => u.name).join("\n");
  if (root.dataset.names !== names) {
    root.innerHTML = status.upstreams.map((u) => `<div class="card" data-upstream="${esc(u.name)}"><div class="info"></div><div class="charts"></div></div>`).join("");
    root.dataset.names = names;
  }
  for (const u of status.upstreams) {
    const card = root.querySelector(`[data-upstream="${CSS.escape(u.name)}"]`);
    const samples = history.upstreams[u.name] || [];
    card.querySelector(".info").innerHTML = upstreamInfo(u, samples, counts[u.name], now);
    drawCharts(u.name, card.querySelector(".charts"), samples);
  }
}

function usd(v) {
  if (v === null || v === undefined) return "–";
  return "$" + (Math.abs(v) >= 100 ? v.toFixed(0) : Math.abs(v) >= 1 ? v.toFixed(2) : v.toFixed(4));
}

// spendCell is one budget window: spent against the limit with what
// remains, or the spend alone when the window has no limit.
function spendCell(w, k) {
  if (w.limit_usd === undefined || w.limit_usd === null) {
    return `<td class="num" data-k="${k}"><span data-v="spent">${usd(w.spent_usd)}</span> <span class="muted">(no limit)</span></td>`;
  }
  const frac = w.limit_usd > 0 ? w.spent_usd / w.limit_usd : 1;
  const resets = w.resets_at ? `, resets ${clock(w.resets_at)}` : "";
  return `<td class="num" data-k="${k}"><span class="budget"><span class="${frac >= 1 ? "over" : ""}" style="width:${(Math.min(frac, 1) * 100).toFixed(0)}%"></span></span>` +
    `<span data-v="spent">${usd(w.spent_usd)}</span> of <span data-v="limit">${usd(w.limit_usd)}</span>, <span data-v="remaining">${usd(w.remaining_usd)}</span> left${esc(resets)}</td>`;
}

function renderSpend(spend) {
  const rows = ((spend && spend.clients) || []).map((c) => `<tr data-client="${esc(c.client)}"><td>${esc(c.client)}</td>${spendCell(c.day, "day")}${spendCell(c.month, "month")}${spendCell(c.total, "total")}<td class="num" data-k="reserved">${usd(c.reserved_usd)}</td></tr>`);
  renderTable("#spend", rows, "no client has a budget or has spent anything yet", 5);
}

// renderWaits lists what holds requests back now (each upstream's queue
// head, the clients held by their own limits) and every refusal and hold
// of the admission layer since start, with its reason.
// renderSavings shows per upstream what its work that could wait cost
// and saved since the gateway started (status's batch_route): the lines
// answered through the provider's Batch API at the batch price and the
// answers in OpenAI's flex tier at the flex price, against the standard
// price.
function renderSavings(status) {
  const rows = status.upstreams.filter((u) => u.batch_route).map((u) => {
    const r = u.batch_route;
    const v = (k, text) => `<td class="num" data-k="${k}">${esc(text)}</td>`;
    return `<tr data-upstream="${esc(u.name)}"><td>${esc(u.name)}</td>${v("lines", num(r.lines_succeeded))}${v("released", num(r.lines_released + r.lines_errored))}` +
      `${v("held", num(r.lines_held || 0))}${v("batch-cost", usd(r.spent_usd))}${v("flex-answers", num(r.flex_answers || 0))}${v("flex-cost", usd(r.flex_spent_usd || 0))}` +
      `${v("standard", usd(r.standard_usd + (r.flex_standard_usd || 0)))}${v("saved", usd(r.saved_usd))}</tr>`;
  });
  renderTable("#savings", rows, "nothing routed to a provider's Batch API or the flex tier yet", 9);
}

function renderWaits(status, now) {
  const rows = [];
  for (const u of status.upstreams) {
    if (u.waiting_on) {
      const w = u.waiting_on;
      let msg = "the head of the queue waits" + (w.dimension ? " for " + w.dimension : "") + (w.limit ? " on " + w.limit : "") + (w.until ? " until " + clock(w.until) : "") + (w.key ? " (key " + w.key + ")" : "");
      rows.push(`<tr data-kind="waiting"><td>now</td><td>waiting</td><td class="reason">${esc(w.reason)}</td><td class="muted">all</td><td>${esc(u.name)}</td><td class="num">${Object.values(u.queued).reduce((a, b) => a + b, 0)}</td><td>${esc(msg)}</td></tr>`);
    }
    for (const h of u.held_by_client_limit || []) {
      rows.push(`<tr data-kind="waiting"><td>now</td><td>waiting</td><td class="reason">client_limit</td><td>${esc(h.client)}</td><td>${esc(u.name)}</td><td class="num">${h.queued}</td><td>${esc(h.priority + ": " + h.limit + (h.until ? " until " + clock(h.until) : ""))}</td></tr>`);
    }
  }
  for (const e of status.admission || []) {
    rows.push(`<tr data-kind="${esc(e.kind)}" data-reason="${esc(e.reason)}" data-client="${esc(e.client)}"><td>${esc(ago(e.last_at, now))}</td><td>${esc(e.kind)}</td><td class="reason">${esc(e.reason)}</td><td>${esc(e.client)}</td><td>${esc(e.upstream)}</td><td class="num">${e.count}</td><td class="err">${esc(e.last_message)}</td></tr>`);
  }
  renderTable("#waits", rows, "nothing waits and nothing was refused", 7);
}

function renderTable(sel, rows, empty, cols) {
  $(sel + " tbody").innerHTML = rows.length ? rows.join("") : `<tr><td colspan="${cols}" class="muted">${esc(empty)}</td></tr>`;
}

async function refreshJobs(now) {
  let dead, live;
  try {
    dead = await api("GET", "/v1/jobs?state=dead&limit=50");
    const q = await api("GET", "/v1/jobs?state=queued&limit=50");
    const r = await api("GET", "/v1/jobs?state=running&limit=50");
    live = [...r.data, ...q.data];
  } catch (e) {
    renderTable("#dlq", [], "jobs unavailable: " + e.message, 6);
    renderTable("#jobs", [], "jobs unavailable", 8);
    return;
  }
  renderTable("#dlq", dead.data.map((j) => {
    const err = j.error ? `${j.error.status ? j.error.status + " " : ""}${j.error.type}: ${j.error.message}` : (j.errors && j.errors.length ? j.errors[j.errors.length - 1].message || "" : "");
    return `<tr data-job="${j.id}"><td>${j.id}</td><td>${esc(j.upstream)}</td><td class="num">${j.attempts}/${j.max_attempts}</td><td class="err">${esc(err)}</td><td>${esc(ago(j.finished_at || j.updated_at, now))}</td>
      <td><button class="primary" data-action="requeue" data-id="${j.id}">Requeue</button></td></tr>`;
  }), "empty: no dead job", 6);
  renderTable("#jobs", live.map((j) => `<tr data-job="${j.id}"><td>${j.id}</td><td>${esc(j.upstream)}</td><td>${esc(j.state)}</td><td>${esc(j.priority)}</td><td class="num">${j.attempts}/${j.max_attempts}</td><td>${esc(ago(j.created_at, now))}</td><td>${esc(j.batch_id || "")}</td>
      <td><button class="danger" data-action="cancel" data-id="${j.id}">Cancel</button></td></tr>`), "no job queued or running", 8);
  // The newest batches (the caller's own; every client's for an admin).
  const rows = [];
  let list = { data: [] };
  try { list = await api("GET", "/v1/batches?limit=20"); } catch (e) { /* shown above */ }
  for (const b of list.data) {
    const c = b.request_counts, total = b.total || 1;
    const done = c.succeeded + c.errored + c.canceled + c.expired;
    rows.push(`<tr data-batch="${esc(b.id)}"><td>${esc(b.id)}</td><td>${esc(b.processing_status)}</td><td><span class="progress"><span style="width:${((done / total) * 100).toFixed(0)}%"></span></span> ${done}/${b.total}</td><td class="num">${c.succeeded}</td><td class="num">${c.errored}</td><td class="num">${c.canceled}</td><td class="num">${b.total}</td></tr>`);
  }
  renderTable("#batches", rows, "no batch seen", 7);
}

// renderCluster shows the nodes sharing each upstream's quota (status's
// cluster section, absent on a single node): who holds which share, and
// whether this node runs on its 1/N fallback.
function renderCluster(c, now) {
  $("#cluster").hidden = !c;
  if (!c) return;
  $("#clusternode").textContent = `this node ${c.node}${c.leader ? " (leader)" : ""}` +
    (c.degraded ? ` · DEGRADED: shared store unreachable, on the 1/N fallback${c.last_error ? " (" + c.last_error + ")" : ""}` : "");
  const rows = [];
  for (const u of c.upstreams || []) {
    const flags = [u.fallback ? "fallback share" : "", u.breaker_shared ? "breaker shared" : "", u.probe ? "holds the probe" : ""].filter(Boolean).join(", ");
    for (const n of u.nodes || []) {
      const me = n.node === c.node;
      rows.push(`<tr data-upstream="${esc(u.name)}" data-node="${esc(n.node)}"${me ? ' class="me"' : ""}><td>${esc(u.name)}${me && flags ? ` <span class="muted">(${esc(flags)})</span>` : ""}</td><td>${esc(n.node)}${me ? " (this node)" : ""}</td>
        <td class="num">${(n.share * 100).toFixed(1)}%</td><td class="num">${n.slots}</td><td class="num">${num(n.demand)}</td><td>${esc(clock(n.expires_at))}</td></tr>`);
    }
  }
  renderTable("#clustershares", rows, "no upstream shared yet", 6);
}

async function refresh() {
  const now = new Date();
  try {
    const [status, history, metricsText] = await Promise.all([
      api("GET", "/v1/status"),
      api("GET", "/v1/status/history"),
      fetch("/metrics", { headers: key ? { "x-api-key": key } : {} }).then((r) => (r.ok ? r.text() : "")),
    ]);
    const counts = parseMetrics(metricsText);
    renderCluster(status.cluster, now);
    renderUpstreams(status, history, counts, now);
    renderSpend(status.spend);
    renderSavings(status);
    renderWaits(status, now);
    renderTable("#clients", (status.clients || []).map((c) => `<tr data-client="${esc(c.client)}"><td>${esc(c.client)}</td><td class="num">${c.requests}</td><td class="num">${c.succeeded}</td><td class="num">${c.failed}</td><td class="num">${num(c.tokens_in)}</td><td class="num">${num(c.tokens_out)}</td><td>${esc(ago(c.last_seen, now))}</td></tr>`), "no client yet", 7);
    $("#updated").textContent = "updated " + now.toLocaleTimeString();
    $("#error").hidden = true;
    await refreshJobs(now);
    document.body.dataset.ready = String(Number(document.body.dataset.ready || 0) + 1);
  } catch (e) {
    $("#error").textContent = e.message + (String(e.message).includes("401") ? " — enter a client key above" : "");
    $("#error").hidden = false;
  }
}

function notice(msg) {
  $("#notice").textContent = msg;
  $("#notice").hidden = false;
}

document.addEventListener("click", async (ev) => {
  const b = ev.target.closest("button[data-action]");
  if (!b) return;
  const act = b.dataset.action;
  try {
    if (act === "requeue") {
      await api("POST", `/v1/jobs/${b.dataset.id}/retry`);
      notice(`job ${b.dataset.id} requeued`);
    } else if (act === "cancel") {
      await api("POST", `/v1/jobs/${b.dataset.id}/cancel`);
      notice(`job ${b.dataset.id} canceled`);
    } else if (act === "breaker-reset" || act === "breaker-open") {
      const action = act === "breaker-reset" ? "reset" : "open";
      await api("POST", `/v1/upstreams/${encodeURIComponent(b.dataset.name)}/breaker`, { action });
      notice(`breaker of ${b.dataset.name}: ${action}`);
    }
  } catch (e) {
    $("#error").textContent = e.message + (/40[13]/.test(e.message) ? " — actions need an admin key" : "");
    $("#error").hidden = false;
  }
  refresh();
});

$("#keyform").addEventListener("submit", (ev) => {
  ev.preventDefault();
  key = $("#key").value.trim();
  localStorage.setItem("sluice-key", key);
  $("#keystate").textContent = key ? "key set" : "no key";
  refresh();
});
$("#keystate").textContent = key ? "key set" : "no key";

refresh();
setInterval(refresh, POLL_MS);

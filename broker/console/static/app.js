// kbroker console: polls /api/state twice a second and redraws each section from it (the console
// process itself looks at the cluster once a second; /api/state is served from its memory).
"use strict";

const POLL_MS = 500;
let state = null;
let lastOk = 0;

const $ = (id) => document.getElementById(id);
const esc = (v) => String(v ?? "").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
const num = (v) => (v === null || v === undefined ? "–" : Number(v).toLocaleString("en-US"));
const ago = (ms) => (ms === null || ms === undefined ? "–" : ms < 1000 ? `${ms} ms` : `${(ms / 1000).toFixed(1)} s`);
const time = (ms) => (ms ? new Date(ms).toISOString().replace("T", " ").replace("Z", "") : "–");
const badge = (text, kind) => `<span class="badge ${kind || ""}">${esc(text)}</span>`;
const STATUS_KIND = { online: "ok", unreachable: "bad", fenced: "warn", offline: "bad" };

function brokerStatus(id) {
  const b = (state.brokers || []).find((x) => x.id === id);
  return b ? b.status : "unknown";
}

function nodeRef(id) {
  if (id === null || id === undefined || id < 0) return `<span class="dead">none</span>`;
  const s = brokerStatus(id);
  return s === "online" ? `${id}` : `<span class="dead" title="${esc(s)}">${id}</span>`;
}

function renderHeader() {
  $("cluster").textContent = `${state.bootstrap.join(",")}  ·  via ${state.via || "–"}  ·  poll ${state.poll_ms} ms`;
  const errors = Object.entries(state.errors || {});
  $("errors").innerHTML = errors.map(([k, v]) => `<div>${esc(k)}: ${esc(v)}</div>`).join("");
}

function renderBrokers() {
  const rows = state.brokers.map((b) => `
    <tr data-broker="${b.id}" data-status="${esc(b.status)}" data-controller="${b.controller}">
      <td class="num">${b.id}</td>
      <td class="mono">${esc(b.host)}:${b.port}</td>
      <td>${esc(b.rack ?? "–")}</td>
      <td>${badge(b.status, STATUS_KIND[b.status])} ${b.fenced ? badge("fenced", "warn") : ""} ${b.controller ? badge("controller", "info") : ""}</td>
      <td class="num">${b.reachable ? `${b.latency_ms} ms` : `<span class="muted" title="${esc(b.error)}">–</span>`}</td>
    </tr>`).join("");
  $("brokers").innerHTML = `<table><thead><tr><th class="num">id</th><th>host:port</th><th>rack</th><th>state</th><th class="num">rtt</th></tr></thead><tbody>${rows}</tbody></table>`;
}

function renderQuorum() {
  const q = state.quorum;
  if (!q) { $("quorum").innerHTML = `<p class="muted">no answer from the quorum ${esc((state.errors || {}).quorum || "")}</p>`; return; }
  const row = (r) => `
    <tr data-replica="${r.id}" data-role="${r.role}">
      <td class="num">${r.id}</td><td>${r.role === "leader" ? badge("leader", "info") : esc(r.role)}</td>
      <td class="num">${num(r.log_end_offset)}</td><td class="num">${num(r.lag)}</td>
      <td class="num">${ago(r.last_fetch_ms_ago)}</td><td class="num">${ago(r.last_caught_up_ms_ago)}</td>
    </tr>`;
  $("quorum").innerHTML = `
    <p id="quorum-summary" data-leader="${q.leader_id}" data-epoch="${q.leader_epoch}">leader <b>${nodeRef(q.leader_id)}</b> · epoch <b>${q.leader_epoch}</b> · high watermark <b>${num(q.high_watermark)}</b></p>
    <table><thead><tr><th class="num">id</th><th>role</th><th class="num">log end</th><th class="num">lag</th><th class="num">last fetch</th><th class="num">caught up</th></tr></thead>
    <tbody>${q.voters.map(row).join("")}${q.observers.map(row).join("")}</tbody></table>`;
}

function renderEvents() {
  const events = (state.events || []).slice().reverse();
  $("events").innerHTML = events.length ? events.map((e) => `<li><span class="muted">${time(e.ms).slice(11, 19)}</span>${esc(e.text)}</li>`).join("") : `<li class="muted">none since the console started</li>`;
}

function replicaList(replicas, isr) {
  return replicas.map((r) => (isr.includes(r) ? nodeRef(r) : `<span class="gone" title="out of the ISR">${r}</span>`)).join(", ");
}

function renderTopics() {
  const showInternal = $("show-internal").checked;
  const topics = state.topics.filter((t) => showInternal || !t.internal);
  const hidden = state.topics.length - topics.length;
  $("topics").innerHTML = topics.map((t) => {
    const parts = t.partitions.map((p) => {
      const cls = p.leader < 0 ? "offline" : p.under_replicated ? "urp" : "";
      const mark = p.leader < 0 ? badge("offline", "bad") : (p.under_replicated ? badge("under-replicated", "warn") : "") + (p.leader_reachable ? "" : " " + badge("leader unreachable", "bad"));
      return `<tr class="${cls}" data-topic="${esc(t.name)}" data-partition="${p.partition}" data-leader="${p.leader}" data-isr="${p.isr.join(",")}" data-replicas="${p.replicas.join(",")}" data-under-replicated="${p.under_replicated}">
        <td class="num">${p.partition}</td><td>${nodeRef(p.leader)}</td><td class="num">${p.leader_epoch}</td>
        <td>${replicaList(p.replicas, p.isr)}</td><td>${p.isr.join(", ")}</td>
        <td class="num">${num(p.start_offset)}</td><td class="num">${num(p.end_offset)}</td><td>${mark}</td></tr>`;
    }).join("");
    const summary = (t.under_replicated ? badge(`${t.under_replicated} under-replicated`, "warn") : "") + (t.offline ? " " + badge(`${t.offline} offline`, "bad") : "");
    return `<h3>${esc(t.name)} <span class="muted">${t.partitions.length} partition${t.partitions.length === 1 ? "" : "s"}</span> ${summary}</h3>
      <table><thead><tr><th class="num">partition</th><th>leader</th><th class="num">epoch</th><th>replicas</th><th>ISR</th><th class="num">start</th><th class="num">end</th><th></th></tr></thead><tbody>${parts}</tbody></table>`;
  }).join("") + (hidden ? `<p class="muted">${hidden} internal topic${hidden === 1 ? "" : "s"} hidden</p>` : "") + (state.topics.length ? "" : `<p class="muted">no topics</p>`);
  const select = $("b-topic");
  const names = state.topics.map((t) => t.name);
  if (select.dataset.names !== names.join("\n")) {
    const chosen = select.value;
    select.innerHTML = names.map((n) => `<option${n === chosen ? " selected" : ""}>${esc(n)}</option>`).join("");
    select.dataset.names = names.join("\n");
  }
}

function lagChart(history) {
  const points = history.filter((h) => h[1] !== null);
  if (points.length < 2) return `<svg viewBox="0 0 300 90"><text class="axis" x="8" y="48">lag history appears after two looks</text></svg>`;
  const t0 = points[0][0], t1 = points[points.length - 1][0];
  const max = Math.max(1, ...points.map((p) => p[1]));
  const x = (t) => 30 + ((t - t0) / Math.max(1, t1 - t0)) * 262;
  const y = (v) => 80 - (v / max) * 70;
  const line = points.map((p) => `${x(p[0]).toFixed(1)},${y(p[1]).toFixed(1)}`).join(" ");
  return `<svg viewBox="0 0 300 90" preserveAspectRatio="none">
    <line x1="30" y1="80" x2="292" y2="80" stroke="#ccd2d8"/><line x1="30" y1="10" x2="30" y2="80" stroke="#ccd2d8"/>
    <text class="axis" x="2" y="14">${max}</text><text class="axis" x="2" y="82">0</text>
    <text class="axis" x="30" y="89">-${Math.round((t1 - t0) / 1000)} s</text><text class="axis" x="272" y="89">now</text>
    <polyline fill="none" stroke="#2f5fb3" stroke-width="1.6" points="${line}"/></svg>`;
}

function renderGroups() {
  if (!state.groups.length) { $("groups").innerHTML = `<p class="muted">no consumer groups</p>`; return; }
  $("groups").innerHTML = state.groups.map((g) => {
    const rows = g.partitions.map((p) => `<tr data-group="${esc(g.group_id)}" data-topic="${esc(p.topic)}" data-partition="${p.partition}" data-lag="${p.lag ?? ""}">
      <td>${esc(p.topic)}</td><td class="num">${p.partition}</td><td class="num">${num(p.committed)}</td><td class="num">${num(p.end)}</td><td class="num"><b>${num(p.lag)}</b></td><td class="mono">${esc(p.owner ?? "–")}</td></tr>`).join("");
    const members = g.members.length ? `${g.members.length} member${g.members.length === 1 ? "" : "s"}` : "no members";
    return `<div class="group" data-group-id="${esc(g.group_id)}" data-total-lag="${g.total_lag ?? ""}">
      <div><h3>${esc(g.group_id)} ${badge(g.type, "info")} ${badge(g.state, g.state === "Stable" ? "ok" : "")} <span class="muted">${members} · coordinator ${nodeRef(g.coordinator)} · total lag <b>${num(g.total_lag)}</b></span></h3>
      <table><thead><tr><th>topic</th><th class="num">partition</th><th class="num">committed</th><th class="num">end</th><th class="num">lag</th><th>owner</th></tr></thead><tbody>${rows || `<tr><td colspan="6" class="muted">no committed offsets</td></tr>`}</tbody></table></div>
      <div class="chart">${lagChart(g.lag_history || [])}</div></div>`;
  }).join("");
}

function renderTransactions() {
  const txns = state.transactions;
  if (!txns.length) { $("transactions").innerHTML = `<p class="muted">no transactional producers</p>`; return; }
  const flying = txns.filter((t) => t.in_flight).length;
  $("transactions").innerHTML = `<p>${flying} in flight, ${txns.length - flying} settled</p>
    <table><thead><tr><th>transactional id</th><th>state</th><th class="num">producer id</th><th class="num">epoch</th><th class="num">coordinator</th><th class="num">open for</th><th class="num">timeout</th><th>partitions</th></tr></thead><tbody>
    ${txns.map((t) => `<tr data-txn="${esc(t.transactional_id)}" data-state="${esc(t.state)}"><td class="mono">${esc(t.transactional_id)}</td><td>${badge(t.state, t.in_flight ? "warn" : "")}</td>
      <td class="num">${t.producer_id}</td><td class="num">${t.producer_epoch ?? "–"}</td><td class="num">${nodeRef(t.coordinator)}</td><td class="num">${ago(t.duration_ms)}</td><td class="num">${ago(t.timeout_ms)}</td>
      <td class="mono">${esc((t.partitions || []).join(", "))}</td></tr>`).join("")}</tbody></table>`;
}

function payload(v, format) {
  if (v === null || v === undefined) return `<span class="muted">null</span>`;
  const body = format === "hex" || v.text === null ? v.hex.replace(/(..)/g, "$1 ").trim() : v.text;
  return esc(body) + (v.truncated ? ` <span class="muted">… ${num(v.size)} bytes</span>` : "");
}

async function browse(event) {
  if (event) event.preventDefault();
  const params = new URLSearchParams({ topic: $("b-topic").value, partition: $("b-partition").value || "0", limit: $("b-limit").value || "20" });
  if ($("b-offset").value !== "") params.set("offset", $("b-offset").value);
  if ($("b-committed").checked) params.set("isolation", "read_committed");
  const format = $("b-format").value;
  $("messages").innerHTML = `<p class="muted">fetching…</p>`;
  try {
    const r = await fetch(`/api/messages?${params}`);
    const data = await r.json();
    if (data.error) { $("messages").innerHTML = `<p class="dead">${esc(data.error)}</p>`; return; }
    const rows = data.records.map((m) => m.control || m.error
      ? `<tr><td class="num">${m.offset}</td><td>${time(m.timestamp)}</td><td colspan="3" class="muted">${esc(m.control ? `${m.control} marker (producer ${m.producer_id})` : m.error)}</td></tr>`
      : `<tr data-offset="${m.offset}"><td class="num">${m.offset}</td><td>${time(m.timestamp)}</td><td class="payload">${payload(m.key, format)}</td><td class="payload">${payload(m.value, format)}</td>
         <td class="payload">${m.headers.map(([k, v]) => `${esc(k)}=${payload(v, format)}`).join("<br>")}</td></tr>`).join("");
    $("messages").innerHTML = `<p class="muted">${esc(data.topic)}-${data.partition} on broker ${data.leader} · offsets ${num(data.start_offset)} to ${num(data.end_offset)} · ${data.records.length} shown from ${num(data.from_offset)} (${data.isolation})</p>
      <table><thead><tr><th class="num">offset</th><th>timestamp (UTC)</th><th>key</th><th>value</th><th>headers</th></tr></thead><tbody>${rows || `<tr><td colspan="5" class="muted">no records there</td></tr>`}</tbody></table>`;
  } catch (e) {
    $("messages").innerHTML = `<p class="dead">${esc(e)}</p>`;
  }
}

function render() {
  renderHeader();
  renderBrokers();
  renderQuorum();
  renderEvents();
  renderTopics();
  renderGroups();
  renderTransactions();
}

async function poll() {
  try {
    const r = await fetch("/api/state", { cache: "no-store" });
    state = await r.json();
    lastOk = Date.now();
    if (state.version > 0) render();
  } catch (e) {
    // the console process is gone or restarting: keep the last picture, say so below
  }
  const fresh = $("freshness");
  if (!state || !state.version) { fresh.textContent = "connecting…"; fresh.className = "badge"; }
  else if (Date.now() - lastOk > 3000 || state.stale) { fresh.textContent = "stale"; fresh.className = "badge bad"; }
  else { fresh.textContent = `live · ${time(state.updated_ms).slice(11, 19)} UTC`; fresh.className = "badge ok"; }
  setTimeout(poll, POLL_MS);
}

$("browse").addEventListener("submit", browse);
$("show-internal").addEventListener("change", () => state && render());
poll();

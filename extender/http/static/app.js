// headroom's bill page: reads the audit API (/v1/...) with the audit token and draws
// chargeback, node cost, allocations and discrepancies. No framework, no build step.
"use strict";

const $ = (id) => document.getElementById(id);
const PAGE = 500; // allocations per request (the API's largest page)
const MAX_ALLOCATIONS = 2000; // shown at most; the CSV export has them all

function fragment() {
  const out = {};
  for (const part of location.hash.replace(/^#/, "").split("&")) {
    const [k, v] = part.split("=");
    if (k) out[decodeURIComponent(k)] = decodeURIComponent(v || "");
  }
  return out;
}

function token() {
  return sessionStorage.getItem("headroom-audit-token") || "";
}

async function api(path, params) {
  const url = path + "?" + new URLSearchParams(params).toString();
  const headers = token() ? { Authorization: "Bearer " + token() } : {};
  const r = await fetch(url, { headers, cache: "no-store" });
  if (r.status === 401) throw new AuthError();
  const body = await r.json().catch(() => ({}));
  if (!r.ok) throw new Error(`${path}: ${r.status} ${body.detail || ""}`.trim());
  return body;
}

class AuthError extends Error {
  constructor() {
    super("the audit API needs its token: paste it above (or open /ui#token=...)");
  }
}

function cell(row, text, attrs) {
  const td = document.createElement("td");
  td.textContent = text;
  for (const [k, v] of Object.entries(attrs || {})) td.setAttribute(k, v);
  row.appendChild(td);
  return td;
}

function fill(tableId, items, render) {
  const body = $(tableId).querySelector("tbody");
  body.replaceChildren();
  for (const item of items) {
    const tr = document.createElement("tr");
    render(tr, item);
    body.appendChild(tr);
  }
  if (!items.length) {
    const tr = document.createElement("tr");
    cell(tr, "none", { colspan: "8", class: "empty" });
    body.appendChild(tr);
  }
}

const money = (v) => (v === null || v === undefined ? "unpriced" : v);
// a rate, shown to 4 places (the ledger keeps it exact; amounts are the API's, as given)
const rate = (v) => (v === null || v === undefined ? "unpriced" : Number(v).toFixed(4));
const when = (t) => (t ? new Date(t * 1000).toISOString().replace(".000Z", "Z") : "");
const shown = (v) => (/^\d+(\.\d+)?$/.test(v) ? when(Number(v)) : v); // unix seconds as a date

function chart(groups) {
  const svg = $("chart");
  svg.replaceChildren();
  const priced = groups.filter((g) => g.cost !== null).slice(0, 20);
  const max = Math.max(0.01, ...priced.map((g) => Number(g.cost)));
  const bar = 22;
  svg.setAttribute("viewBox", `0 0 420 ${Math.max(1, priced.length) * bar + 4}`);
  priced.forEach((g, i) => {
    const ns = "http://www.w3.org/2000/svg";
    const y = i * bar + 2;
    const rect = document.createElementNS(ns, "rect");
    rect.setAttribute("x", "140");
    rect.setAttribute("y", String(y));
    rect.setAttribute("height", String(bar - 6));
    rect.setAttribute("width", String((Number(g.cost) / max) * 200));
    rect.setAttribute("data-key", g.key);
    const label = document.createElementNS(ns, "text");
    label.setAttribute("x", "136");
    label.setAttribute("y", String(y + bar - 10));
    label.setAttribute("text-anchor", "end");
    label.textContent = g.key.length > 22 ? g.key.slice(0, 21) + "…" : g.key;
    const value = document.createElementNS(ns, "text");
    value.setAttribute("x", String(146 + (Number(g.cost) / max) * 200));
    value.setAttribute("y", String(y + bar - 10));
    value.textContent = "$" + g.cost;
    svg.append(rect, label, value);
  });
}

async function allocations(from, to) {
  const items = [];
  let cursor = null;
  do {
    const params = { from, to, limit: String(PAGE) };
    if (cursor) params.cursor = cursor;
    const page = await api("/v1/allocations", params);
    items.push(...page.items);
    cursor = page.next_cursor;
  } while (cursor && items.length < MAX_ALLOCATIONS);
  return items;
}

async function show() {
  const group = $("group").value === "label" ? "label:" + $("label").value.trim() : $("group").value;
  const from = $("from").dataset.raw || $("from").value;
  const to = $("to").dataset.raw || $("to").value;
  $("error").hidden = true;
  $("status").textContent = "loading…";
  try {
    const bill = await api("/v1/chargeback", { from, to, group_by: group });
    $("group-head").textContent = group;
    fill("groups", bill.groups, (tr, g) => {
      tr.setAttribute("data-key", g.key);
      cell(tr, g.key);
      cell(tr, String(g.allocations));
      cell(tr, g.gib_hours, { "data-gib-hours": g.gib_hours });
      cell(tr, money(g.cost), { "data-cost": money(g.cost) });
      cell(tr, g.unpriced_gib_hours);
    });
    chart(bill.groups);
    fill("nodes", bill.nodes, (tr, n) => {
      tr.setAttribute("data-node", n.node);
      cell(tr, n.node);
      cell(tr, n.instance_type);
      cell(tr, n.capacity_type);
      cell(tr, n.gpu_hours);
      cell(tr, money(n.cost), { "data-cost": money(n.cost) });
      cell(tr, n.charged, { "data-charged": n.charged });
      cell(tr, money(n.idle), { "data-idle": money(n.idle) });
      cell(tr, [n.oversubscribed && "oversubscribed", n.unpriced && "unpriced"].filter(Boolean).join(", "));
    });
    $("totals").textContent =
      `charged $${bill.total_charged} + idle $${bill.total_idle} = node cost $${bill.total_node_cost}` +
      (bill.unpriced_nodes.length ? `, ${bill.unpriced_nodes.length} node(s) unpriced` : "");
    $("totals").dataset.charged = bill.total_charged;
    const allocs = await allocations(from, to);
    fill("allocations", allocs, (tr, a) => {
      tr.setAttribute("data-id", String(a.id));
      cell(tr, String(a.id));
      cell(tr, `${a.namespace}/${a.pod_name}`);
      cell(tr, a.node);
      cell(tr, a.gpu_uuid + (a.mig_profile ? ` (${a.mig_profile})` : ""), { "data-gpu": a.gpu_uuid });
      cell(tr, String(a.memory_mib));
      cell(tr, a.sharing);
      cell(tr, rate(a.price_per_hour), { title: money(a.price_per_hour) });
      cell(tr, a.status);
    });
    const disc = await api("/v1/discrepancies", { status: "all", limit: String(PAGE) });
    fill("discrepancies", disc.items, (tr, d) => {
      tr.setAttribute("data-kind", d.kind);
      cell(tr, d.kind);
      cell(tr, d.node);
      cell(tr, d.gpu_uuid);
      cell(tr, d.pod_uid);
      cell(tr, String(d.max_amount_mib));
      cell(tr, `${when(d.first_seen)} … ${when(d.last_seen)}`);
      cell(tr, d.detail);
    });
    $("status").textContent = `window ${shown(from)} … ${shown(to)}: ${bill.groups.length} group(s), ${allocs.length} allocation(s)`;
    $("status").dataset.ready = "1";
  } catch (e) {
    $("error").textContent = e.message;
    $("error").hidden = false;
    $("status").textContent = "";
    if (e instanceof AuthError) $("auth").hidden = false;
  }
}

function start() {
  const f = fragment();
  if (f.token) sessionStorage.setItem("headroom-audit-token", f.token);
  if (f.token) history.replaceState(null, "", location.pathname); // the token leaves the address bar
  const today = new Date();
  const first = new Date(Date.UTC(today.getUTCFullYear(), today.getUTCMonth(), 1));
  const tomorrow = new Date(today.getTime() + 86400000);
  const day = (d) => d.toISOString().slice(0, 10);
  for (const [id, fallback] of [["from", day(first)], ["to", day(tomorrow)]]) {
    const v = f[id] || fallback;
    if (/^\d{4}-\d{2}-\d{2}$/.test(v)) $(id).value = v;
    else $(id).dataset.raw = v; // unix seconds or a full timestamp: passed as given
  }
  if (f.group) {
    if (f.group.startsWith("label:")) {
      $("group").value = "label";
      $("label").value = f.group.slice(6);
      $("label").hidden = false;
    } else $("group").value = f.group;
  }
  $("group").addEventListener("change", () => ($("label").hidden = $("group").value !== "label"));
  $("window").addEventListener("submit", (ev) => {
    ev.preventDefault();
    delete $("from").dataset.raw;
    delete $("to").dataset.raw;
    show();
  });
  $("auth").addEventListener("submit", (ev) => {
    ev.preventDefault();
    sessionStorage.setItem("headroom-audit-token", $("token").value.trim());
    $("auth").hidden = true;
    show();
  });
  show();
}

document.addEventListener("DOMContentLoaded", start);

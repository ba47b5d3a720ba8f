// skewer's dashboard: one page, no framework, no build step. Every value from the server is
// put into the page as text (never as markup). Views re-fetch when the server says something
// changed (server-sent events); nothing polls.
"use strict";

const view = document.getElementById("view");
const counts = document.getElementById("counts");
const live = document.getElementById("live");
const state = { q: "", kind: "", status: "", page: 1, cluster: "", server: "" };

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

// Replaces the view; `parts` may nest arrays and hold nulls (left out).
function show(...parts) {
  view.replaceChildren(...parts.flat(Infinity).filter((p) => p !== null && p !== undefined && p !== ""));
}

async function api(path) {
  const r = await fetch(path, { credentials: "same-origin" });
  if (r.status === 401) { login(); throw new Error("unauthorized"); }
  if (!r.ok) throw new Error(await r.text());
  return r.json();
}

function login() {
  view.replaceChildren(el("div", { class: "card login" },
    el("h1", {}, "Sign in"),
    el("p", { class: "muted" }, "Paste a Kubernetes bearer token; you will see what it may read."),
    el("form", { onsubmit: (e) => {
      e.preventDefault();
      const t = e.target.querySelector("input").value.trim();
      document.cookie = "skewer-token=" + encodeURIComponent(t) + "; path=/; SameSite=Strict";
      location.reload();
    } }, el("input", { type: "password", placeholder: "token", autocomplete: "off" }), el("button", {}, "Sign in"))));
}

function tone(item) {
  if (item.ready === "True") return item.sync === "OutOfSync" ? "warn" : "ok";
  if (item.ready === "False") return "bad";
  if (item.ready === "Suspended") return "off";
  return "warn";
}

function readyLabel(item) {
  return { True: "Ready", False: "Failing", Suspended: "Suspended" }[item.ready] || "Unknown";
}

function healthTone(state) {
  if (state.startsWith("Current") || state === "Ready") return "ok";
  if (state.startsWith("Failed") || state.startsWith("NotReady") || state === "NotFound") return "bad";
  return "warn";
}

// `main@sha1:0123456789…` reads as `main@0123456`; the whole revision is in the title.
function shortRev(r) {
  const m = /^(.*?)(sha1|sha256):([0-9a-f]{7})[0-9a-f]*$/.exec(r || "");
  return m ? m[1] + m[3] : (r || "");
}

function link(item) {
  return "#/object/" + [item.kind, item.namespace, item.name].map(encodeURIComponent).join("/");
}

async function renderList() {
  const params = new URLSearchParams({ q: state.q, kind: state.kind, status: state.status, page: state.page,
    cluster: state.cluster, server: state.server });
  const page = await api("/api/list?" + params);
  counts.replaceChildren(
    el("span", { class: "pill ok" }, page.ready + " ready"),
    el("span", { class: "pill bad" }, page.failing + " failing"),
    el("span", { class: "pill off" }, page.suspended + " suspended"));
  const search = el("input", { type: "search", placeholder: "Search namespace, name, revision, message…", value: state.q,
    oninput: (e) => { state.q = e.target.value; state.page = 1; schedule(); } });
  const kinds = el("select", { onchange: (e) => { state.kind = e.target.value; state.page = 1; schedule(); } },
    ["", "Kustomization", "Application", "ApplicationSet", "GitRepository", "OCIRepository", "Provider"].map((k) =>
      el("option", k === state.kind ? { value: k, selected: "" } : { value: k }, k || "All kinds")));
  const filter = (value, label) => el("button", { "aria-pressed": String(state.status === value),
    onclick: () => { state.status = value; state.page = 1; schedule(); } }, label);
  const rows = page.items.map((i) => el("tr", { "data-name": i.namespace + "/" + i.name, "data-kind": i.kind, "data-ready": i.ready },
    el("td", {}, el("span", { class: "pill " + tone(i) }, readyLabel(i))),
    el("td", {}, el("div", { class: "kind" }, i.kind), el("a", { href: link(i) }, el("span", { class: "ns" }, i.namespace + "/"), i.name)),
    el("td", {}, i.sync ? el("span", { class: "pill " + (i.sync === "Synced" ? "ok" : "warn") }, i.sync) : "",
      i.health ? [" ", el("span", { class: "pill " + (i.health === "Healthy" ? "ok" : "warn") }, i.health)] : ""),
    el("td", { class: "mono", title: i.revision }, shortRev(i.revision)),
    el("td", { class: "muted" }, i.age),
    el("td", { class: "msg" }, i.message)));
  const active = document.activeElement === document.querySelector("input[type=search]");
  show(
    el("div", { class: "toolbar" }, search, kinds, filter("", "All"), filter("ready", "Ready"),
      filter("failing", "Failing"), filter("outofsync", "Out of sync"), filter("suspended", "Suspended")),
    el("table", {}, el("thead", {}, el("tr", {}, ["Status", "Name", "Sync", "Revision", "Age", "Message"].map((h) => el("th", {}, h)))),
      el("tbody", {}, rows.length ? rows : el("tr", {}, el("td", { colspan: "6", class: "muted" }, "Nothing matches.")))),
    el("div", { class: "pager" },
      el("button", { onclick: () => { state.page = Math.max(1, page.page - 1); schedule(); }, disabled: page.page <= 1 ? "" : null }, "‹"),
      `${page.total} · page ${page.page} of ${page.pages}`,
      el("button", { onclick: () => { state.page = page.page + 1; schedule(); } }, "›")));
  if (page.page >= page.pages) view.querySelector(".pager button:last-child").disabled = true;
  if (page.page <= 1) view.querySelector(".pager button").disabled = true;
  if (active) { const s = view.querySelector("input[type=search]"); s.focus(); s.setSelectionRange(s.value.length, s.value.length); }
}

function treeNode(n) {
  return el("li", { "data-object": n.object },
    el("span", { class: "dot " + healthTone(n.state) }),
    el("span", { class: "mono" }, n.object), " ",
    el("span", { class: "muted" }, n.state),
    n.origin ? el("span", { class: "origin mono", title: "file#document in the source" }, "← " + n.origin) : null,
    n.children && n.children.length ? el("ul", {}, n.children.map(treeNode)) : null);
}

async function renderObject(kind, ns, name) {
  const d = await api("/api/object/" + [kind, ns, name].map(encodeURIComponent).join("/"));
  const i = d.item;
  const facts = [["Kind", i.kind], ["Source", d.source], ["Applied revision", d.lastAppliedRevision], ["Commit", d.commit], ["Last sync", d.lastSync], ["Last delivery", d.lastDelivery],
    ["Last attempted", d.lastAttemptedRevision], ["Age", i.age]].filter(([, v]) => v);
  const meta = d.artifact ? Object.entries(d.artifact.metadata || {}) : [];
  if (d.artifact) facts.push(["Digest", d.artifact.digest]);
  show(
    el("p", {}, el("a", { href: "#/" }, "← all")),
    el("h1", {}, el("span", { class: "ns" }, ns + "/"), name, " ", el("span", { class: "pill " + tone(i), id: "state" }, readyLabel(i)),
      i.sync ? [" ", el("span", { class: "pill " + (i.sync === "Synced" ? "ok" : "warn") }, i.sync)] : "",
      i.health ? [" ", el("span", { class: "pill " + (i.health === "Healthy" ? "ok" : "warn") }, i.health)] : ""),
    el("p", { class: "msg" }, i.message),
    el("div", { class: "card" }, el("dl", {}, facts.concat(meta).map(([k, v]) => [el("dt", {}, k), el("dd", { class: "mono" }, v)]))),
    d.outOfSync.length ? [el("h2", {}, "Out of sync"), el("div", { class: "card" }, d.outOfSync.map((o) =>
      el("div", { class: "oos", "data-object": o.object },
        o.diff ? el("pre", { class: "diff mono" }, o.diff) : el("p", { class: "mono" }, o.object, el("span", { class: "muted" }, "  (no field-level diff available)")))))] : null,
    d.tree ? [el("h2", {}, "Objects"), el("div", { class: "card" }, el("ul", { class: "tree", id: "tree" }, (d.tree.children || []).map(treeNode)))] : null,
    el("h2", {}, "Conditions"),
    el("table", {}, el("tbody", {}, d.conditions.map((c) => el("tr", {},
      el("td", {}, c.type), el("td", {}, el("span", { class: "pill " + (c.status === "True" ? (c.type === "Stalled" || c.type === "Reconciling" ? "warn" : "ok") : "bad") }, c.status)),
      el("td", {}, c.reason), el("td", { class: "msg" }, c.message), el("td", { class: "muted" }, c.lastTransitionTime))))),
    d.history.length ? [el("h2", {}, "History"), el("table", { id: "history" }, el("thead", {}, el("tr", {}, ["ID", "Revision", "Deployed", "Outcome", "Message"].map((h) => el("th", {}, h)))),
      el("tbody", {}, d.history.slice().reverse().map((h) => el("tr", {},
        el("td", {}, String(h.id)), el("td", { class: "mono" }, h.revision), el("td", { class: "muted" }, h.deployedAt),
        el("td", {}, el("span", { class: "pill " + (h.outcome === "Succeeded" ? "ok" : "bad") }, h.outcome)), el("td", { class: "msg" }, h.message || "")))))] : null,
    el("h2", {}, "Events"),
    d.events.length ? el("table", {}, el("tbody", {}, d.events.slice(-20).reverse().map((e) => el("tr", {},
      el("td", { class: "muted" }, e.time), el("td", {}, el("span", { class: "pill " + (e.type === "Warning" ? "bad" : "ok") }, e.type)),
      el("td", {}, e.reason), el("td", { class: "msg" }, e.message))))) : el("p", { class: "muted" }, "No Events."));
}

async function renderClusters() {
  const rows = await api("/api/clusters");
  show(
    el("p", {}, el("a", { href: "#/" }, "← all")),
    el("h1", {}, "Clusters"),
    el("table", {}, el("thead", {}, el("tr", {}, ["Cluster", "Server", "Version", "Kustomizations", "Last error"].map((h) => el("th", {}, h)))),
      el("tbody", {}, rows.length ? rows.map((c) => el("tr", { "data-cluster": c.name },
        el("td", {}, el("span", { class: "pill " + (c.reachable ? "ok" : "bad") }, c.reachable ? "Reachable" : "Unreachable"), " ",
          el("a", { href: "#/cluster/" + encodeURIComponent(c.name) + "/" + encodeURIComponent(c.server) }, c.name),
          c.secret ? el("div", { class: "muted mono" }, c.secret) : null),
        el("td", { class: "mono" }, c.server), el("td", {}, c.version || "—"),
        el("td", {}, String(c.kustomizations)), el("td", { class: "msg" }, c.lastError || "")))
        : el("tr", {}, el("td", { colspan: "5", class: "muted" }, "No clusters you may see.")))));
}

async function render() {
  const parts = location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
  try {
    if (parts[0] === "object" && parts.length === 4) await renderObject(parts[1], parts[2], parts[3]);
    else if (parts[0] === "clusters") await renderClusters();
    else if (parts[0] === "cluster" && parts.length >= 2) {
      // One cluster: the list, of what applies to it.
      state.cluster = parts[1]; state.server = parts[2] || "";
      await renderList();
      view.prepend(el("h1", {}, "Cluster ", el("span", { class: "mono" }, state.cluster),
        state.server ? el("span", { class: "muted mono" }, "  " + state.server) : null));
    } else {
      state.cluster = ""; state.server = "";
      await renderList();
    }
    document.body.dataset.rendered = String(Date.now());
  } catch (e) {
    if (e.message !== "unauthorized") view.replaceChildren(el("p", { class: "muted" }, "Could not load: " + e.message));
  }
}

let timer = null;
function schedule() {
  if (timer) return;
  timer = setTimeout(() => { timer = null; render(); }, 50);
}

function connect() {
  const events = new EventSource("/api/stream");
  events.addEventListener("open", () => live.classList.add("on"));
  events.addEventListener("changed", schedule);
  events.addEventListener("error", () => live.classList.remove("on"));
}

window.addEventListener("hashchange", schedule);
render();
connect();

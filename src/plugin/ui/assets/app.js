// confighistory's web view (docs/plugin.md "Web view"). Plain JS, no library, nothing loaded
// from elsewhere. Every text shown comes from the cluster (names, keys, values, authors): it is
// only ever put in the page as text (textContent, text nodes, attribute values set through the
// DOM), never parsed as HTML.
"use strict";

const state = { ns: "", tab: "workloads", items: [], next: null, selected: null };

// An element: el("td", {className: "x"}, "text", child, ...). Strings become text nodes.
function el(tag, props, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (k === "dataset") Object.assign(e.dataset, v);
    else if (k === "onclick") e.addEventListener("click", v);
    else e[k] = v;
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    e.append(typeof c === "string" || typeof c === "number" ? document.createTextNode(String(c)) : c);
  }
  return e;
}

const SVG = "http://www.w3.org/2000/svg";
function svg(tag, attrs, text) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
  if (text !== undefined) e.textContent = text;
  return e;
}

const $ = (id) => document.getElementById(id);

async function api(path) {
  const r = await fetch(path, { headers: { Accept: "application/json" } });
  let body = null;
  try { body = await r.json(); } catch (_) { /* not JSON */ }
  if (!r.ok) throw new Error((body && body.error) || ("HTTP " + r.status));
  return body;
}

const nsPath = () => "/api/namespaces/" + encodeURIComponent(state.ns);

function showError(where, e) {
  where.replaceChildren(el("p", { className: "error" }, String(e.message || e)));
}

function ago(ts) {
  if (!ts) return "";
  const s = (Date.now() - Date.parse(ts)) / 1000;
  if (!(s >= 0)) return ts;
  if (s < 90) return Math.round(s) + "s ago";
  if (s < 5400) return Math.round(s / 60) + "m ago";
  if (s < 129600) return Math.round(s / 3600) + "h ago";
  return Math.round(s / 86400) + "d ago";
}

function short(s, n) { s = String(s || ""); return s.length > n ? s.slice(0, n - 1) + "\u2026" : s; }

// ---- namespaces and the list -------------------------------------------------------------

async function loadNamespaces() {
  const sel = $("namespace");
  try {
    const r = await api("/api/namespaces");
    sel.replaceChildren(...r.namespaces.map((n) => el("option", { value: n, selected: n === r.current }, n)));
    if (r.unlistable) $("note").textContent = r.unlistable;
    state.ns = r.current;
    loadList();
  } catch (e) {
    showError($("view"), e);
  }
}

function setTab(tab) {
  state.tab = tab;
  $("tab-workloads").classList.toggle("active", tab === "workloads");
  $("tab-sources").classList.toggle("active", tab === "sources");
  loadList();
}

async function loadList(more) {
  const list = $("list");
  if (!more) { state.items = []; state.next = null; list.replaceChildren(); }
  $("more").hidden = true;
  try {
    if (state.tab === "workloads") {
      let q = "?limit=200";
      if (more && state.next) q += "&continue=" + encodeURIComponent(state.next);
      const r = await api(nsPath() + "/workloads" + q);
      state.items.push(...r.workloads.map((w) => ({ kind: w.kind, name: w.name })));
      state.next = r.continue || null;
    } else {
      const r = await api(nsPath() + "/sources");
      state.items = r.sources.map((s) => ({ source: s.name, snapshots: s.snapshots, exists: s.exists }));
      if (r.secretsUnreadable) $("note").textContent = r.secretsUnreadable;
    }
    renderList();
  } catch (e) {
    showError(list, e);
  }
}

function renderList() {
  const f = $("filter").value.toLowerCase();
  const rows = [];
  for (const it of state.items) {
    const label = it.source !== undefined ? it.source : it.kind + "/" + it.name;
    if (f && !label.toLowerCase().includes(f)) continue;
    let b;
    if (it.source !== undefined) {
      b = el("button", { className: "source", type: "button", dataset: { source: it.source }, onclick: () => showSource(it.source, b) },
        it.source, el("span", { className: "kind" }, " " + it.snapshots + (it.snapshots === 1 ? " snapshot" : " snapshots") + (it.exists ? "" : ", deleted")));
    } else {
      b = el("button", { className: "workload", type: "button", dataset: { kind: it.kind, name: it.name }, onclick: () => showWorkload(it.kind, it.name, b) },
        el("span", { className: "kind" }, it.kind), it.name);
    }
    rows.push(el("li", {}, b));
  }
  $("list").replaceChildren(...rows);
  if (!rows.length) $("list").append(el("li", { className: "muted" }, state.items.length ? "nothing matches" : "none"));
  $("more").hidden = !state.next;
}

function select(button) {
  if (state.selected) state.selected.classList.remove("selected");
  state.selected = button;
  if (button) button.classList.add("selected");
}

// ---- a workload's timeline ---------------------------------------------------------------

async function showWorkload(kind, name, button) {
  select(button);
  const view = $("view");
  view.replaceChildren(el("h2", {}, kind.toLowerCase() + "/" + name), el("p", { className: "muted" }, "loading\u2026"));
  const base = nsPath() + "/workloads/" + encodeURIComponent(kind) + "/" + encodeURIComponent(name);
  let t;
  try {
    t = await api(base + "/timeline");
  } catch (e) {
    showError(view, e);
    return;
  }
  const revs = t.revisions || [];
  const pick = { a: null, b: null };
  const running = revs.findIndex((r) => r.running);
  if (revs.length >= 2) {
    const bi = running >= 1 ? running : revs.length - 1;
    pick.a = revs[bi - 1].revision;
    pick.b = revs[bi].revision;
  }
  const out = $("view");
  const diffBox = el("div", { id: "diff" });
  const picture = el("div", { className: "picture" });
  const cards = el("div", { className: "revisions" });
  const compare = el("button", { id: "compare", type: "button" }, "Compare");
  const pickedText = el("span", { className: "muted" });
  const redraw = () => {
    picture.replaceChildren(timelinePicture(revs, pick, redraw));
    cards.replaceChildren(...revs.map((r) => revisionCard(r, pick, redraw)));
    pickedText.textContent = pick.a !== null && pick.b !== null ? "revision " + pick.a + " \u2192 revision " + pick.b : "pick two revisions (A and B)";
    compare.disabled = pick.a === null || pick.b === null;
  };
  compare.addEventListener("click", async () => {
    diffBox.replaceChildren(el("p", { className: "muted" }, "loading\u2026"));
    try {
      const d = await api(base + "/diff?a=" + encodeURIComponent(pick.a) + "&b=" + encodeURIComponent(pick.b));
      renderRevisionDiff(diffBox, d);
    } catch (e) {
      showError(diffBox, e);
    }
  });
  const notes = [];
  if (t.secretsUnreadable) notes.push(el("p", { className: "note" }, t.secretsUnreadable));
  if (t.held && t.held.length) notes.push(el("p", {}, "Held (an undo's pin, propagation skips it): " + t.held.join(", ")));
  out.replaceChildren(
    el("h2", {}, kind.toLowerCase() + "/" + name),
    el("div", { className: "legend" }, el("span", { className: "l-image" }, "image changed"), el("span", { className: "l-config" }, "config changed (or new)"), el("span", { className: "l-running" }, "running")),
    picture,
    ...notes,
    revs.length ? cards : el("p", { className: "muted" }, "no rollout revisions"),
    el("div", { className: "actions" }, compare, pickedText),
    diffBox,
  );
  redraw();
}

function authorsOf(r) {
  const a = (r.authors || []).slice();
  if (r.authorUnknown) a.push("(" + r.authorUnknown + ")");
  return a.join(", ");
}

// The revisions on a line, oldest left: image changes (blue) and config changes (orange) marked
// above each, the running revision filled, author and time below. Click a node to pick it.
function timelinePicture(revs, pick, redraw) {
  const step = 150, left = 60;
  const width = Math.max(600, left * 2 + step * Math.max(revs.length - 1, 0));
  const g = svg("svg", { class: "timeline", width, height: 150, viewBox: "0 0 " + width + " 150", role: "img" });
  g.append(svg("title", {}, "rollout revisions, oldest left"));
  if (revs.length > 1) g.append(svg("line", { class: "axis", x1: left, y1: 60, x2: left + step * (revs.length - 1), y2: 60 }));
  revs.forEach((r, i) => {
    const x = left + step * i;
    const imageChanged = (r.images || []).some((im) => im.changed);
    const configChanged = (r.config || []).some((c) => c.changed) && !r.configUnchanged;
    if (imageChanged) g.append(svg("rect", { class: "mark-image", x: x - 14, y: 24, width: 12, height: 12 }, undefined));
    if (configChanged) g.append(svg("rect", { class: "mark-config", x: x + 2, y: 24, width: 12, height: 12 }));
    const picked = r.revision === pick.a || r.revision === pick.b;
    const node = svg("circle", { class: "node" + (r.running ? " running" : "") + (picked ? " picked" : ""), cx: x, cy: 60, r: 11, "data-revision": r.revision });
    node.append(svg("title", {}, "revision " + r.revision + " (click to compare)"));
    node.addEventListener("click", () => { pickNext(pick, r.revision); redraw(); });
    g.append(node);
    g.append(svg("text", { x, y: 16, "text-anchor": "middle", class: "badge" }, r.running ? (r.held ? "running, held" : "running") : ""));
    g.append(svg("text", { x, y: 92, "text-anchor": "middle" }, "rev " + r.revision));
    const img = (r.images || []).map((im) => im.image.split("/").pop()).join(", ");
    g.append(svg("text", { x, y: 108, "text-anchor": "middle", class: "small" }, short(img, 24)));
    g.append(svg("text", { x, y: 124, "text-anchor": "middle", class: "small" }, short(authorsOf(r), 24)));
    g.append(svg("text", { x, y: 140, "text-anchor": "middle", class: "small" }, ago(r.created)));
  });
  return g;
}

// Clicking picks A, then B, then starts over; A is always the older.
function pickNext(pick, rev) {
  if (pick.a === null || (pick.a !== null && pick.b !== null)) { pick.a = rev; pick.b = null; return; }
  if (rev === pick.a) return;
  pick.b = rev;
  if (pick.b < pick.a) [pick.a, pick.b] = [pick.b, pick.a];
}

function revisionCard(r, pick, redraw) {
  const badges = [];
  if (r.running) badges.push(el("span", { className: "badge" }, "running"));
  if (r.held) badges.push(el("span", { className: "badge held" }, "held"));
  const images = el("dd", { className: "images" }, ...(r.images || []).map((im, i) => el("span", { className: im.changed ? "image changed" : "image" }, (i ? ", " : "") + im.image)));
  const config = el("dd", { className: "config" }, ...(r.config || []).map((c, i) => el("span", { className: c.changed ? "source changed" : "source", title: (c.snapshot || c.reference) + (c.held ? " (held)" : "") },
    (i ? ", " : "") + c.source + (c.changedKeys && c.changedKeys.length ? " (" + c.changedKeys.join(", ") + ")" : ""))));
  const button = (side) => el("button", { type: "button", className: "pick-" + side + (pick[side] === r.revision ? " on" : ""),
    onclick: () => { pick[side] = r.revision; if (pick.a !== null && pick.b !== null && pick.a > pick.b) [pick.a, pick.b] = [pick.b, pick.a]; redraw(); } }, side.toUpperCase());
  return el("div", { className: "revision" + (r.running ? " running" : ""), dataset: { revision: String(r.revision) } },
    el("h4", {}, "Revision " + r.revision, ...badges),
    el("dl", {},
      el("dt", {}, "image"), images,
      el("dt", {}, "config"), config,
      el("dt", {}, "by"), el("dd", { className: "authors" }, authorsOf(r) || "\u2014"),
      el("dt", {}, "when"), el("dd", { className: "created", title: r.created || "" }, ago(r.created) || "\u2014"),
      r.cause ? el("dt", {}, "cause") : null, r.cause ? el("dd", { className: "cause" }, r.cause) : null),
    el("div", { className: "pick" }, button("a"), button("b")));
}

// `diff WORKLOAD --from-revision A --to-revision B`: images, then each source's content.
function renderRevisionDiff(box, d) {
  const name = (r) => (r === null || r === undefined ? "live template" : "revision " + r);
  const parts = [el("h3", {}, name(d.from) + " \u2192 " + name(d.to))];
  const images = el("table", { className: "sxs images-diff" }, el("tr", {}, el("th", {}, "container"), el("th", {}, name(d.from)), el("th", {}, name(d.to))));
  for (const im of d.images) {
    images.append(el("tr", { className: im.changed ? "image changed" : "image" }, el("td", {}, im.container),
      el("td", { className: im.changed ? "del" : "" }, im.from || "\u2014"), el("td", { className: im.changed ? "add" : "" }, im.to || "\u2014")));
  }
  parts.push(images);
  for (const s of d.sources) {
    if (s.diff) parts.push(sourceDiff(s.diff));
    else parts.push(el("div", { className: "source-diff", dataset: { source: s.source } }, el("h3", {}, s.source),
      el("p", { className: "note" }, (s.from || "not referenced") + " \u2192 " + (s.to || "not referenced") + (s.unknown ? ": " + s.unknown : ""))));
  }
  if (!d.sources.length) parts.push(el("p", { className: "muted" }, "no versioned source in either revision"));
  box.replaceChildren(...parts);
}

// ---- a source's snapshot history -----------------------------------------------------------

async function showSource(source, button) {
  select(button);
  const view = $("view");
  view.replaceChildren(el("h2", {}, source), el("p", { className: "muted" }, "loading\u2026"));
  let h;
  try {
    h = await api(nsPath() + "/history?source=" + encodeURIComponent(source));
  } catch (e) {
    showError(view, e);
    return;
  }
  const pick = { a: h.snapshots.length > 1 ? h.snapshots[1].revision : null, b: h.snapshots.length ? h.snapshots[0].revision : null };
  const table = el("table", { className: "history" });
  const diffBox = el("div", { id: "diff" });
  const compare = el("button", { id: "compare", type: "button" }, "Compare");
  const redraw = () => {
    table.replaceChildren(el("tr", {}, ...["rev", "snapshot", "created", "size", "changes", "used by", "A", "B"].map((c) => el("th", {}, c))),
      ...h.snapshots.map((s) => {
        const changes = [];
        if (s.added.length) changes.push("+" + s.added.join(", +"));
        if (s.removed.length) changes.push("\u2212" + s.removed.join(", \u2212"));
        if (s.changed.length) changes.push("~" + s.changed.join(", ~"));
        const used = s.usedBy.map((u) => u.workload.kind.toLowerCase() + "/" + u.workload.name + (u.revisions.length ? " @" + u.revisions.join(",") : "") + (u.current ? " (live)" : ""));
        const radio = (side) => el("td", {}, el("button", { type: "button", className: "pick-" + side + (pick[side] === s.revision ? " on" : ""),
          onclick: () => { pick[side] = s.revision; redraw(); } }, side.toUpperCase()));
        return el("tr", { className: s.head ? "snapshot head" : "snapshot", dataset: { revision: String(s.revision) } },
          el("td", {}, String(s.revision) + (s.head ? " head" : "")), el("td", { title: s.hash }, s.name), el("td", { title: s.created || "" }, ago(s.created)),
          el("td", {}, s.size + " B"), el("td", {}, changes.join("; ")), el("td", {}, used.join(", ")), radio("a"), radio("b"));
      }));
    compare.disabled = pick.a === null || pick.b === null;
  };
  compare.addEventListener("click", async () => {
    diffBox.replaceChildren(el("p", { className: "muted" }, "loading\u2026"));
    try {
      const d = await api(nsPath() + "/diff?source=" + encodeURIComponent(source) + "&a=" + encodeURIComponent(pick.a) + "&b=" + encodeURIComponent(pick.b));
      diffBox.replaceChildren(sourceDiff(d));
    } catch (e) {
      showError(diffBox, e);
    }
  });
  const notes = [];
  if (!h.sourceExists) notes.push(el("p", { className: "note" }, "The source was deleted: its snapshots live while something references them."));
  if (h.serverConfigUnavailable) notes.push(el("p", { className: "note" }, h.serverConfigUnavailable));
  view.replaceChildren(el("h2", {}, h.source + " (" + h.sourceKind + ")"), ...notes, table, el("div", { className: "actions" }, compare), diffBox);
  redraw();
}

// ---- diffs, side by side -------------------------------------------------------------------

function sourceDiff(d) {
  const side = (s) => (s.revision ? "revision " + s.revision + ", " : "") + s.name + (s.head ? ", head" : "");
  const box = el("div", { className: "source-diff", dataset: { source: d.source } },
    el("h3", {}, d.source + ": " + side(d.from) + " \u2192 " + side(d.to)));
  if (d.sourceKind === "Secret") box.append(el("p", { className: "muted" }, "A Secret: keys and sizes only, its values are never shown here."));
  if (d.typeChanged) box.append(el("p", {}, "type: " + d.typeChanged.from + " \u2192 " + d.typeChanged.to));
  if (!d.keys.length && !d.typeChanged) box.append(el("p", { className: "muted unchanged" }, "same content"));
  if (d.unchanged.length) box.append(el("p", { className: "muted" }, "unchanged: " + d.unchanged.join(", ")));
  for (const k of d.keys) {
    const sizes = [k.oldSize, k.newSize].filter((x) => x !== null && x !== undefined).map((x) => x + " B").join(" \u2192 ");
    const kd = el("div", { className: "key-diff " + k.change, dataset: { key: k.key } }, el("span", { className: "key" }, k.key), " (" + k.change + (sizes ? ", " + sizes : "") + ")");
    if (k.hidden) kd.append(el("p", { className: "muted" }, "value differs (hidden)"));
    else if (k.binary) kd.append(el("p", { className: "muted" }, "binary value differs"));
    else kd.append(sideBySide(k.hunks));
    box.append(kd);
  }
  return box;
}

// Hunks of a unified diff as two columns: removed lines left, added right, paired in order.
function sideBySide(hunks) {
  const t = el("table", { className: "sxs" }, el("colgroup", {}, el("col", { className: "num" }), el("col"), el("col", { className: "num" }), el("col")));
  for (const h of hunks) {
    t.append(el("tr", { className: "hunk" }, el("td", { colSpan: 4 }, "@@ -" + h.oldStart + "," + h.oldLines + " +" + h.newStart + "," + h.newLines + " @@")));
    let o = h.oldStart, n = h.newStart;
    let dels = [], adds = [];
    const flush = () => {
      for (let i = 0; i < Math.max(dels.length, adds.length); i++) {
        const a = dels[i], b = adds[i];
        t.append(el("tr", {},
          el("td", { className: "num" }, a !== undefined ? String(o++) : ""), el("td", { className: a !== undefined ? "old del" : "old" }, a !== undefined ? a : ""),
          el("td", { className: "num" }, b !== undefined ? String(n++) : ""), el("td", { className: b !== undefined ? "new add" : "new" }, b !== undefined ? b : "")));
      }
      dels = []; adds = [];
    };
    for (const line of h.lines) {
      const mark = line.charAt(0), text = line.slice(1);
      if (mark === "-") dels.push(text);
      else if (mark === "+") adds.push(text);
      else {
        flush();
        t.append(el("tr", {}, el("td", { className: "num" }, String(o++)), el("td", { className: "old" }, text), el("td", { className: "num" }, String(n++)), el("td", { className: "new" }, text)));
      }
    }
    flush();
  }
  return t;
}

// ---- wiring --------------------------------------------------------------------------------

document.addEventListener("DOMContentLoaded", () => {
  $("namespace").addEventListener("change", (e) => { state.ns = e.target.value; $("note").textContent = ""; $("view").replaceChildren(el("p", { className: "hint" }, "Pick a workload or a source.")); loadList(); });
  $("tab-workloads").addEventListener("click", () => setTab("workloads"));
  $("tab-sources").addEventListener("click", () => setTab("sources"));
  $("filter").addEventListener("input", renderList);
  $("more").addEventListener("click", () => loadList(true));
  loadNamespaces();
});

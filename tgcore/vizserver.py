"""``tg viz serve``: a local page over a rewrite trace (``VIZ=1``) and, optionally, a profile (``PROFILE=1``).

In:  a trace file (``tgcore.uop.trace``'s format) and a profile file (``tgcore.engine.profile``'s format).
Out: an HTTP server on 127.0.0.1 (default port 8001): ``/`` is the page (one HTML file, no external script, font or
     stylesheet), ``/api/trace`` and ``/api/profile`` the files' JSON. The page lists kernels (with a filter), each
     kernel's passes with the rules that fired, the graph before or after a pass (drawn in SVG, layered from the
     leaves), the generated code, and the profile's timeline.
"""
from __future__ import annotations

import http.server
import json
import pathlib
import threading
from typing import Any

from tgcore.uop.trace import FORMAT as TRACE_FORMAT
from tgcore.uop.trace import VERSION as TRACE_VERSION

DEFAULT_PORT = 8001


class TraceError(Exception):
    """A trace file that cannot be shown (missing, not JSON, another format)."""


def load_trace(path: str | pathlib.Path) -> dict[str, Any]:
    from tgcore.viz import load_document
    return load_document(path, TRACE_FORMAT, TRACE_VERSION, "rewrite trace", TraceError, "record one with VIZ=1")


def make_server(trace: dict[str, Any], profile: dict[str, Any] | None, port: int = DEFAULT_PORT
                ) -> http.server.ThreadingHTTPServer:
    """The server (not started: call ``serve_forever``); ``port=0`` picks a free port (``server.server_port``)."""
    bodies = {"/": (PAGE.encode(), "text/html; charset=utf-8"),
              "/api/trace": (json.dumps(trace).encode(), "application/json")}
    if profile is not None:
        bodies["/api/profile"] = (json.dumps(profile).encode(), "application/json")

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (the name http.server calls)
            path = self.path.split("?", 1)[0]
            if path not in bodies:
                body, kind, status = json.dumps({"error": f"no such page: {path}"}).encode(), "application/json", 404
            else:
                (body, kind), status = bodies[path], 200
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # quiet: the page polls nothing, logs help nobody
            pass

    return http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)


def serve_in_thread(trace: dict[str, Any], profile: dict[str, Any] | None, port: int = 0
                    ) -> http.server.ThreadingHTTPServer:
    """A started server on a daemon thread (tests): ``server.shutdown()`` stops it."""
    server = make_server(trace, profile, port)
    threading.Thread(target=server.serve_forever, daemon=True, name="tg-viz").start()
    return server


PAGE = r"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>tg viz</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<style>
body { margin: 0; font: 13px system-ui, sans-serif; color: #222; display: grid; height: 100vh;
       grid-template-columns: 260px 320px 1fr; grid-template-rows: auto 1fr; }
header { grid-column: 1 / 4; padding: 6px 10px; background: #f3f3f3; border-bottom: 1px solid #ccc; }
header button { margin-left: 8px; }
#kernels, #passes { overflow: auto; border-right: 1px solid #ddd; padding: 4px; }
#main { overflow: auto; padding: 6px; }
.kernel, .pass { padding: 3px 5px; cursor: pointer; border-radius: 3px; }
.kernel:hover, .pass:hover { background: #eef; }
.selected { background: #dde6ff !important; }
.small { color: #666; font-size: 11px; }
pre { font: 12px ui-monospace, monospace; background: #fafafa; border: 1px solid #eee; padding: 6px; overflow: auto; }
table { border-collapse: collapse; } td, th { padding: 2px 8px; border-bottom: 1px solid #eee; text-align: left; }
#filter { width: 95%; margin-bottom: 4px; }
svg text { font: 10px ui-monospace, monospace; }
#timeline-view { display: none; padding: 6px; grid-column: 1 / 4; overflow: auto; }
</style></head>
<body>
<header><b>tg viz</b> <span id="title" class="small"></span>
  <button id="show-kernels">kernels</button><button id="show-timeline">timeline</button></header>
<div id="kernels"><input id="filter" placeholder="filter kernels"><div id="kernel-list"></div></div>
<div id="passes"></div>
<div id="main"><div id="graph-head"></div><div id="graph"></div><div id="rules"></div>
  <h4>code</h4><pre id="code"></pre></div>
<div id="timeline-view"><div id="timeline"></div></div>
<script>
"use strict";
let trace = null, profile = null, kernel = null, side = "after";
const $ = (id) => document.getElementById(id);
function el(tag, attrs, text) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;  // text only: nothing from the files is parsed as HTML
  return e;
}
function svg(tag, attrs, text) {
  const e = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}
function showKernels() {
  const needle = $("filter").value.toLowerCase(), list = $("kernel-list");
  list.replaceChildren();
  trace.kernels.forEach((k, i) => {
    if (needle && !k.name.toLowerCase().includes(needle)) return;
    const item = el("div", {class: "kernel" + (k === kernel ? " selected" : ""), "data-index": i});
    item.append(el("div", {}, k.name), el("div", {class: "small"}, `${k.renderer} · ${k.passes.length} passes`));
    item.onclick = () => selectKernel(i);
    list.append(item);
  });
}
function selectKernel(i) {
  kernel = trace.kernels[i];
  showKernels();
  const passes = $("passes");
  passes.replaceChildren(el("h4", {}, kernel.name));
  kernel.passes.forEach((p, j) => {
    const fired = Object.values(p.rules).reduce((a, b) => a + b, 0);
    const item = el("div", {class: "pass", "data-index": j});
    item.append(el("div", {}, p.name), el("div", {class: "small"}, fired ? `${fired} rewrites` : "step"));
    item.onclick = () => selectPass(j);
    passes.append(item);
  });
  $("code").textContent = kernel.code || "(no code recorded)";
  $("code").className = "lang-" + kernel.language;
  if (kernel.passes.length) selectPass(kernel.passes.length - 1);
  else { $("graph").replaceChildren(); $("rules").replaceChildren(); $("graph-head").replaceChildren(); }
}
function selectPass(j) {
  const p = kernel.passes[j];
  document.querySelectorAll(".pass").forEach((e) => e.classList.toggle("selected", +e.dataset.index === j));
  const head = $("graph-head");
  head.replaceChildren(el("b", {}, p.name + " "));
  for (const which of ["before", "after"]) {
    const b = el("button", {id: "side-" + which}, which);
    b.onclick = () => { side = which; selectPass(j); };
    if (which === side) b.disabled = true;
    head.append(b);
  }
  drawGraph(p[side]);
  const rules = $("rules");
  rules.replaceChildren();
  const names = Object.keys(p.rules);
  if (names.length) {
    const table = el("table", {id: "rule-table"});
    table.append(el("tr", {}), ...names.map((r) => { const tr = el("tr", {});
      tr.append(el("td", {}, r), el("td", {}, String(p.rules[r]))); return tr; }));
    table.firstChild.append(el("th", {}, "rule"), el("th", {}, "fired"));
    rules.append(table);
  }
}
const COLORS = {LOAD: "#cfe8ff", STORE: "#ffd6cc", RANGE: "#fff2b3", END: "#fff2b3", REDUCE: "#d9f2d9",
                CONST: "#eeeeee", PARAM: "#e6d9ff", INDEX: "#d6f5f5", SINK: "#dddddd"};
function drawGraph(root) {
  const box = $("graph");
  box.replaceChildren();
  if (root < 0) { box.append(el("p", {}, "this graph was cut (too many nodes)")); return; }
  const nodes = kernel.nodes, seen = new Set(), order = [];
  (function visit(i) {
    if (i < 0 || seen.has(i)) return;
    seen.add(i); nodes[i][3].forEach(visit); order.push(i);
  })(root);
  const shown = order.slice(-400), keep = new Set(shown), depth = {};
  for (const i of shown) depth[i] = Math.max(0, ...nodes[i][3].filter((s) => keep.has(s)).map((s) => depth[s] + 1));
  const rows = {};
  for (const i of shown) (rows[depth[i]] = rows[depth[i]] || []).push(i);
  const W = 150, H = 40, pos = {};
  let width = 0;
  for (const [d, ids] of Object.entries(rows)) ids.forEach((i, x) => {
    pos[i] = [10 + x * (W + 10), 10 + d * (H + 20)];
    width = Math.max(width, 20 + (x + 1) * (W + 10));
  });
  const height = 30 + Object.keys(rows).length * (H + 20);
  const s = svg("svg", {width, height, id: "graph-svg"});
  for (const i of shown) for (const src of nodes[i][3]) if (keep.has(src)) {
    const [x1, y1] = pos[src], [x2, y2] = pos[i];
    s.append(svg("line", {x1: x1 + W / 2, y1: y1 + H, x2: x2 + W / 2, y2, stroke: "#999"}));
  }
  for (const i of shown) {
    const [op, dtype, arg] = nodes[i], [x, y] = pos[i];
    const g = svg("g", {class: "node"});
    g.append(svg("rect", {x, y, width: W, height: H, rx: 4, fill: COLORS[op] || "#fff", stroke: "#888"}),
             svg("text", {x: x + 4, y: y + 13}, op), svg("text", {x: x + 4, y: y + 25}, dtype.slice(0, 24)),
             svg("text", {x: x + 4, y: y + 37}, arg.slice(0, 24)));
    g.append(svg("title", {}, `${op} ${dtype} ${arg}`));
    s.append(g);
  }
  box.append(el("div", {class: "small"}, `${shown.length} of ${order.length} nodes`), s);
}
function showTimeline() {
  const view = $("timeline");
  view.replaceChildren();
  if (!profile) { view.append(el("p", {}, "no profile given (tg viz serve TRACE --profile FILE)")); return; }
  const events = profile.events, tracks = {};
  for (const e of events) { const t = e.device + " " + (e.kind === "copy" ? "kernel" : e.kind);
                            (tracks[t] = tracks[t] || []).push(e); }
  const end = Math.max(1, ...events.map((e) => e.start_ns + e.dur_ns)), W = 1000, names = Object.keys(tracks);
  const s = svg("svg", {width: W + 160, height: 30 * names.length + 20, id: "timeline-svg"});
  names.forEach((t, row) => {
    s.append(svg("text", {x: 2, y: 20 + row * 30}, t));
    for (const e of tracks[t]) {
      const r = svg("rect", {x: 150 + e.start_ns / end * W, y: 8 + row * 30, height: 16, class: "event",
                             width: Math.max(1, e.dur_ns / end * W), fill: e.kind === "compile" ? "#f4a" : "#48c"});
      r.append(svg("title", {}, `${e.name}: ${(e.dur_ns / 1e3).toFixed(1)} us`));
      s.append(r);
    }
  });
  view.append(s);
}
$("show-kernels").onclick = () => { $("timeline-view").style.display = "none";
  for (const id of ["kernels", "passes", "main"]) $(id).style.display = ""; };
$("show-timeline").onclick = () => { $("timeline-view").style.display = "block";
  for (const id of ["kernels", "passes", "main"]) $(id).style.display = "none"; showTimeline(); };
$("filter").oninput = showKernels;
(async () => {
  trace = await (await fetch("/api/trace")).json();
  const answer = await fetch("/api/profile");
  profile = answer.ok ? await answer.json() : null;
  $("title").textContent = `${trace.argv.join(" ")} — ${trace.kernels.length} kernels`;
  showKernels();
  if (trace.kernels.length) selectKernel(0);
  document.body.dataset.ready = "1";
})();
</script></body></html>
"""

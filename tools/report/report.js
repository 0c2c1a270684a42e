// dtrain report: draws the runs embedded in this page (#dt-data) as SVG.
// No network: everything it needs is in the page. Each chart is an <svg> with
// data-chart (its name) and data-series (lines drawn); each line is a
// <polyline class="series"> with data-run and data-points (points drawn), so
// a test can count them from the DOM.
(function () {
  "use strict";
  var D = JSON.parse(document.getElementById("dt-data").textContent);
  var NS = "http://www.w3.org/2000/svg";
  var COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"];
  var W = 560, H = 300, L = 64, R = 16, T = 28, B = 40;
  function el(tag, attrs, parent) {
    var e = document.createElementNS(NS, tag);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(e);
    return e;
  }
  function text(parent, x, y, s, attrs) {
    var t = el("text", Object.assign({x: x, y: y}, attrs || {}), parent);
    t.textContent = s;
    return t;
  }
  function fmt(v) {
    var a = Math.abs(v);
    if (a === 0) return "0";
    if (a >= 1e9) return (v / 1e9).toPrecision(3) + "G";
    if (a >= 1e6) return (v / 1e6).toPrecision(3) + "M";
    if (a >= 1e4) return (v / 1e3).toPrecision(3) + "k";
    if (a < 1e-3) return v.toExponential(1);
    return String(+v.toPrecision(3));
  }
  function range(series, i) {
    var lo = Infinity, hi = -Infinity;
    series.forEach(function (s) { s.points.forEach(function (p) { if (isFinite(p[i])) { lo = Math.min(lo, p[i]); hi = Math.max(hi, p[i]); } }); });
    if (!isFinite(lo)) { lo = 0; hi = 1; }
    if (lo === hi) { lo -= 0.5 * Math.abs(lo) || 0.5; hi += 0.5 * Math.abs(hi) || 0.5; }
    return [lo, hi];
  }
  function section(title, note) {
    var div = document.createElement("div");
    div.className = "chart";
    var h = document.createElement("h3");
    h.textContent = title;
    div.appendChild(h);
    if (note) { var p = document.createElement("p"); p.className = "note"; p.textContent = note; div.appendChild(p); }
    document.getElementById("charts").appendChild(div);
    return div;
  }
  // series: [{run, points: [[x, y]], marks: [[x, y, label]]}]; vlines: [[x, label]]
  function lineChart(name, title, xl, yl, series, opts) {
    opts = opts || {};
    series = series.filter(function (s) { return s.points.length || (s.marks && s.marks.length); });
    if (!series.length) return null;
    var div = section(title, opts.note);
    var svg = el("svg", {width: W, height: H, viewBox: "0 0 " + W + " " + H, "data-chart": name, "data-series": 0}, div);
    var all = series.map(function (s) { return {points: s.points.concat(s.marks || [])}; });
    var xr = range(all, 0), yr = range(all, 1);
    function X(v) { return L + (v - xr[0]) / (xr[1] - xr[0]) * (W - L - R); }
    function Y(v) { return H - B - (v - yr[0]) / (yr[1] - yr[0]) * (H - T - B); }
    el("rect", {x: L, y: T, width: W - L - R, height: H - T - B, fill: "none", stroke: "#999"}, svg);
    for (var i = 0; i <= 4; i++) {
      var yv = yr[0] + i / 4 * (yr[1] - yr[0]), xv = xr[0] + i / 4 * (xr[1] - xr[0]);
      el("line", {x1: L, x2: W - R, y1: Y(yv), y2: Y(yv), stroke: "#eee"}, svg);
      text(svg, L - 4, Y(yv) + 4, fmt(yv), {"text-anchor": "end", "font-size": 11});
      text(svg, X(xv), H - B + 14, fmt(xv), {"text-anchor": "middle", "font-size": 11});
    }
    text(svg, (L + W - R) / 2, H - 6, xl, {"text-anchor": "middle", "font-size": 12});
    text(svg, 12, (T + H - B) / 2, yl, {"text-anchor": "middle", "font-size": 12, transform: "rotate(-90 12 " + (T + H - B) / 2 + ")"});
    (opts.vlines || []).forEach(function (v) {
      if (v[0] < xr[0] || v[0] > xr[1]) return;
      el("line", {x1: X(v[0]), x2: X(v[0]), y1: T, y2: H - B, stroke: "#888", "stroke-dasharray": "4 3", class: "event"}, svg);
      text(svg, X(v[0]) + 2, T + 10, v[1], {"font-size": 10, fill: "#555"});
    });
    var drawn = 0;
    series.forEach(function (s) {
      var c = COLORS[s.index % COLORS.length];
      var pts = s.points.filter(function (p) { return isFinite(p[0]) && isFinite(p[1]); });
      if (pts.length) {
        el("polyline", {class: "series", "data-run": s.run, "data-points": pts.length, fill: "none", stroke: c, "stroke-width": 1.5,
                        points: pts.map(function (p) { return X(p[0]).toFixed(1) + "," + Y(p[1]).toFixed(1); }).join(" ")}, svg);
        drawn++;
      }
      var g = el("g", {class: "marks", "data-run": s.run, "data-points": (s.marks || []).length}, svg);
      (s.marks || []).forEach(function (m) { el("circle", {cx: X(m[0]), cy: Y(m[1]), r: 3.5, fill: "white", stroke: c, "stroke-width": 2}, g); });
    });
    svg.setAttribute("data-series", drawn);
    var lg = document.createElement("div");
    lg.className = "legend";
    series.forEach(function (s) {
      var sp = document.createElement("span");
      sp.style.color = COLORS[s.index % COLORS.length];
      sp.textContent = "\u25a0 " + s.run + (s.label ? " " + s.label : "");
      lg.appendChild(sp);
    });
    div.appendChild(lg);
    return svg;
  }
  // groups: [{run, index, parts: [[label, value, formula or null]]}]
  function barChart(name, title, unit, groups, note) {
    groups = groups.filter(function (g) { return g.parts.length; });
    if (!groups.length) return null;
    var div = section(title, note);
    var nb = groups.reduce(function (a, g) { return a + g.parts.length; }, 0);
    var svg = el("svg", {width: W, height: H, viewBox: "0 0 " + W + " " + H, "data-chart": name, "data-series": groups.length}, div);
    var hi = 0;
    groups.forEach(function (g) { g.parts.forEach(function (p) { hi = Math.max(hi, p[1], p[2] || 0); }); });
    hi = hi || 1;
    var bw = (W - L - R) / (nb + groups.length), x = L + bw / 2;
    el("rect", {x: L, y: T, width: W - L - R, height: H - T - B, fill: "none", stroke: "#999"}, svg);
    for (var i = 0; i <= 4; i++) text(svg, L - 4, H - B - i / 4 * (H - T - B) + 4, fmt(hi * i / 4), {"text-anchor": "end", "font-size": 11});
    text(svg, 12, (T + H - B) / 2, unit, {"text-anchor": "middle", "font-size": 12, transform: "rotate(-90 12 " + (T + H - B) / 2 + ")"});
    groups.forEach(function (g) {
      var gg = el("g", {class: "series", "data-run": g.run, "data-points": g.parts.length}, svg);
      g.parts.forEach(function (p) {
        var h = p[1] / hi * (H - T - B);
        el("rect", {x: x, y: H - B - h, width: bw * 0.8, height: h, fill: COLORS[g.index % COLORS.length], opacity: 0.8}, gg);
        if (p[2] != null) {
          var hf = p[2] / hi * (H - T - B);
          el("rect", {x: x, y: H - B - hf, width: bw * 0.8, height: hf, fill: "none", stroke: "black", "stroke-dasharray": "3 2", class: "formula"}, gg);
        }
        text(svg, x + bw * 0.4, H - B + 12, p[0], {"text-anchor": "middle", "font-size": 9});
        x += bw;
      });
      text(svg, x - bw * (g.parts.length / 2 + 0.5), H - 8, g.run, {"text-anchor": "middle", "font-size": 11});
      x += bw;
    });
    return svg;
  }
  function col(run, key, xkey) {
    var ix = D.keys.indexOf(key), xx = D.keys.indexOf(xkey || "step");
    return run.steps.filter(function (r) { return r[ix] !== null && r[xx] !== null; }).map(function (r) { return [r[xx], r[ix]]; });
  }
  function eventLines(run, x) {
    return (run.events || []).map(function (e) { return [x === "time_s" ? e.time_s : e.step, e.event]; })
      .filter(function (v) { return v[0] != null; });
  }
  var runs = D.runs;
  runs.forEach(function (r, i) { r.index = i; });
  var notes = [];
  runs.forEach(function (r) { (r.notes || []).forEach(function (n) { notes.push(r.name + ": " + n); }); });
  var ds = runs.filter(function (r) { return r.every > 1; }).map(function (r) { return r.name + " every " + r.every + "th of " + r.logged + " logged steps"; });
  var dsNote = ds.length ? "downsampled for drawing: " + ds.join("; ") : null;
  var one = runs.length === 1 ? runs[0] : null;
  ["step", "time_s"].forEach(function (x) {
    lineChart("loss-" + (x === "step" ? "step" : "time"), "Training loss against " + (x === "step" ? "step" : "wall time"),
      x === "step" ? "step" : "seconds", "loss",
      runs.map(function (r) {
        var ev = r.evals.filter(function (e) { return e.loss != null && (x === "step" || e.time_s != null); });
        return {run: r.name, index: r.index, points: col(r, "loss", x), marks: ev.map(function (e) { return [x === "step" ? e.step : e.time_s, e.loss]; })};
      }), {note: dsNote, vlines: one ? eventLines(one, x) : []});
  });
  ["step", "time_s"].forEach(function (x) {
    lineChart("eval-" + (x === "step" ? "step" : "time"), "Evaluation against " + (x === "step" ? "step" : "wall time"),
      x === "step" ? "step" : "seconds", "test accuracy (classifiers) or validation loss",
      runs.map(function (r) {
        var pts = r.evals.filter(function (e) { return x === "step" || e.time_s != null; })
          .map(function (e) { return [x === "step" ? e.step : e.time_s, e.acc != null ? e.acc : e.loss]; });
        return {run: r.name, index: r.index, points: pts, marks: pts, label: r.evals.length && r.evals[0].acc != null ? "(accuracy)" : "(validation loss)"};
      }));
  });
  lineChart("throughput", "Throughput over time", "seconds", "samples or tokens per second",
    runs.map(function (r) { return {run: r.name, index: r.index, points: col(r, "items_per_s", "time_s")}; }));
  barChart("split", "Where a step's time goes (mean per step, this rank)", "seconds",
    runs.map(function (r) {
      var c = col(r, "compute_s"), e = col(r, "comm_exposed_s");
      if (!c.length) return {run: r.name, index: r.index, parts: []};
      var mean = function (a) { return a.reduce(function (s, p) { return s + p[1]; }, 0) / a.length; };
      var parts = [["compute", mean(c), null], ["exposed comm", e.length ? mean(e) : 0, null]];
      if (r.end.pipeline) {
        var idle = r.end.pipeline.idle_frac, f = idle.reduce(function (a, b) { return a + b; }, 0) / idle.length;
        parts.push(["bubble", f * (parts[0][1] + parts[1][1]), null]);
      }
      return {run: r.name, index: r.index, parts: parts};
    }), "bubble: the pipeline stages' mean idle fraction of the step");
  lineChart("bytes", "Bytes on the wire per step (this rank)", "step", "bytes",
    runs.map(function (r) { return {run: r.name, index: r.index, points: col(r, "bytes_sent")}; }));
  barChart("memory", "Memory per rank (rank 0) against the ZeRO formulas (dashed)", "bytes",
    runs.map(function (r) {
      var m = r.end.memory;
      if (!m) return {run: r.name, index: r.index, parts: []};
      var P = m.params, N = m.ranks, z = m.zero, k = m.optim_bytes > 0 ? Math.round(m.optim_bytes * (z ? N : 1) / (4 * P)) : 0;
      return {run: r.name, index: r.index, parts: [
        ["params", m.param_bytes, 4 * P], ["grads", m.grad_bytes, z === 2 ? 4 * P / N : 4 * P],
        ["optimizer", m.optim_bytes, z ? 4 * k * P / N : 4 * k * P], ["activations", m.act_bytes || 0, null]]};
    }), "formulas (Rajbhandari et al. 2020, fp32): parameters 4P, gradients 4P (ZeRO-2: 4P/N), optimizer 4kP (ZeRO-1/2: 4kP/N) for k states per parameter");
  lineChart("compress", "Compression ratio (raw / encoded bytes)", "step", "ratio",
    runs.map(function (r) { return {run: r.name, index: r.index, points: col(r, "compress_ratio")}; }));
  lineChart("ef-norm", "Error feedback: the residual's L2 norm (this rank)", "step", "norm",
    runs.map(function (r) { return {run: r.name, index: r.index, points: col(r, "ef_norm")}; }));
  lineChart("loss-scale", "fp16 loss scale", "step", "scale",
    runs.map(function (r) { return {run: r.name, index: r.index, points: col(r, "loss_scale")}; }));
  barChart("staleness", "Parameter server: staleness histogram", "pushes",
    runs.map(function (r) {
      var s = r.end.staleness;
      return {run: r.name, index: r.index, parts: s ? s.hist.map(function (v, i) { return [String(i), v, null]; }) : []};
    }));
  var clocks = [];
  runs.forEach(function (r) {
    if (!col(r, "clock_max").length) return;
    clocks.push({run: r.name, index: r.index, label: "(this worker)", points: col(r, "step", "time_s")});
    clocks.push({run: r.name, index: r.index, label: "(slowest)", points: col(r, "clock_min", "time_s")});
    clocks.push({run: r.name, index: r.index, label: "(fastest)", points: col(r, "clock_max", "time_s")});
  });
  lineChart("clocks", "Parameter server: worker clocks over time", "seconds", "clock (steps pushed)", clocks,
    {note: "this worker's clock (rank 0, the one that logs) and the slowest and fastest running worker's as the first server saw them at its pulls; the global clock is the slowest"});
  lineChart("workers", "Parameter server: workers over time", "seconds", "workers",
    runs.map(function (r) { return {run: r.name, index: r.index, points: col(r, "workers", "time_s")}; }),
    {vlines: one ? eventLines(one, "time_s") : []});
  var evs = [];
  runs.forEach(function (r) { (r.events || []).forEach(function (e) { evs.push([r.name, e.event, e.step, e.why || ""]); }); });
  if (evs.length) {
    var div = section("Events: stops, skips, rewinds, fp16 overflows, resumes");
    var t = document.createElement("table"); t.id = "events";
    evs.forEach(function (e) { var tr = t.insertRow(); e.forEach(function (v) { tr.insertCell().textContent = String(v); }); });
    div.appendChild(t);
  }
  // configuration side by side, differences highlighted
  var keys = {};
  runs.forEach(function (r) { Object.keys(r.config || {}).forEach(function (k) { keys[k] = 1; }); });
  var cdiv = section("Configuration (config.json) and command line", runs.length > 1 ? "rows whose values differ are highlighted" : null);
  var ct = document.createElement("table"); ct.id = "config";
  var hr = ct.insertRow(); hr.insertCell().textContent = "flag";
  runs.forEach(function (r) { hr.insertCell().textContent = r.name; });
  var cr = ct.insertRow(); cr.insertCell().textContent = "command";
  runs.forEach(function (r) { cr.insertCell().textContent = r.command || "(not recorded)"; });
  if (runs.length > 1 && runs.some(function (r) { return r.command !== runs[0].command; })) cr.className = "diff";
  Object.keys(keys).sort().forEach(function (k) {
    var tr = ct.insertRow(), vals = runs.map(function (r) { return JSON.stringify((r.config || {})[k]); });
    tr.insertCell().textContent = k;
    vals.forEach(function (v) { tr.insertCell().textContent = v === undefined ? "" : v; });
    if (vals.some(function (v) { return v !== vals[0]; })) tr.className = "diff";
  });
  cdiv.appendChild(ct);
  if (notes.length) {
    var nd = document.getElementById("notes");
    notes.forEach(function (n) { var li = document.createElement("li"); li.textContent = n; nd.appendChild(li); });
  }
  document.body.setAttribute("data-charts", document.querySelectorAll("svg[data-chart]").length);
  // what this page loaded besides itself (a test reads it: none)
  document.body.setAttribute("data-resources", performance.getEntriesByType("resource").length);
})();

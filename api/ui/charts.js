// The utilization histogram (links per utilization bin, before and after a change) as SVG.

import { s } from "./util.js";

/** Count values into bins of width ``step`` from 0 up to at least 1 (the last bin holds the overflow). */
export function bins(values, step = 0.1, top = 1.0) {
  const hi = Math.max(top, ...values.filter((v) => v !== null && v !== undefined).map((v) => Math.ceil(v / step - 1e-9) * step));
  const n = Math.max(1, Math.round(hi / step));
  const counts = new Array(n).fill(0);
  for (const v of values) {
    if (v === null || v === undefined) continue;
    counts[Math.min(n - 1, Math.max(0, Math.floor(v / step - 1e-9)))] += 1;
  }
  return counts;
}

/** Grouped bars: ``series`` is [{label, values, colour}], values being link utilizations. */
export function histogram(series, { step = 0.1, width = 560, height = 220, id = "histogram" } = {}) {
  const all = series.flatMap((x) => x.values);
  const n = bins(all, step).length;
  const counts = series.map((x) => {
    const c = bins(x.values, step);
    while (c.length < n) c.push(0);
    return c;
  });
  const peak = Math.max(1, ...counts.flat());
  const L = 40, R = 26, T = 26, B = 34;
  const pw = width - L - R, ph = height - T - B;
  const bw = pw / n;
  const svg = s("svg", { id, class: "histogram", viewBox: `0 0 ${width} ${height}`, width, height, style: "width:100%;height:auto", role: "img",
    "aria-label": "link utilization histogram" });
  svg.append(s("line", { x1: L, y1: T + ph, x2: L + pw, y2: T + ph, class: "axis" }));
  svg.append(s("line", { x1: L, y1: T, x2: L, y2: T + ph, class: "axis" }));
  for (const frac of [0, 0.5, 1]) {
    const v = Math.round(peak * frac);
    const y = T + ph - (v / peak) * ph;
    svg.append(s("text", { x: L - 6, y: y + 4, class: "tick", "text-anchor": "end" }, String(v)));
  }
  for (let i = 0; i <= n; i++) {
    if (n > 12 && i % 2) continue;
    svg.append(s("text", { x: L + i * bw, y: T + ph + 14, class: "tick", "text-anchor": "middle" }, `${Math.round(i * step * 100)}%`));
  }
  svg.append(s("text", { x: L + pw / 2, y: height - 4, class: "tick", "text-anchor": "middle" }, "link utilization (busier direction)"));
  const k = series.length;
  counts.forEach((c, j) => {
    c.forEach((v, i) => {
      if (!v) return;
      const hgt = (v / peak) * ph;
      const x = L + i * bw + 2 + (j * (bw - 4)) / k;
      svg.append(s("rect", { x, y: T + ph - hgt, width: Math.max(1, (bw - 4) / k - 1), height: hgt,
        fill: series[j].colour, class: `bar ${series[j].label}` }, s("title", {}, `${series[j].label}: ${v} link(s) at ${Math.round(i * step * 100)}–${Math.round((i + 1) * step * 100)}%`)));
    });
  });
  series.forEach((x, j) => {
    svg.append(s("rect", { x: L + 10 + j * 110, y: 6, width: 12, height: 12, fill: x.colour }));
    svg.append(s("text", { x: L + 26 + j * 110, y: 16, class: "tick" }, `${x.label} (${x.values.length})`));
  });
  return svg;
}

const L = 48, R = 10, B = 26;

/** A time chart of ``pts`` (oldest first, ``t`` in seconds since the epoch, drawn from the first to the last):
 * one line per ``series`` entry ({key, colour, label}; a gap where its value is null), values over ``scale``,
 * the y axis from 0 to ``top`` with ``tick(value)`` labels; returns the svg and its y scale. */
function timeChart(pts, series, { top, tick, scale = 1, width, height, id, aria, T }) {
  const pw = width - L - R, ph = height - T - B;
  const t0 = pts.length ? pts[0].t : 0;
  const span = Math.max(1, pts.length ? pts[pts.length - 1].t - t0 : 1);
  const x = (t) => L + ((t - t0) / span) * pw;
  const y = (v) => T + ph - (v / top) * ph;
  const known = pts.flatMap((p) => series.map(({ key }) => p[key])).filter((v) => v !== null && v !== undefined);
  const svg = s("svg", { id, class: "history", viewBox: `0 0 ${width} ${height}`, width, height, style: "width:100%;height:auto",
    role: "img", "aria-label": aria, "data-points": String(known.length) });
  svg.append(s("line", { x1: L, y1: T + ph, x2: L + pw, y2: T + ph, class: "axis" }));
  svg.append(s("line", { x1: L, y1: T, x2: L, y2: T + ph, class: "axis" }));
  for (const frac of [0, 0.5, 1]) {
    svg.append(s("text", { x: L - 6, y: y(top * frac) + 4, class: "tick", "text-anchor": "end" }, tick(top * frac)));
  }
  const ago = span >= 120 ? `${Math.round(span / 60)} min ago` : `${Math.round(span)} s ago`;
  svg.append(s("text", { x: L, y: height - 6, class: "tick" }, pts.length ? ago : "nothing measured yet"));
  svg.append(s("text", { x: L + pw, y: height - 6, class: "tick", "text-anchor": "end" }, "now"));
  series.forEach(({ key, colour, label }, j) => {
    let run = [];
    const flush = () => {
      if (run.length) svg.append(s("polyline", { points: run.join(" "), fill: "none", stroke: colour, "stroke-width": 1.5, class: `line ${key}` }));
      run = [];
    };
    for (const p of pts) {
      if (p[key] === null || p[key] === undefined) { flush(); continue; }
      run.push(`${x(p.t).toFixed(1)},${y(p[key] / scale).toFixed(1)}`);
    }
    flush();
    if (label) {
      svg.append(s("rect", { x: L + 6 + j * 150, y: 4, width: 10, height: 10, fill: colour }));
      svg.append(s("text", { x: L + 20 + j * 150, y: 13, class: "tick" }, label));
    }
  });
  return { svg, y, pw };
}

/** The points from the first with a value under one of ``keys`` (a window may reach back past what was ever
 * measured). */
function measured(points, keys) {
  const first = points.findIndex((p) => keys.some((k) => p[k] !== null && p[k] !== undefined));
  return first < 0 ? [] : points.slice(first);
}

/** A link's utilization over time (GET /v1/telemetry/links/{link}/history): one line per direction, a gap where
 * an interval has no rate. ``history.points`` are oldest first. */
export function historyChart(history, { width = 420, height = 160, id = "link-history" } = {}) {
  const cap = history.capacity_gbps || 1;
  const pts = measured(history.points, ["gbps_ab", "gbps_ba"]);
  const known = pts.flatMap((p) => [p.gbps_ab, p.gbps_ba]).filter((v) => v !== null && v !== undefined);
  const top = Math.max(0.01, ...known.map((v) => (v / cap) * 1.25));  // scaled to the load, at least 1%
  return timeChart(pts, [{ key: "gbps_ab", colour: "#1a73e8", label: `${history.a} → ${history.b}` },
    { key: "gbps_ba", colour: "#e37400", label: `${history.b} → ${history.a}` }],
  { top, scale: cap, tick: (u) => `${(u * 100).toFixed(top < 0.1 ? 1 : 0)}%`, width, height, id, T: 22,
    aria: "link utilization over time" }).svg;
}

/** A job's measured rate per interval (GET /v1/jobs/{name}/history), with its template's expectation dashed. */
export function rateChart(history, { width = 420, height = 160, id = "job-history" } = {}) {
  const pts = measured(history.points, ["gbps"]);
  const top = Math.max(1e-6, history.expected_gbps, ...pts.map((p) => p.gbps).filter((v) => v !== null)) * 1.2;
  const { svg, y, pw } = timeChart(pts, [{ key: "gbps", colour: "#1a73e8" }],
    { top, tick: (g) => g.toPrecision(2), width, height, id, T: 12, aria: "the job's rate over time" });
  svg.append(s("text", { x: 4, y: 20, class: "tick" }, "Gb/s"));
  svg.append(s("line", { x1: L, x2: L + pw, y1: y(history.expected_gbps), y2: y(history.expected_gbps), class: "expected" },
    s("title", {}, `expected ${history.expected_gbps.toPrecision(3)} Gb/s (the collective's template)`)));
  return svg;
}

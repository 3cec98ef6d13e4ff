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

// Small DOM and formatting helpers shared by the Loom UI's pages (no dependencies).

const SVG_NS = "http://www.w3.org/2000/svg";

function append(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

function setAttrs(el, attrs) {
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on") && typeof v === "function") el.addEventListener(k.slice(2), v);
    else if (k === "dataset") Object.assign(el.dataset, v);
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  return el;
}

/** An HTML element: h("td", {class: "num"}, "3"). Text children are never parsed as HTML. */
export function h(tag, attrs, ...children) {
  return append(setAttrs(document.createElement(tag), attrs), children);
}

/** An SVG element. */
export function s(tag, attrs, ...children) {
  return append(setAttrs(document.createElementNS(SVG_NS, tag), attrs), children);
}

export function clear(el) {
  while (el.firstChild) el.removeChild(el.firstChild);
  return el;
}

export function fmt(v, digits = 3) {
  if (v === null || v === undefined || Number.isNaN(v)) return "–";
  if (typeof v !== "number") return String(v);
  return Number.isInteger(v) ? String(v) : v.toFixed(digits);
}

export function pct(v) {
  return v === null || v === undefined ? "–" : `${(v * 100).toFixed(1)}%`;
}

export function when(iso) {
  if (!iso) return "–";
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? String(iso) : d.toISOString().replace("T", " ").slice(0, 19) + "Z";
}

// Utilization colour: green at 0, yellow at half, orange at 0.8, red at or above 1.
const STOPS = [[0, [46, 160, 67]], [0.5, [210, 180, 20]], [0.8, [235, 120, 20]], [1, [210, 40, 40]]];

export function utilColour(u) {
  if (u === null || u === undefined) return "#9aa0a6";
  const x = Math.max(0, Math.min(1, u));
  for (let i = 1; i < STOPS.length; i++) {
    const [x1, c1] = STOPS[i];
    const [x0, c0] = STOPS[i - 1];
    if (x <= x1) {
      const t = (x - x0) / (x1 - x0);
      const c = c0.map((v, j) => Math.round(v + t * (c1[j] - v)));
      return `rgb(${c[0]},${c[1]},${c[2]})`;
    }
  }
  return "rgb(210,40,40)";
}

/** A table from column titles and rows of cells (strings or nodes). */
export function table(columns, rows, attrs = {}) {
  return h("table", attrs,
    h("thead", {}, h("tr", {}, columns.map((c) => h("th", {}, c)))),
    h("tbody", {}, rows.map((r) => (r instanceof Node ? r : h("tr", {}, r.map((c) => (c instanceof Node && c.tagName === "TD" ? c : h("td", {}, c))))))));
}

export function badge(text, kind) {
  return h("span", { class: `badge ${kind || text}` }, text);
}

export function message(text, kind = "info") {
  return h("p", { class: `msg ${kind}` }, text);
}

/** A unified diff as coloured lines. */
export function diffBlock(text) {
  const pre = h("pre", { class: "diff" });
  for (const line of String(text || "").split("\n")) {
    let cls = "";
    if (line.startsWith("+++") || line.startsWith("---")) cls = "file";
    else if (line.startsWith("@@")) cls = "hunk";
    else if (line.startsWith("+")) cls = "add";
    else if (line.startsWith("-")) cls = "del";
    pre.append(h("span", { class: cls }, line), "\n");
  }
  return pre;
}

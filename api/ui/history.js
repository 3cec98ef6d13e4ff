// The Revisions page (history, the diff between two chosen revisions, roll back to one) and the Audit page.

import { h, clear, when, table, badge, message } from "./util.js";
import { api, maybe } from "./api.js";

const PAGE = 50;

function pager(base, offset, count, total, next) {
  const at = (o) => `${base}${base.includes("?") ? "&" : "?"}offset=${o}`;
  return h("p", { class: "pager" },
    offset > 0 ? h("a", { href: at(Math.max(0, offset - PAGE)), class: "prev" }, "← newer") : null, " ",
    count ? `${offset + 1}–${offset + count} of ${total}` : `none of ${total}`, " ",
    next ? h("a", { href: at(offset + PAGE), class: "next" }, "older →") : null);
}

function value(v) {
  return v === undefined ? "–" : typeof v === "object" ? JSON.stringify(v) : String(v);
}

function diffView(d) {
  const out = [h("h2", {}, `r${d.from} → r${d.to}`)];
  const top = Object.entries(d.fields || {});
  if (top.length) out.push(table(["field", "before", "after"], top.map(([k, [a, b]]) => [k, value(a), value(b)]), { class: "compact" }));
  const rows = [];
  for (const e of d.added || []) rows.push(h("tr", { class: "add" }, h("td", {}, "added"), h("td", {}, e.kind), h("td", {}, e.name), h("td", {}, "")));
  for (const e of d.removed || []) rows.push(h("tr", { class: "del" }, h("td", {}, "removed"), h("td", {}, e.kind), h("td", {}, e.name), h("td", {}, "")));
  for (const e of d.changed || []) {
    const f = Object.entries(e.fields || {}).map(([k, [a, b]]) => `${k}: ${value(a)} → ${value(b)}`).join("; ");
    rows.push(h("tr", { class: "chg" }, h("td", {}, "changed"), h("td", {}, e.kind), h("td", {}, e.name), h("td", {}, f)));
  }
  out.push(rows.length || top.length ? table(["", "kind", "name", "fields"], rows, { class: "compact", id: "diff-table" })
    : h("p", { class: "muted" }, "the two revisions hold the same intent"));
  return out;
}

export async function renderRevisions(main, ctx) {
  const offset = Number(ctx.params.get("offset") || 0);
  const [page, status] = await Promise.all([api(`/v1/revisions?limit=${PAGE}&offset=${offset}`), maybe("/v1/status")]);
  if (!ctx.alive()) return;
  const active = status ? status.active_revision : null;
  main.append(h("div", { class: "page-head" }, h("h1", {}, "Revisions"),
    h("span", { class: "muted" }, "pick two (A and B) to see what changed from A to B")));
  if (!page.items.length) {
    main.append(message("No revisions yet.", "info"));
    return;
  }
  const ids = page.items.map((r) => r.id);
  let a = Number(ctx.params.get("a") || ids[1] || ids[0]);
  let b = Number(ctx.params.get("b") || ids[0]);
  const out = h("section", { class: "card", id: "revision-diff" });
  const err = h("p", { class: "msg error", id: "revision-error" });
  const show = async () => {
    clear(out);
    err.textContent = "";
    try {
      out.append(...diffView(await api(`/v1/revisions/${a}/diff/${b}`)));
    } catch (e) {
      err.textContent = e.message;
    }
  };
  const rows = page.items.map((r) => {
    const ra = h("input", { type: "radio", name: "a", value: r.id, checked: r.id === a || null, onchange: () => { a = r.id; } });
    const rb = h("input", { type: "radio", name: "b", value: r.id, checked: r.id === b || null, onchange: () => { b = r.id; } });
    const back = ctx.canOperate && active && r.id !== active
      ? h("button", { class: "link rollback", "data-revision": r.id, onclick: async () => {
        try {
          const ch = await api(`/v1/revisions/${r.id}/rollback`, { method: "POST", body: {} });
          location.hash = `#/changes/${ch.id}`;
        } catch (e) {
          err.textContent = e.message;
        }
      } }, "roll back to this") : "";
    return h("tr", { "data-revision": r.id },
      h("td", {}, ra), h("td", {}, rb), h("td", {}, `r${r.id}`, r.id === active ? [" ", badge("active", "active")] : null),
      h("td", {}, when(r.created_at)), h("td", {}, r.author), h("td", {}, r.message || ""),
      h("td", {}, h("code", { title: r.hash }, (r.hash || "").slice(0, 12))), h("td", {}, back));
  });
  main.append(table(["A", "B", "revision", "created", "author", "message", "hash", ""], rows, { id: "revisions", class: "list" }),
    pager("#/revisions", offset, page.items.length, page.total, page.next),
    h("p", {}, h("button", { id: "show-diff", class: "primary", onclick: show }, "Diff A → B")), err, out);
  if (ids.length > 1 || ctx.params.get("a")) await show();
}

export async function renderAudit(main, ctx) {
  const offset = Number(ctx.params.get("offset") || 0);
  const outcome = ctx.params.get("outcome") || "";
  const q = new URLSearchParams({ limit: PAGE, offset });
  if (outcome) q.set("outcome", outcome);
  const page = await api(`/v1/audit?${q}`);
  if (!ctx.alive()) return;
  const base = outcome ? `#/audit?outcome=${outcome}` : "#/audit";
  main.append(h("div", { class: "page-head" }, h("h1", {}, "Audit"),
    h("span", { class: "filters" }, ["", "accepted", "unchanged", "rejected"].map((o, i) => [i ? " · " : "",
      h("a", { href: o ? `#/audit?outcome=${o}` : "#/audit", class: o === outcome ? "active" : "" }, o || "all")]))));
  main.append(table(["when", "who", "request", "action", "outcome", "status", "revision", "request id", "detail"],
    page.items.map((e) => [when(e.at), e.actor, `${e.method} ${e.path}`, e.action, badge(e.outcome), String(e.status),
      e.revision ? `r${e.revision}` : "–", h("code", {}, e.request_id || ""), e.detail || ""]),
    { id: "audit", class: "list" }),
  pager(base, offset, page.items.length, page.total, page.next));
}

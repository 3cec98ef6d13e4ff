// The Loom operator view: log in with a bearer token, then Fabric, Changes, Revisions and Audit pages.
// Plain ES modules and SVG; everything comes from this controller (no CDN, nothing fetched from outside).
// The token lives in sessionStorage and is sent as "Authorization: Bearer"; pages are addressed by the
// URL fragment (#/fabric, #/device/NAME, #/changes, #/changes/ID, #/revisions, #/audit).

import { h, clear, message } from "./util.js";
import { renderFabric, renderDevice } from "./fabric.js";
import { renderChanges, renderChange } from "./changes.js";
import { renderRevisions, renderAudit } from "./history.js";
import { api, maybe, token, whoami, canOperate, login, logout } from "./api.js";

let loginNote = "";
window.addEventListener("loom:logout", (ev) => {
  loginNote = ev.detail || "";
  render();
});

export function navigate(hash) {
  if (location.hash === hash) render();
  else location.hash = hash;
}

function route() {
  const raw = location.hash.replace(/^#\/?/, "");
  const [path, query] = raw.split("?");
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  return { parts, params: new URLSearchParams(query || "") };
}

const PAGES = [
  ["fabric", "Fabric"],
  ["changes", "Changes"],
  ["revisions", "Revisions"],
  ["audit", "Audit"],
];

let generation = 0;

function loginView(root) {
  const input = h("input", { id: "token", type: "password", autocomplete: "off", placeholder: "loom_…", size: 60 });
  const note = h("p", { class: "msg error", id: "login-error" }, loginNote);
  const form = h("form", { id: "login", class: "card login" },
    h("h1", {}, "Loom"),
    h("p", {}, "An intent-driven controller for data-center fabrics. Log in with a bearer token "
      + "(loom serve prints an admin token the first time; loom token create makes more)."),
    h("label", { for: "token" }, "Token"), input,
    h("button", { type: "submit", id: "login-submit" }, "Log in"), note);
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const value = input.value.trim();
    if (!value) return;
    try {
      await login(value);
      loginNote = "";
      if (!location.hash || location.hash === "#/login") location.hash = "#/fabric";
      else render();
    } catch (e) {
      note.textContent = e.status === 401 ? "That token is unknown, expired or revoked." : `Cannot log in: ${e.message}`;
    }
  });
  root.append(form);
  input.focus();
}

async function statusLine(el) {
  try {
    const st = await maybe("/v1/status");
    if (!st) return;
    el.append(h("span", {},
      h("span", {}, `head r${st.head_revision ?? "–"}`), " · ",
      h("span", { id: "active-revision" }, `active r${st.active_revision ?? "–"}`),
      st.committing_change ? [" · ", h("a", { href: `#/changes/${st.committing_change}`, class: "committing" },
        `committing change ${st.committing_change}`)] : null));
  } catch {
    /* the status line is a nicety */
  }
}

export async function render() {
  const gen = ++generation;
  const root = clear(document.getElementById("app"));
  if (!token() || !whoami()) {
    loginView(root);
    return;
  }
  const { parts, params } = route();
  const page = parts[0] || "fabric";
  const me = whoami();
  const status = h("span", { class: "status", id: "status" });
  root.append(h("header", {},
    h("a", { class: "brand", href: "#/fabric" }, "Loom"),
    h("nav", {}, PAGES.map(([id, label]) =>
      h("a", { href: `#/${id}`, class: page === id || (page === "device" && id === "fabric") ? "active" : "" }, label)),
      h("a", { href: "/docs", target: "_blank", rel: "noopener" }, "API")),
    status,
    h("span", { class: "who", id: "who" }, `${me.name} (${me.role})`),
    h("button", { class: "link", id: "logout", onclick: () => logout() }, "Log out")));
  const main = h("main", { id: "main" });
  root.append(main);
  statusLine(status);
  const ctx = { params, alive: () => gen === generation, canOperate: canOperate() };
  try {
    if (page === "fabric") await renderFabric(main, ctx);
    else if (page === "device" && parts[1]) await renderDevice(main, parts[1], ctx);
    else if (page === "changes" && parts[1]) await renderChange(main, Number(parts[1]), ctx);
    else if (page === "changes") await renderChanges(main, ctx);
    else if (page === "revisions") await renderRevisions(main, ctx);
    else if (page === "audit") await renderAudit(main, ctx);
    else main.append(message(`No page here: #/${parts.join("/")}`, "error"));
  } catch (e) {
    if (gen !== generation) return;
    main.append(message(e.message || String(e), "error"));
    console.error(e);
  }
}

window.addEventListener("hashchange", render);
window.addEventListener("loom:status", () => {  // a page saw the revisions move (a commit finished)
  const el = document.getElementById("status");
  if (el) statusLine(clear(el));
});
render();

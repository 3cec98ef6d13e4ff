// The Fabric page (the topology by tier, links coloured by the active plan's utilization or, with
// ?view=observed, by what the switches' counters measure, stale links marked, with the recognized traffic
// patterns in a card under the legend; drains marked and offered to
// operators; a link's details on hover and click) and a switch's page (routes, groups and weights; reported
// state; drift; drain or undrain).

import { h, s, clear, fmt, pct, utilColour, table, badge, message } from "./util.js";
import { api, maybe, ApiError, followEvents } from "./api.js";
import { historyChart } from "./charts.js";
import { jobsCard } from "./jobs.js";

const TIERS = ["superspine", "spine", "leaf", "tor", "router"];
const OBSERVED_WINDOW_S = 60;
const HISTORY_WINDOW_S = 3600;
const TIER_LABEL = { superspine: "superspines", spine: "spines", leaf: "leaves", tor: "ToRs", router: "routers" };

/** The active plan, the revision it belongs to, and that revision's intent (or the head's when none is active). */
export async function loadFabric(preview = false) {
  const [status, activePlan] = await Promise.all([maybe("/v1/status"), maybe("/v1/plans/active")]);
  const active = status ? status.active_revision : null;
  let plan = activePlan;
  let intent = null;
  let revision = null;
  if (!plan && preview && status && status.head_revision) {
    // nothing committed yet: the head revision's plan, compiled on request and labelled as not active
    plan = await maybe(`/v1/plans/${status.head_revision}`);
    if (plan) {
      intent = await maybe(`/v1/revisions/${status.head_revision}/intent`);
      return { status, plan, intent, revision: status.head_revision, active, previewed: true };
    }
  }
  if (plan && active) {
    intent = await maybe(`/v1/revisions/${active}/intent`);
    revision = active;
  }
  if (!intent) {
    intent = await maybe("/v1/intent");
    revision = status ? status.head_revision : null;
  }
  return { status, plan, intent, revision, active, previewed: false };
}

function drains(intent) {
  const devices = new Set();
  const ends = new Set();
  for (const p of intent.policies || []) {
    if (p.kind !== "drain") continue;
    if (String(p.target).includes(":")) ends.add(p.target);
    else devices.add(p.target);
  }
  return { devices, ends };
}

/** An operator's drain or undrain of ``target`` as a change against ``revision``; opens its page to review. */
async function drainChange(intent, revision, target, undrain) {
  const index = (intent.policies || []).findIndex((p) => p.kind === "drain" && p.target === target);
  const patch = undrain ? [{ op: "remove", path: `/policies/${index}` }]
    : [{ op: "add", path: "/policies/-", value: { kind: "drain", target } }];
  const ch = await api("/v1/changes", { method: "POST",
    body: { base_revision: revision, patch, message: `${undrain ? "undrain" : "drain"} ${target} (web UI)` } });
  location.hash = `#/changes/${ch.id}`;
}

function drainButton(ctx, intent, revision, target, drained) {
  if (!ctx.canOperate || revision === null || revision === undefined) return null;
  const label = `${drained ? "Undrain" : "Drain"} ${target}`;
  const btn = h("button", { class: "drain-action", "data-target": target }, label);
  btn.addEventListener("click", async () => {
    btn.disabled = true;
    try {
      await drainChange(intent, revision, target, drained);
    } catch (e) {
      btn.disabled = false;
      btn.after(message(e.message, "error"));
    }
  });
  return h("p", {}, btn, h("span", { class: "muted" }, " creates a change to review before it commits"));
}

function loadIndex(plan) {
  // link end "device:port" -> {load, forward}: forward is true when the plan lists this end as "a"
  const byEnd = new Map();
  for (const l of (plan && plan.links) || []) {
    byEnd.set(`${l.a}:${l.a_port}`, { load: l, forward: true });
    byEnd.set(`${l.b}:${l.b_port}`, { load: l, forward: false });
  }
  return byEnd;
}

function groupIndex(plan) {
  // "device:port" -> [{device, group, weight, total, routes: [prefix]}]
  const out = new Map();
  for (const [dev, dp] of Object.entries((plan && plan.devices) || {})) {
    const routesOf = new Map();
    for (const [prefix, gid] of Object.entries(dp.routes || {})) {
      if (!routesOf.has(gid)) routesOf.set(gid, []);
      routesOf.get(gid).push(prefix);
    }
    for (const [gid, hops] of Object.entries(dp.groups || {})) {
      const total = hops.reduce((a, x) => a + x.weight, 0);
      for (const nh of hops) {
        const key = `${dev}:${nh.port}`;
        if (!out.has(key)) out.set(key, []);
        out.get(key).push({ device: dev, group: gid, weight: nh.weight, total, routes: routesOf.get(gid) || [] });
      }
    }
  }
  return out;
}

/** Where each device goes: rows by tier, leaves and ToRs in pod bands; a circle when there are no tiers. */
export function layout(devices, routing) {
  const pos = new Map();
  const tiered = (routing || "bgp") === "bgp" && devices.some((d) => d.role !== "router");
  if (!tiered) {
    const n = devices.length;
    const R = Math.max(200, n * 22);
    const W = 2 * R + 200;
    [...devices].sort((a, b) => a.name.localeCompare(b.name)).forEach((d, i) => {
      const t = (2 * Math.PI * i) / Math.max(1, n) - Math.PI / 2;
      pos.set(d.name, { x: W / 2 + R * Math.cos(t), y: R + 60 + R * Math.sin(t) });
    });
    return { pos, width: W, height: 2 * R + 140, rows: [], wide: n / 3 };
  }
  const byRole = new Map(TIERS.map((t) => [t, []]));
  for (const d of devices) (byRole.get(d.role) || byRole.get("router")).push(d);
  const podKey = (d) => (d.pod === null || d.pod === undefined ? Infinity : d.pod);
  const pods = [...new Set([...byRole.get("leaf"), ...byRole.get("tor")].map(podKey))].sort((a, b) => a - b);
  const bands = pods.map((p) => {
    const leaves = byRole.get("leaf").filter((d) => podKey(d) === p).sort(byPlaneName);
    const tors = byRole.get("tor").filter((d) => podKey(d) === p).sort((a, b) => a.name.localeCompare(b.name));
    return { pod: p, leaves, tors, units: Math.max(1, leaves.length, tors.length) };
  });
  const podUnits = bands.reduce((a, b) => a + b.units, 0) + Math.max(0, bands.length - 1) * 0.6;
  const wide = Math.max(podUnits, byRole.get("spine").length, byRole.get("superspine").length,
    byRole.get("router").length, 1);
  const unit = wide > 60 ? 26 : wide > 24 ? 44 : 84;
  const W = Math.max(900, wide * unit + 120);
  const rows = TIERS.filter((t) => byRole.get(t).length);
  const gap = 150 + Math.min(300, wide * 2);  // wide tiers get taller gaps, so links stay readable
  const rowY = new Map(rows.map((t, i) => [t, 60 + i * gap]));
  const spread = (list, y, x0, x1) => {
    const step = (x1 - x0) / list.length;
    list.forEach((d, i) => pos.set(d.name, { x: x0 + step * (i + 0.5), y }));
  };
  for (const t of ["superspine", "spine", "router"]) {
    if (byRole.get(t).length) spread([...byRole.get(t)].sort(byPlaneName), rowY.get(t), 60, W - 60);
  }
  const bandList = [];
  let x = 60;
  const scale = (W - 120) / podUnits;
  for (const b of bands) {
    const x1 = x + b.units * scale;
    if (b.leaves.length) spread(b.leaves, rowY.get("leaf"), x, x1);
    if (b.tors.length) spread(b.tors, rowY.get("tor"), x, x1);
    bandList.push({ pod: b.pod, x0: x, x1 });
    x = x1 + 0.6 * scale;
  }
  return { pos, width: W, height: 60 + (rows.length - 1) * gap + 90, rows: rows.map((t) => [t, rowY.get(t)]),
    bands: bandList, wide };
}

function byPlaneName(a, b) {
  const pa = a.plane ?? Infinity;
  const pb = b.plane ?? Infinity;
  return pa !== pb ? pa - pb : a.name.localeCompare(b.name);
}

function linkInfo(link, entry, groups, drained, view, action) {
  const l = entry ? entry.load : null;
  const none = view.observed ? "no counters" : "no active plan";
  const ab = l ? (entry.forward ? l.gbps_ab : l.gbps_ba) : null;
  const ba = l ? (entry.forward ? l.gbps_ba : l.gbps_ab) : null;
  const cap = link.capacity_gbps ?? 100;
  const users = [...(groups.get(`${link.a}:${link.a_port}`) || []), ...(groups.get(`${link.b}:${link.b_port}`) || [])];
  return h("div", { class: "link-info" },
    h("h3", {}, `${link.a}:${link.a_port} ↔ ${link.b}:${link.b_port}`),
    drained ? h("p", {}, badge("drained", "drained")) : null,
    view.observed && l && l.stale ? h("p", {}, badge("stale", "stale"),
      ` no fresh counters (the last sample is ${fmt(l.age_s, 0)} s old): the load shown is the last one measured`)
      : null,
    h("p", { class: "muted" }, view.observed ? `observed over the last ${OBSERVED_WINDOW_S} s` : "planned (active plan)"),
    h("dl", {},
      h("dt", {}, "capacity"), h("dd", { class: "capacity" }, `${fmt(cap)} Gb/s each way`),
      h("dt", {}, `${link.a} → ${link.b}`), h("dd", {}, l ? `${fmt(ab, 2)} Gb/s (${pct(ab / cap)})` : none),
      h("dt", {}, `${link.b} → ${link.a}`), h("dd", {}, l ? `${fmt(ba, 2)} Gb/s (${pct(ba / cap)})` : none),
      h("dt", {}, "utilization"), h("dd", {}, l ? pct(l.utilization) : "–"),
      link.metric !== undefined ? [h("dt", {}, "metric"), h("dd", {}, fmt(link.metric))] : null),
    users.length
      ? [h("h4", {}, `nexthop groups using it (${users.length})`),
        table(["device", "group", "weight", "routes"], users.slice(0, 40).map((u) => [
          h("a", { href: `#/device/${encodeURIComponent(u.device)}` }, u.device), u.group,
          `${u.weight}/${u.total}`, `${u.routes.length}${u.routes.length ? ": " + u.routes.slice(0, 3).join(", ") : ""}`
            + (u.routes.length > 3 ? "…" : "")]), { class: "compact" }),
        users.length > 40 ? h("p", {}, `… and ${users.length - 40} more`) : null]
      : h("p", { class: "muted" }, l ? "no nexthop group uses it" : ""),
    action);
}

/** The last hour of a link's measured load (kept across restarts), under its details. */
async function showHistory(details, key) {
  const box = h("div", { class: "link-history" }, h("h4", {}, "the last hour"), h("p", { class: "muted" }, "loading…"));
  details.append(box);
  try {
    const history = await api(`/v1/telemetry/links/${encodeURIComponent(key)}/history?window_s=${HISTORY_WINDOW_S}`);
    clear(box).append(h("h4", {}, "the last hour"), historyChart(history));
  } catch (e) {
    clear(box).append(h("p", { class: "muted" }, `no history: ${e.message}`));
  }
}

function legend(hasLoads, view) {
  const stops = [0, 0.25, 0.5, 0.75, 1].map((u) => h("span", { class: "swatch", style: `background:${utilColour(u)}` }, pct(u)));
  return h("div", { class: "legend", id: "legend" },
    h("strong", {}, view.observed ? "observed utilization " : "planned utilization "),
    hasLoads ? stops : h("span", { class: "swatch", style: "background:#9aa0a6" },
      view.observed ? "no counters yet" : "no active plan"),
    h("span", { class: "swatch drained-swatch" }, "drained"),
    view.observed ? h("span", { class: "swatch stale-swatch" }, "stale") : null);
}

const PATTERN_LABEL = { ring_allreduce: "ring all-reduce", all_to_all: "all-to-all", pipeline: "pipeline",
  incast: "incast", background: "background" };

/** The communication groups of the measured traffic (GET /v1/telemetry/patterns), or a note when none. */
function patternsCard(patterns) {
  const groups = patterns ? patterns.groups : [];
  return h("section", { class: "card", id: "patterns" },
    h("h2", {}, "Traffic patterns"),
    !patterns ? h("p", { class: "muted" }, "no measured traffic to classify yet")
      : !groups.length ? h("p", { class: "muted" }, `no traffic between ToRs over the last ${patterns.window_s} s`)
        : table(["pattern", "collective", "job", "members", "confidence", "Gb/s", "period"], groups.map((g) => [
          h("span", { class: `pattern ${g.pattern}` }, PATTERN_LABEL[g.pattern] || g.pattern),
          g.collective ? [g.collective, ...(g.alternatives || [])].join(" / ") : "–",
          g.jobs && g.jobs.length ? g.jobs.join(", ") : "–",
          g.members.length > 8 ? `${g.members.slice(0, 8).join(", ")} … (${g.members.length})` : g.members.join(", "),
          pct(g.confidence), fmt(g.gbps, 2), g.period_s == null ? "–" : `${fmt(g.period_s, 0)} s`]),
        { class: "compact" }),
    patterns ? h("p", { class: "muted" }, `over the last ${patterns.window_s} s (${patterns.method})`) : null);
}

/** Planned (the active plan's loads) or observed (the switches' counters, GET /v1/telemetry/links). */
function viewToggle(view) {
  const link = (label, href, on, id) => h("a", { href, id, class: `toggle${on ? " on" : ""}`, "aria-pressed": on }, label);
  return h("div", { class: "view-toggle", id: "view-toggle" },
    link("planned", "#/fabric", !view.observed, "view-planned"),
    link("observed", "#/fabric?view=observed", view.observed && !view.jobs, "view-observed"),
    link("jobs", "#/fabric?view=jobs", view.jobs, "view-jobs"));
}

export async function renderFabric(main, ctx) {
  main.append(h("p", { class: "muted" }, "loading the fabric…"));
  // the jobs view colours links as the observed one does, and marks a selected job on top
  const view = { observed: ["observed", "jobs"].includes(ctx.params.get("view")), jobs: ctx.params.get("view") === "jobs" };
  const [{ status, plan, intent, revision, active, previewed }, observed, patterns, links, devices] = await Promise.all([
    loadFabric(ctx.params.get("plan") === "head"),
    view.observed ? maybe(`/v1/telemetry/links?window_s=${OBSERVED_WINDOW_S}`) : null,
    view.observed && !view.jobs ? maybe(`/v1/telemetry/patterns?window_s=${OBSERVED_WINDOW_S}`).catch(() => null) : null,
    maybe("/v1/state/links").catch(() => null), maybe("/v1/state/devices").catch(() => null)]);
  if (!ctx.alive()) return;
  // the operational state: links down and switches whose agent does not answer, redrawn on their events
  const down = new Set(((links && links.links) || []).filter((l) => l.oper === "down").map((l) => l.id));
  const unreachable = new Set(((devices && devices.devices) || []).filter((d) => d.agent === "unreachable"
    && d.last_seen).map((d) => d.name));
  const stop = followEvents((kind) => {  // the page is drawn again on a state change, instead of polling
    if (!ctx.alive()) { stop(); return; }
    if (/^(link|device|reaction)\./.test(kind)) {
      stop();
      window.dispatchEvent(new HashChangeEvent("hashchange"));
    }
  });
  window.addEventListener("hashchange", stop, { once: true });  // leaving the page ends the stream
  clear(main);
  if (!intent) {
    main.append(message("The store has no intent yet: PUT /v1/intent, or start with loom serve --example.", "info"));
    return;
  }
  const dr = drains(intent);
  const byEnd = loadIndex(view.observed ? observed : plan);
  const groups = groupIndex(plan);
  const lay = layout(intent.devices, intent.routing);
  const stale = view.observed && observed ? observed.links.filter((l) => l.stale).length : 0;
  const summary = plan ? plan.summary || {} : null;
  main.append(h("div", { class: "page-head" },
    h("h1", {}, `Fabric ${intent.name}`),
    h("span", { class: "muted", id: "fabric-revision" },
      previewed ? `plan of head revision r${revision} (compiled, not committed)`
        : plan ? `active plan of revision r${active}` : `revision r${revision ?? "?"} · `),
    plan ? null : [h("span", { class: "badge none", id: "no-plan" }, "no active plan"), " ",
      h("a", { href: "#/fabric?plan=head", id: "preview-plan" }, "show the head revision's plan")],
    previewed ? h("span", { class: "badge reviewed", id: "preview" }, "preview") : null,
    summary ? h("span", { class: "muted", id: "plan-summary" },
      ` · max utilization ${pct(summary.max_utilization)} (ECMP would be ${pct(summary.ecmp_max_utilization)}) · `
      + `${summary.groups ?? "?"} groups · ${summary.routes ?? "?"} routes`) : null,
    view.observed ? h("span", { class: "muted", id: "observed-summary" }, observed
      ? ` · observed: ${observed.links.length} links measured over ${observed.window_s} s, ${stale} stale`
      : " · observed: no telemetry from the switches yet") : null,
    status && status.committing_change
      ? h("a", { class: "badge committing", href: `#/changes/${status.committing_change}` }, "commit in progress") : null));
  main.append(viewToggle(view), legend(view.observed ? !!(observed && observed.links.length) : !!plan, view));
  if (view.observed && !view.jobs) main.append(patternsCard(patterns));
  const jobsSlot = view.jobs ? h("div", { id: "jobs-slot" }) : null;
  if (jobsSlot) main.append(jobsSlot);

  // at least ~16 px a switch on screen: a large fabric scrolls sideways rather than shrinking to dots
  const shown = Math.max(Math.max(600, (main.clientWidth || 1400) - 380), lay.wide * 16 + 120);
  const k = lay.width / shown;  // viewBox units per screen pixel: text keeps its size on screen
  const svg = s("svg", { id: "fabric", class: "fabric", viewBox: `0 0 ${lay.width} ${lay.height}`,
    width: lay.width, height: lay.height, style: `width:${shown}px; font-size:${12 * k}px`,
    preserveAspectRatio: "xMidYMin meet", role: "img", "aria-label": `topology of ${intent.name}` });
  for (const [tier, y] of lay.rows) svg.append(s("text", { x: 8, y: y - 28, class: "tier", "font-size": 13 * k }, TIER_LABEL[tier]));
  for (const b of lay.bands || []) {
    if (b.pod !== Infinity) svg.append(s("text", { x: (b.x0 + b.x1) / 2, y: lay.height - 8, class: "pod", "font-size": 12 * k }, `pod ${b.pod}`));
  }
  const tip = h("div", { class: "tooltip", id: "tooltip", hidden: true });
  const details = h("aside", { class: "details card", id: "details" },
    h("p", { class: "muted" }, "Hover a link for its load; click it to keep its details here. Click a switch for its routes."));
  const linkLayer = s("g", { class: "links" });
  const nodeLayer = s("g", { class: "nodes" });
  const small = lay.width / Math.max(1, intent.devices.length) < 40;
  for (const link of intent.links) {
    const p = lay.pos.get(link.a);
    const q = lay.pos.get(link.b);
    if (!p || !q) continue;
    const entry = byEnd.get(`${link.a}:${link.a_port}`) || byEnd.get(`${link.b}:${link.b_port}`);
    const drained = dr.ends.has(`${link.a}:${link.a_port}`) || dr.ends.has(`${link.b}:${link.b_port}`);
    const u = entry ? entry.load.utilization : null;
    const isStale = !!(view.observed && entry && entry.load.stale);
    const id = `${link.a}:${link.a_port}`;
    const isDown = down.has([`${link.a}:${link.a_port}`, `${link.b}:${link.b_port}`].sort()[0]);  // its id: the lower end
    const g = s("g", { class: `link${drained ? " drained" : ""}${isStale ? " stale" : ""}${isDown ? " down" : ""}`, "data-link": id,
      "data-key": [`${link.a}:${link.a_port}`, `${link.b}:${link.b_port}`].sort()[0],
      "data-utilization": u ?? "" },
      s("line", { x1: p.x, y1: p.y, x2: q.x, y2: q.y, class: "wire",
        stroke: isDown ? "#d93025" : drained || isStale ? "#9aa0a6" : utilColour(u), "stroke-width": 2 + 2 * Math.min(1, (link.capacity_gbps ?? 100) / 400) }),
      s("line", { x1: p.x, y1: p.y, x2: q.x, y2: q.y, class: "hit" }));
    if (drained) svg.append(s("text", { x: (p.x + q.x) / 2, y: (p.y + q.y) / 2, class: "drain-label" }, "drained"));
    if (isDown) svg.append(s("text", { x: (p.x + q.x) / 2, y: (p.y + q.y) / 2 + 14 * k, class: "down-label" }, "down"));
    const info = () => linkInfo(link, entry, groups, drained, view,
      drainButton(ctx, intent, revision, `${link.a}:${link.a_port}`, drained));
    g.addEventListener("mousemove", (ev) => {
      clear(tip).append(info());
      tip.hidden = false;
      tip.style.left = `${ev.pageX + 14}px`;
      tip.style.top = `${ev.pageY + 14}px`;
    });
    g.addEventListener("mouseleave", () => { tip.hidden = true; });
    g.addEventListener("click", () => {
      for (const el of svg.querySelectorAll(".link.selected")) el.classList.remove("selected");
      g.classList.add("selected");
      clear(details).append(info());
      if (view.observed) showHistory(details, [`${link.a}:${link.a_port}`, `${link.b}:${link.b_port}`].sort()[0]);
    });
    linkLayer.append(g);
  }
  for (const d of intent.devices) {
    const p = lay.pos.get(d.name);
    const drained = dr.devices.has(d.name);
    const r = small ? 7 : 13;
    const lost = unreachable.has(d.name);
    const node = s("g", { class: `node ${d.role}${drained ? " drained" : ""}${lost ? " unreachable" : ""}`, "data-device": d.name,
      transform: `translate(${p.x},${p.y})`, tabindex: 0 },
    s("title", {}, `${d.name} (${d.role}${d.pod !== undefined && d.pod !== null ? ", pod " + d.pod : ""}`
      + `${d.plane !== undefined && d.plane !== null ? ", plane " + d.plane : ""})${drained ? " — drained" : ""}`
      + `${lost ? " — agent unreachable" : ""}`),
    s("rect", { x: -r * 1.6, y: -r, width: r * 3.2, height: r * 2, rx: 4 }),
    small ? null : s("text", { y: r + 14, class: "label" }, d.name),
    drained ? s("text", { y: -r - 6, class: "drain-label" }, "drained") : null);
    const open = () => { location.hash = `#/device/${encodeURIComponent(d.name)}`; };
    node.addEventListener("click", open);
    node.addEventListener("keydown", (ev) => { if (ev.key === "Enter") open(); });
    nodeLayer.append(node);
  }
  svg.append(linkLayer, nodeLayer);
  main.append(h("div", { class: "fabric-wrap" }, h("div", { class: "fabric-box card" }, svg), details), tip);
  if (jobsSlot) jobsSlot.replaceWith(await jobsCard(intent, svg, details));
  const drainedList = [...dr.devices, ...dr.ends];
  main.append(h("p", { class: "muted", id: "drained-list" },
    drainedList.length ? `drained: ${drainedList.join(", ")}` : "nothing drained"));
  main.append(h("p", { class: "muted", id: "state-list" },
    down.size || unreachable.size ? `down: ${[...down].join(", ") || "no link"}; unreachable: ${[...unreachable].join(", ") || "no switch"}`
      : "every link up, every agent answering (as the switches report)"));
}

function nexthops(hops) {
  const total = hops.reduce((a, x) => a + x.weight, 0);
  return hops.map((x) => `${x.neighbor} via ${x.port} ×${x.weight} (${pct(x.weight / total)})`).join(" · ");
}

async function reportedState(name) {
  try {
    return { state: await api(`/v1/devices/${encodeURIComponent(name)}/state`) };
  } catch (e) {
    if (!(e instanceof ApiError)) throw e;
    if (e.status === 503) return { note: `unreachable: ${e.problem.detail || "the agent does not answer"}`, kind: "error" };
    return { note: e.status === 404 ? "no reported state (no agent known for this switch)" : e.message, kind: "info" };
  }
}

function stateView(state) {
  const out = [];
  const hash = state.running_hash || state.config_hash;
  if (hash) out.push(h("p", {}, "running config hash ", h("code", {}, hash)));
  const routes = state.routes || {};
  const rows = Array.isArray(routes)
    ? routes.map((r) => [r.prefix, (r.nexthops || r.paths || []).map((x) => `${x.port ?? x.via ?? "?"} ×${x.weight ?? 1}`).join(" · ")])
    : Object.entries(routes).map(([p, hops]) => [p, (Array.isArray(hops) ? hops : [hops])
      .map((x) => (typeof x === "object" ? `${x.port ?? x.via ?? "?"} ×${x.weight ?? 1}` : String(x))).join(" · ")]);
  if (rows.length) out.push(h("h3", {}, "installed routes"), table(["prefix", "next hops (weight)"], rows, { class: "compact" }));
  const sessions = state.sessions || state.bgp_sessions || state.bgp || [];
  const srows = Array.isArray(sessions) ? sessions.map((x) => [x.neighbor ?? x.peer ?? "?", x.state ?? "?", fmt(x.prefixes_received ?? x.prefixes ?? "")])
    : Object.entries(sessions).map(([k, v]) => [k, typeof v === "object" ? (v.state ?? JSON.stringify(v)) : String(v), ""]);
  if (srows.length) out.push(h("h3", {}, "BGP sessions"), table(["neighbor", "state", "prefixes"], srows, { class: "compact" }));
  if (!out.length) out.push(h("pre", {}, JSON.stringify(state, null, 2)));
  return out;
}

export async function renderDevice(main, name, ctx) {
  const [fabric, drift, st] = await Promise.all([loadFabric(), maybe("/v1/drift"), reportedState(name)]);
  if (!ctx.alive()) return;
  const { plan, intent } = fabric;
  const dev = intent && intent.devices.find((d) => d.name === name);
  if (!dev) {
    main.append(message(`No switch named ${name} in this fabric.`, "error"));
    return;
  }
  const dr = drains(intent);
  const byEnd = loadIndex(plan);
  main.append(h("div", { class: "page-head" },
    h("a", { href: "#/fabric" }, "← fabric"), h("h1", { id: "device-name" }, name), badge(dev.role, "role"),
    dr.devices.has(name) ? badge("drained", "drained") : null));
  main.append(drainButton(ctx, intent, fabric.revision, name, dr.devices.has(name)) || "");
  const attrs = ["pod", "plane", "asn", "loopback", "max_ecmp_entries"].filter((k) => dev[k] !== undefined && dev[k] !== null);
  main.append(h("dl", { class: "attrs" }, attrs.map((k) => [h("dt", {}, k), h("dd", {}, String(dev[k]))])));

  const dstate = drift && drift.devices ? drift.devices[name] : null;
  main.append(h("section", { class: "card", id: "drift" }, h("h2", {}, "Drift"),
    dstate ? [badge(dstate.status, dstate.status), (dstate.details || []).length
      ? h("ul", {}, dstate.details.map((d) => h("li", {}, d))) : h("span", { class: "muted" }, " no differences"),
    h("p", { class: "muted" }, `checked ${drift.checked_at || "?"} against revision r${drift.active_revision ?? "–"}`)]
      : h("p", { class: "muted" }, "no drift report for this switch")));

  const links = intent.links.filter((l) => l.a === name || l.b === name).map((l) => {
    const mine = l.a === name ? [l.a_port, l.b, l.b_port] : [l.b_port, l.a, l.a_port];
    const e = byEnd.get(`${name}:${mine[0]}`);
    const cap = l.capacity_gbps ?? 100;
    const out = e ? (e.forward ? e.load.gbps_ab : e.load.gbps_ba) : null;
    const inn = e ? (e.forward ? e.load.gbps_ba : e.load.gbps_ab) : null;
    const drained = dr.ends.has(`${l.a}:${l.a_port}`) || dr.ends.has(`${l.b}:${l.b_port}`);
    return [mine[0], h("a", { href: `#/device/${encodeURIComponent(mine[1])}` }, `${mine[1]}:${mine[2]}`), fmt(cap),
      out === null ? "–" : fmt(out, 2), inn === null ? "–" : fmt(inn, 2), e ? pct(e.load.utilization) : "–",
      drained ? badge("drained", "drained") : ""];
  });
  main.append(h("section", { class: "card" }, h("h2", {}, "Links"),
    table(["port", "neighbor", "capacity Gb/s", "out Gb/s", "in Gb/s", "utilization", ""], links, { class: "compact" })));

  const dp = plan && plan.devices ? plan.devices[name] : null;
  const planSec = h("section", { class: "card", id: "routes" }, h("h2", {}, "Routes, groups and weights (active plan)"));
  if (!dp) planSec.append(h("p", { class: "muted" }, plan ? "the plan has no routes here" : "no active plan"));
  else {
    const routes = Object.entries(dp.routes || {}).sort(([a], [b]) => a.localeCompare(b));
    planSec.append(table(["prefix", "group", "next hops"], routes.slice(0, 500).map(([p, g]) => [p, g, nexthops(dp.groups[g] || [])]),
      { class: "compact" }));
    if (routes.length > 500) planSec.append(h("p", {}, `… ${routes.length - 500} more routes`));
    planSec.append(h("h3", {}, "groups"), table(["group", "routes", "next hops"],
      Object.entries(dp.groups || {}).map(([g, hops]) => [g, String(routes.filter(([, x]) => x === g).length), nexthops(hops)]),
      { class: "compact" }));
  }
  main.append(planSec);
  main.append(h("section", { class: "card", id: "state" }, h("h2", {}, "Reported state"),
    st.state ? stateView(st.state) : message(st.note, st.kind)));
}

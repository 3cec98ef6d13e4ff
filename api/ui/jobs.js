// The Fabric page's Jobs view (#/fabric?view=jobs): the intent's ML jobs with what the network does to them
// (GET /v1/jobs/{name}/performance: measured against expected rate, iteration period, slowdown, bottlenecks).
// Selecting a job marks its members and the links its traffic is slowest on, and shows its history
// (GET /v1/jobs/{name}/history: its rate per interval and its insight events) beside the topology.

import { h, clear, fmt, pct, table, badge, when } from "./util.js";
import { api, maybe } from "./api.js";
import { rateChart } from "./charts.js";

const WINDOW_S = 300;
const MAX_JOBS = 40;  // the performance of this many jobs is read when the view opens

function slowdownBadge(x) {
  if (x === null || x === undefined) return h("span", { class: "muted" }, "–");
  return badge(`×${fmt(x, 2)}`, x >= 1.5 ? "unsafe" : x >= 1.1 ? "reviewed" : "safe");
}

function select(svg, job, perf) {
  for (const el of svg.querySelectorAll(".job-member, .job-path")) el.classList.remove("job-member", "job-path");
  svg.classList.add("job-selected");
  for (const m of job.tors) {
    const node = svg.querySelector(`g.node[data-device="${CSS.escape(m)}"]`);
    if (node) node.classList.add("job-member");
  }
  for (const b of (perf && perf.bottlenecks) || []) {
    const link = svg.querySelector(`g.link[data-key="${CSS.escape(b.link)}"]`);
    if (link) link.classList.add("job-path");
  }
}

async function details(box, job, perf) {
  clear(box).append(h("div", { class: "job-info", id: "job-info" },
    h("h3", {}, job.name),
    h("p", { class: "muted" }, `${job.collective} over ${job.tors.length} ToRs: ${job.tors.join(", ")}`),
    perf ? h("dl", {},
      h("dt", {}, "measured"), h("dd", {}, perf.measured_gbps === null ? "–" : `${fmt(perf.measured_gbps, 2)} Gb/s`),
      h("dt", {}, "expected"), h("dd", {}, `${fmt(perf.expected_gbps, 2)} Gb/s`),
      h("dt", {}, "period"), h("dd", {}, perf.period_s === null ? "–" : `${fmt(perf.period_s, 2)} s (declared ${fmt(perf.iter_s, 2)} s)`),
      h("dt", {}, "communication"), h("dd", {}, perf.comm_s === null ? "–"
        : `${fmt(perf.comm_s, 3)} s per iteration (idle fabric ${fmt(perf.comm_s_idle, 3)} s)`),
      h("dt", {}, "slowdown"), h("dd", {}, slowdownBadge(perf.slowdown))) : null,
    perf && perf.bottlenecks.length ? table(["link", "utilization", "job's share"], perf.bottlenecks.map((b) =>
      [b.link, b.utilization === null ? "–" : pct(b.utilization), b.job_share === null ? "–" : pct(b.job_share)]),
    { class: "compact", id: "job-bottlenecks" }) : null,
    perf ? Object.entries(perf.reasons || {}).map(([k, v]) => h("p", { class: "muted" }, `${k}: ${v}`)) : null,
    h("h4", {}, "history"), h("p", { class: "muted", id: "job-history-note" }, "loading…")));
  try {
    const hist = await api(`/v1/jobs/${encodeURIComponent(job.name)}/history`);
    const note = box.querySelector("#job-history-note");
    if (!note) return;  // another job was selected meanwhile
    note.replaceWith(
      hist.method ? rateChart(hist) : h("p", { class: "muted" }, "no per-prefix counters from its members: no rate history"),
      hist.events.length ? table(["when", "event", "evidence"], hist.events.map((e) => [when(e.at),
        `${e.kind}${e.data.cleared ? " (cleared)" : ""}`, e.data.evidence]), { class: "compact", id: "job-events" })
        : h("p", { class: "muted", id: "job-events" }, `no insight event in the last ${Math.round(hist.window_s / 60)} min`));
  } catch (e) {
    const note = box.querySelector("#job-history-note");
    if (note) note.textContent = `no history: ${e.message}`;
  }
}

/** The jobs card; ``svg`` is the topology it marks, ``box`` the details aside it fills. */
export async function jobsCard(intent, svg, box) {
  const jobs = (intent.jobs || []).slice().sort((a, b) => a.name.localeCompare(b.name));
  const card = h("section", { class: "card", id: "jobs" }, h("h2", {}, "Jobs"));
  if (!jobs.length) {
    card.append(h("p", { class: "muted" }, "the intent declares no ML job (kind jobs); GET /v1/jobs/discovered offers the ones the counters show"));
    return card;
  }
  const perfs = await Promise.all(jobs.slice(0, MAX_JOBS).map((j) =>
    maybe(`/v1/jobs/${encodeURIComponent(j.name)}/performance?window_s=${WINDOW_S}`).catch(() => null)));
  const rows = jobs.map((j, i) => {
    const p = perfs[i] || null;
    const tr = h("tr", { class: "job", "data-job": j.name, tabindex: 0 },
      h("td", {}, j.name), h("td", {}, j.collective), h("td", {}, String(j.tors.length)),
      h("td", {}, p && p.measured_gbps !== null ? fmt(p.measured_gbps, 2) : "–"), h("td", {}, p ? fmt(p.expected_gbps, 2) : "–"),
      h("td", {}, p && p.period_s !== null ? `${fmt(p.period_s, 2)} s` : "–"), h("td", {}, slowdownBadge(p ? p.slowdown : null)));
    const pick = () => {
      for (const el of card.querySelectorAll("tr.job.selected")) el.classList.remove("selected");
      tr.classList.add("selected");
      select(svg, j, p);
      details(box, j, p);
    };
    tr.addEventListener("click", pick);
    tr.addEventListener("keydown", (ev) => { if (ev.key === "Enter") pick(); });
    return tr;
  });
  const head = ["job", "collective", "members", "measured Gb/s", "expected Gb/s", "period", "slowdown"];
  card.append(h("table", { class: "compact" }, h("thead", {}, h("tr", {}, head.map((c) => h("th", {}, c)))), h("tbody", {}, rows)),
    h("p", { class: "muted" }, `over the last ${WINDOW_S} s; click a job to mark its members and its slowest links`));
  return card;
}

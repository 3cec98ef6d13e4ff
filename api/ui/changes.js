// The Changes pages: the list with states, and a change's review (verdict first, failing scenarios, hottest
// links before and after, the utilization histogram, per-device config diffs), with Review, Commit,
// Force-with-reason and Rollback for operators and per-device progress while a commit runs.

import { h, clear, fmt, pct, when, table, badge, message, diffBlock } from "./util.js";
import { api, maybe, ApiError } from "./api.js";
import { histogram } from "./charts.js";

const STATES = ["draft", "reviewed", "committing", "committed", "failed", "rolled_back"];
const PAGE = 50;

export async function renderChanges(main, ctx, target = main) {
  const state = ctx.params.get("state") || "";
  const offset = Number(ctx.params.get("offset") || 0);
  const q = new URLSearchParams({ limit: PAGE, offset });
  if (state) q.set("state", state);
  let page;
  try {
    page = await api(`/v1/changes?${q}`);
  } catch (e) {
    if (e instanceof ApiError && e.status === 404) {
      main.append(message("This controller has no change workflow (/v1/changes) yet.", "info"));
      return;
    }
    throw e;
  }
  if (!ctx.alive()) return;
  const link = (o, st) => `#/changes?${new URLSearchParams({ ...(st ? { state: st } : {}), offset: o })}`;
  main.append(h("div", { class: "page-head" }, h("h1", {}, "Changes"),
    h("span", { class: "filters" }, h("a", { href: link(0, ""), class: state ? "" : "active" }, "all"),
      STATES.map((st) => [" · ", h("a", { href: link(0, st), class: state === st ? "active" : "" }, st.replace("_", " "))]))));
  const auto = await autoTeStrip(ctx, () => renderAgain(target, ctx));
  if (!ctx.alive()) return;
  if (auto) main.append(auto);
  if (!page.items.length) {
    main.append(message(state ? `No ${state} changes.` : "No changes yet: POST /v1/changes proposes one.", "info"));
    return;
  }
  main.append(table(["change", "state", "message", "author", "base", "proposed", "verdict", "created"],
    page.items.map((c) => h("tr", { "data-change": c.id },
      h("td", {}, h("a", { href: `#/changes/${c.id}` }, `#${c.id}`)), h("td", {}, badge(c.state)),
      h("td", {}, c.message || ""), h("td", { class: "author" }, authorCell(c)), h("td", {}, `r${c.base_revision}`),
      h("td", {}, c.proposed_revision ? `r${c.proposed_revision}` : "–"),
      h("td", {}, c.review ? badge(c.review.verdict) : "–"), h("td", {}, when(c.created_at)))),
    { id: "changes", class: "list" }));
  main.append(h("p", { class: "pager" },
    offset > 0 ? h("a", { href: link(Math.max(0, offset - PAGE), state) }, "← newer") : null, " ",
    `${offset + 1}–${offset + page.items.length} of ${page.total}`, " ",
    page.next ? h("a", { href: link(offset + PAGE, state) }, "older →") : null));
}

/** Draw the list again into ``target`` (the page's container: a redraw renders off-screen, then swaps). */
async function renderAgain(target, ctx) {
  const fresh = h("div");
  await renderChanges(fresh, ctx, target);
  if (ctx.alive()) target.replaceChildren(...fresh.childNodes);
}

/** Who made the change; for auto-te, the predicted maximum utilization it moved (active -> re-tuned). */
function authorCell(c) {
  if (c.author !== "auto-te" || !c.trigger) return c.author || "";
  const t = c.trigger;
  return h("span", {}, h("span", { class: "badge auto-te" }, "auto-te"), " ",
    h("span", { class: "muted", title: "predicted max utilization under the measured demand: active plan → re-tuned" },
      `${pct(t.active_predicted)} → ${pct(t.candidate_predicted)}`));
}

/** The automatic re-tuning's state above the list, with pause/resume for operators (none without /v1/auto-te). */
async function autoTeStrip(ctx, rerender) {
  const st = await maybe("/v1/auto-te");
  if (!st || !st.policy) return null;
  const last = (st.decisions || [])[0];
  const state = !st.enabled ? "disabled by the policy" : st.paused
    ? `paused by ${st.paused_by}${st.pause_reason ? `: ${st.pause_reason}` : ""}` : (st.running ? "running" : "not running here");
  const box = h("section", { class: `card auto-te ${st.paused ? "paused" : ""}`, id: "auto-te" },
    h("strong", {}, "Automatic re-tuning: "), h("span", { id: "auto-te-state" }, state),
    h("span", { class: "muted" }, ` · every ${st.policy.interval_s} s on the ${st.policy.stat} of ${st.policy.window_s} s`
      + ` × ${st.policy.headroom}, min gain ${st.policy.min_gain}`),
    last ? h("div", { class: "muted", id: "auto-te-last" }, `last: ${last.decision} (${last.reason}) ${when(last.at)}: ${last.detail}`) : null);
  if (ctx.canOperate && st.enabled) {
    const path = st.paused ? "/v1/auto-te/resume" : "/v1/auto-te/pause";
    box.append(h("button", { id: "auto-te-toggle", class: st.paused ? "primary" : "danger",
      onclick: async (ev) => {
        ev.preventDefault();
        ev.target.disabled = true;
        await api(path, { method: "POST", body: { reason: "from the web UI" } });
        await rerender();
      } }, st.paused ? "Resume" : "Pause"));
  }
  return box;
}

/** What made auto-te propose the change: the measured demand and both plans' predictions under it. */
function triggerSection(t) {
  return h("section", { class: "card", id: "trigger" }, h("h2", {}, "Triggered by measured traffic"),
    table(["", "value"], [
      ["measured demand", `${t.demands} entries, ${fmt(t.measured_gbps)} Gb/s (${t.stat} over ${t.window_s} s, ${t.method})`],
      ["headroom", `× ${t.headroom}`],
      ["observed max utilization (counters)", t.observed === null ? "–" : pct(t.observed)],
      [`predicted, active plan r${t.active_revision}`, pct(t.active_predicted)],
      ["predicted, re-tuned plan", pct(t.candidate_predicted)],
      ["gain", `${(t.gain * 100).toFixed(1)} pt (min ${(t.min_gain * 100).toFixed(1)} pt)`]], { class: "compact" }));
}

function linkId(l) {
  return l.id ?? l.link ?? `${l.a}:${l.a_port}`;
}

function hottest(links) {
  const rows = [...links].sort((a, b) => Math.max(b.before ?? 0, b.after ?? 0) - Math.max(a.before ?? 0, a.after ?? 0));
  return rows.slice(0, 10).map((l) => {
    const delta = (l.after ?? 0) - (l.before ?? 0);
    const moved = Math.abs(delta) >= 0.0005;
    return [linkId(l), pct(l.before), pct(l.after),
      h("span", { class: moved ? (delta > 0 ? "up" : "down") : "" },
        moved ? `${delta > 0 ? "+" : "−"}${Math.abs(delta * 100).toFixed(1)} pt` : "±0.0 pt")];
  });
}

async function histogramSection(review) {
  const sec = h("section", { class: "card", id: "histogram-card" }, h("h2", {}, "Link utilization, before and after"));
  const [before, after] = await Promise.all([
    review.active_revision ? maybe(`/v1/plans/${review.active_revision}`) : null,
    review.proposed_revision ? maybe(`/v1/plans/${review.proposed_revision}`) : null]);
  let b, a, note;
  if (after) {
    a = (after.links || []).map((l) => l.utilization);
    b = before ? (before.links || []).map((l) => l.utilization) : [];
    note = before ? "every link of the active and the proposed plan (baseline, no failure)"
      : "no active plan: the proposed plan alone";
  } else {
    const links = review.links || [];
    b = links.filter((l) => l.before !== null && l.before !== undefined).map((l) => l.before);
    a = links.filter((l) => l.after !== null && l.after !== undefined).map((l) => l.after);
    note = "the links whose utilization the change moves";
  }
  sec.append(histogram([{ label: "before", values: b, colour: "#7f8fa6" }, { label: "after", values: a, colour: "#e8772e" }]),
    h("p", { class: "muted" }, note));
  return sec;
}

function verdictBlock(review) {
  const sf = review.safety || {};
  const c = sf.counts || {};
  const safe = review.verdict === "safe";
  return h("section", { class: `verdict ${safe ? "safe" : "unsafe"}`, id: "verdict" },
    h("div", { class: "big" }, safe ? "SAFE" : "UNSAFE"),
    h("div", {}, `${c.scenarios ?? "?"} scenarios replayed (${sf.scope ?? "?"}), ${c.failing_scenarios ?? (sf.failing || []).length} failing`,
      sf.limits ? ` · utilization limits ${pct(sf.limits.baseline)} baseline, ${pct(sf.limits.failure)} under failure` : "",
      review.summary && review.summary.max_utilization !== undefined
        ? ` · proposed max utilization ${pct(review.summary.max_utilization)}` : ""));
}

function stepsDone(d) {
  // "prepare ✓ commit ✓ verify …": the steps this device finished, then the one under way
  const done = Object.entries(d.steps || {}).map(([step, st]) => `${step} ${st === "ok" ? "✓" : "✗"}`);
  if (d.status === "pending" || !done.length) done.push(`${d.step || "?"} …`);
  return done.join(" ");
}

function progressSection(change) {
  const p = change.progress;
  const sec = h("section", { class: "card", id: "progress" }, h("h2", {}, "Commit progress"));
  if (!p) {
    sec.append(h("p", { class: "muted" }, change.state === "committing" ? "starting…" : "not committed"));
    return sec;
  }
  const devs = Object.entries(p.devices || {}).sort(([a], [b]) => a.localeCompare(b));
  const done = devs.filter(([, d]) => d.status !== "pending").length;
  sec.append(h("p", {}, `step: `, h("strong", { id: "progress-step" }, p.step || "?"), ` · ${done}/${devs.length} devices`),
    h("progress", { max: Math.max(1, devs.length), value: done }),
    table(["device", "step", "status", "changed", "error"], devs.map(([name, d]) => h("tr", { "data-device": name },
      h("td", {}, name), h("td", {}, stepsDone(d)), h("td", {}, badge(d.status)), h("td", {}, d.changed ? "yes" : "no"),
      h("td", { class: "error" }, d.error || ""))), { class: "compact", id: "progress-devices" }));
  return sec;
}

function actions(change, ctx, rerender) {
  const box = h("section", { class: "actions", id: "actions" });
  const err = h("p", { class: "msg error", id: "action-error" });
  if (!ctx.canOperate) {
    box.append(h("p", { class: "muted" }, "Read-only: an operator token can review, commit and roll back."));
    return box;
  }
  const run = (fn) => async (ev) => {
    ev.preventDefault();
    for (const b of box.querySelectorAll("button")) b.disabled = true;
    err.textContent = "";
    try {
      await fn();
    } catch (e) {
      const failing = e.problem && e.problem.failing ? ` (${e.problem.failing.length} failing scenario(s))` : "";
      err.textContent = (e.problem && (e.problem.detail || e.problem.title)) ? `${e.status}: ${e.problem.detail || e.problem.title}${failing}` : e.message;
      for (const b of box.querySelectorAll("button")) b.disabled = false;
    }
  };
  const review = change.review;
  if (change.state === "draft" || change.state === "reviewed") {
    box.append(h("button", { id: "review", class: change.review ? "secondary" : "primary",
      onclick: run(async () => { await api(`/v1/changes/${change.id}/review`, { method: "POST", body: {} }); await rerender(); }) },
    change.review ? "Review again" : "Review"));
  }
  if (change.state === "reviewed" && review) {
    const commit = (force, reason) => run(async () => {
      await api(`/v1/changes/${change.id}/commit`, { method: "POST", body: { force, reason } });
      await rerender();
    });
    const safe = review.verdict === "safe";
    box.append(h("button", { id: "commit", class: "primary", disabled: !safe, onclick: commit(false, null),
      title: safe ? "push the proposed plan to every switch" : "unsafe: force it with a reason" }, "Commit"));
    if (!safe) {
      const reason = h("input", { id: "force-reason", placeholder: "why commit despite the failing scenarios", size: 44 });
      const force = h("button", { id: "force", class: "danger" }, "Force commit");
      force.addEventListener("click", (ev) => {
        if (!reason.value.trim()) {
          ev.preventDefault();
          err.textContent = "A forced commit needs a reason (the audit log keeps it).";
          return;
        }
        commit(true, reason.value.trim())(ev);
      });
      box.append(h("span", { class: "force" }, reason, force));
    }
  }
  if (change.state === "committed") {
    box.append(h("button", { id: "rollback", class: "danger",
      title: `propose a change back to revision r${change.base_revision}`,
      onclick: run(async () => {
        const back = await api(`/v1/revisions/${change.base_revision}/rollback`, { method: "POST", body: {} });
        location.hash = `#/changes/${back.id}`;
      }) }, `Roll back to r${change.base_revision}`));
  }
  box.append(err);
  return box;
}

/** A change's page; while it commits, it is drawn again every 0.7 s with the devices' progress. */
export async function renderChange(main, id, ctx) {
  const rerender = async () => {
    if (!ctx.alive()) return;
    const fresh = h("div");
    const change = await build(fresh, id, ctx, rerender);
    if (!ctx.alive()) return;
    main.replaceChildren(...fresh.childNodes);
    window.dispatchEvent(new Event("loom:status"));
    if (change.state === "committing") setTimeout(() => rerender().catch(() => {}), 700);
  };
  await rerender();
}

async function build(main, id, ctx, rerender) {
  const change = await api(`/v1/changes/${id}`);
  const review = change.review;
  main.append(h("div", { class: "page-head" },
    h("a", { href: "#/changes" }, "← changes"), h("h1", {}, `Change #${change.id}`),
    h("span", { id: "change-state" }, badge(change.state)),
    h("span", { class: "muted" }, `${change.message || ""} · by ${change.author || "?"} · ${when(change.created_at)} · `
      + `base r${change.base_revision}${change.proposed_revision ? ` → proposed r${change.proposed_revision}` : ""}`)));
  if (change.trigger) main.append(triggerSection(change.trigger));
  if (review) main.append(verdictBlock(review));
  else main.append(message("Not reviewed yet: Review replays the proposed plan under every failure scenario.", "info"));
  main.append(actions(change, ctx, rerender));
  if (change.force_reason) main.append(message(`forced: ${change.force_reason}`, "warn"));
  if (change.error) main.append(message(`error: ${change.error}`, "error"));
  if (change.progress || change.state === "committing") main.append(progressSection(change));
  if (review) {
    const failing = (review.safety && review.safety.failing) || [];
    main.append(h("section", { class: "card", id: "failing" }, h("h2", {}, `Failing scenarios (${new Set(failing.map((f) => f.scenario)).size})`),
      failing.length ? table(["scenario", "stage", "invariant", "detail"],
        failing.slice(0, 200).map((f) => [f.scenario, f.stage, f.invariant, f.detail || ""]), { class: "compact" })
        : h("p", { class: "muted" }, "none: every scenario delivers all demand, loop-free, under the limits")));
    if (review.reaction) main.append(reactionSection(review.reaction, review.robustness));
    const grid = h("div", { class: "grid2" });
    grid.append(h("section", { class: "card", id: "hottest" }, h("h2", {}, "Hottest links, before and after"),
      (review.links || []).length ? table(["link", "before", "after", "change"], hottest(review.links), { class: "compact" })
        : h("p", { class: "muted" }, "no link changes utilization")));
    grid.append(await histogramSection(review));
    main.append(grid);
    const pd = review.plan_diff || [];
    if (pd.length) {
      main.append(h("section", { class: "card", id: "plan-diff" }, h("h2", {}, "Route changes"),
        table(["device", "added", "withdrawn", "re-weighted"], pd.slice(0, 100).map((d) => [
          h("a", { href: `#/device/${encodeURIComponent(d.device)}` }, d.device), fmt(d.added), fmt(d.removed), fmt(d.reweighted)]),
        { class: "compact" })));
    }
    const cd = Object.entries(review.config_diff || {}).sort(([a], [b]) => a.localeCompare(b));
    main.append(h("section", { class: "card", id: "config-diff" }, h("h2", {}, `Config diff (${cd.length} device(s))`),
      cd.length ? cd.map(([dev, text], i) => h("details", { open: i < 2 || null, "data-device": dev },
        h("summary", {}, dev), diffBlock(text))) : h("p", { class: "muted" }, "no switch config changes")));
  }
  main.append(h("section", { class: "card", id: "transitions" }, h("h2", {}, "History"),
    table(["state", "at", "by", "reason"], (change.transitions || []).map((t) => [badge(t.state), when(t.at), t.actor || "", t.reason || ""]),
      { class: "compact" })));
  return change;
}

// Each failure until the reaction (issue 30.5): what is black-holed or looped, for how long, and whether the
// reaction plan is safe; the worst losses first, then the reactions that are not safe (the rest are counted).
function reactionSection(rc, rb) {
  const c = rc.counts || {};
  const head = rc.enabled
    ? `detect ${fmt(rc.detect_s)} s + push ${fmt(rc.push_s)} s; ${fmt(c.scenarios || 0)} failure(s), `
      + `${fmt(c.unsafe_reactions || 0)} reaction plan(s) not safe, ${fmt(c.not_planned || 0)} not planned`
    : rc.note;
  const robust = rb ? `worst post-failure utilization ${pct(rb.failure_mlu)}`
    + (rb.failure_mlu_plain !== null && rb.failure_mlu_plain !== undefined
      ? ` (robust WCMP ${pct(rb.failure_mlu_robust)}, without it ${pct(rb.failure_mlu_plain)})` : "") : "";
  const rows = (rc.scenarios || []).filter((r) => r.lost_gbps > 0 || r.safe === false)
    .sort((a, b) => b.lost_gbps - a.lost_gbps || (a.safe === false ? -1 : 1)).slice(0, 50);
  const verdict = (r) => r.verdict ? badge(r.verdict.replace("_", " "), r.safe ? "safe" : "unsafe")
    : h("span", { class: "muted" }, r.plan.replace("_", " "));
  return h("section", { class: "card", id: "reaction" }, h("h2", {}, "Failure reaction"),
    h("p", { class: "muted" }, head), robust ? h("p", { class: "muted" }, robust) : "",
    rows.length ? table(["scenario", "black-holed Gb/s", "looped Gb/s", "until reaction s", "lost Gbit", "reaction", "its max util"],
      rows.map((r) => [r.scenario,
        fmt(Math.max(r.immediate.black_holed_gbps, r.reconverged.black_holed_gbps)),
        fmt(Math.max(r.immediate.looped_gbps ?? 0, r.reconverged.looped_gbps ?? 0)),
        fmt(r.window_s), fmt(r.lost_gbit), verdict(r), r.max_utilization === null ? "–" : pct(r.max_utilization)]),
      { class: "compact" })
      : h("p", { class: "muted" }, "no failure loses traffic before the reaction, and every reaction plan is safe"));
}

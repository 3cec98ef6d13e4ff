"""``loom check``: the safety report of an intent's plan, for people and scripts.

``loom check INTENT [--plan PLAN] [--against OLD_INTENT [--against-plan OLD_PLAN]]
[--robust] [--reaction [--reaction-budget S]] [--scope SCOPE] [--executor local|ray|ray://HOST:PORT] [--json]``
compiles the intent (with robust WCMP
under ``--robust``; or reads ``--plan``, a plan
document), replays it under every failure scenario (:mod:`safety.replay`) and
prints a verdict line, the failing scenarios (scenario, stage, invariant,
detail) and then the hottest links; with ``--against`` it also reviews the
change from the old intent (per-device route and weight differences, per-link
utilization before and after). ``--json`` prints the report (or review)
document. ``--reaction`` adds each failure until the reaction (the review's
section, :mod:`controller.workflow.reactions`; ``reaction`` in the JSON report).
``--plot FILE`` writes the baseline link utilization histogram (the
plan's, or before and after with ``--against``) as SVG or PNG
(:mod:`controller.cli.plot`). ``--scope single_pairs`` adds every pair of single
links and devices, and ``--executor`` sends the scenarios in chunks to a Ray
cluster (:mod:`safety.sweep`); the report is the same. Exit status: 0 safe, 1 when any invariant fails, 2 on bad input
(an invalid intent or plan, a plan that does not fit the intent, an intent
the solver cannot route), with located messages.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from controller.cli.changes import print_reaction
from controller.cli.common import EXIT_FAIL, app, console, die, emit_json, err_console, read_intent
from controller.cli.plot import FORMATS, write_histogram
from controller.model import Intent
from controller.model.errors import Infeasible
from controller.model.plan import Plan
from controller.workflow.reactions import ReactionOptions, reaction_section
from safety.report import SafetyReport
from safety.review import review
from safety.scenarios import count_scenarios

__all__ = ["check", "read_plan"]

LARGE = 2000  # scenario counts worth announcing before the replay


def read_plan(path: Path, *, as_json: bool = False) -> Plan:
    """Read a plan document, or exit 2 saying what is wrong with it."""
    try:
        doc = json.loads(path.read_text())
    except OSError as exc:
        die(f"{path}: cannot read plan: {exc.strerror}", as_json=as_json)
    except json.JSONDecodeError as exc:
        die(f"{path}: invalid plan", as_json=as_json,
            errors=[{"loc": "", "msg": f"JSON syntax error at line {exc.lineno} column {exc.colno}: {exc.msg}"}])
    try:
        return Plan.from_document(doc)
    except KeyError as exc:
        die(f"{path}: invalid plan", as_json=as_json,
            errors=[{"loc": str(exc.args[0]), "msg": "required field missing"}])
    except (TypeError, ValueError, AttributeError) as exc:
        die(f"{path}: invalid plan", as_json=as_json, errors=[{"loc": "", "msg": str(exc)}])


def _solve(intent: Intent, label: str, as_json: bool, robust: bool = False) -> Plan:
    from controller.planning import CompileOptions, compile_plan  # lazy: the solver stack (numpy, scipy: ~0.4 s)

    try:
        return compile_plan(intent, CompileOptions(robust=robust))
    except Infeasible as exc:
        die(f"{label}: cannot plan: {exc}", as_json=as_json,
            errors=[{"loc": str(d.get("loc", "")), "msg": str(d.get("msg", d))} for d in exc.details])


def _count(intent: Intent, scope: str | None) -> int:
    if scope != "single_pairs":
        return count_scenarios(intent, scope)["total"]
    n = len(intent.links) + len(intent.devices)
    return count_scenarios(intent, "all_single")["total"] + n * (n - 1) // 2


def _replay(intent: Intent, plan: Plan, scope: str | None, label: str, as_json: bool,
            executor: str | None = None) -> SafetyReport:
    from safety.sweep import executor_from, sweep  # lazy: numba's kernels and Ray (about 0.5 s)

    try:
        ex = executor_from(executor)  # local by default: workers forked after the compile
    except ValueError as exc:
        die(f"--executor: {exc}", as_json=as_json)

    def run(intent: Intent, plan: Plan, *, scope: str | None, progress: Any) -> SafetyReport:
        return sweep(intent, plan, scope=scope, executor=ex, progress=progress)

    total = _count(intent, scope)
    if total >= LARGE:
        err_console.print(f"{label}: {total} scenarios to replay", highlight=False)
    try:
        if err_console.is_terminal and not as_json:
            # refreshed by the sweep's own progress, not by a thread of its own: a process running
            # another thread is not forked for workers (see safety.sweep.LocalExecutor)
            with Progress(TextColumn("replaying scenarios"), BarColumn(), MofNCompleteColumn(),
                          TimeElapsedColumn(), console=err_console, transient=True, auto_refresh=False) as bar:
                task = bar.add_task("replay", total=total)
                return run(intent, plan, scope=scope,
                           progress=lambda done, _n: bar.update(task, completed=done, refresh=True))
        last = [0]

        def plain(done: int, n: int) -> None:
            if n >= 200 and (done * 10 // n > last[0] or done == n):
                last[0] = done * 10 // n
                print(f"replayed {done}/{n} scenarios", file=sys.stderr, flush=True)

        return run(intent, plan, scope=scope, progress=plain)
    except ValueError as exc:
        die(f"{label}: the plan does not fit the intent", as_json=as_json, errors=[{"loc": "plan", "msg": str(exc)}])


def _print_robust(info: dict[str, Any], rep: SafetyReport) -> None:
    """What robust WCMP achieved, in the report's own terms: its claim is about utilization only, so a
    report that fails for other invariants (delivery, loops) says so beside it instead of under it."""
    price = f"baseline MLU {info['baseline_mlu_plain']:.4f} without robustness, {info['baseline_mlu_robust']:.4f} with"
    by_invariant = Counter(f.invariant for f in rep.failing)
    others = ", ".join(f"{n} {inv.replace('_', ' ')}" for inv, n in sorted(by_invariant.items())
                       if inv != "utilization")
    if info.get("robust") and not by_invariant.get("utilization"):
        where = "every scenario" if not others else "every scenario's delivered traffic"
        console.print(f"robust WCMP: utilization under {info['limit']:g} in {where}; {price}", highlight=False)
        if others:
            console.print(f"robust WCMP cannot help the other failures ({others}): the report stays "
                          f"{rep.verdict.upper()}", highlight=False)
    elif info.get("robust"):
        console.print(f"robust WCMP: the solver's scenarios are under {info['limit']:g}, but the replay finds "
                      f"{by_invariant['utilization']} utilization failure(s); {price}", highlight=False)
    else:
        left = info.get("violating_count", 0)
        console.print(f"robust WCMP: {left} scenario(s) still over {info['limit']:g}; {price}", highlight=False)
        for name, bound in (info.get("impossible") or {}).items():
            console.print(f"  impossible: {name} (even the best weights reach {bound:.4f})", highlight=False)


def _print_report(rep: SafetyReport) -> None:
    c = rep.counts
    kinds = ", ".join(f"{c[k]} {k.replace('_', ' ')}"
                      for k in ("domain", "domain_pair", "link", "device", "pair") if c.get(k))
    if c.get("pair"):
        kinds += f" ({c['pairs_replayed']} replayed, {c['pairs_implied']} implied by a single failure)"
    colour = "green" if rep.safe else "red"
    console.print(f"[bold {colour}]{rep.verdict.upper()}[/] {rep.fabric}: {c['scenarios']} scenarios "
                  f"(baseline{', ' + kinds if kinds else ''}), {c['failing_scenarios']} failing; "
                  f"limits {rep.limits['baseline']:g} baseline, {rep.limits['failure']:g} under failure; "
                  f"reconvergence model {rep.model}; {rep.seconds:.2f} s", highlight=False)
    if rep.failing:
        t = Table(title="failing scenarios", title_justify="left")
        for col in ("scenario", "stage", "invariant", "detail"):
            t.add_column(col, overflow="fold")
        for f in rep.failing[:200]:
            t.add_row(f.scenario, f.stage, f.invariant, f.detail)
        console.print(t)
        if len(rep.failing) > 200:
            console.print(f"... and {len(rep.failing) - 200} more failures (use --json for all)")
    transient = c.get("transient_black_holes", 0)
    if transient:
        console.print(f"{transient} scenario(s) black-hole traffic until routing reconverges "
                      "(immediate stage; reported, not gating)", highlight=False)
    t = Table(title="hottest links", title_justify="left")
    for col in ("link", "gbps", "capacity", "util", "scenario", "stage"):
        t.add_column(col, justify="right" if col in ("gbps", "capacity", "util") else "left", overflow="fold")
    for scen, stage, h in rep.hottest(10):
        t.add_row(f"{h.src}->{h.dst}", f"{h.gbps:.2f}", f"{h.capacity_gbps:g}", f"{h.utilization:.3f}", scen, stage)
    console.print(t)
    if isinstance(rep.extra.get("robust"), dict):
        _print_robust(rep.extra["robust"], rep)
    if isinstance(rep.extra.get("reaction"), dict):
        print_reaction(rep.extra["reaction"])


def _with_reaction(intent: Intent, plan: Plan, report: SafetyReport, budget_s: float) -> SafetyReport:
    """``--reaction``: the report with its ``reaction`` section (the review's,
    :func:`controller.workflow.reactions.reaction_section`, planned here: no reaction table offline)."""
    section = reaction_section(intent, plan, report, identity=None, options=ReactionOptions(budget_s=budget_s))
    return dataclasses.replace(report, extra={**report.extra, "reaction": section.model_dump(mode="json")})


def _print_review(rv: Any) -> None:
    console.print(f"change: {len(rv.devices)} device(s), {rv.routes_changed} route(s) changed, "
                  f"{len(rv.links)} link(s) change utilization", highlight=False)
    if rv.devices:
        t = Table(title="route changes", title_justify="left")
        for col in ("device", "added", "withdrawn", "re-weighted"):
            t.add_column(col, justify="left" if col == "device" else "right")
        for d in rv.devices[:30]:
            t.add_row(d.device, str(d.added), str(d.removed), str(d.reweighted))
        console.print(t)
    if rv.links:
        t = Table(title="link utilization (baseline)", title_justify="left")
        for col in ("link", "before", "after", "delta"):
            t.add_column(col, justify="left" if col == "link" else "right")
        def fmt(v: float | None) -> str:
            return "-" if v is None else f"{v:.3f}"

        for x in rv.links[:20]:
            t.add_row(x.link, fmt(x.before), fmt(x.after), f"{x.delta:+.3f}")
        console.print(t)


def _plot(path: Path | None, plans: list[tuple[str, Plan]], fabric: str, as_json: bool) -> None:
    """``--plot``: the baseline utilization histogram of each plan (see :mod:`controller.cli.plot`)."""
    if path is None:
        return
    try:
        write_histogram(path, [(label, [x.utilization for x in p.links]) for label, p in plans],
                        title=f"{fabric}: link utilization (baseline)")
    except OSError as exc:
        die(f"--plot {path}: cannot write: {exc.strerror}", as_json=as_json)
    if not as_json:
        err_console.print(f"histogram written to {path}", highlight=False)


@app.command()
def check(
    intent_path: Annotated[Path, typer.Argument(metavar="INTENT", help="intent document (YAML or JSON)")],
    plan_path: Annotated[Path | None, typer.Option(
        "--plan", help="plan document to judge (default: compile INTENT)")] = None,
    against: Annotated[Path | None, typer.Option(
        "--against", help="the active intent: review the change from it")] = None,
    against_plan: Annotated[Path | None, typer.Option(
        "--against-plan", help="the active plan (default: compile --against)")] = None,
    scope: Annotated[str | None, typer.Option(
        "--scope", help="override failure_tolerance scope: domains, all_single, k2 (pairs of domains), "
                        "or single_pairs (all_single and every pair of single links and devices)")] = None,
    executor: Annotated[str | None, typer.Option(
        "--executor", help="where scenarios run: local (this process), ray (a local Ray cluster) "
                           "or ray://HOST:PORT (a running one)")] = None,
    robust: Annotated[bool, typer.Option(
        "--robust", help="compile with robust WCMP (needs a failure_tolerance policy)")] = False,
    reaction: Annotated[bool, typer.Option(
        "--reaction", help="also each failure until the reaction: what is lost or looped, for how long, and "
                           "whether the reaction plan is safe (planned here, within --reaction-budget)")] = False,
    reaction_budget: Annotated[float, typer.Option(
        "--reaction-budget", min=0, help="seconds of planning for the reaction plans")] = 30.0,
    as_json: Annotated[bool, typer.Option("--json", help="print the report document")] = False,
    plot: Annotated[Path | None, typer.Option(
        "--plot", help="write the link utilization histogram (before/after with --against) to FILE.svg|.png")] = None,
) -> None:
    """Replay the plan under every failure scenario; exit 1 when any invariant fails."""
    if plot is not None and plot.suffix.lower() not in FORMATS:
        die(f"--plot {plot}: the file must end in .svg or .png", as_json=as_json)
    if scope is not None and scope not in ("domains", "all_single", "k2", "single_pairs"):
        die(f"--scope: unknown scope '{scope}' (expected domains, all_single, k2 or single_pairs)",
            as_json=as_json)
    if against_plan is not None and against is None:
        die("--against-plan needs --against (the intent the active plan was made for)", as_json=as_json)
    intent = read_intent(intent_path, as_json=as_json)
    plan = (read_plan(plan_path, as_json=as_json) if plan_path is not None
            else _solve(intent, str(intent_path), as_json, robust))
    report = _replay(intent, plan, scope, str(intent_path), as_json, executor)
    robust_info = plan.summary.extra.get("robust")
    if isinstance(robust_info, dict):
        report = dataclasses.replace(report, extra={**report.extra, "robust": robust_info})
    if reaction:
        report = _with_reaction(intent, plan, report, reaction_budget)
    if against is not None:
        old = read_intent(against, as_json=as_json)
        old_plan = (read_plan(against_plan, as_json=as_json) if against_plan is not None
                    else _solve(old, str(against), as_json))
        _plot(plot, [("before", old_plan), ("after", plan)], intent.name, as_json)
        try:
            rv = review(old, old_plan, intent, plan, report=report)
        except ValueError as exc:
            die(f"{against}: the active plan does not fit its intent", as_json=as_json,
                errors=[{"loc": "plan", "msg": str(exc)}])
        if as_json:
            emit_json(rv.to_document())
        else:
            _print_report(report)
            _print_review(rv)
    else:
        _plot(plot, [("plan", plan)], intent.name, as_json)
        if as_json:
            emit_json(report.to_document())
        else:
            _print_report(report)
    if not report.safe:
        raise typer.Exit(EXIT_FAIL)

"""``loom jobs``: ML jobs on a running controller.

``loom jobs performance NAME [--window-s W] [--json]``: a declared job seen from the network
(``GET /v1/jobs/{name}/performance``): its measured rate beside its collective's, the iteration
period recovered from its counters, its predicted communication time under the measured load
against an idle fabric (the slowdown) and its bottleneck links; a figure that cannot be had is
printed as ``-`` with the reason. ``loom jobs discovered``: the groups of measured traffic that no
declared job explains, offered as jobs (``GET /v1/jobs/discovered``); ``loom jobs adopt NAME
[--commit]`` makes the offered job NAME one reviewed change, as ``loom drain`` does (the offer's
JSON patch against the active revision), committed with ``--commit``.

``loom jobs what-if JOB``: what one more ML job does to the fabric of a running controller.

The job file is one job as the intent document spells it (YAML or JSON:
``name``, ``tors``, ``collective``, ``bytes_per_iter``, ``iter_s``). The
controller adds it to its active intent, plans and replays it, and stores
nothing (``POST /v1/jobs/what-if``). Prints the planned maximum utilization,
the verdict and the failing scenarios; exit 1 when unsafe, 2 for bad input
(located under ``job``). ``--server`` and ``$LOOM_TOKEN`` as for ``loom apply``.

``loom jobs placement JOB --candidates TOR,TOR,... [--members N] [--top K] [--objective O]``: where to
put JOB (``POST /v1/jobs/placement``). The job file is a job as for ``what-if``, with ``members: N``
in place of ``tors`` (or ``tors``, whose count it takes; ``--members`` overrides both). Prints one
row per placement, safe first: its ToRs in the collective's order, the predicted communication time
per iteration (and idle), the others' worst slowdown, the planned maximum utilization and the
verdict; exit 1 when none is safe, 2 for bad input (located in the request).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from controller.cli.changes import review_then_commit
from controller.cli.common import EXIT_FAIL, EXIT_INPUT, app, console, die, emit_json
from controller.cli.remote import DEFAULT_SERVER, JsonOption, ServerOption, print_failing, remote
from controller.model.errors import InvalidIntent
from controller.model.intent import parse_intent_text

__all__ = ["adopt", "discovered", "jobs_app", "performance", "placement", "what_if"]

jobs_app = typer.Typer(help="ML jobs on a running controller: performance, traffic patterns, discovered jobs, "
                       "what-if, placement.", no_args_is_help=True)
app.add_typer(jobs_app, name="jobs")

WindowOption = Annotated[float, typer.Option("--window-s", min=0.001, help="the window in seconds")]


def _fmt(value: Any, unit: str = "", digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}{unit}"


@jobs_app.command("performance")
def performance(
    name: Annotated[str, typer.Argument(metavar="NAME", help="a job of the active intent")],
    server: ServerOption = DEFAULT_SERVER,
    window_s: WindowOption = 300.0,
    as_json: JsonOption = False,
) -> None:
    """A job's measured rate, iteration period and network slowdown, from counters alone."""
    with remote(server, as_json) as client:
        perf = client.raw.job_performance(name, window_s=window_s)
    if as_json:
        emit_json(perf)
        return
    p = perf
    lines = [f"job {p['job']} over {p['window_s']:g} s ({p['method'] or 'no telemetry'}):",
             f"  rate     {_fmt(p['measured_gbps'], ' gbps')} measured, {_fmt(p['expected_gbps'], ' gbps')} expected",
             f"  period   {_fmt(p['period_s'], ' s')} recovered (strength {_fmt(p['periodicity'], '', 2)}), "
             f"{p['iter_s']:g} s declared",
             f"  comm     {_fmt(p['comm_s'], ' s', 4)} per iteration, {_fmt(p['comm_s_idle'], ' s', 4)} idle: "
             f"slowdown {_fmt(p['slowdown'], 'x', 3)}"]
    for line in lines:
        console.print(line, highlight=False, markup=False)
    if perf["bottlenecks"]:
        t = Table(title="bottlenecks", title_justify="left")
        for col in ("link", "utilization", "job share"):
            t.add_column(col, justify="left" if col == "link" else "right")
        for b in perf["bottlenecks"]:
            t.add_row(b["link"], _fmt(b["utilization"]), _fmt(b["job_share"]))
        console.print(t)
    for field, why in perf["reasons"].items():
        console.print(f"  {field}: {why}", highlight=False, markup=False)


def _table(title: str, text: tuple[str, ...], figures: tuple[str, ...]) -> Table:
    """A table titled ``title`` with the columns ``text`` (left) then ``figures`` (right-justified)."""
    t = Table(title=title, title_justify="left")
    for col in text:
        t.add_column(col)
    for col in figures:
        t.add_column(col, justify="right")
    return t


@jobs_app.command("discovered")
def discovered(
    server: ServerOption = DEFAULT_SERVER,
    window_s: WindowOption = 300.0,
    as_json: JsonOption = False,
) -> None:
    """Groups of measured traffic that no declared job explains, offered as jobs (adopt with loom jobs adopt)."""
    with remote(server, as_json) as client:
        found = client.raw.discovered_jobs(window_s=window_s)
    if as_json:
        emit_json(found)
        return
    t = _table(f"discovered jobs ({found['method']}, {found['window_s']:g} s)",
               ("name", "collective", "tors"), ("confidence", "gbps", "iter_s"))
    for d in found["jobs"]:
        j = d["job"]
        t.add_row(j["name"], j["collective"], " ".join(j["tors"]), f"{d['confidence']:.2f}", f"{d['gbps']:.3f}",
                  f"{j['iter_s']:g}")
    console.print(t)


@jobs_app.command("patterns")
def patterns(
    server: ServerOption = DEFAULT_SERVER,
    window_s: WindowOption = 300.0,
    as_json: JsonOption = False,
) -> None:
    """The communication groups of the measured traffic: pattern, collective and the declared job each is tied
    to ('-': none; loom jobs discovered offers those a template matches)."""
    with remote(server, as_json) as client:
        found = client.raw.patterns(window_s=window_s)
    if as_json:
        emit_json(found)
        return
    t = _table(f"traffic patterns ({found['method']}, {found['window_s']:g} s)",
               ("pattern", "collective", "job", "members"), ("confidence", "gbps", "period_s"))
    for g in found["groups"]:
        collective = " / ".join([g["collective"], *(g.get("alternatives") or [])]) if g.get("collective") else "-"
        period = g.get("period_s")
        t.add_row(g["pattern"], collective, ", ".join(g.get("jobs") or []) or "-", " ".join(g["members"]),
                  f"{g['confidence']:.2f}", f"{g['gbps']:.3f}", "-" if period is None else f"{period:g}")
    console.print(t)


@jobs_app.command("adopt")
def adopt(
    name: Annotated[str, typer.Argument(metavar="NAME", help="a job of loom jobs discovered")],
    server: ServerOption = DEFAULT_SERVER,
    window_s: WindowOption = 300.0,
    commit: Annotated[bool, typer.Option("--commit", help="commit the change after its review")] = False,
    force: Annotated[bool, typer.Option("--force", help="commit even if unsafe (needs --reason)")] = False,
    reason: Annotated[str | None, typer.Option("--reason", help="why an unsafe change is forced")] = None,
    as_json: JsonOption = False,
) -> None:
    """A change that adds the discovered job NAME to the intent, reviewed, and with --commit committed."""
    with remote(server, as_json) as client:
        offers = client.raw.discovered_jobs(window_s=window_s)["jobs"]
        offer = next((d for d in offers if d["job"]["name"] == name), None)
        if offer is None:
            known = ", ".join(d["job"]["name"] for d in offers) or "none"
            die(f"no discovered job named '{name}' (discovered: {known})", as_json=as_json,
                errors=[{"loc": "name", "msg": "not discovered"}])
        st = client.status()
        base = st.active_revision or st.head_revision
        assert base is not None  # discovery needs an active revision
        cid = client.create_change(base, patch=offer["patch"], message=f"adopt discovered job {name}").id
        review_then_commit(client, cid, commit=commit, force=force, reason=reason, as_json=as_json)


def _read_job(path: Path, as_json: bool) -> Any:
    try:
        return parse_intent_text(path.read_text(), "json" if path.suffix.lower() == ".json" else None)
    except OSError as exc:
        die(f"cannot read {path}: {exc.strerror}", code=EXIT_INPUT, as_json=as_json)
    except InvalidIntent as exc:
        die(f"{path}: not a job document", code=EXIT_INPUT, as_json=as_json,
            errors=[{"loc": e.loc, "msg": e.msg} for e in exc.errors])


@jobs_app.command("what-if")
def what_if(
    job_path: Annotated[Path, typer.Argument(metavar="JOB", help="one job (YAML or JSON)")],
    server: ServerOption = DEFAULT_SERVER,
    as_json: JsonOption = False,
) -> None:
    """Plan and check the active intent with JOB added; nothing is stored."""
    job = _read_job(job_path, as_json)
    with remote(server, as_json) as client:
        answer = client.raw.what_if(job)
    if as_json:
        emit_json(answer)
    else:
        colour = "green" if answer["verdict"] == "safe" else "red"
        console.print(f"[bold {colour}]{answer['verdict'].upper()}[/] with job '{job.get('name')}': "
                      f"planned max utilization {answer['max_utilization']:.4f}, "
                      f"{len(answer['failing'])} failing", highlight=False)
        if answer["failing"]:
            print_failing(answer["failing"])
    if answer["verdict"] != "safe":
        raise typer.Exit(EXIT_FAIL)


def _placement_table(answer: dict[str, Any]) -> Table:
    t = Table(title=f"placements of job '{answer['job']}' ({answer['members']} members, {answer['search']} search "
                    f"over {answer['candidates']} candidates, {answer['evaluated']} scored, objective "
                    f"{answer['objective']})", title_justify="left")
    for col in ("#", "tors", "comm s", "idle s", "others' slowdown", "max util", "verdict"):
        t.add_column(col, justify="left" if col in ("tors", "verdict") else "right")
    for k, p in enumerate(answer["placements"], 1):
        slow = "-" if p["max_slowdown_others"] is None else f"{p['max_slowdown_others']:.3f}x {p['slowest_other']}"
        colour = "green" if p["verdict"] == "safe" else "red"
        t.add_row(str(k), " ".join(p["tors"]), f"{p['comm_s']:.4f}", f"{p['comm_s_idle']:.4f}", slow,
                  f"{p['max_utilization']:.4f}", f"[{colour}]{p['verdict']}[/]")
    return t


@jobs_app.command("placement")
def placement(
    job_path: Annotated[Path, typer.Argument(metavar="JOB", help="one job (YAML or JSON) with members: N")],
    candidates: Annotated[str, typer.Option("--candidates", metavar="TOR,TOR,...",
                                            help="the ToRs with a free slot, comma-separated")],
    members: Annotated[int | None, typer.Option("--members", min=2, help="how many ToRs the job takes")] = None,
    top: Annotated[int, typer.Option("--top", min=1, max=20, help="how many placements to answer")] = 3,
    objective: Annotated[str, typer.Option("--objective", help="balanced, job or others")] = "balanced",
    server: ServerOption = DEFAULT_SERVER,
    as_json: JsonOption = False,
) -> None:
    """Where to put JOB: the best placements over the candidate ToRs, each planned and checked; nothing stored."""
    job = _read_job(job_path, as_json)
    if not isinstance(job, dict):
        die(f"{job_path}: not a job document (a mapping)", code=EXIT_INPUT, as_json=as_json,
            errors=[{"loc": "job", "msg": "must be a mapping"}])
    if members is not None:
        job = {**{k: v for k, v in job.items() if k != "tors"}, "members": members}
    tors = [t.strip() for t in candidates.split(",") if t.strip()]
    with remote(server, as_json) as client:
        answer = client.raw.placement(job, tors, top=top, objective=objective)
    if as_json:
        emit_json(answer)
    else:
        console.print(_placement_table(answer))
        for p in answer["placements"]:
            if p["failing"]:
                console.print(f"{' '.join(p['tors'])}:", highlight=False, markup=False)
                print_failing(p["failing"])
        if answer["infeasible"]:
            console.print(f"skipped (cannot be routed): {'; '.join(' '.join(x) for x in answer['infeasible'])}",
                          highlight=False, markup=False)
    if not any(p["verdict"] == "safe" for p in answer["placements"]):
        raise typer.Exit(EXIT_FAIL)

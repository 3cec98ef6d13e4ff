"""``loom apply``, ``loom changes list|show|review|commit|rollback`` and ``loom drift``: a running controller's
change workflow from the command line.

Every command talks to ``--server URL`` (default ``$LOOM_SERVER`` or
``http://127.0.0.1:8000``) with the bearer token in ``$LOOM_TOKEN``.
``apply INTENT`` creates a change with the whole document against the active
revision (or the head), reviews it and prints the verdict, the plan diff and
the safety table; without ``--dry-run`` it commits and follows the progress
per device (a live table on a terminal, one line per device step otherwise).
Exit status: 0 done, 1 refused/unsafe/failed, 2 bad input (located messages).
Every command has ``--json``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.live import Live
from rich.table import Table

from controller.cli.common import EXIT_FAIL, app, console, emit_json, read_intent
from controller.cli.progress import with_bar
from controller.cli.remote import DEFAULT_SERVER, JsonOption, ServerOption, print_failing, remote
from controller.client import Client
from controller.model.documents import FINAL_STATES

__all__ = ["apply", "changes_app", "commit_and_follow", "drift", "print_reaction", "print_review", "print_robustness",
           "review_then_commit"]

changes_app = typer.Typer(help="Changes on a running controller: list, show, review, commit, rollback.",
                          no_args_is_help=True)
app.add_typer(changes_app, name="changes")


def print_review(rv: dict[str, Any]) -> None:
    colour = "green" if rv["verdict"] == "safe" else "red"
    safety = rv["safety"]
    c = safety.get("counts", {})
    s = rv.get("summary", {})
    console.print(f"[bold {colour}]{rv['verdict'].upper()}[/] revision {rv['proposed_revision']} against active "
                  f"{rv['active_revision']}: {c.get('scenarios', '?')} scenarios, "
                  f"{c.get('failing_scenarios', 0)} failing; max utilization {s.get('max_utilization', 0):.3f}",
                  highlight=False)
    if rv["plan_diff"]:
        t = Table(title="route changes", title_justify="left")
        for col in ("device", "added", "withdrawn", "re-weighted"):
            t.add_column(col, justify="left" if col == "device" else "right")
        for d in rv["plan_diff"][:30]:
            t.add_row(d["device"], str(d["added"]), str(d["removed"]), str(d["reweighted"]))
        console.print(t)
    if rv["links"]:
        t = Table(title="link utilization (baseline)", title_justify="left")
        for col in ("link", "before", "after"):
            t.add_column(col, justify="left" if col == "link" else "right")
        for x in rv["links"][:20]:
            t.add_row(x["id"], "-" if x["before"] is None else f"{x['before']:.3f}",
                      "-" if x["after"] is None else f"{x['after']:.3f}")
        console.print(t)
    diffs = rv.get("config_diff", {})
    console.print(f"config changes on {len(diffs)} device(s): {', '.join(sorted(diffs)) or 'none'}"
                  + ("" if rv.get("devices_attached", True) else " (rendered locally: no devices attached)"),
                  highlight=False)
    if rv.get("adoption"):
        print_adoption(rv["adoption"])
    if rv.get("schedule"):
        print_schedule(rv["schedule"])
    if rv.get("robustness"):
        print_robustness(rv["robustness"])
    if rv.get("reaction"):
        print_reaction(rv["reaction"])
    if safety.get("failing"):
        print_failing(safety["failing"])


def print_adoption(ad: dict[str, Any]) -> None:
    """Routers being adopted: whether their differences are cosmetic, else every one that changes forwarding."""
    devices = ", ".join(ad["devices"])
    if ad["cosmetic"]:
        console.print(f"adoption of {devices}: every difference is cosmetic (forwarding unchanged)", highlight=False)
        return
    console.print(f"[bold yellow]WARNING[/] adoption of {devices}: {len(ad['warnings'])} difference(s) change "
                  "what the routers forward:", highlight=False)
    for w in ad["warnings"]:
        where = f" (in {w['context']})" if w["context"] else ""
        console.print(f"  {w['device']}: {w['action']} {w['effect']}: '{w['line']}'{where}", highlight=False,
                      markup=False)


def _num(v: float | None, fmt: str = ".3f") -> str:
    return "-" if v is None else format(v, fmt)


def print_robustness(rb: dict[str, Any]) -> None:
    """The worst post-failure utilization, with and without robust WCMP where both were measured."""
    line = f"worst post-failure utilization {rb['failure_mlu']:.3f} (limit {rb['limit']:g})"
    if rb.get("failure_mlu_plain") is not None:
        line += (f"; robust WCMP: {_num(rb.get('failure_mlu_robust'))}, without it "
                 f"{_num(rb.get('failure_mlu_plain'))}")
    console.print(line, highlight=False)


def print_reaction(rc: dict[str, Any], rows: int = 15) -> None:
    """Each failure until the reaction: the worst losses first, then the reaction plans that are not safe."""
    c = rc.get("counts", {})
    if not rc.get("enabled"):
        console.print(f"failure reaction: [yellow]off[/]: {rc.get('note', '')}", highlight=False)
    else:
        console.print(f"failure reaction: detect {rc['detect_s']:g} s + push {rc['push_s']:g} s; "
                      f"{c.get('scenarios', 0)} failure(s), {c.get('unsafe_reactions', 0)} reaction plan(s) not safe, "
                      f"{c.get('not_planned', 0)} not planned; worst loss {_num(rc.get('worst_lost_gbit'), '.3g')} "
                      "Gbit" + (f" ({rc['note']})" if rc.get("note") else ""), highlight=False)
    shown = sorted(rc.get("scenarios", []), key=lambda r: (-r["lost_gbps"], r["safe"] is not False, r["scenario"]))
    shown = [r for r in shown if r["lost_gbps"] > 0 or r["safe"] is False][:rows]
    if not shown:
        return
    t = Table(title="until the reaction (worst first)", title_justify="left")
    for col in ("scenario", "black-holed gbps", "looped gbps", "window s", "lost Gbit", "reaction", "its max util"):
        t.add_column(col, justify="left" if col in ("scenario", "reaction") else "right", overflow="fold")
    for r in shown:
        holed = max(r["immediate"]["black_holed_gbps"], r["reconverged"]["black_holed_gbps"])
        loops = [x for x in (r["immediate"]["looped_gbps"], r["reconverged"]["looped_gbps"]) if x is not None]
        colour = "green" if r["safe"] else "red" if r["verdict"] else "yellow"
        verdict = r["verdict"] or r["plan"].replace("_", " ")
        t.add_row(r["scenario"], f"{holed:.3g}", f"{max(loops):.3g}" if loops else "?", _num(r["window_s"], ".2f"),
                  _num(r["lost_gbit"], ".3g"), f"[{colour}]{verdict}[/]", _num(r["max_utilization"]))
    console.print(t)


def print_schedule(sched: dict[str, Any]) -> None:
    """The update schedule: one row per stage, in commit order, with the worst utilization
    any state inside it reaches; then, for a change with no safe order, the failing states."""
    stages = sched.get("stages", [])
    checks = sched.get("checks") or [{} for _ in stages]
    safe = sched.get("safe", True)
    title = (f"update schedule: {len(stages)} stage(s), {sched.get('intermediate_plans', 0)} intermediate plan(s)"
             + ("" if safe else " [red]NO SAFE ORDER[/]"))
    t = Table(title=title, title_justify="left")
    for col in ("stage", "devices", "worst utilization", "checked"):
        t.add_column(col, overflow="fold", justify="right" if col in ("stage", "worst utilization") else "left")
    for i, (st, ck) in enumerate(zip(stages, checks, strict=False), 1):
        devices = st["devices"]
        shown = ", ".join(devices[:12]) + (f" and {len(devices) - 12} more" if len(devices) > 12 else "")
        limit = sched.get("limit", 1.0)
        worst = st["worst_utilization"]
        colour = "red" if worst is None or worst > limit + 1e-9 else "green"
        to = f"; to intermediate plan {ck['plan']}" if ck.get("plan") else ""
        t.add_row(str(i), shown, f"[{colour}]{'-' if worst is None else f'{worst:.3f}'}[/]",
                  f"{ck.get('method', '-')} ({ck.get('states', '?')} states{to})")
    console.print(t)
    for f in sched.get("failing", [])[:10]:
        why = "; ".join(f.get("over_limit", []) + f.get("dropped", []) + f.get("loops", []))
        console.print(f"  fails moving {f['moving']} with {len(f['state'])} device(s) updated: {why}",
                      highlight=False, markup=False)


def _progress_table(ch: dict[str, Any]) -> Table:
    prog = ch.get("progress") or {}
    t = Table(title=f"change {ch['id']}: {ch['state']} ({prog.get('step', '-')})", title_justify="left")
    for col in ("device", "step", "status", "changed", "error"):
        t.add_column(col, overflow="fold")
    for name, d in sorted((prog.get("devices") or {}).items()):
        colour = {"ok": "green", "failed": "red"}.get(d["status"], "yellow")
        t.add_row(name, d["step"], f"[{colour}]{d['status']}[/]", "yes" if d["changed"] else "",
                  d.get("error") or "")
    return t


def follow(client: Client, cid: int, *, as_json: bool, interval: float = 0.3) -> dict[str, Any]:
    """Poll the change until it is final, showing progress per device."""
    if not as_json and console.is_terminal:
        with Live(console=console, refresh_per_second=8) as live:
            while True:
                ch = client.raw.change(cid)
                live.update(with_bar(ch, _progress_table(ch)))  # a bar of devices done above the table
                if ch["state"] in FINAL_STATES:
                    return dict(ch)
                time.sleep(interval)
    seen: dict[tuple[str, str], str] = {}
    while True:
        ch = client.raw.change(cid)
        if not as_json:
            for name, d in sorted(((ch.get("progress") or {}).get("devices") or {}).items()):
                for step, status in (d.get("steps") or {d["step"]: d["status"]}).items():
                    if status != "pending" and seen.get((name, step)) != status:
                        seen[name, step] = status
                        err = f" {d['error']}" if d.get("error") and step == d["step"] else ""
                        print(f"{name} {step} {status}{err}", flush=True)
        if ch["state"] in FINAL_STATES:
            return dict(ch)
        time.sleep(interval)


def _final(ch: dict[str, Any], as_json: bool) -> None:
    if as_json:
        emit_json(ch)
    else:
        colour = "green" if ch["state"] == "committed" else "red"
        note = (ch.get("progress") or {}).get("note")
        console.print(f"change {ch['id']}: [bold {colour}]{ch['state']}[/]"
                      + (f" ({ch['error']})" if ch.get("error") else "") + (f"; {note}" if note else ""),
                      highlight=False)
    if ch["state"] != "committed":
        raise typer.Exit(EXIT_FAIL)


def commit_and_follow(client: Client, cid: int, force: bool, reason: str | None, as_json: bool) -> None:
    client.raw.commit(cid, force=force, reason=reason)
    _final(follow(client, cid, as_json=as_json), as_json)


def review_then_commit(client: Client, cid: int, *, commit: bool, force: bool, reason: str | None,
                       as_json: bool, only: str = "") -> None:
    """Review change ``cid`` and print it; with ``commit``, commit it and follow it to its end (loom apply,
    loom drain, loom jobs adopt). Exit 1 when a review only is not safe; ``only`` says what such a review is
    in its heading (by default, how to commit it)."""
    rv = client.raw.review(cid)
    if not commit:
        if as_json:
            emit_json({"change": cid, **rv})
        else:
            console.print(f"change {cid} ({only or f'reviewed; commit with: loom changes commit {cid}'})",
                          highlight=False)
            print_review(rv)
        if rv["verdict"] != "safe":
            raise typer.Exit(EXIT_FAIL)
        return
    if not as_json:
        console.print(f"change {cid}", highlight=False)
        print_review(rv)
    commit_and_follow(client, cid, force, reason, as_json)


@app.command()
def apply(
    intent_path: Annotated[Path, typer.Argument(metavar="INTENT", help="intent document (YAML or JSON)")],
    server: ServerOption = DEFAULT_SERVER,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="review only: plan diff, config diff, safety")] = False,
    force: Annotated[bool, typer.Option("--force", help="commit even if unsafe (needs --reason)")] = False,
    reason: Annotated[str | None, typer.Option("--reason", help="why an unsafe change is forced")] = None,
    message: Annotated[str, typer.Option("--message", "-m", help="what the change is for")] = "",
    base_revision: Annotated[int | None, typer.Option(
        "--base", min=1, help="the revision INTENT was made from (default: the active one, else the head); what "
                              "INTENT changes from it joins the head at commit, beside the head's other edits")] = None,
    as_json: JsonOption = False,
) -> None:
    """Review INTENT against the active revision and, without --dry-run, commit it. The head (the intent
    being edited) moves only at the commit, and keeps every edit made on it that INTENT does not touch."""
    intent = read_intent(intent_path, as_json=as_json)
    with remote(server, as_json) as client:
        cid = client.propose(intent, base_revision=base_revision, message=message or f"loom apply {intent_path}").id
        review_then_commit(client, cid, commit=not dry_run, force=force, reason=reason, as_json=as_json,
                           only="dry run")


@changes_app.command("list")
def list_changes(
    server: ServerOption = DEFAULT_SERVER,
    state: Annotated[str | None, typer.Option("--state", help="only changes in this state")] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=1000)] = 20,
    as_json: JsonOption = False,
) -> None:
    """Changes, newest first."""
    with remote(server, as_json) as client:
        page = client.raw.changes(state=state or None, limit=limit)
    if as_json:
        emit_json(page)
        return
    t = Table()
    for col in ("id", "kind", "state", "base", "proposed", "author", "created", "message"):
        t.add_column(col, overflow="fold")
    for c in page["items"]:
        t.add_row(str(c["id"]), c["kind"], c["state"], str(c["base_revision"]), str(c["proposed_revision"]),
                  c["author"], c["created_at"][:19], c["message"][:60])
    console.print(t)
    console.print(f"{len(page['items'])} of {page['total']}", highlight=False)


@changes_app.command("show")
def show(
    change_id: Annotated[int, typer.Argument(help="change id")],
    server: ServerOption = DEFAULT_SERVER,
    as_json: JsonOption = False,
) -> None:
    """One change: its transitions, review verdict and progress per device."""
    with remote(server, as_json) as client:
        ch = client.raw.change(change_id)
    if as_json:
        emit_json(ch)
        return
    console.print(f"change {ch['id']} ({ch['kind']}): [bold]{ch['state']}[/]  base {ch['base_revision']} -> "
                  f"revision {ch['proposed_revision']}  {ch['message']}", highlight=False)
    for tr in ch["transitions"]:
        console.print(f"  {tr['at'][:19]}  {tr['state']:<11} {tr['actor']}  {tr['reason']}", highlight=False,
                      markup=False)
    if ch.get("review"):
        rv = ch["review"]
        console.print(f"review: {rv['verdict']} against active {rv['active_revision']}", highlight=False)
    if ch.get("force_reason"):
        console.print(f"forced: {ch['force_reason']}", highlight=False, markup=False)
    if ch.get("progress"):
        console.print(_progress_table(ch))
    if ch.get("error"):
        console.print(f"error: {ch['error']}", highlight=False, markup=False)


@changes_app.command("review")
def review(
    change_id: Annotated[int, typer.Argument(help="change id")],
    server: ServerOption = DEFAULT_SERVER,
    as_json: JsonOption = False,
) -> None:
    """Review (dry run) a change: plan diff, config diff, safety report. Exit 1 when unsafe."""
    with remote(server, as_json) as client:
        rv = client.raw.review(change_id)
    if as_json:
        emit_json(rv)
    else:
        print_review(rv)
    if rv["verdict"] != "safe":
        raise typer.Exit(EXIT_FAIL)


@changes_app.command("commit")
def commit(
    change_id: Annotated[int, typer.Argument(help="change id")],
    server: ServerOption = DEFAULT_SERVER,
    force: Annotated[bool, typer.Option("--force", help="commit even if unsafe (needs --reason)")] = False,
    reason: Annotated[str | None, typer.Option("--reason", help="why an unsafe change is forced")] = None,
    as_json: JsonOption = False,
) -> None:
    """Commit a reviewed change and follow its progress per device."""
    with remote(server, as_json) as client:
        commit_and_follow(client, change_id, force, reason, as_json)


@changes_app.command("rollback")
def rollback(
    revision: Annotated[int, typer.Argument(help="the revision to return to")],
    server: ServerOption = DEFAULT_SERVER,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="create and review only")] = False,
    force: Annotated[bool, typer.Option("--force", help="commit even if unsafe (needs --reason)")] = False,
    reason: Annotated[str | None, typer.Option("--reason")] = None,
    as_json: JsonOption = False,
) -> None:
    """Roll back to REVISION: a change to its intent, reviewed and (without --dry-run) committed."""
    with remote(server, as_json) as client:
        cid = client.rollback(revision).id
        rv = client.raw.review(cid)
        if not as_json:
            console.print(f"change {cid}: roll back to revision {revision}", highlight=False)
            print_review(rv)
        if dry_run:
            if as_json:
                emit_json({"change": cid, **rv})
            return
        commit_and_follow(client, cid, force, reason, as_json)


@app.command("drift")
def drift(
    server: ServerOption = DEFAULT_SERVER,
    refresh: Annotated[bool, typer.Option("--refresh/--last", help="check the devices now (default)")] = True,
    repair: Annotated[bool, typer.Option("--repair", help="push the active revision again when drifted")] = False,
    as_json: JsonOption = False,
) -> None:
    """Compare every device with the active revision; exit 1 when any drifted or is unreachable."""
    with remote(server, as_json) as client:
        doc = client.raw.drift(refresh=refresh)
        bad = sorted(n for n, d in doc["devices"].items() if d["status"] != "ok")
        if repair and bad:
            doc["repair"] = follow(client, client.repair_drift().change, as_json=True)
    if as_json:
        emit_json(doc)
    else:
        console.print(f"active revision {doc['active_revision']}, checked {doc.get('checked_at', '-')}"
                      + (f" ({doc['note']})" if doc.get("note") else ""), highlight=False)
        for name, d in sorted(doc["devices"].items()):
            colour = {"ok": "green", "drift": "red"}.get(d["status"], "yellow")
            console.print(f"  {name:<16} [{colour}]{d['status']}[/]  {'; '.join(d['details'])[:200]}",
                          highlight=False)
        if "repair" in doc:
            console.print(f"repair: change {doc['repair']['id']} {doc['repair']['state']}", highlight=False)
    if bad and not (repair and doc.get("repair", {}).get("state") == "committed"):
        raise typer.Exit(EXIT_FAIL)


app.command("rollback", help="Roll back to REVISION (same as `loom changes rollback`).")(rollback)

"""``loom auto-te status|pause|resume``: the automatic re-tuning of a running controller.

``status`` prints the policy, the kill switch, the guard rails' state and the
recent decisions (``GET /v1/auto-te``); ``pause`` and ``resume`` flip the kill
switch (``POST /v1/auto-te/pause`` / ``resume``, operators; ``--reason`` is kept
in the audit log). ``--server`` and ``$LOOM_TOKEN`` as for ``loom apply``.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.table import Table

from controller.cli.common import app, console, emit_json
from controller.cli.remote import DEFAULT_SERVER, JsonOption, ServerOption, remote

__all__ = ["auto_te_app"]

auto_te_app = typer.Typer(help="Automatic re-tuning on a running controller: status, pause, resume.",
                          no_args_is_help=True)
app.add_typer(auto_te_app, name="auto-te")

ReasonOption = Annotated[str, typer.Option("--reason", help="why (kept in the audit log)")]


def _show(doc: dict[str, Any], limit: int) -> None:
    policy = doc["policy"]
    if policy is None:
        state = "[dim]no auto_te policy in the active revision[/]"
    elif not doc["enabled"]:
        state = "[yellow]disabled by the policy[/]"
    elif doc["paused"]:
        state = f"[red]PAUSED[/] by {doc['paused_by']} at {doc['paused_at']}" + (
            f": {doc['pause_reason']}" if doc["pause_reason"] else "")
    else:
        state = "[green]running[/]" if doc["running"] else "[yellow]not running here[/] (no telemetry or follower)"
    console.print(f"auto-te: {state}", highlight=False)
    if policy is not None:
        console.print("policy: " + ", ".join(f"{k}={v}" for k, v in policy.items() if k != "kind"), highlight=False)
    console.print(f"streak {doc['streak']}/{doc['confirm']}, failures {doc['failures']}, back-off until "
                  f"{doc['backoff_until'] or '-'}, last commit {doc['last_commit_at'] or '-'}, next run "
                  f"{doc['next_run_at'] or '-'}", highlight=False)
    if doc["decisions"]:
        table = Table(title="recent decisions (newest first)")
        for col in ("at", "decision", "reason", "change", "detail"):
            table.add_column(col)
        for d in doc["decisions"][:limit]:
            table.add_row(d["at"], d["decision"], d["reason"], str(d["change"] or ""), d["detail"])
        console.print(table)


@auto_te_app.command("status")
def status(
    limit: Annotated[int, typer.Option("--limit", min=1, max=50, help="decisions to show")] = 10,
    server: ServerOption = DEFAULT_SERVER,
    as_json: JsonOption = False,
) -> None:
    """The policy, the kill switch, the guard rails and the recent decisions."""
    with remote(server, as_json) as client:
        doc = client.raw.auto_te()
    if as_json:
        emit_json(doc)
    else:
        _show(doc, limit)


@auto_te_app.command("pause")
def pause(reason: ReasonOption = "", server: ServerOption = DEFAULT_SERVER, as_json: JsonOption = False) -> None:
    """Stop automatic re-tuning (held in the store: it survives restarts, for every replica)."""
    with remote(server, as_json) as client:
        doc = client.raw.pause_auto_te(reason)
    if as_json:
        emit_json(doc)
    else:
        _show(doc, 3)


@auto_te_app.command("resume")
def resume(reason: ReasonOption = "", server: ServerOption = DEFAULT_SERVER, as_json: JsonOption = False) -> None:
    """Let automatic re-tuning run again."""
    with remote(server, as_json) as client:
        doc = client.raw.resume_auto_te(reason)
    if as_json:
        emit_json(doc)
    else:
        _show(doc, 3)

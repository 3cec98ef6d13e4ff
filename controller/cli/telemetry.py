"""``loom demand capture``: the measured demand matrix of a running controller becomes its intent.

``loom demand capture --server URL [--window-s W] [--stat mean|p95|max] [--headroom H] [--base REV] [--json]``
calls ``POST /v1/demands/from-telemetry`` with the token in ``$LOOM_TOKEN``: the
intent's demands are replaced by the measured matrix times the headroom in one
revision (``--base`` sends ``If-Match``: refused with exit status 1 when the
head has moved). It prints the new revision, the method (``aft`` or
``tomogravity``) and the demands. With ``--review`` it also opens a change
from the active revision to the captured one and reviews it (verdict, how the
plan and the links move, safety), left for ``loom changes commit``. Exit
status: 0 done, 1 refused, unsafe or unreachable, 2 bad input.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import typer
from rich.table import Table

from controller.cli.changes import print_review
from controller.cli.common import app, console, emit_json
from controller.cli.remote import DEFAULT_SERVER, JsonOption, ServerOption, remote
from controller.client import Client

__all__ = ["capture", "demand_app"]

demand_app = typer.Typer(help="Traffic demands measured on a running controller.", no_args_is_help=True)
app.add_typer(demand_app, name="demand")


@demand_app.command()
def capture(
    server: ServerOption = DEFAULT_SERVER,
    window_s: Annotated[float, typer.Option("--window-s", min=0.001, help="the window in seconds")] = 300.0,
    stat: Annotated[Literal["mean", "p95", "max"], typer.Option(help="statistic of the interval rates")] = "p95",
    headroom: Annotated[float, typer.Option(min=0.001, help="factor applied to every measured demand")] = 1.0,
    base: Annotated[int | None, typer.Option(help="the head revision the write is based on (If-Match)")] = None,
    review: Annotated[bool, typer.Option(
        "--review", help="also review a change from the active revision to the captured one")] = False,
    as_json: JsonOption = False,
) -> None:
    """Replace the intent's demands with the measured matrix, in one revision."""
    with remote(server, as_json) as client:
        out = client.raw.capture_demand(window_s=window_s, stat=stat, headroom=headroom, if_match=base)
        rv = _review(client, out["revision"]) if review else None
    if as_json:
        emit_json({**out, "review": rv} if review else out)
        if rv is not None and rv["verdict"] != "safe":
            raise typer.Exit(1)
        return
    verb = "revision" if out["changed"] else "unchanged, revision"
    console.print(f"{verb} {out['revision']}: {len(out['demands'])} demands measured by {out['method']} "
                  f"({out['stat']} over {out['window_s']:g} s, headroom {out['headroom']:g})")
    t = Table(title_justify="left")
    for col in ("from", "to", "gbps"):
        t.add_column(col, justify="right" if col == "gbps" else "left")
    for d in out["demands"]:
        t.add_row(d["from"], d["to"], f"{d['gbps']:.3f}")
    console.print(t)
    if rv is not None:
        console.print(f"change {rv['change']} (reviewed; commit with: loom changes commit {rv['change']})",
                      highlight=False)
        print_review(rv)
        if rv["verdict"] != "safe":
            raise typer.Exit(1)


def _review(client: Client, revision: int) -> dict[str, Any]:
    """A change from the active revision (the captured one's own base when none is active) to the
    captured intent, reviewed: how the plan moves under the measured demand."""
    active = client.status().active_revision or revision
    doc = client.raw.intent(revision)
    cid = client.create_change(active, intent=doc, message=f"measured demand (revision {revision})").id
    return {"change": cid, **client.raw.review(cid)}

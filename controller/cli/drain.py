"""``loom drain TARGET`` and ``loom undrain TARGET``: an operator's drain as one reviewed change.

TARGET is a device or a link end ``device:port`` (DESIGN.md's drain policy).
Each command creates a change against the active revision (or the head, when
nothing is active yet) that adds or removes the drain policy, reviews it and
prints the verdict, the links that move and the safety table; with
``--commit`` it commits and follows the progress per device, exactly as
``loom apply`` does. Draining what is drained, or undraining what is not, is
refused as bad input (exit 2) before any change is made.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

import typer

from controller.cli.changes import (
    DEFAULT_SERVER,
    Client,
    JsonOption,
    ServerOption,
    commit_and_follow,
    print_review,
)
from controller.cli.common import app, console, die, emit_json

__all__ = ["drain", "undrain"]

CommitOption = Annotated[bool, typer.Option("--commit", help="commit the change after its review")]
ForceOption = Annotated[bool, typer.Option("--force", help="commit even if unsafe (needs --reason)")]
ReasonOption = Annotated[str | None, typer.Option("--reason", help="why an unsafe change is forced")]
MessageOption = Annotated[str, typer.Option("--message", "-m", help="what the change is for")]
TargetArg = Annotated[str, typer.Argument(metavar="TARGET", help="a device, or a link end DEVICE:PORT")]


def _base(client: Client) -> tuple[int, dict[str, Any]]:
    """The revision a drain change is made against, and its intent document."""
    st = client.call("GET", "/v1/status")
    base = st["active_revision"] or st["head_revision"]
    if base is None:
        die("the controller has no intent yet: apply one first", as_json=client.as_json)
    return int(base), client.call("GET", f"/v1/revisions/{base}/intent")


def _drain_index(doc: dict[str, Any], target: str) -> int | None:
    for i, pol in enumerate(doc.get("policies") or []):
        if pol.get("kind") == "drain" and pol.get("target") == target:
            return i
    return None


def _run(client: Client, base: int, patch: list[dict[str, Any]], message: str, *, commit: bool, force: bool,
         reason: str | None) -> None:
    as_json = client.as_json
    ch = client.call("POST", "/v1/changes", json={"base_revision": base, "patch": patch, "message": message})
    rv = client.call("POST", f"/v1/changes/{ch['id']}/review")
    if not commit:
        if as_json:
            emit_json({"change": ch["id"], **rv})
        else:
            console.print(f"change {ch['id']} (reviewed; commit with: loom changes commit {ch['id']})",
                          highlight=False)
            print_review(rv)
        if rv["verdict"] != "safe":
            raise typer.Exit(1)
        return
    if not as_json:
        console.print(f"change {ch['id']}", highlight=False)
        print_review(rv)
    commit_and_follow(client, ch["id"], force, reason, as_json)


def _command(undrain: bool) -> Callable[..., None]:
    """``loom drain`` or ``loom undrain``: one signature, the policy added or removed."""
    verb = "undrain" if undrain else "drain"

    def command(
        target: TargetArg,
        server: ServerOption = DEFAULT_SERVER,
        commit: CommitOption = False,
        force: ForceOption = False,
        reason: ReasonOption = None,
        message: MessageOption = "",
        as_json: JsonOption = False,
    ) -> None:
        client = Client(server, as_json)
        base, doc = _base(client)
        index = _drain_index(doc, target)
        if (index is None) == undrain:
            state = "not drained" if undrain else "already drained"
            die(f"{target} is {state} in revision {base}", as_json=as_json, errors=[{"loc": "target", "msg": state}])
        patch = ([{"op": "remove", "path": f"/policies/{index}"}] if undrain else
                 [{"op": "add", "path": "/policies/-", "value": {"kind": "drain", "target": target}}])
        _run(client, base, patch, message or f"loom {verb} {target}", commit=commit, force=force, reason=reason)

    command.__doc__ = (f"{verb.capitalize()} TARGET: a change that {'removes' if undrain else 'adds'} its drain "
                       "policy, reviewed, and with --commit committed.")
    return command


drain = app.command("drain")(_command(undrain=False))
undrain = app.command("undrain")(_command(undrain=True))

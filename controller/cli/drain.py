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
from typing import Annotated

import typer

from controller.cli.changes import review_then_commit
from controller.cli.common import app, die
from controller.cli.remote import DEFAULT_SERVER, JsonOption, ServerOption, remote
from controller.client import DrainUnchanged, NoIntent

__all__ = ["drain", "undrain"]

CommitOption = Annotated[bool, typer.Option("--commit", help="commit the change after its review")]
ForceOption = Annotated[bool, typer.Option("--force", help="commit even if unsafe (needs --reason)")]
ReasonOption = Annotated[str | None, typer.Option("--reason", help="why an unsafe change is forced")]
MessageOption = Annotated[str, typer.Option("--message", "-m", help="what the change is for")]
TargetArg = Annotated[str, typer.Argument(metavar="TARGET", help="a device, or a link end DEVICE:PORT")]


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
        with remote(server, as_json) as client:
            make = client.undrain if undrain else client.drain
            try:
                cid = make(target, message=message or f"loom {verb} {target}").id
            except NoIntent as exc:
                die(str(exc), as_json=as_json)
            except DrainUnchanged as exc:
                die(str(exc), as_json=as_json, errors=[{"loc": "target", "msg": exc.state}])
            review_then_commit(client, cid, commit=commit, force=force, reason=reason, as_json=as_json)

    command.__doc__ = (f"{verb.capitalize()} TARGET: a change that {'removes' if undrain else 'adds'} its drain "
                       "policy, reviewed, and with --commit committed.")
    return command


drain = app.command("drain")(_command(undrain=False))
undrain = app.command("undrain")(_command(undrain=True))

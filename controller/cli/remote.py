"""The CLI's side of a running controller: :func:`remote` hands a command the public client
(:class:`controller.client.Client`, ``--server`` and ``$LOOM_TOKEN``) and turns what the client raises
into messages and exit codes.

An error answer prints its problem (status, title, detail, every located error
and, for a refused unsafe commit, the failing scenarios), or with ``--json`` the
problem document beside ``error`` and ``status``; exit 2 for a 400 or 422 (bad
input), else 1. No answer at all (after the client's retries) is ``cannot reach
the controller at URL``, exit 1.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, NoReturn

import typer
from rich.table import Table

from controller.cli.common import EXIT_FAIL, EXIT_INPUT, console, die, emit_json
from controller.client import DEFAULT_SERVER, ApiError, Client, Document, ServerUnreachable

__all__ = ["DEFAULT_SERVER", "JsonOption", "ServerOption", "print_failing", "remote"]

ServerOption = Annotated[str, typer.Option("--server", envvar="LOOM_SERVER", help="the controller's URL")]
JsonOption = Annotated[bool, typer.Option("--json", help="machine-readable output")]
#: a command waits this long for one answer (a review of a large fabric takes a while)
TIMEOUT_S = 300.0


@contextmanager
def remote(server: str, as_json: bool) -> Iterator[Client]:
    """The client of the controller at ``server`` with ``$LOOM_TOKEN`` (exit 2 when unset); what it
    raises inside the block ends the command with a message. The client is not closed: it lives as long
    as the command's process (and a test may give the CLI its in-process app's httpx client)."""
    token = os.environ.get("LOOM_TOKEN", "")
    if not token:
        die("LOOM_TOKEN is not set (a token from `loom token create` or `loom serve`)", as_json=as_json)
    client = Client(server, token, timeout=TIMEOUT_S)
    try:
        yield client
    except ServerUnreachable as exc:
        die(f"cannot reach the controller at {exc.base_url}: {exc.reason}", code=EXIT_FAIL, as_json=as_json)
    except ApiError as exc:
        _fail(exc.problem.status, exc.problem.document, as_json)


def _fail(status: int, body: Document, as_json: bool) -> NoReturn:
    code = EXIT_INPUT if status in (400, 422) else EXIT_FAIL
    if as_json:
        emit_json({"error": body.get("detail") or body.get("title"), "status": status, **body})
        raise typer.Exit(code)
    errors = [{"loc": e.get("loc", ""), "msg": e.get("msg", "")} for e in body.get("errors", [])]
    if body.get("failing"):
        print_failing(body["failing"])
    die(f"{status} {body.get('title', '')}: {body.get('detail', '')}", code=code, errors=errors)


def print_failing(failing: list[Document]) -> None:
    """The failing scenarios (at most 50 rows): scenario, stage, invariant, detail."""
    t = Table(title="failing scenarios", title_justify="left")
    for col in ("scenario", "stage", "invariant", "detail"):
        t.add_column(col, overflow="fold")
    for f in failing[:50]:
        t.add_row(str(f.get("scenario")), str(f.get("stage")), str(f.get("invariant")), str(f.get("detail")))
    console.print(t)
    if len(failing) > 50:
        console.print(f"... and {len(failing) - 50} more", highlight=False)

"""Shared pieces of the CLI: the typer app, exit codes, output for people and scripts."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, NoReturn

import typer
from rich.console import Console

from controller.model import Intent
from controller.model.errors import InvalidIntent, LoomError
from controller.model.intent import load_intent

__all__ = ["EXIT_FAIL", "EXIT_INPUT", "app", "console", "die", "emit_json", "err_console", "read_intent"]

EXIT_FAIL = 1  # the command ran and the answer is "no" (e.g. a safety check failed)
EXIT_INPUT = 2  # bad input: a located message says where

app = typer.Typer(
    name="loom",
    help="Loom: intent-driven controller for data-center fabrics.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _loom() -> None:
    """Loom: intent-driven controller for data-center fabrics."""
    # A callback keeps ``loom`` a group of commands when only one command's module is registered
    # (controller.cli.main imports only the module of the command it runs): typer would otherwise make a
    # lone command the program itself, and ``loom check X`` would read "check" as its argument.


# soft_wrap: a line of text is never broken at the terminal's (or a pipe's 80-column) width,
# so scripts and people read whole lines; tables still fit themselves to the width.
# emoji off: Rich would print ``link:a:eth2`` as ``link🅰eth2`` (its ``:a:`` code), and names are data here
console = Console(soft_wrap=True, emoji=False)
err_console = Console(stderr=True, soft_wrap=True, emoji=False)


def emit_json(data: Any) -> None:
    """Write ``data`` as JSON on stdout (for scripts)."""
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")
    sys.stdout.flush()


def die(
    message: str, *, code: int = EXIT_INPUT, as_json: bool = False, errors: list[dict[str, str]] | None = None
) -> NoReturn:
    """Print an error for people (stderr) or scripts (JSON on stdout) and exit."""
    if as_json:
        emit_json({"error": message, "errors": errors or []})
    else:
        err_console.print(f"[bold red]error:[/] {message}", highlight=False)
        for e in errors or []:
            loc = e.get("loc", "")
            err_console.print(f"  {loc + ': ' if loc else ''}{e.get('msg', '')}", highlight=False, markup=False)
    raise typer.Exit(code)


def read_intent(path: Path, *, as_json: bool = False) -> Intent:
    """Load and validate an intent file, or exit 2 listing every located error."""
    try:
        return load_intent(path)
    except InvalidIntent as exc:
        die(f"{path}: invalid intent ({len(exc.errors)} error(s))", as_json=as_json,
            errors=[e.as_dict() for e in exc.errors])
    except LoomError as exc:
        die(f"{path}: {exc}", as_json=as_json)

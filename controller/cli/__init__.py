"""The ``loom`` command line (DESIGN.md, contract 3).

One typer application; each concern registers its commands from its own module
(``core``: serve, validate, token; ``plan``: plan, gen; ``check``; ``lab``;
``agent``; ``changes``). Every command that reads input rejects bad input with
located messages and exit status 2, and every command has ``--json``.
"""

from __future__ import annotations

import importlib

from controller.cli.common import app

__all__ = ["app", "main"]

_MODULES = ("core", "plan", "check", "lab", "agent", "changes", "drain", "telemetry", "jobs", "autote")


def _register() -> None:
    for name in _MODULES:
        try:
            importlib.import_module(f"controller.cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"controller.cli.{name}":
                raise


def main() -> None:
    _register()
    app()

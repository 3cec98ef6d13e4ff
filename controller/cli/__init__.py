"""The ``loom`` command line (DESIGN.md, contract 3).

One typer application; each concern registers its commands from its own module
(``core``: serve, validate, token; ``plan``: plan, gen; ``check``; ``lab``;
``agent``; ``changes``). Every command that reads input rejects bad input with
located messages and exit status 2, and every command has ``--json``.

:func:`main` imports only the module of the command it runs (:data:`COMMANDS`):
``loom agent`` (a process per switch in a lab) and ``loom changes list`` need
neither the solver nor the safety kernels, whose import costs more than a
second of CPU. A bare ``loom``, ``--help`` or an unknown name registers them all.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterable, Sequence

from controller.cli.common import app

__all__ = ["COMMANDS", "app", "main"]

_MODULES = ("core", "plan", "check", "lab", "agent", "changes", "drain", "telemetry", "jobs", "autote", "discover")

#: every top-level command and command group, and the module of controller.cli that registers it
#: (tests/unit/test_cli_core.py checks this against what the modules register)
COMMANDS = {
    "serve": "core", "validate": "core", "token": "core",
    "plan": "plan", "gen": "plan",
    "check": "check",
    "lab": "lab",
    "agent": "agent", "pki": "agent",
    "apply": "changes", "drift": "changes", "rollback": "changes", "changes": "changes",
    "drain": "drain", "undrain": "drain",
    "demand": "telemetry",
    "jobs": "jobs",
    "auto-te": "autote",
    "discover": "discover",
}


def _register(modules: Iterable[str] = _MODULES) -> None:
    for name in modules:
        try:
            importlib.import_module(f"controller.cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"controller.cli.{name}":
                raise


def modules_for(argv: Sequence[str]) -> tuple[str, ...]:
    """The CLI modules a command line needs: its command's, or all of them (no command, or an unknown one)."""
    command = next((a for a in argv if not a.startswith("-")), None)
    return (COMMANDS[command],) if command in COMMANDS else _MODULES


def main() -> None:
    _register(modules_for(sys.argv[1:]))
    app()

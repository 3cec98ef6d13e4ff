"""Progress display shared by the CLI commands that follow long work on a terminal.

:func:`devices_bar` draws a change's commit progress as one bar (devices done
out of devices) with the transaction's step, for ``loom apply`` and ``loom
changes commit`` above their per-device table. Only rich renderables are built here: the
commands decide whether a terminal is attached (``Console.is_terminal``) and
print plain lines otherwise (CI logs, pipes).
"""

from __future__ import annotations

from typing import Any

from rich.console import Group, RenderableType
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

__all__ = ["devices_bar", "devices_done", "with_bar"]


def devices_done(change: dict[str, Any]) -> tuple[int, int]:
    """(devices no longer pending, devices) of a change's ``progress``."""
    devices = ((change.get("progress") or {}).get("devices") or {}).values()
    total = len(devices)
    return sum(1 for d in devices if d.get("status") != "pending"), total


def devices_bar(change: dict[str, Any], width: int = 40) -> RenderableType:
    """``step  ━━━━━━━━━━╸━━━━━  7/12 devices`` for a change being committed."""
    done, total = devices_done(change)
    step = (change.get("progress") or {}).get("step") or change.get("state", "")
    failed = any(d.get("status") == "failed"
                 for d in ((change.get("progress") or {}).get("devices") or {}).values())
    grid = Table.grid(padding=(0, 1))
    grid.add_column(min_width=10)
    grid.add_column(width=width)
    grid.add_column()
    bar = ProgressBar(total=max(1, total), completed=done if total else 0, width=width,
                      complete_style="red" if failed else "green", finished_style="red" if failed else "green")
    grid.add_row(Text(str(step), style="bold"), bar, Text(f"{done}/{total} devices"))
    return grid


def with_bar(change: dict[str, Any], table: RenderableType) -> RenderableType:
    """The bar above ``table`` (what a live display shows while a change commits)."""
    return Group(devices_bar(change), table)


"""The golden-file check the boundary tests share (CONVENTIONS 13).

:func:`check_golden` compares a text with ``tests/golden/<name>``; with
``LOOM_UPDATE_GOLDEN=1`` it rewrites the file instead (review the diff), and a
missing file is written and fails the test once, so it is never accepted unseen.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

GOLDEN = Path(__file__).parent / "golden"


def updating() -> bool:
    return os.environ.get("LOOM_UPDATE_GOLDEN") == "1"


def check_golden(name: str, text: str) -> None:
    """Assert ``text`` equals the golden file ``tests/golden/<name>`` (or rewrite it when updating)."""
    path = GOLDEN / name
    if updating() or not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        if not updating():
            pytest.fail(f"golden file {path} was missing and has been written; review it and run again")
    assert text == path.read_text(), f"{name} differs from {path} (LOOM_UPDATE_GOLDEN=1 to accept, then review)"

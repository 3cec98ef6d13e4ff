"""Golden files: a text produced at a boundary, compared with the file that froze it.

Golden files live under ``tests/golden/`` (FRR configs, southbound documents).
``LOOM_UPDATE_GOLDEN=1`` rewrites them after a deliberate change, to be
reviewed in the diff; a missing golden file is written and the test fails, so
a new case is never accepted unseen.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

__all__ = ["GOLDEN", "UPDATE", "assert_golden"]

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("LOOM_UPDATE_GOLDEN") == "1"


def assert_golden(path: Path, text: str) -> None:
    """``text`` equals the golden file at ``path`` (written when updating, or when missing and then failed)."""
    if UPDATE or not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        if not UPDATE:
            pytest.fail(f"golden file {path} was missing and has been written; review it and run again")
    assert text == path.read_text(), f"{path.name} differs from its golden file {path} (LOOM_UPDATE_GOLDEN=1 to accept)"

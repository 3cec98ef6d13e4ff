"""The leader's take-up of a queued commit against its own recovery (issue 31, item 0).

A commit asked of the leader is taken up by whichever of its callers reads the
store first (the request that asked, the queue loop, startup). A second take-up
that read the store after the first had marked the change with this epoch, but
before the first had registered it as running, used to "recover" the live
commit as an orphan and record it failed ("controller restarted during the
commit"). Here the first take-up's write is held open long enough for every
other caller to read the store in that window, deterministically.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from controller import service
from controller.settings import Settings
from controller.store import workflow_repo as wrepo
from controller.store.db import Database
from controller.workflow import changes, engine
from controller.workflow.engine import Workflow
from tests.apps import seeded_store

DRAIN = [{"op": "add", "path": "/policies/-", "value": {"kind": "drain", "target": "spine-0-0"}}]


def _queued_commit(db: Database) -> int:
    ctx = service.WriteContext(actor=service.Actor("op", "operator"))
    with db.session() as s:
        ch = changes.create_change(session=s, ctx=ctx, base_revision=1, patch=DRAIN, intent=None)
        changes.record_review(ch.id, {"verdict": "safe", "active_revision": None}, session=s, ctx=ctx)
        changes.begin_commit(ch.id, session=s, ctx=ctx, transaction="chg-live", skip_gate=True)
    return ch.id


@pytest.mark.parametrize("callers", [2, 5])
def test_a_live_take_up_is_never_recovered_by_a_concurrent_one(tmp_path: Path, monkeypatch: Any,
                                                                callers: int) -> None:
    db, _ = seeded_store(f"sqlite:///{tmp_path / 'loom.db'}")
    change = _queued_commit(db)
    real = changes.take_up

    def slow_take_up(*args: Any, **kw: Any) -> bool:
        took = real(*args, **kw)
        time.sleep(0.3)  # the window: marked with this epoch in the store, not yet running in the process
        return took

    monkeypatch.setattr(engine.changes, "take_up", slow_take_up)
    wf = Workflow(Settings(db_url=db.url, drift_interval=0), db)

    async def race() -> list[int | None]:
        got = await asyncio.gather(*(wf.take_up() for _ in range(callers)))
        await wf.wait_idle()
        return list(got)

    took = asyncio.run(race())
    assert took.count(change) == 1 and took.count(None) == callers - 1
    assert wf.recovered is None  # nothing was taken for an orphan
    with db.session() as s:
        ch = wrepo.get_change(change, session=s)
    assert ch.state == "committed", ch.error
    assert not any("restart" in t.reason for t in ch.transitions)
    db.dispose()

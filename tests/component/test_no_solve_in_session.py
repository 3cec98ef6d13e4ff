"""No solve runs inside an open store session (issue 32, item 4; CONVENTIONS 24).

A Clos XL solve takes up to 40 s; a session held open through it holds a pooled
connection (and, in a write, its locks) all that time. The change engine reads
what a plan needs in one session, closes it, solves, and keeps a fresh plan in a
short write of its own (:mod:`controller.workflow.plans`). Here the store's
session factory counts the sessions open at any moment, over every thread, and
the planner records that count each time it runs: it must always be zero, on
every path of the engine that compiles (a review, a commit's push, a plan around
failed parts), and the plan compiled must still be kept in the store.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from controller import service
from controller.model import Intent
from controller.model.plan import Plan
from controller.operations.table import ReactionTable
from controller.settings import Settings
from controller.store import workflow_repo as wrepo
from controller.store.db import Database
from controller.workflow import changes, plans
from controller.workflow.engine import Workflow
from tests.apps import seeded_store

DRAIN = [{"op": "add", "path": "/policies/-", "value": {"kind": "drain", "target": "spine-0-0"}}]
CTX = service.WriteContext(actor=service.Actor("op", "operator"))


class Watch:
    """The store sessions open now (every thread), and how many were open each time the planner ran."""

    def __init__(self, db: Database, monkeypatch: pytest.MonkeyPatch):
        self.open = 0
        self.at_solve: list[int] = []
        self._lock = threading.Lock()
        real_session, real_compile = db.session, plans.compile_plan

        @contextlib.contextmanager
        def session() -> Iterator[Any]:
            with real_session() as s:
                self._moved(+1)
                try:
                    yield s
                finally:
                    self._moved(-1)

        def compile_plan(intent: Intent, *args: Any, **kw: Any) -> Plan:
            with self._lock:
                self.at_solve.append(self.open)
            return real_compile(intent, *args, **kw)

        monkeypatch.setattr(db, "session", session)
        monkeypatch.setattr(plans, "compile_plan", compile_plan)

    def _moved(self, by: int) -> None:
        with self._lock:
            self.open += by


@pytest.fixture()
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Database, Watch, Workflow]]:
    db, _ = seeded_store(f"sqlite:///{tmp_path / 'loom.db'}")
    watch = Watch(db, monkeypatch)
    yield db, watch, Workflow(Settings(db_url=db.url, drift_interval=0), db)
    db.dispose()


def _draft(db: Database) -> int:
    with db.session() as s:
        return changes.create_change(session=s, ctx=CTX, base_revision=1, patch=DRAIN, intent=None).id


def _stored_plan(db: Database, revision: int) -> bool:
    with db.session() as s:
        return wrepo.get_plan(revision, session=s) is not None


def test_a_review_solves_with_no_session_open_and_keeps_the_plan(store: tuple[Database, Watch, Workflow]) -> None:
    db, watch, wf = store
    change = _draft(db)
    review = asyncio.run(wf.review(change, CTX))
    assert review.verdict in ("safe", "unsafe")
    assert watch.at_solve, "the review compiled no plan: nothing was checked"
    assert watch.at_solve == [0] * len(watch.at_solve)
    assert watch.open == 0
    assert review.proposed_revision is not None
    assert _stored_plan(db, review.proposed_revision)  # kept in a short write after the solve


def test_a_commit_solves_with_no_session_open(store: tuple[Database, Watch, Workflow]) -> None:
    db, watch, wf = store
    change = _draft(db)
    with db.session() as s:  # committed without a review: its push compiles the plan
        changes.begin_commit(change, session=s, ctx=CTX, transaction="chg-1", skip_gate=True)
        proposed = wrepo.get_change(change, session=s).proposed_revision
    assert proposed is not None and not _stored_plan(db, proposed)

    async def push() -> None:
        assert await wf.take_up() == change
        await wf.wait_idle()
    asyncio.run(push())
    with db.session() as s:
        assert wrepo.get_change(change, session=s).state == "committed"
    assert watch.at_solve and watch.at_solve == [0] * len(watch.at_solve)
    assert _stored_plan(db, proposed)


def test_a_plan_around_failed_parts_solves_with_no_session_open(store: tuple[Database, Watch, Workflow],
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    _, watch, wf = store
    monkeypatch.setattr(plans, "TABLE", ReactionTable())  # this process's table may hold the plan already
    intent, _ = asyncio.run(wf.runtime.plan(1))
    link = intent.links[0].key
    before = len(watch.at_solve)
    reduced, plan = asyncio.run(wf.runtime.plan(1, {"links": [link], "devices": []}))
    assert link in reduced.drained_links and plan.devices
    assert len(watch.at_solve) == before + 1  # around the failed link: solved now, kept in the table
    assert watch.at_solve == [0] * len(watch.at_solve)


def test_the_plan_route_solves_with_no_session_open(store: tuple[Database, Watch, Workflow]) -> None:
    """``GET /v1/plans/{revision}`` compiles a plan on its first request: between two sessions, as the
    engine does (the route reads through the store's session factory, which the watch counts)."""
    db, watch, _ = store
    change = _draft(db)
    with db.session() as s:
        proposed = wrepo.get_change(change, session=s).proposed_revision
    assert proposed is not None and not _stored_plan(db, proposed)
    doc = plans.plan_document(proposed, sessions=db.session)
    assert doc["devices"] and watch.at_solve == [0]
    assert _stored_plan(db, proposed)
    assert plans.plan_document(proposed, sessions=db.session) == doc and watch.at_solve == [0]  # read back

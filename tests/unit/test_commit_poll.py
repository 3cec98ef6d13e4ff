"""How often the leader looks in the store for commits queued by other replicas (:meth:`Commits.poll_interval`)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from controller.settings import Settings
from controller.workflow.commit import EXCLUSIVE_POLL_S, Commits


def _commits(cluster: Any, every: float = 0.5) -> Commits:
    rt: Any = SimpleNamespace(settings=Settings(commit_poll_interval=every), cluster=cluster)
    return Commits(rt, recover=lambda _ch, _epoch: None, after_commit=lambda _outcome: None)


def test_a_shared_store_is_looked_at_every_poll_interval_and_an_exclusive_one_as_a_safety_net() -> None:
    assert _commits(SimpleNamespace(exclusive=False)).poll_interval() == 0.5  # PostgreSQL: other replicas queue
    assert _commits(None, every=0.2).poll_interval() == 0.2  # no cluster: nothing known, the setting stands
    assert _commits(SimpleNamespace(exclusive=True)).poll_interval() == EXCLUSIVE_POLL_S  # SQLite, this process alone
    assert _commits(SimpleNamespace(exclusive=True), every=30).poll_interval() == 30  # never more often than asked

"""The HA cluster the HA test modules share: PostgreSQL, a dry fleet whose every apply takes a second, three
``loom serve`` replicas with leases of :data:`TTL` s renewed every :data:`RENEW` s, and HAProxy in front.

:func:`ha_cluster` runs one for a ``with`` block; the module fixture ``ha`` of ``tests/component/conftest.py``
gives each module that asks for it a cluster of its own (``test_ha.py`` and ``test_ha_kills.py``, which
pytest-xdist runs on two workers side by side).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from controller import service
from controller.store.db import Database
from tests.apps import SETUP
from tests.balancer import Balancer
from tests.component.test_workflow_api import DOC, Fleet
from tests.ha_cluster import Expected, Replicas, Via, propose, toggle_drain
from tests.pg import drop_schema

__all__ = ["HA", "KILLS", "RENEW", "SLACK", "TTL", "ha_cluster", "ha_commit", "ha_status", "revision_doc_of"]

TTL, RENEW = 2.0, 0.5
SLACK = 10.0  # seconds beyond TTL + renewal for a new leader: a loaded machine delays polls and processes (the
# bench measures the failover; this bound catches a follower that does not take over)
KILLS = 20


@dataclass
class HA:
    replicas: Replicas
    balancer: Balancer
    fleet: Fleet
    db: Database
    expected: Expected

    @property
    def lb(self) -> Via:
        return Via(self.balancer.url)

    def all_up(self, timeout: float = 60) -> None:
        self.balancer.wait_states({n: "UP" for n in self.balancer.servers}, timeout)


@contextmanager
def ha_cluster(base: Path, postgres_url: str, *, env: dict[str, str] | None = None) -> Iterator[HA]:
    """The cluster in ``base`` on the database of ``postgres_url`` (its schema dropped and migrated first);
    ``env``: more settings of the replicas."""
    db = Database(postgres_url)
    drop_schema(db)
    db.migrate()
    with db.session() as s:
        service.replace_intent(DOC, session=s, ctx=SETUP)
    fleet = Fleet(base / "agents", delay=1.0)  # every apply takes a second: time to kill or freeze mid-commit
    fleet.base.mkdir()
    replicas = Replicas(base, postgres_url, fleet, 3, ttl=TTL, renew=RENEW, env=env)
    balancer = Balancer(base, replicas.ports())
    try:
        fleet.start()
        replicas.start()
        balancer.start()
        cluster = HA(replicas, balancer, fleet, db, Expected(db))
        cluster.all_up()
        yield cluster
    finally:
        balancer.stop()
        replicas.stop()
        fleet.stop()
        db.dispose()


def ha_status(api: Any) -> dict[str, Any]:
    r = api("GET", "/v1/status")
    assert r.status_code == 200, r.text
    return dict(r.json())


def ha_commit(api: Any, base: int | None) -> dict[str, Any]:
    """Propose the drain toggle of spine-0-0 on revision ``base`` (None: nothing is active yet, the
    seeded revision 1), review it and ask for its commit."""
    base = base or 1
    ch = propose(api, patch=toggle_drain(revision_doc_of(api, base)), base=base)
    r = api("POST", f"/v1/changes/{ch['id']}/commit", json={})
    assert r.status_code == 202, r.text
    return ch


def revision_doc_of(api: Any, rev: int) -> dict[str, Any]:
    r = api("GET", f"/v1/revisions/{rev}/intent")
    assert r.status_code == 200, r.text
    return dict(r.json())


# -- one linear history ---------------------------------------------------------------------------

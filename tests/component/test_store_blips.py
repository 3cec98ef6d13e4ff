"""A store that does not answer for a moment during a push does not decide the change's outcome (#31).

A failover of the store's primary makes every write fail for a few seconds (``StoreUnavailable``: a 503 to
clients). When that falls inside a commit, the push itself goes on (the devices are not the store), but
its progress snapshots and the record of its outcome are writes. Seen in ``test_store_ha``: a progress
snapshot refused mid-push ended a change whose every device had confirmed the new revision as ``failed``.

Here the store's writes of one commit are refused for a while (the function that stores a commit's
progress, or the one that records its end, raises ``StoreUnavailable`` as the store does during a
failover), on in-process dry agents: the change must end ``committed`` with every device on its revision,
and never ``failed``; when the end could not be recorded, the leader's commit queue recovers the change
from what the devices run.
"""

from __future__ import annotations

import time
import warnings
from pathlib import Path
from typing import Any

import pytest

from controller import service
from controller.model.errors import StoreUnavailable
from controller.model.intent import validate_intent
from controller.settings import Settings
from controller.store.db import Database
from controller.workflow import changes
from controller.workflow.review import expected_hashes
from southbound.device.dry import DryDriver
from tests.lab.test_agent_lab import shifted_demand, wcmp_intent_doc

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

from api.app import create_app

SETUP = service.WriteContext(actor=service.Actor("setup", "admin"))
BASE = wcmp_intent_doc("blips")
NAMES = [d["name"] for d in BASE["devices"]]


class Refusing:
    """Wraps a store function: calls number ``first`` to ``last`` (counted from 1) raise StoreUnavailable."""

    def __init__(self, fn: Any, first: int, last: int):
        self.fn, self.first, self.last, self.calls, self.refused = fn, first, last, 0, 0

    def __call__(self, *args: Any, **kw: Any) -> Any:
        self.calls += 1
        if self.first <= self.calls <= self.last:
            self.refused += 1
            raise StoreUnavailable("injected: connection to server failed: session is read-only")
        return self.fn(*args, **kw)


def _commit_with(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, refusing: Refusing) -> dict[str, Any]:
    """Commit the base intent, then a re-weighting while ``refusing`` stands in for ``changes.<name>``;
    the re-weighting's change once final, with what its devices run."""
    db = Database(f"sqlite:///{tmp_path / 'loom.db'}")
    db.migrate()
    with db.session() as s:
        service.replace_intent(BASE, session=s, ctx=SETUP)
        token = service.create_token("op", "operator", session=s, ctx=SETUP)[1]
    auth = {"Authorization": f"Bearer {token}"}
    settings = Settings(db_url=db.url, drift_interval=0, verify_timeout=5, settle_interval=3600,
                        commit_poll_interval=0.2)
    with TestClient(create_app(settings, database=db, driver=DryDriver(NAMES, tmp_path / "dry"))) as client:
        def commit(doc: dict[str, Any]) -> dict[str, Any]:
            head = client.get("/v1/status", headers=auth).json()["head_revision"]
            r = client.post("/v1/changes", json={"base_revision": head, "intent": doc}, headers=auth)
            assert r.status_code == 201, r.text
            cid = int(r.json()["id"])
            assert client.post(f"/v1/changes/{cid}/review", headers=auth).status_code == 200
            assert client.post(f"/v1/changes/{cid}/commit", json={}, headers=auth).status_code == 202
            deadline = time.monotonic() + 60
            while (ch := client.get(f"/v1/changes/{cid}", headers=auth).json())["state"] == "committing":
                assert time.monotonic() < deadline, ch
                time.sleep(0.05)
            return dict(ch)

        assert commit(BASE)["state"] == "committed"
        shifted = shifted_demand(BASE)
        monkeypatch.setattr(changes, name, refusing)
        ch = commit(shifted)
        monkeypatch.undo()
        with db.session() as s:
            rev = changes.wrepo.get_change(ch["id"], session=s).proposed_revision
            assert rev is not None
            want = expected_hashes(validate_intent(shifted), changes.plan_for(rev, session=s)[1])
        ch["running"] = {d: client.get(f"/v1/devices/{d}/state", headers=auth).json()["running_hash"]
                         for d in NAMES}
        ch["want"] = want
    db.dispose()
    return ch


def test_progress_the_store_refuses_mid_push_neither_stops_the_push_nor_fails_the_change(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the first snapshot (before the push) is stored; those made as the devices answer are refused
    refusing = Refusing(changes.save_progress, 2, 1000)
    ch = _commit_with(tmp_path, monkeypatch, "save_progress", refusing)
    assert refusing.refused >= 1
    assert ch["state"] == "committed", ch["transitions"][-1]
    assert ch["running"] == ch["want"]
    assert ch["progress"]["step"] == "done" and all(s["status"] == "done" for s in ch["progress"]["stages"])


def test_an_end_the_store_cannot_record_is_recovered_from_the_devices_not_marked_failed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the push ends well, but the store refuses to record it once: the next record is the recovery's
    refusing = Refusing(changes.finish_commit, 1, 1)
    ch = _commit_with(tmp_path, monkeypatch, "finish_commit", refusing)
    assert refusing.refused == 1 and refusing.calls == 2
    assert ch["state"] == "committed", ch["transitions"][-1]
    assert "failed" not in [t["state"] for t in ch["transitions"]]
    assert ch["running"] == ch["want"]

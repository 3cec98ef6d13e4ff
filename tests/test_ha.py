"""Replicas of ``loom serve`` on one PostgreSQL store, against real device agents (``--dry-frr``).

Two or three real ``loom serve`` processes share a private PostgreSQL server;
the twelve agents of clos3-small run in one subprocess on unix sockets, every
apply stretched to a second so that a commit can be caught in the middle.
Covered: a leader frozen with SIGSTOP past its lease while it commits is
replaced (epoch + 1), the new leader recovers its change and commits another,
and when the old one resumes every call it still makes is refused by the
agents (their epoch logs say so) and no switch ends on a mixed config; a
leader killed with SIGKILL mid-commit is replaced within the TTL plus one
renewal, its change recovered, and the next commit accepted (the failover
time is printed).
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from controller import service
from controller.store.db import Database
from southbound.agent import AgentCore
from tests.apps import SETUP
from tests.pg import drop_schema
from tests.serving import LoomServer
from tests.test_workflow_api import DOC, NAMES, Fleet, revision_doc, want

pytestmark = pytest.mark.postgres

TOKEN = "t" + "0123456789abcdefghijklmnopqrstuvwxyz"
TTL, RENEW = 3.0, 1.0


def drain(target: str) -> list[dict[str, Any]]:
    return [{"op": "add", "path": "/policies/-", "value": {"kind": "drain", "target": target}}]


class Replicas:
    """``n`` replicas of ``loom serve`` on ``url`` with the fleet's agents, named r0, r1, ..."""

    def __init__(self, base: Path, url: str, fleet: Fleet, n: int):
        (base / "agents.json").write_text(json.dumps(fleet.endpoints()))
        env = {"LOOM_DRIFT_INTERVAL": "0", "LOOM_CONFIRM_WITHIN": "60", "LOOM_TELEMETRY_INTERVAL_S": "0",
               "LOOM_LEASE_TTL": str(TTL), "LOOM_LEASE_RENEW": str(RENEW), "LOOM_VERIFY_TIMEOUT": "10"}
        self.servers = []
        for i in range(n):
            (base / f"r{i}").mkdir()
            self.servers.append(LoomServer(base / f"r{i}", ["--db", url, "--agents", str(base / "agents.json")],
                                           TOKEN, env={**env, "LOOM_REPLICA_ID": f"r{i}"}, ready_timeout=90,
                                           request_timeout=30))

    def start(self) -> None:
        for s in self.servers:
            s.start()

    def stop(self) -> None:
        for s in self.servers:
            if s.proc is not None and s.proc.poll() is None:
                s.proc.send_signal(signal.SIGCONT)  # a frozen one must hear SIGTERM
            s.stop()

    def leader(self, among: list[LoomServer] | None = None, timeout: float = 30) -> LoomServer:
        deadline = time.monotonic() + timeout
        while True:
            for s in among or self.servers:
                try:
                    if s("GET", "/readyz").json().get("role") == "leader":
                        return s
                except Exception:  # noqa: BLE001 - a replica that does not answer is not the leader
                    pass
            assert time.monotonic() < deadline, "no leader"
            time.sleep(0.05)


def settle(server: LoomServer, cid: int, timeout: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        ch = server("GET", f"/v1/changes/{cid}").json()
        if ch["state"] != "committing":
            return dict(ch)
        assert time.monotonic() < deadline, ch
        time.sleep(0.1)


def propose(server: LoomServer, *, patch: Any = None, intent: Any = None, base: int = 1) -> dict[str, Any]:
    ch = server("POST", "/v1/changes", json={"base_revision": base, "patch": patch, "intent": intent}).json()
    assert server("POST", f"/v1/changes/{ch['id']}/review").status_code == 200
    return dict(ch)


def wait_step(server: LoomServer, cid: int, step: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while True:
        ch = server("GET", f"/v1/changes/{cid}").json()
        if (ch.get("progress") or {}).get("step") == step:
            return
        assert ch["state"] == "committing" and time.monotonic() < deadline, ch
        time.sleep(0.02)


def epoch_logs(fleet: Fleet) -> dict[str, dict[str, Any]]:
    return {n: AgentCore.read_epoch_log(fleet.base / n / "state") for n in NAMES}


@pytest.fixture
def cluster(tmp_path: Path, postgres_url: str) -> Iterator[tuple[Replicas, Fleet, Database]]:
    db = Database(postgres_url)
    drop_schema(db)
    db.migrate()
    with db.session() as s:
        service.replace_intent(DOC, session=s, ctx=SETUP)
    fleet = Fleet(tmp_path / "agents", delay=1.0)  # every apply takes a second: time to freeze mid-commit
    fleet.base.mkdir()
    replicas = Replicas(tmp_path, postgres_url, fleet, 2)
    try:
        fleet.start()
        replicas.start()
        yield replicas, fleet, db
    finally:
        replicas.stop()
        fleet.stop()
        db.dispose()


def test_a_leader_frozen_past_its_lease_is_fenced_when_it_wakes(cluster: tuple[Replicas, Fleet, Database]) -> None:
    replicas, fleet, db = cluster
    old = replicas.leader()
    new = next(s for s in replicas.servers if s is not old)
    assert new("GET", "/readyz").json()["role"] == "follower"
    first = propose(new, intent=DOC)  # a commit asked of the follower runs on the leader
    assert new("POST", f"/v1/changes/{first['id']}/commit", json={}).status_code == 202
    assert settle(new, first["id"])["state"] == "committed"
    assert fleet.hashes() == want(DOC)
    epoch = old("GET", "/v1/cluster").json()["epoch"]

    frozen = propose(old, patch=drain("spine-0-0"))
    assert old("POST", f"/v1/changes/{frozen['id']}/commit", json={}).status_code == 202
    wait_step(old, frozen["id"], "commit")
    assert old.proc is not None
    old.proc.send_signal(signal.SIGSTOP)  # the leader freezes while its Commits are applied
    t0 = time.monotonic()
    try:
        assert replicas.leader([new]) is new
        took_over = time.monotonic() - t0
        assert took_over <= TTL + RENEW + 1.0, took_over
        view = new("GET", "/v1/cluster").json()
        assert view["leader"] == view["replica"] == f"r{replicas.servers.index(new)}"
        assert view["epoch"] == epoch + 1
        recovered = settle(new, frozen["id"])  # the new leader recovers the frozen leader's change
        assert recovered["state"] in ("committed", "rolled_back"), recovered
        assert "recovered after a controller restart" in recovered["transitions"][-1]["reason"]
        after = propose(new, patch=drain("spine-1-1"), base=recovered["proposed_revision"]
                        if recovered["state"] == "committed" else 1)
        assert new("POST", f"/v1/changes/{after['id']}/commit", json={}).status_code == 202
        done = settle(new, after["id"])
        assert done["state"] == "committed", done
        target = want(revision_doc(db, done["proposed_revision"]))
        assert fleet.hashes() == target
        before = {n: len(log["refused"]) for n, log in epoch_logs(fleet).items()}
    finally:
        old.proc.send_signal(signal.SIGCONT)  # the old leader wakes up and carries on with its transaction
    deadline = time.monotonic() + 30
    while True:  # its next calls (verify's GetState, then Rollback) reach every agent and are refused
        logs = epoch_logs(fleet)
        refused = {n: [e for e in log["refused"][before[n]:] if e["epoch"] == epoch] for n, log in logs.items()}
        if all(refused.values()):
            break
        assert time.monotonic() < deadline, refused
        time.sleep(0.2)
    time.sleep(1.0)
    for n, log in logs.items():
        assert log["epoch"] == epoch + 1, (n, log)
        assert [e["epoch"] for e in log["raised"]][-2:] == [epoch, epoch + 1]
        assert all(e["fence"] == epoch + 1 for e in refused[n])
    assert fleet.hashes() == target  # every switch on the new leader's revision: none mixed, none stale
    assert old("GET", "/readyz").json()["role"] == "follower"
    assert old("GET", "/v1/cluster").json()["epoch"] == epoch + 1
    assert settle(new, frozen["id"])["state"] == recovered["state"]  # the old leader's outcome is not recorded
    assert new("GET", "/v1/status").json()["active_revision"] == done["proposed_revision"]
    deadline = time.monotonic() + 30
    while "is no longer run by the leader of epoch" not in old.log.read_text():  # its outcome was refused
        assert time.monotonic() < deadline, old.log.read_text()[-3000:]
        time.sleep(0.2)
    assert "lease lost: replica" in old.log.read_text()
    assert settle(new, frozen["id"])["state"] == recovered["state"]
    assert fleet.hashes() == target


def test_a_leader_killed_mid_commit_is_replaced_within_the_ttl_and_a_renewal(
        cluster: tuple[Replicas, Fleet, Database]) -> None:
    replicas, fleet, db = cluster
    dead = replicas.leader()
    heir = next(s for s in replicas.servers if s is not dead)
    first = propose(heir, intent=DOC)
    assert heir("POST", f"/v1/changes/{first['id']}/commit", json={}).status_code == 202
    assert settle(heir, first["id"])["state"] == "committed"
    ch = propose(heir, patch=drain("spine-0-0"))
    assert heir("POST", f"/v1/changes/{ch['id']}/commit", json={}).status_code == 202
    wait_step(heir, ch["id"], "commit")
    dead.kill9()
    t0 = time.monotonic()
    assert replicas.leader([heir]) is heir
    elected = time.monotonic() - t0
    recovered = settle(heir, ch["id"])
    settled = time.monotonic() - t0
    assert recovered["state"] in ("committed", "rolled_back"), recovered
    rev = recovered["proposed_revision"] if recovered["state"] == "committed" else 1
    assert fleet.hashes() == want(revision_doc(db, rev))  # one consistent config everywhere
    nxt = propose(heir, patch=drain("spine-1-1"), base=rev)
    assert heir("POST", f"/v1/changes/{nxt['id']}/commit", json={}).status_code == 202
    accepted = time.monotonic() - t0
    assert settle(heir, nxt["id"])["state"] == "committed"
    assert fleet.hashes() == want(revision_doc(db, nxt["proposed_revision"]))
    print(f"\nfailover: leader elected {elected:.2f} s after SIGKILL, its change recovered ({recovered['state']}) "
          f"at {settled:.2f} s, the next commit accepted at {accepted:.2f} s")
    assert elected <= TTL + RENEW + 1.0, elected

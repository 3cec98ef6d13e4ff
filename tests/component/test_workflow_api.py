"""The change workflow through the real API, against real device agents (``--dry-frr``, no FRR).

A fleet of twelve agents (the clos3-small devices) runs in a subprocess on unix
sockets; the API app runs in-process (TestClient, lifespan and all) or as a
real ``loom serve`` subprocess for the crash test. Covered: the state machine
and its transitions, per-device progress, the safety gate (409 with failing
scenarios, force with a reason in the audit log), a stale review, one commit
at a time (across sessions, by the store's unique slot), idempotency keys,
rollback, device state, drift found and repaired, and a controller killed with
SIGKILL in the middle of a commit that brings every device to one revision on
restart. Agents' running config hashes are compared with the hashes the
controller expects for a revision (what the agent would render).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from api.app import create_app
from controller import service
from controller.model.errors import Conflict
from controller.model.intent import load_intent
from controller.settings import Settings
from controller.store.db import Database
from controller.workflow import changes
from controller.workflow.review import expected_hashes
from solver import solve
from southbound.driver import AgentDriver
from southbound.render import device_configs
from tests.apps import SETUP, Api, TestClient, seeded_store
from tests.pg import drop_schema
from tests.serving import LoomServer, stop_processes

REPO = Path(__file__).resolve().parents[2]
INTENT = load_intent(REPO / "labs" / "clos3-small" / "intent.yaml")
DOC = INTENT.to_document()
NAMES = [d.name for d in INTENT.devices]
DRAIN = [{"op": "add", "path": "/policies/-", "value": {"kind": "drain", "target": "spine-0-0"}}]
TIGHT = [{"op": "add", "path": "/policies/-", "value": {"kind": "utilization_limit", "max": 0.01}}]

FLEET = r"""
import asyncio, sys
from pathlib import Path
from southbound.device.agent import AgentCore, serve
from southbound.device.frr_apply import DryFrr

names, base, delay = sys.argv[1].split(","), Path(sys.argv[2]), float(sys.argv[3])
stop = asyncio.Event()
ready = []

def one():
    ready.append(1)
    if len(ready) == len(names):
        (base / "ready").write_text("ok")

async def main():
    await asyncio.gather(*(serve(AgentCore(DryFrr(base / n / "dry", apply_delay=delay), base / n / "state", n),
                                 f"unix:{base / n / 'agent.sock'}", ready=one, stop=stop) for n in names))

asyncio.run(main())
"""


class Fleet:
    """The twelve agents in one subprocess; ``delay`` stretches every apply (seconds)."""

    def __init__(self, base: Path, delay: float = 0.0):
        self.base = base
        self.delay = delay
        self.proc: subprocess.Popen[bytes] | None = None

    def endpoints(self) -> dict[str, str]:
        return {n: f"unix:{self.base / n / 'agent.sock'}" for n in NAMES}

    def start(self) -> None:
        (self.base / "ready").unlink(missing_ok=True)
        log = open(self.base / "fleet.log", "ab")  # noqa: SIM115 - the child holds it
        self.proc = subprocess.Popen([sys.executable, "-c", FLEET, ",".join(NAMES), str(self.base), str(self.delay)],
                                     stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
        log.close()
        deadline = time.monotonic() + 60
        while not (self.base / "ready").exists():
            assert self.proc.poll() is None and time.monotonic() < deadline, (self.base / "fleet.log").read_text()
            time.sleep(0.05)

    def stop(self) -> None:
        if self.proc is not None:
            stop_processes([self.proc], 15)

    def hashes(self) -> dict[str, str]:
        async def read() -> dict[str, str]:
            async with AgentDriver(self.endpoints()) as drv:
                return {n: (await drv.state(n)).running_hash for n in NAMES}
        return asyncio.run(read())


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    f = Fleet(tmp_path / "agents")
    f.base.mkdir()
    try:
        f.start()
        yield f
    finally:
        f.stop()


def store(tmp_path: Path, url: str | None = None) -> tuple[Database, dict[str, str]]:
    return seeded_store(url or f"sqlite:///{tmp_path / 'loom.db'}", intent=DOC)


@pytest.fixture
def api_intent() -> dict[str, Any]:
    """The ``api`` fixture's store holds the lab intent (revision 1), not the example fabric."""
    return DOC


@pytest.fixture
def api_settings(fleet: Fleet) -> dict[str, Any]:
    """The ``api`` fixture's app talks to the fleet; periodic drift checks are off."""
    return {"agents": json.dumps(fleet.endpoints()), "drift_interval": 0, "verify_timeout": 5}


def want(revision_doc: dict[str, Any]) -> dict[str, str]:
    from controller.model.intent import validate_intent

    intent = validate_intent(revision_doc)
    return expected_hashes(intent, solve(intent))


def revision_doc(db: Database, rev: int) -> dict[str, Any]:
    from controller.store import repo

    with db.session() as s:
        return repo.revision_document(rev, session=s)


def test_commit_moves_through_states_and_reaches_every_device(api: Api, fleet: Fleet) -> None:
    ch = api.change(intent=DOC, message="first push")
    assert ch["state"] == "draft" and ch["proposed_revision"] == 1
    rv = api.review(ch["id"])
    assert rv["verdict"] == "safe" and rv["active_revision"] is None and rv["proposed_revision"] == 1
    assert set(rv["config_diff"]) == set(NAMES)  # from the agents' Prepare: everything is new
    assert rv["safety"]["verdict"] == "safe" and rv["safety"]["counts"]["scenarios"] >= 1
    done = api.commit(ch["id"])
    assert done["state"] == "committed", done
    assert [t["state"] for t in done["transitions"]] == ["draft", "reviewed", "committing", "committed"]
    assert all(t["actor"] == "operator-1" for t in done["transitions"][1:])
    assert done["progress"]["step"] == "done"
    assert set(done["progress"]["devices"]) == set(NAMES)
    assert all(d["status"] == "ok" and d["step"] == "confirm" for d in done["progress"]["devices"].values())
    assert all(d["steps"] == {"prepare": "ok", "commit": "ok", "verify": "ok", "confirm": "ok"}
               for d in done["progress"]["devices"].values())
    assert fleet.hashes() == want(DOC)
    st = api("GET", "/v1/status", role="viewer").json()
    assert st["active_revision"] == 1 and st["committing_change"] is None and sorted(st["devices"]) == sorted(NAMES)
    plan = api("GET", "/v1/plans/1", role="viewer").json()
    active = api("GET", "/v1/plans/active", role="viewer").json()
    assert active.pop("overlay") == {"links": [], "devices": []}  # nothing failed: nothing overlaid
    assert plan == active
    assert set(plan["devices"]) == set(NAMES) and plan["fabric"] == "clos3-small"
    state = api("GET", "/v1/devices/spine-0-0/state", role="viewer").json()
    assert state["running_hash"] == want(DOC)["spine-0-0"] and state["hostname"] == "spine-0-0"
    assert api("GET", "/v1/devices/nowhere/state", role="viewer").status_code == 404
    drift = api("GET", "/v1/drift?refresh=true", role="viewer").json()
    assert drift["active_revision"] == 1 and {d["status"] for d in drift["devices"].values()} == {"ok"}

    # a drain: only the devices whose config changes show a diff, and it lands
    drain = api.change(DRAIN, message="drain spine-0-0")
    rv = api.review(drain["id"])
    assert rv["verdict"] == "safe" and rv["active_revision"] == 1
    assert "spine-0-0" in rv["config_diff"] and len(rv["config_diff"]) < len(NAMES)
    assert any(x["id"] == "leaf-0-0:eth3" and x["after"] == 0 for x in rv["links"])
    sched = rv["schedule"]  # the transition: every state of every stage replayed or bounded, under the limit
    assert sched["safe"] and sched["intermediate_plans"] == 0 and sched["stages"]
    staged = [d for st in sched["stages"] for d in st["devices"]]
    assert len(staged) == len(set(staged)) and set(rv["config_diff"]) <= set(staged)
    assert all(st["worst_utilization"] <= sched["limit"] for st in sched["stages"])
    assert api.commit(drain["id"])["state"] == "committed"
    assert fleet.hashes() == want(revision_doc(api.db, drain["proposed_revision"]))
    listed = api("GET", "/v1/changes?state=committed&limit=1", role="viewer").json()
    assert listed["total"] == 2 and listed["items"][0]["id"] == drain["id"] and listed["next"]


def test_unsafe_change_is_refused_unless_forced_with_a_reason(api: Api, fleet: Fleet) -> None:
    assert api.initial()["state"] == "committed"
    before = fleet.hashes()
    bad = api.change(TIGHT, message="a limit no link meets")
    rv = api.review(bad["id"])
    assert rv["verdict"] == "unsafe" and rv["safety"]["failing"]
    r = api("POST", f"/v1/changes/{bad['id']}/commit", json={})
    assert r.status_code == 409 and r.headers["content-type"].startswith("application/problem+json")
    body = r.json()
    assert body["failing"] and "baseline" in body["failing_scenarios"]
    assert {f["invariant"] for f in body["failing"]} >= {"utilization"}
    assert api("POST", f"/v1/changes/{bad['id']}/commit", json={"force": True}).status_code == 422
    assert fleet.hashes() == before  # nothing was pushed
    done = api.commit(bad["id"], force=True, reason="maintenance window, accepted by on-call")
    assert done["state"] == "committed" and done["force_reason"] == "maintenance window, accepted by on-call"
    audit = api("GET", "/v1/audit?limit=50", role="admin").json()["items"]
    forced = [a for a in audit if a["action"] == "change.commit" and "forced" in a["detail"]]
    assert forced and "maintenance window" in forced[0]["detail"]
    assert any(a["action"] == "change.commit" and a["outcome"] == "rejected" and a["status"] == 409 for a in audit)
    assert any(a["action"] == "change.committed" for a in audit)


def test_a_stale_review_must_be_reviewed_again(api: Api) -> None:
    first = api.change(intent=DOC)
    a = api.change(DRAIN)
    api.review(first["id"])
    api.review(a["id"])
    assert api.commit(first["id"])["state"] == "committed"
    r = api("POST", f"/v1/changes/{a['id']}/commit", json={})
    assert r.status_code == 409 and "review again" in r.json()["detail"]
    assert api("POST", "/v1/changes/999/commit", json={}).status_code == 404
    draft = api.change(DRAIN)
    assert api("POST", f"/v1/changes/{draft['id']}/commit", json={}).status_code == 409  # not reviewed
    assert api.review(a["id"])["active_revision"] == 1
    assert api.commit(a["id"])["state"] == "committed"


def test_invalid_edits_are_located_and_store_nothing(api: Api) -> None:
    r = api("POST", "/v1/changes", json={"base_revision": 1, "patch": [
        {"op": "replace", "path": "/devices/0/asn", "value": "x"}]})
    assert r.status_code == 422 and r.json()["errors"][0]["loc"].startswith("devices[0]")
    r = api("POST", "/v1/changes", json={"base_revision": 1, "patch": [{"op": "remove", "path": "/nope"}]})
    assert r.status_code == 422 and r.json()["errors"][0]["loc"] == "patch[0]"
    r = api("POST", "/v1/changes", json={"base_revision": 1, "patch": [], "intent": DOC})
    assert r.status_code == 422
    assert api("POST", "/v1/changes", json={"base_revision": 7, "patch": []}).status_code == 404
    assert api("GET", "/v1/changes", role="viewer").json()["total"] == 0
    assert api("GET", "/v1/status", role="viewer").json()["head_revision"] == 1
    assert api("POST", "/v1/changes", role="viewer", json={"base_revision": 1, "patch": []}).status_code == 403


def test_idempotency_key_replays_the_first_answer(api: Api) -> None:
    key = {"Idempotency-Key": "create-drain-1"}
    a = api("POST", "/v1/changes", json={"base_revision": 1, "patch": DRAIN}, headers=key)
    b = api("POST", "/v1/changes", json={"base_revision": 1, "patch": DRAIN}, headers=key)
    assert a.status_code == b.status_code == 201 and a.json()["id"] == b.json()["id"]
    assert b.headers.get("idempotent-replayed") == "true"
    assert api("GET", "/v1/changes", role="viewer").json()["total"] == 1
    other = api("POST", "/v1/changes", json={"base_revision": 1, "patch": TIGHT}, headers=key)
    assert other.status_code == 422
    api.review(a.json()["id"])
    c1 = api("POST", f"/v1/changes/{a.json()['id']}/commit", json={}, headers={"Idempotency-Key": "commit-1"})
    c2 = api("POST", f"/v1/changes/{a.json()['id']}/commit", json={}, headers={"Idempotency-Key": "commit-1"})
    assert c1.status_code == c2.status_code == 202 and c1.json() == c2.json()
    assert api.wait(a.json()["id"])["state"] == "committed"
    commits = [x for x in api("GET", "/v1/audit?limit=100", role="admin").json()["items"]
               if x["action"] == "change.commit"]
    assert len(commits) == 1


def test_rollback_returns_every_device_to_the_old_revision(api: Api, fleet: Fleet) -> None:
    api.initial()
    drain = api.change(DRAIN)
    api.review(drain["id"])
    api.commit(drain["id"])
    assert fleet.hashes() != want(DOC)
    r = api("POST", "/v1/revisions/1/rollback", json={"message": "undo the drain"})
    assert r.status_code == 201 and r.json()["kind"] == "rollback" and r.json()["proposed_revision"] == 1
    rv = api.review(r.json()["id"])
    assert rv["verdict"] == "safe" and rv["active_revision"] == drain["proposed_revision"]
    assert api.commit(r.json()["id"])["state"] == "committed"
    assert fleet.hashes() == want(DOC)
    assert api("GET", "/v1/status", role="viewer").json()["active_revision"] == 1
    assert api("POST", "/v1/revisions/99/rollback", json={}).status_code == 404


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_one_change_commits_at_a_time(tmp_path: Path, backend: str, request: pytest.FixtureRequest) -> None:
    if backend == "postgres":
        pg = Database(request.getfixturevalue("postgres_url"))
        drop_schema(pg)
        pg.dispose()
        request.addfinalizer(lambda: drop_schema(Database(request.getfixturevalue("postgres_url"))))
        db, _ = store(tmp_path, url=request.getfixturevalue("postgres_url"))
    else:
        db, _ = store(tmp_path)
    ctx = service.WriteContext(actor=service.Actor("op", "operator"))
    with db.session() as s:
        a = changes.create_change(session=s, ctx=ctx, base_revision=1, patch=DRAIN, intent=None)
        b = changes.create_change(session=s, ctx=ctx, base_revision=1, patch=TIGHT, intent=None)
        for ch in (a, b):
            changes.record_review(ch.id, {"verdict": "safe", "active_revision": None}, session=s, ctx=ctx)
    with db.session() as s1, db.session() as s2:  # two sessions, as two controller processes would have
        changes.begin_commit(a.id, session=s1, ctx=ctx, transaction="t-a")
        with pytest.raises(Conflict, match="committing"):
            changes.begin_commit(b.id, session=s2, ctx=ctx, transaction="t-b")
        changes.finish_commit(a.id, "failed", session=s1, ctx=ctx, reason="test")
        assert changes.begin_commit(b.id, session=s2, ctx=ctx, transaction="t-b").state == "committing"
    db.dispose()


def test_drift_is_reported_and_repaired(api: Api, fleet: Fleet) -> None:
    api.initial()
    # change leaf-0-0 behind the controller's back: a config with a different router id
    plan = solve(INTENT)
    cfg = replace(device_configs(INTENT, plan)["leaf-0-0"], router_id="10.9.9.9")

    async def by_hand() -> None:
        async with AgentDriver(fleet.endpoints()) as drv:
            for step in (drv.prepare("leaf-0-0", "by-hand", cfg), drv.commit("leaf-0-0", "by-hand", 0),
                         drv.confirm("leaf-0-0", "by-hand")):
                r = await step
                assert not r.failed or r.step == "confirm", r
    asyncio.run(by_hand())
    drift = api("GET", "/v1/drift?refresh=true", role="viewer").json()
    assert drift["devices"]["leaf-0-0"]["status"] == "drift"
    assert "running config" in drift["devices"]["leaf-0-0"]["details"][0]
    assert {d["status"] for n, d in drift["devices"].items() if n != "leaf-0-0"} == {"ok"}
    assert api("GET", "/v1/drift", role="viewer").json()["devices"]["leaf-0-0"]["status"] == "drift"
    r = api("POST", "/v1/drift/repair")
    assert r.status_code == 202
    repaired = api.wait(r.json()["change"])
    assert repaired["state"] == "committed" and repaired["kind"] == "repair"
    assert repaired["progress"]["devices"]["leaf-0-0"]["changed"] is True
    assert not any(d["changed"] for n, d in repaired["progress"]["devices"].items() if n != "leaf-0-0")
    drift = api("GET", "/v1/drift?refresh=true", role="viewer").json()
    assert {d["status"] for d in drift["devices"].values()} == {"ok"}
    assert fleet.hashes() == want(DOC)


def test_a_repair_that_finds_another_commit_is_failed_with_why_not_left_waiting(api: Api, fleet: Fleet) -> None:
    """A repair (or a failure reaction) is a change Loom makes to commit at once. When another change took
    the one commit slot between the look and the commit (seen in the chaos run: a reaction and a drift repair
    at the same moment), the new change is failed saying why, not left reviewed for a commit nobody will ask."""
    api.initial()
    ctx = service.WriteContext(actor=service.Actor("op", "operator"))
    with api.db.session() as s:
        other = changes.create_change(session=s, ctx=ctx, base_revision=1, patch=DRAIN, intent=None)
        changes.record_review(other.id, {"verdict": "safe", "active_revision": 1}, session=s, ctx=ctx)
        changes.begin_commit(other.id, session=s, ctx=ctx, transaction="t-other")  # holds the slot, not run
    r = api("POST", "/v1/drift/repair")
    assert r.status_code == 409 and "committing" in r.text, r.text
    repair = api("GET", "/v1/changes?limit=1", role="viewer").json()["items"][0]
    assert repair["kind"] == "repair" and repair["state"] == "failed", repair
    assert f"change {other.id} is committing" in repair["error"] and "next drift check" in repair["error"]
    with api.db.session() as s:
        changes.finish_commit(other.id, "failed", session=s, ctx=ctx, reason="test: never run")
    r = api("POST", "/v1/drift/repair")  # the slot free again: the next repair commits
    assert r.status_code == 202, r.text
    assert api.wait(r.json()["change"])["state"] == "committed"


# -- crash safety: a real `loom serve` killed with SIGKILL mid-commit ------------------
def workflow_server(tmp: Path, db_url: str, agents: dict[str, str], token: str) -> LoomServer:
    """``loom serve`` on ``db_url`` with ``agents`` (written to ``tmp/agents.json``), periodic drift checks off."""
    (tmp / "agents.json").write_text(json.dumps(agents))
    return LoomServer(tmp, ["--db", db_url, "--agents", str(tmp / "agents.json")], token, cwd=REPO,
                      ready_timeout=60, request_timeout=60,
                      env={"LOOM_DRIFT_INTERVAL": "0", "LOOM_CONFIRM_WITHIN": "30"})


def test_controller_killed_mid_commit_recovers_to_one_revision(tmp_path: Path) -> None:
    kill_at = "commit"
    fleet = Fleet(tmp_path / "agents", delay=1.0)  # every apply takes a second: time to kill mid-commit
    fleet.base.mkdir()
    db = Database(f"sqlite:///{tmp_path / 'loom.db'}")
    db.migrate()
    with db.session() as s:
        service.replace_intent(DOC, session=s, ctx=SETUP)
    db.dispose()
    server = workflow_server(tmp_path, db.url, fleet.endpoints(), "t" + "0123456789abcdefghijklmnopqrstuvwxyz")
    try:
        fleet.start()
        server.start()
        first = server("POST", "/v1/changes", json={"base_revision": 1, "intent": DOC}).json()
        server("POST", f"/v1/changes/{first['id']}/review")
        assert server("POST", f"/v1/changes/{first['id']}/commit", json={}).status_code == 202
        deadline = time.monotonic() + 60
        while server("GET", f"/v1/changes/{first['id']}").json()["state"] == "committing":
            assert time.monotonic() < deadline
            time.sleep(0.2)
        old = want(DOC)
        assert fleet.hashes() == old
        drain = server("POST", "/v1/changes", json={"base_revision": 1, "patch": DRAIN}).json()
        server("POST", f"/v1/changes/{drain['id']}/review")
        assert server("POST", f"/v1/changes/{drain['id']}/commit", json={}).status_code == 202
        deadline = time.monotonic() + 30
        while True:  # wait until the transaction is in the chosen step, then kill the controller
            ch = server("GET", f"/v1/changes/{drain['id']}").json()
            prog = ch.get("progress") or {}
            if prog.get("step") == kill_at or ch["state"] != "committing":
                break
            assert time.monotonic() < deadline, ch
            time.sleep(0.05)
        assert ch["state"] == "committing"
        server.kill9()
        new = want(revision_doc(db, drain["proposed_revision"]))
        mid = fleet.hashes()
        server.start()
        ch = server("GET", f"/v1/changes/{drain['id']}").json()
        assert ch["state"] in ("committed", "rolled_back"), ch
        assert "recovered after a controller restart" in ch["transitions"][-1]["reason"]
        assert ch["transitions"][-1]["actor"].startswith("loom-controller")
        hashes = fleet.hashes()
        active = server("GET", "/v1/status").json()["active_revision"]
        if ch["state"] == "committed":
            assert hashes == new and active == drain["proposed_revision"]
        else:
            assert hashes == old and active == 1
        assert mid != new  # the kill landed before every device had the change
        audit = server("GET", "/v1/audit?limit=20").json()["items"]
        assert any(a["action"] == "change.recover" for a in audit)
        # the store is whole: the next change commits normally
        again = server("POST", "/v1/changes", json={"base_revision": 1, "intent": DOC}).json()
        assert server("POST", f"/v1/changes/{again['id']}/review").status_code == 200
        assert server("POST", f"/v1/changes/{again['id']}/commit", json={}).status_code == 202
        deadline = time.monotonic() + 60
        while server("GET", f"/v1/changes/{again['id']}").json()["state"] == "committing":
            assert time.monotonic() < deadline
            time.sleep(0.2)
        assert fleet.hashes() == old
    finally:
        server.stop()
        fleet.stop()


@pytest.mark.parametrize("reached", [12, 5, 0])
def test_restart_finishes_or_undoes_what_the_devices_report(tmp_path: Path, fleet: Fleet, reached: int) -> None:
    """A controller died after Commit reached ``reached`` devices (and before any Confirm):
    the new one confirms when all have it, and rolls everything back otherwise."""
    db, tokens = store(tmp_path)
    ctx = service.WriteContext(actor=service.Actor("op", "operator"))
    settings = Settings(db_url=db.url, agents=json.dumps(fleet.endpoints()), drift_interval=0, verify_timeout=5)
    with TestClient(create_app(settings, database=db)) as client:
        Api(client, tokens, db, DOC).initial()
    old = want(DOC)
    with db.session() as s:
        ch = changes.create_change(session=s, ctx=ctx, base_revision=1, patch=DRAIN, intent=None)
        changes.record_review(ch.id, {"verdict": "safe", "active_revision": 1}, session=s, ctx=ctx)
        changes.begin_commit(ch.id, session=s, ctx=ctx, transaction="chg-dead-controller")
        # the dead controller took the queued commit up (epoch 1) before it touched any device
        assert changes.take_up(ch.id, 1, previous=None, replica=None, session=s)
        intent, plan = changes.plan_for(ch.proposed_revision, session=s)
    configs = device_configs(intent, plan)

    async def half_done() -> None:  # what the dead controller got done
        async with AgentDriver(fleet.endpoints()) as drv:
            for n in NAMES:
                assert not (await drv.prepare(n, "chg-dead-controller", configs[n])).failed
            for n in NAMES[:reached]:
                assert not (await drv.commit(n, "chg-dead-controller", 60)).failed
    asyncio.run(half_done())
    with TestClient(create_app(settings, database=db)) as client:
        api = Api(client, tokens, db, DOC)
        done = api("GET", f"/v1/changes/{ch.id}", role="viewer").json()
        status = api("GET", "/v1/status", role="viewer").json()
    hashes = fleet.hashes()
    if reached == len(NAMES):
        assert done["state"] == "committed" and status["active_revision"] == ch.proposed_revision
        assert hashes == want(revision_doc(db, ch.proposed_revision))
    else:
        assert done["state"] == ("rolled_back" if reached else "failed")
        assert status["active_revision"] == 1 and hashes == old
    assert status["committing_change"] is None
    assert "recovered after a controller restart" in done["transitions"][-1]["reason"]

    async def pending() -> set[str]:
        async with AgentDriver(fleet.endpoints()) as drv:
            return {(await drv.state(n)).pending_change for n in NAMES}
    assert asyncio.run(pending()) == {""}  # nothing left awaiting confirmation or a timer
    db.dispose()


def test_periodic_drift_check_repairs_by_itself_when_set(tmp_path: Path, fleet: Fleet) -> None:
    db, tokens = store(tmp_path)
    settings = Settings(db_url=db.url, agents=json.dumps(fleet.endpoints()), drift_interval=0.5, drift_repair=True,
                        verify_timeout=5)
    with TestClient(create_app(settings, database=db)) as client:
        api = Api(client, tokens, db, DOC)
        api.initial()
        cfg = replace(device_configs(INTENT, solve(INTENT))["tor-1-1"], router_id="10.9.9.8")

        async def by_hand() -> None:
            async with AgentDriver(fleet.endpoints()) as drv:
                await drv.prepare("tor-1-1", "by-hand-2", cfg)
                await drv.commit("tor-1-1", "by-hand-2", 0)
        asyncio.run(by_hand())
        assert fleet.hashes()["tor-1-1"] != want(DOC)["tor-1-1"]
        deadline = time.monotonic() + 30
        while fleet.hashes() != want(DOC):  # the periodic check found it and pushed the active revision again
            assert time.monotonic() < deadline
            time.sleep(0.2)
        repairs = api("GET", "/v1/changes", role="viewer").json()["items"]
        assert repairs[0]["kind"] == "repair" and repairs[0]["author"].startswith("loom-controller")
    db.dispose()


def test_while_one_change_commits_another_is_refused_and_reviews_render_locally(tmp_path: Path) -> None:
    fleet = Fleet(tmp_path / "agents", delay=0.7)
    fleet.base.mkdir()
    db, tokens = store(tmp_path)
    settings = Settings(db_url=db.url, agents=json.dumps(fleet.endpoints()), drift_interval=0, verify_timeout=5)
    try:
        fleet.start()
        with TestClient(create_app(settings, database=db)) as client:
            api = Api(client, tokens, db, DOC)
            a, b = api.change(intent=DOC), api.change(DRAIN)
            api.review(a["id"])
            api.review(b["id"])
            assert api("POST", f"/v1/changes/{a['id']}/commit", json={}).status_code == 202
            busy = api("POST", f"/v1/changes/{b['id']}/commit", json={})
            assert busy.status_code == 409 and "committing" in busy.json()["detail"]
            assert api("GET", "/v1/status", role="viewer").json()["committing_change"] == a["id"]
            rv = api.review(b["id"])  # the agents are busy with a: no Prepare may interleave with its own
            assert "config_diff_note" in rv and "spine-0-0" in rv["config_diff"]
            assert api.wait(a["id"])["state"] == "committed"
            assert fleet.hashes() == want(DOC)
            assert api.review(b["id"])["active_revision"] == 1
            assert api.commit(b["id"])["state"] == "committed"
    finally:
        fleet.stop()
        db.dispose()

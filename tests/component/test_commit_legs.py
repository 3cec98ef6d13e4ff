"""A commit through intermediate plans: one transaction per leg, in the schedule's stages, undone on failure.

Where no order of two plans is safe, the schedule goes through intermediate
plans (``safety.transition.intermediate_plans``, each leg scheduled alike).
The engine then runs one transaction per leg, each confirmed before the next:
``TRANSACTION.p1`` to the first intermediate plan, ..., the change's own
transaction to the proposed plan. These tests take a real re-weighting of
clos3-small on dry agents, give its review the schedule the transition module
makes through one intermediate plan (the legs' stages from its own
``_direct``), and hold the engine to it: every device that the intermediate
plan moves runs its config first, in its stages, and the change ends on the
proposed revision; when the last leg fails, it rolls back, the first leg is
undone, and every device is back on the active revision.
"""

from __future__ import annotations

import asyncio
import json
import time
import warnings
from pathlib import Path
from typing import Any

from controller import service
from controller.model.intent import validate_intent
from controller.settings import Settings
from controller.store.db import Database
from controller.workflow import changes
from controller.workflow.review import CommitLeg, commit_legs, expected_hashes
from safety.transition import Schedule, TransitionOptions, _direct, intermediate_plans
from southbound.device.dry import DryDriver
from southbound.render import config_hash, device_configs
from southbound.state import StepResult
from tests.lab.test_agent_lab import shifted_demand, wcmp_intent_doc

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

from api.app import create_app

SETUP = service.WriteContext(actor=service.Actor("setup", "admin"))
BASE = wcmp_intent_doc("legs")
NAMES = [d["name"] for d in BASE["devices"]]


class FailingFinal(DryDriver):
    """Dry agents whose Commit of a change's own transaction (its last leg) fails on ``spine-1-1``."""

    fail = False

    async def commit(self, device: str, change: str, confirm_within: float) -> StepResult:
        if self.fail and device == "spine-1-1" and "." not in change:
            return StepResult(device, "commit", failed=True, error="INTERNAL: injected failure")
        return await super().commit(device, change, confirm_within)


def through_one_intermediate_plan(db: Database, cid: int) -> tuple[dict[str, Any], Any]:
    """Give change ``cid``'s review the schedule through one intermediate plan; that plan."""
    with db.session() as s:
        inp = changes.review_inputs(cid, session=s)
        review = dict(changes.wrepo.get_change(cid, session=s).review or {})
    assert inp.active_intent is not None and inp.active_plan is not None
    staged = intermediate_plans(inp.active_intent, inp.active_plan, inp.intent, inp.plan, 1)
    assert staged is not None
    mid_intent, (mid,) = staged
    opts = TransitionOptions()
    first = _direct(inp.active_intent, inp.active_plan, mid_intent, mid, (), opts)
    last = _direct(mid_intent, mid, inp.intent, inp.plan, (), opts)
    assert first.safe and last.safe
    sched = Schedule(stages=first.stages + last.stages, intermediate_plans=1, safe=True, limit=first.limit,
                     mode=first.mode, targets=[1] * len(first.stages) + [0] * len(last.stages), plans=[mid],
                     plans_intent="proposed" if mid_intent is inp.intent else "active")
    review["schedule"] = sched.to_document()
    with db.session() as s:
        changes.record_review(cid, review, session=s, ctx=SETUP)
    return review, mid


def wait_final(client: TestClient, cid: int, auth: dict[str, str]) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while (ch := client.get(f"/v1/changes/{cid}", headers=auth).json())["state"] == "committing":
        assert time.monotonic() < deadline, ch
        time.sleep(0.05)
    return ch


def ran(base: Path, device: str) -> list[tuple[str, str]]:
    """(change, config hash) of every change ``device``'s agent applied, in order."""
    doc = json.loads((base / device / "changes.json").read_text())
    return [(c["change"], c["hash"]) for c in doc]


def test_commit_legs_split_the_schedule_by_the_plan_each_stage_moves_to() -> None:
    sched = {"intermediate_plans": 2, "stages": [{"devices": ["a"]}, {"devices": ["b"]}, {"devices": ["a", "b"]},
                                                 {"devices": ["b"]}, {"devices": ["a"]}],
             "checks": [{"plan": 1}, {"plan": 1}, {"plan": 2}, {"plan": 0}, {"plan": 0}]}
    legs = commit_legs({"schedule": sched}, ["a", "b", "c"])
    assert [(leg.target, leg.stages) for leg in legs] == [
        (1, [["a"], ["b"], ["c"]]), (2, [["a", "b"], ["c"]]), (0, [["b"], ["a"], ["c"]])]
    assert commit_legs({"schedule": {**sched, "intermediate_plans": 0}}, ["a", "b"]) == [
        CommitLeg(0, [["a"], ["b"]], [None, None])]
    assert commit_legs(None, ["b", "a"]) == [CommitLeg(0, [["a", "b"]], [None])]


def test_a_change_goes_through_its_intermediate_plan_and_is_undone_when_its_last_leg_fails(tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path / 'loom.db'}")
    db.migrate()
    with db.session() as s:
        service.replace_intent(BASE, session=s, ctx=SETUP)
        token = service.create_token("op", "operator", session=s, ctx=SETUP)[1]
    driver = FailingFinal(NAMES, tmp_path / "dry")
    auth = {"Authorization": f"Bearer {token}"}
    shifted = shifted_demand(BASE)
    with TestClient(create_app(Settings(db_url=db.url, drift_interval=0, verify_timeout=5, settle_interval=3600),
                               database=db, driver=driver)) as client:
        def change(doc: dict[str, Any]) -> int:
            head = client.get("/v1/status", headers=auth).json()["head_revision"]
            r = client.post("/v1/changes", json={"base_revision": head, "intent": doc}, headers=auth)
            assert r.status_code == 201, r.text
            cid = int(r.json()["id"])
            assert client.post(f"/v1/changes/{cid}/review", headers=auth).status_code == 200
            return cid

        first = change(BASE)  # the devices run the base revision
        assert client.post(f"/v1/changes/{first}/commit", json={}, headers=auth).status_code == 202
        assert wait_final(client, first, auth)["state"] == "committed"
        base_hashes = expected_hashes(validate_intent(BASE), _plan(db, first))

        cid = change(shifted)
        review, mid = through_one_intermediate_plan(db, cid)
        assert client.post(f"/v1/changes/{cid}/commit", json={}, headers=auth).status_code == 202
        ch = wait_final(client, cid, auth)
        assert ch["state"] == "committed", ch
        txn = ch["transaction"]
        final = expected_hashes(validate_intent(shifted), _plan(db, cid))
        mid_hashes = {d: config_hash(c) for d, c in device_configs(validate_intent(shifted), mid).items()}
        moved_mid = {d for d in NAMES if mid_hashes[d] != base_hashes[d]}
        assert moved_mid and any(mid_hashes[d] != final[d] for d in moved_mid)  # a real plan in between
        for d in NAMES:
            applied = ran(tmp_path / "dry", d)
            assert applied[-1] == (txn, final[d]) or (final[d] == mid_hashes[d] and applied[-1][1] == final[d])
            if d in moved_mid:  # the intermediate plan first, in its own transaction
                assert (f"{txn}.p1", mid_hashes[d]) in applied, (d, applied)
        stages = ch["progress"]["stages"]  # every stage of both legs done, each naming the plan it moved to
        legs = commit_legs(review, NAMES)
        assert [(s["devices"], s["plan"]) for s in stages] == [(st, leg.target) for leg in legs for st in leg.stages]
        assert all(s["status"] == "done" for s in stages) and [leg.target for leg in legs] == [1, 0]

        # back to the base intent through the same kind of schedule; its last leg fails on spine-1-1
        back = change(BASE)
        through_one_intermediate_plan(db, back)
        driver.fail = True
        assert client.post(f"/v1/changes/{back}/commit", json={}, headers=auth).status_code == 202
        ch = wait_final(client, back, auth)
        assert ch["state"] == "rolled_back", ch
        reason = ch["transitions"][-1]["reason"]
        assert "leg 2 of 2" in reason and "the 1 leg(s) before it were undone" in reason, reason
        for d in NAMES:  # every device on the active (shifted) revision again, nothing pending
            st = client.get(f"/v1/devices/{d}/state", headers=auth).json()
            assert st["running_hash"] == final[d] and not st.get("pending_change"), (d, st)
        assert ch.get("settled") in (None, True), ch
    db.dispose()


def _plan(db: Database, cid: int) -> Any:
    with db.session() as s:
        rev = changes.wrepo.get_change(cid, session=s).proposed_revision
        assert rev is not None
        return changes.plan_for(rev, session=s)[1]


def test_recovery_of_a_change_that_died_between_its_legs_returns_every_device_to_the_active_revision(
        tmp_path: Path) -> None:
    """The controller died with the first leg confirmed everywhere and the last one committed on half
    of the devices: the next leader rolls back what is pending and then each leg's change, the last
    first, and every device runs the active revision again."""
    db = Database(f"sqlite:///{tmp_path / 'loom.db'}")
    db.migrate()
    with db.session() as s:
        service.replace_intent(BASE, session=s, ctx=SETUP)
        token = service.create_token("op", "operator", session=s, ctx=SETUP)[1]
    auth = {"Authorization": f"Bearer {token}"}
    settings = Settings(db_url=db.url, drift_interval=0, verify_timeout=5, settle_interval=3600)
    shifted = shifted_demand(BASE)
    with TestClient(create_app(settings, database=db, driver=DryDriver(NAMES, tmp_path / "dry"))) as client:
        ids = []
        for doc in (BASE, shifted):
            head = client.get("/v1/status", headers=auth).json()["head_revision"]
            r = client.post("/v1/changes", json={"base_revision": head, "intent": doc}, headers=auth)
            ids.append(int(r.json()["id"]))
            assert client.post(f"/v1/changes/{ids[-1]}/review", headers=auth).status_code == 200
            if doc is BASE:
                assert client.post(f"/v1/changes/{ids[0]}/commit", json={}, headers=auth).status_code == 202
                assert wait_final(client, ids[0], auth)["state"] == "committed"
    base_hashes = expected_hashes(validate_intent(BASE), _plan(db, ids[0]))
    cid = ids[1]
    _review, mid = through_one_intermediate_plan(db, cid)
    txn = "chg-died-between-legs"
    with db.session() as s:
        changes.begin_commit(cid, session=s, ctx=SETUP, transaction=txn)
        assert changes.take_up(cid, 1, previous=None, replica=None, session=s)
        rev = changes.wrepo.get_change(cid, session=s).proposed_revision
        assert rev is not None
        intent, plan = changes.plan_for(rev, session=s)
    mid_configs, final_configs = device_configs(intent, mid), device_configs(intent, plan)

    async def died() -> None:  # leg 1 confirmed everywhere, leg 2 committed on half the devices
        async with DryDriver(NAMES, tmp_path / "dry") as drv:
            for n in NAMES:
                assert not (await drv.prepare(n, f"{txn}.p1", mid_configs[n])).failed
            for n in NAMES:
                assert not (await drv.commit(n, f"{txn}.p1", 60)).failed
                assert not (await drv.confirm(n, f"{txn}.p1")).failed
            for n in NAMES:
                assert not (await drv.prepare(n, txn, final_configs[n])).failed
            for n in NAMES[: len(NAMES) // 2]:
                assert not (await drv.commit(n, txn, 60)).failed

    asyncio.run(died())
    driver = DryDriver(NAMES, tmp_path / "dry")
    with TestClient(create_app(settings, database=db, driver=driver)) as client:
        ch = wait_final(client, cid, auth)
        assert ch["state"] == "rolled_back", ch
        assert "recovered after a controller restart" in ch["transitions"][-1]["reason"]
        for d in NAMES:
            st = client.get(f"/v1/devices/{d}/state", headers=auth).json()
            assert st["running_hash"] == base_hashes[d] and not st["pending_change"], (d, st)
        assert ch["settled"] is True, ch
    db.dispose()


class SessionsComeBack(DryDriver):
    """Dry agents whose ``watched`` device reports its kernel routes as observed and the BGP session on
    ``port`` down for its first ``down_reads`` reads once its peer has moved (never up: ``down_reads``
    None)."""

    def __init__(self, devices: list[str], base: Path, watched: str, key: str, down_reads: int | None):
        super().__init__(devices, base)
        self.watched, self.key, self.down_reads, self.reads = watched, key, down_reads, 0

    async def state(self, device: str, prefixes: tuple[str, ...] = ()) -> Any:
        from dataclasses import replace

        from southbound.state import BgpSession

        st = await super().state(device, prefixes)
        if device != self.watched:
            return st
        self.reads += 1
        up = self.down_reads is not None and self.reads > self.down_reads
        return replace(st, observed=True, sessions=(BgpSession(self.key, "Established" if up else "Idle", 65010),))


def test_a_stage_is_read_back_only_once_the_sessions_it_reset_are_up_again(tmp_path: Path) -> None:
    """The schedule's states assume a session the change reset, between two devices of earlier stages,
    is up again: the transaction reads such a stage back until it is, and fails the stage (rolling
    the change back) if it never comes up; a session whose peer has not moved is not waited for."""
    from southbound.transaction import commit_plan

    doc = json.loads(json.dumps(BASE))
    doc["policies"] = [p for p in doc.get("policies", []) if p.get("kind") != "wcmp"] + [
        {"kind": "wcmp", "enabled": True, "realization": "fib"}]
    it = validate_intent(doc)
    plan = _solve(it)
    cfg = device_configs(it, plan)["tor-0-0"]
    n = next(x for x in cfg.neighbors if x.peer == "leaf-0-0")
    stages = [["leaf-0-0"], ["tor-0-0"], ["tor-1-0"]]

    async def run(down_reads: int | None, sessions: dict[str, list[str]], sub: str) -> tuple[Any, int]:
        async with SessionsComeBack(NAMES, tmp_path / sub, "tor-0-0", n.key, down_reads) as drv:
            r = await commit_plan(drv, it, plan, verify_timeout=3, verify_interval=0.05, stages=stages,
                                  sessions=sessions)
            return r, drv.reads

    ok, reads = asyncio.run(run(4, {"tor-0-0": [n.port]}, "a"))
    assert ok.ok, ok.error
    assert reads >= 5  # the tor's stage waited for its session to leaf-0-0, which moved before it
    never, _ = asyncio.run(run(None, {"tor-0-0": [n.port]}, "b"))
    assert not never.ok and never.stage in ("verify", "rollback") and "not re-established" in never.error, never.error
    unrelated, reads = asyncio.run(run(None, {"tor-0-0": [x.port for x in cfg.neighbors if x.peer != "leaf-0-0"]},
                                       "c"))
    assert unrelated.ok, unrelated.error  # its peer (leaf-0-1) moves in the last stage: nothing to wait for


def _solve(it: Any) -> Any:
    from solver import solve

    return solve(it)


def test_the_confirm_timer_of_a_stage_covers_the_stages_after_it(tmp_path: Path) -> None:
    """A device of the first of three stages must not roll back by itself while the later stages are
    committed and read back: its timer gets one verify timeout more per stage after its own."""
    from southbound.transaction import commit_plan

    it = validate_intent(BASE)
    plan = _solve(it)
    asked: dict[str, float] = {}

    class Recording(DryDriver):
        async def commit(self, device: str, change: str, confirm_within: float) -> StepResult:
            asked[device] = confirm_within
            return await super().commit(device, change, confirm_within)

    async def run() -> Any:
        async with Recording(NAMES, tmp_path / "dry") as drv:
            return await commit_plan(drv, it, plan, confirm_within=5, verify_timeout=7,
                                     stages=[["tor-0-0"], ["tor-0-1"]])

    r = asyncio.run(run())
    assert r.ok, r.error
    assert asked["tor-0-0"] == 5 + 2 * 7 and asked["tor-0-1"] == 5 + 7
    assert {asked[d] for d in NAMES if d not in ("tor-0-0", "tor-0-1")} == {5}

"""The dry driver: the agent's state machine in process, behind the same DeviceDriver protocol.

A whole transaction over :class:`southbound.device.dry.DryDriver` ends with every
device on the config hash the controller's renderer predicts; a refused call is
a failed step, not an exception; and the change workflow, handed the dry driver
by the composition root (``create_app(driver=...)``), reviews and commits
through it exactly as through the gRPC driver.
"""

from __future__ import annotations

import asyncio
import time
import warnings
from pathlib import Path

from controller import service
from controller.model.intent import load_intent, validate_intent
from controller.settings import Settings
from controller.store.db import Database
from controller.workflow.review import expected_hashes
from solver import solve
from southbound.device.dry import DryDriver
from southbound.driver import DeviceDriver
from southbound.transaction import commit_plan, new_change_id

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

from api.app import create_app

REPO = Path(__file__).resolve().parents[2]
INTENT = load_intent(REPO / "labs" / "clos3-small" / "intent.yaml")
NAMES = [d.name for d in INTENT.devices]
SETUP = service.WriteContext(actor=service.Actor("setup", "admin"))


async def _hashes(driver: DeviceDriver) -> dict[str, str]:
    return {d: (await driver.state(d)).running_hash for d in driver.devices}


def test_a_transaction_over_the_dry_driver_lands_the_predicted_configs(tmp_path: Path) -> None:
    plan = solve(INTENT)
    doc = INTENT.to_document()
    doc["policies"] = [*doc.get("policies", []), {"kind": "drain", "target": "spine-0-0"}]
    drained = validate_intent(doc)
    drained_plan = solve(drained)

    async def run() -> None:
        async with DryDriver(NAMES, tmp_path) as driver:
            result = await commit_plan(driver, INTENT, plan, verify_timeout=5)
            assert result.ok, result.error
            assert await _hashes(driver) == expected_hashes(INTENT, plan)
            again = await commit_plan(driver, drained, drained_plan, verify_timeout=5)
            assert again.ok, again.error
            assert await _hashes(driver) == expected_hashes(drained, drained_plan) != expected_hashes(INTENT, plan)
            wrong = await driver.confirm(NAMES[0], "no-such-change")
            assert wrong.failed and wrong.error.startswith("FAILED_PRECONDITION"), wrong
            missing = await driver.abort("no-such-device", new_change_id())
            assert missing.failed and "no such dry device" in missing.error
        async with DryDriver(NAMES, tmp_path) as reopened:  # the state is on disk, as an agent's is
            assert await _hashes(reopened) == expected_hashes(drained, drained_plan)

    asyncio.run(run())


def test_the_workflow_commits_through_the_driver_the_composition_root_hands_it(tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path / 'loom.db'}")
    db.migrate()
    with db.session() as s:
        service.replace_intent(INTENT.to_document(), session=s, ctx=SETUP)
        token = service.create_token("op", "operator", session=s, ctx=SETUP)[1]
    driver = DryDriver(NAMES, tmp_path / "dry")
    auth = {"Authorization": f"Bearer {token}"}
    with TestClient(create_app(Settings(db_url=db.url, drift_interval=0, verify_timeout=5), database=db,
                               driver=driver)) as client:
        r = client.post("/v1/changes", json={"base_revision": 1, "intent": INTENT.to_document()}, headers=auth)
        assert r.status_code == 201, r.text
        cid = r.json()["id"]
        review = client.post(f"/v1/changes/{cid}/review", headers=auth).json()
        assert review["verdict"] == "safe" and set(review["config_diff"]) == set(NAMES)  # from the dry Prepare
        assert client.post(f"/v1/changes/{cid}/commit", json={}, headers=auth).status_code == 202
        deadline = time.monotonic() + 60
        while (ch := client.get(f"/v1/changes/{cid}", headers=auth).json())["state"] == "committing":
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert ch["state"] == "committed", ch
        state = client.get("/v1/devices/spine-0-0/state", headers=auth).json()
        assert state["endpoint"].startswith("dry:") and state["running_hash"] == expected_hashes(
            INTENT, solve(INTENT))["spine-0-0"]
    db.dispose()

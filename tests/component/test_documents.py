"""The typed answer documents (``controller.model.documents``) and the OpenAPI snapshot.

Every document Loom produces must validate against its model and come back
unchanged (``exclude_unset``, by alias), compared as JSON text so that a field
the model drops, renames, adds or retypes (``1`` to ``1.0``) shows. Through
the API, the review a ``GET /v1/changes/{id}`` serves (validated by its
response model) must be the very review ``POST .../review`` answered (not
validated), and a plan must be what the store holds. The OpenAPI document is
frozen in ``tests/golden/openapi.json`` (``LOOM_UPDATE_GOLDEN=1`` to accept a
deliberate change).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import BaseModel

from api.app import create_app
from controller import service
from controller.model.documents import (
    ChangeDocument,
    ChangeState,
    DeviceStateDocument,
    PlanDocument,
    ProgressDocument,
    ReviewBrief,
    ReviewDocument,
    SafetyReportDocument,
)
from controller.model.intent import load_intent
from controller.settings import Settings
from controller.store.db import Database
from controller.store.workflow_repo import Change
from controller.workflow import changes
from controller.workflow.review import build_review, local_config_diff
from safety.replay import replay
from solver import solve
from tests.golden_files import GOLDEN, assert_golden

EXAMPLE = load_intent(service.EXAMPLE_INTENT)
SETUP = service.WriteContext(actor=service.Actor("setup", "admin"))


def text(doc: Any) -> str:
    return json.dumps(doc, sort_keys=True)


def same_after(model: type[BaseModel], doc: Any) -> None:
    back = model.model_validate(doc).model_dump(mode="json", by_alias=True, exclude_unset=True)
    assert text(back) == text(doc)


@pytest.fixture(scope="module")
def plan() -> Any:
    return solve(EXAMPLE)


def test_plan_and_safety_report_documents_round_trip(plan: Any) -> None:
    same_after(PlanDocument, plan.to_document())
    report = replay(EXAMPLE, plan)
    same_after(SafetyReportDocument, report.to_document())
    assert report.to_model().verdict == report.verdict


def test_review_and_change_documents_round_trip(plan: Any) -> None:
    drained = EXAMPLE.to_document()
    drained["policies"] = [*drained.get("policies", []), {"kind": "drain", "target": "leaf-0-0"}]
    from controller.model.intent import validate_intent

    proposed = validate_intent(drained)
    now = datetime.now(UTC)
    ch = Change(7, "change", ChangeState.DRAFT, 1, 2, "drain", "op", now, None, None, None, None, None, None, None,
                None)
    for active in (None, 1):
        inp = changes.ReviewInputs(ch, proposed, solve(proposed), active, EXAMPLE if active else None,
                                   plan if active else None)
        review = build_review(inp, local_config_diff(inp))
        assert review["plan_diff"] and review["config_diff"]
        same_after(ReviewDocument, review)
        same_after(ReviewDocument, {**review, "devices_attached": False})
        full = changes.change_document(Change(7, "change", ChangeState.REVIEWED, 1, 2, "drain", "op", now, review,
                                              active, review["verdict"], None, None, None, None, None))
        same_after(ChangeDocument, full)
        brief = changes.change_document(Change(7, "change", ChangeState.REVIEWED, 1, 2, "drain", "op", now, review,
                                               active, review["verdict"], None, None, None, None, None), full=False)
        same_after(ReviewBrief, brief["review"])
        same_after(ChangeDocument, brief)


def test_progress_documents_round_trip() -> None:
    same_after(ProgressDocument, {"step": "done", "devices": {},
                                  "note": "no devices attached: the revision is only recorded"})
    same_after(ProgressDocument, {"step": "commit", "devices": {
        "leaf-0-0": {"step": "commit", "status": "ok", "changed": True, "error": None,
                     "steps": {"prepare": "ok", "commit": "ok"}},
        "leaf-0-1": {"step": "prepare", "status": "pending", "changed": False, "error": None}}})


def test_device_state_documents_round_trip() -> None:
    from southbound.state import BgpSession, DeviceState, KernelNextHop, KernelRoute

    st = DeviceState("leaf-0-0", "ab" * 32, True, {"10.0.0.0/24": KernelRoute(
        "10.0.0.0/24", "bgp", (KernelNextHop("eth1", "10.1.0.1", 3), KernelNextHop("eth2", "", 1)))},
        (BgpSession("10.1.0.1", "Established", 65000, 4),), "chg-1")
    same_after(DeviceStateDocument, {**st.to_document(), "endpoint": "unix:/run/leaf-0-0.sock"})


def test_change_states_keep_their_values() -> None:
    assert [s.value for s in ChangeState] == ["draft", "reviewed", "committing", "committed", "failed",
                                              "rolled_back"]
    assert json.dumps({"state": ChangeState.ROLLED_BACK}) == '{"state": "rolled_back"}'


@pytest.fixture
def client(tmp_path: Path) -> Iterator[tuple[TestClient, dict[str, str]]]:
    db = Database(f"sqlite:///{tmp_path / 'docs.db'}")
    db.migrate()
    with db.session() as s:
        service.load_example(session=s, ctx=SETUP)
        token = service.create_token("op", "operator", session=s, ctx=SETUP)[1]
    with TestClient(create_app(Settings(db_url=db.url), database=db)) as c:
        yield c, {"Authorization": f"Bearer {token}"}
    db.dispose()


def test_served_documents_are_the_produced_ones(client: tuple[TestClient, dict[str, str]]) -> None:
    c, auth = client
    patch = [{"op": "add", "path": "/policies/-", "value": {"kind": "drain", "target": "leaf-0-0"}}]
    created = c.post("/v1/changes", json={"base_revision": 1, "patch": patch}, headers=auth)
    assert created.status_code == 201, created.text
    cid = created.json()["id"]
    review = c.post(f"/v1/changes/{cid}/review", headers=auth)
    assert review.status_code == 200, review.text
    same_after(ReviewDocument, review.json())
    got = c.get(f"/v1/changes/{cid}", headers=auth).json()
    assert text(got["review"]) == text(review.json())
    listed = c.get("/v1/changes", headers=auth).json()["items"][0]
    assert listed["review"]["brief"] is True and text({**got, "review": None}) == text({**listed, "review": None})
    plan = c.get(f"/v1/plans/{got['proposed_revision']}", headers=auth)
    assert plan.status_code == 200
    with c.app.state.database.session() as s:  # type: ignore[attr-defined]
        stored = changes.plan_document(got["proposed_revision"], session=s)
    assert text(plan.json()) == text(stored)


def test_openapi_matches_its_golden_file() -> None:
    app = create_app(Settings(db_url="sqlite://"))
    assert_golden(GOLDEN / "openapi.json", json.dumps(app.openapi(), indent=1, sort_keys=True) + "\n")

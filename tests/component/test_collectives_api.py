"""Collectives as data through the API (DESIGN.md, ML workloads): a job of a built-in that the first
three did not have (``reduce_scatter``) and a job of a collective only the intent defines are accepted,
stored, planned and what-if'd, with located 422s for bad templates and bad params; the plan the store
compiles equals the offline compile of the same document."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from controller.model.intent import validate_intent
from controller.planning import compile_plan
from tests.apps import Api

GB = 1e9 / 8
TORS = ["tor-0-0", "tor-0-1", "tor-1-0", "tor-1-1"]
PARAMETER_SERVER = {"params": {"server": {"kind": "number", "default": 0}},
                    "where": ["server < n"],
                    "phases": [{"from": "all", "to": "server", "bytes": "B"},
                               {"from": "server", "to": "others", "bytes": "B"}]}


def _job(collective: str, gbps: float = 4.0, name: str = "train", **kw: Any) -> dict[str, Any]:
    return {"name": name, "tors": TORS, "collective": collective, "bytes_per_iter": gbps * GB, "iter_s": 1.0, **kw}


def _plan_mlu(api: Api, revision: str) -> float:
    r = api("GET", f"/v1/plans/{revision}", role="viewer")
    assert r.status_code == 200, r.text
    return float(r.json()["summary"]["max_utilization"])


def _put(api: Api, doc: dict[str, Any]) -> Any:
    return api("PUT", "/v1/intent", json=doc)


def test_a_reduce_scatter_job_is_accepted_planned_and_what_ifd(api: Api) -> None:
    base = api("GET", "/v1/intent", role="viewer").json()
    idle = _plan_mlu(api, "1")
    made = api("POST", "/v1/jobs", json=_job("reduce_scatter", gbps=40))
    assert made.status_code == 201, made.text
    rev = made.headers["ETag"].strip('"')
    doc = api("GET", "/v1/intent", role="viewer").json()
    assert doc["jobs"][0]["collective"] == "reduce_scatter"
    offline = compile_plan(validate_intent(doc))
    assert _plan_mlu(api, rev) == pytest.approx(offline.summary.max_utilization)
    assert _plan_mlu(api, rev) > idle
    what_if = api("POST", "/v1/jobs/what-if", json=_job("reduce_scatter", gbps=40, name="other"))
    assert what_if.status_code == 200, what_if.text
    both = copy.deepcopy(doc)
    both["jobs"].append(_job("reduce_scatter", gbps=40, name="other"))
    expected = compile_plan(validate_intent(both)).summary.max_utilization
    assert what_if.json()["max_utilization"] == pytest.approx(expected)
    assert "collectives" not in base


def test_an_intent_collective_is_accepted_planned_and_what_ifd(api: Api) -> None:
    doc = api("GET", "/v1/intent", role="viewer").json()
    doc["collectives"] = {"parameter_server": PARAMETER_SERVER}
    doc["jobs"] = [_job("parameter_server", gbps=10, params={"server": 2})]
    r = _put(api, doc)
    assert r.status_code == 200, r.text
    assert r.json()["collectives"] == {"parameter_server": PARAMETER_SERVER}
    rev = r.headers["ETag"].strip('"')
    stored = api("GET", "/v1/intent", role="viewer").json()
    assert stored["collectives"] == {"parameter_server": PARAMETER_SERVER}
    intent = validate_intent(stored)
    demand = {(d.from_, d.to): d.gbps for d in intent.effective_demands}
    assert demand[("tor-0-0", "10.0.2.0/24")] >= 10.0  # the workers send B to the server, member 2
    assert _plan_mlu(api, rev) == pytest.approx(compile_plan(intent).summary.max_utilization)
    # an object edit keeps the intent's collectives (they live in the revision's frame) and may name them
    second = api("POST", "/v1/jobs", json=_job("parameter_server", gbps=1, name="small"))
    assert second.status_code == 201, second.text
    assert api("GET", "/v1/intent", role="viewer").json()["collectives"] == {"parameter_server": PARAMETER_SERVER}
    answer = api("POST", "/v1/jobs/what-if", json=_job("parameter_server", gbps=30, name="big"))
    assert answer.status_code == 200, answer.text
    assert answer.json()["max_utilization"] > _plan_mlu(api, second.headers["ETag"].strip('"'))


def test_bad_templates_and_params_are_located_422s(api: Api) -> None:
    doc = api("GET", "/v1/intent", role="viewer").json()
    doc["collectives"] = {"broken": {"phases": [{"from": "all", "to": "j", "bytes": "B"}]}}
    r = _put(api, doc)
    assert r.status_code == 422, r.text
    assert [e["loc"] for e in r.json()["errors"]] == ["collectives.broken.phases[0].to"]
    assert "unknown name 'j'" in r.json()["errors"][0]["msg"]
    r = api("POST", "/v1/jobs/what-if", json=_job("all_to_all_v", params={"skew": [[1, 2], [3, 4]]}))
    assert r.status_code == 422, r.text
    assert [(e["loc"], e["msg"]) for e in r.json()["errors"]] == [
        ("job.params.skew", "expected a 4 x 4 matrix of numbers (a list of 4 rows)")]
    r = api("POST", "/v1/jobs", json=_job("parameter_server"))
    assert r.status_code == 422, r.text
    assert r.json()["errors"][0]["loc"] == "jobs[0].collective"
    assert api("GET", "/v1/jobs?collective=reduce_scatter", role="viewer").status_code == 200

"""``POST /v1/jobs/placement`` (issue 34, item 5): where to put a job.

A 3-pod Clos whose pod 0 exchanges heavy background traffic with pod 2 (its
leaf-spine links at 70 %), with a declared job ``old`` that crosses the same
spine links. A new 4-member ring over candidates in pods 0 and 1 must stay
inside pod 1: on an idle fabric every 4-ToR ring of these candidates takes the
same time (the ToR uplinks are the bottleneck), so a search that ignores the
load ranks them by name and answers the spread one first. The figures are
checked against the performance model run independently on the plan compiled
with the job; the exhaustive and the heuristic search agree on small cases; bad
requests are located 422s; ``loom jobs placement``; nothing is written and no
store session is open while a plan is compiled.
"""

from __future__ import annotations

import contextlib
import copy
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from controller import planning
from controller.gen import clos_document
from controller.model import Job
from controller.model.intent import validate_intent, with_job
from controller.model.placement import validate_placement
from controller.planning import compile_plan
from controller.store import workflow_repo as wrepo
from controller.telemetry.jobperf import comm_time, phase_bits
from controller.telemetry.placement import PlacementOptions, rank
from controller.workflow import jobs as wjobs
from controller.workflow import plans
from safety.estimate import link_loads, routing_matrix
from tests.apps import Api

GB = 1e9 / 8  # bytes per iteration that make 1 gbps at iter_s 1
POD0 = ["tor-0-0", "tor-0-1"]
POD1 = ["tor-1-0", "tor-1-1", "tor-1-2", "tor-1-3"]
CANDIDATES = POD0 + POD1
NEW_GBPS = 80.0  # a ring member sends 120 gbps to the next: 30 more on each leaf-spine link a spread ring crosses


def _doc() -> dict[str, Any]:
    doc = clos_document(pods=3, tors=4, planes=2, spines=2, scale_to_ecmp=False)
    demands = []
    for a, b in (("0", "2"), ("2", "0")):
        for src in (f"tor-{a}-2", f"tor-{a}-3"):
            for dst in (f"10.{b}.2.0/24", f"10.{b}.3.0/24"):
                demands.append({"from": src, "to": dst, "gbps": 70.0})
    doc["demands"] = demands
    doc["failure_domains"] = []
    doc["policies"].append({"kind": "failure_tolerance", "scope": "domains"})  # none declared: the baseline only
    doc["jobs"] = [{"name": "old", "tors": ["tor-0-2", "tor-2-2"], "collective": "ring_allreduce",
                    "bytes_per_iter": 10 * GB, "iter_s": 1.0}]
    return doc


@pytest.fixture
def api_intent() -> dict[str, Any]:
    return _doc()


def _job(members: int = 4, collective: str = "ring_allreduce", gbps: float = NEW_GBPS, **kw: Any) -> dict[str, Any]:
    return {"name": kw.pop("name", "new"), "members": members, "collective": collective,
            "bytes_per_iter": gbps * GB, "iter_s": 1.0, **kw}


def _body(**kw: Any) -> dict[str, Any]:
    return {"job": kw.pop("job", _job()), "candidates": kw.pop("candidates", CANDIDATES), **kw}


def _oracle(doc: dict[str, Any], tors: list[str]) -> tuple[float, float]:
    """The new job's comm_s and old's slowdown, computed from scratch: the intent with the job compiled, its
    phases routed by that plan beside the plan's load of the rest, against old's time on the plan without it."""
    def old_time(intent: Any, plan: Any) -> float:
        old = next(j for j in intent.jobs if j.name == "old")
        rm = routing_matrix(intent, plan)
        bits = phase_bits(old, intent, rm)
        cap = rm.topo.edge_cap.astype(float)
        return comm_time(bits, cap, np.maximum(link_loads(intent, plan) - sum(bits) / old.iter_s, 0)).seconds

    before = validate_intent(doc)
    job = Job(name="new", tors=tuple(tors), collective="ring_allreduce", bytes_per_iter=NEW_GBPS * GB,
              iter_s=1.0)
    after = with_job(before, job)
    plan = compile_plan(after)
    rm = routing_matrix(after, plan)
    bits = phase_bits(job, after, rm)
    cap = rm.topo.edge_cap.astype(float)
    comm = comm_time(bits, cap, np.maximum(link_loads(after, plan) - sum(bits), 0)).seconds
    return comm, old_time(after, plan) / old_time(before, compile_plan(before))


def test_a_ring_stays_in_the_pod_whose_spine_links_are_free(api: Api) -> None:
    r = api("POST", "/v1/jobs/placement", json=_body())
    assert r.status_code == 200, r.text
    body = r.json()
    assert (body["job"], body["members"], body["search"], body["candidates"]) == ("new", 4, "exhaustive", 6)
    assert body["evaluated"] == 6 * 5 * 4 * 3  # every ordered choice of a ring
    best, *rest = body["placements"]
    assert len(rest) == 2 and sorted(best["tors"]) == POD1
    assert all(set(p["tors"]) & set(POD0) for p in rest)
    # the in-pod ring crosses no loaded link and slows nobody; the spread ones do both
    assert best["comm_s"] == pytest.approx(best["comm_s_idle"])
    assert best["max_slowdown_others"] == pytest.approx(1.0) and best["slowest_other"] == "old"
    for p in rest:
        assert p["comm_s"] > 1.3 * best["comm_s"]
        assert p["max_slowdown_others"] > 1.05
    for p in (best, rest[0]):
        comm, slowdown = _oracle(api.doc or {}, p["tors"])
        assert p["comm_s"] == pytest.approx(comm, rel=1e-6)
        assert p["max_slowdown_others"] == pytest.approx(slowdown, rel=1e-6)
    # the spread rings overload pod 0's leaf-spine links: unsafe, after the safe one
    assert [p["verdict"] for p in body["placements"]] == ["safe", "unsafe", "unsafe"]
    assert all("spine" in p["failing"][0]["detail"] for p in rest)


def test_a_what_if_job_file_with_tors_is_placed_again(api: Api) -> None:
    job = {k: v for k, v in _job().items() if k != "members"} | {"tors": ["tor-0-0", "tor-0-1", "tor-1-0",
                                                                         "tor-1-1"]}
    r = api("POST", "/v1/jobs/placement", json=_body(job=job, top=1, objective="job"))
    assert r.status_code == 200, r.text
    assert [sorted(p["tors"]) for p in r.json()["placements"]] == [POD1]


def test_placement_accepts_yaml(api: Api) -> None:
    text = (f"job: {{name: new, members: 2, collective: pipeline, bytes_per_iter: {GB}, iter_s: 1}}\n"
            "candidates: [tor-0-0, tor-1-0, tor-1-1]\ntop: 1\n")
    r = api("POST", "/v1/jobs/placement", content=text, headers={"Content-Type": "application/yaml"})
    assert r.status_code == 200, r.text
    assert [sorted(p["tors"]) for p in r.json()["placements"]] == [["tor-1-0", "tor-1-1"]]


def test_a_declared_job_placed_again_is_not_its_own_other(api: Api) -> None:
    r = api("POST", "/v1/jobs/placement", json=_body(job=_job(2, name="old", gbps=10), top=1))
    assert r.status_code == 200, r.text
    (best,) = r.json()["placements"]
    assert best["max_slowdown_others"] is None and best["slowest_other"] is None


def test_the_exhaustive_and_the_heuristic_search_agree() -> None:
    intent = validate_intent(_doc())
    plan = compile_plan(intent)
    # an all-to-all is order-free: its sets of 3 of the 7 candidates; a ring and a pipeline: every ordered choice
    for job, objective, scored in ((_job(), "balanced", 7 * 6 * 5 * 4), (_job(3, "all_to_all", 30), "others", 35),
                                   (_job(3, "pipeline", 40), "job", 7 * 6 * 5)):
        request = validate_placement({"job": job, "candidates": CANDIDATES + ["tor-2-0"], "objective": objective},
                                     intent)
        exact = rank(intent, plan, request.job, request.candidates, objective=request.objective)
        local = rank(intent, plan, request.job, request.candidates, objective=request.objective,
                     options=PlacementOptions(exhaustive_limit=0))
        assert (exact.search, local.search, exact.evaluated) == ("exhaustive", "heuristic", scored)
        assert local.evaluated < exact.evaluated
        assert local.placements[0].key == exact.placements[0].key, job["collective"]
        assert local.placements[0].tors == exact.placements[0].tors


@pytest.mark.parametrize(("body", "errors"), [
    (_body(candidates=["tor-0-0", "nope", "leaf-1-0", "tor-0-0", "tor-1-1"]),
     {("candidates[1]", "unknown device 'nope'"), ("candidates[2]", "'leaf-1-0' is a leaf, not a ToR"),
      ("candidates[3]", "'tor-0-0' already listed at candidates[0] (a ToR hosts one member of a job)")}),
    (_body(candidates=["tor-0-0", "tor-0-1", "tor-1-0"]),
     {("candidates", "3 candidate ToRs for a job of 4 members (one member per ToR)")}),
    (_body(job=_job(collective="nope")), {("job.collective", None)}),
    (_body(job={k: v for k, v in _job().items() if k != "members"}), {("job.members", None)}),
    (_body(job=_job(members=1)), {("job.members", "must be a whole number of ToRs from 2 to 4096")}),
    (_body(job=_job(3, "hierarchical_allreduce")), {("job.members", None)}),  # the template's rule on n
    (_body(top=0, objective="fast", extra=1), {("top", None), ("objective", None), ("extra", None)}),
])
def test_bad_requests_are_located(api: Api, body: dict[str, Any], errors: set[tuple[str, str | None]]) -> None:
    r = api("POST", "/v1/jobs/placement", json=body)
    assert r.status_code == 422, r.text
    assert r.headers["content-type"] == "application/problem+json"
    got = {(e["loc"], e["msg"]) for e in r.json()["errors"]}
    assert {(loc, msg if msg is not None else next((m for x, m in got if x == loc), None))
            for loc, msg in errors} == got


def test_placement_writes_nothing_and_needs_an_operator(api: Api) -> None:
    def state() -> tuple[int, int, int, Any]:
        with api.db.session() as s:
            kept = wrepo.get_plan(1, session=s)
        return (api("GET", "/v1/revisions", role="viewer").json()["total"],
                api("GET", "/v1/changes", role="viewer").json()["total"],
                api("GET", "/v1/audit", role="admin").json()["total"], kept)

    before = state()
    assert api("GET", "/v1/status", role="viewer").json()["head_revision"] == 1
    r = api("POST", "/v1/jobs/placement", json=_body(top=1))
    assert r.status_code == 200 and r.headers["ETag"] == '"1"'
    assert state() == before and before[3] is None  # no revision, change, audit entry, nor a kept plan
    assert api("GET", "/v1/status", role="viewer").json()["head_revision"] == 1
    assert api("POST", "/v1/jobs/placement", role="viewer", json=_body()).status_code == 403


def test_no_store_session_is_open_while_planning(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    """The sessions this thread holds when a plan is compiled (the app's background loops open their own)."""
    held = threading.local()
    at_compile: list[int] = []
    real_session, real_compile = api.db.session, planning.compile_plan

    @contextlib.contextmanager
    def session() -> Iterator[Any]:
        with real_session() as s:
            held.n = getattr(held, "n", 0) + 1
            try:
                yield s
            finally:
                held.n -= 1

    def compile_plan_watched(intent: Any, *args: Any, **kw: Any) -> Any:
        at_compile.append(getattr(held, "n", 0))
        return real_compile(intent, *args, **kw)

    monkeypatch.setattr(api.db, "session", session)
    monkeypatch.setattr(plans, "compile_plan", compile_plan_watched)
    monkeypatch.setattr(wjobs, "compile_plan", compile_plan_watched)
    _rev, answer = wjobs.placement_stored(_body(top=2), sessions=api.db.session)
    assert len(answer.placements) == 2
    assert at_compile == [0, 0, 0]  # the head's plan, then one per placement


def test_loom_jobs_placement(api: Api, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``loom jobs placement`` through the API app in-process (its HTTP client is the test client)."""
    import json

    import httpx
    from typer.testing import CliRunner

    from controller.cli import _register, app

    def client(base_url: str, headers: dict[str, str], timeout: float) -> httpx.Client:
        api.client.headers.update(headers)
        return api.client  # type: ignore[no-any-return]

    _register()
    monkeypatch.setattr(httpx, "Client", client)
    monkeypatch.setenv("LOOM_TOKEN", api.tokens["operator"])
    job = tmp_path / "job.yaml"
    job.write_text(f"name: new\nmembers: 4\ncollective: ring_allreduce\nbytes_per_iter: {NEW_GBPS * GB}\niter_s: 1\n")
    args = ["jobs", "placement", str(job), "--candidates", ",".join(CANDIDATES), "--top", "2"]
    r = CliRunner().invoke(app, [*args, "--json"])
    assert r.exit_code == 0, r.output
    answer = json.loads(r.output)
    direct = api("POST", "/v1/jobs/placement", json=_body(top=2)).json()
    for doc in (answer, direct):
        doc.pop("search_s")
    assert answer == direct
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    assert all(t in r.output for t in POD1) and "safe" in r.output and "unsafe" in r.output
    r = CliRunner().invoke(app, [*args[:3], "--candidates", "tor-0-0,nope", "--members", "2"])
    assert r.exit_code == 2 and "candidates[1]" in r.output


def test_the_document_is_in_the_openapi(api: Api) -> None:
    spec = api("GET", "/openapi.json", role=None).json()
    op = spec["paths"]["/v1/jobs/placement"]["post"]
    assert op["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].endswith("JobPlacementsDocument")
    fields = set(spec["components"]["schemas"]["JobPlacementDocument"]["properties"])
    assert {"tors", "comm_s", "max_slowdown_others", "verdict"} <= fields  # DESIGN.md's names
    assert copy.deepcopy(op["requestBody"]["content"]["application/json"]["schema"]["required"]) == ["job",
                                                                                                     "candidates"]

"""ML jobs as intent: the ``jobs`` section's validation, its compile into demand
(hand-computed for each collective), the one merged demand every planner sees,
and ``POST /v1/jobs/what-if`` (answers, errors, nothing written)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from controller.gen import clos_document
from controller.model import Intent, Job
from controller.model.errors import Infeasible, InvalidIntent
from controller.model.intent import dump_intent, parse_intent_text, validate_intent, validate_job, with_job
from controller.model.jobs import job_demands, job_pairs
from controller.planning import compile_plan
from safety.replay import replay
from tests.apps import Api

GB = 1e9 / 8  # bytes per iteration that make 1 gbps at iter_s 1


def _doc(jobs: list[dict[str, Any]] | None = None, demands: bool = False) -> dict[str, Any]:
    """A 2 x 2 Clos (tor-P-T originates 10.P.T.0/24) with no declared demand unless asked."""
    doc = clos_document(pods=2, tors=2, planes=2, spines=2)
    if not demands:
        doc["demands"] = []
    if jobs is not None:
        doc["jobs"] = jobs
    return doc


def _job(tors: list[str], collective: str = "ring_allreduce", gbps: float = 1.0, **kw: Any) -> dict[str, Any]:
    iter_s = kw.pop("iter_s", 1.0)
    return {"name": kw.pop("name", "train"), "tors": tors, "collective": collective,
            "bytes_per_iter": gbps * GB * iter_s, "iter_s": iter_s, **kw}


def _matrix(intent: Intent) -> dict[tuple[str, str], float]:
    return {(d.from_, d.to): round(d.gbps, 9) for d in intent.effective_demands}


def _errors(doc: Any) -> list[str]:
    with pytest.raises(InvalidIntent) as exc:
        validate_intent(doc)
    return [f"{e.loc}: {e.msg}" for e in exc.value.errors]


# -- the compile, by hand -------------------------------------------------------
def test_ring_allreduce_sends_2_n_minus_1_over_n_to_the_next_member() -> None:
    # n = 3, B/t = 12 gbps: each member sends 2 * 2/3 * 12 = 16 gbps to the next, the last to the first
    i = validate_intent(_doc([_job(["tor-0-0", "tor-1-1", "tor-0-1"], gbps=12)]))
    assert _matrix(i) == {("tor-0-0", "10.1.1.0/24"): 16.0, ("tor-1-1", "10.0.1.0/24"): 16.0,
                          ("tor-0-1", "10.0.0.0/24"): 16.0}


def test_all_to_all_sends_b_over_n_t_to_each_other_member() -> None:
    # n = 4, B/t = 8 gbps: 2 gbps on each of the 12 ordered pairs
    tors = ["tor-0-0", "tor-0-1", "tor-1-0", "tor-1-1"]
    i = validate_intent(_doc([_job(tors, "all_to_all", gbps=8)]))
    m = _matrix(i)
    assert len(m) == 12 and set(m.values()) == {2.0}
    assert ("tor-0-0", "10.0.0.0/24") not in m


def test_pipeline_sends_b_over_t_stage_to_stage_without_wrap() -> None:
    i = validate_intent(_doc([_job(["tor-1-1", "tor-0-0", "tor-1-0"], "pipeline", gbps=5, iter_s=0.5)]))
    assert _matrix(i) == {("tor-1-1", "10.0.0.0/24"): 5.0, ("tor-0-0", "10.1.0.0/24"): 5.0}


def test_rates_are_bytes_times_8_over_1e9_per_second() -> None:
    job = Job(name="j", tors=("a", "b"), collective="pipeline", bytes_per_iter=2.5e9, iter_s=0.25)
    assert job_pairs(job) == [("a", "b", 80.0)]


def test_a_member_with_two_prefixes_receives_split_evenly() -> None:
    doc = _doc([_job(["tor-0-0", "tor-1-1"], gbps=10)])
    doc["prefixes"].append({"prefix": "10.9.0.0/24", "origins": ["tor-1-1"]})
    i = validate_intent(doc)
    # n = 2: 2 * 1/2 * 10 = 10 gbps each way; tor-1-1's share split over its two prefixes
    assert _matrix(i) == {("tor-0-0", "10.1.1.0/24"): 5.0, ("tor-0-0", "10.9.0.0/24"): 5.0,
                          ("tor-1-1", "10.0.0.0/24"): 10.0}
    assert job_demands(i.jobs[0], {"tor-1-1": ["p1", "p2"], "tor-0-0": ["p0"]}) == {
        ("tor-0-0", "p1"): 5.0, ("tor-0-0", "p2"): 5.0, ("tor-1-1", "p0"): 10.0}


def test_job_demand_adds_to_a_declared_demand_of_the_same_pair() -> None:
    doc = _doc([_job(["tor-0-0", "tor-1-1"], "pipeline", gbps=7),
                _job(["tor-0-0", "tor-1-1"], "pipeline", gbps=1, name="other")])
    doc["demands"] = [{"from": "tor-1-0", "to": "10.0.0.0/24", "gbps": 3.0},
                      {"from": "tor-0-0", "to": "10.1.1.0/24", "gbps": 2.5}]
    i = validate_intent(doc)
    eff = i.effective_demands
    assert [(d.from_, d.to, d.gbps) for d in eff] == [
        ("tor-1-0", "10.0.0.0/24", 3.0), ("tor-0-0", "10.1.1.0/24", 10.5)]
    assert [d.gbps for d in i.demands] == [3.0, 2.5]  # the document is unchanged
    assert i.demand_loc(1) == "demands[1]"


def test_without_jobs_the_effective_demand_is_the_declared_one() -> None:
    i = validate_intent(_doc(demands=True))
    assert i.effective_demands is i.demands


def test_a_job_only_pair_is_located_at_its_job() -> None:
    i = validate_intent(_doc([_job(["tor-0-0", "tor-0-1"], "pipeline"), _job(["tor-1-0", "tor-1-1"], "pipeline",
                                                                            name="b")]))
    assert [i.demand_loc(k) for k in range(len(i.effective_demands))] == ["jobs[0]", "jobs[1]"]


# -- one effective demand for every planner --------------------------------------
def test_plan_and_replay_see_the_job_demand() -> None:
    """The plan with a job equals the plan of the same demand declared by hand, and the replay
    delivers it (the simulator as the oracle)."""
    jobs = [_job(["tor-0-0", "tor-1-1", "tor-1-0"], gbps=60)]
    with_jobs = validate_intent(_doc(jobs, demands=True))
    by_hand = _doc(demands=True)
    by_hand["demands"] = [d.model_dump(mode="json", by_alias=True) for d in with_jobs.effective_demands]
    declared = validate_intent(by_hand)
    plan_a, plan_b = compile_plan(with_jobs), compile_plan(declared)
    base = compile_plan(validate_intent(_doc(demands=True)))
    assert plan_a.summary.max_utilization == pytest.approx(plan_b.summary.max_utilization)
    assert plan_a.summary.max_utilization > base.summary.max_utilization
    ra, rb = replay(with_jobs, plan_a), replay(declared, plan_b)
    assert ra.to_document()["failing"] == rb.to_document()["failing"]
    assert ra.verdict == rb.verdict


def test_an_unroutable_job_demand_names_its_job() -> None:
    doc = _doc([_job(["tor-0-0", "tor-1-1"], "pipeline")])
    doc["policies"] = [{"kind": "drain", "target": "leaf-0-0"}, {"kind": "drain", "target": "leaf-0-1"}]
    with pytest.raises(Infeasible) as exc:
        compile_plan(validate_intent(doc))
    assert "jobs[0]" in str(exc.value)


# -- validation --------------------------------------------------------------
def test_jobs_round_trip_through_the_document() -> None:
    i = validate_intent(_doc([_job(["tor-0-0", "tor-1-1"])]))
    again = validate_intent(parse_intent_text(dump_intent(i)))
    assert again == i and again.content_hash == i.content_hash
    assert i.to_document()["jobs"][0]["collective"] == "ring_allreduce"


def test_every_job_error_is_located_and_reported_at_once() -> None:
    errs = _errors(_doc([
        _job(["tor-0-0", "tor-1-1", "x", "leaf-0-0", "tor-0-0"]),
        _job(["tor-0-0", "tor-0-1"], name="train"),
        {"name": "bad", "tors": ["tor-0-0"], "collective": "broadcast", "bytes_per_iter": -1, "iter_s": 0,
         "gpus": 8},
        _job(["tor-0-0", "tor-0-1"], name="huge", bytes_per_iter=1e15, iter_s=1e-6),
    ]))
    assert "jobs[0].tors[2]: unknown device 'x'" in errs
    assert any(e.startswith("jobs[0].tors[3]: 'leaf-0-0' originates no prefix") for e in errs)
    assert any(e.startswith("jobs[0].tors[4]: 'tor-0-0' already listed") for e in errs)
    assert any(e.startswith("jobs[1].name: duplicate job 'train'") for e in errs)
    for field in ("tors", "collective", "bytes_per_iter", "iter_s", "gpus"):
        assert any(e.startswith(f"jobs[2].{field}:") for e in errs), (field, errs)
    assert any(e.startswith("jobs[3]") and "gbps" in e for e in errs), errs


@pytest.mark.parametrize("value", [float("inf"), float("nan"), 0, -1, 2e15])
def test_bytes_per_iter_is_positive_finite_and_bounded(value: float) -> None:
    errs = _errors(_doc([_job(["tor-0-0", "tor-0-1"], bytes_per_iter=value)]))
    assert [e.split(":")[0] for e in errs] == ["jobs[0].bytes_per_iter"]


def test_jobs_must_be_a_list() -> None:
    assert _errors(_doc(jobs={"name": "x"})) == ["jobs: must be a list"]  # type: ignore[arg-type]


def test_validate_job_locates_errors_under_job() -> None:
    intent = validate_intent(_doc())
    with pytest.raises(InvalidIntent) as exc:
        validate_job(_job(["nope", "tor-0-0"]), intent)
    assert [f"{e.loc}: {e.msg}" for e in exc.value.errors] == ["job.tors[0]: unknown device 'nope'"]
    with pytest.raises(InvalidIntent) as exc:
        validate_job({"name": "x"}, intent)
    assert {e.loc for e in exc.value.errors} == {"job.tors", "job.collective", "job.bytes_per_iter", "job.iter_s"}


def test_with_job_replaces_a_declared_job_of_the_same_name() -> None:
    intent = validate_intent(_doc([_job(["tor-0-0", "tor-0-1"])]))
    moved = with_job(intent, validate_job(_job(["tor-1-0", "tor-1-1"]), intent))
    assert [j.tors for j in moved.jobs] == [("tor-1-0", "tor-1-1")]
    added = with_job(intent, validate_job(_job(["tor-1-0", "tor-1-1"], name="second"), intent))
    assert [j.name for j in added.jobs] == ["train", "second"]


# -- POST /v1/jobs/what-if ----------------------------------------------------------
def _counts(api: Api) -> tuple[int, int, int]:
    revs = api("GET", "/v1/revisions", role="viewer").json()["total"]
    chs = api("GET", "/v1/changes", role="viewer").json()["total"]
    audit = api("GET", "/v1/audit", role="admin").json()["total"]
    return revs, chs, audit


def test_what_if_answers_and_writes_nothing(api: Api) -> None:
    before = _counts(api)
    small = api("POST", "/v1/jobs/what-if", json=_job(["tor-0-0", "tor-1-1"], gbps=1))
    assert small.status_code == 200, small.text
    body = small.json()
    assert set(body) == {"max_utilization", "verdict", "failing"}
    assert body["verdict"] == "safe" and body["failing"] == []
    assert small.headers["ETag"] == '"1"'
    big = api("POST", "/v1/jobs/what-if", json=_job(["tor-0-0", "tor-1-1", "tor-0-1", "tor-1-0"], "all_to_all",
                                                    gbps=800))
    assert big.status_code == 200, big.text
    assert big.json()["max_utilization"] > body["max_utilization"]
    assert big.json()["verdict"] == "unsafe" and big.json()["failing"]
    assert {"scenario", "stage", "invariant", "detail"} == set(big.json()["failing"][0])
    assert _counts(api) == before


def test_what_if_agrees_with_compiling_the_intent_with_the_job(api: Api) -> None:
    job = _job(["tor-1-1", "tor-0-0"], "pipeline", gbps=30)
    got = api("POST", "/v1/jobs/what-if", json=job).json()
    doc = copy.deepcopy(api("GET", "/v1/intent", role="viewer").json())
    doc["jobs"] = [job]
    intent = validate_intent(doc)
    plan = compile_plan(intent)
    assert got["max_utilization"] == pytest.approx(plan.summary.max_utilization)
    assert got["verdict"] == replay(intent, plan).verdict


def test_what_if_accepts_yaml(api: Api) -> None:
    text = "name: t\ntors: [tor-0-0, tor-1-0]\ncollective: ring_allreduce\nbytes_per_iter: 1e9\niter_s: 1\n"
    r = api("POST", "/v1/jobs/what-if", content=text, headers={"Content-Type": "application/yaml"})
    assert r.status_code == 200, r.text


def test_what_if_locates_errors_under_job(api: Api) -> None:
    r = api("POST", "/v1/jobs/what-if", json=_job(["leaf-9-9", "tor-0-0"], "all_to_all", gpus=1))
    assert r.status_code == 422, r.text
    assert r.headers["content-type"] == "application/problem+json"
    locs = {e["loc"] for e in r.json()["errors"]}
    assert locs == {"job.gpus"}  # a malformed job is not checked against the fabric
    r = api("POST", "/v1/jobs/what-if", json=_job(["leaf-9-9", "tor-0-0"], "all_to_all"))
    assert [(e["loc"], e["msg"]) for e in r.json()["errors"]] == [("job.tors[0]", "unknown device 'leaf-9-9'")]


def test_what_if_needs_an_operator(api: Api) -> None:
    r = api("POST", "/v1/jobs/what-if", role="viewer", json=_job(["tor-0-0", "tor-1-1"]))
    assert r.status_code == 403


def test_what_if_without_an_intent_is_404(tmp_path: Any) -> None:
    from tests.apps import running_api

    with running_api(f"sqlite:///{tmp_path / 'empty.db'}", intent=None, example=False) as api:
        r = api("POST", "/v1/jobs/what-if", json=_job(["tor-0-0", "tor-1-1"]))
        assert r.status_code == 404, r.text


# -- /v1/jobs, the collection ----------------------------------------------------------
def test_jobs_are_a_collection_like_the_others(api: Api) -> None:
    made = api("POST", "/v1/jobs", json=_job(["tor-0-0", "tor-1-1"], gbps=2))
    assert made.status_code == 201, made.text
    assert made.json()["id"] == "train" and made.headers["Location"].endswith("/v1/jobs/train")
    api("POST", "/v1/jobs", json=_job(["tor-0-1", "tor-1-0"], "all_to_all", name="moe"))
    assert [j["id"] for j in api("GET", "/v1/jobs?tor=tor-1-1", role="viewer").json()["items"]] == ["train"]
    assert [j["id"] for j in api("GET", "/v1/jobs?collective=all_to_all", role="viewer").json()["items"]] == ["moe"]
    assert api("GET", "/v1/jobs/train", role="viewer").json()["tors"] == ["tor-0-0", "tor-1-1"]
    patched = api("PATCH", "/v1/jobs/train", json={"iter_s": 2.0})
    assert patched.status_code == 200 and patched.json()["iter_s"] == 2.0
    assert api("POST", "/v1/jobs", json=_job(["tor-0-0", "tor-1-1"])).status_code == 409
    intent = api("GET", "/v1/intent", role="viewer").json()
    assert [j["name"] for j in intent["jobs"]] == ["train", "moe"]
    diff = api("GET", "/v1/revisions/1/diff/3", role="viewer").json()
    assert {"kind": "job", "name": "train"} in diff["added"]
    assert api("DELETE", "/v1/jobs/moe").status_code == 204


def test_a_job_on_unknown_tors_is_refused_with_its_location(api: Api) -> None:
    r = api("POST", "/v1/jobs", json=_job(["tor-0-0", "nope"]))
    assert r.status_code == 422, r.text
    assert [(e["loc"], e["msg"]) for e in r.json()["errors"]] == [("jobs[0].tors[1]", "unknown device 'nope'")]


# -- the CLI: loom validate, plan and check see the jobs ----------------------------------
def test_loom_plan_and_check_route_the_job_demand(tmp_path: Any) -> None:
    from typer.testing import CliRunner

    from controller.cli import _register, app
    from controller.model.plan import Plan

    _register()
    runner = CliRunner()
    jobs = [_job(["tor-0-0", "tor-1-1"], "pipeline", gbps=40)]
    plain, with_jobs = tmp_path / "plain.yaml", tmp_path / "jobs.yaml"
    declared = [{"from": "tor-1-0", "to": "10.0.1.0/24", "gbps": 1.0}]
    plain.write_text(dump_intent(validate_intent({**_doc(), "demands": declared})))
    with_jobs.write_text(dump_intent(validate_intent({**_doc(jobs), "demands": declared})))
    v = runner.invoke(app, ["validate", str(with_jobs), "--json"])
    assert v.exit_code == 0 and '"jobs": 1' in v.output
    for path in (plain, with_jobs):
        r = runner.invoke(app, ["plan", str(path), "--json", "--out", str(path.with_suffix(".plan.json"))])
        assert r.exit_code == 0, r.output
    carried = {}
    for path in (plain, with_jobs):
        plan = Plan.from_document(parse_intent_text(path.with_suffix(".plan.json").read_text(), "json"))
        carried[path.name] = max(max(x.gbps_ab, x.gbps_ba) for x in plan.links)
    # ToR to leaf: the two planes share each demand
    assert carried == {"plain.yaml": pytest.approx(0.5), "jobs.yaml": pytest.approx(40.0 / 2)}
    c = runner.invoke(app, ["check", str(with_jobs), "--json"])
    assert c.exit_code == 0, c.output
    assert '"verdict": "safe"' in c.output


def test_loom_jobs_what_if(api: Api, tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """``loom jobs what-if`` through the API app in-process (its HTTP client is the test client)."""
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
    job.write_text("name: t\ntors: [tor-0-0, tor-1-1]\ncollective: ring_allreduce\nbytes_per_iter: 1e8\niter_s: 1\n")
    r = CliRunner().invoke(app, ["jobs", "what-if", str(job), "--server", "http://test"])
    assert r.exit_code == 0, r.output
    assert "SAFE with job 't'" in r.output
    r = CliRunner().invoke(app, ["jobs", "what-if", str(job), "--json"])
    assert r.exit_code == 0 and '"verdict": "safe"' in r.output
    job.write_text("name: t\ntors: [tor-0-0, nope]\ncollective: ring_allreduce\nbytes_per_iter: 1e8\niter_s: 1\n")
    r = CliRunner().invoke(app, ["jobs", "what-if", str(job)])
    assert r.exit_code == 2 and "job.tors[1]" in r.output

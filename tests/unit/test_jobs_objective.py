"""``auto_te`` with ``objective: jobs`` (#34 item 4): the plan of least worst priority-weighted job slowdown,
links under their limit, never worse than the maximum-utilization plan by its own measure; the review and
the auto-TE evaluation show each job's predicted communication time before and after."""

from __future__ import annotations

import random
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

from controller.gen import clos_document
from controller.jobplan import TIE, _better, job_times, plan_for_jobs, worst_slowdown
from controller.model.intent import validate_intent
from controller.planning import compile_plan
from controller.workflow.autote import evaluate
from controller.workflow.changes import ReviewInputs
from controller.workflow.review import build_review
from safety.estimate import link_loads
from solver.clos.react import KEPT, kept_model
from solver.solve import solve


def jobs_doc(seed: int = 1, objective: str | None = None) -> dict[str, Any]:
    """A 2-pod Clos under gravity background demand, with five jobs of three collectives and priorities."""
    doc = clos_document(pods=2, tors=4, planes=2, spines=2, seed=seed, demand="gravity", load=0.6)
    rng = random.Random(seed)
    tors = [d["name"] for d in doc["devices"] if d["role"] == "tor"]
    collectives = ["ring_allreduce", "all_to_all", "pipeline"]
    doc["jobs"] = [{"name": f"job{k}", "tors": rng.sample(tors, 4), "collective": collectives[k % 3],
                    "bytes_per_iter": 2e9, "iter_s": 1.0, "priority": [1, 2, 4][k % 3]} for k in range(5)]
    if objective is not None:
        doc["policies"].append({"kind": "auto_te", "enabled": False, "objective": objective})
    return doc


def test_the_jobs_objective_lowers_the_worst_weighted_slowdown_within_the_links_limit() -> None:
    mlu_intent, jobs_intent = validate_intent(jobs_doc()), validate_intent(jobs_doc(objective="jobs"))
    mlu_plan, jobs_plan = compile_plan(mlu_intent), compile_plan(jobs_intent)
    worst_mlu = worst_slowdown(job_times(mlu_intent, mlu_plan))
    worst_jobs = worst_slowdown(job_times(mlu_intent, jobs_plan))
    assert worst_jobs < worst_mlu - 0.1, (worst_mlu, worst_jobs)
    loads = link_loads(mlu_intent, jobs_plan)
    top = max(max(loads[2 * i], loads[2 * i + 1]) / lk.capacity_gbps for i, lk in enumerate(mlu_intent.links))
    assert abs(top - jobs_plan.summary.max_utilization) < 1e-6 and top <= 1.0  # on the real capacities
    # the default objective plans as before
    assert compile_plan(validate_intent(jobs_doc(objective="mlu"))).devices == mlu_plan.devices


def test_the_search_never_returns_a_plan_worse_than_the_mlu_one() -> None:
    for seed in (2, 3):
        it = validate_intent(jobs_doc(seed))
        base = solve(it)
        got = plan_for_jobs(it, base, solve)
        assert worst_slowdown(job_times(it, got)) <= worst_slowdown(job_times(it, base)) + 1e-12


def test_the_default_objective_is_left_out_of_the_document() -> None:
    plain = validate_intent(jobs_doc())
    doc = jobs_doc()
    doc["policies"].append({"kind": "auto_te", "enabled": False})
    with_default = validate_intent(doc)
    doc["policies"][-1]["objective"] = "mlu"
    explicit = validate_intent(doc)
    assert with_default.content_hash == explicit.content_hash != plain.content_hash
    assert "objective" not in explicit.to_document()["policies"][-1]


def test_the_review_and_the_evaluation_show_each_jobs_time_before_and_after() -> None:
    it = validate_intent(jobs_doc())
    it2 = validate_intent(jobs_doc(objective="jobs"))
    p1, p2 = compile_plan(it), compile_plan(it2)
    rv = build_review(ReviewInputs(SimpleNamespace(proposed_revision=2), it2, p2, 1, it, p1), {})  # type: ignore[arg-type]
    rows = {r["job"]: r for r in rv["jobs"]}
    assert set(rows) == {f"job{k}" for k in range(5)}
    worst = max(1 + r["priority"] * (r["slowdown_after"] - 1) for r in rows.values())
    before = max(1 + r["priority"] * (r["slowdown_before"] - 1) for r in rows.values())
    assert worst < before and all(r["comm_s_after"] >= r["comm_s_idle"] > 0 for r in rows.values())
    measured = {(d.from_, d.to): d.gbps for d in it2.effective_demands}  # the counters see the jobs too
    ev = evaluate(it2, p1, measured, 1.0)  # re-tuning the maximum-utilization plan for the jobs
    assert ev.objective == "jobs" and len(ev.jobs) == 5
    assert ev.active_predicted == worst_slowdown(job_times(it2, p1)) > ev.candidate_predicted
    assert abs(ev.candidate_predicted - worst_slowdown(job_times(it2, p2))) < 1e-6


def test_a_candidate_wins_only_by_more_than_noise() -> None:
    best = (3.5, 0.6)
    noise = (3.5 * (1 - 1e-14), 0.6)  # lower in the last digits only (``<`` on the tuples took it)
    assert noise < best and not _better(noise, best) and not _better(best, best)
    assert _better((noise[0], 0.5), best) and not _better((noise[0], 0.7), best)  # a tie: the utilization decides
    assert _better((3.5 - 1e-6, 0.9), best) and not _better((3.5 + 1e-6, 0.1), best)
    assert not _better((3.5, 0.6 * (1 - TIE / 10)), best) and _better((3.5, 0.6 - 2 * TIE), best)


def test_a_steered_candidate_reusing_the_base_pod_model_is_the_plan_compiled_afresh() -> None:
    """auto-TE's candidates differ from the intent in link capacities only: ``solve(..., like=base)`` takes
    the base plan's pod model instead of building it, and the plan is the one a fresh compile gives; an
    intent that differs in more (here its demand) is not given that model."""
    doc = jobs_doc(seed=4)
    doc["links"] = [{**lk, "a": lk["b"], "a_port": lk["b_port"], "b": lk["a"], "b_port": lk["a_port"]}
                    for lk in reversed(doc["links"])]  # written in another order than the solver's
    it = validate_intent(doc)
    base = solve(it)
    rng = random.Random(4)
    links = tuple(lk.model_copy(update={"capacity_gbps": lk.capacity_gbps * rng.choice((0.5, 0.8, 1.0))})
                  for lk in it.links)
    steered = it.model_copy(update={"links": links})
    assert kept_model(steered, base) is not None
    reused, fresh = solve(steered, like=base), solve(steered)
    made_of = [KEPT.of_plan(p) for p in (base, reused, fresh)]
    assert all(m is not None for m in made_of)
    rows = [m.solved.model.load_matrix for m in made_of if m is not None]
    assert rows[1] is rows[0] and rows[2] is not rows[0]  # taken from the base plan, not built again
    assert reused.devices == fresh.devices and reused.links == fresh.links
    untimed = [replace(p.summary, solve_seconds=0.0, extra={**p.summary.extra, "lp_seconds": 0.0})
               for p in (reused, fresh)]
    assert untimed[0] == untimed[1]
    assert fresh.links != base.links  # the capacities did change the plan
    other = it.model_copy(update={"links": links, "demands": it.demands[1:]})
    assert kept_model(other, base) is None
    assert solve(other, like=base).devices == solve(other).devices

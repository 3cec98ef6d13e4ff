"""Collectives as data (DESIGN.md, ML workloads): the expression language, the built-in templates'
matrices against hand-computed ones, the first three collectives against their code before templates,
and the intent's ``collectives:`` and jobs' ``params`` with located errors."""

from __future__ import annotations

import time
from typing import Any

import pytest

from controller.model import Job
from controller.model.collectives import CollectiveError, parse_template, traffic
from controller.model.collectives_builtin import BUILTINS
from controller.model.errors import InvalidIntent
from controller.model.expr import ExprError, evaluate, parse
from controller.model.intent import validate_intent, validate_job
from controller.model.jobs import GBPS_PER_BYTE_PER_S, job_pairs


def ev(text: str, **env: Any) -> Any:
    return evaluate(parse(text), env)


# -- the expression language --------------------------------------------------------------------
@pytest.mark.parametrize(("text", "env", "value"), [
    ("(i + 1) % n", {"i": 3, "n": 4}, 0),
    ("7 // 2 + 7 % 2 * 10", {}, 13),
    ("2 * (n - 1) / n * B", {"n": 4, "B": 8.0}, 12.0),
    ("-i - -1", {"i": 2}, -1),
    ("i < j and not j == 3 or 0", {"i": 1, "j": 2}, 1),
    ("range(2 * i + 1, min(2 * i + 3, n))", {"i": 1, "n": 4}, (3,)),
    ("skew[i][j] / sum(skew[i])", {"i": 1, "j": 0, "skew": ((1, 1), (3, 1))}, 0.75),
    ("if(i == 0, 1 / i, 5)", {"i": 1}, 5),  # only the branch taken is evaluated
    ("if(i == 0, 5, 1 / i)", {"i": 0}, 5),
    ("max(all) + len(others) + abs(-2) + floor(2.7)", {"all": (0, 1, 2), "others": (0, 2)}, 8),
    ("[1, 2, [3]][2][0]", {}, 3),
    ("1.5e3", {}, 1500.0),
])
def test_expressions_evaluate(text: str, env: dict[str, Any], value: Any) -> None:
    assert ev(text, **env) == value


@pytest.mark.parametrize(("text", "env", "message"), [
    ("1 / (n - n)", {"n": 3}, "division by zero"),
    ("i % 0", {"i": 3}, "division by zero"),
    ("j + 1", {}, "unknown name 'j'"),
    ("x[3]", {"x": (1, 2)}, "index 3 out of range"),
    ("x + 1", {"x": (1, 2)}, "must be a number, not a list"),
    ("99999999999999999999999999999999", {}, "magnitude"),
    ("1e300 * 1e300", {}, "magnitude"),
    ("100000000000000 * 100000000000000 * 100000000000000", {}, "magnitude"),
    ("range(0, 10000000000)", {}, "range of more than"),
    ("__import__('os')", {}, "unexpected character"),
    ("__import__(1)", {}, "unknown function '__import__'"),
    ("open(n)", {"n": 1}, "unknown function 'open'"),
    ("a.b", {}, "unexpected character '.'"),
    ("1 +", {}, "unexpected end"),
    ("(1", {}, r"expected '\)'"),
    ("1 2", {}, "unexpected '2'"),
    ("i ** 2", {"i": 1}, "unexpected '*'"),
    ("", {}, "empty expression"),
    ("1 < 2 < 3", {}, "unexpected '<'"),
])
def test_bad_expressions_are_errors_not_crashes(text: str, env: dict[str, Any], message: str) -> None:
    with pytest.raises(ExprError, match=message):
        ev(text, **env)


@pytest.mark.parametrize("text", ["(" * 5000 + "1" + ")" * 5000, "-" * 5000 + "1", "not " * 3000 + "1",
                                  "[" * 3000 + "]" * 3000, "x" + "[0]" * 3000])
def test_deep_nesting_is_refused_quickly(text: str) -> None:
    started = time.monotonic()
    with pytest.raises(ExprError):
        parse(text)
    assert time.monotonic() - started < 1.0


def test_deep_nesting_within_the_text_bound() -> None:
    with pytest.raises(ExprError, match="nested more than"):
        parse("(" * 300 + "1" + ")" * 300)
    assert ev("(" * 30 + "1" + ")" * 30) == 1


def test_numbers_and_booleans_as_expressions() -> None:
    assert ev("3") == 3 and evaluate(parse(2.5), {}) == 2.5
    for bad in (True, None, [1], float("inf")):
        with pytest.raises(ExprError):
            parse(bad)  # type: ignore[arg-type]


# -- the built-ins, by hand ---------------------------------------------------------------------
def summed(name: str, n: int, B: float = 12.0, params: dict[str, Any] | None = None) -> dict[tuple[int, int], float]:
    out: dict[tuple[int, int], float] = {}
    for phase in traffic(BUILTINS.get(name), n, B, params):
        for k, v in phase.items():
            out[k] = out.get(k, 0.0) + v
    return out


def test_builtin_matrices_on_small_n() -> None:
    ring = {(0, 1): 18.0, (1, 2): 18.0, (2, 3): 18.0, (3, 0): 18.0}  # 2 (n-1)/n B = 1.5 x 12
    assert summed("ring_allreduce", 4) == ring
    assert len(traffic(BUILTINS.get("ring_allreduce"), 4, 12.0)) == 2
    half = {k: 9.0 for k in ring}
    assert summed("reduce_scatter", 4) == half and summed("all_gather", 4) == half
    assert summed("all_to_all", 3, 12.0) == {(a, b): 4.0 for a in range(3) for b in range(3) if a != b}
    assert summed("pipeline", 4) == {(0, 1): 12.0, (1, 2): 12.0, (2, 3): 12.0}
    # binary tree 0 <- 1, 2; 1 <- 3, 4: B up to the parent, B down to each child
    up = {(1, 0), (2, 0), (3, 1), (4, 1)}
    assert summed("tree_allreduce", 5) == {**{e: 12.0 for e in up}, **{(b, a): 12.0 for a, b in up}}
    assert traffic(BUILTINS.get("tree_allreduce"), 5, 12.0)[0] == {e: 12.0 for e in sorted(up)}
    # prefill 0, 1 -> decode 2, 3, 4: B / 3 each
    assert summed("kv_transfer", 5, params={"prefill": 2}) == {(a, b): 4.0 for a in (0, 1) for b in (2, 3, 4)}
    assert summed("kv_transfer", 4) == {(a, b): 6.0 for a in (0, 1) for b in (2, 3)}


def test_all_to_all_v_follows_the_skew_rows() -> None:
    skew = [[0, 1, 2, 1], [1, 0, 1, 1], [5, 5, 5, 0], [1, 1, 1, 1]]
    m = summed("all_to_all_v", 4, 12.0, {"skew": skew})
    assert m[0, 1] == 3.0 and m[0, 2] == 6.0 and m[0, 3] == 3.0
    assert m[1, 0] == m[1, 2] == m[1, 3] == 4.0
    assert m[2, 0] == m[2, 1] == 6.0 and m[2, 3] == 0.0
    assert m[3, 0] == m[3, 1] == m[3, 2] == 4.0  # the diagonal is ignored
    default = summed("all_to_all_v", 4, 12.0)  # skew 1 + j % 3: members 0..3 weigh 1, 2, 3, 1
    assert default[1, 0] == 12.0 * 1 / 5 and default[1, 2] == 12.0 * 3 / 5 and default[0, 2] == 12.0 * 3 / 6


def test_hierarchical_allreduce_within_then_across() -> None:
    phases = traffic(BUILTINS.get("hierarchical_allreduce"), 4, 12.0, {"local": 2})
    assert phases[0] == {(0, 1): 6.0, (1, 0): 6.0, (2, 3): 6.0, (3, 2): 6.0}  # (local-1)/local B within
    assert phases[1] == {(0, 2): 6.0, (1, 3): 6.0, (2, 0): 6.0, (3, 1): 6.0}  # 2 (G-1)/G B/local across a rail
    assert phases[2] == phases[0]
    six = traffic(BUILTINS.get("hierarchical_allreduce"), 6, 12.0, {"local": 3})
    assert six[0] == {(0, 1): 8.0, (1, 2): 8.0, (2, 0): 8.0, (3, 4): 8.0, (4, 5): 8.0, (5, 3): 8.0}
    assert six[1] == {(0, 3): 4.0, (1, 4): 4.0, (2, 5): 4.0, (3, 0): 4.0, (4, 1): 4.0, (5, 2): 4.0}
    with pytest.raises(CollectiveError) as err:
        traffic(BUILTINS.get("hierarchical_allreduce"), 5, 12.0)
    assert err.value.loc == "where[1]" and "n % local == 0" in err.value.message


# -- the first three, as the code before templates computed them --------------------------------
def _old_job_pairs(job: Job) -> list[tuple[str, str, float]]:
    """controller/model/jobs.py's job_pairs before collectives became data (commit cd4fe9e)."""
    members = list(job.tors)
    n = len(members)
    rate = job.bytes_per_iter / job.iter_s * GBPS_PER_BYTE_PER_S
    if job.collective == "ring_allreduce":
        share = 2 * (n - 1) / n * rate
        return [(members[i], members[(i + 1) % n], share) for i in range(n)]
    if job.collective == "all_to_all":
        share = rate / n
        return [(a, b, share) for a in members for b in members if a != b]
    return [(members[i], members[i + 1], rate) for i in range(n - 1)]


@pytest.mark.parametrize("collective", ["ring_allreduce", "all_to_all", "pipeline"])
@pytest.mark.parametrize("n", [2, 3, 4, 7, 16])
@pytest.mark.parametrize(("size", "iter_s"), [(1e9, 1.0), (3.7e8, 0.013), (123456789.0, 2.5)])
def test_first_three_unchanged(collective: str, n: int, size: float, iter_s: float) -> None:
    job = Job(name="j", tors=tuple(f"t{k}" for k in range(n)), collective=collective, bytes_per_iter=size,
              iter_s=iter_s)
    new, old = job_pairs(job), _old_job_pairs(job)
    assert [(a, b) for a, b, _ in new] == [(a, b) for a, b, _ in old]  # same pairs, same order
    assert [g for *_, g in new] == pytest.approx([g for *_, g in old], rel=1e-12)


# -- templates and intents ----------------------------------------------------------------------
def fabric(**extra: Any) -> dict[str, Any]:
    tors = [f"tor-{k}" for k in range(4)]
    return {"name": "f", "routing": "isis",
            "devices": [{"name": t} for t in tors] + [{"name": "core"}],
            "links": [{"a": t, "a_port": "eth1", "b": "core", "b_port": f"eth{k + 1}"} for k, t in enumerate(tors)],
            "prefixes": [{"prefix": f"10.0.{k}.0/24", "origins": [t]} for k, t in enumerate(tors)], **extra}


def job(**kw: Any) -> dict[str, Any]:
    return {"name": "j", "tors": ["tor-0", "tor-1", "tor-2", "tor-3"], "collective": "ring_allreduce",
            "bytes_per_iter": 1e9, "iter_s": 1.0, **kw}


def errors(doc: dict[str, Any]) -> list[str]:
    with pytest.raises(InvalidIntent) as exc:
        validate_intent(doc)
    return [str(e) for e in exc.value.errors]


def test_a_reduce_scatter_job_and_an_intent_collective_compile_to_demand() -> None:
    hop2 = {"params": {"hops": {"default": 2}}, "where": ["hops < n"],
            "phases": [{"from": "all", "to": "(i + hops) % n", "bytes": "B"}]}
    intent = validate_intent(fabric(collectives={"hop": hop2}, jobs=[
        job(collective="reduce_scatter"), job(name="k", collective="hop", params={"hops": 1}, bytes_per_iter=5e8)]))
    got = {(d.from_, d.to): d.gbps for d in intent.effective_demands}
    assert got[("tor-0", "10.0.1.0/24")] == pytest.approx(0.75 * 8 + 4.0)
    assert ("tor-0", "10.0.2.0/24") not in got
    assert intent.to_document()["collectives"] == {"hop": hop2}
    assert validate_intent(intent.to_document()) == intent
    assert "collectives" not in validate_intent(fabric()).to_document()  # absent stays absent (same hash)


def test_template_errors_are_located() -> None:
    bad = {
        "a": {"phases": [{"from": "all", "to": "i", "bytes": "B"},
                         {"from": "all", "to": "(i + 1) % n", "bytes": "B"},
                         {"from": "all", "to": "j", "bytes": "B"}]},
        "b": {"phases": [{"from": "all", "to": "others", "bytes": "1 / "}]},
        "c": {"phases": []},
        "d": {"params": {"n": {"kind": "number"}}, "phases": [{"from": "all", "to": "others", "bytes": "B"}]},
        "e": {"params": {"w": {"kind": "tensor"}}, "phases": [{"from": "all", "to": "others", "bytes": "B"}]},
        "f": {"phases": [{"from": "all", "to": "others", "bytes": "B", "extra": 1}]},
        "ring_allreduce": {"phases": [{"from": "all", "to": "others", "bytes": "B"}]},
    }
    got = errors(fabric(collectives=bad))
    assert got[0].startswith("collectives.a.phases[2].to: unknown name 'j'")
    assert got[1].startswith("collectives.b.phases[0].bytes: unexpected end")
    assert got[2].startswith("collectives.c.phases: required")
    assert got[3].startswith("collectives.d.params.n: ")
    assert got[4].startswith("collectives.e.params.w.kind: unknown kind 'tensor'")
    assert got[5].startswith("collectives.f.phases[0].extra: unknown field")
    assert got[6].startswith("collectives.ring_allreduce: 'ring_allreduce' is a built-in")
    assert errors(fabric(collectives=[1])) == ["collectives: must be a mapping of collective names to templates"]


def test_job_errors_are_located() -> None:
    got = errors(fabric(jobs=[
        job(collective="nope"),
        job(name="a", collective="all_to_all_v", params={"skew": [[1, 2], [3, 4]]}),
        job(name="b", collective="pipeline", params={"x": 1}),
        job(name="c", collective="hierarchical_allreduce", params={"local": 3}),
        job(name="d", collective="all_to_all_v", params={"skew": [[0] * 4] * 4}),
        job(name="e", collective="kv_transfer", params={"prefill": 4}),
    ]))
    assert got[0].startswith("jobs[0].collective: unknown collective 'nope' (expected one of ring_allreduce")
    assert got[1] == "jobs[1].params.skew: expected a 4 x 4 matrix of numbers (a list of 4 rows)"
    assert got[2].startswith("jobs[2].params.x: unknown parameter of 'pipeline'")
    assert got[3] == "jobs[3].tors: collective 'hierarchical_allreduce' needs n % local == 0 (n = 4)"
    assert got[4] == "jobs[4].collective: 'all_to_all_v' at phases[0].bytes: division by zero ('/')"
    assert got[5] == "jobs[5].tors: collective 'kv_transfer' needs prefill < n (n = 4)"
    # GET /v1/jobs/discovered is a route: no job may take its name
    got = errors(fabric(jobs=[job(name="discovered")]))
    assert len(got) == 1 and got[0].startswith("jobs[0].name: ") and "route under /v1/jobs" in got[0], got
    # a job naming a malformed template is not reported twice
    got = errors(fabric(collectives={"x": {"phases": "no"}}, jobs=[job(collective="x")]))
    assert got == ["collectives.x.phases: required: a list of one or more phases"]


def test_a_required_parameter_and_the_job_of_a_what_if() -> None:
    need = {"params": {"w": {"kind": "list"}}, "phases": [{"from": "all", "to": "(i + 1) % n", "bytes": "B * w[i]"}]}
    intent = validate_intent(fabric(collectives={"weighted": need}))
    with pytest.raises(InvalidIntent) as exc:
        validate_job(job(collective="weighted"), intent)
    assert [str(e) for e in exc.value.errors] == [
        "job.params.w: required by collective 'weighted' (list)"]
    ok = validate_job(job(collective="weighted", params={"w": [1, 2, 3, 4]}), intent)
    assert ok.params == {"w": [1, 2, 3, 4]}


def test_costly_templates_are_refused_by_the_budget_not_a_hang() -> None:
    started = time.monotonic()
    cubic = parse_template("t", {"params": {"w": {"kind": "list", "default": 1}},
                                 "phases": [{"from": "all", "to": "others", "bytes": "sum(range(0, 60000 + j))"}]})
    with pytest.raises(CollectiveError, match="too costly"):
        traffic(cubic, 2000, 1.0)
    assert time.monotonic() - started < 60.0


def test_what_does_not_read_j_is_evaluated_once_per_sender() -> None:
    # a row sum of a 600 x 600 skew per pair would be 2e8 steps; bound per sender it is 36e4
    started = time.monotonic()
    m = traffic(BUILTINS.get("all_to_all_v"), 600, 1.0)[0]
    assert len(m) == 600 * 599 and sum(v for (i, _), v in m.items() if i == 7) == pytest.approx(1.0)
    assert time.monotonic() - started < 30.0
    lazy = parse_template("t", {"phases": [{"from": "all", "to": "others", "bytes": "if(j == 99, 1 / 0, 1)"}]})
    assert sum(traffic(lazy, 4, 1.0)[0].values()) == 12.0  # a failing part that is not reached does not fail


def test_hostile_templates_fail_fast() -> None:
    started = time.monotonic()
    for text in ["(" * 200 + "1" + ")" * 200, "range(0, 100000000)", "1e999", "9" * 900]:
        with pytest.raises(CollectiveError):
            traffic(parse_template("t", {"phases": [{"from": text, "to": "others", "bytes": "B"}]}), 4, 1.0)
    with pytest.raises(CollectiveError, match="outside 0..3"):
        traffic(parse_template("t", {"phases": [{"from": "all", "to": "i + 1", "bytes": "B"}]}), 4, 1.0)
    with pytest.raises(CollectiveError, match="negative"):
        traffic(parse_template("t", {"phases": [{"from": "all", "to": "others", "bytes": "0 - B"}]}), 4, 1.0)
    assert time.monotonic() - started < 2.0

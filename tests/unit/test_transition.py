"""Safe transitions: hand-made fabrics where the one-shot order overloads a link or loops
traffic in an intermediate state and the schedule avoids it, every claim held against
brute force over every intermediate state, the stage bound against every state it covers
on randomized Clos fabrics, and the mixed states against the safety replay of a mixed plan."""

from __future__ import annotations

import itertools
import json
import random
from typing import Any

import pytest

from controller.model import Intent
from controller.model.intent import validate_intent
from controller.model.plan import DevicePlan, NextHop, Plan, PlanSummary
from safety.replay import replay
from safety.scenarios import Scenario
from safety.transition import Transition, TransitionOptions, schedule
from tests.unit.test_safety_replay import clos_doc, routed_plan

P = "10.9.0.0/24"


def fabric(sources: dict[str, float], *, cap: float = 8.0, limit: float = 1.0, fib: bool = True) -> Intent:
    """Sources each linked to x and y, both linked to d, which originates P."""
    devices = [{"name": n} for n in [*sources, "x", "y", "d"]]
    links = []
    for s in sources:
        links += [{"a": s, "a_port": "ex", "b": "x", "b_port": f"e{s}", "capacity_gbps": 100},
                  {"a": s, "a_port": "ey", "b": "y", "b_port": f"e{s}", "capacity_gbps": 100}]
    links += [{"a": "x", "a_port": "ed", "b": "d", "b_port": "ex", "capacity_gbps": cap},
              {"a": "y", "a_port": "ed", "b": "d", "b_port": "ey", "capacity_gbps": cap}]
    return validate_intent({
        "name": "f", "routing": "isis", "devices": devices, "links": links,
        "prefixes": [{"prefix": P, "origins": ["d"]}],
        "policies": [{"kind": "utilization_limit", "max": limit},
                     {"kind": "wcmp", "enabled": True, "realization": "fib" if fib else "link-bandwidth"}],
        "demands": [{"from": s, "to": P, "gbps": g} for s, g in sources.items()]})


def plan_fix(devices: dict[str, dict[str, int]]) -> Plan:
    out = {}
    for name, hops in devices.items():
        nh = []
        for nb, w in hops.items():
            if name in ("x", "y"):
                port = "ed" if nb == "d" else f"e{nb}"
            else:
                port = f"e{nb}"
            nh.append(NextHop(port, nb, w))
        out[name] = DevicePlan({"g1": tuple(nh)}, {P: "g1"})
    return Plan("f", PlanSummary(0, 0, 0, 0, 0, 0), out, ())


def brute(tr: Transition, sched: Any) -> list[tuple[frozenset[str], Any]]:
    """Every state every stage reaches, judged exactly; asserts each stage's claim."""
    base: frozenset[str] = frozenset()
    seen = []
    for (devices, claimed, _m, _k) in sched.stages:
        movable = [d for d in devices if d in tr.devices]
        worst = 0.0
        for k in range(len(movable) + 1):
            for sub in itertools.combinations(movable, k):
                s = base | frozenset(sub)
                r = tr.evaluate(s)
                seen.append((s, r))
                worst = max(worst, r.worst_utilization)
                if sched.safe:
                    assert r.ok, (sorted(s), r)
        assert worst <= claimed + 1e-9, (devices, worst, claimed)
        base |= frozenset(devices)
    return seen


def test_overload_in_one_shot_is_avoided_by_stages() -> None:
    it = fabric({"a": 6, "b": 2, "c": 2}, cap=8.0)
    old = plan_fix({"a": {"x": 1}, "b": {"y": 1}, "c": {"y": 1}, "x": {"d": 1}, "y": {"d": 1}})
    new = plan_fix({"a": {"y": 1}, "b": {"x": 1}, "c": {"x": 1}, "x": {"d": 1}, "y": {"d": 1}})
    tr = Transition(it, old, it, new)
    assert set(tr.devices) == {"a", "b", "c"}
    # both ends are safe, the one-shot order is not: a alone puts 10 gbps on y -> d
    assert tr.evaluate([]).ok and tr.evaluate(["a", "b", "c"]).ok
    assert not tr.evaluate(["a"]).ok and tr.evaluate(["a"]).worst_utilization == pytest.approx(10 / 8)
    one, _, _ = tr.check([], ["a", "b", "c"])
    assert not one.ok
    sched = schedule(it, old, it, new)
    assert sched.safe
    assert len(sched.stages) == 3 and sched.stages[1][0] == ("a",)  # b or c, then a, then the other
    states = brute(tr, sched)
    assert {frozenset(s) for s, _ in states} >= {frozenset({"b"}), frozenset({"a", "b"})} or \
           {frozenset(s) for s, _ in states} >= {frozenset({"c"}), frozenset({"a", "c"})}
    doc = sched.to_document()
    assert doc["intermediate_plans"] == 0 and [len(s["devices"]) for s in doc["stages"]] == [1, 1, 1]


def test_loop_in_one_shot_is_avoided_by_order() -> None:
    it = validate_intent({
        "name": "l", "routing": "isis", "devices": [{"name": "u"}, {"name": "v"}, {"name": "d"}],
        "links": [{"a": "u", "a_port": "ev", "b": "v", "b_port": "eu"},
                  {"a": "u", "a_port": "ed", "b": "d", "b_port": "eu"},
                  {"a": "v", "a_port": "ed", "b": "d", "b_port": "ev"}],
        "prefixes": [{"prefix": P, "origins": ["d"]}],
        "policies": [{"kind": "wcmp", "enabled": True, "realization": "fib"}],
        "demands": [{"from": "u", "to": P, "gbps": 1}, {"from": "v", "to": P, "gbps": 1}]})

    def pl(u: tuple[str, str], v: tuple[str, str]) -> Plan:
        return Plan("l", PlanSummary(0, 0, 0, 0, 0, 0), {
            "u": DevicePlan({"g": (NextHop(u[0], u[1], 1),)}, {P: "g"}),
            "v": DevicePlan({"g": (NextHop(v[0], v[1], 1),)}, {P: "g"})}, ())

    old, new = pl(("ed", "d"), ("eu", "u")), pl(("ev", "v"), ("ed", "d"))
    tr = Transition(it, old, it, new)
    assert tr.evaluate(["u"]).loops and not tr.evaluate(["u"]).ok
    assert not tr.check([], ["u", "v"])[0].ok
    assert not tr.bound([], ["u", "v"]).ok  # the bound sees the possible loop too
    sched = schedule(it, old, it, new)
    assert sched.safe and [s[0] for s in sched.stages] == [("v",), ("u",)]
    brute(tr, sched)


def test_no_safe_order_is_reported_with_its_states() -> None:
    """Two full links swapped: any state with one source moved further than the other
    overloads a link, so no stages and no intermediate plans help."""
    it = fabric({"a": 8, "b": 8}, cap=8.0)
    old = plan_fix({"a": {"x": 1}, "b": {"y": 1}, "x": {"d": 1}, "y": {"d": 1}})
    new = plan_fix({"a": {"y": 1}, "b": {"x": 1}, "x": {"d": 1}, "y": {"d": 1}})
    sched = schedule(it, old, it, new)
    assert not sched.safe
    doc = sched.to_document()
    assert {f["moving"] for f in doc["failing"]} == {"a", "b"}
    assert all(f["over_limit"] for f in doc["failing"])
    # every device is still in a stage (a forced commit follows it)
    assert sorted(d for s in doc["stages"] for d in s["devices"]) == ["a", "b"]
    tr = Transition(it, old, it, new)
    assert sorted(sorted(s) for s, r in brute(tr, sched) if not r.ok) == [["a"], ["b"]]


def test_mixed_states_match_the_replay_of_the_mixed_plan() -> None:
    """In ``fib`` mode a state is each device's own plan: the replay of that plan agrees."""
    it = fabric({"a": 6, "b": 2, "c": 2}, cap=8.0)
    rng = random.Random(3)
    for _ in range(5):
        def rp() -> Plan:
            return plan_fix({s: {"x": rng.randint(1, 5), "y": rng.randint(1, 5)} for s in "abc"}
                            | {"x": {"d": 1}, "y": {"d": 1}})
        old, new = rp(), rp()
        tr = Transition(it, old, it, new)
        for k in range(4):
            for sub in itertools.combinations("abc", k):
                mixed = Plan("f", old.summary, {d: (new if d in sub else old).devices[d] for d in old.devices}, ())
                rep = replay(it, mixed, only=[Scenario("baseline", "baseline")])
                assert tr.evaluate(sub).worst_utilization == pytest.approx(
                    rep.scenarios[0].immediate.max_utilization, abs=1e-9)


def _clos(seed: int, fib: bool) -> tuple[Intent, Plan, Plan]:
    doc = clos_doc(2, 2, 1, 2, ls_cap=40.0, tl_cap=60.0)
    doc["policies"] = [{"kind": "utilization_limit", "max": 0.9},
                       {"kind": "wcmp", "enabled": True, "realization": "fib" if fib else "link-bandwidth"}]
    it = validate_intent(doc)
    return it, routed_plan(it, seed=seed), routed_plan(it, seed=seed + 1000)


@pytest.mark.parametrize("fib", [True, False])
def test_bound_covers_every_state_of_random_stages(fib: bool) -> None:
    """Randomized Clos fabrics: the bound of a stage is at least every state's utilization,
    and a stage it accepts has every state safe (checked one by one)."""
    accepted = 0
    for seed in range(12):
        it, old, new = _clos(seed, fib)
        tr = Transition(it, old, it, new)
        rng = random.Random(seed)
        devs = list(tr.devices)
        for _ in range(4):
            rng.shuffle(devs)
            cut = rng.randint(0, len(devs) // 2)
            base, stage = devs[:cut], devs[cut:]
            b = tr.bound(base, stage)
            worst = 0.0
            for k in range(len(stage) + 1):
                for sub in itertools.combinations(stage, k):
                    r = tr.evaluate([*base, *sub])
                    worst = max(worst, r.worst_utilization)
                    if b.ok:
                        assert r.ok
            assert worst <= b.worst_utilization + 1e-9
            accepted += b.ok
    assert accepted > 0  # the bound is not vacuous on these fabrics


@pytest.mark.parametrize("fib", [True, False])
def test_random_schedules_hold_under_brute_force(fib: bool) -> None:
    """Schedules made with the bound alone (no exact enumeration) are confirmed state by state."""
    safe = 0
    for seed in range(10):
        it, old, new = _clos(seed, fib)
        sched = schedule(it, old, it, new, options=TransitionOptions(exact_limit=0))
        tr = Transition(it, old, it, new)
        brute(tr, sched)
        safe += sched.safe
        assert sorted(d for s in sched.stages for d in s[0]) == sorted(tr.devices)
    assert safe > 0


def test_a_spine_drain_moves_the_spine_last_in_advertised_mode() -> None:
    """link-bandwidth: the spine's withdrawal is its own config; the schedule's every state holds."""
    doc = clos_doc(2, 2, 1, 2, ls_cap=100.0, tl_cap=100.0)
    doc["policies"] = [{"kind": "utilization_limit", "max": 0.9}]
    it = validate_intent(doc)
    doc2 = dict(doc, policies=[*doc["policies"], {"kind": "drain", "target": "spine-0-0"}])
    it2 = validate_intent(doc2)
    from solver.solve import solve

    old, new = solve(it), solve(it2)
    tr = Transition(it, old, it2, new)
    assert "spine-0-0" in tr.devices
    assert tr.evaluate(tr.devices).ok
    sched = schedule(it, old, it2, new)
    brute(tr, sched)
    assert sched.safe


def test_a_change_with_no_safe_order_is_unsafe_in_its_review_and_refused_unless_forced() -> None:
    """The review carries the schedule; with no safe order its verdict is unsafe and the commit
    gate refuses it, naming the failing states, as it does for any failing scenario."""
    from types import SimpleNamespace

    from controller.model.documents import ChangeState, ReviewDocument
    from controller.model.errors import SafetyViolation
    from controller.workflow.changes import ReviewInputs, _gate
    from controller.workflow.review import build_review

    it = fabric({"a": 8, "b": 8}, cap=8.0)
    old = plan_fix({"a": {"x": 1}, "b": {"y": 1}, "x": {"d": 1}, "y": {"d": 1}})
    new = plan_fix({"a": {"y": 1}, "b": {"x": 1}, "x": {"d": 1}, "y": {"d": 1}})
    inp = ReviewInputs(SimpleNamespace(proposed_revision=2), it, new, 1, it, old)  # type: ignore[arg-type]
    rv = build_review(inp, {"a": "diff", "b": "diff", "d": "diff"})
    assert rv["safety"]["verdict"] == "safe" and rv["verdict"] == "unsafe"  # both ends safe, no way between
    sched = rv["schedule"]
    assert not sched["safe"] and {f["moving"] for f in sched["failing"]} == {"a", "b"}
    assert sorted(d for s in sched["stages"] for d in s["devices"]) == ["a", "b", "d"]  # d: config only
    ReviewDocument.model_validate(rv)
    ch = SimpleNamespace(id=7, state=ChangeState.REVIEWED, reviewed_active=1, verdict=rv["verdict"], review=rv)
    with pytest.raises(SafetyViolation) as exc:
        _gate(ch, 1, False, None)  # type: ignore[arg-type]
    assert {f["invariant"] for f in exc.value.failing} == {"transition"}
    _gate(ch, 1, True, "accepted by on-call")  # type: ignore[arg-type]
    # the safe order of the three-source fabric is what the review shows
    it3 = fabric({"a": 6, "b": 2, "c": 2}, cap=8.0)
    old3 = plan_fix({"a": {"x": 1}, "b": {"y": 1}, "c": {"y": 1}, "x": {"d": 1}, "y": {"d": 1}})
    new3 = plan_fix({"a": {"y": 1}, "b": {"x": 1}, "c": {"x": 1}, "x": {"d": 1}, "y": {"d": 1}})
    rv3 = build_review(ReviewInputs(SimpleNamespace(proposed_revision=2), it3, new3, 1, it3, old3), {})  # type: ignore[arg-type]
    assert rv3["verdict"] == "safe" and [s["devices"] for s in rv3["schedule"]["stages"]][1] == ["a"]
    assert all(s["worst_utilization"] <= 1.0 for s in rv3["schedule"]["stages"])


def test_a_swap_with_no_safe_order_goes_through_an_intermediate_plan() -> None:
    """Either source moving first overloads a link; one plan half way between (each source
    split over x and y) makes every state of every leg safe, checked state by state."""
    it = fabric({"a": 7, "b": 2}, cap=8.5)
    old = plan_fix({"a": {"x": 1}, "b": {"y": 1}, "x": {"d": 1}, "y": {"d": 1}})
    new = plan_fix({"a": {"y": 1}, "b": {"x": 1}, "x": {"d": 1}, "y": {"d": 1}})
    tr = Transition(it, old, it, new)
    assert not tr.evaluate(["a"]).ok and not tr.evaluate(["b"]).ok  # no device can go first
    sched = schedule(it, old, it, new)
    assert sched.safe and sched.intermediate_plans == 1
    doc = sched.to_document()
    assert doc["intermediate_plans"] == 1 and len(doc["intermediate"]) == 1
    assert [c["plan"] for c in doc["checks"]][-1] == 0 and doc["checks"][0]["plan"] == 1
    mid = sched.plans[0]
    assert {h.neighbor for h in mid.devices["a"].groups[mid.devices["a"].routes[P]]} == {"x", "y"}
    # brute force over every leg: every state of every stage safe, every claim an upper bound
    legs = [old, mid, new]
    base: frozenset[str] = frozenset()
    leg = 0
    for (devices, claimed, _m, _k), target in zip(sched.stages, sched.targets, strict=True):
        want = 1 if target == 1 else 2
        if want != leg + 1:
            leg, base = want - 1, frozenset()
        t = Transition(it, legs[leg], it, legs[leg + 1])
        for n in range(len(devices) + 1):
            for sub in itertools.combinations(devices, n):
                r = t.evaluate(base | frozenset(sub))
                assert r.ok and r.worst_utilization <= claimed + 1e-9
        base |= frozenset(devices)
    # with a larger source nothing works under the limit: the schedule says so
    tight = fabric({"a": 8, "b": 8}, cap=8.0)
    assert not schedule(tight, old, tight, new).safe


def test_fib_routes_are_judged_static_after_a_failure() -> None:
    """``paths: loop_free`` splits a -> d over a-b-d and a-c-d with static fib routes. When b-d
    fails, b (no next hop left) falls back to IS-IS, whose shortest path is back through a,
    while a's static route still sends b its share: a loop the protocol model never showed."""
    from solver.solve import solve

    links = [{"a": "a", "a_port": "e1", "b": "b", "b_port": "e1", "capacity_gbps": 10, "metric": 10},
             {"a": "b", "a_port": "e2", "b": "d", "b_port": "e1", "capacity_gbps": 10, "metric": 10},
             {"a": "a", "a_port": "e2", "b": "c", "b_port": "e1", "capacity_gbps": 20, "metric": 10},
             {"a": "c", "a_port": "e2", "b": "d", "b_port": "e2", "capacity_gbps": 20, "metric": 20}]
    doc = {"name": "sq", "routing": "isis", "devices": [{"name": n} for n in "abcd"], "links": links,
           "prefixes": [{"prefix": "10.0.0.0/24", "origins": ["d"]}],
           "demands": [{"from": "a", "to": "10.0.0.0/24", "gbps": 12}],
           "policies": [{"kind": "paths", "mode": "loop_free"},
                        {"kind": "wcmp", "enabled": True, "realization": "fib"}]}
    it = validate_intent(doc)
    plan = solve(it)
    a_hops = {h.neighbor: h.weight for h in plan.devices["a"].nexthops("10.0.0.0/24")}
    assert set(a_hops) == {"b", "c"}  # split over both sides
    share_b = 12 * a_hops["b"] / sum(a_hops.values())
    sc = Scenario("link:b:e2", "link", frozenset(), frozenset({"b:e2"}))
    static = replay(it, plan, only=[sc]).scenarios[0]
    protocol = replay(it, plan, only=[sc], model="routing").scenarios[0]
    assert protocol.reconverged.ok and not protocol.reconverged.loops  # the protocol reroutes all via c
    assert not static.reconverged.ok and static.reconverged.loops  # a's static share to b loops at b
    assert "10.0.0.0/24" in static.reconverged.loops[0] and share_b > 0
    # what does arrive at d is only c's share: the loop's traffic is lost
    assert static.reconverged.invariant("loop") is not None and not static.reconverged.invariant("loop").ok


def test_a_spent_search_budget_ends_in_one_checked_stage() -> None:
    """Past ``max_pushes`` the rest is one last stage, judged as it is: here its states
    overload a link, so the schedule is unsafe and says why."""
    it = fabric({"a": 6, "b": 2, "c": 2}, cap=8.0)
    old = plan_fix({"a": {"x": 1}, "b": {"y": 1}, "c": {"y": 1}, "x": {"d": 1}, "y": {"d": 1}})
    new = plan_fix({"a": {"y": 1}, "b": {"x": 1}, "c": {"x": 1}, "x": {"d": 1}, "y": {"d": 1}})
    sched = schedule(it, old, it, new, options=TransitionOptions(max_pushes=0, max_intermediate=0))
    doc = sched.to_document()
    assert not doc["safe"] and "budget" in doc["note"] and doc["failing"]
    assert [s["devices"] for s in doc["stages"]] == [["a", "b", "c"]]


def test_a_schedule_through_intermediate_plans_is_committed_without_force() -> None:
    """The transaction pushes the intermediate plans as legs (``test_commit_legs.py``): a safe schedule
    through them passes the commit gate as any safe change does."""
    from types import SimpleNamespace

    from controller.model.documents import ChangeState
    from controller.workflow.changes import _gate

    sched = {"stages": [{"devices": ["a"], "worst_utilization": 0.5}], "intermediate_plans": 1, "safe": True}
    ch = SimpleNamespace(id=7, state=ChangeState.REVIEWED, reviewed_active=3, verdict="safe",
                         review={"schedule": sched, "safety": {"failing": []}})
    _gate(ch, 3, False, None)  # type: ignore[arg-type]


def _with_sessions_down(tr: Transition, moved: frozenset[str], stage: Any) -> list[Any]:
    """Every judgement of state ``moved`` with each subset of the sessions still re-establishing."""
    rejoin = tr._rejoining(moved, stage)
    return [tr.evaluate(moved, down) for j in range(len(rejoin) + 1) for down in itertools.combinations(rejoin, j)]


def _quiet_source_clos(seed: int) -> tuple[Intent, Plan, Plan, list[tuple[str, str]]]:
    """A two-plane Clos whose pod-0 ToRs only send (no demand reaches their prefixes), random plans, and
    two of their uplinks' sessions reset: a ToR keeps its other plane, so no withdrawal need start."""
    doc = clos_doc(2, 2, 2, 1, ls_cap=40.0, tl_cap=60.0,
                   demands=[{"from": f"tor-0-{t}", "to": f"10.1.{u}.0/24", "gbps": 4.0} for t in range(2)
                            for u in range(2)])
    doc["policies"] = [{"kind": "utilization_limit", "max": 0.9},
                       {"kind": "wcmp", "enabled": True, "realization": "link-bandwidth"}]
    it = validate_intent(doc)
    uplinks = [lk for lk in it.links if lk.a.startswith("tor-0")]
    resets = [(lk.a, lk.a_port) for lk in random.Random(seed).sample(uplinks, 2)]
    return it, routed_plan(it, seed=seed), routed_plan(it, seed=seed + 1000), resets


def test_the_bound_covers_every_state_of_a_stage_that_resets_sessions() -> None:
    """A reset session is down while its ends run different configs, and any subset of those whose
    ends both moved in the stage may still be re-establishing. The bound of a stage covers every such
    state, and a stage it accepts (many of which move a reset session's end) has every one safe."""
    accepted = touched = 0
    for seed in range(20):
        it, old, new, resets = _quiet_source_clos(seed)
        tr = Transition(it, old, it, new, resets=resets)
        assert len(tr.reset_links) == 2 and set(Transition(it, old, it, new).devices) <= set(tr.devices)
        ends = {n for i in tr.reset_links.tolist() for n in (tr.topo.names[tr.topo.edge_src[2 * i]],
                                                             tr.topo.names[tr.topo.edge_dst[2 * i]])}
        rng = random.Random(seed)
        devs = list(tr.devices)
        for _ in range(5):
            rng.shuffle(devs)
            cut = rng.randint(0, len(devs) // 2)
            base, stage = frozenset(devs[:cut]), devs[cut:cut + 4]
            b = tr.bound(base, stage)
            worst = 0.0
            for k in range(len(stage) + 1):
                for sub in itertools.combinations(stage, k):
                    for r in _with_sessions_down(tr, base | frozenset(sub), stage):
                        worst = max(worst, r.worst_utilization)
                        if b.ok:
                            assert r.ok, (sorted(base), sub, r)
            assert worst <= b.worst_utilization + 1e-9
            accepted += b.ok
            touched += b.ok and bool(ends & set(stage))
    assert touched > 10 and accepted >= touched


def test_the_exact_states_of_a_stage_include_its_sessions_re_establishing() -> None:
    """Moving both ends of a reset session: four device states, and the one where both have moved but
    the session is not up yet; as a stage, they count towards the exact limit."""
    it, old, new, resets = _quiet_source_clos(0)
    tr = Transition(it, old, it, new, resets=resets[:1])
    (i,) = tr.reset_links.tolist()
    u, v = tr.topo.names[tr.topo.edge_src[2 * i]], tr.topo.names[tr.topo.edge_dst[2 * i]]
    got = tr.states(frozenset(), [u, v])
    assert len(got) == 5 and [s for s, _ in got].count(frozenset({u, v})) == 2
    both = [r for s, r in got if s == frozenset({u, v})]
    assert tr.evaluate({u, v}, [i]) in both and tr.evaluate({u, v}) in both
    assert tr._rejoining(frozenset({u, v}), [u]) == [i] and tr._rejoining(frozenset({u}), [u]) == []
    _r, how, count = tr.check(frozenset(), [u, v])
    assert count == (5 if how == "exact" else 8)


def test_schedules_that_reset_sessions_hold_under_brute_force() -> None:
    """Schedules of changes that reset sessions, by the bound alone and with exact enumeration, are
    confirmed state by state, sessions re-establishing included: on the two-plane Clos (safe), and on
    a one-plane Clos where a leaf's session to one spine resets, so that while it is down the other
    spine carries everything, over the limit: unsafe, with every claim still an upper bound."""
    cases = [_quiet_source_clos(seed) for seed in range(2)]
    for seed in range(3):
        it, old, new = _clos(seed, fib=False)
        up = [lk for lk in it.links if lk.b.startswith("spine")]
        cases.append((it, old, new, [(lk.a, lk.a_port) for lk in random.Random(seed).sample(up, 1)]))
    verdicts = []
    for it, old, new, resets in cases:
        for exact in (0, 6):
            sched = schedule(it, old, it, new, options=TransitionOptions(exact_limit=exact), resets=resets)
            tr = Transition(it, old, it, new, resets=resets)
            assert sched.reset_sessions == len(resets) == sched.to_document()["reset_sessions"]
            verdicts.append(sched.safe)
            assert sched.safe or any("at 1.0" in o for f in sched.failing for o in f["over_limit"])
            base: frozenset[str] = frozenset()
            for devices, claimed, _m, _k in sched.stages:
                for k in range(len(devices) + 1):
                    for sub in itertools.combinations(devices, k):
                        for r in _with_sessions_down(tr, base | frozenset(sub), devices):
                            assert r.worst_utilization <= claimed + 1e-9
                            if sched.safe:
                                assert r.ok
                base |= frozenset(devices)
    assert True in verdicts and False in verdicts


def test_an_asn_change_resets_the_tors_sessions_and_the_review_says_its_prefix_goes_dark() -> None:
    """A ToR's new ASN tears down its session (its ``local-as``, its leaves' ``remote-as``): in
    every state where one end has moved and the other has not, nothing reaches its prefix. The plans
    alone (and the schedule without the sessions) call the change safe; with them the review's
    schedule is unsafe and names the black hole, so the commit needs force, as a drain first would
    avoid."""
    from types import SimpleNamespace

    from controller.workflow.changes import ReviewInputs
    from controller.workflow.review import build_review
    from solver.solve import solve

    doc = clos_doc(2, 2, 1, 2, ls_cap=100.0, tl_cap=100.0)
    doc["policies"] = [{"kind": "utilization_limit", "max": 0.9}]
    it = validate_intent(doc)
    doc2 = json.loads(json.dumps(doc))
    next(d for d in doc2["devices"] if d["name"] == "tor-0-0")["asn"] = 65299
    it2 = validate_intent(doc2)
    old, new = solve(it), solve(it2)
    assert schedule(it, old, it2, new).safe  # blind to the sessions
    rv = build_review(ReviewInputs(SimpleNamespace(proposed_revision=2), it2, new, 1, it, old), {})  # type: ignore[arg-type]
    assert rv["bgp_sessions_reset"]["count"] == 2  # its one uplink, both ends
    sched = rv["schedule"]
    assert sched["reset_sessions"] == 1 and not sched["safe"] and rv["verdict"] == "unsafe"
    assert any("10.0.0.0/24" in d for f in sched["failing"] for d in f["dropped"]), sched["failing"]

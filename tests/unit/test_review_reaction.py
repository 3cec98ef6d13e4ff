"""The replay knows the reaction (issue 30.5): what each failure loses until the reaction, and its verdict.

On the ``fib`` square of ``tests/lab/test_fib_failure_lab.py`` the numbers are computed by hand: ``a``
sends 12 Gbps to ``d``'s prefix, 4 via ``b`` and 8 via ``c`` (weights 1:2). When ``b-d`` fails, ``b``'s
share is black-holed at once (the kernel dropped ``b``'s only next hop) and, once IS-IS has reconverged,
``b`` sends it back to ``a``, whose static route hashes those flows to ``b`` again: 4 Gbps loop. When
``c-d`` fails, the 8 Gbps of ``c`` do the same through ``a``. The reaction plan around ``b-d`` sends all
12 over ``a-c-d`` (safe: 0.6 of 20 Gbps); around ``c-d`` all of it must cross the 10 Gbps links, over the
limit and hotter than leaving the plan in place (which the judgement calls worse: the leader would not
commit it, and the review says the loss lasts until an operator acts).
"""

from __future__ import annotations

from typing import Any

import pytest

from controller.model.intent import validate_intent
from controller.operations.overlay import Overlay
from controller.operations.precompute import reaction_of
from controller.operations.table import TABLE
from controller.planning import compile_plan
from controller.workflow.reactions import ReactionOptions, reaction_section, robustness_section
from safety.reaction import exposure
from safety.replay import replay
from tests.lab.test_fib_failure_lab import square_doc
from tests.unit.test_safety_robust import lopsided

OPTIONS = ReactionOptions(budget_s=30.0, push_s=0.5)


def square(**policy: Any) -> Any:
    doc = square_doc()
    doc["policies"] = [*doc["policies"], {"kind": "failure_tolerance", "scope": "all_single"},
                       {"kind": "failure_reaction", "detect_s": 1.0, **policy}]
    return validate_intent(doc)


@pytest.fixture(scope="module")
def fabric() -> Any:
    intent = square()
    plan = compile_plan(intent)
    return intent, plan, replay(intent, plan)


def test_the_stages_weigh_what_is_black_holed_and_what_loops(fabric: Any) -> None:
    _, _, report = fabric
    bd = exposure(report.scenario("link:b:eth2"), 2.0)
    assert bd.immediate.black_holed_gbps == pytest.approx(4.0) and bd.immediate.looped_gbps == 0.0
    assert bd.reconverged.black_holed_gbps == 0.0 and bd.reconverged.looped_gbps == pytest.approx(4.0)
    assert bd.lost_gbps == pytest.approx(4.0) and bd.lost_gbit == pytest.approx(8.0)
    cd = exposure(report.scenario("link:c:eth2"), None)
    assert cd.reconverged.looped_gbps == pytest.approx(8.0) and cd.lost_gbit is None
    ab = exposure(report.scenario("link:a:eth1"), 2.0)  # a sends everything to c: nothing lost
    assert ab.lost_gbps == 0.0 and ab.lost_gbit == 0.0


def test_the_review_says_how_long_how_much_and_whether_the_reaction_is_safe(fabric: Any) -> None:
    intent, plan, report = fabric
    sec = reaction_section(intent, plan, report, identity=None, options=OPTIONS)
    rows = {r.scenario: r for r in sec.scenarios}
    assert sec.enabled and sec.detect_s == 1.0 and sec.push_s == 0.5
    assert set(rows) == {s.name for s in report.scenarios if s.kind != "baseline"}
    bd = rows["link:b:eth2"]
    assert bd.plan == "planned" and bd.verdict == "safe" and bd.safe and bd.max_utilization == pytest.approx(0.6)
    assert bd.plan_seconds is not None
    assert bd.window_s == pytest.approx(1.0 + bd.plan_seconds + 0.5, abs=1e-3)
    assert bd.immediate.black_holed_gbps == 4.0 and bd.reconverged.looped_gbps == 4.0
    assert bd.lost_gbit == pytest.approx(4.0 * bd.window_s, abs=1e-3)
    cd = rows["link:c:eth2"]
    assert cd.verdict == "worse" and cd.safe is False and cd.max_utilization == pytest.approx(1.2)
    assert cd.window_s is None and cd.lost_gbit is None and "until an operator acts" in (cd.note or "")
    assert sec.counts["unsafe_reactions"] == sum(1 for r in sec.scenarios if r.safe is False) >= 1
    assert sec.worst_lost_gbit == pytest.approx(bd.lost_gbit)


def test_no_reaction_when_the_policy_is_off() -> None:
    intent = square(enabled=False)
    plan = compile_plan(intent)
    sec = reaction_section(intent, plan, replay(intent, plan), identity=None, options=OPTIONS)
    assert not sec.enabled and sec.detect_s is None and sec.worst_lost_gbit is None
    bd = next(r for r in sec.scenarios if r.scenario == "link:b:eth2")
    assert bd.plan == "disabled" and bd.verdict is None and bd.window_s is None and bd.lost_gbit is None
    assert bd.lost_gbps == pytest.approx(4.0) and "operator" in (bd.note or "")


def test_the_table_is_looked_up_and_the_rest_waits_past_the_budget(fabric: Any) -> None:
    intent, plan, report = fabric
    sec = reaction_section(intent, plan, report, identity=None, options=ReactionOptions(budget_s=0.0))
    assert {r.plan for r in sec.scenarios} == {"not_planned"} and sec.note and "not planned" in sec.note
    assert all(r.window_s is None and r.verdict is None for r in sec.scenarios)
    identity = "test-review-reaction:square"
    made = reaction_of(intent, plan, Overlay(frozenset({"b:eth2"})))
    TABLE.put(identity, Overlay(frozenset({"b:eth2"})), made)
    sec = reaction_section(intent, plan, report, identity=identity, options=ReactionOptions(budget_s=0.0, push_s=0.5))
    bd = next(r for r in sec.scenarios if r.scenario == "link:b:eth2")
    assert bd.plan == "precomputed" and bd.verdict == "safe" and bd.window_s == pytest.approx(1.5)
    assert sec.counts["precomputed"] == 1 and sec.counts["not_planned"] == len(sec.scenarios) - 1


def test_a_review_planned_reaction_goes_into_the_table_for_the_failure(fabric: Any) -> None:
    intent, plan, report = fabric
    identity = "test-review-reaction:planned"
    reaction_section(intent, plan, report, identity=identity, options=OPTIONS)
    got = TABLE.get(identity, Overlay(frozenset({"b:eth2"})))
    assert got is not None and got.judgement is not None and got.judgement.verdict == "safe"


def test_the_worst_post_failure_utilization_with_and_without_robust_wcmp() -> None:
    """Issue 30.4: the lopsided Clos of ``test_safety_robust`` (losing a spine of plane 1 halves it), whose
    plain plan breaks the 0.9 limit under a spine's failure and whose robust plan holds it."""
    doc = lopsided(315.0, 0.9).to_document()
    doc["policies"] = [*doc["policies"], {"kind": "wcmp", "enabled": True, "objective": "robust"}]
    intent = validate_intent(doc)
    plan = compile_plan(intent)
    report = replay(intent, plan)
    rb = robustness_section(intent, plan, report)
    assert rb.robust and rb.limit == 0.9
    assert rb.failure_mlu_plain is not None and rb.failure_mlu_plain > 0.9  # without robust WCMP: over the limit
    assert rb.failure_mlu_robust == pytest.approx(rb.failure_mlu) and rb.failure_mlu <= 0.9 + 1e-9
    assert rb.failure_mlu == pytest.approx(max(s.max_utilization for s in report.scenarios if s.kind != "baseline"))
    plain = robustness_section(square(), compile_plan(square()), replay(square(), compile_plan(square())))
    assert not plain.robust and plain.failure_mlu_plain is None and plain.failure_mlu == pytest.approx(1.2)


def test_with_an_overlay_in_force_the_table_is_asked_for_both_failures_and_judged_against_the_plan_in_force(
        fabric: Any) -> None:
    """The review of a change while ``a-b`` is overlaid: the plan in force sends all via ``c``; the reaction to
    ``b-d`` failing as well is the table's entry for both parts, judged against the plan in force (nothing
    more lost: safe); what the review plans around an overlay is not kept (the table's entries are judged
    against the full plan); ``c-d`` failing as well leaves ``a`` no way to ``d``: no plan, and the review
    says why."""
    from controller.operations.overlay import overlay_intent

    intent, plan, _ = fabric
    identity = "test-review-reaction:in-force"
    in_force = Overlay(frozenset({"a:eth1"}))
    both = Overlay(frozenset({"a:eth1", "b:eth2"}))
    TABLE.put(identity, both, reaction_of(intent, plan, both))
    reduced = overlay_intent(intent, in_force)
    current = compile_plan(reduced)
    sec = reaction_section(reduced, current, replay(reduced, current), identity=identity, in_force=in_force,
                           options=OPTIONS)
    rows = {r.scenario: r for r in sec.scenarios}
    assert rows["link:b:eth2"].plan == "precomputed" and rows["link:b:eth2"].verdict == "safe"
    assert rows["link:c:eth2"].plan == "failed" and rows["link:c:eth2"].note  # a can no longer reach d at all
    assert rows["device:b"].plan == "planned"  # b failed implies a-b: the key is b alone
    assert TABLE.get(identity, Overlay(devices=frozenset({"b"}))) is None

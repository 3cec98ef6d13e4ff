"""Drain verification on counters: a drained device or link that still carries transit traffic is flagged.

Counters come from :class:`tests.telemetry_synth.Fabric`, which makes every
interface and AFT counter of a fabric grow at what a plan carries under its
demand: the plan that drains the target (the drain took effect), or the plan
from before the drain (the switches did not follow it).
"""

from __future__ import annotations

from functools import cache

from controller.gen import clos_document
from controller.model import Intent
from controller.model.intent import validate_intent
from controller.model.plan import Plan
from controller.planning import compile_plan
from controller.telemetry import Telemetry
from controller.telemetry.drains import check_drains, noise_floor_gbps
from tests.telemetry_synth import Fabric


@cache
def fabrics() -> tuple[Intent, Plan, Intent, Plan]:
    doc = clos_document(pods=2, tors=4, planes=2, spines=2, seed=3, demand="gravity")
    before = validate_intent(doc)
    plan = compile_plan(before)
    carried: dict[str, float] = {}
    for x in plan.links:  # the busiest spine: draining it must move real traffic
        for dev in (x.a, x.b):
            carried[dev] = carried.get(dev, 0.0) + x.gbps_ab + x.gbps_ba
    spine = max((d.name for d in before.devices if d.role == "spine"), key=lambda n: carried.get(n, 0.0))
    tor = next(d.name for d in before.devices if d.role == "tor")
    link = next(lk for lk in before.links if lk.a == tor or lk.b == tor)
    end = f"{link.a}:{link.a_port}"
    doc["policies"] = [*doc.get("policies", []), {"kind": "drain", "target": spine},
                       {"kind": "drain", "target": tor}, {"kind": "drain", "target": end}]
    after = validate_intent(doc)
    return before, plan, after, compile_plan(after)


def measured(intent: Intent, plan: Plan, *, skip: frozenset[str] = frozenset()) -> tuple[Telemetry, float]:
    fabric = Fabric(intent, plan)
    tel = Telemetry()
    for t in range(0, 40, 10):
        tel.ingest(fabric.samples(fabric.t0 + t, skip=skip), now=fabric.t0 + t)
    return tel, fabric.t0 + 35


def targets(intent: Intent) -> list[str]:
    return sorted(intent.drained_devices | intent.drained_link_ends)


def test_drains_that_took_effect_are_verified_and_a_drained_tor_may_still_send_its_own_traffic() -> None:
    _before, _plan, after, drained_plan = fabrics()
    tel, now = measured(after, drained_plan)
    check = check_drains(tel, after, targets(after), now, 30)
    assert check.status == "verified", check
    assert all(t.transit_gbps is not None and t.transit_gbps <= t.tolerance_gbps for t in check.targets)
    assert {t.kind for t in check.targets} == {"device", "link"}


def test_drains_the_traffic_ignores_are_flagged_as_carrying() -> None:
    before, plan, after, _drained = fabrics()
    tel, now = measured(before, plan)  # the switches still forward as before the drain
    check = check_drains(tel, after, targets(after), now, 30)
    assert check.status == "carrying"
    spine = next(t for t in check.targets if t.target in after.drained_devices and "spine" in t.target)
    assert spine.status == "carrying" and spine.transit_gbps is not None and spine.transit_gbps > spine.tolerance_gbps


def test_a_target_without_fresh_counters_is_unknown_not_verified() -> None:
    _before, _plan, after, drained_plan = fabrics()
    spine = next(t for t in targets(after) if "spine" in t)
    tel, now = measured(after, drained_plan, skip=frozenset({spine}))
    silent = tel, now + 60  # long after the last sample: every counter is stale
    check = check_drains(silent[0], after, [spine], silent[1], 30)
    assert check.status == "unknown" and check.targets[0].transit_gbps is None


def test_the_tolerance_is_the_counters_noise_floor_not_a_share_of_capacity() -> None:
    """Issue 31.4: at 1 % of capacity a dry spine passed carrying 1.1 Gbps (and a 64 x 400G spine could
    carry 256 Gbps and pass). The floor is a few packets a second per link, whatever the capacity."""
    before, plan, after, drained_plan = fabrics()
    tel, now = measured(after, drained_plan)
    floor = noise_floor_gbps()
    for t in check_drains(tel, after, targets(after), now, 30).targets:
        links = sum(1 for lk in after.links if t.target in (lk.a, lk.b)) if t.kind == "device" else 1
        assert t.tolerance_gbps == floor * links < 0.05
    tel, now = measured(before, plan)
    spine = next(t for t in check_drains(tel, after, targets(after), now, 30).targets if "spine" in t.target)
    assert spine.status == "carrying" and spine.transit_gbps is not None and spine.transit_gbps > 1.0

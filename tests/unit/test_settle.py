"""Staged commits and settling, on in-process dry agents (the agent's own state machine, no FRR).

The transaction commits stage by stage in the schedule's order, each stage read
back before the next, and a failure in a later stage rolls back what earlier
stages committed; the devices no stage names commit last. Settling
(:mod:`controller.workflow.settle`) brings a device that a final change left on
another revision (pending confirmation, or confirmed on the change's config
after the change was rolled back) onto the revision the change's final state
names, whichever way it is off.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from controller.workflow.review import commit_stages
from controller.workflow.settle import pending_after, settle_device
from southbound.device.dry import DryDriver
from southbound.state import StepResult
from southbound.transaction import commit, commit_order
from tests.component.test_transaction_dry import fabric_configs

pytestmark = pytest.mark.anyio

NAMES = ["d0", "d1", "d2", "d3"]


@pytest.mark.unit
def test_commit_order_keeps_the_schedule_and_puts_the_unnamed_last() -> None:
    assert commit_order(NAMES) == [NAMES]
    assert commit_order(NAMES, [["d2"], ["d0", "d1", "d2", "zz"]]) == [["d2"], ["d0", "d1"], ["d3"]]
    assert commit_order(NAMES, [[], ["d3", "d0", "d1", "d2"]]) == [["d0", "d1", "d2", "d3"]]
    review = {"schedule": {"stages": [{"devices": ["d1"], "worst_utilization": 0.4},
                                      {"devices": ["d0", "d3"], "worst_utilization": 0.5}], "intermediate_plans": 0}}
    assert commit_stages(review, NAMES) == ([["d1"], ["d0", "d3"], ["d2"]], [0.4, 0.5, None])
    assert commit_stages({"verdict": "safe"}, NAMES) == ([NAMES], [None])


class Flaky(DryDriver):
    """Dry agents whose Commit fails on the devices in ``refuse``."""

    refuse: frozenset[str] = frozenset()

    async def commit(self, device: str, change: str, confirm_within: float) -> StepResult:
        if device in self.refuse:
            return StepResult(device, "commit", failed=True, error="UNAVAILABLE: injected")
        return await super().commit(device, change, confirm_within)


async def hashes(drv: DryDriver) -> dict[str, str]:
    return {n: (await drv.state(n)).running_hash for n in NAMES}


async def test_stages_commit_in_order_each_read_back_before_the_next(tmp_path: Path) -> None:
    async with DryDriver(NAMES, tmp_path) as drv:
        assert (await commit(drv, fabric_configs(NAMES, 1), confirm_within=30)).ok
        events: list[tuple[str, str]] = []
        stage_events: list[tuple[int, str]] = []

        def progress(step: str, device: str, res: StepResult | None) -> None:
            if res is not None:
                events.append((step, device))

        r = await commit(drv, fabric_configs(NAMES, 2), confirm_within=30, stages=[["d2"], ["d0", "d1"]],
                         progress=progress, on_stage=lambda i, s: stage_events.append((i, s)))
        assert r.ok, r.error
        assert r.stages == [["d2"], ["d0", "d1"], ["d3"]] and r.stages_done == 3
        assert stage_events == [(0, "commit"), (0, "verify"), (0, "done"), (1, "commit"), (1, "verify"),
                                (1, "done"), (2, "commit"), (2, "verify"), (2, "done")]
        at: dict[tuple[str, str], int] = {}
        for i, e in enumerate(events):
            at.setdefault(e, i)  # first time (the last stage reads every device back once more)
        # stage 0 is committed and read back before stage 1 is sent a Commit, and so on
        assert at["commit", "d2"] < at["verify", "d2"] < at["commit", "d0"] < at["commit", "d3"]
        assert max(at["verify", "d0"], at["verify", "d1"]) < at["commit", "d3"]
        assert all(at["verify", d] < at["confirm", d] for d in NAMES)
        assert set(r.steps["commit"]) == set(NAMES)  # every stage's results add up


async def test_a_later_stage_failing_rolls_back_the_earlier_stages(tmp_path: Path) -> None:
    async with Flaky(NAMES, tmp_path) as drv:
        assert (await commit(drv, fabric_configs(NAMES, 1), confirm_within=30)).ok
        v1 = await hashes(drv)
        drv.refuse = frozenset({"d0"})
        stage_events: list[tuple[int, str]] = []
        r = await commit(drv, fabric_configs(NAMES, 2), confirm_within=30, stages=[["d2", "d3"], ["d0"], ["d1"]],
                         on_stage=lambda i, s: stage_events.append((i, s)))
        assert not r.ok and r.stage == "commit" and r.stages_done == 1
        assert stage_events[-1] == (1, "failed") and (2, "commit") not in stage_events
        assert "d1" not in r.steps["commit"]  # the last stage was never sent a Commit
        assert r.steps["rollback"]["d2"].changed and r.steps["rollback"]["d3"].changed
        assert await hashes(drv) == v1
        assert [(await drv.state(n)).pending_change for n in NAMES] == [""] * 4
        assert [(await drv.info(n)).prepared_change for n in NAMES] == [""] * 4  # nothing left prepared
        assert pending_after(r) == {}  # every rollback answered: nothing to settle


async def test_settle_brings_back_a_device_left_on_the_change_whichever_way(tmp_path: Path) -> None:
    async with DryDriver(NAMES, tmp_path) as drv:
        old, new = fabric_configs(NAMES, 1), fabric_configs(NAMES, 2)
        assert (await commit(drv, old, confirm_within=30)).ok
        v1 = await hashes(drv)
        kw = {"confirm_within": 30.0, "verify_timeout": 5.0, "attempt": 1}

        # d0 still awaits confirmation of a change that was rolled back: rolled back
        assert not (await drv.prepare("d0", "t1", new["d0"])).failed
        assert not (await drv.commit("d0", "t1", 60)).failed
        assert (await drv.state("d0")).pending_change == "t1"
        why = await settle_device(drv, "d0", transaction="t1", undo=True, want=v1["d0"], config=old["d0"], **kw)
        assert why is None
        st = await drv.state("d0")
        assert st.running_hash == v1["d0"] and not st.pending_change

        # d1 confirmed the change before the rest was rolled back: its transaction is undone
        assert not (await drv.prepare("d1", "t2", new["d1"])).failed
        assert not (await drv.commit("d1", "t2", 60)).failed
        assert not (await drv.confirm("d1", "t2")).failed
        assert await settle_device(drv, "d1", transaction="t2", undo=True, want=v1["d1"], config=old["d1"], **kw) \
            is None
        assert (await drv.state("d1")).running_hash == v1["d1"]

        # d2 runs something else entirely: the target's config is pushed to it
        other = fabric_configs(NAMES, 7)["d2"]
        assert (await commit(drv, {"d2": other}, confirm_within=30)).ok
        assert await settle_device(drv, "d2", transaction="t3", undo=True, want=v1["d2"], config=old["d2"], **kw) \
            is None
        assert await hashes(drv) == v1

        # a committed change whose d3 still awaits its confirmation: confirmed there
        r = await drv.prepare("d3", "t4", new["d3"])
        assert not (await drv.commit("d3", "t4", 60)).failed
        assert await settle_device(drv, "d3", transaction="t4", undo=False, want=r.config_hash, config=new["d3"],
                                   **kw) is None
        st = await drv.state("d3")
        assert st.running_hash == r.config_hash and not st.pending_change


async def test_an_unreachable_device_stays_pending_with_the_reason(tmp_path: Path) -> None:
    class Down(DryDriver):
        async def state(self, device: str, prefixes: tuple[str, ...] = ()) -> object:  # type: ignore[override]
            from controller.model.errors import RetryableDriverError

            raise RetryableDriverError(device, "UNAVAILABLE: connection refused")

    async with Down(NAMES, tmp_path) as drv:
        why = await settle_device(drv, "d0", transaction="t1", undo=True, want="x", config=None, attempt=1,
                                  confirm_within=30, verify_timeout=5)
        assert why is not None and why.startswith("unreachable") and "UNAVAILABLE" in why


@pytest.mark.unit
def test_off_target_names_every_device_not_on_the_revision() -> None:
    from controller.model.errors import RetryableDriverError
    from controller.workflow.settle import off_target
    from southbound.state import DeviceState

    states = {"a": DeviceState("a", "h1", False), "b": DeviceState("b", "h9", False),
              "c": DeviceState("c", "h3", False, pending_change="t1"),
              "d": RetryableDriverError("d", "UNAVAILABLE: down")}
    got = off_target(states, {"a": "h1", "b": "h2", "c": "h3", "d": "h4"})
    assert set(got) == {"b", "c", "d"}
    assert got["b"].startswith("runs h9") and "t1" in got["c"] and got["d"].startswith("unreachable: UNAVAILABLE")

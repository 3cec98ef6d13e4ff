"""A commit's read-back gives up at once when the fabric changes under it (``commit(abandon=...)``).

A drift repair read back for its whole 20 s timeout while a link it routed over was down, and the failure
reaction, which waits for the commit in progress, came only after it (the chaos run's reaction round). With
``abandon``, the read-back asks while devices are still off the plan; a reason fails them at once, and the
transaction rolls back as for any failed read-back.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from southbound.config import DeviceConfig
from southbound.state import DeviceState, StepResult
from southbound.transaction import TransactionResult, commit

pytestmark = pytest.mark.anyio


class _Stuck:
    """A driver whose devices take every step but never run the committed config (a kernel off the plan)."""

    def __init__(self, devices: tuple[str, ...]):
        self.devices = devices
        self.steps: list[tuple[str, str]] = []

    async def _step(self, device: str, step: str) -> StepResult:
        self.steps.append((device, step))
        return StepResult(device, step, changed=True, config_hash=f"{device}-new")

    async def prepare(self, device: str, change: str, config: DeviceConfig) -> StepResult:
        return await self._step(device, "prepare")

    async def commit(self, device: str, change: str, confirm_within: float) -> StepResult:
        return await self._step(device, "commit")

    async def confirm(self, device: str, change: str) -> StepResult:
        return await self._step(device, "confirm")

    async def abort(self, device: str, change: str) -> StepResult:
        return await self._step(device, "abort")

    async def rollback(self, device: str, change: str, to_hash: str = "") -> StepResult:
        return await self._step(device, "rollback")

    async def state(self, device: str, prefixes: tuple[str, ...] = ()) -> DeviceState:
        return DeviceState(device, f"{device}-old", observed=True)


def _configs(names: tuple[str, ...]) -> dict[str, DeviceConfig]:
    return {n: DeviceConfig(hostname=n, asn=65000 + k, router_id=f"10.0.0.{k + 1}") for k, n in enumerate(names)}


async def _run(abandon: Callable[[], str | None] | None, timeout: float) -> tuple[float, TransactionResult, _Stuck]:
    names = ("a", "b")
    drv = _Stuck(names)
    t0 = time.monotonic()
    result = await commit(drv, _configs(names), verify_timeout=timeout, verify_interval=0.05,  # type: ignore[arg-type]
                          abandon=abandon)
    return time.monotonic() - t0, result, drv


async def test_a_reason_to_abandon_fails_the_read_back_at_once_and_rolls_back() -> None:
    asked = []

    def abandon() -> str | None:
        asked.append(1)
        return "link a:eth1 went down during the commit" if len(asked) >= 2 else None

    took, result, drv = await _run(abandon, timeout=30)
    assert took < 5 and not result.ok, (took, result)  # not the 30 s timeout
    verify = result.steps["verify"]
    assert all(r.failed and "verify abandoned: link a:eth1 went down during the commit" in r.error
               for r in verify.values()), verify
    assert sorted(d for d, s in drv.steps if s == "rollback") == ["a", "b"]
    assert not any(s == "confirm" for _d, s in drv.steps)


async def test_without_a_reason_the_read_back_waits_for_its_timeout() -> None:
    took, result, _drv = await _run(lambda: None, timeout=0.6)
    assert took >= 0.6 and not result.ok
    assert all("abandoned" not in r.error for r in result.steps["verify"].values())

"""The dry driver: the device agent's own logic in process, with no FRR and no network.

:class:`DryDriver` is the :class:`~southbound.driver.DeviceDriver` behind which
each device is an in-process :class:`~southbound.device.agent.AgentCore` on a
:class:`~southbound.device.frr_apply.DryFrr` backend (the agent's ``--dry-frr`` mode):
the same transaction state machine, journal, confirm timers and config hashes
as a real switch's agent, its state kept in a directory per device, but
nothing is rendered into a kernel. It lets the change workflow, a bench or a
test run whole transactions without agent processes; like the gRPC driver,
every call returns a :class:`~southbound.state.StepResult` and never raises for
a device's refusal.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path

from southbound.config import DeviceConfig
from southbound.device.agent import AgentCore
from southbound.device.frr_apply import DryFrr
from southbound.discovery.observed import ObservedDevice
from southbound.state import CALLER, AgentError, AgentInfo, DeviceState, Outcome, StepResult

__all__ = ["DryDriver"]


class DryDriver:
    """In-process dry agents for ``devices``, their state under ``state_dir/DEVICE``."""

    def __init__(self, devices: Iterable[str], state_dir: Path):
        self.devices = tuple(sorted(set(devices)))
        self.state_dir = Path(state_dir)
        self._cores: dict[str, AgentCore] = {}
        self._lock = asyncio.Lock()
        self.epoch: int | None = None  # carried by every call of a fenced view
        self.replica = ""  # with the id of the replica that leads
        self._view = False

    def fenced(self, epoch: int, replica: str = "") -> DryDriver:
        """This driver with every call carrying ``epoch`` and ``replica`` (the same in-process agents)."""
        view = copy.copy(self)
        view.epoch, view.replica, view._view = epoch, replica, True
        return view

    def epoch_log(self, device: str) -> dict[str, object]:
        """``device``'s epoch log as its agent keeps it (the fence, what raised it, what it refused)."""
        return AgentCore.read_epoch_log(self.state_dir / device)

    async def __aenter__(self) -> DryDriver:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def endpoint(self, device: str) -> str:
        return f"dry:{self.state_dir / device}"

    async def _core(self, device: str) -> AgentCore:
        """``device``'s agent; the call about to be made of it comes from this view's replica."""
        CALLER.set(self.replica)  # this task's context: the call that follows (as the gRPC adapter does)
        if device not in self.devices:
            raise AgentError("unavailable", f"{device}: no such dry device")
        async with self._lock:
            core = self._cores.get(device)
            if core is None:
                base = self.state_dir / device
                core = AgentCore(DryFrr(base / "dry"), base, device)
                await core.start()
                self._cores[device] = core
        return core

    async def _step(self, device: str, step: str, call: Callable[[AgentCore], Awaitable[Outcome]]) -> StepResult:
        try:
            o = await call(await self._core(device))
        except AgentError as exc:
            return StepResult(device, step, failed=True, error=f"{exc.code.upper()}: {exc}")
        return StepResult(device, step, changed=o.changed, diff=o.diff, config_hash=o.config_hash)

    async def info(self, device: str) -> AgentInfo:
        return await (await self._core(device)).info(epoch=self.epoch)

    async def prepare(self, device: str, change: str, config: DeviceConfig) -> StepResult:
        return await self._step(device, "prepare", lambda c: c.prepare(change, config, epoch=self.epoch))

    async def preview(self, device: str, change: str, config: DeviceConfig) -> StepResult:
        return await self._step(device, "prepare", lambda c: c.prepare(change, config, epoch=self.epoch,
                                                                       preview=True))

    async def commit(self, device: str, change: str, confirm_within: float) -> StepResult:
        return await self._step(device, "commit", lambda c: c.commit(change, confirm_within, epoch=self.epoch))

    async def confirm(self, device: str, change: str) -> StepResult:
        return await self._step(device, "confirm", lambda c: c.confirm(change, epoch=self.epoch))

    async def abort(self, device: str, change: str) -> StepResult:
        async def call(c: AgentCore) -> Outcome:
            return Outcome(changed=await c.abort(change, epoch=self.epoch))
        return await self._step(device, "abort", call)

    async def rollback(self, device: str, change: str, to_hash: str = "") -> StepResult:
        return await self._step(device, "rollback", lambda c: c.rollback(change, to_hash, epoch=self.epoch))

    async def state(self, device: str, prefixes: tuple[str, ...] = ()) -> DeviceState:
        return await (await self._core(device)).state(prefixes, epoch=self.epoch)

    async def running(self, device: str) -> ObservedDevice:
        return await (await self._core(device)).read_running(epoch=self.epoch)

    async def close(self) -> None:
        if self._view:
            return  # the driver it was made from owns the agents
        cores, self._cores = self._cores, {}
        await asyncio.gather(*(c.close() for c in cores.values()), return_exceptions=True)

"""Controller-side driver: talks to many device agents at once over gRPC.

This module owns the connections from the controller to the agents:
:class:`AgentDriver` keeps one ``grpc.aio`` channel per device (a unix socket
in a lab, TCP with mutual TLS in production), puts a deadline on every call,
and lets the channel's service config retry UNAVAILABLE only (CONVENTIONS 8).
Each transaction step on a device returns a :class:`~southbound.state.StepResult`
(changed, diff, failed, error) rather than raising, so the transaction can
report which device said what; the reads (``info``, ``state``) raise the ground
layer's :class:`~controller.model.errors.RetryableDriverError` (UNAVAILABLE, a
deadline exceeded) or :class:`~controller.model.errors.FatalDriverError`. :class:`DeviceDriver` is the protocol a driver
implements; :data:`drivers` is the registry of driver kinds (duplicate names
are refused).
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import json
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, Protocol, TypeVar

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from controller.model.errors import DriverError, FatalDriverError, RetryableDriverError
from southbound.config import DeviceConfig
from southbound.discovery.observed import ObservedDevice
from southbound.grpc_adapter import SERVICE_NAME, AgentClient
from southbound.state import AgentInfo, DeviceState, Outcome, StepResult

__all__ = ["SERVICE_CONFIG", "AgentDriver", "DeviceDriver", "DriverRegistry", "driver_error", "drivers", "error_text",
           "observe_agents",
           "is_retryable", "service_config"]

T = TypeVar("T")


def service_config(max_attempts: int = 5) -> str:
    """The channel's service config: retry UNAVAILABLE only, with exponential backoff (``max_attempts`` < 2: none)."""
    method: dict[str, Any] = {"name": [{"service": SERVICE_NAME}]}
    if max_attempts >= 2:
        method["retryPolicy"] = {"maxAttempts": max_attempts, "initialBackoff": "0.2s", "maxBackoff": "2s",
                                 "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}
    return json.dumps({"methodConfig": [method]})


SERVICE_CONFIG = service_config()


class DeviceDriver(Protocol):
    """What the transaction needs from a southbound driver, per device, in domain types."""

    devices: tuple[str, ...]

    def endpoint(self, device: str) -> str:
        """Where ``device``'s agent is reached (for people: ``unix:PATH``, ``HOST:PORT``, ...)."""
        ...

    def fenced(self, epoch: int, replica: str = "") -> DeviceDriver:
        """This driver with every call carrying the leader's ``epoch`` (agents refuse older epochs) and
        the id of the ``replica`` that leads (agents record it); it shares the connections, and closing
        it closes nothing."""
        ...

    async def info(self, device: str) -> AgentInfo: ...
    async def prepare(self, device: str, change: str, config: DeviceConfig) -> StepResult: ...
    async def preview(self, device: str, change: str, config: DeviceConfig) -> StepResult:
        """Prepare's diff without storing anything on the device (a review)."""
        ...
    async def commit(self, device: str, change: str, confirm_within: float) -> StepResult: ...
    async def confirm(self, device: str, change: str) -> StepResult: ...
    async def abort(self, device: str, change: str) -> StepResult: ...
    async def rollback(self, device: str, change: str, to_hash: str = "") -> StepResult: ...
    async def state(self, device: str, prefixes: tuple[str, ...] = ()) -> DeviceState: ...
    async def running(self, device: str) -> ObservedDevice:
        """What ``device`` runs, as discovery reads it: its running configuration and interfaces."""
        ...
    async def close(self) -> None: ...


class DriverRegistry:
    """Driver kinds by name; registering a name twice is an error."""

    def __init__(self) -> None:
        self._factories: dict[str, Callable[..., DeviceDriver]] = {}

    def register(self, name: str, factory: Callable[..., DeviceDriver]) -> None:
        if name in self._factories:
            raise ValueError(f"a driver named {name!r} is already registered")
        self._factories[name] = factory

    def create(self, name: str, **kwargs: Any) -> DeviceDriver:
        try:
            return self._factories[name](**kwargs)
        except KeyError:
            raise KeyError(f"no driver named {name!r} (known: {', '.join(sorted(self._factories))})") from None

    def names(self) -> list[str]:
        return sorted(self._factories)


def error_text(exc: BaseException) -> str:
    """How a failed call reads in a step result, a drift report or a problem: ``CODE: details``."""
    if isinstance(exc, DriverError):
        return exc.text
    if isinstance(exc, grpc.aio.AioRpcError):
        return f"{exc.code().name}: {exc.details()}"
    return f"{type(exc).__name__}: {exc}"


def is_retryable(exc: BaseException) -> bool:
    """UNAVAILABLE and DEADLINE_EXCEEDED: the agent may not have seen the call (RetryableDriverError)."""
    return isinstance(exc, RetryableDriverError) or isinstance(exc, grpc.aio.AioRpcError) and exc.code() in (
        grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


def driver_error(device: str, exc: BaseException) -> DriverError:
    """``exc`` (a failed gRPC call, a bad endpoint, a socket error) as the taxonomy's driver error."""
    if isinstance(exc, DriverError):
        return exc
    kind = RetryableDriverError if is_retryable(exc) else FatalDriverError
    return kind(device, error_text(exc))


_CALL_ERRORS = (grpc.aio.AioRpcError, ValueError, OSError)


class AgentDriver:
    """Loom device agents over gRPC: ``endpoints`` maps device -> ``unix:PATH`` or ``HOST:PORT``.

    ``tls`` (a :class:`southbound.pki.ClientTls`) is used for TCP endpoints; ``timeout`` is the
    deadline of each call in seconds (``commit_timeout`` for Prepare, Commit and Rollback, which
    run ``frr-reload.py``). Use as an async context manager, or call :meth:`close`.
    """

    def __init__(self, endpoints: Mapping[str, str], *, tls: Any = None, timeout: float = 10.0,
                 commit_timeout: float = 120.0, max_attempts: int = 5):
        self.endpoints = dict(endpoints)
        self.devices = tuple(sorted(self.endpoints))
        self.tls = tls
        self.timeout = timeout
        self.commit_timeout = commit_timeout
        self._options = [("grpc.service_config", service_config(max_attempts)), ("grpc.enable_retries", 1),
                         ("grpc.max_receive_message_length", 64 << 20),
                         # an agent that restarts is back within a second or two: reconnect quickly
                         ("grpc.initial_reconnect_backoff_ms", 100), ("grpc.min_reconnect_backoff_ms", 100),
                         ("grpc.max_reconnect_backoff_ms", 2000)]
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._clients: dict[str, AgentClient] = {}
        self.epoch: int | None = None  # carried by every call of a fenced view
        self.replica = ""  # with the id of the replica that leads
        self._view = False

    def fenced(self, epoch: int, replica: str = "") -> AgentDriver:
        view = copy.copy(self)  # the same channels (one per device), clients of its own that carry the epoch
        view.epoch, view.replica, view._clients, view._view = epoch, replica, {}, True
        return view

    async def __aenter__(self) -> AgentDriver:
        return self

    def endpoint(self, device: str) -> str:
        return self.endpoints[device]

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _client(self, device: str) -> AgentClient:
        client = self._clients.get(device)
        if client is None and device not in self._channels:
            target = self.endpoints[device]
            if target.startswith("unix:"):
                channel = grpc.aio.insecure_channel(target, options=self._options)
            else:
                if self.tls is None:
                    raise ValueError(f"{device}: TCP endpoint {target} needs client TLS (mutual TLS)")
                channel = grpc.aio.secure_channel(target, self.tls.channel_credentials(),
                                                  options=self._options + self.tls.channel_options())
            self._channels[device] = channel
        if client is None:
            client = self._clients[device] = AgentClient(self._channels[device], epoch=self.epoch,
                                                              replica=self.replica)
        return client

    async def close(self) -> None:
        if self._view:
            return  # the driver it was made from owns the channels
        channels, self._channels, self._clients = self._channels, {}, {}
        await asyncio.gather(*(c.close() for c in channels.values()), return_exceptions=True)

    async def _step(self, device: str, step: str, call: Callable[[AgentClient], Awaitable[Outcome]]) -> StepResult:
        try:
            o = await call(self._client(device))
        except _CALL_ERRORS as exc:
            return StepResult(device, step, failed=True, error=error_text(exc))
        return StepResult(device, step, changed=o.changed, diff=o.diff, config_hash=o.config_hash)

    # -- calls ----------------------------------------------------------------------
    async def _read(self, device: str, call: Callable[[AgentClient], Awaitable[T]]) -> T:
        try:
            return await call(self._client(device))
        except _CALL_ERRORS as exc:
            raise driver_error(device, exc) from exc

    async def info(self, device: str) -> AgentInfo:
        """The agent's identity; raises :class:`RetryableDriverError` or :class:`FatalDriverError`."""
        return await self._read(device, lambda c: c.info(timeout=self.timeout))

    async def prepare(self, device: str, change: str, config: DeviceConfig) -> StepResult:
        return await self._step(device, "prepare", lambda c: c.prepare(change, config, timeout=self.commit_timeout))

    async def preview(self, device: str, change: str, config: DeviceConfig) -> StepResult:
        return await self._step(device, "prepare", lambda c: c.prepare(change, config, timeout=self.commit_timeout,
                                                                       preview=True))

    async def commit(self, device: str, change: str, confirm_within: float) -> StepResult:
        return await self._step(device, "commit",
                                lambda c: c.commit(change, confirm_within, timeout=self.commit_timeout))

    async def confirm(self, device: str, change: str) -> StepResult:
        return await self._step(device, "confirm", lambda c: c.confirm(change, timeout=self.timeout))

    async def abort(self, device: str, change: str) -> StepResult:
        async def call(c: AgentClient) -> Outcome:
            return Outcome(changed=await c.abort(change, timeout=self.timeout))
        return await self._step(device, "abort", call)

    async def rollback(self, device: str, change: str, to_hash: str = "") -> StepResult:
        """Undo ``change`` on ``device`` (restore what ran before it), or restore the config ``to_hash``
        from the agent's history."""
        return await self._step(device, "rollback",
                                lambda c: c.rollback(change, to_hash, timeout=self.commit_timeout))

    async def state(self, device: str, prefixes: tuple[str, ...] = ()) -> DeviceState:
        """What the device runs; raises :class:`RetryableDriverError` or :class:`FatalDriverError`."""
        return await self._read(device, lambda c: c.state(prefixes, timeout=self.timeout))

    async def running(self, device: str) -> ObservedDevice:
        """What ``device`` runs, as discovery reads it (its agent's ``GetRunning``); raises
        :class:`RetryableDriverError` or :class:`FatalDriverError`."""
        return await self._read(device, lambda c: c.running(timeout=self.timeout))

    async def states(self, devices: Iterable[str]) -> dict[str, DeviceState | BaseException]:
        """Every device's state at once; a device that failed maps to its exception."""
        devs = list(devices)
        got = await asyncio.gather(*(self.state(d) for d in devs), return_exceptions=True)
        return dict(zip(devs, got, strict=True))

    async def healthy(self, device: str) -> bool:
        """The gRPC health service's answer for the agent service."""
        self._client(device)
        stub = health_pb2_grpc.HealthStub(self._channels[device])
        try:
            r = await stub.Check(health_pb2.HealthCheckRequest(service=SERVICE_NAME), timeout=self.timeout)
        except grpc.aio.AioRpcError:
            return False
        return bool(r.status == health_pb2.HealthCheckResponse.SERVING)


drivers = DriverRegistry()
drivers.register("grpc", AgentDriver)


def observe_agents(endpoints: Mapping[str, str], *, tls: Any = None, timeout: float = 20.0) -> list[ObservedDevice]:
    """Every device of ``endpoints`` (device -> endpoint, as ``loom serve --agents`` takes them), read
    through its agent for discovery. Raises :class:`RetryableDriverError` or :class:`FatalDriverError`
    naming the first device that did not answer."""
    async def read() -> list[ObservedDevice]:
        async with AgentDriver(endpoints, tls=tls, timeout=timeout) as driver:
            got = await asyncio.gather(*(driver.running(d) for d in driver.devices))
        return [dataclasses.replace(o, name=d) for d, o in zip(driver.devices, got, strict=True)]
    return asyncio.run(read())

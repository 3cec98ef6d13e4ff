"""The one module that speaks the agent's wire format (``loom.agent.v1``).

It owns the generated gRPC stubs (made at build time by ``make proto`` into
``southbound/_gen/``, never at import time) and the conversions between their
messages and Loom's domain values: :class:`~southbound.config.DeviceConfig`,
:class:`~southbound.state.DeviceState`, :class:`~southbound.state.AgentInfo`,
:class:`~southbound.state.Outcome`. The agent registers its logic on a server
through :func:`add_agent_servicer`; the driver calls agents through
:class:`AgentClient`. Everything outside this module speaks domain types only
(CONVENTIONS 2).
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable
from pathlib import Path
from typing import Any, Protocol, TypeVar

import grpc
from google.protobuf import json_format
from grpc.aio import ServicerContext as Context

from southbound.config import (
    BgpNeighbor,
    DeviceConfig,
    FibNexthop,
    FibRoute,
    Interface,
    IsisForm,
    LinkBandwidth,
    OspfForm,
    SessionForm,
)
from southbound.discovery.observed import ObservedDevice, ObservedInterface
from southbound.state import (
    CALLER,
    AgentError,
    AgentInfo,
    BgpSession,
    DeviceState,
    KernelNextHop,
    KernelRoute,
    Outcome,
)

_GEN = Path(__file__).resolve().parent / "_gen"
if not (_GEN / "loom" / "agent" / "v1" / "agent_pb2.py").exists():
    raise ImportError(f"the agent's gRPC stubs are missing in {_GEN}: run `make proto` (part of `make install`)")
if str(_GEN) not in sys.path:
    sys.path.insert(0, str(_GEN))

from loom.agent.v1 import agent_pb2 as pb  # noqa: E402
from loom.agent.v1 import agent_pb2_grpc as pb_grpc  # noqa: E402

__all__ = ["EPOCH_KEY", "SERVICE_NAME", "AgentClient", "AgentService", "add_agent_servicer", "config_from_proto",
           "config_to_proto", "epoch_metadata", "prepare_request_document", "running_from_proto",
           "running_to_proto", "state_from_proto", "state_to_proto"]

SERVICE_NAME = "loom.agent.v1.Agent"
#: the gRPC metadata key that carries the sending leader's epoch (DESIGN.md, High availability)
EPOCH_KEY = "loom-epoch"
#: beside it, the sending replica's id: the agent records who raised each epoch (it decides nothing)
REPLICA_KEY = "loom-replica"

T = TypeVar("T")

_CODES = {
    "failed_precondition": grpc.StatusCode.FAILED_PRECONDITION,
    "invalid_argument": grpc.StatusCode.INVALID_ARGUMENT,
    "not_found": grpc.StatusCode.NOT_FOUND,
    "internal": grpc.StatusCode.INTERNAL,
    "aborted": grpc.StatusCode.ABORTED,
}


# -- DeviceConfig ----------------------------------------------------------------
def config_to_proto(c: DeviceConfig) -> pb.DeviceConfig:
    msg = pb.DeviceConfig(
        hostname=c.hostname, router_id=c.router_id, originated=list(c.originated), routing=c.routing,
        drained=c.drained, maximum_paths=c.maximum_paths, multipath_relax=c.multipath_relax,
        keepalive_seconds=c.timers[0], hold_seconds=c.timers[1],
        interfaces=[pb.Interface(name=i.name, address=i.address, peer=i.peer, peer_port=i.peer_port, host=i.host,
                                 metric=i.metric, drained=i.drained, address6=i.address6) for i in c.interfaces],
        neighbors=[pb.BgpNeighbor(port=n.port, peer=n.peer, remote_asn=n.remote_asn, address=n.address,
                                  drained=n.drained) for n in c.neighbors],
        link_bandwidth=[pb.LinkBandwidth(port=b.port, prefix=b.prefix, mbps=b.mbps) for b in c.link_bandwidth],
        fib_routes=[pb.FibRoute(prefix=r.prefix, group=r.group, nexthops=[
            pb.FibNexthop(port=h.port, gateway=h.gateway, weight=h.weight) for h in r.nexthops]) for r in c.fib_routes],
        underlay="" if c.underlay == "ipv4-numbered" else c.underlay, loopback6=c.loopback6, ipv6=c.ipv6,
    )
    if c.asn is not None:
        msg.asn = c.asn
    f = c.session_form
    if f != SessionForm():
        msg.session_form.CopyFrom(pb.SessionForm(
            peer_group=f.peer_group or "", remote_as_external=f.remote_as_external, not_v6only=not f.v6only,
            redistribute_connected=f.redistribute_connected))
    o = c.ospf_form
    if o != OspfForm():
        msg.ospf_form.CopyFrom(pb.OspfForm(broadcast=o.broadcast, hello_seconds=o.hello or 0, dead_seconds=o.dead or 0,
                                           by_networks=o.networks is not None, networks=list(o.networks or ())))
    i = c.isis_form
    if i != IsisForm():
        msg.isis_form.CopyFrom(pb.IsisForm(
            tag=i.tag, net=i.net or "", is_type=i.is_type, metric_style=i.metric_style, broadcast=i.broadcast,
            hello_seconds=i.hello or 0, hello_multiplier=i.multiplier or 0))
    return msg


def prepare_request_document(change: str, config: DeviceConfig) -> dict[str, Any]:
    """The ``Prepare`` request for ``config`` in protobuf's canonical JSON form (golden files, logs)."""
    msg = pb.PrepareRequest(change=change, config=config_to_proto(config))
    doc: dict[str, Any] = json_format.MessageToDict(msg, preserving_proto_field_name=True)
    return doc


def _opt(msg: Any, name: str) -> Any:
    return getattr(msg, name) if msg.HasField(name) else None


def config_from_proto(m: pb.DeviceConfig) -> DeviceConfig:
    return DeviceConfig(
        hostname=m.hostname, asn=_opt(m, "asn"), router_id=m.router_id,
        interfaces=tuple(Interface(i.name, _opt(i, "address"), _opt(i, "peer"), _opt(i, "peer_port"), i.host,
                                   i.metric, i.drained, _opt(i, "address6")) for i in m.interfaces),
        neighbors=tuple(BgpNeighbor(n.port, n.peer, n.remote_asn, _opt(n, "address"), n.drained)
                        for n in m.neighbors),
        originated=tuple(m.originated), routing=m.routing or "bgp", drained=m.drained,
        maximum_paths=m.maximum_paths or 64, multipath_relax=m.multipath_relax,
        timers=(m.keepalive_seconds or 1, m.hold_seconds or 3),
        link_bandwidth=tuple(LinkBandwidth(b.port, b.prefix, b.mbps) for b in m.link_bandwidth),
        fib_routes=tuple(FibRoute(r.prefix, r.group, tuple(FibNexthop(h.port, h.gateway, h.weight)
                                                           for h in r.nexthops)) for r in m.fib_routes),
        underlay=m.underlay or "ipv4-numbered", loopback6=_opt(m, "loopback6"), ipv6=m.ipv6,
        session_form=_session_form(m),
        ospf_form=_ospf_form(m),
        isis_form=_isis_form(m),
    )


def _isis_form(m: pb.DeviceConfig) -> IsisForm:
    if not m.HasField("isis_form"):
        return IsisForm()
    i = m.isis_form
    return IsisForm(i.tag or "loom", i.net or None, i.is_type or "level-2-only", i.metric_style or "wide", i.broadcast,
                    i.hello_seconds or None, i.hello_multiplier or None)


def _ospf_form(m: pb.DeviceConfig) -> OspfForm:
    if not m.HasField("ospf_form"):
        return OspfForm()
    o = m.ospf_form
    return OspfForm(o.broadcast, o.hello_seconds or None, o.dead_seconds or None,
                    tuple(o.networks) if o.by_networks else None)


def _session_form(m: pb.DeviceConfig) -> SessionForm:
    if not m.HasField("session_form"):
        return SessionForm()
    f = m.session_form
    return SessionForm(f.peer_group or None, f.remote_as_external, not f.not_v6only, f.redistribute_connected)


# -- state -----------------------------------------------------------------------
def state_to_proto(s: DeviceState) -> pb.DeviceState:
    return pb.DeviceState(
        hostname=s.hostname, running_hash=s.running_hash, observed=s.observed,
        routes=[pb.KernelRoute(prefix=r.prefix, protocol=r.protocol, nexthops=[
            pb.KernelNextHop(port=h.port, via=h.via, weight=h.weight) for h in r.nexthops])
            for _, r in sorted(s.routes.items())],
        sessions=[pb.BgpSession(neighbor=x.neighbor, state=x.state, remote_asn=x.remote_asn,
                                prefixes_received=x.prefixes_received) for x in s.sessions],
        pending_change=s.pending_change, confirm_deadline_unix=s.confirm_deadline,
    )


def state_from_proto(m: pb.DeviceState) -> DeviceState:
    return DeviceState(
        hostname=m.hostname, running_hash=m.running_hash, observed=m.observed,
        routes={r.prefix: KernelRoute(r.prefix, r.protocol, tuple(KernelNextHop(h.port, h.via, h.weight)
                                                                  for h in r.nexthops)) for r in m.routes},
        sessions=tuple(BgpSession(x.neighbor, x.state, x.remote_asn, x.prefixes_received) for x in m.sessions),
        pending_change=m.pending_change, confirm_deadline=m.confirm_deadline_unix,
    )


def _info_to_proto(i: AgentInfo) -> pb.AgentInfo:
    return pb.AgentInfo(hostname=i.hostname, agent_version=i.agent_version, frr_version=i.frr_version,
                        dry_frr=i.dry_frr, running_hash=i.running_hash, pending_change=i.pending_change,
                        prepared_change=i.prepared_change)


def _info_from_proto(m: pb.AgentInfo) -> AgentInfo:
    return AgentInfo(m.hostname, m.agent_version, m.frr_version, m.dry_frr, m.running_hash, m.pending_change,
                     m.prepared_change)


# -- discovery -------------------------------------------------------------------
def running_to_proto(d: ObservedDevice) -> pb.RunningConfig:
    msg = pb.RunningConfig(hostname=d.name, running_config=d.running_config)
    for i in d.interfaces:
        m = msg.interfaces.add(name=i.name, addresses=[*i.addresses, *i.addresses6], up=i.up, kind=i.kind,
                               link_local=list(i.link_local), neighbors6=list(i.neighbors6))
        if i.speed_mbps is not None:
            m.speed_mbps = i.speed_mbps
    return msg


def running_from_proto(m: pb.RunningConfig) -> ObservedDevice:
    return ObservedDevice(m.hostname, m.running_config, tuple(
        ObservedInterface(i.name, tuple(a for a in i.addresses if ":" not in a), _opt(i, "speed_mbps"), i.up, i.kind,
                          addresses6=tuple(a for a in i.addresses if ":" in a), link_local=tuple(i.link_local),
                          neighbors6=tuple(i.neighbors6)) for i in m.interfaces))


# -- server side -----------------------------------------------------------------
class AgentService(Protocol):
    """The agent's logic, in domain types (implemented by :class:`southbound.device.agent.AgentCore`);
    ``epoch`` is the sending leader's (None: the call carried none)."""

    async def info(self, *, epoch: int | None = None) -> AgentInfo: ...
    async def prepare(self, change: str, config: DeviceConfig, *, epoch: int | None = None,
                      preview: bool = False) -> Outcome: ...
    async def commit(self, change: str, confirm_within: float, *, epoch: int | None = None) -> Outcome: ...
    async def confirm(self, change: str, *, epoch: int | None = None) -> Outcome: ...
    async def abort(self, change: str, *, epoch: int | None = None) -> bool: ...
    async def rollback(self, change: str, to_hash: str, *, epoch: int | None = None) -> Outcome: ...
    async def state(self, prefixes: tuple[str, ...], *, epoch: int | None = None) -> DeviceState: ...
    async def read_running(self, *, epoch: int | None = None) -> ObservedDevice: ...


def epoch_metadata(epoch: int | None, replica: str = "") -> tuple[tuple[str, str], ...] | None:
    """The call metadata that carries ``epoch`` and the sending ``replica`` (None: no epoch, no metadata)."""
    if not epoch:
        return None
    return ((EPOCH_KEY, str(epoch)), (REPLICA_KEY, replica)) if replica else ((EPOCH_KEY, str(epoch)),)


class _Servicer(pb_grpc.AgentServicer):  # type: ignore[misc]
    def __init__(self, core: AgentService):
        self.core = core

    @staticmethod
    async def _epoch(context: Context) -> int | None:
        """The call's epoch; the replica that sent it becomes :data:`~southbound.state.CALLER` of this call."""
        epoch: int | None = None
        for key, value in context.invocation_metadata() or ():
            if key == REPLICA_KEY:
                CALLER.set(str(value)[:128])
            elif key == EPOCH_KEY:
                try:
                    epoch = int(value)
                except ValueError:
                    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"{EPOCH_KEY} {value!r} is not an integer")
        return epoch

    async def _call(self, context: Context, coro: Awaitable[T]) -> T:
        try:
            return await coro
        except AgentError as exc:
            await context.abort(_CODES.get(exc.code, grpc.StatusCode.INTERNAL), str(exc))
            raise  # abort raises; this line only tells the type checker

    async def GetInfo(self, request: pb.GetInfoRequest, context: Context) -> pb.AgentInfo:  # noqa: N802
        return _info_to_proto(await self._call(context, self.core.info(epoch=await self._epoch(context))))

    async def Prepare(self, request: pb.PrepareRequest, context: Context) -> pb.PrepareResponse:  # noqa: N802
        try:
            config = config_from_proto(request.config)
        except (TypeError, ValueError) as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"bad DeviceConfig: {exc}")
        o = await self._call(context, self.core.prepare(request.change, config, epoch=await self._epoch(context),
                                                        preview=request.preview))
        return pb.PrepareResponse(changed=o.changed, diff=o.diff, config_hash=o.config_hash)

    async def Commit(self, request: pb.CommitRequest, context: Context) -> pb.CommitResponse:  # noqa: N802
        o = await self._call(context, self.core.commit(request.change, request.confirm_within_seconds,
                                                       epoch=await self._epoch(context)))
        return pb.CommitResponse(changed=o.changed, diff=o.diff, config_hash=o.config_hash,
                                 confirm_deadline_unix=o.confirm_deadline)

    async def Confirm(self, request: pb.ConfirmRequest, context: Context) -> pb.ConfirmResponse:  # noqa: N802
        o = await self._call(context, self.core.confirm(request.change, epoch=await self._epoch(context)))
        return pb.ConfirmResponse(config_hash=o.config_hash)

    async def Abort(self, request: pb.AbortRequest, context: Context) -> pb.AbortResponse:  # noqa: N802
        return pb.AbortResponse(dropped=await self._call(context, self.core.abort(request.change,
                                                                                  epoch=await self._epoch(context))))

    async def Rollback(self, request: pb.RollbackRequest, context: Context) -> pb.RollbackResponse:  # noqa: N802
        o = await self._call(context, self.core.rollback(request.change, request.to_hash,
                                                         epoch=await self._epoch(context)))
        return pb.RollbackResponse(changed=o.changed, diff=o.diff, config_hash=o.config_hash)

    async def GetState(self, request: pb.GetStateRequest, context: Context) -> pb.DeviceState:  # noqa: N802
        return state_to_proto(await self._call(context, self.core.state(tuple(request.prefixes),
                                                                        epoch=await self._epoch(context))))


    async def GetRunning(self, request: pb.GetRunningRequest, context: Context) -> pb.RunningConfig:  # noqa: N802
        return running_to_proto(await self._call(context, self.core.read_running(epoch=await self._epoch(context))))


def add_agent_servicer(server: grpc.aio.Server, core: AgentService) -> None:
    """Serve ``core`` as ``loom.agent.v1.Agent`` on ``server``."""
    pb_grpc.add_AgentServicer_to_server(_Servicer(core), server)


# -- client side -----------------------------------------------------------------
class AgentClient:
    """Calls one agent over an open ``grpc.aio`` channel; every call takes a deadline (``timeout``, seconds).
    Reads (GetInfo, GetState) wait for the channel to connect within that deadline; calls that change
    the device fail fast when the agent is unreachable (after the channel's UNAVAILABLE retries)."""

    def __init__(self, channel: grpc.aio.Channel, *, epoch: int | None = None, replica: str = ""):
        self._stub = pb_grpc.AgentStub(channel)
        self._md = epoch_metadata(epoch, replica)  # every call carries the leader's epoch, when there is one

    async def info(self, *, timeout: float) -> AgentInfo:
        return _info_from_proto(await self._stub.GetInfo(pb.GetInfoRequest(), timeout=timeout, wait_for_ready=True,
                                                         metadata=self._md))

    async def prepare(self, change: str, config: DeviceConfig, *, timeout: float, preview: bool = False) -> Outcome:
        r = await self._stub.Prepare(pb.PrepareRequest(change=change, config=config_to_proto(config), preview=preview),
                                     timeout=timeout, metadata=self._md)
        return Outcome(r.changed, r.diff, r.config_hash)

    async def commit(self, change: str, confirm_within: float, *, timeout: float) -> Outcome:
        r = await self._stub.Commit(pb.CommitRequest(change=change, confirm_within_seconds=confirm_within),
                                    timeout=timeout, metadata=self._md)
        return Outcome(r.changed, r.diff, r.config_hash, r.confirm_deadline_unix)

    async def confirm(self, change: str, *, timeout: float) -> Outcome:
        r = await self._stub.Confirm(pb.ConfirmRequest(change=change), timeout=timeout, metadata=self._md)
        return Outcome(False, "", r.config_hash)

    async def abort(self, change: str, *, timeout: float) -> bool:
        r = await self._stub.Abort(pb.AbortRequest(change=change), timeout=timeout, metadata=self._md)
        return bool(r.dropped)

    async def rollback(self, change: str, to_hash: str = "", *, timeout: float) -> Outcome:
        r = await self._stub.Rollback(pb.RollbackRequest(change=change, to_hash=to_hash), timeout=timeout,
                                      metadata=self._md)
        return Outcome(r.changed, r.diff, r.config_hash)

    async def state(self, prefixes: tuple[str, ...] = (), *, timeout: float) -> DeviceState:
        request = pb.GetStateRequest(prefixes=list(prefixes))
        return state_from_proto(await self._stub.GetState(request, timeout=timeout, wait_for_ready=True,
                                                          metadata=self._md))

    async def running(self, *, timeout: float) -> ObservedDevice:
        return running_from_proto(await self._stub.GetRunning(pb.GetRunningRequest(), timeout=timeout,
                                                              wait_for_ready=True, metadata=self._md))

"""Domain values the device agent and the controller-side driver exchange.

This module owns the southbound vocabulary that is not configuration: what a
switch reports it installed (kernel routes with weighted next hops, BGP
sessions, the running configuration's hash), who an agent is, and the
per-device result every transaction step returns (changed, diff, failed,
error; CONVENTIONS 4). :class:`AgentError` (an agent's refusal) is the ground
layer's, re-exported here beside the values it travels with. The gRPC adapter
converts these to and from the wire; nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field

from controller.model.documents.base import JsonObject
from controller.model.errors import AgentError

__all__ = ["CALLER", "AgentError", "AgentInfo", "BgpSession", "DeviceState", "KernelNextHop", "KernelRoute",
           "Outcome", "StepResult"]

#: The controller replica that sent the agent call being served ("": the call named none), as the call's
#: metadata says (set by the gRPC adapter, or by the dry driver in-process). The agent's fence only records
#: it beside the epochs (who raised each one; two replicas calling with one epoch): it decides nothing.
CALLER: ContextVar[str] = ContextVar("loom_caller", default="")


@dataclass(frozen=True, slots=True)
class KernelNextHop:
    """One installed next hop: the local ``port``, the gateway ``via`` (may be empty), its weight. ``via`` is of
    either family: an IPv4 route's may be IPv6 (RFC 8950: the peer's link-local, ``fe80::..``, on an unnumbered
    underlay) or FRR's ``169.254.0.1`` (onlink); the port is what the plan is compared with."""

    port: str
    via: str = ""
    weight: int = 1


@dataclass(frozen=True, slots=True)
class KernelRoute:
    """A route in the switch's kernel and who installed it (``bgp``, ``loom``, ...); ``prefix`` is canonical, of
    either family (IPv6 compressed, as the plan names it)."""

    prefix: str
    protocol: str
    nexthops: tuple[KernelNextHop, ...]

    def weights(self) -> dict[str, int]:
        """Weight per port (several next hops over one port add up)."""
        out: dict[str, int] = {}
        for nh in self.nexthops:
            out[nh.port] = out.get(nh.port, 0) + nh.weight
        return out


@dataclass(frozen=True, slots=True)
class BgpSession:
    """One BGP session, whatever address families it carries: ``neighbor`` as FRR names it (an IPv4 or IPv6
    address, or the interface of an unnumbered session), ``prefixes_received`` over all its families."""

    neighbor: str
    state: str
    remote_asn: int = 0
    prefixes_received: int = 0


@dataclass(frozen=True, slots=True)
class DeviceState:
    """What a switch really runs. ``observed`` is false for an agent in ``--dry-frr`` mode,
    whose routes are the ones it recorded rather than read from a kernel."""

    hostname: str
    running_hash: str
    observed: bool
    routes: Mapping[str, KernelRoute] = field(default_factory=dict)
    sessions: tuple[BgpSession, ...] = ()
    pending_change: str = ""
    confirm_deadline: float = 0.0

    def to_document(self) -> JsonObject:
        """JSON form, routes as ``{"PREFIX": [{"port": .., "weight": ..}]}`` like ``loom lab routes``."""
        return {
            "hostname": self.hostname,
            "running_hash": self.running_hash,
            "observed": self.observed,
            "routes": {p: [{"port": nh.port, "via": nh.via, "weight": nh.weight} for nh in r.nexthops]
                       for p, r in sorted(self.routes.items())},
            "sessions": [{"neighbor": s.neighbor, "state": s.state, "remote_asn": s.remote_asn,
                          "prefixes_received": s.prefixes_received} for s in self.sessions],
            "pending_change": self.pending_change,
        }


@dataclass(frozen=True, slots=True)
class AgentInfo:
    hostname: str
    agent_version: str
    frr_version: str
    dry_frr: bool
    running_hash: str
    pending_change: str = ""
    prepared_change: str = ""


@dataclass(frozen=True, slots=True)
class StepResult:
    """One device's outcome of one transaction step (prepare, commit, verify, confirm, abort, rollback)."""

    device: str
    step: str
    changed: bool = False
    diff: str = ""
    failed: bool = False
    error: str = ""
    config_hash: str = ""

    def to_document(self) -> JsonObject:
        return {"device": self.device, "step": self.step, "changed": self.changed, "diff": self.diff,
                "failed": self.failed, "error": self.error, "config_hash": self.config_hash}


@dataclass(frozen=True, slots=True)
class Outcome:
    """What an agent answers to Prepare, Commit, Confirm or Rollback."""

    changed: bool = False
    diff: str = ""
    config_hash: str = ""
    confirm_deadline: float = 0.0

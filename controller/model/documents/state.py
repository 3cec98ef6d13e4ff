"""The operational state: links and devices as the switches report them, the reaction table and what
triggers a failure reaction, and what one device really runs (``/v1/devices/{name}/state``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from controller.model.documents.base import Closed

__all__ = [
    "AdjacencyStateDocument", "DeviceStateDocument", "DeviceStateSummary", "DeviceStatesDocument",
    "InstalledNextHop", "LinkStateDocument", "OspfAdjacencyStateDocument",
    "LinkStatesDocument", "OperationalStateDocument", "ReactionTableDocument", "ReactionTrigger", "SessionDocument",
]


class LinkStateDocument(Closed):
    """One link as its ends report it: ``down`` when either end says so, ``unknown`` while an end's agent is
    unreachable (an unreachable agent is not a failed link)."""

    id: str = Field(description="device:port of its lower end")
    a: str
    a_port: str
    b: str
    b_port: str
    oper: Literal["up", "down", "unknown"]
    since: str | None = Field(description="when it last changed state")
    flaps_1h: int = Field(description="how often it went down in the last hour")


class LinkStatesDocument(Closed):
    """``GET /v1/state/links``."""

    links: list[LinkStateDocument]


class AdjacencyStateDocument(Closed):
    """One IS-IS adjacency as its device reports it (OpenConfig ``adjacency-state``)."""

    port: str = Field(description="the device's port the adjacency runs on (OpenConfig interface-id)")
    level: int = Field(description="the IS-IS level (Loom's fabrics are level 2)")
    neighbor: str = Field(description="the neighbor's system id (a dry agent names it by its hostname)")
    state: str = Field(description="UP, DOWN, INIT or FAILED")
    link: str | None = Field(default=None, description="the id of the intent's link on that port, if any")
    since: str | None = Field(default=None, description="when it last changed state")


class OspfAdjacencyStateDocument(Closed):
    """One OSPF adjacency (an OSPFv2 neighbor) as its device reports it (OpenConfig ``adjacency-state``)."""

    port: str = Field(description="the device's port the adjacency runs on (OpenConfig interface id)")
    area: str = Field(description="the OSPF area of that port (Loom's fabrics are one backbone area, 0.0.0.0)")
    neighbor: str = Field(description="the neighbor's router id (a dry agent names it by its hostname)")
    state: str = Field(description="FULL, DOWN, INIT, TWO_WAY, EXSTART, EXCHANGE, LOADING or ATTEMPT")
    link: str | None = Field(default=None, description="the id of the intent's link on that port, if any")
    since: str | None = Field(default=None, description="when it last changed state")


class DeviceStateSummary(Closed):
    """One device's agent and sessions, as the leader follows them. ``sessions`` counts the device's routing
    sessions: its BGP neighbors (``routing: bgp``), its IS-IS adjacencies (``routing: isis``; one whose
    neighbor went away stays, down, while its port is an IS-IS port) or its OSPF adjacencies (``routing:
    ospf``, likewise); ``sessions_up`` those established (BGP), up (IS-IS) or full (OSPF)."""

    name: str
    agent: Literal["reachable", "unreachable"]
    sessions_up: int
    sessions: int
    last_seen: str | None
    adjacencies: list[AdjacencyStateDocument] = Field(
        default_factory=list, description="its IS-IS adjacencies, by port (empty under routing: bgp)")
    ospf_adjacencies: list[OspfAdjacencyStateDocument] = Field(
        default_factory=list, description="its OSPF adjacencies, by port (empty unless routing: ospf)")


class DeviceStatesDocument(Closed):
    """``GET /v1/state/devices``."""

    devices: list[DeviceStateSummary]


class OperationalStateDocument(Closed):
    """Both, as the leader stores them for the followers (``at``: when it wrote them)."""

    links: list[LinkStateDocument]
    devices: list[DeviceStateSummary]
    at: str | None = None


class ReactionTrigger(Closed):
    """What made the leader commit a failure reaction (author ``failover``): the parts seen failed (or
    healthy again), when, and how the reaction plan compared with leaving the plan in force."""

    event: Literal["failure", "recovery"] = Field(description="parts failed, or came back after their hold-down")
    links: list[str] = Field(description="link ids (device:port of the lower end) the event names")
    devices: list[str]
    detected_at: str | None = Field(default=None, description="when the first of them was seen down (or up again)")
    verdict: str = Field(description="safe: the reaction plan passes the replay on the degraded fabric; no_worse: "
                                     "it fails some invariant, but less than the plan in force under the failure")
    current: dict[str, float] = Field(default_factory=dict, description="the plan in force under the failure: "
                                                                        "dropped_gbps, loops, max_utilization")
    reaction: dict[str, float] = Field(default_factory=dict, description="the reaction plan, likewise")
    plan: Literal["precomputed", "solved"] | None = Field(
        default=None, description="the reaction plan was looked up in the reaction table, or solved on the failure")
    plan_seconds: float | None = Field(default=None, description="time to plan and replay the reaction")


class ReactionTableDocument(Closed):
    """``GET /v1/state/reactions``: this replica's reaction table (the leader's is the one in use)."""

    state: Literal["idle", "building", "ready", "partial", "stopped"] = Field(
        description="partial: the planning budget ran out (the rest are solved when they fail); stopped: the "
                    "replica stopped leading, or a newer revision became active")
    revision: int | None = None
    scenarios: int = Field(default=0, description="scenarios of the failure-tolerance scope (baseline excluded)")
    ready: int = Field(default=0, description="reaction plans precomputed and judged")
    failed: int = Field(default=0, description="scenarios no plan could route around")
    seconds: float = Field(default=0.0, description="planning time so far")


class InstalledNextHop(Closed):
    """One next hop a switch's kernel holds for a prefix."""

    port: str
    via: str = Field(description="the gateway (may be empty)")
    weight: int


class SessionDocument(Closed):
    """One BGP session as the switch reports it."""

    neighbor: str
    state: str
    remote_asn: int
    prefixes_received: int


class DeviceStateDocument(Closed):
    """``GET /v1/devices/{name}/state``: what the switch really installed. ``observed`` is false
    for an agent that records routes instead of reading a kernel (``--dry-frr``)."""

    hostname: str
    running_hash: str
    observed: bool
    routes: dict[str, list[InstalledNextHop]] = Field(description="prefix -> next hops, as loom lab routes")
    sessions: list[SessionDocument]
    pending_change: str = Field(description="a change committed but not yet confirmed, or empty")
    endpoint: str | None = Field(default=None, description="where the controller reaches the device's agent")

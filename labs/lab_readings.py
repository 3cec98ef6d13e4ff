"""What a lab's nodes show, read into values: kernel routes of both families and BGP sessions.

This module owns the parsing behind ``loom lab status`` and ``loom lab routes`` (:mod:`labs.runner` reads
the nodes: their routes over netlink in each node's namespace, in ``ip -j route``'s form, and bgpd over its vty
socket): ``ip -j route`` entries of each family into canonical prefixes (IPv6 compressed, as the intent
writes them) with their next-hop ports and weights (:func:`parse_routes`, :func:`routes_of_both`), FRR's
``show bgp summary json`` of every address family into each peer's state (:func:`bgp_sessions`; a peer is
an address, or the port of a session on an interface), and a node's and a lab's observation
(:class:`NodeObservation`, :class:`Observation`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict

from controller.model import canonical_prefix, prefix_order

__all__ = ["NextHop", "NodeObservation", "Observation", "bgp_sessions", "parse_routes", "routes_of_both"]

#: routes that no routing daemon made: the kernel's own (connected subnets, IPv6's ``fe80::/64``) and those
#: learnt from router advertisements
_ROUTE_PROTOCOLS_SKIPPED = ("kernel", "ra")


class NextHop(TypedDict):
    """One next hop of a kernel route: the port it leaves on and its weight (1 unless WCMP set one)."""

    port: str
    weight: int


#: prefix -> its next hops, sorted by port
Routes = dict[str, list[NextHop]]


@dataclass
class NodeObservation:
    """What one node shows: daemons alive, BGP sessions, kernel routes."""

    node: str
    daemons_alive: int = 0
    daemons: int = 0
    sessions: dict[str, str] = field(default_factory=dict)  # peer -> state
    routes: Routes = field(default_factory=dict)  # prefix -> [{port, weight}]
    error: str | None = None

    @property
    def established(self) -> int:
        return sum(1 for s in self.sessions.values() if s == "Established")


@dataclass
class Observation:
    nodes: dict[str, NodeObservation]

    @property
    def sessions(self) -> tuple[int, int]:
        return (sum(n.established for n in self.nodes.values()), sum(len(n.sessions) for n in self.nodes.values()))

    @property
    def route_count(self) -> int:
        return sum(len(n.routes) for n in self.nodes.values())

    def routes(self) -> dict[str, Routes]:
        """node -> prefix -> next hops, nodes by name, prefixes IPv4 first then by address."""
        return {name: dict(sorted(n.routes.items(), key=lambda kv: prefix_order(kv[0])))
                for name, n in sorted(self.nodes.items())}

    def signature(self) -> str:
        return json.dumps({k: (n.sessions, n.routes) for k, n in sorted(self.nodes.items())}, sort_keys=True)


def parse_routes(ip_json: str, family: int = 4) -> Routes:
    """``ip -j route`` output (``ip -j -6 route`` with ``family=6``) -> canonical prefix -> sorted
    ``[{"port", "weight"}]``. Routes the kernel made (connected subnets, IPv6's ``fe80::/64``, routes from
    router advertisements) and routes that are not unicast (multicast, local, unreachable) are left out. A
    next hop is the port it leaves on (``dev``) whatever its gateway: an IPv4 route over an IPv6 next hop
    (``via inet6 fe80::...``, or ``via 169.254.0.1 ... onlink``) is its port's like any other."""
    return _routes(json.loads(ip_json or "[]"), family)


def _routes(entries: Sequence[Mapping[str, Any]], family: int) -> Routes:
    out: Routes = {}
    for r in entries:
        if r.get("protocol") in _ROUTE_PROTOCOLS_SKIPPED or r.get("type", "unicast") != "unicast":
            continue
        dst = str(r.get("dst", ""))
        if dst == "default":
            dst = "0.0.0.0/0" if family == 4 else "::/0"
        elif "/" not in dst:
            dst += "/32" if family == 4 else "/128"
        try:
            dst = canonical_prefix(dst)
        except ValueError:
            continue
        hops = r.get("nexthops")
        if hops:
            members = [NextHop(port=str(h.get("dev", "")), weight=int(h.get("weight", 1))) for h in hops]
        elif r.get("dev"):
            members = [NextHop(port=str(r["dev"]), weight=1)]
        else:
            continue
        out[dst] = sorted(members, key=lambda m: m["port"])
    return out


def routes_of_both(v4: Sequence[Mapping[str, Any]], v6: Sequence[Mapping[str, Any]]) -> Routes:
    """A node's routes of both families (``ip -j route`` entries: IPv4's, then IPv6's) -> :func:`parse_routes` of
    both, IPv4 prefixes first."""
    return {**_routes(v4, 4), **_routes(v6, 6)}


def bgp_sessions(summary: Mapping[str, Any]) -> dict[str, str]:
    """FRR's ``show bgp summary json`` -> peer (an address, or a port for a session on an interface) ->
    state, over every address family (one session carries IPv4 and IPv6 unicast on an unnumbered or
    IPv6 underlay); a peer whose state differs between families shows a state other than Established."""
    out: dict[str, str] = {}
    for af in summary.values():
        peers = af.get("peers", {}) if isinstance(af, dict) else {}
        for peer, v in peers.items():
            state = str(v.get("state", "?")) if isinstance(v, dict) else "?"
            if out.get(peer, "Established") == "Established":
                out[peer] = state
    return out

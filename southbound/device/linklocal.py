"""The IPv6 link-local address of the router at the far end of a port: the gateway of a ``fib`` next hop that has none.

On an unnumbered underlay (and for IPv6 prefixes over an IPv4-numbered IS-IS fabric) a ``fib`` next hop's
gateway is "" (:class:`~southbound.config.FibNexthop`): the agent uses the peer's IPv6 link-local address on
the port. This module owns finding it, from what the switch already knows, in this order:

1. the kernel's IPv6 neighbor table (``ip -j -6 neigh``): link-local entries flagged ``router`` (FRR sends router
   advertisements on its fabric ports, and a BGP session over the port resolved its peer), not ``INCOMPLETE`` or
   ``FAILED``; a reachable one first;
2. the link-local gateways of FRR's own kernel routes over the port (BGP's routes over IPv6 next hops, IS-IS's
   IPv6 routes; Loom's own routes are not evidence);
3. bgpd's neighbor on the port (``show bgp neighbors json``: an unnumbered neighbor is named by its interface,
   ``hostForeign`` is its address);
4. the address this agent last found for the port (the kernel flushes a port's neighbors when it goes down, and
   they come back seconds after it is up again).

A port none of them knows is :class:`UnresolvedNextHop`, raised before anything is installed.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from controller.model.errors import FrrError

__all__ = ["LinkLocals", "UnresolvedNextHop", "bgp_link_locals", "neighbor_routers", "route_link_locals"]

log = logging.getLogger("loom.agent.linklocal")

#: neighbor states whose address is not (yet, or any more) a neighbor that answered
_UNUSABLE = frozenset({"INCOMPLETE", "FAILED", "NONE"})
#: states that mean the neighbor answered lately (preferred where a port has several)
_CONFIRMED = frozenset({"REACHABLE", "PERMANENT", "NOARP"})
#: route protocols that are not a router's evidence of its peer (the kernel's own, and Loom's)
_NOT_EVIDENCE = frozenset({"kernel", "250", "loom", "static", "boot"})


class UnresolvedNextHop(FrrError):
    """A ``fib`` next hop needs the peer's IPv6 link-local address on a port, and nothing knows it yet: ``ports``."""

    def __init__(self, ports: Iterable[str]):
        self.ports = tuple(sorted(ports))
        super().__init__(f"no IPv6 link-local address of the peer on {', '.join(self.ports)} yet (no router in the "
                         "kernel's neighbor table there, no FRR route or BGP session over it): an unnumbered fib "
                         "next hop needs it")


def _link_local(text: object) -> str | None:
    try:
        addr = ipaddress.IPv6Address(str(text).split("%")[0])
    except ValueError:
        return None
    return str(addr) if addr.is_link_local else None


def neighbor_routers(neigh: Iterable[Mapping[str, Any]]) -> dict[str, list[str]]:
    """``ip -j -6 neigh show`` entries as port -> the link-local addresses of the routers on it that answer (or
    may: ``STALE``, ``DELAY``, ``PROBE``), those that answered lately first."""
    found: dict[str, list[tuple[int, str]]] = {}
    for n in neigh:
        addr, states = _link_local(n.get("dst")), {str(s) for s in n.get("state", ())}
        if addr is None or "router" not in n or not n.get("dev") or states & _UNUSABLE:
            continue
        found.setdefault(str(n["dev"]), []).append((0 if states & _CONFIRMED else 1, addr))
    return {port: [a for _, a in sorted(entries)] for port, entries in found.items()}


def route_link_locals(routes: Iterable[Mapping[str, Any]]) -> dict[str, list[str]]:
    """``ip -j route`` / ``ip -j -6 route`` entries as port -> the link-local gateways FRR's routes use over it
    (``gateway`` of an IPv6 route, ``via inet6`` of an IPv4 one)."""
    out: dict[str, list[str]] = {}
    for r in routes:
        if str(r.get("protocol", "")) in _NOT_EVIDENCE:
            continue
        raw = r.get("nexthops")
        for h in raw if isinstance(raw, list) else [r]:
            via = h.get("via")
            addr = _link_local(h.get("gateway") or (via.get("host") if isinstance(via, Mapping) else ""))
            if addr is not None and h.get("dev") and addr not in out.get(str(h["dev"]), ()):
                out.setdefault(str(h["dev"]), []).append(addr)
    return out


def bgp_link_locals(neighbors: Mapping[str, Any]) -> dict[str, str]:
    """``show bgp neighbors json`` as port -> the link-local address of the unnumbered neighbor on it (a neighbor
    named by its interface; ``hostForeign``, known once its session has connected)."""
    out: dict[str, str] = {}
    for name, n in neighbors.items():
        if not isinstance(n, Mapping) or _is_address(name):
            continue
        addr = _link_local(n.get("hostForeign"))
        if addr is not None:
            out[name] = addr
    return out


def _is_address(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


class LinkLocals:
    """Finds the peers' link-local addresses (see the module docstring), remembering each port's last one.

    ``neigh``, ``routes`` and ``bgp`` return what the switch shows now (``ip -j -6 neigh``'s entries, both
    families' ``ip -j route`` entries, bgpd's ``show bgp neighbors json``); each is asked at most once per
    :meth:`resolve`, and only while some port is still unknown."""

    def __init__(self, neigh: Callable[[], list[dict[str, Any]]], routes: Callable[[], list[dict[str, Any]]],
                 bgp: Callable[[], Mapping[str, Any]]):
        self._sources: tuple[Callable[[], Mapping[str, list[str] | str]], ...] = (
            lambda: neighbor_routers(neigh()), lambda: route_link_locals(routes()), lambda: bgp_link_locals(bgp()))
        self.last: dict[str, str] = {}  # port -> the address last found there

    def resolve(self, ports: Iterable[str]) -> dict[str, str]:
        """port -> its peer's link-local address, for every one of ``ports``; :class:`UnresolvedNextHop` naming
        the ports nothing knows."""
        want = sorted(set(ports))
        out: dict[str, str] = {}
        for source in self._sources:
            missing = [p for p in want if p not in out]
            if not missing:
                break
            try:
                found = source()
            except (FrrError, OSError, ValueError) as exc:  # a source that cannot answer: the next one may
                log.debug("a link-local source failed: %s", exc)
                continue
            for port in missing:
                got = found.get(port)
                if got:
                    out[port] = got if isinstance(got, str) else got[0]
        for port in want:
            if port not in out and port in self.last:
                out[port] = self.last[port]
        unknown = [p for p in want if p not in out]
        if unknown:
            raise UnresolvedNextHop(unknown)
        self.last.update(out)
        return out


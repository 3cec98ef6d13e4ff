"""The ``fib`` WCMP realization: weighted multipath routes the agent installs over netlink.

This module owns the agent's only direct write to the kernel's FIB, through
pyroute2: for every ``fib`` route of the running config, a multipath route
in the main table whose next hops carry the plan's weights (``rtnh_hops`` =
weight - 1, what ``ip route ... nexthop via G dev P weight W`` sets), with
Loom's own route protocol number and a metric below zebra's, so the kernel
prefers it over BGP's, IS-IS's or OSPF's route for the same prefix while theirs stays
underneath as the fallback: when Loom removes its route, FRR's is used again.
(pyroute2 0.9 has no ``RTM_NEWNEXTHOP`` messages, so the groups are the
routes' own multipath next hops rather than shared nexthop objects.) Routes of
both families: an IPv6 route's next hops are IPv6 gateways (the peer's global
address, or its link-local one), an IPv4 route's may be IPv4 or IPv6 (RFC 8950,
``nexthop via inet6 fe80::.. dev eth1``; kernel 5.2+). A next hop without a
gateway is the caller's to resolve first (:mod:`southbound.device.linklocal`):
here it is a route out of the port alone.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping
from typing import Any

from controller.model.errors import FrrError
from southbound.rendered import FibHop

__all__ = ["LOOM_RT_METRIC", "LOOM_RT_PROTO", "install", "netlink_next_hop"]

MAIN_TABLE = 254
#: Route protocol number of Loom's own (``fib``) routes; ``ip route`` shows it as a number.
LOOM_RT_PROTO = 250
#: Kernel metric of Loom's routes: below zebra's (20 for BGP), so the kernel prefers them.
LOOM_RT_METRIC = 10
#: First nexthop object id the agent owns (well above zebra's ids).
LOOM_NH_BASE = 4_000_000


def netlink_next_hop(prefix: str, hop: FibHop, index: Mapping[str, int]) -> dict[str, Any]:
    """``hop`` as a netlink multipath member: its port, its weight and its gateway: ``gateway`` (RTA_GATEWAY)
    when of the route's family, else ``via`` (RTA_VIA: an IPv4 route over an IPv6 next hop, RFC 8950)."""
    if hop.port not in index:
        raise FrrError(f"fib route {prefix}: no interface {hop.port}")
    nh: dict[str, Any] = {"oif": index[hop.port], "hops": max(0, min(255, hop.weight - 1))}
    if hop.via:
        route6, via6 = ":" in prefix, ":" in hop.via
        if route6 and not via6:
            raise FrrError(f"fib route {prefix}: an IPv6 route cannot have the IPv4 gateway {hop.via} ({hop.port})")
        if route6 == via6:
            nh["gateway"] = hop.via
        else:
            nh["via"] = {"family": socket.AF_INET6, "addr": hop.via}
    return nh


def install(old: Mapping[str, tuple[FibHop, ...]], new: Mapping[str, tuple[FibHop, ...]]) -> list[str]:
    """Make the kernel hold exactly ``new``'s Loom routes (replacing ``old``'s); returns what changed.

    Routes of either family, over gateways of either (an IPv6 gateway of an IPv4 route is RTA_VIA). Every route
    is checked before the first is written (a bad one changes nothing), and each is one netlink ``replace`` of
    its whole group (never half a group)."""
    # lazy: pyroute2 costs 0.4 s to import; only an agent beside a real kernel reads netlink (--dry-frr never)
    from pyroute2 import IPRoute
    from pyroute2.netlink.exceptions import NetlinkError  # lazy: pyroute2, as above

    changed: list[str] = []
    with IPRoute() as ipr:
        index = {str(link.get_attr("IFLA_IFNAME")): int(link["index"]) for link in ipr.get_links()}
        groups = {prefix: [netlink_next_hop(prefix, h, index) for h in hops] for prefix, hops in sorted(new.items())}
        for prefix, multipath in groups.items():
            try:
                ipr.route("replace", dst=prefix, multipath=multipath, proto=LOOM_RT_PROTO,
                          priority=LOOM_RT_METRIC, table=MAIN_TABLE)
            except NetlinkError as exc:
                raise FrrError(f"fib route {prefix}: netlink error {exc}") from exc
            if old.get(prefix) != new[prefix]:
                changed.append(prefix)
        for prefix in sorted(set(old) - set(new)):
            try:
                ipr.route("del", dst=prefix, proto=LOOM_RT_PROTO, priority=LOOM_RT_METRIC, table=MAIN_TABLE)
            except NetlinkError as exc:
                if exc.code != 3:  # ESRCH: already gone
                    raise FrrError(f"fib route {prefix}: netlink error {exc}") from exc
            changed.append(prefix)
    return changed

"""zebra's kernel nexthop groups put back together after a port comes up (FRR 8.4).

zebra installs a multipath route as a kernel nexthop group (``ip nexthop``): one object per next hop, and a
group object of them with their weights that the route points at (``nhid``). When a port goes down the kernel
deletes the next hops over it, and with them their places in every group. When the port comes up, FRR 8.4's
zebra installs those next hops again but not their places in the groups, while it still lists them as installed
(``show ip route json``: ``installedNexthopGroupId``, each next hop ``fib``): the route forwards over the
surviving ports only, for good, and a drift repair cannot help (zebra sees nothing to change). Measured on the
chaos lab: a link set down for 2.5 s and up again stayed out of its WCMP groups on both ends.

:func:`group_fixes` compares the groups the kernel holds with those zebra says it installed, and for a group
the kernel holds a strict subset of (by next hop), gives zebra's members with zebra's weights: what zebra
believes the kernel holds, which the agent then writes (``ip nexthop replace id G group A,W/B,W``). It fixes
only what the kernel lost, never a group zebra is changing in another way, and never a next hop the kernel
does not hold again yet (the next look, a second later, finds it).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["group_argument", "group_fixes"]

Members = tuple[tuple[int, int], ...]  # (next hop object id, weight), by id


def _singles(nexthops: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], int]:
    """zebra's single next hop objects by (gateway, port); a port-only one has gateway ""."""
    return {(str(n.get("gateway", "")), str(n["dev"])): int(n["id"]) for n in nexthops
            if "group" not in n and "dev" in n and n.get("protocol") == "zebra"}


def _wanted(entry: Mapping[str, Any], singles: dict[tuple[str, str], int]) -> Members | None:
    """The members zebra says it installed for one route (None when one is not a kernel object again yet)."""
    out = []
    for hop in entry.get("nexthops") or ():
        if not hop.get("fib"):
            continue
        nid = singles.get((str(hop.get("ip", "")), str(hop.get("interfaceName", ""))))
        if nid is None:
            return None
        out.append((nid, int(hop.get("weight") or 1)))
    return tuple(sorted(out))


def group_fixes(nexthops: Iterable[Mapping[str, Any]], zebra_routes: Mapping[str, Iterable[Mapping[str, Any]]]
                ) -> dict[int, Members]:
    """Per kernel group (``ip -j nexthop show``) that holds a strict subset of the next hops zebra installed in
    it (``show ip route json``, ``show ipv6 route json``, merged), the members zebra installed."""
    nexthops = list(nexthops)
    groups = {int(n["id"]): tuple(sorted((int(m["id"]), int(m.get("weight") or 1)) for m in n["group"]))
              for n in nexthops if "group" in n and n.get("protocol") == "zebra"}
    singles = _singles(nexthops)
    fixes: dict[int, Members] = {}
    for entries in zebra_routes.values():
        for entry in entries:
            gid = entry.get("installedNexthopGroupId")
            if not (entry.get("selected") and entry.get("installed")) or gid not in groups or gid in fixes:
                continue
            want = _wanted(entry, singles)
            have = groups[gid]
            if want and {i for i, _ in have} < {i for i, _ in want}:
                fixes[gid] = want
    return fixes


def group_argument(members: Members) -> str:
    """``ip nexthop replace id G group ...``'s members: ``A,W/B,W``."""
    return "/".join(f"{i},{w}" for i, w in members)

"""zebra's kernel nexthop groups put back together after a port comes up (southbound.device.nhgroups).

The samples are what a clos3-small leaf showed (``ip -j nexthop show``, ``show ip route json``) after its eth3
was set down for 2.5 s and up again, with no controller running: group 32 had lost next hop 34 (over eth3),
which the kernel held again, while zebra listed both as installed.
"""

from __future__ import annotations

from typing import Any

from southbound.device.nhgroups import group_argument, group_fixes

NEXTHOPS: list[dict[str, Any]] = [
    {"id": 8, "dev": "eth1", "scope": "link", "protocol": "zebra", "flags": []},
    {"id": 26, "group": [{"id": 27}], "protocol": "zebra", "flags": []},
    {"id": 27, "gateway": "100.70.77.205", "dev": "eth4", "scope": "link", "protocol": "zebra", "flags": []},
    {"id": 32, "group": [{"id": 33, "weight": 50}], "protocol": "zebra", "flags": []},
    {"id": 33, "gateway": "100.70.77.205", "dev": "eth4", "scope": "link", "protocol": "zebra", "flags": []},
    {"id": 34, "gateway": "100.78.219.231", "dev": "eth3", "scope": "link", "protocol": "zebra", "flags": []},
]


def route(gid: int, *hops: tuple[str, str, int], installed: bool = True) -> dict[str, Any]:
    return {"prefix": "10.0.0.0/24", "protocol": "bgp", "selected": True, "installed": installed,
            "nexthopGroupId": gid, "installedNexthopGroupId": gid,
            "nexthops": [{"fib": True, "ip": ip, "afi": "ipv4", "interfaceName": dev, "active": True,
                          "weight": w} for ip, dev, w in hops]}


BOTH = route(32, ("100.70.77.205", "eth4", 50), ("100.78.219.231", "eth3", 50))


def test_a_group_that_lost_a_member_zebra_installed_gets_it_back_with_zebras_weights() -> None:
    fixes = group_fixes(NEXTHOPS, {"10.0.0.0/24": [BOTH], "10.0.1.0/24": [{**BOTH, "prefix": "10.0.1.0/24"}]})
    assert fixes == {32: ((33, 50), (34, 50))}  # once per group, whatever number of routes use it
    assert group_argument(fixes[32]) == "33,50/34,50"


def test_nothing_is_touched_unless_the_kernel_holds_a_strict_subset_of_what_zebra_installed() -> None:
    whole = [*NEXTHOPS[:3], {"id": 32, "group": [{"id": 33, "weight": 50}, {"id": 34, "weight": 50}],
                             "protocol": "zebra", "flags": []}, *NEXTHOPS[4:]]
    assert group_fixes(whole, {"p": [BOTH]}) == {}  # already whole
    other = route(32, ("100.78.219.231", "eth3", 100))  # zebra moving the group elsewhere: its business
    assert group_fixes(NEXTHOPS, {"p": [other]}) == {}
    assert group_fixes(NEXTHOPS, {"p": [route(32, ("100.70.77.205", "eth4", 50))]}) == {}
    not_back = [n for n in NEXTHOPS if n["id"] != 34]  # the next hop is not a kernel object again yet
    assert group_fixes(not_back, {"p": [BOTH]}) == {}
    assert group_fixes(NEXTHOPS, {"p": [{**BOTH, "installed": False}]}) == {}
    unused = {**BOTH, "nexthops": [*BOTH["nexthops"][:1], {**BOTH["nexthops"][1], "fib": False}]}
    assert group_fixes(NEXTHOPS, {"p": [unused]}) == {}  # zebra did not install it either

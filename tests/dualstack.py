"""What the dual-stack lab tests (#36) hold a lab to: every router's kernel, both families, against a plan
document, and every host reaching every other over IPv4 and IPv6.

:func:`kernel` reads a node's IPv4 and IPv6 routes the way the agent reads them back
(:func:`southbound.device.frr_apply.kernel_route_from_ip_json`); :func:`mismatches` compares them with a
plan document's next hops and weights as the realization rounds them (:func:`southbound.wcmp.expected_weights`,
one unit of FRR's link-bandwidth rounding); :func:`unreachable` pings across hosts from ``loom lab hosts``.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Mapping
from typing import Any

from controller.model.plan import NextHop
from labs import runner
from southbound.device.frr_apply import kernel_route_from_ip_json
from southbound.wcmp import expected_weights

__all__ = ["kernel", "mismatches", "ping", "unreachable", "until"]


def kernel(lab: str, node: str) -> dict[str, dict[str, int]]:
    """prefix -> port -> weight of what ``node``'s kernel forwards on, both families (lowest metric)."""
    best: dict[str, tuple[int, dict[str, int]]] = {}
    for version in (4, 6):
        for r in runner.node_routes(lab, node, version):
            route = kernel_route_from_ip_json(r)
            if route is None:
                continue
            metric = int(r.get("metric", 0) or 0)
            if route.prefix not in best or metric < best[route.prefix][0]:
                best[route.prefix] = (metric, route.weights())
    return {p: w for p, (_m, w) in best.items()}


def mismatches(lab: str, plan: Mapping[str, Any], realization: str) -> list[str]:
    """Where some router's kernel differs from ``plan`` (a plan document): a planned prefix of either family
    without its route, over other ports, or with other weights than ``realization`` gives them (FRR's
    link-bandwidth rounding: one unit)."""
    out = []
    tol = 1 if realization == "link-bandwidth" else 0
    for node, dp in sorted(plan["devices"].items()):
        got = kernel(lab, node)
        for prefix, gid in sorted(dp["routes"].items()):
            want = expected_weights([NextHop(h["port"], h["neighbor"], h["weight"]) for h in dp["groups"][gid]],
                                    realization, True)
            have = got.get(prefix)
            if have is None or set(have) != set(want) or any(abs(have[p] - want[p]) > tol for p in want):
                out.append(f"{node} {prefix}: kernel {have}, plan {want}")
    return out


def until(check: Callable[[], Any], timeout: float, what: str, detail: Callable[[], Any] | None = None) -> Any:
    """``check()`` once it is truthy, polled every half second; an AssertionError naming ``what`` (and
    ``detail()``) after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} within {timeout:.0f} s" + (f": {detail()}" if detail else ""))
        time.sleep(0.5)


def ping(netns: str, address: str) -> bool:
    return subprocess.run(["ip", "netns", "exec", netns, "ping", "-c", "2", "-i", "0.2", "-W", "1", address],
                          capture_output=True, timeout=15).returncode == 0


def unreachable(hosts: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The host pairs of ``hosts`` (``loom lab hosts --json``) that cannot reach each other, per family."""
    bad = []
    for a, ha in sorted(hosts.items()):
        for b, hb in sorted(hosts.items()):
            if a == b:
                continue
            for key in ("address", "address6"):
                if hb.get(key) and not ping(ha["netns"], hb[key]):
                    bad.append(f"{a} -> {b} {hb[key]}")
    return bad

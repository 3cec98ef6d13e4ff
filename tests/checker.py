"""An independent checker of forwarding plans, written apart from the solver.

It owns the tests' oracle for every solver test: given an intent and a
:class:`~controller.model.plan.Plan` (the only thing imported from ``solver``), it
propagates every demand hop by hop with its own longest-prefix match over each
device's routes and locally originated prefixes, splitting traffic by the
integer weights, and verifies: every demand is delivered (no black hole), no
forwarding loop, every group's weights are positive integers within the
device's budget and name real links, identical groups are merged, drained
devices and links carry no transit, and the plan's per-link loads, utilization
and summary agree with what the propagation finds.
"""

from __future__ import annotations

import ipaddress
from collections import defaultdict
from dataclasses import dataclass, field

from controller.model import Intent
from controller.model.plan import Plan

__all__ = ["CheckReport", "assert_plan_ok", "check_plan"]


@dataclass
class CheckReport:
    problems: list[str] = field(default_factory=list)
    loads: dict[tuple[str, str], float] = field(default_factory=dict)  # (device:port end, direction "ab"/"ba")
    max_utilization: float = 0.0
    delivered_gbps: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.problems


class _Lpm:
    """Longest-prefix match over (network int, length) -> value."""

    def __init__(self) -> None:
        self.by_len: dict[int, dict[int, object]] = defaultdict(dict)

    def add(self, prefix: str, value: object) -> None:
        net = ipaddress.IPv4Network(prefix)
        self.by_len[net.prefixlen][int(net.network_address)] = value

    def lookup(self, addr: int) -> object | None:
        for length in sorted(self.by_len, reverse=True):
            key = (addr >> (32 - length)) << (32 - length) if length else 0
            hit = self.by_len[length].get(key)
            if hit is not None:
                return hit
        return None


_LOCAL = "local"


def check_plan(intent: Intent, plan: Plan, *, rel_tol: float = 1e-5, abs_tol: float = 1e-5,
               link_bandwidth_budget: int | None = None) -> CheckReport:
    """Replay ``plan`` against ``intent``'s demands and list every problem found.

    ``link_bandwidth_budget``: an extra cap on group weight sums (100 for BGP
    link-bandwidth realization), on top of each device's ``max_ecmp_entries``.
    """
    rep = CheckReport()
    devices = {d.name: d for d in intent.devices}
    ends: dict[tuple[str, str], tuple[str, int, str]] = {}  # (device, port) -> (neighbor, link index, direction)
    for i, link in enumerate(intent.links):
        ends[(link.a, link.a_port)] = (link.b, i, "ab")
        ends[(link.b, link.b_port)] = (link.a, i, "ba")
    drained_dev = {p.target for p in intent.policies if p.kind == "drain" and ":" not in p.target}
    drained_link_idx = set()
    for p in intent.policies:
        if p.kind == "drain" and ":" in p.target:
            dev, _, port = p.target.partition(":")
            if (dev, port) in ends:
                drained_link_idx.add(ends[(dev, port)][1])

    # 1. groups and routes are well formed
    tables: dict[str, _Lpm] = {}
    for name in devices:
        tables[name] = _Lpm()
    for p in intent.prefixes:
        for o in p.origins:
            tables[o].add(p.prefix, _LOCAL)
    n_groups = n_routes = 0
    for name, dp in plan.devices.items():
        if name not in devices:
            rep.problems.append(f"plan names unknown device {name}")
            continue
        budget = intent.max_ecmp_entries(name)
        if link_bandwidth_budget is not None:
            budget = min(budget, link_bandwidth_budget)
        seen: dict[tuple[tuple[str, str, int], ...], str] = {}
        for gid, hops in dp.groups.items():
            n_groups += 1
            if not hops:
                rep.problems.append(f"{name} group {gid} is empty")
            total = 0
            for h in hops:
                if not isinstance(h.weight, int) or h.weight < 1:
                    rep.problems.append(f"{name} group {gid}: weight {h.weight!r} is not a positive integer")
                total += h.weight
                nb = ends.get((name, h.port))
                if nb is None or nb[0] != h.neighbor:
                    rep.problems.append(f"{name} group {gid}: no link {name}:{h.port} to {h.neighbor}")
            if total > budget:
                rep.problems.append(f"{name} group {gid}: weights sum to {total} > budget {budget}")
            if len({h.port for h in hops}) != len(hops):
                rep.problems.append(f"{name} group {gid}: a port appears twice")
            key = tuple(sorted((h.port, h.neighbor, h.weight) for h in hops))
            if key in seen:
                rep.problems.append(f"{name}: groups {seen[key]} and {gid} are identical")
            seen[key] = gid
        for prefix, gid in dp.routes.items():
            n_routes += 1
            if gid not in dp.groups:
                rep.problems.append(f"{name} route {prefix} points at missing group {gid}")
                continue
            tables[name].add(prefix, gid)
    if n_groups != plan.summary.groups:
        rep.problems.append(f"summary.groups {plan.summary.groups} != {n_groups}")
    if n_routes != plan.summary.routes:
        rep.problems.append(f"summary.routes {plan.summary.routes} != {n_routes}")

    # 2. propagate every demand, grouped by destination address
    load = [[0.0, 0.0] for _ in intent.links]
    by_addr: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for d in intent.demands:
        if d.gbps > 0:
            by_addr[int(ipaddress.IPv4Network(d.to).network_address)][d.from_] += d.gbps
    for addr, sources in by_addr.items():
        _propagate(addr, sources, plan, tables, ends, drained_dev, drained_link_idx, load, rep)

    # 3. loads agree with the plan
    plan_links = {(x.a, x.a_port, x.b, x.b_port): x for x in plan.links}
    worst = 0.0
    for i, link in enumerate(intent.links):
        ab, ba = load[i]
        util = max(ab, ba) / link.capacity_gbps
        worst = max(worst, util)
        rep.loads[(link.end_a, "ab")] = ab
        rep.loads[(link.end_a, "ba")] = ba
        pl = plan_links.get((link.a, link.a_port, link.b, link.b_port))
        if pl is None:
            rep.problems.append(f"plan has no load entry for link {link.end_a} - {link.end_b}")
            continue
        for claimed, real, what in ((pl.gbps_ab, ab, "gbps_ab"), (pl.gbps_ba, ba, "gbps_ba"),
                                    (pl.utilization, util, "utilization")):
            if abs(claimed - real) > abs_tol + rel_tol * abs(real):
                rep.problems.append(f"link {link.end_a} - {link.end_b}: plan says {what}={claimed}, replay {real}")
    rep.max_utilization = worst
    if abs(plan.summary.max_utilization - worst) > abs_tol + rel_tol * worst:
        rep.problems.append(f"summary.max_utilization {plan.summary.max_utilization} != replay {worst}")
    return rep


def _propagate(addr: int, sources: dict[str, float], plan: Plan, tables: dict[str, _Lpm],
               ends: dict[tuple[str, str], tuple[str, int, str]], drained_dev: set[str], drained_links: set[int],
               load: list[list[float]], rep: CheckReport) -> None:
    dest = str(ipaddress.IPv4Address(addr))
    # the forwarding graph reachable from the sources
    succ: dict[str, list[tuple[str, float, int, int]]] = {}  # dev -> (neighbor, share, link, 0/1 direction)
    stack = list(sources)
    while stack:
        v = stack.pop()
        if v in succ:
            continue
        hit = tables[v].lookup(addr)
        if hit is None or hit == _LOCAL:
            succ[v] = []
            continue
        hops = plan.devices[v].groups[str(hit)]
        total = sum(h.weight for h in hops)
        out = []
        for h in hops:
            nb, li, direction = ends[(v, h.port)]
            out.append((nb, h.weight / total, li, 0 if direction == "ab" else 1))
            stack.append(nb)
        succ[v] = out
    # loop check and topological order (iterative DFS)
    order: list[str] = []
    state: dict[str, int] = {}
    for root in succ:
        if state.get(root):
            continue
        work = [(root, 0)]
        while work:
            v, i = work.pop()
            if i == 0:
                if state.get(v) == 2:
                    continue
                state[v] = 1
            nbrs = succ[v]
            if i < len(nbrs):
                work.append((v, i + 1))
                w = nbrs[i][0]
                if state.get(w) == 1:
                    rep.problems.append(f"forwarding loop toward {dest} through {v} -> {w}")
                    return
                if not state.get(w):
                    work.append((w, 0))
            else:
                state[v] = 2
                order.append(v)
    order.reverse()
    amount: dict[str, float] = defaultdict(float)
    transit: dict[str, float] = defaultdict(float)
    for s, g in sources.items():
        amount[s] += g
    for v in order:
        x = amount.get(v, 0.0)
        if x <= 0:
            continue
        hit = tables[v].lookup(addr)
        if hit == _LOCAL:
            rep.delivered_gbps += x
            continue
        if hit is None:
            rep.problems.append(f"black hole: {x:.6g} gbps toward {dest} dropped at {v} (no route)")
            continue
        if v in drained_dev and transit.get(v, 0.0) > 1e-9:
            rep.problems.append(f"drained device {v} carries {transit[v]:.6g} gbps of transit toward {dest}")
        for nb, share, li, direction in succ[v]:
            f = x * share
            load[li][direction] += f
            if li in drained_links and f > 1e-9:
                rep.problems.append(f"drained link #{li} carries {f:.6g} gbps toward {dest}")
            amount[nb] += f
            transit[nb] += f


def assert_plan_ok(intent: Intent, plan: Plan, **kw: object) -> CheckReport:
    """:func:`check_plan`, failing with every problem listed."""
    rep = check_plan(intent, plan, **kw)  # type: ignore[arg-type]
    assert rep.ok, "plan rejected by the independent checker:\n  " + "\n  ".join(rep.problems[:30])
    return rep

"""WCMP on FRR: what a plan's weights become in a switch's kernel, and whether they did.

This module owns the arithmetic of the two WCMP realizations (DESIGN.md,
"Southbound") and nothing that does I/O. ``link-bandwidth``: the next hop M
of device N attaches the plan's weight as the BGP link-bandwidth extended
community toward N, and FRR 8.4 sets N's kernel weights to
``floor(100 * bw / sum)``, at least 1 (:func:`frr_weights`), so the budget on
such devices is 100 (:func:`weight_budget`). ``fib``: the agent installs the
plan's weights as they are. :func:`compare` holds a device's kernel routes
(read back by ``GetState``) against its plan, within the realization's
rounding; the transaction verifies every commit with it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from controller.model import Intent, WcmpRealization
from controller.model.plan import DevicePlan, NextHop
from southbound.state import DeviceState

__all__ = ["LINK_BANDWIDTH_BUDGET", "compare", "expected_weights", "frr_weights", "weight_budget"]

#: FRR spreads link bandwidths over 100 kernel weight units.
LINK_BANDWIDTH_BUDGET = 100


def frr_weights(bandwidths: Sequence[int]) -> list[int]:
    """FRR 8.4's kernel weights for next hops with these link bandwidths: ``floor(100*bw/sum)``, at least 1.

    >>> frr_weights([3, 2])
    [60, 40]
    >>> frr_weights([1, 1, 1])
    [33, 33, 33]
    >>> frr_weights([1, 200])
    [1, 99]
    """
    total = sum(bandwidths)
    if total <= 0:
        return [1 for _ in bandwidths]
    return [max(1, (LINK_BANDWIDTH_BUDGET * bw) // total) for bw in bandwidths]


def weight_budget(intent: Intent, device: str) -> int:
    """The weight budget the solver should use for ``device``: at most 100 under ``link-bandwidth``."""
    budget = intent.max_ecmp_entries(device)
    if intent.wcmp_enabled and intent.wcmp_realization == WcmpRealization.LINK_BANDWIDTH:
        return min(budget, LINK_BANDWIDTH_BUDGET)
    return budget


def expected_weights(hops: Iterable[NextHop], realization: str, wcmp: bool = True) -> dict[str, int]:
    """Kernel weight per port the plan's ``hops`` should produce under ``realization``.

    >>> from controller.model.plan import NextHop
    >>> expected_weights([NextHop("eth1", "a", 4), NextHop("eth2", "b", 1)], "link-bandwidth")
    {'eth1': 80, 'eth2': 20}
    """
    hops = list(hops)
    if not wcmp or len(hops) == 1:  # a single path carries no weight in the kernel
        return {h.port: 1 for h in hops}
    if realization == WcmpRealization.LINK_BANDWIDTH.value:
        return dict(zip((h.port for h in hops), frr_weights([h.weight for h in hops]), strict=True))
    return {h.port: h.weight for h in hops}


def _tolerance(realization: str, wcmp: bool) -> int:
    # link-bandwidth: FRR's floor can move a weight by one unit; ECMP and fib: exact.
    return 1 if wcmp and realization == WcmpRealization.LINK_BANDWIDTH.value else 0


def compare(plan: DevicePlan, state: DeviceState, *, realization: str, wcmp: bool = True,
            fabric_prefixes: Iterable[str] = (), originated: Iterable[str] = ()) -> list[str]:
    """Differences between a device's plan and what its kernel installed ("" list: they agree).

    Every planned prefix must have a route over exactly the planned ports with the
    expected weights (within one unit for ``link-bandwidth``); a fabric prefix the
    plan withdraws here (and the device does not originate) must have no route.
    """
    problems: list[str] = []
    routes: Mapping[str, object] = state.routes
    for prefix, gid in sorted(plan.routes.items()):
        want = expected_weights(plan.groups[gid], realization, wcmp)
        route = state.routes.get(prefix)
        if route is None:
            problems.append(f"{prefix}: no route installed (plan: {_fmt(want)})")
            continue
        got = route.weights()
        if set(got) != set(want):
            problems.append(f"{prefix}: next hops {_fmt(got)}, plan {_fmt(want)}")
            continue
        tol = _tolerance(realization, wcmp)
        if not wcmp and len(set(got.values())) > 1:
            problems.append(f"{prefix}: weights {_fmt(got)}, plan is plain ECMP")
        elif wcmp and len(route.nexthops) > len(got):  # two sessions over a link (a bridged session move)
            if not _same_shares(got, want, len(route.nexthops)):
                problems.append(f"{prefix}: weights {_fmt(got)}, plan {_fmt(want)} (as shares)")
        elif wcmp and any(abs(got[p] - want[p]) > tol for p in want):
            problems.append(f"{prefix}: weights {_fmt(got)}, plan {_fmt(want)}")
    local = set(originated)
    for prefix in sorted(set(fabric_prefixes) - set(plan.routes) - local):
        if prefix in routes:
            problems.append(f"{prefix}: route installed, plan withdraws it here")
    return problems


def _same_shares(got: Mapping[str, int], want: Mapping[str, int], paths: int) -> bool:
    """Whether each port's share of the weights is the plan's, where some port has several next hops (a link
    with two BGP sessions while a change moves them, each path weighed by FRR's floor: a port's sum may be
    off by one unit per path of the route)."""
    tg, tw = sum(got.values()), sum(want.values())
    return all(abs(got[p] / tg - want[p] / tw) <= paths / tg + 1 / tw for p in want)


def _fmt(weights: Mapping[str, int]) -> str:
    return " ".join(f"{p}:{w}" for p, w in sorted(weights.items()))

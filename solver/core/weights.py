"""Integer WCMP weights: split ratios to positive integers within a group budget.

This module owns the weight-reduction step of "WCMP: Weighted Cost
Multipathing for Improving Fairness in Data Centers" (Zhou et al., EuroSys
2014): given a next-hop group's ideal split ratios and the hardware budget
(the largest sum of weights a group may have), choose integer weights >= 1
whose sum fits the budget and that minimize the worst *oversubscription* of
any next hop, ``max_i (w_i / W) / r_i`` over the members with ``r_i > 0``.

The search is exact: for every total ``W`` from the group size to the budget,
the best weights with that total are found by water-filling (start every
member at ``max(1, floor(W * r_i))``, or at 1 if that overshoots ``W``, then give each remaining unit to the
member whose oversubscription grows least), which is optimal for a fixed
total; the best total wins, ties going to the smaller total.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from controller.model import Intent, WcmpRealization

__all__ = ["LINK_BANDWIDTH_BUDGET", "cached_reducer", "device_budget", "oversubscription", "reduce_weights"]

#: FRR scales BGP link-bandwidths to kernel weights out of 100: the largest group sum it can express
LINK_BANDWIDTH_BUDGET = 100


def device_budget(intent: Intent, device: str) -> int:
    """The largest weight sum of a group on ``device``: its ``max_ecmp_entries``, and at most
    :data:`LINK_BANDWIDTH_BUDGET` under the link-bandwidth realization."""
    b = intent.max_ecmp_entries(device)
    return min(b, LINK_BANDWIDTH_BUDGET) if intent.wcmp_realization == WcmpRealization.LINK_BANDWIDTH else b


def oversubscription(weights: Sequence[int] | np.ndarray, ratios: Sequence[float] | np.ndarray) -> float:
    """``max_i (w_i / W) / r_i`` over members with a positive ratio (1.0 is perfect)."""
    w = np.asarray(weights, dtype=np.float64)
    r = np.asarray(ratios, dtype=np.float64)
    r = r / r.sum()
    pos = r > 0
    return float(np.max((w[pos] / w.sum()) / r[pos]))


def _fill(base: np.ndarray, left: np.ndarray, r: np.ndarray) -> np.ndarray:
    """Add ``left[row]`` units to each row of ``base``, each to the member whose ``(w+1)/r`` is least."""
    k_max = int(left.max(initial=0))
    if k_max == 0:
        return base
    n = base.shape[1]
    ks = np.arange(1, k_max + 1)
    inc = (base[:, :, None] + ks[None, None, :]) / r[None, :, None]  # rows x member x k-th unit
    order = np.argsort(inc.reshape(len(base), n * k_max), axis=1, kind="stable")
    take = np.arange(n * k_max)[None, :] < left[:, None]
    member = order // k_max
    rows = np.broadcast_to(np.arange(len(base))[:, None], member.shape)
    extra = np.zeros_like(base)
    np.add.at(extra, (rows[take], member[take]), 1)
    return base + extra


def _candidates(r: np.ndarray, totals: np.ndarray) -> np.ndarray:
    """For every total in ``totals``, the water-filled weights (rows), all totals at once."""
    w0 = np.maximum(1, np.floor(totals[:, None] * r[None, :])).astype(np.int64)
    out = np.empty_like(w0)
    over = w0.sum(axis=1) > totals  # the floor of 1 lifted members: water-fill from all ones
    for rows, base in ((np.flatnonzero(~over), None), (np.flatnonzero(over), 1)):
        if rows.size:
            start = w0[rows] if base is None else np.ones_like(w0[rows])
            out[rows] = _fill(start, totals[rows] - start.sum(axis=1), r)
    return out


def reduce_weights(ratios: Sequence[float] | np.ndarray, budget: int) -> list[int]:
    """Positive integer weights for ``ratios`` with sum at most ``budget``.

    Parameters
    ----------
    ratios : the ideal split (non-negative; normalized here; at least one positive).
    budget : the device's ``max_ecmp_entries``; must be at least ``len(ratios)``.

    Returns
    -------
    Weights ``w_i >= 1`` with ``sum(w) <= budget`` minimizing
    ``max_i (w_i/W)/r_i`` (EuroSys 2014). A member with ratio 0 stays in the
    group with weight 1; then the positive members' weights (total ``W``)
    minimize ``max_i (w_i/W)/r_i + z/(W+z)`` for ``z`` such members, the second
    term being the share they leak.

    Raises
    ------
    ValueError : fewer budget entries than members, or no positive ratio.

    Example
    -------
    >>> reduce_weights([0.5, 0.25, 0.25], 8)
    [2, 1, 1]
    >>> reduce_weights([2/3, 1/3], 64)
    [2, 1]
    >>> reduce_weights([0.0, 1.0], 10)
    [1, 9]
    """
    r = np.asarray(ratios, dtype=np.float64)
    n = len(r)
    if n == 0:
        return []
    if budget < n:
        raise ValueError(f"a group of {n} next hops needs a budget of at least {n}, got {budget}")
    if (r < 0).any() or not np.isfinite(r).all() or r.sum() <= 0:
        raise ValueError(f"ratios must be finite, non-negative, with a positive sum: {list(ratios)}")
    r = r / r.sum()
    if n == 1:
        return [1]
    pos = r > 0
    zeros = n - int(pos.sum())
    rp = r[pos]
    totals = np.arange(len(rp), budget - zeros + 1)
    if not totals.size:
        raise ValueError(f"a budget of {budget} leaves no room for {len(rp)} weighted members")
    cands = _candidates(rp, totals)
    # the paper's objective; with zero-ratio members (weight 1 each) add the share
    # they leak, so larger totals are preferred when they dilute it
    vals = np.max(cands / totals[:, None] / rp[None, :], axis=1) + zeros / (totals + zeros)
    best = cands[int(np.flatnonzero(vals <= vals.min() + 1e-12)[0])]
    out = np.ones(n, dtype=np.int64)
    out[pos] = best
    return [int(x) for x in out]


def cached_reducer() -> Callable[[np.ndarray, int], tuple[int, ...]]:
    """:func:`reduce_weights` of a split within a budget (at least one weight per member), remembered by the
    split (to 9 decimals) and the budget: a plan rounds the same split for many groups."""
    cache: dict[tuple[tuple[float, ...], int], tuple[int, ...]] = {}

    def reduce(r: np.ndarray, budget: int) -> tuple[int, ...]:
        key = (tuple(np.round(r, 9).tolist()), budget)
        hit = cache.get(key)
        if hit is None:
            hit = cache[key] = tuple(reduce_weights(r, max(budget, len(r))))
        return hit

    return reduce

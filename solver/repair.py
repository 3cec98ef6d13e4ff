"""Load-aware repair of rounded leaf weights in a clean Clos.

This module owns one small step after weight reduction. Rounding each group
to the WCMP paper's optimum (least worst oversubscription) is blind to which
links are hot; errors of many groups can add up on the same leaf-spine link.
The repair looks at the hottest arc and, among the leaf groups that send over
it, moves single weight units to another member of the same group when that
lowers the maximum utilization over every arc the move touches. Sums stay
equal (the budget holds), every weight stays >= 1, and each move strictly
lowers the hottest utilization among the arcs it changes, so the repair stops.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from solver.clos import PodModel

__all__ = ["repair_leaf_weights"]

_Members = tuple[tuple[int, int], ...]


def repair_leaf_weights(m: PodModel, leaf_w: dict[tuple[int, int], _Members], x: np.ndarray,
                        *, max_moves: int = 5000) -> tuple[dict[tuple[int, int], _Members], np.ndarray, int]:
    """Move weight units between members of leaf groups while that lowers the MLU.

    Returns the updated leaf groups, variables and the number of moves made.
    """
    fab = m.fab
    head = fab.arc_head
    cap = fab.arc_cap
    loads = m.loads(x)
    groups: dict[tuple[int, int], dict[str, object]] = {}
    by_arc: dict[int, list[tuple[tuple[int, int], int]]] = defaultdict(list)
    for (leaf, p), members in leaf_w.items():
        q, lp = m.leaf_pp[leaf]
        ac = m.a_col.get((q, p, lp))
        if ac is None or x[ac] <= 0 or len(members) < 2:
            continue
        arcs = [a for a, _w in members]
        cols = [m.g_col[(q, p, lp, a)] for a in arcs]
        downs = [m.spine_down[(int(head[a]), p)] for a in arcs]
        groups[(leaf, p)] = {"arcs": arcs, "cols": cols, "downs": downs, "w": [w for _a, w in members],
                             "a": float(x[ac])}
        for i, (up, down) in enumerate(zip(arcs, downs, strict=True)):
            by_arc[up].append(((leaf, p), i))
            by_arc[down].append(((leaf, p), i))
    moves = 0
    while moves < max_moves:
        util = loads / cap
        hot = int(np.argmax(util))
        if hot not in by_arc:
            break  # the hottest arc is not a leaf-spine arc: leaf weights cannot relieve it
        mlu = float(util[hot])
        best: tuple[float, tuple[int, int], int, int] | None = None
        for key, i in by_arc[hot]:
            g = groups[key]
            w: list[int] = g["w"]  # type: ignore[assignment]
            if w[i] < 2:
                continue
            unit = g["a"] / sum(w)  # type: ignore[operator]
            ups: list[int] = g["arcs"]  # type: ignore[assignment]
            downs: list[int] = g["downs"]  # type: ignore[assignment]
            for j in range(len(w)):
                if j == i:
                    continue
                after = max((loads[ups[i]] - unit) / cap[ups[i]], (loads[downs[i]] - unit) / cap[downs[i]],
                            (loads[ups[j]] + unit) / cap[ups[j]], (loads[downs[j]] + unit) / cap[downs[j]])
                if after < mlu - 1e-12 and (best is None or after < best[0]):
                    best = (after, key, i, j)
        if best is None:
            break  # no single unit move lowers the maximum: a local optimum
        _after, key, i, j = best
        g = groups[key]
        w = g["w"]  # type: ignore[assignment]
        unit = g["a"] / sum(w)  # type: ignore[operator]
        w[i] -= 1
        w[j] += 1
        cols: list[int] = g["cols"]  # type: ignore[assignment]
        x[cols[i]] -= unit
        x[cols[j]] += unit
        for arc, d in ((g["arcs"][i], -unit), (g["downs"][i], -unit),  # type: ignore[index]
                       (g["arcs"][j], unit), (g["downs"][j], unit)):  # type: ignore[index]
            loads[arc] += d
        moves += 1
    out = dict(leaf_w)
    for key, g in groups.items():
        out[key] = tuple(zip(g["arcs"], g["w"], strict=True))  # type: ignore[call-overload]
    return out, x, moves

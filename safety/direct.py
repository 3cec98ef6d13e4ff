"""One scenario of a plan made around it, replayed without building a replayer.

A failure reaction is judged by replaying its plan under the failure it was made
for (:func:`controller.operations.reaction.judge`). Its plan drains the failed
parts, so the failure should take nothing away from its traffic; building a
:class:`safety.replay.Replayer` for it (every state and transition of the flow,
indexed for difference pushes: 2 s on Clos L) only to replay that one scenario
spent almost all of the judgement's time.

:func:`replay_scenario` instead pushes the plan's demand once, class by class,
in one compiled loop (:func:`deliver`), leaving out the demand the scenario does
not count (from failed devices, and to prefixes whose origins all failed), and
checks what the failure would take away. When no traffic crosses a failed edge,
the failure changes no device's forwarding of any traffic, in either stage of
any model that keeps the plan's routes where they survive (``withdrawal``,
``static``): a next hop over a failed edge with no traffic on it carries
nothing to renormalize, and a device that would withdraw or fall back receives
nothing. Both stages are then this traffic, and the result is what
:meth:`Replayer.run` gives (the tests compare them). Otherwise, and always under
``routing`` (whose reconverged routes the protocol recomputes on the failed
topology, where they may differ from the plan's even where it avoided the
failed parts), the scenario goes to a :class:`~safety.replay.Replayer`.
"""

from __future__ import annotations

import numpy as np

from controller.model import Intent
from controller.model.plan import Plan
from safety.forwarding import Table, Topology, build_topology, looped, plan_table
from safety.replay import Replayer, _Outcome, counted, limits, reconverged_as, reconvergence_model, stage_result
from safety.report import ScenarioResult
from safety.scenarios import Scenario
from solver.core.jit import compiled

__all__ = ["deliver", "replay_scenario"]


@compiled(nogil=True)
def _room(arr: np.ndarray, used: int) -> np.ndarray:
    """``arr``, twice as long when it is full."""
    if used < len(arr):
        return arr
    out = np.empty(2 * len(arr), dtype=arr.dtype)
    out[:used] = arr[:used]
    return out


@compiled(nogil=True)
def _walk(c: int, m: int, route: np.ndarray, g_indptr: np.ndarray, g_edge: np.ndarray, g_frac: np.ndarray,
          edge_dst: np.ndarray, origin: np.ndarray, load: np.ndarray, x: np.ndarray, nx: np.ndarray,
          queued: np.ndarray, cur: np.ndarray, nxt: np.ndarray, sunk: np.ndarray, sunk_at: np.ndarray
          ) -> tuple[int, int]:
    """Push class ``c``'s traffic (``x`` at the ``m`` devices ``cur``) hop by hop until it is delivered, black-
    holed (summed into ``sunk`` at the devices ``sunk_at``) or has moved as many hops as there are devices;
    the edges' loads added to ``load``. Returns how many devices still hold traffic (in ``cur``, ``x``) and
    how many black-holed some."""
    n = len(x)
    n_sunk = 0
    level = 0
    while m > 0 and level <= n:
        k = 0
        for j in range(m):
            v = cur[j]
            a = x[v]
            x[v] = 0.0
            queued[v] = False
            if a == 0.0 or origin[v]:
                continue
            g = route[c, v]
            if g < 0:
                if sunk[v] == 0.0:
                    sunk_at[n_sunk] = v
                    n_sunk += 1
                sunk[v] += a
                continue
            for h in range(g_indptr[g], g_indptr[g + 1]):
                part = a * g_frac[h]
                if part == 0.0:
                    continue
                e = g_edge[h]
                load[e] += part
                w = edge_dst[e]
                if nx[w] == 0.0:
                    nxt[k] = w
                    k += 1
                nx[w] += part
        for j in range(k):  # the next hop's arrivals become the frontier
            w = nxt[j]
            x[w] = nx[w]
            nx[w] = 0.0
            queued[w] = True
            cur[j] = w
        m = k
        level += 1
    return m, n_sunk


@compiled(nogil=True)
def deliver(route: np.ndarray, g_indptr: np.ndarray, g_edge: np.ndarray, g_frac: np.ndarray,
            edge_dst: np.ndarray, o_indptr: np.ndarray, o_dev: np.ndarray, d_indptr: np.ndarray,
            d_dev: np.ndarray, d_gbps: np.ndarray, n_edges: int
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Push each class's demand (``d_dev``/``d_gbps`` of class ``c`` at ``d_indptr[c]:d_indptr[c+1]``) through
    ``route`` (class x device -> group, -1 none) hop by hop, every device's arrivals of one hop summed before
    the next, as :func:`safety.forwarding.propagate` does; origins (``o_dev``, CSR by class) deliver.

    Returns the edge loads, the black holes as ``(class, device, gbps)`` arrays and the loops as
    ``(class, device)`` arrays: what still moves after as many hops as there are devices."""
    n_cls, n = route.shape
    load = np.zeros(n_edges)
    x, nx, sunk = np.zeros(n), np.zeros(n), np.zeros(n)
    origin = np.zeros(n, dtype=np.bool_)
    queued = np.zeros(n, dtype=np.bool_)
    cur, nxt, sunk_at = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64)
    drop_c, drop_v, drop_a = np.empty(16, dtype=np.int64), np.empty(16, dtype=np.int64), np.empty(16)
    loop_c, loop_v = np.empty(16, dtype=np.int64), np.empty(16, dtype=np.int64)
    n_drop = n_loop = 0
    for c in range(n_cls):
        if d_indptr[c] == d_indptr[c + 1]:
            continue
        for i in range(o_indptr[c], o_indptr[c + 1]):
            origin[o_dev[i]] = True
        m = 0
        for i in range(d_indptr[c], d_indptr[c + 1]):
            v = d_dev[i]
            if not queued[v]:
                queued[v] = True
                cur[m] = v
                m += 1
            x[v] += d_gbps[i]
        m, n_sunk = _walk(c, m, route, g_indptr, g_edge, g_frac, edge_dst, origin, load, x, nx, queued, cur, nxt,
                          sunk, sunk_at)
        for j in range(n_sunk):
            v = sunk_at[j]
            drop_c, drop_v, drop_a = _room(drop_c, n_drop), _room(drop_v, n_drop), _room(drop_a, n_drop)
            drop_c[n_drop], drop_v[n_drop], drop_a[n_drop] = c, v, sunk[v]
            n_drop += 1
            sunk[v] = 0.0
        for j in range(m):  # still moving after n hops: a loop
            v = cur[j]
            loop_c, loop_v = _room(loop_c, n_loop), _room(loop_v, n_loop)
            loop_c[n_loop], loop_v[n_loop] = c, v
            n_loop += 1
            x[v] = 0.0
            queued[v] = False
        for i in range(o_indptr[c], o_indptr[c + 1]):
            origin[o_dev[i]] = False
    return load, drop_c[:n_drop], drop_v[:n_drop], drop_a[:n_drop], loop_c[:n_loop], loop_v[:n_loop]


def _push(table: Table, topo: Topology) -> tuple[np.ndarray, dict[tuple[int, int], float],
                                                  list[tuple[int, tuple[int, ...]]]]:
    """:func:`deliver` over ``table``: edge loads, black holes by (class, device), loops by class."""
    n_cls = len(table.prefixes)
    o_len = np.array([len(o) for o in table.origins], dtype=np.int64)
    o_indptr = np.zeros(n_cls + 1, dtype=np.int64)
    np.cumsum(o_len, out=o_indptr[1:])
    o_dev = np.array([v for o in table.origins for v in sorted(o)], dtype=np.int64)
    order = np.argsort(table.demand_class, kind="stable")
    d_indptr = np.searchsorted(table.demand_class[order], np.arange(n_cls + 1)).astype(np.int64)
    load, dc, dv, da, lc, lv = deliver(
        np.ascontiguousarray(table.route), table.g_indptr, table.g_edge, table.g_frac, topo.edge_dst, o_indptr,
        o_dev, d_indptr, np.ascontiguousarray(table.demand_device[order], dtype=np.int64),
        np.ascontiguousarray(table.demand_gbps[order], dtype=np.float64), topo.n_edges)
    drops: dict[tuple[int, int], float] = {}
    for c, v, a in zip(dc.tolist(), dv.tolist(), da.tolist(), strict=True):
        drops[(c, v)] = drops.get((c, v), 0.0) + a
    by: dict[int, set[int]] = {}
    for c, v in zip(lc.tolist(), lv.tolist(), strict=True):
        by.setdefault(c, set()).add(v)
    return load, drops, [(c, tuple(sorted(v))) for c, v in sorted(by.items())]


def replay_scenario(intent: Intent, plan: Plan, sc: Scenario, *, topo: Topology | None = None,
                    like: tuple[Plan, Table] | None = None) -> ScenarioResult:
    """``plan`` (of ``intent``) replayed under the one failure scenario ``sc``, as
    ``Replayer(intent, plan).run(sc)`` replays it; pushed directly when no traffic of the plan crosses a
    failed edge (see the module docstring), else by a replayer. ``topo``: the intent's topology when the
    caller has it; ``like``: another plan on it and its table, whose devices this plan shares are not
    compiled again (:func:`~safety.forwarding.plan_table`)."""
    topo = topo if topo is not None else build_topology(intent)
    table = plan_table(intent, plan, topo, like=like)
    model = reconvergence_model(intent)
    if model != "routing" and not sc.is_baseline:
        pushed = counted(table, topo, sc)
        load, drops, loops = _push(pushed, topo)
        if not load[topo.failed_edges(sc.devices, sc.links)].any():
            weighed = looped(pushed, topo, {c for c, _ in loops}) if loops else None
            out = _Outcome({k: a for k, a in drops.items() if a > 0}, loops, load=load, loop_gbps=weighed)
            cap = topo.edge_cap
            order = np.argsort(-(load / cap), kind="stable")
            first = stage_result(topo, table, load, order, np.zeros(topo.n_edges, dtype=bool), "immediate", out,
                                 limits(intent)["failure"], baseline=False)
            return ScenarioResult(sc.name, sc.kind, tuple(sorted(sc.devices)), tuple(sorted(sc.links)), first,
                                  reconverged_as(first))
    return Replayer(intent, plan, model=model, topo=topo, table=table).run(sc)

"""Compiled loops of the safety replay: a scenario's difference push and BGP withdrawal.

A single failure touches a few thousand transitions of a fabric's flow, in a
dozen hops. Written as numpy array passes, each hop is some twenty calls, and on
a Clos of 2,688 devices a scenario spent most of its 2.5 ms in the calls
themselves, not in the arithmetic. These kernels run the same steps as one loop
per hop, compiled by numba (``cache=True``: compiled once per machine, kept in
``__pycache__``). :class:`safety.replay.Replayer` owns the semantics; the
docstrings below only say what each kernel computes on its arrays.

Scratch arrays (``acc``, ``mark``, ``flag``, ``cur``, ``nxt``, ``is_sink``) come
from the caller and are left as they came: zero, false, or unspecified
(``cur``/``nxt``).
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["hottest", "push", "withdraw"]

DEAD_ROW = 1e-9  # a row whose surviving fraction is at most this has no next hop left
_ZERO = 5e-324  # stands for an exact zero in a touched slot of ``delta`` (its zero means untouched)


@njit(cache=True, nogil=True)
def push(x: np.ndarray, frac: np.ndarray, mfrac: np.ndarray, t_indptr: np.ndarray, t_src: np.ndarray,
         t_dst: np.ndarray, t_edge: np.ndarray, class_indptr: np.ndarray, class_states: np.ndarray,
         dead_t: np.ndarray, gone: np.ndarray,
         levels: int, acc: np.ndarray, mark: np.ndarray, flag: np.ndarray, is_sink: np.ndarray,
         cur: np.ndarray, nxt: np.ndarray, delta: np.ndarray, etouch: np.ndarray
         ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The difference flow of killing transitions ``dead_t`` and removing classes ``gone``.

    ``class_indptr``/``class_states``: per class, its states (CSR).
    Returns the edges whose load changes and by how much (``delta``, zeros, and
    ``etouch`` are the scratch of that sum), the states left without a next hop (new black
    holes), the arrivals (states, gbps) at black holes old and new, and the states still
    carrying traffic after ``levels`` hops (a loop; empty if none).
    """
    n_e = 0
    # the classes that are gone: all their traffic leaves
    for i in range(len(gone)):
        c = gone[i]
        for j in range(class_indptr[c], class_indptr[c + 1]):
            s = class_states[j]
            for t in range(t_indptr[s], t_indptr[s + 1]):
                e = t_edge[t]
                if delta[e] == 0.0:
                    etouch[n_e] = e
                    n_e += 1
                delta[e] -= x[s] * frac[t]
                if delta[e] == 0.0:
                    delta[e] = _ZERO
    # rows that lost a next hop: the dead share, per source state
    nch = 0
    for i in range(len(dead_t)):
        t = dead_t[i]
        s = t_src[t]
        if not mark[s]:
            mark[s] = True
            cur[nch] = s
            nch += 1
        acc[s] += frac[t]
        flag[t] = True
    ch = cur[:nch].copy()
    dead_share = np.empty(nch)
    for i in range(nch):
        s = ch[i]
        dead_share[i] = acc[s]
        acc[s] = 0.0
        mark[s] = False
    # renormalize them in ``mfrac`` and push the difference one hop
    sinks = np.empty(nch, dtype=np.int64)
    n_sinks = 0
    n_next = 0
    for i in range(nch):
        s = ch[i]
        alive = 1.0 - dead_share[i]
        dead_row = alive <= DEAD_ROW
        if dead_row:
            sinks[n_sinks] = s
            n_sinks += 1
        scale = 0.0 if dead_row else 1.0 / alive
        xs = x[s]
        for t in range(t_indptr[s], t_indptr[s + 1]):
            old = frac[t]
            new = 0.0 if (dead_row or flag[t]) else old * scale
            mfrac[t] = new
            diff = xs * (new - old)
            e = t_edge[t]
            if delta[e] == 0.0:
                etouch[n_e] = e
                n_e += 1
            delta[e] += diff
            if delta[e] == 0.0:
                delta[e] = _ZERO
            d = t_dst[t]
            if not mark[d]:
                mark[d] = True
                nxt[n_next] = d
                n_next += 1
            acc[d] += diff
    for i in range(len(dead_t)):
        flag[dead_t[i]] = False
    for i in range(n_sinks):
        is_sink[sinks[i]] = True  # a state with a route is never a black hole of the baseline
    arr_s = np.empty(16, dtype=np.int64)
    arr_a = np.empty(16)
    n_arr = 0
    loop_n = 0
    for _level in range(levels + 1):
        # the frontier: states that received a nonzero difference, and how much
        amounts = np.empty(n_next)
        n_cur = 0
        for i in range(n_next):
            s = nxt[i]
            a = acc[s]
            acc[s] = 0.0
            mark[s] = False
            if a != 0.0:
                cur[n_cur] = s
                amounts[n_cur] = a
                n_cur += 1
                if is_sink[s]:
                    if n_arr == len(arr_s):
                        arr_s = np.concatenate((arr_s, np.empty(n_arr, dtype=np.int64)))
                        arr_a = np.concatenate((arr_a, np.empty(n_arr)))
                    arr_s[n_arr] = s
                    arr_a[n_arr] = a
                    n_arr += 1
        n_next = 0
        if n_cur == 0:
            break
        for i in range(n_cur):
            s = cur[i]
            a = amounts[i]
            for t in range(t_indptr[s], t_indptr[s + 1]):
                contrib = a * mfrac[t]
                e = t_edge[t]
                if delta[e] == 0.0:
                    etouch[n_e] = e
                    n_e += 1
                delta[e] += contrib
                if delta[e] == 0.0:
                    delta[e] = _ZERO
                d = t_dst[t]
                if not mark[d]:
                    mark[d] = True
                    nxt[n_next] = d
                    n_next += 1
                acc[d] += contrib
        if n_next == 0:
            break
    else:
        loop_n = n_next
    loop_states = nxt[:loop_n].copy()
    for i in range(n_next):  # leave the scratch clean (only after a loop is anything left)
        acc[nxt[i]] = 0.0
        mark[nxt[i]] = False
    for i in range(n_sinks):
        is_sink[sinks[i]] = False
    for i in range(nch):  # restore the renormalized rows
        s = ch[i]
        for t in range(t_indptr[s], t_indptr[s + 1]):
            mfrac[t] = frac[t]
    edges = etouch[:n_e].copy()
    change = np.empty(n_e)
    for i in range(n_e):
        e = edges[i]
        change[i] = 0.0 if delta[e] == _ZERO else delta[e]
        delta[e] = 0.0
    return edges, change, sinks[:n_sinks].copy(), arr_s[:n_arr].copy(), arr_a[:n_arr].copy(), loop_states


@njit(cache=True, nogil=True)
def withdraw(frac: np.ndarray, t_src: np.ndarray, in_indptr: np.ndarray, in_trans: np.ndarray,
             failed: np.ndarray, dead_t: np.ndarray, rem: np.ndarray, flag: np.ndarray, mark: np.ndarray,
             cur: np.ndarray, nxt: np.ndarray) -> np.ndarray:
    """The transitions that die when ``dead_t`` die and every state left with no next hop
    withdraws its route (its in-transitions die too), to a fixpoint, after ``dead_t``.

    ``rem`` (ones), ``flag`` and ``mark`` (false) are scratch; a state in ``failed`` does
    not withdraw at the first hop (it is down, not withdrawing).
    """
    n_dead = len(dead_t)
    out = np.empty(max(16, 2 * n_dead), dtype=np.int64)
    out[:n_dead] = dead_t
    n_out = n_dead
    touched = np.empty(max(16, n_dead), dtype=np.int64)
    n_touched = 0
    n_cur = 0
    for i in range(n_dead):
        t = dead_t[i]
        flag[t] = True
        s = t_src[t]
        rem[s] -= frac[t]
        if not mark[s]:
            mark[s] = True
            cur[n_cur] = s
            n_cur += 1
    # states that lost every next hop
    n_w = 0
    for i in range(n_cur):
        s = cur[i]
        mark[s] = False
        if n_touched == len(touched):
            touched = np.concatenate((touched, np.empty(n_touched, dtype=np.int64)))
        touched[n_touched] = s
        n_touched += 1
        if rem[s] <= DEAD_ROW and not failed[s]:
            cur[n_w] = s
            n_w += 1
    while n_w:
        n_next = 0
        for i in range(n_w):
            w = cur[i]
            for k in range(in_indptr[w], in_indptr[w + 1]):
                tr = in_trans[k]
                if flag[tr]:
                    continue
                flag[tr] = True
                if n_out == len(out):
                    out = np.concatenate((out, np.empty(n_out, dtype=np.int64)))
                out[n_out] = tr
                n_out += 1
                s = t_src[tr]
                rem[s] -= frac[tr]
                if not mark[s]:
                    mark[s] = True
                    nxt[n_next] = s
                    n_next += 1
        n_w = 0
        for i in range(n_next):
            s = nxt[i]
            mark[s] = False
            if n_touched == len(touched):
                touched = np.concatenate((touched, np.empty(n_touched, dtype=np.int64)))
            touched[n_touched] = s
            n_touched += 1
            if rem[s] <= DEAD_ROW:
                cur[n_w] = s
                n_w += 1
    for i in range(n_out):
        flag[out[i]] = False
    for i in range(n_touched):
        rem[touched[i]] = 1.0
    return out[:n_out].copy()


@njit(cache=True, nogil=True)
def hottest(load: np.ndarray, cap: np.ndarray, changed: np.ndarray, base_order: np.ndarray, k: int,
            mark: np.ndarray) -> np.ndarray:
    """The ``k`` edges of highest utilization (``load / cap``; ties by edge index), where
    ``load`` differs from the baseline only on the edges ``changed`` and ``base_order``
    lists every edge by baseline utilization, highest first, ties by index. ``mark``:
    scratch (false)."""
    best_e = np.full(k, -1, dtype=np.int64)
    best_u = np.full(k, -np.inf)
    for i in range(len(changed)):
        e = changed[i]
        if not mark[e]:
            mark[e] = True
            u = load[e] / cap[e]
            if u >= best_u[k - 1]:  # the common case, below the top, stays out of the call
                _offer(best_e, best_u, e, u)
    seen = 0
    for i in range(len(base_order)):
        if seen == k:
            break
        e = base_order[i]
        if not mark[e]:
            seen += 1
            u = load[e] / cap[e]
            if u >= best_u[k - 1]:
                _offer(best_e, best_u, e, u)
    for i in range(len(changed)):
        mark[changed[i]] = False
    n = 0
    while n < k and best_e[n] >= 0:
        n += 1
    return best_e[:n].copy()


@njit(cache=True, nogil=True)
def _offer(best_e: np.ndarray, best_u: np.ndarray, e: int, u: float) -> None:
    """Insert edge ``e`` at utilization ``u`` into the sorted top list, if it belongs there."""
    k = len(best_e)
    j = k
    while j > 0 and (u > best_u[j - 1] or (u == best_u[j - 1] and (best_e[j - 1] < 0 or e < best_e[j - 1]))):
        j -= 1
    if j == k:
        return
    for m in range(k - 1, j, -1):
        best_e[m] = best_e[m - 1]
        best_u[m] = best_u[m - 1]
    best_e[j] = e
    best_u[j] = u

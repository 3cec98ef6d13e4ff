"""Compiled loops of the safety replay: a scenario's difference push and BGP withdrawal.

A single failure touches a few thousand transitions of a fabric's flow, in a
dozen hops. Written as numpy array passes, each hop is some twenty calls, and on
a Clos of 2,688 devices a scenario spent most of its 2.5 ms in the calls
themselves, not in the arithmetic. These kernels run the same steps as one loop
per hop, compiled by numba (compiled once per machine and kept in ``__pycache__``
where the process may write, see :mod:`solver.core.jit`).
:class:`safety.replay.Replayer` owns the semantics; the docstrings below only say
what each kernel computes on its arrays.

Scratch arrays (``acc``, ``mark``, ``flag``, ``cur``, ``nxt``, the scratch bits of
``flags``) come from the caller and are left as they came: zero, false, or unspecified
(``cur``/``nxt``/``scale``).
"""

from __future__ import annotations

import numpy as np

from solver.core.jit import compiled

__all__ = ["SINK", "csr", "hop_shift", "hottest", "merge", "push", "stages", "withdraw"]

DEAD_ROW = 1e-9  # a row whose surviving fraction is at most this has no next hop left
_ZERO = 5e-324  # stands for an exact zero in a touched slot of a sum (its zero means untouched)
SINK = 1  # flags per state: a black hole of the baseline (the caller's bit)
_NEW_SINK = 2  # a row left without a next hop by this push
_FIXED = 4  # a row renormalized by this push (its surviving fractions times ``scale``)
_SEEN = 8  # collected once


def hop_shift(n_edges: int) -> int:
    """Bits of an edge index in :func:`push`'s ``hop`` (destination state above them)."""
    return max(1, int(n_edges).bit_length())


@compiled(nogil=True)
def push(x: np.ndarray, frac: np.ndarray, hop: np.ndarray, one: np.ndarray, shift: int, t_indptr: np.ndarray,
         t_src: np.ndarray,
         class_indptr: np.ndarray, class_states: np.ndarray, dead_t: np.ndarray, gone: np.ndarray, levels: int,
         acc: np.ndarray, flags: np.ndarray, scale: np.ndarray, tflag: np.ndarray, cur: np.ndarray,
         nxt: np.ndarray, delta: np.ndarray, etouch: np.ndarray
         ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The difference flow of killing transitions ``dead_t`` and removing classes ``gone``.

    A transition ``t`` leads to state ``hop[t] >> shift`` over edge ``hop[t] & (2**shift - 1)``
    (one array read for both); ``one[s]``: the packed hop of state ``s``'s only transition
    when that carries all of its traffic and the transitions have no cycle (else -1): a push
    steps through such a state, unless this push renormalized its row, and adds at the state
    after it (see :meth:`safety.replay.Replayer._one_way`). ``class_indptr``/``class_states``:
    per class, its states (CSR).
    ``flags`` per state: :data:`SINK` marks the baseline's black holes (the others are scratch
    bits). Returns the edges whose load changes and by how much (``delta``, zeros, and
    ``etouch`` are the scratch of that sum), the states left without a next hop (new black
    holes), the arrivals (states, gbps) at black holes old and new, and the states still
    carrying traffic after ``levels`` hops (a loop; empty if none).

    The memory a hop waits for is what this costs on a large fabric, so a visit reads the
    transition's fraction and hop, the arrival sum of its state (whose zero means "not yet in
    the frontier": a sum that cancels to zero is stored as :data:`_ZERO`) and the edge's sum.
    That add-and-list step is written out at each of its seven places: as a shared helper
    (numba, ``inline="always"``) the kernel ran three times slower on Clos L and M.
    """
    emask = (1 << shift) - 1
    n_e = 0
    # the classes that are gone: all their traffic leaves
    for i in range(len(gone)):
        c = gone[i]
        for j in range(class_indptr[c], class_indptr[c + 1]):
            s = class_states[j]
            for t in range(t_indptr[s], t_indptr[s + 1]):
                e = hop[t] & emask
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
        if not flags[s] & _SEEN:
            flags[s] |= _SEEN
            cur[nch] = s
            nch += 1
        acc[s] += frac[t]
        tflag[t] = True
    ch = cur[:nch].copy()
    dead_share = np.empty(nch)
    for i in range(nch):
        s = ch[i]
        dead_share[i] = acc[s]
        acc[s] = 0.0
        flags[s] &= ~_SEEN
    # renormalize them (a surviving fraction times ``scale``, zero for a dead row, applied
    # where the row is read: most rows carry no traffic of their own and are never reached)
    # and push the difference of those that carry traffic one hop
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
        flags[s] |= _FIXED
        scale[s] = 0.0 if dead_row else 1.0 / alive
    for i in range(nch):  # every renormalized row is marked before any push steps through a state
        s = ch[i]
        xs = x[s]
        if xs == 0.0:
            continue
        sc = scale[s]
        for t in range(t_indptr[s], t_indptr[s + 1]):
            old = frac[t]
            new = 0.0 if tflag[t] else old * sc
            diff = xs * (new - old)
            h = hop[t]
            e = h & emask
            if delta[e] == 0.0:
                etouch[n_e] = e
                n_e += 1
            delta[e] += diff
            if delta[e] == 0.0:
                delta[e] = _ZERO
            d = h >> shift
            h = one[d]
            if h >= 0 and not flags[d] & _FIXED:  # through a state with one way on
                e = h & emask
                if delta[e] == 0.0:
                    etouch[n_e] = e
                    n_e += 1
                delta[e] += diff
                if delta[e] == 0.0:
                    delta[e] = _ZERO
                d = h >> shift
            if acc[d] == 0.0:
                nxt[n_next] = d
                n_next += 1
            acc[d] += diff
            if acc[d] == 0.0:
                acc[d] = _ZERO
    for i in range(n_sinks):
        flags[sinks[i]] |= _NEW_SINK
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
            if a != _ZERO:
                cur[n_cur] = s
                amounts[n_cur] = a
                n_cur += 1
        n_next = 0
        if n_cur == 0:
            break
        for i in range(n_cur):
            s = cur[i]
            a = amounts[i]
            fl = flags[s]
            if fl & (SINK | _NEW_SINK):
                if n_arr == len(arr_s):
                    arr_s = np.concatenate((arr_s, np.empty(n_arr, dtype=np.int64)))
                    arr_a = np.concatenate((arr_a, np.empty(n_arr)))
                arr_s[n_arr] = s
                arr_a[n_arr] = a
                n_arr += 1
            lo = t_indptr[s]
            is_fixed = (fl & _FIXED) != 0
            sc = scale[s] if is_fixed else 1.0
            for t in range(lo, t_indptr[s + 1]):
                f = frac[t]
                if is_fixed:
                    f = 0.0 if tflag[t] else f * sc
                contrib = a * f
                h = hop[t]
                e = h & emask
                if delta[e] == 0.0:
                    etouch[n_e] = e
                    n_e += 1
                delta[e] += contrib
                if delta[e] == 0.0:
                    delta[e] = _ZERO
                d = h >> shift
                h = one[d]
                if h >= 0 and not flags[d] & _FIXED:  # through a state with one way on
                    e = h & emask
                    if delta[e] == 0.0:
                        etouch[n_e] = e
                        n_e += 1
                    delta[e] += contrib
                    if delta[e] == 0.0:
                        delta[e] = _ZERO
                    d = h >> shift
                if acc[d] == 0.0:
                    nxt[n_next] = d
                    n_next += 1
                acc[d] += contrib
                if acc[d] == 0.0:
                    acc[d] = _ZERO
        if n_next == 0:
            break
    else:
        loop_n = n_next
    loop_states = nxt[:loop_n].copy()
    for i in range(n_next):  # leave the scratch clean (only after a loop is anything left)
        acc[nxt[i]] = 0.0
    for i in range(n_sinks):
        flags[sinks[i]] &= ~_NEW_SINK
    for i in range(nch):
        flags[ch[i]] &= ~_FIXED
    for i in range(len(dead_t)):
        tflag[dead_t[i]] = False
    edges = etouch[:n_e].copy()
    change = np.empty(n_e)
    for i in range(n_e):
        e = edges[i]
        change[i] = 0.0 if delta[e] == _ZERO else delta[e]
        delta[e] = 0.0
    return edges, change, sinks[:n_sinks].copy(), arr_s[:n_arr].copy(), arr_a[:n_arr].copy(), loop_states


@compiled(nogil=True)
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


@compiled(nogil=True)
def hottest(base: np.ndarray, cap: np.ndarray, changed: np.ndarray, values: np.ndarray, base_order: np.ndarray,
            k: int, mark: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` edges of highest utilization (load over ``cap``; ties by edge index) and their
    loads, where the loads are ``base`` but for the distinct edges ``changed``, at ``values``,
    and ``base_order`` lists every edge by its utilization in ``base``, highest first, ties by
    index. ``mark``: scratch (false)."""
    best_e = np.full(k, -1, dtype=np.int64)
    best_u = np.full(k, -np.inf)
    best_l = np.zeros(k)  # the exact loads, not utilization times capacity
    for i in range(len(changed)):
        e = changed[i]
        mark[e] = True
        u = values[i] / cap[e]
        if u >= best_u[k - 1]:  # the common case, below the top, stays out of the call
            _offer(best_e, best_u, best_l, e, u, values[i])
    seen = 0
    for i in range(len(base_order)):
        if seen == k:
            break
        e = base_order[i]
        if not mark[e]:
            seen += 1
            u = base[e] / cap[e]
            if u >= best_u[k - 1]:
                _offer(best_e, best_u, best_l, e, u, base[e])
    for i in range(len(changed)):
        mark[changed[i]] = False
    n = 0
    while n < k and best_e[n] >= 0:
        n += 1
    return best_e[:n].copy(), best_l[:n].copy()


@compiled(nogil=True)
def _offer(best_e: np.ndarray, best_u: np.ndarray, best_l: np.ndarray, e: int, u: float, load: float) -> None:
    """Insert edge ``e`` at utilization ``u`` (its ``load``) into the sorted top list, if it belongs there."""
    k = len(best_e)
    j = k
    while j > 0 and (u > best_u[j - 1] or (u == best_u[j - 1] and (best_e[j - 1] < 0 or e < best_e[j - 1]))):
        j -= 1
    if j == k:
        return
    for m in range(k - 1, j, -1):
        best_e[m] = best_e[m - 1]
        best_u[m] = best_u[m - 1]
        best_l[m] = best_l[m - 1]
    best_e[j] = e
    best_u[j] = u
    best_l[j] = load


@compiled(nogil=True)
def merge(base: np.ndarray, edges1: np.ndarray, change1: np.ndarray, edges2: np.ndarray, change2: np.ndarray,
          zeroed: np.ndarray, view: np.ndarray, mark: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The loads of ``base`` changed by two class-disjoint pushes (each with distinct edges)
    and with the edges ``zeroed`` at zero, as (distinct changed edges, their loads).
    ``view`` (equal to ``base``) and ``mark`` (false) are scratch, left as they came."""
    out = np.empty(len(edges1) + len(edges2) + len(zeroed), dtype=np.int64)
    n = 0
    for i in range(len(edges1)):
        e = edges1[i]
        view[e] += change1[i]
        if not mark[e]:
            mark[e] = True
            out[n] = e
            n += 1
    for i in range(len(edges2)):
        e = edges2[i]
        view[e] += change2[i]
        if not mark[e]:
            mark[e] = True
            out[n] = e
            n += 1
    for i in range(len(zeroed)):
        e = zeroed[i]
        view[e] = 0.0
        if not mark[e]:
            mark[e] = True
            out[n] = e
            n += 1
    values = np.empty(n)
    for i in range(n):
        e = out[i]
        values[i] = view[e]
        view[e] = base[e]
        mark[e] = False
    return out[:n].copy(), values


@compiled(nogil=True)
def stages(fab: tuple, scratch: tuple, shift: int, levels: int, withdrawal: bool, dead_t: np.ndarray,  # type: ignore[type-arg]
           gone: np.ndarray, fedges: np.ndarray, eps: float) -> tuple:  # type: ignore[type-arg]
    """Both stages of one scenario: the transitions ``dead_t`` die (the failed edges'
    ``fedges``, minus those of the ``gone`` classes, whose origins all failed).

    ``fab``: ``(x, frac, hop, t_indptr, t_src, class_indptr, class_states, t_class,
    state_class, in_indptr, in_trans, base_load, base_sinks, one)``; ``scratch``: ``(acc, flags,
    scale, tflag, cur, nxt, delta, etouch, rem, mark, failed, view, emark, cmark)``, with
    ``failed`` marking the failed devices' states. With ``withdrawal``, the reconverged
    stage also kills every transition into a state that withdrew its route (see
    :func:`withdraw`); only the classes that withdrew something differ between the stages,
    so every other class is pushed once for both. Returns whether the stages are the same,
    then per stage (immediate, reconverged): the changed edges and their loads, the black
    holes (states, gbps above ``eps``; not at failed states, not of gone classes) and the
    states of any loop.
    """
    (x, frac, hop, t_indptr, t_src, class_indptr, class_states, t_class, state_class, in_indptr, in_trans,
     base, base_sinks, one) = fab
    (acc, flags, scale, tflag, cur, nxt, delta, etouch, rem, mark, failed, view, emark, cmark) = scratch
    dead_r = dead_t
    if withdrawal and len(dead_t):
        dead_r = withdraw(frac, t_src, in_indptr, in_trans, failed, dead_t, rem, tflag, mark, cur, nxt)
    nd = len(dead_t)
    empty_i = np.empty(0, dtype=np.int64)
    empty_f = np.empty(0)
    if len(dead_r) == nd:
        p = push(x, frac, hop, one, shift, t_indptr, t_src, class_indptr, class_states, dead_t, gone, levels,
                 acc, flags, scale, tflag, cur, nxt, delta, etouch)
        imm = _stage(p[0], p[1], p[2], p[3], p[4], p[5], empty_i, empty_f, empty_i, empty_i, empty_f, empty_i,
                     x, state_class, gone, fedges, base, base_sinks, eps, acc, failed, view, emark, cmark)
        return True, imm, imm
    for i in range(nd, len(dead_r)):  # the classes that withdrew something
        cmark[t_class[dead_r[i]]] = True
    n_sh = 0
    for i in range(nd):
        n_sh += not cmark[t_class[dead_t[i]]]
    sh_t = np.empty(n_sh, dtype=np.int64)
    mv_t = np.empty(nd - n_sh, dtype=np.int64)
    a = b = 0
    for i in range(nd):
        t = dead_t[i]
        if cmark[t_class[t]]:
            mv_t[b] = t
            b += 1
        else:
            sh_t[a] = t
            a += 1
    n_rec = 0
    for i in range(len(dead_r)):
        n_rec += cmark[t_class[dead_r[i]]]
    rec_t = np.empty(n_rec, dtype=np.int64)
    a = 0
    for i in range(len(dead_r)):
        if cmark[t_class[dead_r[i]]]:
            rec_t[a] = dead_r[i]
            a += 1
    n_gm = 0
    for i in range(len(gone)):
        n_gm += cmark[gone[i]]
    gone_sh = np.empty(len(gone) - n_gm, dtype=np.int64)
    gone_mv = np.empty(n_gm, dtype=np.int64)
    a = b = 0
    for i in range(len(gone)):
        if cmark[gone[i]]:
            gone_mv[b] = gone[i]
            b += 1
        else:
            gone_sh[a] = gone[i]
            a += 1
    for i in range(nd, len(dead_r)):
        cmark[t_class[dead_r[i]]] = False
    s = push(x, frac, hop, one, shift, t_indptr, t_src, class_indptr, class_states, sh_t, gone_sh, levels,
             acc, flags, scale, tflag, cur, nxt, delta, etouch)
    m = push(x, frac, hop, one, shift, t_indptr, t_src, class_indptr, class_states, mv_t, gone_mv, levels,
             acc, flags, scale, tflag, cur, nxt, delta, etouch)
    r = push(x, frac, hop, one, shift, t_indptr, t_src, class_indptr, class_states, rec_t, gone_mv, levels,
             acc, flags, scale, tflag, cur, nxt, delta, etouch)
    imm = _stage(s[0], s[1], s[2], s[3], s[4], s[5], m[0], m[1], m[2], m[3], m[4], m[5],
                 x, state_class, gone, fedges, base, base_sinks, eps, acc, failed, view, emark, cmark)
    rec = _stage(s[0], s[1], s[2], s[3], s[4], s[5], r[0], r[1], r[2], r[3], r[4], r[5],
                 x, state_class, gone, fedges, base, base_sinks, eps, acc, failed, view, emark, cmark)
    return False, imm, rec


@compiled(nogil=True)
def _stage(e1: np.ndarray, c1: np.ndarray, sk1: np.ndarray, as1: np.ndarray, aa1: np.ndarray, lp1: np.ndarray,
           e2: np.ndarray, c2: np.ndarray, sk2: np.ndarray, as2: np.ndarray, aa2: np.ndarray, lp2: np.ndarray,
           x: np.ndarray, state_class: np.ndarray, gone: np.ndarray, fedges: np.ndarray, base: np.ndarray,
           base_sinks: np.ndarray, eps: float, acc: np.ndarray, failed: np.ndarray, view: np.ndarray,
           emark: np.ndarray, cmark: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One stage from two class-disjoint pushes: (changed edges, their loads, black-hole
    states, their gbps, loop states)."""
    changed, values = merge(base, e1, c1, e2, c2, fedges, view, emark)
    for i in range(len(as1)):
        acc[as1[i]] += aa1[i]
    for i in range(len(as2)):
        acc[as2[i]] += aa2[i]
    for i in range(len(gone)):
        cmark[gone[i]] = True
    n_all = len(base_sinks) + len(sk1) + len(sk2)
    drop_s = np.empty(n_all, dtype=np.int64)
    drop_a = np.empty(n_all)
    n = _drops(base_sinks, x, acc, failed, cmark, state_class, eps, drop_s, drop_a, 0)
    n = _drops(sk1, x, acc, failed, cmark, state_class, eps, drop_s, drop_a, n)
    n = _drops(sk2, x, acc, failed, cmark, state_class, eps, drop_s, drop_a, n)
    for i in range(len(gone)):
        cmark[gone[i]] = False
    for i in range(len(as1)):
        acc[as1[i]] = 0.0
    for i in range(len(as2)):
        acc[as2[i]] = 0.0
    loops = np.concatenate((lp1, lp2))
    return changed, values, drop_s[:n].copy(), drop_a[:n].copy(), loops


@compiled(nogil=True)
def _drops(sinks: np.ndarray, x: np.ndarray, acc: np.ndarray, failed: np.ndarray, cmark: np.ndarray,
           state_class: np.ndarray, eps: float, drop_s: np.ndarray, drop_a: np.ndarray, n: int) -> int:
    """Append the black holes among ``sinks`` (arrival above ``eps``, not failed, class not
    marked gone) at ``n``; the new count."""
    for i in range(len(sinks)):
        s = sinks[i]
        a = x[s] + acc[s]
        if a > eps and not failed[s] and not cmark[state_class[s]]:
            drop_s[n] = s
            drop_a[n] = a
            n += 1
    return n


@compiled(nogil=True)
def csr(rows: np.ndarray, n_rows: int) -> tuple[np.ndarray, np.ndarray]:
    """Index ``rows`` by row: ``(indptr, order)`` with ``order[indptr[r]:indptr[r+1]]`` the
    positions holding row ``r``, ascending (what a stable argsort gives, by counting)."""
    indptr = np.zeros(n_rows + 1, dtype=np.int64)
    for i in range(len(rows)):
        indptr[rows[i] + 1] += 1
    for r in range(n_rows):
        indptr[r + 1] += indptr[r]
    fill = indptr[:-1].copy()
    order = np.empty(len(rows), dtype=np.int64)
    for i in range(len(rows)):
        r = rows[i]
        order[fill[r]] = i
        fill[r] += 1
    return indptr, order


@compiled()
def acyclic(t_indptr: np.ndarray, t_dst: np.ndarray) -> bool:
    """Whether the transitions (per source state, CSR) form no cycle (Kahn's order)."""
    n = len(t_indptr) - 1
    indeg = np.zeros(n, dtype=np.int64)
    for t in range(len(t_dst)):
        indeg[t_dst[t]] += 1
    stack = np.empty(n, dtype=np.int64)
    top = 0
    for s in range(n):
        if indeg[s] == 0:
            stack[top] = s
            top += 1
    seen = 0
    while top:
        top -= 1
        s = stack[top]
        seen += 1
        for t in range(t_indptr[s], t_indptr[s + 1]):
            d = t_dst[t]
            indeg[d] -= 1
            if indeg[d] == 0:
                stack[top] = d
                top += 1
    return seen == n

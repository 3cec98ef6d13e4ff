"""Compiled loops of the safety replay: a scenario's difference push and BGP withdrawal.

A single failure touches a few thousand transitions of a fabric's flow, in a
dozen hops. Written as numpy array passes, each hop is some twenty calls, and on
a Clos of 2,688 devices a scenario spent most of its 2.5 ms in the calls
themselves, not in the arithmetic. These kernels run the same steps as one loop
per hop, compiled by numba (compiled once per machine and kept in ``__pycache__``
where the process may write, see :mod:`solver.core.jit`).
:class:`safety.replay.Replayer` owns the semantics; the docstrings below only say
what each kernel computes on its arrays.

The arrays travel in two named tuples: :class:`FlowArrays`, the compiled flow a
scenario reads, and :class:`Scratch`, the arrays it writes into. Scratch arrays come
from the caller and are left as they came: zero, false, or unspecified (``cur``,
``nxt``, ``scale``, ``etouch``, and the scratch bits of ``flags``).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from solver.core.jit import compiled

__all__ = ["SINK", "FlowArrays", "Pushed", "Scratch", "acyclic", "csr", "hop_shift", "hottest", "merge", "push",
           "stages", "withdraw"]

DEAD_ROW = 1e-9  # a row whose surviving fraction is at most this has no next hop left
_ZERO = 5e-324  # stands for an exact zero in a touched slot of a sum (its zero means untouched)
SINK = 1  # flags per state: a black hole of the baseline (the caller's bit)
_NEW_SINK = 2  # a row left without a next hop by this push
_FIXED = 4  # a row renormalized by this push (its surviving fractions times ``scale``)
_SEEN = 8  # collected once


class FlowArrays(NamedTuple):
    """A compiled flow, as every scenario reads it (never writes it).

    Per state: ``x`` its arrival (gbps), ``state_class``, ``one`` the packed hop of its only
    transition when that carries all of its traffic and the transitions have no cycle, else
    -1 (see :func:`push`). Per transition, by source state (CSR ``t_indptr``): ``frac``, ``hop``
    (the next state above ``shift`` bits, the edge below, one read for both), ``t_src``,
    ``t_class``. Per class its states (CSR ``class_indptr``/``class_states``); per state its
    in-transitions (CSR ``in_indptr``/``in_trans``). The baseline: edge loads ``base`` and
    black holes ``base_sinks``. ``levels``: the hops after which traffic still moving loops.
    """

    x: np.ndarray
    frac: np.ndarray
    hop: np.ndarray
    t_indptr: np.ndarray
    t_src: np.ndarray
    class_indptr: np.ndarray
    class_states: np.ndarray
    t_class: np.ndarray
    state_class: np.ndarray
    in_indptr: np.ndarray
    in_trans: np.ndarray
    base: np.ndarray
    base_sinks: np.ndarray
    shift: int
    levels: int
    one: np.ndarray


class Scratch(NamedTuple):
    """The arrays a scenario writes into, one set per thread. Per state: ``acc`` (zero),
    ``flags`` (:data:`SINK` is the caller's, the other bits scratch), ``scale``, ``cur``,
    ``nxt`` (unspecified), ``rem`` (ones), ``mark`` (false), ``failed`` (the caller marks the
    failed devices' states). Per transition ``tflag`` (false); per edge ``delta`` (zero),
    ``etouch`` (unspecified), ``loads`` (the baseline's loads), ``emark`` (false); per class
    ``cmark`` (false)."""

    acc: np.ndarray
    flags: np.ndarray
    scale: np.ndarray
    tflag: np.ndarray
    cur: np.ndarray
    nxt: np.ndarray
    delta: np.ndarray
    etouch: np.ndarray
    rem: np.ndarray
    mark: np.ndarray
    failed: np.ndarray
    loads: np.ndarray
    emark: np.ndarray
    cmark: np.ndarray


class Pushed(NamedTuple):
    """What :func:`push` returns."""

    edges: np.ndarray  # the edges whose load changes
    change: np.ndarray  # and by how much
    sinks: np.ndarray  # the states left without a next hop (new black holes)
    arr_s: np.ndarray  # the arrivals at black holes old and new: states
    arr_a: np.ndarray  # and gbps
    loops: np.ndarray  # the states still carrying traffic after ``levels`` hops (a loop; empty if none)


def hop_shift(n_edges: int) -> int:
    """Bits of an edge index in :class:`FlowArrays`' ``hop`` (destination state above them)."""
    return max(1, int(n_edges).bit_length())


# -- small steps shared by the kernels -------------------------------------------------------------
# Each touches its arrays on every path: a compiled helper that writes an array on one branch only
# keeps counting references to it at every call (numba), which costs more than the step itself.
@compiled(nogil=True)
def _add(sums: np.ndarray, i: int, v: float) -> bool:
    """Add ``v`` to ``sums[i]``; whether it was untouched before (zero: a sum that cancels to
    zero is stored as :data:`_ZERO`)."""
    old = sums[i]
    new = old + v
    sums[i] = new if new != 0.0 else _ZERO
    return old == 0.0


@compiled(nogil=True)
def _first(mark: np.ndarray, i: int) -> bool:
    """Mark ``i``; whether it was unmarked."""
    was = mark[i]
    mark[i] = True
    return not was


@compiled(nogil=True)
def _grown(arr: np.ndarray) -> np.ndarray:
    """``arr`` followed by as many unspecified entries (called where it is full: an array
    reassigned on every pass of a loop would count a reference every time)."""
    return np.concatenate((arr, np.empty_like(arr)))


@compiled(nogil=True)
def _put(arr: np.ndarray, at: np.ndarray, value: float) -> None:
    """``arr[at] = value``."""
    for i in range(len(at)):
        arr[at[i]] = value


@compiled(nogil=True)
def _set_bits(flags: np.ndarray, at: np.ndarray, bits: int) -> None:
    """``flags[at] |= bits``."""
    for i in range(len(at)):
        flags[at[i]] |= bits


@compiled(nogil=True)
def _clear_bits(flags: np.ndarray, at: np.ndarray, bits: int) -> None:
    """``flags[at] &= ~bits``."""
    for i in range(len(at)):
        flags[at[i]] &= ~bits


# -- the difference push ------------------------------------------------------------------------------
@compiled(nogil=True)
def push(fa: FlowArrays, sc: Scratch, dead_t: np.ndarray, gone: np.ndarray) -> Pushed:
    """The difference flow of killing transitions ``dead_t`` and removing classes ``gone``.

    A push steps through a state whose ``one`` is set, unless this push renormalized its row,
    and adds at the state after it (see :meth:`safety.replay.Replayer._one_way`). Returns the
    edges whose load changes and by how much (``delta``, zeros, and ``etouch`` are the scratch
    of that sum), the states left without a next hop (new black holes), the arrivals (states,
    gbps) at black holes old and new, and the states still carrying traffic after ``levels``
    hops (a loop; empty if none).

    Helpers below take the arrays they use rather than the tuples, except :func:`_hops` and
    :func:`_leave`, one call each: a compiled call counts a reference to every array of a tuple
    it receives, too dear per hop.
    """
    n_e = _leave(fa, sc, gone)
    ch, dead_share = _dead_rows(dead_t, fa.t_src, fa.frac, sc.flags, sc.acc, sc.tflag, sc.cur)
    sinks = _renormalize(ch, dead_share, sc.flags, sc.scale)
    _set_bits(sc.flags, sinks, _NEW_SINK)  # already: the first hop reads only _FIXED
    arr_s, arr_a, n_e, n_next, loop_n = _hops(fa, sc, ch, n_e)
    loops = sc.nxt[:loop_n].copy()
    _put(sc.acc, sc.nxt[:n_next], 0.0)  # leave the scratch clean (only after a loop is anything left)
    _clear_bits(sc.flags, sinks, _NEW_SINK)
    _clear_bits(sc.flags, ch, _FIXED)
    _put(sc.tflag, dead_t, False)
    edges, change = _collect(sc.delta, sc.etouch, n_e)
    return Pushed(edges, change, sinks.copy(), arr_s, arr_a, loops)


@compiled(nogil=True)
def _leave(fa: FlowArrays, sc: Scratch, gone: np.ndarray) -> int:
    """The classes that are gone: all their traffic leaves its edges (``delta``, listed in
    ``etouch``). The count of touched edges."""
    x, frac, hop, t_indptr = fa.x, fa.frac, fa.hop, fa.t_indptr
    delta, etouch = sc.delta, sc.etouch
    emask = (1 << fa.shift) - 1
    n_e = 0
    for i in range(len(gone)):
        c = gone[i]
        for j in range(fa.class_indptr[c], fa.class_indptr[c + 1]):
            s = fa.class_states[j]
            for t in range(t_indptr[s], t_indptr[s + 1]):
                e = hop[t] & emask
                if _add(delta, e, -(x[s] * frac[t])):
                    etouch[n_e] = e
                    n_e += 1
    return n_e


@compiled(nogil=True)
def _dead_rows(dead_t: np.ndarray, t_src: np.ndarray, frac: np.ndarray, flags: np.ndarray, acc: np.ndarray,
               tflag: np.ndarray, cur: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The rows that lost a next hop (marking ``dead_t`` in ``tflag``) and the share lost, per row."""
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
    return ch, dead_share


@compiled(nogil=True)
def _renormalize(ch: np.ndarray, dead_share: np.ndarray, flags: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """Mark the rows ``ch`` renormalized: a surviving fraction times ``scale``, zero for a dead
    row, applied where the row is read (most rows carry no traffic of their own and are never
    reached). Returns the dead rows (new black holes)."""
    sinks = np.empty(len(ch), dtype=np.int64)
    n_sinks = 0
    for i in range(len(ch)):
        s = ch[i]
        alive = 1.0 - dead_share[i]
        dead_row = alive <= DEAD_ROW
        if dead_row:
            sinks[n_sinks] = s
            n_sinks += 1
        flags[s] |= _FIXED
        scale[s] = 0.0 if dead_row else 1.0 / alive
    return sinks[:n_sinks]


@compiled(nogil=True)
def _hops(fa: FlowArrays, sc: Scratch, ch: np.ndarray, n_e: int) -> tuple[np.ndarray, np.ndarray, int, int, int]:
    """Push the difference of the renormalized rows ``ch`` that carry traffic of their own one
    hop, then the frontier hop by hop, for at most ``levels`` hops more. Returns the arrivals
    at black holes (states, gbps), the counts of touched edges and of the last frontier listed
    in ``nxt``, and how many of those still carry traffic after the last hop (a loop).

    A visit reads the transition's fraction and hop, the arrival sum of the state reached
    (``acc``, whose zero means "not yet in the frontier") and the edge's sum (``delta``): the
    memory a hop waits for is what this costs on a large fabric.
    """
    frac, hop, t_indptr, one, shift = fa.frac, fa.hop, fa.t_indptr, fa.one, fa.shift
    flags, scale, tflag, delta, etouch, acc, nxt = sc.flags, sc.scale, sc.tflag, sc.delta, sc.etouch, sc.acc, sc.nxt
    emask = (1 << shift) - 1
    arr_s = np.empty(16, dtype=np.int64)
    arr_a = np.empty(16)
    n_arr = n_next = loop_n = 0
    rows, amounts = ch, fa.x[ch]
    for level in range(fa.levels + 2):  # level 0: the rows' own traffic, moving by the change of their fractions
        if level:
            amounts, n_cur = _take_frontier(nxt, acc, sc.cur, n_next)
            n_next = 0
            if n_cur == 0:
                break
            rows = sc.cur[:n_cur]
            arr_s, arr_a, n_arr = _arrivals(flags, rows, amounts, arr_s, arr_a, n_arr)
        for i in range(len(rows)):
            s = rows[i]
            a = amounts[i]
            if a == 0.0:  # a renormalized row without traffic of its own (a frontier has none)
                continue
            fixed = (flags[s] & _FIXED) != 0  # every row of level 0 is
            sc_s = scale[s] if fixed else 1.0
            for t in range(t_indptr[s], t_indptr[s + 1]):
                f = frac[t]
                if fixed:
                    new = 0.0 if tflag[t] else f * sc_s
                    f = new if level else new - f
                v = a * f
                h = hop[t]
                if _add(delta, h & emask, v):
                    etouch[n_e] = h & emask
                    n_e += 1
                d = h >> shift
                h = one[d]
                if h >= 0 and not flags[d] & _FIXED:  # through a state with one way on
                    if _add(delta, h & emask, v):
                        etouch[n_e] = h & emask
                        n_e += 1
                    d = h >> shift
                if _add(acc, d, v):
                    nxt[n_next] = d
                    n_next += 1
        if level and n_next == 0:
            break
    else:
        loop_n = n_next
    return arr_s[:n_arr].copy(), arr_a[:n_arr].copy(), n_e, n_next, loop_n


@compiled(nogil=True)
def _take_frontier(nxt: np.ndarray, acc: np.ndarray, cur: np.ndarray, n_next: int) -> tuple[np.ndarray, int]:
    """Move the states listed in ``nxt`` that received a nonzero difference to ``cur``, with
    how much (``acc`` back to zero); their count."""
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
    return amounts, n_cur


@compiled(nogil=True)
def _arrivals(flags: np.ndarray, rows: np.ndarray, amounts: np.ndarray, arr_s: np.ndarray, arr_a: np.ndarray,
              n_arr: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Append the states of ``rows`` that are black holes, old or new, with their ``amounts``."""
    for i in range(len(rows)):
        if flags[rows[i]] & (SINK | _NEW_SINK):
            if n_arr == len(arr_s):
                arr_s, arr_a = _grown(arr_s), _grown(arr_a)
            arr_s[n_arr] = rows[i]
            arr_a[n_arr] = amounts[i]
            n_arr += 1
    return arr_s, arr_a, n_arr


@compiled(nogil=True)
def _collect(delta: np.ndarray, etouch: np.ndarray, n_e: int) -> tuple[np.ndarray, np.ndarray]:
    """The touched edges and their sums (``delta`` back to zero)."""
    edges = etouch[:n_e].copy()
    change = np.empty(n_e)
    for i in range(n_e):
        e = edges[i]
        change[i] = 0.0 if delta[e] == _ZERO else delta[e]
        delta[e] = 0.0
    return edges, change


# -- BGP withdrawal -----------------------------------------------------------------------------------
@compiled(nogil=True)
def withdraw(fa: FlowArrays, sc: Scratch, dead_t: np.ndarray) -> np.ndarray:
    """The transitions that die when ``dead_t`` die and every state left with no next hop
    withdraws its route (its in-transitions die too), to a fixpoint, after ``dead_t``.

    Scratch: ``rem``, ``tflag``, ``mark``, ``cur``, ``nxt``; a state marked ``failed`` does
    not withdraw at the first hop (it is down, not withdrawing).
    """
    t_src, frac, in_indptr, in_trans = fa.t_src, fa.frac, fa.in_indptr, fa.in_trans
    tflag, rem, mark, cur, nxt = sc.tflag, sc.rem, sc.mark, sc.cur, sc.nxt
    n_out = len(dead_t)
    out = np.empty(max(16, 2 * n_out), dtype=np.int64)
    out[:n_out] = dead_t
    n_cur = 0
    for i in range(n_out):
        tflag[out[i]] = True
        if _lose(out[i], t_src, frac, rem, mark):
            cur[n_cur] = t_src[out[i]]
            n_cur += 1
    n_w = _dead_ends(cur, n_cur, rem, mark, sc.failed, True, cur)  # states that lost every next hop
    while n_w:
        n_next = 0
        for i in range(n_w):
            w = cur[i]
            for k in range(in_indptr[w], in_indptr[w + 1]):
                tr = in_trans[k]
                if not tflag[tr]:
                    tflag[tr] = True
                    if n_out == len(out):
                        out = _grown(out)
                    out[n_out] = tr
                    n_out += 1
                    if _lose(tr, t_src, frac, rem, mark):
                        nxt[n_next] = t_src[tr]
                        n_next += 1
        n_w = _dead_ends(nxt, n_next, rem, mark, sc.failed, False, cur)
    _put(tflag, out[:n_out], False)
    _put(rem, t_src[out[:n_out]], 1.0)  # every state that lost a share is the source of one of them
    return out[:n_out].copy()


@compiled(nogil=True)
def _lose(t: int, t_src: np.ndarray, frac: np.ndarray, rem: np.ndarray, mark: np.ndarray) -> bool:
    """Transition ``t`` dies: its source keeps less (``rem``); whether the source is newly marked."""
    s = t_src[t]
    rem[s] -= frac[t]
    return _first(mark, s)


@compiled(nogil=True)
def _dead_ends(listed: np.ndarray, n: int, rem: np.ndarray, mark: np.ndarray, failed: np.ndarray, first: bool,
               out: np.ndarray) -> int:
    """Of the ``n`` states ``listed`` (their marks cleared), those left with no next hop, written
    to ``out`` (in place when ``listed`` is ``out``); at the ``first`` hop a failed state does not
    withdraw. Their count."""
    n_w = 0
    for i in range(n):
        s = listed[i]
        mark[s] = False
        if rem[s] <= DEAD_ROW and not (first and failed[s]):
            out[n_w] = s
            n_w += 1
    return n_w


# -- one scenario: both stages ------------------------------------------------------------------------
@compiled(nogil=True)
def stages(fab: tuple, scratch: tuple, withdrawal: bool, dead_t: np.ndarray,  # type: ignore[type-arg]
           gone: np.ndarray, fedges: np.ndarray, eps: float) -> tuple:  # type: ignore[type-arg]
    """Both stages of one scenario: the transitions ``dead_t`` die (the failed edges'
    ``fedges``, minus those of the ``gone`` classes, whose origins all failed).

    ``fab`` and ``scratch``: a :class:`FlowArrays` and a :class:`Scratch` as plain tuples
    (numba types a plain tuple argument in C and a named one in Python, some microseconds
    a call); ``failed`` marks the failed devices' states. With ``withdrawal``, the reconverged
    stage also kills every transition into a state that withdrew its route (see
    :func:`withdraw`); only the classes that withdrew something differ between the stages,
    so every other class is pushed once for both. Returns whether the stages are the same,
    then per stage (immediate, reconverged): the changed edges and their loads, the black
    holes (states, gbps above ``eps``; not at failed states, not of gone classes) and the
    states of any loop.
    """
    fa, sc = FlowArrays(*fab), Scratch(*scratch)
    dead_r = dead_t
    if withdrawal and len(dead_t):
        dead_r = withdraw(fa, sc, dead_t)
    nd = len(dead_t)
    if len(dead_r) == nd:
        p = push(fa, sc, dead_t, gone)
        none_i = np.empty(0, dtype=np.int64)
        none_f = np.empty(0)
        imm = _stage(fa, sc, p, Pushed(none_i, none_f, none_i, none_i, none_f, none_i), gone, fedges, eps)
        return True, imm, imm
    moved = fa.t_class[dead_r[nd:]]  # the classes that withdrew something
    _put(sc.cmark, moved, True)
    sh_t, mv_t = _split(dead_t, fa.t_class[dead_t], sc.cmark)
    rec_t = _split(dead_r, fa.t_class[dead_r], sc.cmark)[1]
    gone_sh, gone_mv = _split(gone, gone, sc.cmark)
    _put(sc.cmark, moved, False)
    s = push(fa, sc, sh_t, gone_sh)
    m = push(fa, sc, mv_t, gone_mv)
    r = push(fa, sc, rec_t, gone_mv)
    return False, _stage(fa, sc, s, m, gone, fedges, eps), _stage(fa, sc, s, r, gone, fedges, eps)


@compiled(nogil=True)
def _split(items: np.ndarray, keys: np.ndarray, marked: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``items`` whose ``marked[keys[i]]`` is false, then those where it is true, in order."""
    n_m = 0
    for i in range(len(items)):
        if marked[keys[i]]:
            n_m += 1
    no = np.empty(len(items) - n_m, dtype=np.int64)
    yes = np.empty(n_m, dtype=np.int64)
    a = b = 0
    for i in range(len(items)):
        if marked[keys[i]]:
            yes[b] = items[i]
            b += 1
        else:
            no[a] = items[i]
            a += 1
    return no, yes


@compiled(nogil=True)
def _stage(fa: FlowArrays, sc: Scratch, p1: Pushed, p2: Pushed, gone: np.ndarray, fedges: np.ndarray, eps: float
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One stage from two class-disjoint pushes: (changed edges, their loads, black-hole
    states, their gbps, loop states). Black holes: the baseline's and the pushes' new ones
    whose arrival is above ``eps``, not at a failed state, not of a ``gone`` class."""
    x, state_class, acc, failed, cmark = fa.x, fa.state_class, sc.acc, sc.failed, sc.cmark
    changed, values = merge(fa.base, p1.edges, p1.change, p2.edges, p2.change, fedges, sc.loads, sc.emark)
    _scatter_add(acc, p1.arr_s, p1.arr_a)
    _scatter_add(acc, p2.arr_s, p2.arr_a)
    _put(cmark, gone, True)
    sinks = np.concatenate((fa.base_sinks, p1.sinks, p2.sinks))
    drop_s = np.empty(len(sinks), dtype=np.int64)
    drop_a = np.empty(len(sinks))
    n = 0
    for i in range(len(sinks)):
        s = sinks[i]
        a = x[s] + acc[s]
        if a > eps and not failed[s] and not cmark[state_class[s]]:
            drop_s[n] = s
            drop_a[n] = a
            n += 1
    _put(cmark, gone, False)
    _put(acc, p1.arr_s, 0.0)
    _put(acc, p2.arr_s, 0.0)
    return changed, values, drop_s[:n].copy(), drop_a[:n].copy(), np.concatenate((p1.loops, p2.loops))


@compiled(nogil=True)
def _scatter_add(arr: np.ndarray, at: np.ndarray, values: np.ndarray) -> None:
    """``arr[at[i]] += values[i]`` in order (``at`` may repeat)."""
    for i in range(len(at)):
        arr[at[i]] += values[i]


@compiled(nogil=True)
def merge(base: np.ndarray, edges1: np.ndarray, change1: np.ndarray, edges2: np.ndarray, change2: np.ndarray,
          zeroed: np.ndarray, view: np.ndarray, mark: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The loads of ``base`` changed by two class-disjoint pushes (each with distinct edges)
    and with the edges ``zeroed`` at zero, as (distinct changed edges, their loads).
    ``view`` (equal to ``base``) and ``mark`` (false) are scratch, left as they came."""
    out = np.empty(len(edges1) + len(edges2) + len(zeroed), dtype=np.int64)
    n = _add_listed(view, mark, out, 0, edges1, change1)
    n = _add_listed(view, mark, out, n, edges2, change2)
    for i in range(len(zeroed)):
        e = zeroed[i]
        view[e] = 0.0
        if _first(mark, e):
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
def _add_listed(view: np.ndarray, mark: np.ndarray, out: np.ndarray, n: int, edges: np.ndarray,
                change: np.ndarray) -> int:
    """``view[edges] += change``, each edge listed once in ``out`` from ``n``; the new count."""
    for i in range(len(edges)):
        e = edges[i]
        view[e] += change[i]
        if _first(mark, e):
            out[n] = e
            n += 1
    return n


# -- small kernels of the replay ------------------------------------------------------------------
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

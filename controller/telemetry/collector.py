"""The collector: counter windows of every device, and the views built on them.

:class:`Telemetry` holds a :class:`~controller.telemetry.counters.CounterStore`
and answers, for the active intent and plan handed in (it reads no store
itself), the link view (per link, the rate both ways and the utilization), the
demand view (ingress device -> prefix, from the OpenConfig AFT counters, or
estimated by tomogravity when a device serves none) and the fidelity of the plan
(its predicted link loads under the measured demand beside the observed ones).
The samples come from outside (the gNMI subscription of the serving process,
or tests) as plain :class:`~controller.telemetry.counters.Sample` values through
:meth:`Telemetry.ingest`; ``now`` is always a parameter.

OpenConfig paths read (DESIGN.md, Telemetry):
``/interfaces/interface[name=PORT]/state/counters/{in,out}-octets`` and
``/network-instances/network-instance[name=default]/afts/ipv4-unicast/ipv4-entry[prefix=P]/state/counters/octets-forwarded``
and its IPv6 twin ``.../afts/ipv6-unicast/ipv6-entry[prefix=P]/...`` (``P`` canonical, as the intent's
prefixes are: a measured demand's ``to`` is the prefix text the switch serves).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from controller.model import Intent, Link
from controller.model.documents import (
    FidelityDocument,
    FidelityLinkDocument,
    MeasuredDemandDocument,
    MeasuredDemandsDocument,
    TelemetryHistoryPointDocument,
    TelemetryLinkDocument,
)
from controller.model.plan import Plan
from controller.telemetry.archive import Segment, restore, segment
from controller.telemetry.counters import STATS, CounterStore, Options, Sample, WindowStats
from controller.telemetry.patterns import Group, Series, classify, matrix_series, tor_series
from controller.telemetry.patterns import Options as PatternOptions
from safety.estimate import RoutingMatrix, edge_devices, link_loads, routing_matrix, tomogravity

__all__ = ["DemandView", "Fidelity", "FidelityLink", "HistoryPoint", "LinkView", "Method", "Stat", "Telemetry",
           "aft_path", "interface_path", "measured_demand"]

_IFACE = re.compile(r"^/interfaces/interface\[name=([^\]]+)\]/state/counters/([a-z-]+)$")
_AFT = re.compile(r"^/network-instances/network-instance\[name=default\]/afts/ipv(?P<v>[46])-unicast/"
                  r"ipv(?P=v)-entry\[prefix=(?P<prefix>[^\]]+)\]/state/counters/(?P<leaf>[a-z-]+)$")
_OCTETS_PER_GBPS = 1e9 / 8  # octets per second in one Gbps


def interface_path(port: str, counter: str = "out-octets") -> str:
    return f"/interfaces/interface[name={port}]/state/counters/{counter}"


def aft_path(prefix: str, counter: str = "octets-forwarded") -> str:
    """The AFT counter of ``prefix`` (canonical), in its family's tree."""
    v = 6 if ":" in prefix else 4
    return (f"/network-instances/network-instance[name=default]/afts/ipv{v}-unicast/"
            f"ipv{v}-entry[prefix={prefix}]/state/counters/{counter}")


def _link_counters(lk: Link) -> list[tuple[str, str]]:
    """The four counters a link's load is read from: ``a``'s out-octets and ``b``'s in-octets (a to b), then
    ``b``'s out-octets and ``a``'s in-octets (b to a)."""
    return [(lk.a, interface_path(lk.a_port, "out-octets")), (lk.b, interface_path(lk.b_port, "in-octets")),
            (lk.b, interface_path(lk.b_port, "out-octets")), (lk.a, interface_path(lk.a_port, "in-octets"))]


@dataclass(frozen=True, slots=True)
class LinkView:
    """One link's observed load: ``None`` where no rate is known (never zero for unknown)."""

    a: str
    a_port: str
    b: str
    b_port: str
    gbps_ab: float | None
    gbps_ba: float | None
    utilization: float | None
    age_s: float | None
    stale: bool
    fresh: bool = False  # both directions read from counters that are not stale

    def to_model(self) -> TelemetryLinkDocument:
        return TelemetryLinkDocument(a=self.a, a_port=self.a_port, b=self.b, b_port=self.b_port,
                                     gbps_ab=_r(self.gbps_ab), gbps_ba=_r(self.gbps_ba),
                                     utilization=_r(self.utilization), age_s=_r(self.age_s, 3), stale=self.stale)


@dataclass(frozen=True, slots=True)
class HistoryPoint:
    """One interval of a link's history (see :meth:`Telemetry.link_history`)."""

    t: float
    gbps_ab: float | None
    gbps_ba: float | None
    utilization: float | None

    def to_model(self) -> TelemetryHistoryPointDocument:
        return TelemetryHistoryPointDocument(t=round(self.t, 3), gbps_ab=_r(self.gbps_ab), gbps_ba=_r(self.gbps_ba),
                                             utilization=_r(self.utilization))


#: how a demand matrix was measured: the AFT counters, or estimated from link loads by tomogravity
Method = Literal["aft", "tomogravity"]
#: the statistic of the per-interval rates over a window
Stat = Literal["mean", "p95", "max"]


@dataclass(frozen=True, slots=True)
class DemandView:
    method: Method
    demands: dict[tuple[str, str], float]
    residual: float | None = None  # tomogravity: ||A x - y||_1 in gbps

    def to_model(self, window_s: float, stat: Stat) -> MeasuredDemandsDocument:
        return MeasuredDemandsDocument(window_s=window_s, stat=stat, method=self.method, demands=[
            measured_demand(f, p, round(g, 6)) for (f, p), g in sorted(self.demands.items())])


@dataclass(frozen=True, slots=True)
class FidelityLink:
    a: str
    a_port: str
    b: str
    b_port: str
    predicted: float
    observed: float | None
    error: float | None


@dataclass(frozen=True, slots=True)
class Fidelity:
    links: tuple[FidelityLink, ...]
    worst: float | None
    p95: float | None
    method: Method

    def to_model(self, window_s: float, stat: Stat) -> FidelityDocument:
        return FidelityDocument(
            window_s=window_s, stat=stat, method=self.method,
            links=[FidelityLinkDocument(a=x.a, a_port=x.a_port, b=x.b, b_port=x.b_port,
                                        predicted=round(x.predicted, 6), observed=_r(x.observed), error=_r(x.error))
                   for x in self.links],
            worst=_r(self.worst), p95=_r(self.p95))


def measured_demand(src: str, prefix: str, gbps: float) -> MeasuredDemandDocument:
    """One entry of a measured matrix (``from`` is a keyword: the model is made from its JSON form)."""
    return MeasuredDemandDocument.model_validate({"from": src, "to": prefix, "gbps": gbps})


def _r(x: float | None, nd: int = 6) -> float | None:
    return None if x is None else round(x, nd)


def _opt(x: float) -> float | None:
    return None if np.isnan(x) else float(x)


class Telemetry:
    """The controller's telemetry: ingest samples, answer views. Thread-safe (one lock)."""

    def __init__(self, options: Options | None = None):
        self.options = options or Options()
        self.store = CounterStore(self.options)
        self._lock = threading.Lock()
        self._routing: tuple[object, RoutingMatrix] | None = None
        self._expired_at = float("-inf")
        #: The active (revision, intent, plan), set by the serving shell; the views take them as arguments.
        self.context: tuple[int, Intent, Plan] | None = None

    @property
    def keep_s(self) -> float:
        """The longest window the collector can answer: its rates per counter times their interval."""
        return self.options.max_rates * self.options.interval_s

    def window_problem(self, window_s: float) -> str | None:
        """Why the collector cannot answer a window of ``window_s`` seconds (None when it can): a longer
        window than it keeps is refused rather than silently cut to what it has."""
        if window_s <= self.keep_s + 1e-9:
            return None
        o = self.options
        return (f"at most {self.keep_s:g} s: the collector keeps {o.max_rates} intervals of {o.interval_s:g} s "
                "of every counter (LOOM_TELEMETRY_KEEP_S)")

    # -- feeding ---------------------------------------------------------------
    def ingest(self, samples: Iterable[Any], now: float) -> int:
        """Add samples: any objects with ``device``, ``path``, ``value`` and ``timestamp_ns``
        (:class:`Sample`, the gNMI adapter's own sample type) or plain 4-tuples in that order.
        Returns how many were kept (not late). Devices silent for ``options.forget_after_s`` are
        forgotten on the way (checked once a minute of ``now``)."""
        with self._lock:
            kept = self.store.ingest((Sample(*s) if type(s) is tuple else s for s in samples), now)
            if now - self._expired_at >= 60.0:
                self._expired_at = now
                self.store.expire(now)
            return kept

    def mark_disconnected(self, device: str) -> None:
        """The device's stream broke: its counters read stale (not zero) until it samples again."""
        with self._lock:
            self.store.mark_disconnected(device)

    def forget(self, device: str) -> None:
        """Drop the device's counters (it left the active revision)."""
        with self._lock:
            self.store.forget(device)

    def expire(self, now: float) -> list[str]:
        """Forget the devices silent for ``options.forget_after_s``."""
        with self._lock:
            return self.store.expire(now)

    def counts(self) -> dict[str, int]:
        s = self.store
        return {"counters": len(s), "devices": len(s.devices), "late": s.late, "resets": s.resets,
                "wraps": s.wraps, "spikes": s.spikes}

    # -- views -------------------------------------------------------------------
    def _stats(self, keys: list[tuple[str, str]], now: float, window_s: float) -> WindowStats:
        rows = [self.store.rows.get(k, -1) for k in keys]
        return self.store.stats(rows, now, window_s)

    def links(self, intent: Intent, now: float, window_s: float, stat: str = "mean") -> list[LinkView]:
        """Each link of ``intent``: ``a``'s out-octets rate (``b``'s in-octets when missing) and back."""
        if stat not in STATS:
            raise ValueError(f"unknown statistic {stat!r}")
        keys = [k for lk in intent.links for k in _link_counters(lk)]
        with self._lock:
            st = self._stats(keys, now, window_s)
        val = st.stat(stat) / _OCTETS_PER_GBPS
        out: list[LinkView] = []
        for i, lk in enumerate(intent.links):
            j = 4 * i  # a out, b in (a -> b); b out, a in (b -> a)
            ab = j if not st.stale[j] else (j + 1 if not st.stale[j + 1] else j)
            ba = j + 2 if not st.stale[j + 2] else (j + 3 if not st.stale[j + 3] else j + 2)
            g_ab, g_ba = _opt(val[ab]), _opt(val[ba])
            # an end is stale when both its counters of this port are: its device stopped reporting
            end_a, end_b = (j, j + 3), (j + 1, j + 2)
            stale = any(all(st.stale[k] for k in end) for end in (end_a, end_b))
            known = [g for g in (g_ab, g_ba) if g is not None]
            util = max(known) / lk.capacity_gbps if known and lk.capacity_gbps > 0 else None
            ages = [min(a for k in end if not np.isnan(a := float(st.age_s[k]))) for end in (end_a, end_b)
                    if any(not np.isnan(st.age_s[k]) for k in end)]
            out.append(LinkView(lk.a, lk.a_port, lk.b, lk.b_port, g_ab, g_ba, util,
                                max(ages) if ages else None, stale,
                                fresh=bool(not st.stale[ab] and not st.stale[ba])))
        return out

    def silent_edges(self, intent: Intent, now: float, window_s: float) -> list[str]:
        """The edge devices of ``intent`` (ToRs and prefix origins, where demand enters) whose counters
        are all stale or absent in the window: a measured matrix misses whatever they send."""
        with self._lock:
            by_device: dict[str, list[int]] = {}
            for (dev, _path), row in self.store.rows.items():
                by_device.setdefault(dev, []).append(row)
            silent: list[str] = []
            for d in edge_devices(intent):
                rows = by_device.get(d)
                if not rows or bool(self.store.stats(rows, now, window_s).stale.all()):
                    silent.append(d)
        return sorted(silent)

    def _has_aft(self, intent: Intent) -> bool:
        """True when every edge device of ``intent`` (a ToR or prefix origin: where host traffic enters,
        which is all AFT entries count) that reports counters reports AFT counters too."""
        reporting = [d for d in edge_devices(intent) if d in self.store.devices]
        if not reporting:
            return False
        aft = {k[0] for k in self.store.rows if _AFT.match(k[1])}
        return all(d in aft for d in reporting)

    def demand(self, intent: Intent, plan: Plan | None, now: float, window_s: float,
               stat: str = "mean") -> DemandView:
        """The measured matrix (ingress device -> prefix, gbps, non-zero entries only)."""
        if stat not in STATS:
            raise ValueError(f"unknown statistic {stat!r}")
        with self._lock:
            if self._has_aft(intent):
                keys = [k for k in self.store.rows if k[0] in intent.device_map
                        and (m := _AFT.match(k[1])) is not None and m["leaf"] == "octets-forwarded"]
                st = self._stats(keys, now, window_s)
                val = st.stat(stat) / _OCTETS_PER_GBPS
                demands: dict[tuple[str, str], float] = {}
                for (dev, path), g in zip(keys, val, strict=True):
                    m = _AFT.match(path)
                    assert m is not None
                    if not np.isnan(g) and g > 0:
                        demands[(dev, m["prefix"])] = demands.get((dev, m["prefix"]), 0.0) + float(g)
                return DemandView("aft", demands)
        if plan is None:
            return DemandView("tomogravity", {})
        return self._estimate(intent, plan, now, window_s, stat)

    def demand_series(self, intent: Intent, now: float, window_s: float
                      ) -> tuple[list[tuple[str, str]], np.ndarray, float]:
        """The AFT demand keys (ingress device, prefix) and their rates per interval over the window,
        ``(intervals x keys)`` gbps, oldest first: each interval rate of a counter falls in the bin of
        ``options.interval_s`` seconds (counting back from ``now``) where it ends; NaN where a counter
        has none. No keys (and a ``0 x 0`` array) when the fabric serves no AFT counters."""
        step = self.options.interval_s
        with self._lock:
            if not self._has_aft(intent):
                return [], np.zeros((0, 0)), step
            keys = [k for k in self.store.rows if k[0] in intent.device_map
                    and (m := _AFT.match(k[1])) is not None and m["leaf"] == "octets-forwarded"]
        out = self.series(keys, now, window_s)
        prefixes = [_AFT.match(p) for _d, p in keys]
        return [(d, m["prefix"]) for (d, _p), m in zip(keys, prefixes, strict=True) if m is not None], out, step

    def series(self, keys: list[tuple[str, str]], now: float, window_s: float) -> np.ndarray:
        """The rates of the counters ``keys`` per interval over the window, ``(intervals x keys)`` gbps (of
        octets), oldest first: each interval rate of a counter falls in the bin of ``options.interval_s``
        seconds (counting back from ``now``) where it ends, time-weighted within the bin; NaN where a counter
        has none (or is unknown)."""
        step = self.options.interval_s
        bins = max(1, int(np.ceil(window_s / step - 1e-9)))
        with self._lock:
            s = self.store
            if not len(s.ring_t):  # nothing collected yet
                return np.full((bins, len(keys)), np.nan)
            idx = np.array([s.rows.get(k, -1) for k in keys], dtype=np.int64)
            known = idx >= 0
            rows = np.where(known, idx, 0)
            tt = s.ring_t[rows]
            dt = s.ring_dt[rows].astype(np.float64)
            rate = s.ring_rate[rows].astype(np.float64)
        inside = (tt > now - window_s) & (tt <= now) & known[:, None]
        b = np.clip(((now - np.where(inside, tt, now)) // step).astype(np.int64), 0, bins - 1)
        b = bins - 1 - b  # oldest first
        weight = np.zeros((len(keys), bins))
        total = np.zeros((len(keys), bins))
        r, c = np.nonzero(inside)
        np.add.at(weight, (r, b[r, c]), dt[r, c])
        np.add.at(total, (r, b[r, c]), rate[r, c] * dt[r, c])
        with np.errstate(invalid="ignore", divide="ignore"):
            out = np.where(weight > 0, total / np.where(weight > 0, weight, 1.0), np.nan) / _OCTETS_PER_GBPS
        return np.asarray(out.T)

    def link_history(self, link: Link, now: float, window_s: float) -> list[HistoryPoint]:
        """``link``'s load per interval over the window, oldest first: ``a``'s out-octets (``b``'s in-octets
        where ``a``'s has no rate in an interval) and back, and the busier direction over capacity."""
        g = self.series(_link_counters(link), now, window_s)
        step = self.options.interval_s
        ab = np.where(np.isnan(g[:, 0]), g[:, 1], g[:, 0])
        ba = np.where(np.isnan(g[:, 2]), g[:, 3], g[:, 2])
        points = []
        for i in range(len(g)):
            x, y = _opt(ab[i]), _opt(ba[i])
            known = [v for v in (x, y) if v is not None]
            util = max(known) / link.capacity_gbps if known and link.capacity_gbps > 0 else None
            points.append(HistoryPoint(now - (len(g) - 1 - i) * step, x, y, util))
        return points

    # -- the archive -------------------------------------------------------------
    def segment(self, start: float, end: float) -> Segment | None:
        """The rates ending in ``(start, end]``, packed (:func:`controller.telemetry.archive.segment`)."""
        with self._lock:
            return segment(self.store, start, end)

    def restore(self, blobs: list[bytes]) -> int:
        """Merge stored segments into the windows (:func:`controller.telemetry.archive.restore`)."""
        with self._lock:
            return restore(self.store, blobs)

    def tor_series(self, intent: Intent, plan: Plan | None, now: float, window_s: float) -> tuple[Method, Series]:
        """The method and the ToR-to-ToR series of the measured traffic: the per-interval AFT matrices, or
        tomogravity's single mean matrix."""
        keys, rates, step = self.demand_series(intent, now, window_s)
        if keys:
            return "aft", tor_series(intent, keys, rates, step)
        view = self.demand(intent, plan, now, window_s)
        return view.method, matrix_series(intent, view.demands, step)

    def patterns(self, intent: Intent, plan: Plan | None, now: float, window_s: float,
                 options: PatternOptions | None = None) -> tuple[Method, list[Group]]:
        """The method (``aft`` or ``tomogravity``) and the communication groups of the measured traffic
        (:func:`controller.telemetry.patterns.classify` on :meth:`tor_series`)."""
        method, series = self.tor_series(intent, plan, now, window_s)
        return method, classify(series, options, intent.registry)

    def routing(self, intent: Intent, plan: Plan) -> RoutingMatrix:
        """The routing matrix of ``plan`` (directed edges x (ingress, prefix) pairs), kept for the last pair."""
        with self._lock:
            return self._routing_matrix(intent, plan)

    def _routing_matrix(self, intent: Intent, plan: Plan) -> RoutingMatrix:
        key = (intent.content_hash, id(plan))
        if self._routing is None or self._routing[0] != key:
            self._routing = (key, routing_matrix(intent, plan))
        return self._routing[1]

    def _estimate(self, intent: Intent, plan: Plan, now: float, window_s: float, stat: str) -> DemandView:
        rm = self._routing_matrix(intent, plan)
        views = self.links(intent, now, window_s, stat)
        y = np.zeros(rm.topo.n_edges)
        known = np.zeros(rm.topo.n_edges, dtype=bool)
        for i, v in enumerate(views):
            if v.gbps_ab is not None and v.fresh:
                y[2 * i], known[2 * i] = v.gbps_ab, True
            if v.gbps_ba is not None and v.fresh:
                y[2 * i + 1], known[2 * i + 1] = v.gbps_ba, True
        if not known.any():
            return DemandView("tomogravity", {})
        est = tomogravity(rm, y, measured=known)
        return DemandView("tomogravity", est.demands(threshold=1e-6), est.residual)

    def fidelity(self, intent: Intent, plan: Plan, now: float, window_s: float, stat: str = "mean") -> Fidelity:
        """The plan's predicted utilization per link under the measured demand, beside the observed one."""
        measured = self.demand(intent, plan, now, window_s, stat)
        known = {p.prefix for p in intent.prefixes}
        demands = {k: g for k, g in measured.demands.items() if k[0] in intent.device_map and k[1] in known}
        load = link_loads(intent, plan, demands)
        observed = self.links(intent, now, window_s, stat)
        rows: list[FidelityLink] = []
        errors: list[float] = []
        for i, (lk, ob) in enumerate(zip(intent.links, observed, strict=True)):
            cap = lk.capacity_gbps or 1.0
            pred = max(load[2 * i], load[2 * i + 1]) / cap
            obs = ob.utilization if ob.fresh else None
            err = None if obs is None else obs - pred
            if err is not None:
                errors.append(abs(err))
            rows.append(FidelityLink(lk.a, lk.a_port, lk.b, lk.b_port, float(pred), obs, err))
        worst = max(errors) if errors else None
        p95 = float(np.percentile(errors, 95)) if errors else None
        return Fidelity(tuple(rows), worst, p95, measured.method)

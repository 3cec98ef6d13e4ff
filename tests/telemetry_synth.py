"""Synthetic gNMI samples for the telemetry tests and bench: the counters a fabric
would stream if it carried ``demands`` through ``plan`` (safety's propagation
is the oracle), as plain :class:`controller.telemetry.Sample` values."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from controller.model import Intent
from controller.model.plan import Plan
from controller.telemetry import Sample, aft_path, interface_path
from safety.estimate import link_loads

__all__ = ["OCTETS_PER_GBPS", "Fabric"]

OCTETS_PER_GBPS = 1e9 / 8


class Fabric:
    """Counters of a fabric at a constant demand: ``samples(t_s)`` reads every counter at second ``t_s``
    (counting from ``t0`` at zero plus ``base``, so tests can start counters anywhere, e.g. near 2**64).
    ``aft_zeros=False`` leaves out the AFT entries that carry nothing (a large fabric's bench)."""

    def __init__(self, intent: Intent, plan: Plan, demands: Mapping[tuple[str, str], float] | None = None, *,
                 aft: bool = True, aft_zeros: bool = True, t0: float = 1_700_000_000.0, base: int = 0):
        self.intent, self.t0, self.base, self.aft = intent, t0, base, aft
        self.demands = dict(demands) if demands is not None else {(d.from_, d.to): d.gbps for d in intent.demands}
        self.load = link_loads(intent, plan, self.demands)
        rates: dict[tuple[str, str], float] = {}
        for i, lk in enumerate(intent.links):
            ab, ba = self.load[2 * i] * OCTETS_PER_GBPS, self.load[2 * i + 1] * OCTETS_PER_GBPS
            rates[(lk.a, interface_path(lk.a_port, "out-octets"))] = ab
            rates[(lk.b, interface_path(lk.b_port, "in-octets"))] = ab
            rates[(lk.b, interface_path(lk.b_port, "out-octets"))] = ba
            rates[(lk.a, interface_path(lk.a_port, "in-octets"))] = ba
        if aft:  # every device serves an entry per prefix; only host traffic counts (at the ingress ToR)
            for d in intent.devices:
                for p in intent.prefixes:
                    g = self.demands.get((d.name, p.prefix), 0.0)
                    if g > 0 or aft_zeros:
                        rates[(d.name, aft_path(p.prefix))] = g * OCTETS_PER_GBPS
        self.keys = list(rates)
        self.rates = np.array([rates[k] for k in self.keys])

    def samples(self, t_s: float, *, skip: frozenset[str] = frozenset()) -> list[Sample]:
        ns = int(round(t_s * 1e9))
        values = ((self.rates * (t_s - self.t0)).astype(np.int64).astype(object) + self.base) % 2**64
        return [Sample(dev, path, int(v), ns) for (dev, path), v in zip(self.keys, values, strict=True)
                if dev not in skip]

    def truth(self) -> dict[tuple[str, str], float]:
        return {k: g for k, g in self.demands.items() if g > 0}

"""Telemetry in the controller: counter windows, rates, link and demand views, fidelity.

The serving process keeps one :class:`Telemetry` (``app.state.telemetry``) and
feeds it plain samples (``Telemetry.ingest(samples, now)``); everything here is
pure (no I/O, ``now`` a parameter). See :mod:`controller.telemetry.counters`
for the rules on resets, wraps, late and stale samples.
"""

from controller.telemetry.collector import (
    DemandView,
    Fidelity,
    FidelityLink,
    LinkView,
    Telemetry,
    aft_path,
    interface_path,
)
from controller.telemetry.counters import STATS, CounterStore, Options, Sample, WindowStats

__all__ = ["STATS", "CounterStore", "DemandView", "Fidelity", "FidelityLink", "LinkView", "Options", "Sample",
           "Telemetry", "WindowStats", "aft_path", "interface_path"]

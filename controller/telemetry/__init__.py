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
from controller.telemetry.patterns import PATTERNS, Group, Series, classify, tor_series
from controller.telemetry.patterns import Options as PatternOptions

__all__ = ["PATTERNS", "STATS", "CounterStore", "DemandView", "Fidelity", "FidelityLink", "Group", "LinkView",
           "Options", "PatternOptions", "Sample", "Series", "Telemetry", "WindowStats", "aft_path", "classify",
           "interface_path", "tor_series"]

"""Plain ECMP loads: the baseline every plan reports beside its WCMP result.

This module owns the quick answer "what would equal splitting over the
routing's next hops do": route classes, commodities and one propagation, no
LP. The Clos generator uses it to scale demand matrices to a target load.
"""

from __future__ import annotations

from controller.model import Intent
from solver.clos.model import build_pod_model
from solver.core.fabric import build_fabric
from solver.core.routing import route_classes
from solver.wcmp import build_commodities, ecmp_ratios, propagate

__all__ = ["ecmp_max_utilization"]


def ecmp_max_utilization(intent: Intent) -> float:
    """The largest link utilization (either direction) under plain ECMP.

    A clean 3-tier Clos goes through the pod-level model of :mod:`solver.clos.model`
    (one BGP simulation per pod); anything else through the route classes.
    """
    fab = build_fabric(intent)
    model = build_pod_model(fab)
    if model is not None:
        loads = model.loads(model.ecmp_x())
    else:
        com = build_commodities(fab, route_classes(fab))
        loads = propagate(com, ecmp_ratios(com))[1]
    return float((loads / fab.arc_cap).max()) if len(loads) else 0.0

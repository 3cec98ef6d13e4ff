"""Loom's solver: a library that turns a validated fabric into a forwarding plan.

It owns routing (RFC 7938 BGP, IS-IS and OSPF next-hop sets, :mod:`solver.core.routing`),
the WCMP linear program (:mod:`solver.wcmp`, backends in :mod:`solver.core.lp`),
integer weight reduction (:mod:`solver.core.weights`) and the plan assembly
(:mod:`solver.solve`, tuned by :mod:`solver.core.options`; the plan type it returns is the ground layer's
:mod:`controller.model.plan`). No database, HTTP
or gRPC: values in, values out.
"""

from __future__ import annotations

from solver.core.lp import BACKENDS, DEFAULT_BACKEND
from solver.core.options import ClosOptions, RobustOptions
from solver.solve import solve

__all__ = ["BACKENDS", "DEFAULT_BACKEND", "ClosOptions", "RobustOptions", "solve"]

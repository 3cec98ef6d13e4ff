"""Loom's solver: a library that turns a validated fabric into a forwarding plan.

It owns routing (RFC 7938 BGP and IS-IS next-hop sets, :mod:`solver.routing`),
the WCMP linear program (:mod:`solver.wcmp`, backends in :mod:`solver.lp`),
integer weight reduction (:mod:`solver.weights`) and the plan assembly
(:mod:`solver.solve`, tuned by :mod:`solver.options`; the plan type it returns is the ground layer's
:mod:`controller.model.plan`). No database, HTTP
or gRPC: values in, values out.
"""

from __future__ import annotations

from solver.lp import BACKENDS, DEFAULT_BACKEND
from solver.options import ClosOptions, RobustOptions
from solver.solve import solve

__all__ = ["BACKENDS", "DEFAULT_BACKEND", "ClosOptions", "RobustOptions", "solve"]

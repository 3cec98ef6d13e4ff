"""The pod-level pipeline of a clean 3-tier RFC 7938 Clos: model, LP, rounding, plan, robust plan.

This package owns the fast path :func:`solver.solve` takes on a clean Clos.
:mod:`solver.clos.model` decomposes the fabric into pods and planes (the
:class:`~solver.clos.model.PodModel` and its linear load rows),
:mod:`solver.clos.relax` solves its LP through the spine-transport relaxation
on large fabrics, :mod:`solver.clos.rounding` and :mod:`solver.clos.repair`
turn the LP's splits into integer weights, :mod:`solver.clos.plan` assembles
the plan and :mod:`solver.clos.robust` the FFC-style robust candidates.
"""

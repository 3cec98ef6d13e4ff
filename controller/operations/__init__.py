"""Operational state and failure reaction (DESIGN.md): the fabric as its switches report it, and what the
leader does when a part of it fails. :mod:`.view` is the pure view, :mod:`.overlay` the failed parts a plan
leaves out, :mod:`.reaction` the damping and the judgement, :mod:`.stream` the gNMI feed and :mod:`.service`
the wiring to the store and the change engine."""

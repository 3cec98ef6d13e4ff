"""Discovery of a running FRR fabric: what its routers run, read back as an intent (DESIGN.md "Adoption").

:mod:`southbound.discovery.observed` holds what a reader gathered of one router
(its running configuration, its interfaces); :mod:`southbound.discovery.frr_text`
parses FRR's configuration text; :mod:`southbound.discovery.infer` turns the
routers into an intent document with pinned numbering and the questions it
could not decide. The readers (a lab's namespaces, the device agents) live with
the transports they use.
"""

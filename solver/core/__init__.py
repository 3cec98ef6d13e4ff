"""What every planning path of the solver stands on: the fabric graph (:mod:`solver.core.fabric`),
BGP, IS-IS and OSPF next hops (:mod:`solver.core.routing`), the LP backends (:mod:`solver.core.lp`), integer
weight reduction (:mod:`solver.core.weights`) and the tuning options (:mod:`solver.core.options`).
The Clos pipeline (:mod:`solver.clos`) and the general path (:mod:`solver.solve`) import it, never the
other way round, so the solver's packages import one way."""

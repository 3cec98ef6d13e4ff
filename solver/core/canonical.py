"""One order for an intent's lists, so that a plan depends on what the intent says, not on how it is written.

An LP with several optimal weightings may pick another one when its variables
come in another order, so a reordered document (the same fabric) would get
other weights on every switch. :func:`canonical_order` sorts the lists the
solver reads (devices by name, links by their lower end and turned to run from
it, failure domains by name, prefixes by address, demands by ingress and
destination, jobs by name); :func:`as_written` gives the plan of the sorted
intent back in the document's order of devices and links and in its links'
directions, so the plan document reads as it always did.

Pure: no I/O.
"""

from __future__ import annotations

import ipaddress
from dataclasses import replace

from controller.model import Intent, Link
from controller.model.plan import LinkLoad, Plan

__all__ = ["as_written", "canonical_links", "canonical_order"]


def _net(prefix: str) -> tuple[int, int, int]:
    n = ipaddress.ip_network(prefix)
    return n.version, int(n.network_address), n.prefixlen


def _turned(lk: Link) -> Link:
    if lk.end_a <= lk.end_b:
        return lk
    return lk.model_copy(update={"a": lk.b, "a_port": lk.b_port, "b": lk.a, "b_port": lk.a_port})


def canonical_order(intent: Intent) -> Intent:
    """``intent`` with its lists in one order whatever the document's (see the module docstring);
    policies keep theirs, and a prefix's origins and a job's members are meanings, not order.

    >>> from controller.model.intent import validate_intent
    >>> i = validate_intent({"name": "x", "devices": [{"name": "b", "role": "router"},
    ...     {"name": "a", "role": "router"}], "links": [{"a": "b", "a_port": "e1", "b": "a", "b_port": "e1"}],
    ...     "routing": "isis"})
    >>> c = canonical_order(i)
    >>> [d.name for d in c.devices], (c.links[0].a, c.links[0].b)
    (['a', 'b'], ('a', 'b'))
    """
    # each address parsed once: a large fabric's demands name a few thousand prefixes tens of thousands of times
    nets = {p: _net(p) for p in {*(p.prefix for p in intent.prefixes), *(x.to for x in intent.demands)}}
    return intent.model_copy(update={
        "devices": tuple(sorted(intent.devices, key=lambda d: d.name)),
        "links": canonical_links(intent),
        "failure_domains": tuple(sorted(intent.failure_domains, key=lambda f: f.name)),
        "prefixes": tuple(sorted(intent.prefixes, key=lambda p: nets[p.prefix])),
        "demands": tuple(sorted(intent.demands, key=lambda x: (x.from_, nets[x.to], x.gbps))),
        "jobs": tuple(sorted(intent.jobs, key=lambda j: j.name)),
    })


def canonical_links(intent: Intent) -> tuple[Link, ...]:
    """``intent``'s links as :func:`canonical_order` lists them: each turned to run from its lower end, by key."""
    return tuple(sorted((_turned(lk) for lk in intent.links), key=lambda lk: lk.key))


def as_written(plan: Plan, intent: Intent) -> Plan:
    """``plan`` (of ``canonical_order(intent)``) with its devices and links in ``intent``'s order and
    each link's loads in the direction ``intent`` writes it."""
    loads = {min(f"{x.a}:{x.a_port}", f"{x.b}:{x.b_port}"): x for x in plan.links}
    links: list[LinkLoad] = []
    for lk in intent.links:
        x = loads.get(lk.key)
        if x is None:
            continue
        if (x.a, x.a_port) != (lk.a, lk.a_port):
            x = LinkLoad(x.b, x.b_port, x.a, x.a_port, x.gbps_ba, x.gbps_ab, x.utilization)
        links.append(x)
    devices = {d.name: plan.devices[d.name] for d in intent.devices if d.name in plan.devices}
    devices.update((name, dp) for name, dp in plan.devices.items() if name not in devices)
    return replace(plan, devices=devices, links=tuple(links))

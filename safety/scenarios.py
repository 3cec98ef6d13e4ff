"""Failure scenarios: which parts of a fabric fail together, named as DESIGN.md fixes.

This module owns scenario enumeration for the safety replay. The scenarios of
an intent are the ``baseline`` (nothing failed); every declared failure domain
(named after the domain); with ``failure_tolerance`` ``scope: all_single`` also
every single link (``link:DEVICE:PORT``, the link's lower end by name, i.e.
:attr:`controller.model.Link.key`) and every single device (``device:NAME``);
with ``scope: k2`` also every pair of declared domains (``A+B``). A domain's
link ends are resolved to whole links: a failed end fails its link. Scenario
counts can be large (every single part of a Clos L is about 27k scenarios, the
domain pairs of many domains grow quadratically), so :func:`count_scenarios`
answers without building them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import combinations

from controller.model import FailureDomain, FailureToleranceScope, Intent
from controller.model.documents.base import JsonObject
from safety.report import Shipped

__all__ = ["Scenario", "count_scenarios", "pair", "scenario_scope", "scenarios", "singles"]

#: Kinds, in the order the report lists them (``pair``: two single links or devices,
#: see :func:`pair`; only the ``single_pairs`` sweep of :mod:`safety.sweep` makes them).
KINDS = ("baseline", "domain", "domain_pair", "link", "device", "pair")


@dataclass(frozen=True, slots=True)
class Scenario(Shipped):
    """One failure scenario: its ``name``, ``kind`` and the failed parts.

    ``devices`` are device names; ``links`` are link keys (``Link.key``). The
    links of a failed device are not listed: a failed device implies them.
    """

    name: str
    kind: str
    devices: frozenset[str] = field(default_factory=frozenset)
    links: frozenset[str] = field(default_factory=frozenset)

    @property
    def is_baseline(self) -> bool:
        return not self.devices and not self.links

    def to_document(self) -> JsonObject:
        return {"name": self.name, "kind": self.kind,
                "devices": [d for d in sorted(self.devices)], "links": [x for x in sorted(self.links)]}


def scenario_scope(intent: Intent) -> FailureToleranceScope | None:
    """The ``failure_tolerance`` scope of the intent, or ``None`` (domains only)."""
    pol = intent.policy("failure_tolerance")
    return None if pol is None else FailureToleranceScope(pol.scope)


def _domain_scenario(intent: Intent, fd: FailureDomain) -> Scenario:
    links = frozenset(intent.link_by_end[e].key for e in fd.links if e in intent.link_by_end)
    return Scenario(fd.name, "domain", frozenset(fd.devices), links)


def count_scenarios(intent: Intent, scope: FailureToleranceScope | str | None = None) -> dict[str, int]:
    """How many scenarios of each kind :func:`scenarios` yields (and ``total``).

    >>> from controller.model.intent import validate_intent
    >>> it = validate_intent({"name": "x", "routing": "isis", "devices": [{"name": "r1"}], "links": []})
    >>> count_scenarios(it)["total"]
    1
    """
    sc = _scope(intent, scope)
    nd = len(intent.failure_domains)
    counts = {"baseline": 1, "domain": nd, "domain_pair": 0, "link": 0, "device": 0}
    if sc == FailureToleranceScope.K2:
        counts["domain_pair"] = nd * (nd - 1) // 2
    if sc == FailureToleranceScope.ALL_SINGLE:
        counts["link"] = len(intent.links)
        counts["device"] = len(intent.devices)
    counts["total"] = sum(counts.values())
    return counts


def _scope(intent: Intent, scope: FailureToleranceScope | str | None) -> FailureToleranceScope | None:
    if scope is None:
        return scenario_scope(intent)
    return FailureToleranceScope(scope)


def scenarios(intent: Intent, scope: FailureToleranceScope | str | None = None) -> Iterator[Scenario]:
    """Yield the scenarios of ``intent`` (``scope`` overrides the policy's).

    Order: baseline, declared domains, domain pairs (``k2``), single links and
    single devices (``all_single``), each in document order.
    """
    sc = _scope(intent, scope)
    yield Scenario("baseline", "baseline")
    domains = [_domain_scenario(intent, fd) for fd in intent.failure_domains]
    yield from domains
    if sc == FailureToleranceScope.K2:
        for a, b in combinations(domains, 2):
            yield Scenario(f"{a.name}+{b.name}", "domain_pair", a.devices | b.devices, a.links | b.links)
    if sc == FailureToleranceScope.ALL_SINGLE:
        yield from singles(intent)


def singles(intent: Intent) -> Iterator[Scenario]:
    """Every single link, then every single device, in document order."""
    for link in intent.links:
        yield Scenario(f"link:{link.key}", "link", frozenset(), frozenset({link.key}))
    for dev in intent.devices:
        yield Scenario(f"device:{dev.name}", "device", frozenset({dev.name}), frozenset())


def pair(a: Scenario, b: Scenario) -> Scenario:
    """Two single failures at once: ``pair`` kind, named ``A+B`` like a domain pair."""
    return Scenario(f"{a.name}+{b.name}", "pair", a.devices | b.devices, a.links | b.links)

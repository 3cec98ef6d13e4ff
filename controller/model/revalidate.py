"""Incremental validation: proving that a small edit of a valid intent leaves it valid.

:func:`controller.model.intent.validate_intent` checks a whole document; on a
fabric of 100,000 devices that takes seconds. Most edits touch one or a few
objects of an intent that was valid a moment ago, and most of the rules cannot
see the difference. This module decides, for a valid *base* intent and a list
of :class:`Change` (an object added, removed or replaced), whether the result
is **provably** valid without checking it whole:

* each new or changed object passes its own shape rules (pydantic, the same
  ones as the whole-document pass; the caller builds it with :func:`shape`);
* the cross-object rules (the second pass of ``validate_intent``) read only the
  **reference fields** of each object (:data:`REFERENCE_FIELDS`: names,
  endpoints, origins, ASNs, roles...; never a capacity, a metric, a demand's
  size or a failure domain's kind). A replacement that keeps them equal gives
  every cross-object rule the same inputs, hence the same (empty) verdict;
* nothing refers to failure domains, policies, demands or jobs
  (:data:`LEAF_SECTIONS`), so when only those change in their reference fields,
  re-running *their* rules against the base's devices, links and prefixes
  (:class:`Context`) is the whole second pass again.

Anything else (a new device, a re-cabled link, a changed ASN, the routing or
the defaults) is not proven that way: :func:`proven_valid` answers ``False``
and the caller runs every cross-object rule on the whole result
(:func:`cross_object_valid`, on the objects it already has: only the changed
ones are built again), and when that finds anything, validates the document
whole, which is where every located error comes from. This module never reports errors of its own, so the messages
a client sees are exactly those of the whole-document pass. A test holds
:data:`REFERENCE_FIELDS` (and :data:`BOUNDED_FIELDS`, a link's metric, which
only OSPF's 16-bit cost bounds) against what the rules really read.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from controller.model.domain import MAX_OSPF_COST, Intent, Link, Routing
from controller.model.errors import IntentError
from controller.model.intent import (
    _SECTIONS,
    _check_demands,
    _check_devices,
    _check_failure_domains,
    _check_jobs,
    _check_links,
    _check_meaning,
    _check_policies,
    _check_prefixes,
    _Refs,
    _shape,
    _shape_policy,
)

__all__ = ["BOUNDED_FIELDS", "LEAF_SECTIONS", "REFERENCE_FIELDS", "Change", "Context", "cross_object_valid",
           "projection", "proven_valid", "shape"]

#: per section, the attributes a cross-object rule reads only against a bound that depends on the routing
#: (OSPF's 16-bit costs): :func:`proven_valid` never proves an edit that takes one past the tightest bound,
#: and proves every other as if the rules did not read it
BOUNDED_FIELDS: dict[str, tuple[str, ...]] = {"links": ("metric",)}
#: per section, the attributes of an object that the cross-object rules read (policies: every field they have)
REFERENCE_FIELDS: dict[str, tuple[str, ...]] = {
    "devices": ("name", "role", "pod", "plane", "asn", "loopback", "router_id", "bgp", "host_ports",
                "ospf", "isis"),
    "links": ("a", "a_port", "b", "b_port", "a_address", "b_address"),
    "failure_domains": ("name", "devices", "links"),
    "prefixes": ("prefix", "origins"),
    "policies": ("kind", "target", "mode", "realization"),
    "demands": ("from_", "to"),
    "jobs": ("name", "tors", "collective", "params", "bytes_per_iter"),
}

#: sections no other section refers to: their rules can be re-run alone
LEAF_SECTIONS = frozenset({"failure_domains", "policies", "demands", "jobs"})


@dataclass(frozen=True)
class Change:
    """One object of ``section`` added (``old`` None), removed (``new`` None) or replaced."""

    section: str
    old: Any | None
    new: Any | None


def projection(section: str, obj: Any) -> tuple[Any, ...]:
    """The reference fields of ``obj`` (and its type: a policy's kind is its class)."""
    return (type(obj), *(getattr(obj, f, None) for f in REFERENCE_FIELDS[section]))


def shape(section: str, value: Any, index: int) -> Any | None:
    """``value`` built as an object of ``section`` (the first pass of ``validate_intent`` for one
    element at ``index``), or ``None`` when it has any shape error."""
    errors: list[IntentError] = []
    if section == "policies":
        obj = _shape_policy(index, value, errors)
    else:
        obj = _shape(_SECTIONS[section], value, (section, index), errors)
    return None if errors else obj


class Context:
    """What the rules of the leaf sections look names up in, taken from a valid intent: its
    devices and link ends, its prefixes and their origins, its routing. Built once per base
    (linear in the fabric) and reused by every edit that leaves devices, links and prefixes
    as they were."""

    def __init__(self, intent: Intent):
        names_seen: dict[str, set[str]] = defaultdict(set)
        names_seen["devices"] = {d.name for d in intent.devices}
        names_seen["ports"] = {end for link in intent.links for end in (link.end_a, link.end_b)}
        names_seen["prefixes"] = {p.prefix for p in intent.prefixes}
        self.refs = _Refs(names_seen)
        self.routing: Routing = intent.routing
        self.registry = intent.registry
        errors: list[IntentError] = []
        _check_devices(list(enumerate(intent.devices)), self.refs, errors)
        _check_links(list(enumerate(intent.links)), self.refs, errors)
        self.prefix_items = list(enumerate(intent.prefixes))
        self.prefix_index = _check_prefixes(self.prefix_items, self.refs, errors)
        #: False when the base itself breaks a rule here: then nothing can be proven from it
        self.sound = not errors

    def check(self, section: str, objects: Sequence[Any]) -> list[IntentError]:
        """The errors of the cross-object rules of leaf ``section`` holding ``objects``."""
        errors: list[IntentError] = []
        items = list(enumerate(objects))
        if section == "failure_domains":
            _check_failure_domains(items, self.refs, errors)
        elif section == "policies":
            _check_policies(items, self.routing, self.refs, errors)
        elif section == "demands":
            _check_demands(items, self.prefix_index, self.refs, errors)
        elif section == "jobs":
            _check_jobs(items, self.prefix_items, self.refs, errors, registry=self.registry)
        else:
            raise ValueError(f"{section} is not a leaf section")
        return errors


def proven_valid(changes: Iterable[Change], sections: Mapping[str, Sequence[Any]], context: Any) -> bool:
    """True when the base intent (valid, with the same name, routing and defaults) with
    ``changes`` applied is valid, proven without checking it whole; False when it cannot be
    proven this way (validate the document whole then: it may still be valid).

    ``sections`` are the resulting objects of each section in document order (only the
    sections with changes are read); ``context`` is a callable returning the base's
    :class:`Context` (built only when a leaf section needs its rules re-run). Every object in
    ``changes`` must have passed :func:`shape`.
    """
    structural: set[str] = set()
    for c in changes:
        if c.section == "links" and c.new is not None and getattr(c.new, "metric", 0) > MAX_OSPF_COST:
            return False  # a cost OSPF cannot carry (BOUNDED_FIELDS): the whole pass decides, knowing the routing
        if c.old is None or c.new is None or projection(c.section, c.old) != projection(c.section, c.new):
            structural.add(c.section)
    if not structural:
        return True  # every cross-object rule reads what it read in the valid base
    if not structural <= LEAF_SECTIONS:
        return False
    ctx: Context = context()
    if not ctx.sound:
        return False
    return all(not ctx.check(s, sections[s]) for s in sorted(structural))


def cross_object_valid(routing: Routing, sections: Mapping[str, Sequence[Any]]) -> bool:
    """True when objects that each passed :func:`shape` (``sections``: every section's, in document
    order) also pass every cross-object rule: the second pass of ``validate_intent`` run on objects
    already built, so unchanged objects are not built again. False when any rule fails (validate
    the document whole then, for the located errors). Jobs are checked against the built-in
    collectives only: a job naming an intent's own template answers False, and the whole-document
    pass, which reads the intent's ``collectives:``, decides."""
    names_seen: dict[str, set[str]] = defaultdict(set)
    names_seen["devices"] = {d.name for d in sections["devices"]}
    names_seen["ports"] = {end for link in sections["links"] for end in (link.end_a, link.end_b)}
    names_seen["prefixes"] = {p.prefix for p in sections["prefixes"]}
    items = {s: list(enumerate(sections[s])) for s in (*_SECTIONS, "policies")}
    errors: list[IntentError] = []
    _check_meaning(routing, items, names_seen, errors, structure=True)
    return not errors


# The links' ends are read through these properties: they stand for the reference fields they are made of.
DERIVED_FIELDS: dict[str, tuple[str, ...]] = {
    name: fields for name, fields in (("end_a", ("a", "a_port")), ("end_b", ("b", "b_port")),
                                      ("key", ("a", "a_port", "b", "b_port")))
    if isinstance(getattr(Link, name, None), property)
}

"""Intent documents: reading, whole-document validation and writing.

A document is accepted whole or not at all (DESIGN.md, contract 1). Validation
runs in two passes and reports every error at once, each with its location in
the document (``links[7].b: unknown device 'leaf-9-9'``):

1. shape: each top-level field and each list element on its own, so one bad
   device does not hide the errors of the next;
2. meaning: names, references, ports, prefixes, policies, demands (run on a
   malformed element too, over the fields that are valid on their own, so a
   link with a bad capacity still reports its unknown device), and for
   ``routing: bgp`` the RFC 7938 Clos rules (links join adjacent tiers, every
   lower tier has uplinks, ASN plan of RFC 7938 section 5.2.1: each ToR its own
   ASN, a pod's leaves one ASN, a plane's spines one ASN, groups distinct; a
   pod groups ToRs and leaves, a plane leaves and spines, so a role change that
   keeps the tiers adjacent, a ToR made a spine, is still refused).

The optional ``collectives:`` mapping (DESIGN.md, ML workloads) holds the
intent's own traffic templates, each checked by
:func:`controller.model.collectives.parse_template` and located under its
name (``collectives.NAME.phases[2].to: unknown name 'j' ...``); a job's
``collective`` must name one of them or a built-in, and its ``params`` fill
that template for its members (``jobs[0].params.skew: expected a 4 x 4 matrix ...``).
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import TypeAdapter, ValidationError

from controller.model import (
    LINK_STATE,
    MAX_OSPF_COST,
    POLICY_KINDS,
    TIER,
    AutoTePolicy,
    Defaults,
    Demand,
    Device,
    DrainPolicy,
    FailureDomain,
    FailureReactionPolicy,
    FailureTolerancePolicy,
    InsightPolicy,
    Intent,
    Job,
    Link,
    PathsPolicy,
    Policy,
    Prefix,
    Role,
    Routing,
    Underlay,
    UtilizationLimitPolicy,
    WcmpPolicy,
    parse_link_end,
)
from controller.model.collectives import Registry
from controller.model.collectives_builtin import BUILTINS
from controller.model.collectives_check import check_collectives, check_job_collective
from controller.model.errors import IntentError, InvalidIntent
from controller.model.families import check_families
from controller.model.pins import check_forms, check_host_ports, check_pins, check_pools
from controller.model.text import DEFAULT_LIMITS, TextLimits, decode_utf8, format_loc, load_json, load_yaml

__all__ = ["dump_intent", "load_intent", "parse_intent_text", "validate_intent", "validate_job", "format_loc",
           "with_job"]

_SECTIONS: dict[str, type] = {
    "devices": Device,
    "links": Link,
    "failure_domains": FailureDomain,
    "prefixes": Prefix,
    "demands": Demand,
    "jobs": Job,
}
_POLICY_TYPES: dict[str, type] = dict(zip(POLICY_KINDS, (
    DrainPolicy, UtilizationLimitPolicy, FailureTolerancePolicy, WcmpPolicy, PathsPolicy, AutoTePolicy,
    FailureReactionPolicy, InsightPolicy), strict=True))
_TOP_KEYS = ("name", "routing", "defaults", "devices", "links", "failure_domains", "prefixes",
             "policies", "demands", "jobs", "collectives")
_REQUIRED = ("name", "devices", "links")
_SINGLETON_POLICIES = tuple(k for k in POLICY_KINDS if k != "drain")
_ADAPTERS: dict[type, TypeAdapter[Any]] = {}
_FIELD_ADAPTERS: dict[tuple[type, str], TypeAdapter[Any]] = {}


def _message(err: Mapping[str, Any]) -> str:
    kind = err.get("type", "")
    if kind == "extra_forbidden":
        return "unknown field"
    if kind == "missing":
        return "required field missing"
    msg = str(err.get("msg", "invalid"))
    for prefix in ("Value error, ", "Assertion failed, "):
        if msg.startswith(prefix):
            msg = msg[len(prefix):]
    if msg[:2].isupper():
        return msg
    return msg[:1].lower() + msg[1:]


def _shape(model: type, value: Any, base: tuple[Any, ...], errors: list[IntentError]) -> Any | None:
    adapter = _ADAPTERS.get(model)
    if adapter is None:
        adapter = _ADAPTERS[model] = TypeAdapter(model)
    try:
        return adapter.validate_python(value)
    except ValidationError as exc:
        for e in exc.errors():
            errors.append(IntentError(format_loc(base + tuple(e["loc"])), _message(e)))
        return None


def _element_name(value: Any) -> str | None:
    return value.get("name") if isinstance(value, dict) and isinstance(value.get("name"), str) else None


def _note_raw_refs(section: str, value: Any, names_seen: dict[str, set[str]]) -> None:
    """Remember what a malformed element still declares, so that its own error
    is not followed by 'unknown' errors wherever it is referenced."""
    if not isinstance(value, dict):
        return
    if section == "links":
        for dev, port in ((value.get("a"), value.get("a_port")), (value.get("b"), value.get("b_port"))):
            if isinstance(dev, str) and isinstance(port, str):
                names_seen["ports"].add(f"{dev}:{port}")
    elif section == "prefixes" and isinstance(value.get("prefix"), str):
        try:
            names_seen["prefixes"].add(str(ipaddress.ip_network(value["prefix"], strict=False)))
        except ValueError:
            pass


def _doc_order(err: IntentError) -> tuple[int, int]:
    head = err.loc.split(".")[0].split("[")[0]
    m = re.match(r"^[a-z_]+\[(\d+)\]", err.loc)
    rank = _TOP_KEYS.index(head) if head in _TOP_KEYS else -1
    return (rank, int(m.group(1)) if m else -1)


def validate_intent(doc: Any) -> Intent:
    """Validate a parsed document (a mapping) and build the frozen :class:`Intent`.

    Raises :class:`InvalidIntent` listing every error, in document order.

    >>> validate_intent({"name": "x", "routing": "isis", "devices": [{"name": "r1"}], "links": []}).name
    'x'
    """
    errors: list[IntentError] = []
    if not isinstance(doc, dict):
        raise InvalidIntent([IntentError("", "an intent document must be a mapping of fields")])
    top, routing = _check_top(doc, errors)
    collectives, registry, malformed = check_collectives(doc.get("collectives"), errors)
    items, partial, names_seen = _shape_sections(doc, errors)
    shape_errors = bool(errors)
    merged = {section: sorted(good + partial[section], key=lambda e: e[0]) for section, good in items.items()}
    names_seen["collectives"] = malformed
    _check_meaning(routing, merged, names_seen, errors, structure=not shape_errors, registry=registry)
    check_families(routing, top["defaults"].underlay if "defaults" in top else
                   (None if "defaults" in doc else Underlay.IPV4_NUMBERED), merged, errors)
    if errors:
        errors.sort(key=_doc_order)
        raise InvalidIntent(errors)
    return Intent(
        **top,
        devices=tuple(o for _, o in items["devices"]),
        links=tuple(o for _, o in items["links"]),
        failure_domains=tuple(o for _, o in items["failure_domains"]),
        prefixes=tuple(o for _, o in items["prefixes"]),
        policies=tuple(o for _, o in items["policies"]),
        demands=tuple(o for _, o in items["demands"]),
        jobs=tuple(o for _, o in items["jobs"]),
        collectives=collectives,
    )


def _check_top(doc: dict[Any, Any], errors: list[IntentError]) -> tuple[dict[str, Any], Routing]:
    """The document's own fields: unknown and missing keys, ``name``, ``routing``, ``defaults``."""
    for key in doc:
        if key not in _TOP_KEYS:
            errors.append(IntentError(str(key), f"unknown field (expected one of {', '.join(_TOP_KEYS)})"))
    for key in _REQUIRED:
        if key not in doc:
            errors.append(IntentError(key, "required field missing"))
    top: dict[str, Any] = {}
    if "name" in doc:
        if not isinstance(doc["name"], str) or not doc["name"].strip():
            errors.append(IntentError("name", "must be a non-empty string"))
        elif len(doc["name"]) > 128:
            errors.append(IntentError("name", "must be at most 128 characters"))
        else:
            top["name"] = doc["name"]
    routing = Routing.BGP
    if "routing" in doc:
        try:
            routing = Routing(doc["routing"])
        except (ValueError, TypeError):
            errors.append(IntentError("routing", f"unknown routing {doc['routing']!r} (expected bgp, isis or ospf)"))
    top["routing"] = routing
    if "defaults" in doc:
        d = _shape(Defaults, doc["defaults"], ("defaults",), errors)
        if d is not None:
            top["defaults"] = d
    return top, routing


_Items = dict[str, list[tuple[int, Any]]]


class _Partial:
    """What a malformed element still declares: those of its fields that are valid on their own
    (an invalid one is absent), for the cross-object rules that need no more than them."""

    def __init__(self, model: type, values: dict[str, Any]):
        self.model = model
        self.__dict__.update(values)


def _field_value(model: Any, name: str, raw: Any) -> Any:
    """``raw`` validated as field ``name`` of ``model`` alone (its type, constraints and after-validators)."""
    adapter = _FIELD_ADAPTERS.get((model, name))
    if adapter is None:
        info = model.model_fields[name]
        form: Any = Annotated[(info.annotation, *info.metadata)] if info.metadata else info.annotation
        adapter = _FIELD_ADAPTERS[model, name] = TypeAdapter(form)
    value = adapter.validate_python(raw)
    for dec in model.__pydantic_decorators__.field_validators.values():
        if name in dec.info.fields and dec.info.mode == "after":
            value = dec.func(value)
    return value


def _salvage(model: Any, value: Any) -> _Partial | None:
    """The valid fields of a malformed element (defaults for those it leaves out), or ``None``
    when it is not even a mapping."""
    if not isinstance(value, dict):
        return None
    values: dict[str, Any] = {}
    for name, info in model.model_fields.items():
        key = info.alias or name
        if key not in value:
            if not info.is_required():
                values[name] = info.get_default(call_default_factory=True)
            continue
        try:
            values[name] = _field_value(model, name, value[key])
        except (ValidationError, ValueError, TypeError):
            continue
    return _Partial(model, values)


def _is(obj: Any, model: type) -> bool:
    """``obj`` is a ``model``, whole or salvaged."""
    return isinstance(obj, model) or (isinstance(obj, _Partial) and obj.model is model)


def _shape_sections(doc: dict[Any, Any], errors: list[IntentError]) -> tuple[_Items, _Items, dict[str, set[str]]]:
    """Every list element built alone (well-shaped ones kept with their index), what the malformed
    ones still declare (:func:`_salvage`), and the names seen, even of malformed elements, so
    that references to them are not reported as unknown."""
    items: _Items = {}
    partial: _Items = defaultdict(list)
    names_seen: dict[str, set[str]] = defaultdict(set)
    for section in (*_SECTIONS, "policies"):
        raw = doc.get(section, [])
        if raw is None:
            raw = []
        if not isinstance(raw, list):
            errors.append(IntentError(section, "must be a list"))
            items[section] = []
            continue
        good: list[tuple[int, Any]] = []
        for i, value in enumerate(raw):
            if section == "policies":
                obj = _shape_policy(i, value, errors)
                kind = value.get("kind") if isinstance(value, dict) else None
                model = _POLICY_TYPES.get(kind) if isinstance(kind, str) else None
            else:
                name = _element_name(value)
                if name:
                    names_seen[section].add(name)
                _note_raw_refs(section, value, names_seen)
                model = _SECTIONS[section]
                obj = _shape(model, value, (section, i), errors)
            if obj is not None:
                good.append((i, obj))
            elif model is not None and (salvaged := _salvage(model, value)) is not None:
                partial[section].append((i, salvaged))
        items[section] = good
    return items, partial, names_seen


def _shape_policy(i: int, value: object, errors: list[IntentError]) -> Policy | None:
    kind = value.get("kind") if isinstance(value, dict) else None
    if not isinstance(value, dict):
        errors.append(IntentError(f"policies[{i}]", "must be a mapping"))
        return None
    if not isinstance(kind, str) or kind not in _POLICY_TYPES:
        msg = ("required field missing" if kind is None else
               f"unknown policy kind {kind!r} (expected one of {', '.join(POLICY_KINDS)})")
        errors.append(IntentError(f"policies[{i}].kind", msg))
        return None
    return _shape(_POLICY_TYPES[kind], value, ("policies", i), errors)


class _Refs:
    """What cross-object rules look names up in: the devices (first of each name), every device
    name seen, the link ports in use."""

    def __init__(self, names_seen: dict[str, set[str]]):
        self.names_seen = names_seen
        self.devices: dict[str, Device] = {}
        self.device_index: dict[str, int] = {}
        self.ports: dict[tuple[str, str], int] = {}

    def unknown(self, name: str) -> bool:
        return name not in self.devices and name not in self.names_seen["devices"]

    def check_end(self, end: str) -> str | None:
        """Why ``DEVICE:PORT`` names no link end (``None`` when it does)."""
        try:
            dev, port = parse_link_end(end)
        except ValueError as exc:
            return str(exc)
        if self.unknown(dev):
            return f"unknown device '{dev}' in '{end}'"
        if (dev, port) not in self.ports and end not in self.names_seen["ports"]:
            return f"'{dev}' has no link on port '{port}'"
        return None


def _check_meaning(
    routing: Routing,
    items: _Items,
    names_seen: dict[str, set[str]],
    errors: list[IntentError],
    structure: bool = True,
    registry: Registry = BUILTINS,
) -> None:
    """Cross-object rules, over well-shaped elements and what malformed ones still declare
    (:class:`_Partial`: a rule needing a field it lacks skips it). ``structure`` is False when some
    element was malformed: rules that need the whole topology (uplinks) are skipped then, since
    their verdict would only echo the shape error; the Clos rules see only whole devices and links.
    ``registry`` holds the collectives jobs may name (the built-ins alone when the intent has none)."""
    refs = _Refs(names_seen)
    _check_devices(items["devices"], refs, errors)
    good_links = _check_links(items["links"], refs, errors)
    _check_failure_domains(items["failure_domains"], refs, errors)
    prefix_index = _check_prefixes(items["prefixes"], refs, errors)
    _check_policies(items["policies"], routing, refs, errors)
    _check_demands(items["demands"], prefix_index, refs, errors)
    _check_jobs(items["jobs"], items["prefixes"], refs, errors, registry=registry)
    if routing == Routing.BGP:
        _check_clos(refs.devices, refs.device_index, good_links, errors, uplinks=structure)
    elif routing == Routing.OSPF:  # a link's metric is its interface cost, which OSPF carries in 16 bits
        errors += [IntentError(f"links[{i}].metric", f"{lk.metric} is over {MAX_OSPF_COST}, the largest OSPF "
                               "interface cost (routing: ospf)") for i, lk in good_links if lk.metric > MAX_OSPF_COST]
    check_pools(items["devices"], items["links"], errors)
    check_forms(routing.value, items["devices"], items["links"], errors)
    check_host_ports(items["devices"], items["links"], items["prefixes"], errors)
    check_pins([(i, d) for i, d in items["devices"] if not isinstance(d, _Partial)],
               [(i, lk) for i, lk in items["links"] if not isinstance(lk, _Partial)], errors)


def _check_devices(devices: list[tuple[int, Any]], refs: _Refs, errors: list[IntentError]) -> None:
    """Duplicate names and loopbacks; fills ``refs.devices`` with the whole devices."""
    loopbacks: dict[str, str] = {}
    first: dict[str, int] = {}
    for i, d in devices:
        name = getattr(d, "name", None)
        if name is None:
            continue
        if name in first:
            errors.append(IntentError(f"devices[{i}].name",
                                      f"duplicate device '{name}' (first at devices[{first[name]}])"))
            continue
        first[name] = i
        if not isinstance(d, _Partial):
            refs.devices[name] = d
            refs.device_index[name] = i
        if getattr(d, "loopback", None) is not None:
            lb = str(d.loopback)
            if lb in loopbacks:
                errors.append(IntentError(f"devices[{i}].loopback", f"loopback {lb} already used by '{loopbacks[lb]}'"))
            else:
                loopbacks[lb] = name


def _check_links(links: list[tuple[int, Any]], refs: _Refs, errors: list[IntentError]) -> list[tuple[int, Link]]:
    """References, self-links, ports used twice; fills ``refs.ports``; returns the whole links between
    known devices that passed."""
    good_links: list[tuple[int, Link]] = []
    for i, link in links:
        bad = False
        a, b = getattr(link, "a", None), getattr(link, "b", None)
        for side, dev in (("a", a), ("b", b)):
            if dev is not None and refs.unknown(dev):
                errors.append(IntentError(f"links[{i}].{side}", f"unknown device '{dev}'"))
                bad = True
        if a is not None and a == b:
            errors.append(IntentError(f"links[{i}].b", f"link from '{a}' to itself"))
            bad = True
        for dev, port, side in ((a, getattr(link, "a_port", None), "a_port"), (b, getattr(link, "b_port", None),
                                                                                 "b_port")):
            if dev is None or port is None:
                continue
            if (dev, port) in refs.ports and a != b:
                errors.append(IntentError(f"links[{i}].{side}",
                                          f"port '{port}' of '{dev}' already used by links[{refs.ports[dev, port]}]"))
                bad = True
            else:
                refs.ports.setdefault((dev, port), i)
        if not bad and not isinstance(link, _Partial) and a in refs.devices and b in refs.devices:
            good_links.append((i, link))
    return good_links


def _domain_members(devices: Any, ends: Any, refs: _Refs) -> tuple[frozenset[str], frozenset[Any]]:
    """What a failure domain takes down: its devices, and its links by index (either end names one)."""
    links: set[Any] = set()
    for end in ends or ():
        try:
            links.add(refs.ports.get(parse_link_end(end), end))
        except ValueError:
            links.add(end)
    return frozenset(devices or ()), frozenset(links)


def _check_failure_domains(domains: list[tuple[int, Any]], refs: _Refs, errors: list[IntentError]) -> None:
    fd_names: dict[str, int] = {}
    fd_members: dict[tuple[frozenset[str], frozenset[Any]], int] = {}
    for i, fd in domains:
        name = getattr(fd, "name", None)
        if name is not None:
            if name in fd_names:
                errors.append(IntentError(f"failure_domains[{i}].name", f"duplicate failure domain '{name}' "
                                          f"(first at failure_domains[{fd_names[name]}])"))
            fd_names.setdefault(name, i)
        devices, ends = getattr(fd, "devices", None), getattr(fd, "links", None)
        if devices is not None and ends is not None and not devices and not ends:
            errors.append(IntentError(f"failure_domains[{i}]", "names no devices and no links"))
        members = _domain_members(devices, ends, refs)
        if (devices or ends) and members in fd_members:
            j = fd_members[members]
            errors.append(IntentError(f"failure_domains[{i}]", f"takes down the same devices and links as "
                                      f"failure_domains[{j}]: one failure, declared twice"))
        fd_members.setdefault(members, i)
        for j, dev in enumerate(devices or ()):
            if refs.unknown(dev):
                errors.append(IntentError(f"failure_domains[{i}].devices[{j}]", f"unknown device '{dev}'"))
        for j, end in enumerate(ends or ()):
            msg = refs.check_end(end)
            if msg:
                errors.append(IntentError(f"failure_domains[{i}].links[{j}]", msg))


def _check_prefixes(prefixes: list[tuple[int, Any]], refs: _Refs, errors: list[IntentError]) -> dict[str, int]:
    """Duplicate prefixes and unknown or repeated origins; returns the index of each prefix."""
    prefix_index: dict[str, int] = {}
    for i, p in prefixes:
        prefix = getattr(p, "prefix", None)
        if prefix in prefix_index:
            errors.append(IntentError(
                f"prefixes[{i}].prefix",
                f"prefix {prefix} already listed at prefixes[{prefix_index[prefix]}] "
                "(list several origins in one entry for anycast)"))
        elif prefix is not None:
            prefix_index[prefix] = i
        seen: set[str] = set()
        for j, origin in enumerate(getattr(p, "origins", None) or ()):
            if refs.unknown(origin):
                errors.append(IntentError(f"prefixes[{i}].origins[{j}]", f"unknown device '{origin}'"))
            elif origin in seen:
                errors.append(IntentError(f"prefixes[{i}].origins[{j}]", f"origin '{origin}' listed twice"))
            seen.add(origin)
    return prefix_index


def _check_policies(policies: list[tuple[int, Any]], routing: Routing, refs: _Refs,
                    errors: list[IntentError]) -> None:
    """One of each singleton kind, drain targets, and the policies the routing cannot realize."""
    singleton: dict[str, int] = {}
    drains: dict[str, int] = {}
    for i, pol in policies:
        if pol.kind in _SINGLETON_POLICIES:
            if pol.kind in singleton:
                errors.append(IntentError(f"policies[{i}].kind",
                                          f"only one '{pol.kind}' policy is allowed "
                                          f"(first at policies[{singleton[pol.kind]}])"))
            singleton.setdefault(pol.kind, i)
        if _is(pol, DrainPolicy) and getattr(pol, "target", None) is not None:
            _check_drain(i, pol, refs, drains, errors)
        if _is(pol, PathsPolicy) and getattr(pol, "mode", None) == "loop_free" and routing == Routing.BGP:
            errors.append(IntentError(f"policies[{i}].mode",
                                      "paths: loop_free needs routing: isis or ospf "
                                      "(BGP installs only its own best paths)"))
        if _is(pol, WcmpPolicy) and getattr(pol, "realization", None) == "link-bandwidth" \
                and routing in LINK_STATE:
            errors.append(IntentError(f"policies[{i}].realization",
                                      "link-bandwidth is a BGP extended community; "
                                      f"routing: {routing.value} needs realization: fib"))


def _check_drain(i: int, pol: Any, refs: _Refs, drains: dict[str, int], errors: list[IntentError]) -> None:
    if ":" in pol.target:
        msg = refs.check_end(pol.target)
        if msg:
            errors.append(IntentError(f"policies[{i}].target", msg))
    elif refs.unknown(pol.target):
        errors.append(IntentError(f"policies[{i}].target", f"unknown device '{pol.target}'"))
    if pol.target in drains:
        errors.append(IntentError(f"policies[{i}].target",
                                  f"'{pol.target}' already drained by policies[{drains[pol.target]}]"))
    drains.setdefault(pol.target, i)


def _check_demands(demands: list[tuple[int, Any]], prefix_index: dict[str, int], refs: _Refs,
                   errors: list[IntentError]) -> None:
    demand_index: dict[tuple[str, str], int] = {}
    for i, dm in demands:
        frm, to = getattr(dm, "from_", None), getattr(dm, "to", None)
        if frm is not None and refs.unknown(frm):
            errors.append(IntentError(f"demands[{i}].from", f"unknown device '{frm}'"))
        if to is not None and to not in prefix_index and to not in refs.names_seen["prefixes"]:
            errors.append(IntentError(f"demands[{i}].to", f"no device originates {to} (not in prefixes)"))
        if frm is None or to is None:
            continue
        key = (frm, to)
        if key in demand_index:
            errors.append(IntentError(f"demands[{i}]",
                                      f"duplicate demand from '{frm}' to {to} "
                                      f"(first at demands[{demand_index[key]}])"))
        demand_index.setdefault(key, i)


def _check_jobs(jobs: list[tuple[int, Any]], prefixes: list[tuple[int, Any]], refs: _Refs,
                errors: list[IntentError], registry: Registry = BUILTINS) -> None:
    """Unique names; members are known devices that originate a prefix (the job's demand goes there),
    each listed once; the collective is one of ``registry``'s and the job's params fill it."""
    check_job_members(jobs, {o for _, p in prefixes for o in getattr(p, "origins", None) or ()}, refs.unknown,
                      errors)
    skip = refs.names_seen.get("collectives", set())
    for i, job in jobs:
        check_job_collective(job, f"jobs[{i}]", registry, errors, skip)


def check_job_members(jobs: list[tuple[int, Job]], originators: set[str], unknown: Any,
                      errors: list[IntentError], section: str = "jobs") -> None:
    """The cross-object rules of ``jobs`` (``(index, job)``) given the devices that originate a prefix
    and a test for unknown device names. ``section`` is the location's head (``jobs`` in a document,
    ``job`` for one job on its own)."""
    names: dict[str, int] = {}
    for i, job in jobs:
        here = f"{section}[{i}]" if section == "jobs" else section
        name = getattr(job, "name", None)
        if name in names:
            errors.append(IntentError(f"{here}.name", f"duplicate job '{name}' (first at jobs[{names[name]}])"))
        if name is not None:
            names.setdefault(name, i)
        seen: dict[str, int] = {}
        for j, tor in enumerate(getattr(job, "tors", None) or ()):
            if unknown(tor):
                errors.append(IntentError(f"{here}.tors[{j}]", f"unknown device '{tor}'"))
            elif tor in seen:
                errors.append(IntentError(f"{here}.tors[{j}]", f"'{tor}' already listed at tors[{seen[tor]}]"))
            elif tor not in originators:
                errors.append(IntentError(f"{here}.tors[{j}]",
                                          f"'{tor}' originates no prefix (a job member needs one to receive at)"))
            seen.setdefault(tor, j)


def validate_job(value: Any, intent: Intent) -> Job:
    """One job on its own, checked against ``intent`` (its members must be devices there that
    originate a prefix). Errors are located under ``job`` (``job.tors[0]: unknown device 'x'``).

    Raises :class:`InvalidIntent` listing every error.
    """
    errors: list[IntentError] = []
    job = _shape(Job, value, ("job",), errors)
    if job is not None:
        originators = {o for p in intent.prefixes for o in p.origins}
        check_job_members([(0, job)], originators, lambda name: name not in intent.device_map, errors,
                          section="job")
        check_job_collective(job, "job", intent.registry, errors)
    if errors or job is None:
        raise InvalidIntent(errors)
    return job


def with_job(intent: Intent, job: Job) -> Intent:
    """``intent`` with ``job`` added, or in place of its job of the same name (a candidate placement
    of a job already declared replaces it). ``job`` must have passed :func:`validate_job` against
    ``intent``; the other sections are not checked again (a fabric of 65,000 demands takes seconds)."""
    jobs = (*(j for j in intent.jobs if j.name != job.name), job)
    # the rest of the intent was validated whole and ``job`` against it (validate_job): no second pass
    return Intent(**{**{f: getattr(intent, f) for f in Intent.model_fields}, "jobs": jobs})


def _asn_group(d: Device) -> tuple[str, Any]:
    """Devices of one group share an ASN (RFC 7938 section 5.2.1)."""
    if d.role == Role.TOR:
        return ("tor", d.name)
    if d.role == Role.LEAF:
        return ("leaf", d.name) if d.pod is None else ("pod", d.pod)
    if d.role == Role.SPINE:
        return ("plane", d.plane)
    return ("superspine", None)


def _group_text(group: tuple[str, Any]) -> str:
    kind, key = group
    return {
        "tor": f"ToR '{key}'",
        "leaf": f"leaf '{key}'",
        "pod": f"the leaves of pod {key}",
        "plane": "the spines" if key is None else f"the spines of plane {key}",
        "superspine": "the superspines",
    }[kind]


def _check_clos(
    devices: dict[str, Device],
    device_index: dict[str, int],
    links: list[tuple[int, Link]],
    errors: list[IntentError],
    uplinks: bool = True,
) -> None:
    clos = {n: d for n, d in devices.items() if d.role != Role.ROUTER}
    for name, d in devices.items():
        i = device_index[name]
        if d.role == Role.ROUTER:
            errors.append(IntentError(f"devices[{i}].role",
                                      "role 'router' is not a tier of an RFC 7938 Clos (use routing: isis or ospf)"))
        if d.asn is None:
            errors.append(IntentError(f"devices[{i}].asn", "required for routing: bgp"))
        _check_grouping(i, d, errors)
    # a ToR without a pod is in its leaves' pod, a spine without a plane in its leaves' plane: the first one
    # seen, and by which link
    implied: dict[str, tuple[int, int]] = {}

    uplink_count: dict[str, int] = defaultdict(int)
    for i, link in links:
        da, db = devices[link.a], devices[link.b]
        if da.name not in clos or db.name not in clos:
            continue
        ta, tb = TIER[da.role], TIER[db.role]
        if abs(ta - tb) != 1:
            errors.append(IntentError(
                f"links[{i}]",
                f"'{da.name}' ({da.role}) wired to '{db.name}' ({db.role}): a Clos links only adjacent tiers "
                "(tor-leaf, leaf-spine, spine-superspine)"))
            continue
        low, high = (da, db) if ta < tb else (db, da)
        uplink_count[low.name] += 1
        if low.role == Role.TOR and low.pod is not None and high.pod is not None and low.pod != high.pod:
            errors.append(IntentError(f"links[{i}]",
                                      f"ToR '{low.name}' of pod {low.pod} wired to "
                                      f"leaf '{high.name}' of pod {high.pod}"))
        if low.role == Role.TOR and low.pod is None and high.pod is not None:
            _one_group(i, low, high, "pod", high.pod, implied, errors)
        if low.role == Role.LEAF and high.role == Role.SPINE and high.plane is None and low.plane is not None:
            _one_group(i, high, low, "plane", low.plane, implied, errors)
        if low.role == Role.LEAF and low.plane is not None and high.plane is not None and low.plane != high.plane:
            errors.append(IntentError(
                f"links[{i}]",
                f"leaf '{low.name}' of plane {low.plane} wired to spine '{high.name}' of plane {high.plane}"))
    if clos and uplinks:
        top = max(TIER[d.role] for d in clos.values())
        for name, d in clos.items():
            if TIER[d.role] < top and uplink_count[name] == 0:
                errors.append(IntentError(f"devices[{device_index[name]}]",
                                          f"{d.role} '{name}' has no uplinks to the tier above"))

    # ASN plan
    group_asn: dict[tuple[str, Any], tuple[int, str]] = {}
    asn_group: dict[int, tuple[tuple[str, Any], str]] = {}
    for name, d in clos.items():
        if d.asn is None:
            continue
        i = device_index[name]
        g = _asn_group(d)
        if g in group_asn and group_asn[g][0] != d.asn:
            asn, first = group_asn[g]
            errors.append(IntentError(
                f"devices[{i}].asn",
                f"{d.role} '{name}' has ASN {d.asn} but {_group_text(g)} share one ASN "
                f"({asn} on '{first}'; RFC 7938 section 5.2.1)"))
            continue
        group_asn.setdefault(g, (d.asn, name))
        if d.asn in asn_group and asn_group[d.asn][0] != g:
            other_group, other = asn_group[d.asn]
            errors.append(IntentError(
                f"devices[{i}].asn",
                f"ASN {d.asn} of {d.role} '{name}' is already used by '{other}' ({_group_text(other_group)}); "
                "RFC 7938 gives each ToR, each pod's leaves and each plane's spines their own ASN"))
            continue
        asn_group.setdefault(d.asn, (g, name))


def _one_group(i: int, device: Device, peer: Device, group: str, value: int,
               implied: dict[str, tuple[int, int]], errors: list[IntentError]) -> None:
    """``device`` declares no ``group`` (pod, plane) and takes its peers': all of them must agree."""
    first, via = implied.setdefault(device.name, (value, i))
    if first != value:
        what = "ToR" if device.role == Role.TOR else str(device.role)
        errors.append(IntentError(f"links[{i}]",
                                  f"{what} '{device.name}' wired to {peer.role} '{peer.name}' of {group} {value} and, "
                                  f"by links[{via}], to a {peer.role} of {group} {first}: a {what} is in one {group}"))


def _check_grouping(i: int, d: Device, errors: list[IntentError]) -> None:
    """A pod groups ToRs and leaves, a plane leaves and spines (RFC 7938's clusters and spine
    planes): a spine or superspine in a pod, or a ToR in a plane, is a device in the wrong role
    (a ToR made a spine keeps its pod, and its links still join adjacent tiers)."""
    if d.role in (Role.SPINE, Role.SUPERSPINE) and d.pod is not None:
        errors.append(IntentError(f"devices[{i}].role",
                                  f"{d.role} '{d.name}' is in pod {d.pod}, but a pod groups ToRs and leaves: "
                                  f"a {d.role} spans the pods (drop its pod, or give it the role of its tier)"))
    if d.role == Role.TOR and d.plane is not None:
        errors.append(IntentError(f"devices[{i}].role",
                                  f"tor '{d.name}' is in plane {d.plane}, but a plane groups leaves and spines: "
                                  "a ToR reaches every plane through its pod's leaves (drop its plane, or give it "
                                  "the role of its tier)"))


def parse_intent_text(text: str | bytes, fmt: str | None = None, *, allow_aliases: bool = True,
                      limits: TextLimits = DEFAULT_LIMITS, what: str = "the document") -> Any:
    """Parse YAML or JSON text (``fmt`` 'yaml'/'json' or guessed) into plain data, within
    ``limits`` (:mod:`controller.model.text`: strict UTF-8, nesting depth, number of values).

    ``allow_aliases=False`` refuses YAML aliases, for text from the network: a
    few lines of nested aliases expand into gigabytes (the "billion laughs").

    Raises :class:`InvalidIntent` for a syntax error (located by line and column), and its
    :class:`~controller.model.errors.MalformedDocument` leaves for text over a bound.
    """
    if isinstance(text, bytes):
        text = decode_utf8(text, what)
    errors: list[IntentError] = []
    if fmt == "json" or (fmt is None and text.lstrip().startswith(("{", "["))):
        try:
            return load_json(text, limits, what=what)
        except json.JSONDecodeError as exc:
            errors.append(IntentError("", f"JSON syntax error at line {exc.lineno} column {exc.colno}: {exc.msg}"))
    else:
        try:
            return load_yaml(text, limits, allow_aliases=allow_aliases, what=what)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f" at line {mark.line + 1} column {mark.column + 1}" if mark else ""
            problem = getattr(exc, "problem", None) or str(exc)
            errors.append(IntentError("", f"YAML syntax error{where}: {problem}"))
    raise InvalidIntent(errors)


def load_intent(source: str | Path, fmt: str | None = None) -> Intent:
    """Read and validate an intent document from a file path (UTF-8)."""
    path = Path(source)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise InvalidIntent([IntentError("", f"cannot read {path}: {exc.strerror}")]) from None
    if fmt is None and path.suffix.lower() == ".json":
        fmt = "json"
    return validate_intent(parse_intent_text(decode_utf8(raw, str(path)), fmt))


def dump_intent(intent: Intent, fmt: str = "yaml") -> str:
    """Write an intent back as YAML or JSON (canonical form; reads back equal)."""
    doc = intent.to_document()
    if fmt == "json":
        return json.dumps(doc, indent=2) + "\n"
    return yaml.safe_dump(doc, sort_keys=False, default_flow_style=None, width=120)

"""Synthetic 3-tier Clos fabrics: the intent documents behind ``loom gen clos``.

This module owns the generator (pure: parameters and a seed in, a document
dict out). Layout: ``pods`` pods of ``tors`` ToRs; every pod has one leaf per
plane; every leaf of plane ``l`` links to all ``spines`` spines of plane ``l``;
every ToR links to every leaf of its pod. ASNs follow RFC 7938 section 5.2.1
(each ToR its own 4-byte private ASN, a pod's leaves one ASN, a plane's spines
one ASN). Failure domains: each spine; each plane's spines as one power domain;
random SRLGs of leaf-spine links. A fraction ``missing`` of leaf-spine links is
left out (every leaf keeps an uplink and every spine a downlink) and a fraction
``hetero`` has half or double capacity. Each ToR originates one prefix: the /24
``10.POD.TOR.0`` when a pod has at most 256 ToRs, else a /26 numbered by the
ToR's place in the fabric (:func:`tor_prefix`; 10.0.0.0/8 holds 262,144), which
lets the generator write fabrics of 100,000 devices and more.

Demand: every ToR sends to ``fanout`` other ToRs (all of them when ``fanout``
is ``None`` and the fabric has at most :data:`ALL_PAIRS_MAX_TORS` ToRs, else
:data:`DEFAULT_FANOUT` chosen at random), with sizes ``uniform``, ``gravity``
(product of random per-ToR masses) or ``hotspot`` (a few destinations draw
ten times more). The matrix is scaled so that plain ECMP's maximum link
utilization is ``load``.
"""

from __future__ import annotations

import random
from typing import Any, Literal

from controller.model.documents.base import JsonObject
from controller.model.intent import validate_intent

__all__ = ["ALL_PAIRS_MAX_TORS", "DEFAULT_FANOUT", "FAMILIES", "MAX_TORS", "clos_document", "tor_prefix",
           "tor_prefix6", "with_family"]

#: the address families ``loom gen clos --family`` gives the ToRs' prefixes
FAMILIES = ("ipv4", "ipv6", "dual")

ALL_PAIRS_MAX_TORS = 256
MAX_TORS = 4096  # per pod
_MAX_SLASH26 = 1 << 18  # /26 prefixes in 10.0.0.0/8
DEFAULT_FANOUT = 32
SPINE_ASN_BASE = 64512  # + plane
LEAF_ASN_BASE = 64768  # + pod (pods < 256)
TOR_ASN_BASE = 4_200_000_000  # + ToR number (RFC 6996 4-byte private range)
BASE_CAPACITY = 100.0

DemandKind = Literal["uniform", "gravity", "hotspot"]


def tor_name(p: int, t: int) -> str:
    return f"tor-{p}-{t}"


def leaf_name(p: int, lp: int) -> str:
    return f"leaf-{p}-{lp}"


def spine_name(lp: int, s: int) -> str:
    return f"spine-{lp}-{s}"


def tor_prefix(p: int, t: int, tors: int) -> str:
    """The prefix ToR ``t`` of pod ``p`` originates in a fabric of ``tors`` ToRs per pod.

    >>> tor_prefix(3, 7, 16), tor_prefix(3, 7, 400)
    ('10.3.7.0/24', '10.1.45.192/26')
    """
    if tors <= 256:
        return f"10.{p}.{t}.0/24"
    n = p * tors + t
    return f"10.{n >> 10}.{(n >> 2) & 255}.{(n & 3) << 6}/26"


def tor_prefix6(p: int, t: int) -> str:
    """The IPv6 prefix ToR ``t`` of pod ``p`` originates (a /64 of the documentation space, RFC 3849).

    >>> tor_prefix6(3, 7)
    '2001:db8:3:7::/64'
    """
    return f"2001:db8:{p:x}:{t:x}::/64"


def with_family(clos: JsonObject, family: str, underlay: str | None = None) -> JsonObject:
    """``doc`` (a :func:`clos_document`) with its ToRs' prefixes in ``family``: ``ipv4`` as it is, ``ipv6``
    each /24 (or /26) replaced by the ToR's :func:`tor_prefix6`, ``dual`` both, each demand split evenly over
    the two (the same load). ``underlay`` sets ``defaults.underlay``; absent, ``unnumbered`` wherever there is
    IPv6 (BGP over IPv4-numbered links carries IPv4 only)."""
    if family not in FAMILIES:
        raise ValueError(f"family: expected one of {', '.join(FAMILIES)}, got {family!r}")
    doc: dict[str, Any] = clos  # its sections as clos_document writes them
    out = dict(doc)
    if underlay is not None or family != "ipv4":
        out["defaults"] = {**doc.get("defaults", {}), "underlay": underlay or "unnumbered"}
    if family == "ipv4":
        return out
    six = {p["prefix"]: tor_prefix6(*_place(p["origins"][0])) for p in doc["prefixes"]}
    twins = [{"prefix": six[p["prefix"]], "origins": list(p["origins"])} for p in doc["prefixes"]]
    if family == "ipv6":
        out["prefixes"] = twins
        out["demands"] = [{**d, "to": six[d["to"]]} for d in doc["demands"]]
    else:
        out["prefixes"] = [*doc["prefixes"], *twins]
        halves = [{**d, "gbps": round(d["gbps"] / 2, 6)} for d in doc["demands"]]
        out["demands"] = [*halves, *({**d, "to": six[d["to"]]} for d in halves)]
    return out


def _place(tor: str) -> tuple[int, int]:
    _, p, t = tor.split("-")
    return int(p), int(t)


def _domains(planes: int, spines: int, ls_names: list[str], srlgs: int | None,
             rng: random.Random) -> list[dict[str, Any]]:
    """Each spine, each plane's power and random SRLGs of leaf-spine links; never two domains that take
    down the same parts (validation refuses them): a plane of one spine has no power domain of its own,
    and an SRLG drawn again is drawn anew (a few times, then left out)."""
    domains: list[dict[str, Any]] = []
    for lp in range(planes):
        for s in range(spines):
            domains.append({"name": f"{spine_name(lp, s)}", "kind": "device", "devices": [spine_name(lp, s)]})
        if spines > 1:
            domains.append({"name": f"plane-{lp}-power", "kind": "power",
                            "devices": [spine_name(lp, s) for s in range(spines)]})
    n_srlg = srlgs if srlgs is not None else max(1, planes)
    per = max(2, min(8, len(ls_names) // max(1, 4 * n_srlg)))
    drawn: set[tuple[str, ...]] = set()
    for g in range(n_srlg):
        if len(ls_names) < per:
            break
        for _ in range(8):
            links = tuple(sorted(rng.sample(ls_names, per)))
            if links not in drawn:
                drawn.add(links)
                domains.append({"name": f"srlg-{g}", "kind": "srlg", "links": list(links)})
                break
    return domains


def _leaf_spine_links(
    pods: int, planes: int, spines: int, missing: float, rng: random.Random,
) -> list[tuple[int, int, int]]:
    """(pod, plane, spine) triples that exist, after removing ``missing`` of them."""
    all_links = [(p, lp, s) for p in range(pods) for lp in range(planes) for s in range(spines)]
    n_drop = int(round(missing * len(all_links)))
    order = list(range(len(all_links)))
    rng.shuffle(order)
    up = {(p, lp): spines for p in range(pods) for lp in range(planes)}
    down = {(lp, s): pods for lp in range(planes) for s in range(spines)}
    dropped: set[int] = set()
    for i in order:
        if len(dropped) >= n_drop:
            break
        p, lp, s = all_links[i]
        if up[(p, lp)] > 1 and down[(lp, s)] > 1:
            up[(p, lp)] -= 1
            down[(lp, s)] -= 1
            dropped.add(i)
    return [x for i, x in enumerate(all_links) if i not in dropped]


def clos_document(
    *, pods: int, tors: int, planes: int, spines: int, seed: int = 0, missing: float = 0.0, hetero: float = 0.0,
    demand: DemandKind = "uniform", load: float = 0.5, fanout: int | None = None, srlgs: int | None = None,
    max_ecmp_entries: int = 128, scale_to_ecmp: bool = True,
) -> JsonObject:
    """A 3-tier Clos intent document (see the module docstring).

    ``scale_to_ecmp`` (default) routes the unit matrix with plain ECMP through the
    solver and scales demands so ECMP's maximum utilization equals ``load``.

    Example
    -------
    >>> doc = clos_document(pods=2, tors=2, planes=2, spines=2, scale_to_ecmp=False)
    >>> len(doc["devices"]), len(doc["links"]), len(doc["demands"])
    (12, 16, 12)
    """
    if min(pods, tors, planes, spines) < 1:
        raise ValueError("pods, tors, planes and spines must all be at least 1")
    if pods > 256 or tors > MAX_TORS:
        raise ValueError(f"at most 256 pods and {MAX_TORS} ToRs per pod")
    if tors > 256 and pods * tors > _MAX_SLASH26:
        raise ValueError(f"at most {_MAX_SLASH26} ToRs in all (each originates a /26 of 10.0.0.0/8)")
    if not (0 <= missing < 1 and 0 <= hetero <= 1):
        raise ValueError("missing must be in [0, 1) and hetero in [0, 1]")
    rng = random.Random(seed)
    devices: list[dict[str, Any]] = []
    links: list[dict[str, Any]] = []
    prefixes: list[dict[str, Any]] = []
    for lp in range(planes):
        for s in range(spines):
            devices.append({"name": spine_name(lp, s), "role": "spine", "plane": lp, "asn": SPINE_ASN_BASE + lp})
    for p in range(pods):
        for lp in range(planes):
            devices.append({"name": leaf_name(p, lp), "role": "leaf", "pod": p, "plane": lp, "asn": LEAF_ASN_BASE + p})
        for t in range(tors):
            devices.append({"name": tor_name(p, t), "role": "tor", "pod": p, "asn": TOR_ASN_BASE + p * tors + t})
            prefixes.append({"prefix": tor_prefix(p, t, tors), "origins": [tor_name(p, t)]})
            for lp in range(planes):
                links.append({"a": tor_name(p, t), "a_port": f"eth{lp + 1}", "b": leaf_name(p, lp),
                              "b_port": f"eth{t + 1}", "capacity_gbps": BASE_CAPACITY})
    ls_links = _leaf_spine_links(pods, planes, spines, missing, rng)
    hetero_idx = set(rng.sample(range(len(ls_links)), int(round(hetero * len(ls_links)))))
    ls_names: list[str] = []
    for i, (p, lp, s) in enumerate(ls_links):
        cap = BASE_CAPACITY * (rng.choice((0.5, 2.0)) if i in hetero_idx else 1.0)
        links.append({"a": leaf_name(p, lp), "a_port": f"eth{tors + 1 + s}", "b": spine_name(lp, s),
                      "b_port": f"eth{p + 1}", "capacity_gbps": cap})
        ls_names.append(f"{leaf_name(p, lp)}:eth{tors + 1 + s}")
    domains = _domains(planes, spines, ls_names, srlgs, rng)
    demands = _demands(pods, tors, rng, demand, fanout)
    doc: dict[str, Any] = {
        "name": f"clos-{pods}x{tors}-{planes}x{spines}-s{seed}", "routing": "bgp",
        "defaults": {"max_ecmp_entries": max_ecmp_entries},
        "devices": devices, "links": links, "failure_domains": domains, "prefixes": prefixes,
        "policies": [{"kind": "wcmp", "enabled": True}], "demands": demands,
    }
    if scale_to_ecmp and demands:
        doc = scale_demands(doc, load)
    return doc


def _demands(pods: int, tors: int, rng: random.Random, kind: DemandKind, fanout: int | None) -> list[dict[str, Any]]:
    all_tors = [(p, t) for p in range(pods) for t in range(tors)]
    n = len(all_tors)
    if fanout is None:
        fanout = n - 1 if n <= ALL_PAIRS_MAX_TORS else DEFAULT_FANOUT
    fanout = max(0, min(fanout, n - 1))
    mass = [rng.lognormvariate(0.0, 0.8) for _ in all_tors] if kind == "gravity" else [1.0] * n
    if kind == "hotspot":
        for i in rng.sample(range(n), max(1, n // 16)):
            mass[i] = 10.0
    out: list[dict[str, Any]] = []
    for i, (p, t) in enumerate(all_tors):
        if fanout >= n - 1:
            dests = [j for j in range(n) if j != i]
        else:
            dests = [j for j in rng.sample(range(n - 1), fanout)]
            dests = [j + 1 if j >= i else j for j in dests]
        for j in dests:
            q, u = all_tors[j]
            size = mass[j] * (mass[i] if kind == "gravity" else 1.0)
            out.append({"from": tor_name(p, t), "to": tor_prefix(q, u, tors), "gbps": round(size, 6)})
    return out


def scale_demands(doc: dict[str, Any], load: float) -> dict[str, Any]:
    """Scale ``doc``'s demands so plain ECMP's maximum utilization is ``load``."""
    from solver.ecmp import ecmp_max_utilization  # lazy: loads OR-Tools (1.6 s); only this function needs it

    mlu = ecmp_max_utilization(validate_intent(doc))
    if mlu <= 0:
        return doc
    k = load / mlu
    doc = dict(doc)
    doc["demands"] = [{**d, "gbps": round(d["gbps"] * k, 6)} for d in doc["demands"]]
    return doc

"""The form a running router writes its BGP sessions in, as the intent's ``devices[].bgp`` keeps it.

FRR resets a session whose form changes: a neighbor that leaves its peer-group (or whose group goes) is
deleted, a ``remote-as external`` that becomes a number restarts the session (FRR 8.4: seen on a lab), and
so does an unnumbered session that gains or loses ``v6only``. Replacing ``redistribute connected`` with a
``network`` per prefix withdraws the prefixes for the moment between the two. So adopting a router without a
blip keeps the form it runs (:class:`controller.model.domain.BgpForm`), and :func:`session_form` reads it.
What no form holds (sessions of one device written in different ways, a peer-group carrying an ASN) is a
question: Loom writes all of a device's sessions one way. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable

from controller.model.documents.base import JsonObject
from southbound.discovery.frr_text import BgpConf, FrrRunning, InterfaceConf, parse_running
from southbound.discovery.observed import ObservedDevice

__all__ = ["auto_ospf_cost", "isis_form", "ospf_form", "session_form", "unchanged_costs"]

#: ospfd's reference bandwidth without ``auto-cost reference-bandwidth`` (FRR 8.4, any profile:
#: OSPF_DEFAULT_REF_BANDWIDTH), and the bandwidth it takes for an interface that reports no speed
_OSPF_REFERENCE_MBPS = 100_000
_OSPF_DEFAULT_MBPS = 10_000


def auto_ospf_cost(device: ObservedDevice, run: FrrRunning, port: str) -> int:
    """The cost ospfd computes for ``port`` without an ``ip ospf cost``: the reference bandwidth over the
    interface's speed, rounded (``ospf_if_get_output_cost``), at least 1."""
    itf = device.interface(port)
    speed = itf.speed_mbps if itf is not None and itf.speed_mbps else _OSPF_DEFAULT_MBPS
    ref = run.ospf.reference_mbps if run.ospf is not None and run.ospf.reference_mbps else _OSPF_REFERENCE_MBPS
    return max(1, int(ref / speed + 0.5))


def session_form(bgp: BgpConf, sessions: Iterable[str]) -> tuple[JsonObject | None, list[str]]:
    """The ``bgp`` form of a router whose sessions across the fabric's links are ``sessions`` (FRR's names for
    them: an address, or an interface when unnumbered), or ``None`` for Loom's own form; and the questions
    about what the form cannot hold, each saying which session adoption would reset."""
    peers = sorted(set(sessions))
    questions: list[str] = []
    form: JsonObject = {}
    group = _group(bgp, peers, questions)
    if group is not None:
        form["peer_group"] = group
    if _remote_external(bgp, peers, questions):
        form["remote_as"] = "external"
    unnumbered = [p for p in peers if not p[:1].isdigit() and ":" not in p]
    written = {p in bgp.v6only for p in unnumbered}
    if written == {False}:
        form["v6only"] = False
    elif len(written) > 1:
        questions.append(f"unnumbered BGP neighbors {_names(p for p in unnumbered if p in bgp.v6only)} are "
                         f"'interface v6only' and {_names(p for p in unnumbered if p not in bgp.v6only)} are not: "
                         "Loom writes a device's sessions one way and FRR resets a session whose v6only changes, "
                         "so adopting would reset the ones written the other way")
    if "connected" in bgp.redistribute:  # plain: with a route map it is a question of its own
        form["originate"] = "redistribute-connected"
    return (form or None), questions


def _group(bgp: BgpConf, peers: list[str], questions: list[str]) -> str | None:
    """The one peer-group every session is a member of (``None``: none is), else a question."""
    groups = {bgp.member_of.get(p) for p in peers}
    if len(groups) > 1:
        by = sorted(f"{p} ({bgp.member_of.get(p) or 'no peer-group'})" for p in peers)
        questions.append(f"BGP neighbors are written through different peer-groups or none: {', '.join(by)}; "
                         "Loom writes all of a device's sessions through one peer-group or none, and FRR deletes "
                         "a neighbor that leaves its peer-group, so adopting would reset the others")
        return None
    group = next(iter(groups), None)
    remote = bgp.groups.get(group) if group is not None else None
    if group is not None and remote not in (None, "external"):
        questions.append(f"peer-group {group} carries remote-as {remote}: Loom writes a peer-group's remote-as "
                         "only as 'external' (else each member's ASN on the member), and FRR deletes a peer-group's "
                         "members with its remote-as, so adopting would reset them")
    return group


def _remote_external(bgp: BgpConf, peers: list[str], questions: list[str]) -> bool:
    """Whether every session's ``remote-as`` (its own or its group's) is ``external``; a question when some are
    and others are not."""
    ebgp = [p for p in peers if bgp.neighbors.get(p) not in ("internal", str(bgp.asn))]  # iBGP: its own question
    external = sorted(p for p in ebgp if bgp.neighbors.get(p) == "external")
    if external and len(external) < len(ebgp):
        questions.append(f"BGP neighbors {_names(external)} are remote-as external and "
                         f"{_names(p for p in ebgp if p not in external)} name their peer's ASN: Loom writes a "
                         "device's sessions one way and FRR 8.4 resets a session whose remote-as changes between "
                         "'external' and a number, so adopting would reset the ones written the other way")
    return bool(external) and len(external) == len(ebgp)


def _names(peers: Iterable[str]) -> str:
    return ", ".join(sorted(peers))


def unchanged_costs(device: ObservedDevice, added: Iterable[tuple[str, str]]) -> set[tuple[str, str]]:
    """Of the ``(context, line)`` pairs ``interface X`` / ``ip ospf cost N`` an adoption adds, those that change
    no cost: ``X`` has no ``ip ospf cost`` of its own, and ``N`` is what ospfd computes for it now."""
    run = parse_running(device.running_config)
    out = set()
    for context, line in added:
        port, words = context.removeprefix("interface "), line.split()
        conf = run.interfaces.get(port)
        if (context.startswith("interface ") and words[:3] == ["ip", "ospf", "cost"] and len(words) == 4
                and words[3].isdigit() and (conf is None or conf.ospf_cost is None)
                and int(words[3]) == auto_ospf_cost(device, run, port)):
            out.add((context, line))
    return out


def ospf_form(run: FrrRunning, link_ports: Iterable[str], loom_intervals: tuple[int, int]) -> tuple[
        JsonObject | None, list[str]]:
    """The ``ospf`` form of a router whose fabric links are on ``link_ports`` (``None``: Loom's own, whose
    hello and dead intervals are ``loom_intervals``), and the questions about what no form holds: a device's
    links of several network types or intervals (Loom writes a device's links one way, and FRR resets an
    adjacency whose type changes and drops one while its ends' intervals differ)."""
    if run.ospf is None:
        return None, []
    confs = [run.interfaces.get(p) or InterfaceConf(p) for p in sorted(set(link_ports))]
    questions: list[str] = []
    form: JsonObject = {}
    _network_type("OSPF", {c.ospf_network or "broadcast" for c in confs}, form, questions)
    intervals = {(c.ospf_hello or 10, c.ospf_dead if c.ospf_dead is not None else 4 * (c.ospf_hello or 10))
                 for c in confs}
    if len(intervals) == 1 and all(isinstance(x, int) for x in next(iter(intervals))):
        hello, dead = next(iter(intervals))
        if (hello, dead) != loom_intervals:
            form["hello_s"], form["dead_s"] = hello, dead
    elif intervals:
        shown = ", ".join(f"{h}/{d}" for h, d in sorted(intervals, key=str))
        questions.append(f"its links run OSPF hello/dead intervals {shown} s: Loom writes one pair for a device's "
                         "links, and an adjacency drops while its two ends' intervals differ")
    if run.ospf.networks:
        form["networks"] = [n for n, _area in run.ospf.networks]
    return (form or None), questions


def isis_form(run: FrrRunning, link_ports: Iterable[str], loom_net: str | None, loom_hello: tuple[int, int]
              ) -> tuple[JsonObject | None, list[str]]:
    """The ``isis`` form of a router whose fabric links are on ``link_ports`` (``None``: Loom's own, whose NET
    would be ``loom_net`` and hello interval and multiplier ``loom_hello``), and the questions about what no
    form holds (a device's links of several network types or hellos)."""
    isis = run.isis
    if isis is None:
        return None, []
    form: JsonObject = {}
    if isis.tag != "loom":
        form["tag"] = isis.tag
    if isis.net is not None and isis.net.lower() != loom_net:
        form["net"] = isis.net.lower()
    if (isis.is_type or "level-1-2") != "level-2-only":
        form["is_type"] = isis.is_type or "level-1-2"
    if (isis.metric_style or "wide") != "wide":
        form["metric_style"] = isis.metric_style
    confs = [run.interfaces.get(p) or InterfaceConf(p) for p in sorted(set(link_ports))]
    questions: list[str] = []
    _network_type("IS-IS", {c.isis_network or "broadcast" for c in confs}, form, questions)
    hellos = {(c.isis_hello or 3, c.isis_multiplier or 10) for c in confs}
    if len(hellos) == 1 and next(iter(hellos)) != loom_hello:
        form["hello_s"], form["hello_multiplier"] = next(iter(hellos))
    elif len(hellos) > 1:
        shown = ", ".join(f"{h} s x{m}" for h, m in sorted(hellos))
        questions.append(f"its links run IS-IS hellos {shown}: Loom writes one for a device's links, and an "
                         "adjacency drops while its two ends' hold times differ")
    return (form or None), questions


def _network_type(igp: str, types: set[str], form: JsonObject, questions: list[str]) -> None:
    """A device's links' network ``types`` into ``form`` (broadcast; point-to-point is Loom's), or a question when
    they are several (or another kind): Loom writes a device's links one way."""
    if types == {"broadcast"}:
        form["network_type"] = "broadcast"
    elif types - {"point-to-point"}:
        questions.append(f"its links run {igp} network types {', '.join(sorted(types))}: Loom writes a device's "
                         "links point-to-point or broadcast, and FRR resets an adjacency whose type changes")

"""The declarative configuration of one device: what the southbound pushes.

This module owns :class:`DeviceConfig`, a pure, frozen value that says what a
switch should be, in the domain's words rather than FRR's: its hostname, ASN
and router id, its interfaces and their addresses, its BGP neighbors (RFC 7938:
one eBGP session per link), the prefixes it originates, its drains, its
multipath settings, and the WCMP state a plan adds (per-neighbor, per-prefix
BGP link-bandwidth values, or weighted FIB nexthop groups the device agent
installs over netlink). :mod:`southbound.render` builds these from an intent
and renders them as FRR configuration; the device agent's protobuf mirrors
them. :func:`bgp_session_resets` compares two sets of configs: which BGP
sessions a change tears down. No I/O here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from controller.model.documents.base import JsonObject

__all__ = [
    "BgpNeighbor",
    "DeviceConfig",
    "FibNexthop",
    "FibRoute",
    "Interface",
    "LinkBandwidth",
    "IsisForm",
    "OspfForm",
    "SessionForm",
    "SessionMove",
    "SessionReset",
    "bgp_session_resets",
    "bridge_config",
    "session_moves",
]


@dataclass(frozen=True, slots=True)
class Interface:
    """A port: ``name`` as in the intent (``eth1``), ``address`` in CIDR form
    (``100.64.0.0/31``) or ``None``, ``address6`` its IPv6 one (a link end of ``ipv6-numbered``,
    a host port's IPv6 subnet) or ``None``. ``peer`` names the device at the far end of
    a fabric link; ``host`` marks a host subnet port (where a prefix lives).
    ``metric`` is the IS-IS metric or OSPF cost of the link; ``drained``: the link is drained."""

    name: str
    address: str | None = None
    peer: str | None = None
    peer_port: str | None = None
    host: bool = False
    metric: int = 10
    drained: bool = False
    address6: str | None = None

    def to_document(self) -> JsonObject:
        doc: dict[str, Any] = {"name": self.name, "address": self.address, "peer": self.peer,
                               "peer_port": self.peer_port, "host": self.host, "metric": self.metric,
                               "drained": self.drained}
        if self.address6 is not None:  # only when set: IPv4 documents read as before IPv6 existed
            doc["address6"] = self.address6
        return doc


@dataclass(frozen=True, slots=True)
class BgpNeighbor:
    """One eBGP session over the link on ``port``. ``address`` is the peer's
    address on the link (``None``: BGP unnumbered on the interface);
    ``drained``: the link is drained, nothing is sent or accepted on it."""

    port: str
    peer: str
    remote_asn: int
    address: str | None = None
    drained: bool = False

    @property
    def key(self) -> str:
        """How FRR names the neighbor: its address, or the interface when unnumbered."""
        return self.address if self.address is not None else self.port

    def to_document(self) -> JsonObject:
        return {"port": self.port, "peer": self.peer, "remote_asn": self.remote_asn,
                "address": self.address, "drained": self.drained}


@dataclass(frozen=True, slots=True)
class LinkBandwidth:
    """WCMP by BGP link-bandwidth: this device attaches ``mbps`` as the
    link-bandwidth extended community when it advertises ``prefix`` to the
    neighbor on ``port``; that neighbor then weighs its next hops by it."""

    port: str
    prefix: str
    mbps: int

    def to_document(self) -> JsonObject:
        return {"port": self.port, "prefix": self.prefix, "mbps": self.mbps}


@dataclass(frozen=True, slots=True)
class FibNexthop:
    """A weighted member of a FIB nexthop group: out of ``port`` to ``gateway``."""

    port: str
    gateway: str
    weight: int

    def to_document(self) -> JsonObject:
        return {"port": self.port, "gateway": self.gateway, "weight": self.weight}


@dataclass(frozen=True, slots=True)
class FibRoute:
    """WCMP by FIB: a route the device agent installs over netlink with a
    weighted nexthop group (``group`` is the group's id), preferred over BGP's."""

    prefix: str
    group: str
    nexthops: tuple[FibNexthop, ...]

    def to_document(self) -> JsonObject:
        return {"prefix": self.prefix, "group": self.group,
                "nexthops": [h.to_document() for h in self.nexthops]}


@dataclass(frozen=True, slots=True)
class SessionForm:
    """How a device's BGP sessions are written (the intent's ``devices[].bgp``): ``peer_group`` (every session
    a member of it), ``remote_as_external`` (``remote-as external``, on the group when there is one),
    ``v6only`` (an unnumbered session is ``interface v6only``), ``redistribute_connected`` (instead of a
    ``network`` per originated prefix). The default is Loom's own form."""

    peer_group: str | None = None
    remote_as_external: bool = False
    v6only: bool = True
    redistribute_connected: bool = False

    def to_document(self) -> JsonObject:
        return {"peer_group": self.peer_group, "remote_as_external": self.remote_as_external,
                "v6only": self.v6only, "redistribute_connected": self.redistribute_connected}


@dataclass(frozen=True, slots=True)
class OspfForm:
    """How a device runs OSPF on its links (the intent's ``devices[].ospf``): ``broadcast`` (network type,
    else point-to-point), ``hello``/``dead`` seconds (``None``: from the BGP timers), ``networks`` (``None``:
    ``ip ospf area`` on each interface; else these ``network ... area`` statements, and one for each subnet of
    the device they do not cover). The default is Loom's own form."""

    broadcast: bool = False
    hello: int | None = None
    dead: int | None = None
    networks: tuple[str, ...] | None = None

    def to_document(self) -> JsonObject:
        return {"broadcast": self.broadcast, "hello": self.hello, "dead": self.dead,
                "networks": None if self.networks is None else list(self.networks)}


@dataclass(frozen=True, slots=True)
class IsisForm:
    """How a device runs IS-IS (the intent's ``devices[].isis``): ``tag``, ``net`` (``None``: from the router
    id), ``is_type``, ``metric_style``, ``broadcast`` (network type, else point-to-point), ``hello`` seconds and
    ``multiplier`` (``None``: from the BGP timers). The default is Loom's own form."""

    tag: str = "loom"
    net: str | None = None
    is_type: str = "level-2-only"
    metric_style: str = "wide"
    broadcast: bool = False
    hello: int | None = None
    multiplier: int | None = None

    def to_document(self) -> JsonObject:
        return {"tag": self.tag, "net": self.net, "is_type": self.is_type, "metric_style": self.metric_style,
                "broadcast": self.broadcast, "hello": self.hello, "multiplier": self.multiplier}


#: BGP keepalive and hold seconds of every device (OSPF's and IS-IS's hellos follow them)
DEFAULT_TIMERS = (1, 3)


@dataclass(frozen=True, slots=True)
class DeviceConfig:
    """Everything one device should be (see the module docstring).

    ``routing`` is ``bgp``, ``isis`` or ``ospf``; ``drained``: the device carries no
    transit (it advertises only the prefixes it originates); ``originated``:
    its prefixes, each living on a host port; ``maximum_paths`` and
    ``multipath_relax``: ECMP over equal-length AS paths of different ASNs
    (RFC 7938 section 6.3); ``timers``: BGP keepalive and hold seconds;
    ``underlay``: how links are numbered and sessions run (``ipv4-numbered``,
    ``unnumbered``, ``ipv6-numbered``: DESIGN.md "Underlay"); ``loopback6``: the
    device's IPv6 loopback address, if any (its IPv4 one is ``router_id``); ``ipv6``:
    the fabric carries IPv6, so the device runs it on its links (IS-IS transit)
    even when it has no IPv6 of its own; ``session_form``: how its BGP sessions are written; ``ospf_form``:
    how it runs OSPF on its links.
    """

    hostname: str
    asn: int | None
    router_id: str
    interfaces: tuple[Interface, ...] = ()
    neighbors: tuple[BgpNeighbor, ...] = ()
    originated: tuple[str, ...] = ()
    routing: str = "bgp"
    drained: bool = False
    maximum_paths: int = 64
    multipath_relax: bool = True
    timers: tuple[int, int] = DEFAULT_TIMERS
    link_bandwidth: tuple[LinkBandwidth, ...] = ()
    fib_routes: tuple[FibRoute, ...] = ()
    underlay: str = "ipv4-numbered"
    loopback6: str | None = None
    ipv6: bool = False
    session_form: SessionForm = SessionForm()
    ospf_form: OspfForm = OspfForm()
    isis_form: IsisForm = IsisForm()

    def interface(self, name: str) -> Interface:
        for i in self.interfaces:
            if i.name == name:
                return i
        raise KeyError(name)

    @property
    def host_ports(self) -> tuple[str, ...]:
        return tuple(i.name for i in self.interfaces if i.host)

    @property
    def fabric_ports(self) -> tuple[str, ...]:
        return tuple(i.name for i in self.interfaces if i.peer is not None)

    def to_document(self) -> JsonObject:
        """A JSON-ready mapping (stable order), for golden files and the wire."""
        return {
            "hostname": self.hostname,
            "asn": self.asn,
            "router_id": self.router_id,
            "routing": self.routing,
            "interfaces": [i.to_document() for i in self.interfaces],
            "neighbors": [n.to_document() for n in self.neighbors],
            "originated": list(self.originated),
            "drained": self.drained,
            "maximum_paths": self.maximum_paths,
            "multipath_relax": self.multipath_relax,
            "timers": list(self.timers),
            "link_bandwidth": [b.to_document() for b in self.link_bandwidth],
            "fib_routes": [r.to_document() for r in self.fib_routes],
            # only when not the defaults: IPv4 documents (golden files, hashes) read as before IPv6 existed
            **({"underlay": self.underlay} if self.underlay != "ipv4-numbered" else {}),
            **({"loopback6": self.loopback6} if self.loopback6 is not None else {}),
            **({"ipv6": True} if self.ipv6 else {}),
            **({"session_form": self.session_form.to_document()} if self.session_form != SessionForm() else {}),
            **({"ospf_form": self.ospf_form.to_document()} if self.ospf_form != OspfForm() else {}),
            **({"isis_form": self.isis_form.to_document()} if self.isis_form != IsisForm() else {}),
        }

    @classmethod
    def from_document(cls, document: JsonObject) -> DeviceConfig:
        """The inverse of :meth:`to_document`."""
        doc: dict[str, Any] = document  # read field by field into the typed dataclasses below
        return cls(
            hostname=doc["hostname"],
            asn=doc.get("asn"),
            router_id=doc["router_id"],
            routing=doc.get("routing", "bgp"),
            interfaces=tuple(Interface(**i) for i in doc.get("interfaces", ())),
            neighbors=tuple(BgpNeighbor(**n) for n in doc.get("neighbors", ())),
            originated=tuple(doc.get("originated", ())),
            drained=bool(doc.get("drained", False)),
            maximum_paths=int(doc.get("maximum_paths", 64)),
            multipath_relax=bool(doc.get("multipath_relax", True)),
            timers=(int(doc.get("timers", (1, 3))[0]), int(doc.get("timers", (1, 3))[1])),
            link_bandwidth=tuple(LinkBandwidth(**b) for b in doc.get("link_bandwidth", ())),
            fib_routes=tuple(
                FibRoute(prefix=r["prefix"], group=r["group"],
                         nexthops=tuple(FibNexthop(**h) for h in r["nexthops"]))
                for r in doc.get("fib_routes", ())),
            underlay=doc.get("underlay", "ipv4-numbered"),
            loopback6=doc.get("loopback6"),
            ipv6=bool(doc.get("ipv6", False)),
            session_form=SessionForm(**doc["session_form"]) if "session_form" in doc else SessionForm(),
            ospf_form=_ospf_form(doc.get("ospf_form")),
            isis_form=IsisForm(**doc["isis_form"]) if "isis_form" in doc else IsisForm(),
        )


@dataclass(frozen=True, slots=True)
class SessionReset:
    """One end of a BGP session a change tears down: on ``device``, the neighbor ``neighbor`` (FRR's
    name for it: the peer's address, or the port when unnumbered) toward ``peer`` over ``port``.
    ``reason``: ``removed`` (the session is gone: its link, its device or BGP itself), ``address``
    (the peer's address changed), ``remote-as``, ``local-as`` or ``router-id`` (the device's own), ``form``
    (its peer-group, ``remote-as external`` or ``v6only``: :class:`SessionForm`)."""

    device: str
    neighbor: str
    peer: str
    port: str
    reason: str

    def to_document(self) -> JsonObject:
        return {"device": self.device, "neighbor": self.neighbor, "peer": self.peer, "port": self.port,
                "reason": self.reason}


def _ospf_form(doc: Any) -> OspfForm:
    if doc is None:
        return OspfForm()
    networks = doc.get("networks")
    return OspfForm(bool(doc.get("broadcast")), doc.get("hello"), doc.get("dead"),
                    None if networks is None else tuple(networks))


def _sessions(config: DeviceConfig | None) -> dict[str, list[BgpNeighbor]]:
    """Per port, the BGP sessions over it (two while an underlay change is bridged: the old and the new)."""
    if config is None or config.routing != "bgp" or config.asn is None:
        return {}
    out: dict[str, list[BgpNeighbor]] = {}
    for n in config.neighbors:
        out.setdefault(n.port, []).append(n)
    return out


def _reset_reason(before: DeviceConfig, after: DeviceConfig | None, n: BgpNeighbor,
                  now: list[BgpNeighbor]) -> str | None:
    same_peer = [m for m in now if m.peer == n.peer]
    if after is None or not same_peer:
        return "removed"
    if after.asn != before.asn:
        return "local-as"
    if after.router_id != before.router_id:
        return "router-id"
    kept = [m for m in same_peer if m.address == n.address]
    if not kept:
        return "address"
    if all(m.remote_asn != n.remote_asn for m in kept):
        return "remote-as"
    if _form_of(before, n) != _form_of(after, n):
        return "form"
    return None


def _form_of(config: DeviceConfig, n: BgpNeighbor) -> tuple[str | None, bool, bool]:
    """What of a session's form FRR resets it for: its peer-group, ``remote-as external`` and (unnumbered)
    ``v6only``."""
    f = config.session_form
    return f.peer_group, f.remote_as_external, f.v6only or n.address is not None


def bgp_session_resets(old: Mapping[str, DeviceConfig], new: Mapping[str, DeviceConfig]) -> list[SessionReset]:
    """The BGP session ends that going from configs ``old`` to ``new`` tears down, by device and port.

    A session of ``old`` is reset when it is no longer there (its link, its device or BGP gone), when
    its peer's address changes (``address``: numbered to unnumbered is one), when its peer's ASN changes,
    or when its device's own ASN or router id changes (FRR then restarts every session of the device).
    Sessions that only appear are new, not reset; a drain or a WCMP change (route maps, refreshed with a
    soft clear) resets nothing. Each session counts once per end: removing one link resets two ends.
    """
    out: list[SessionReset] = []
    for device in sorted(old):
        before, after = old[device], new.get(device)
        now = _sessions(after)
        for port, sessions in sorted(_sessions(before).items()):
            for n in sessions:
                reason = _reset_reason(before, after, n, now.get(port, []))
                if reason is not None:
                    out.append(SessionReset(device, n.key, n.peer, port, reason))
    return out


@dataclass(frozen=True, slots=True)
class SessionMove:
    """A BGP session that a change moves to another transport over the same link (``address`` resets,
    e.g. an underlay change from ``ipv4-numbered`` to ``unnumbered``): on ``device``, toward ``peer`` over
    ``port``, from FRR's neighbor ``before`` (an address, or the port when unnumbered) to ``after``."""

    device: str
    port: str
    peer: str
    before: str
    after: str

    def to_document(self) -> JsonObject:
        return {"device": self.device, "port": self.port, "peer": self.peer, "from": self.before, "to": self.after}


def session_moves(old: Mapping[str, DeviceConfig], new: Mapping[str, DeviceConfig]) -> list[SessionMove]:
    """The sessions going from ``old`` to ``new`` moves (their ``address`` resets), each end once."""
    out = []
    for r in bgp_session_resets(old, new):
        if r.reason != "address":
            continue
        after = next(m for m in _sessions(new.get(r.device))[r.port] if m.peer == r.peer)
        out.append(SessionMove(r.device, r.port, r.peer, r.neighbor, after.key))
    return out


def bridge_config(old: DeviceConfig, new: DeviceConfig) -> DeviceConfig:
    """``old`` with ``new``'s sessions beside its own (make before break): every session of ``new`` that
    ``old`` lacks (an unnumbered or IPv6 one where ``old`` has the IPv4 one), the interfaces with the
    addresses of both, and the underlay that is not ``ipv4-numbered`` (so that the rendering runs what
    interface and IPv6 sessions need). Its forwarding state (WCMP, drains, prefixes) is ``old``'s: committing
    it moves no traffic, and once both ends of a link run it, the link has both sessions, each
    carrying the same routes with the same link-bandwidth (each link's share of the weights stays)."""
    have = {(n.port, n.key) for n in old.neighbors}
    extra = tuple(n for n in new.neighbors if (n.port, n.key) not in have)
    by_name = {i.name: i for i in new.interfaces}
    interfaces = tuple(replace(i, address=i.address or getattr(by_name.get(i.name), "address", None),
                               address6=i.address6 or getattr(by_name.get(i.name), "address6", None))
                       for i in old.interfaces)
    underlay = new.underlay if new.underlay != "ipv4-numbered" else old.underlay
    order = {n.port: k for k, n in enumerate(old.neighbors)}  # old's port order, each port's old session first
    return replace(old, neighbors=tuple(sorted(old.neighbors + extra, key=lambda n: order.get(n.port, len(order)))),
                   interfaces=interfaces, underlay=underlay, loopback6=old.loopback6 or new.loopback6)

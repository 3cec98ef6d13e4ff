"""From the routers of a running FRR fabric to an intent document, with what it could not decide.

:func:`discover` works on what readers observed (:mod:`southbound.discovery.observed`) and
FRR's configuration read by :mod:`southbound.discovery.frr_text`, with no I/O:

- **links**: two interfaces of two routers whose addresses share a subnet (any length from /30
  up, or /31; IPv6 alike, e.g. /127), pinned as they run (``a_address``, ``b_address``); a
  subnet shared by three or more routers is a question (Loom's links are point to point). An
  interface with no address of its own is one end of an **unnumbered** link when the kernel
  resolved exactly one neighbour on it whose link-local address is another router's
  interface's (the two ends of a veth or a cable see each other's ``fe80::`` address: BGP
  unnumbered sessions and router advertisements run over it);
- **underlay** (``defaults.underlay``): ``unnumbered`` when the links are unnumbered (BGP
  sessions named by interface: ``neighbor eth1 interface remote-as ...``), ``ipv6-numbered``
  when they carry IPv6 addresses only, else ``ipv4-numbered`` (left out, the default); links of
  several kinds are a question. Unnumbered links have no pins;
- **routing**: ``bgp`` when routers run eBGP sessions, else ``ospf`` or ``isis``;
- **prefixes** of both families: what the protocol advertises of each router's own subnets
  (BGP ``network`` statements and ``redistribute connected``; the OSPF or IS-IS interfaces that
  are not links) and its loopbacks when advertised; one prefix from several routers is anycast;
  a router's IPv6 loopback is its ``loopback6``;
- **roles** of an RFC 7938 Clos: the routers with host subnets are the bottom tier, the others
  tiered by their distance from it (two tiers: leaf and spine; three: tor, leaf, spine; four:
  and superspine); pods and planes group the routers that share an ASN (section 5.2.1);
- **ASNs**, **router ids** (pinned), link **metrics** (IS-IS metric, OSPF cost) and
  **capacities** (interface speed; virtual interfaces report none worth having, so
  ``default_gbps``).

The result is checked by Loom's own validator; every error it reports becomes a question too.
"""

from __future__ import annotations

import ipaddress
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from controller.model.documents.base import JsonObject
from controller.model.domain import prefix_order
from controller.model.errors import InvalidIntent
from controller.model.intent import validate_intent
from southbound.config import DEFAULT_TIMERS
from southbound.discovery.forms import auto_ospf_cost, isis_form, ospf_form, session_form
from southbound.discovery.frr_text import FrrRunning, parse_running
from southbound.discovery.observed import ObservedDevice
from southbound.render import host_address, isis_hellos, isis_net, ospf_intervals, port_order

__all__ = ["DEFAULT_GBPS", "Discovery", "Question", "discover"]

#: capacity of a link whose interfaces report no usable speed (veth pairs report 10000 Mb/s or none)
DEFAULT_GBPS = 10.0
_ROLES = {1: ["leaf"], 2: ["leaf", "spine"], 3: ["tor", "leaf", "spine"], 4: ["tor", "leaf", "spine", "superspine"]}


@dataclass(frozen=True, slots=True)
class Question:
    """Something discovery could not decide: ``where`` in the intent (or the router), and the question."""

    where: str
    question: str

    def to_document(self) -> JsonObject:
        return {"where": self.where, "question": self.question}


@dataclass
class Discovery:
    """The discovered ``intent`` document, whether it ``valid``ates, and the ``questions``."""

    intent: dict[str, Any]
    questions: list[Question] = field(default_factory=list)
    valid: bool = False

    def to_document(self) -> JsonObject:
        return {"intent": self.intent, "questions": [q.to_document() for q in self.questions]}


Address = ipaddress.IPv4Interface | ipaddress.IPv6Interface
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass
class _End:
    """One end of a link (``address`` None: unnumbered) or a router's own subnet (a stub)."""

    device: str
    port: str
    address: Address | None

    @property
    def network(self) -> str:
        assert self.address is not None, "an unnumbered end has no subnet"
        return str(self.address.network)


UNDERLAYS = ("ipv4-numbered", "ipv6-numbered", "unnumbered")


@dataclass
class _Fabric:
    """The working state of one discovery."""

    devices: dict[str, ObservedDevice]
    running: dict[str, FrrRunning]
    questions: list[Question] = field(default_factory=list)
    links: list[tuple[_End, _End]] = field(default_factory=list)
    stubs: dict[str, list[_End]] = field(default_factory=lambda: defaultdict(list))

    def ask(self, where: str, question: str) -> None:
        self.questions.append(Question(where, question))


def discover(devices: Iterable[ObservedDevice], *, name: str, default_gbps: float = DEFAULT_GBPS) -> Discovery:
    """The intent of the fabric whose routers are ``devices``, named ``name``.

    Every link's addresses and every router's id are pinned as they run, ASNs kept; capacities
    default to ``default_gbps`` where the interfaces report no real speed.
    """
    devs = {d.name: d for d in sorted(devices, key=lambda d: d.name)}
    fab = _Fabric(devs, {n: parse_running(d.running_config) for n, d in devs.items()})
    _find_links(fab)
    _find_unnumbered_links(fab)
    routing = _routing(fab)
    underlay = _underlay(fab)
    prefixes = _prefixes(fab, routing)
    roles = _roles(fab, prefixes, routing)
    doc: dict[str, Any] = {
        "name": name,
        "routing": routing,
        "devices": [_device(fab, n, roles.get(n), routing, prefixes) for n in devs],
        "links": [_link(fab, a, b, routing, default_gbps, underlay) for a, b in fab.links],
        "prefixes": [{"prefix": p, "origins": sorted(o)} for p, o in sorted(prefixes.items(), key=_prefix_key)],
    }
    if underlay != "ipv4-numbered":  # the default is left out, as Intent.to_document does
        doc = {"name": name, "routing": routing, "defaults": {"underlay": underlay},
               **{k: v for k, v in doc.items() if k not in ("name", "routing")}}
    _group_by_asn(doc, routing)
    _check_sessions(fab, routing, doc)
    _check_ports(fab, doc)
    _check_igp(fab, routing, doc)
    defaulted = [f"{a.device}:{a.port}" for a, b in fab.links if _speeds(fab, a, b) == []]
    if defaulted:
        fab.ask("links", f"{len(defaulted)} links' interfaces report no physical speed (virtual interfaces): "
                f"capacity_gbps set to {default_gbps:g} (--default-gbps); what are their capacities?")
    _note_unmodelled(fab)
    out = Discovery(doc, fab.questions)
    try:
        validate_intent(doc)
        out.valid = True
    except InvalidIntent as exc:
        out.questions += [Question(e.loc, f"Loom's validator refuses this: {e.msg}") for e in exc.errors]
    return out


def _prefix_key(item: tuple[str, Any]) -> tuple[int, int, int]:
    return prefix_order(item[0])


def _addresses(fab: _Fabric, device: str) -> dict[str, list[Address]]:
    """Per port, its IPv4 and global IPv6 addresses (IPv4 first): the kernel's when observed, else the
    configuration's."""
    out: dict[str, list[Address]] = {}
    for itf in fab.devices[device].interfaces:
        out[itf.name] = [*map(ipaddress.IPv4Interface, itf.addresses), *map(ipaddress.IPv6Interface, itf.addresses6)]
    for name, conf in fab.running[device].interfaces.items():
        if not out.get(name):
            out[name] = [*map(ipaddress.IPv4Interface, conf.addresses),
                         *(a for a in map(ipaddress.IPv6Interface, conf.addresses6) if not a.ip.is_link_local)]
    return out


def _find_links(fab: _Fabric) -> None:
    """Links (subnets two routers share) and each router's stub subnets (its alone). A port pair that
    shares subnets of both families is one link (numbered by its IPv4 subnet)."""
    by_subnet: dict[Network, list[_End]] = defaultdict(list)
    for device in fab.devices:
        for port, addrs in sorted(_addresses(fab, device).items()):
            for a in addrs:
                if port != "lo" and a.network.prefixlen < a.max_prefixlen and not a.ip.is_loopback:
                    by_subnet[a.network].append(_End(device, port, a))
    paired: set[frozenset[tuple[str, str]]] = set()
    for net, ends in sorted(by_subnet.items(), key=lambda kv: (kv[0].version, kv[0])):
        routers = {e.device for e in ends}
        if len(ends) == 2 and len(routers) == 2:
            pair = frozenset((e.device, e.port) for e in ends)
            if pair not in paired:
                paired.add(pair)
                fab.links.append((ends[0], ends[1]))
        elif len(routers) == 1:
            for e in ends:
                fab.stubs[e.device].append(e)
        else:
            fab.ask(f"subnet {net}", f"{len(ends)} interfaces ({', '.join(f'{e.device}:{e.port}' for e in ends)}) "
                    "share this subnet; Loom's links are point to point: which pairs are links?")


def _find_unnumbered_links(fab: _Fabric) -> None:
    """Links between ports without a shared subnet whose kernels see each other's link-local address
    (see the module docstring; one end's sight is enough); a port that sees several routers' ports is a
    question, and none of those becomes a link."""
    owner = {ll.lower(): (d, itf.name) for d, obs in fab.devices.items() for itf in obs.interfaces
             for ll in itf.link_local}
    linked = {(e.device, e.port) for pair in fab.links for e in pair}
    sees: dict[tuple[str, str], set[tuple[str, str]]] = {}
    for device, obs in fab.devices.items():
        for itf in obs.interfaces:
            if (device, itf.name) not in linked and itf.name != "lo":
                sees[(device, itf.name)] = {owner[n.lower()] for n in itf.neighbors6 if n.lower() in owner
                                            and owner[n.lower()][0] != device and owner[n.lower()] not in linked}
    for (device, port), peers in sorted(sees.items()):
        if len(peers) > 1:
            seen = ", ".join(f"{d}:{p}" for d, p in sorted(peers))
            fab.ask(f"device {device}", f"{port} sees the link-local addresses of {seen}; Loom's links are "
                    "point to point: which is its peer?")
    for (device, port), peers in sorted(sees.items()):
        if len(peers) != 1:
            continue
        (peer, peer_port), = peers
        back = sees.get((peer, peer_port), set())
        if back - {(device, port)} or back and (peer, peer_port) < (device, port):
            continue  # the peer sees another port, or both see each other and the peer's turn made the link
        fab.links.append((_End(device, port, None), _End(peer, peer_port, None)))


def _link_kind(a: _End) -> str:
    if a.address is None:
        return "unnumbered"
    return "ipv6-numbered" if a.address.version == 6 else "ipv4-numbered"


def _underlay(fab: _Fabric) -> str:
    """How the links are numbered (``defaults.underlay``): the kind most links have; several kinds are a
    question (Loom numbers every link of a fabric alike)."""
    kinds: dict[str, int] = defaultdict(int)
    for a, _b in fab.links:
        kinds[_link_kind(a)] += 1
    if not kinds:
        return "ipv4-numbered"
    chosen = max(UNDERLAYS, key=lambda k: (kinds.get(k, 0), -UNDERLAYS.index(k)))
    if len(kinds) > 1:
        fab.ask("defaults.underlay", "links of several kinds (" + ", ".join(
            f"{n} {k}" for k, n in sorted(kinds.items())) + f"); Loom numbers every link of a fabric alike: {chosen} "
            "assumed (adopting renumbers the others, and their sessions reset)")
    return chosen


def _routing(fab: _Fabric) -> str:
    bgp = [n for n, r in fab.running.items() if r.bgp is not None and r.bgp.neighbors]
    ospf = [n for n, r in fab.running.items() if r.ospf is not None]
    isis = [n for n, r in fab.running.items() if r.isis is not None]
    kinds = [k for k, v in (("bgp", bgp), ("ospf", ospf), ("isis", isis)) if v]
    if len(kinds) > 1:
        fab.ask("routing", f"routers run {' and '.join(kinds)}; Loom runs one protocol per fabric: "
                f"{kinds[0]} assumed (the other's configuration would be removed)")
    if not kinds:
        fab.ask("routing", "no router runs BGP, OSPF or IS-IS: which routing should the fabric have?")
        return "bgp"
    return kinds[0]


def _in_any(address: Address, networks: Iterable[str]) -> bool:
    nets = (ipaddress.ip_network(n, strict=False) for n in networks)
    return any(address.version == n.version and address.ip in n for n in nets)


def _loopback(fab: _Fabric, device: str, version: int = 4) -> Address | None:
    """The router's loopback address of ``version`` (not ``127.0.0.1`` or ``::1``), if any."""
    return next((a for a in _addresses(fab, device).get("lo", []) if a.version == version and not a.ip.is_loopback),
                None)


def _canonical(prefix: str) -> str:
    try:
        return str(ipaddress.ip_network(prefix, strict=False))
    except ValueError:
        return prefix


def _prefixes(fab: _Fabric, routing: str) -> dict[str, set[str]]:
    """Prefix -> originating routers: what each router's protocol advertises of its own subnets."""
    out: dict[str, set[str]] = defaultdict(set)
    for device, run in fab.running.items():
        own = [(e.port, e.address) for e in fab.stubs.get(device, []) if e.address is not None]
        for version in (4, 6):
            lo = _loopback(fab, device, version)
            if lo is not None:
                own.append(("lo", lo))
        for port, addr in own:
            if _advertised(fab, device, run, routing, port, addr):
                out[str(addr.network)].add(device)
        _ask_filtered_redistribution(fab, device, run, routing)
        if routing == "bgp" and run.bgp is not None:
            connected = {str(a.network) for _p, a in own}
            for net in run.bgp.networks:
                if _canonical(net) not in connected:
                    fab.ask(f"router {device}", f"BGP announces {net}, which is no subnet of {device}'s "
                            "interfaces: Loom originates only connected subnets; keep it (a static route?)")
    return out


def _ask_filtered_redistribution(fab: _Fabric, device: str, run: FrrRunning, routing: str) -> None:
    """``redistribute connected route-map X``: discovery does not evaluate route maps, so every connected
    subnet is taken as originated; the operator is asked which the map lets through."""
    proto = {"bgp": run.bgp, "ospf": run.ospf, "isis": run.isis}.get(routing)
    for r in proto.redistribute if proto is not None else []:
        w = r.split()
        if "connected" in w and "route-map" in w[:-1]:
            fab.ask(f"router {device}", f"redistributes connected subnets through route-map "
                    f"{w[w.index('route-map') + 1]}: taken as originating all of {device}'s non-transit subnets "
                    "and its loopback; which of them does the map let through?")


def _advertised(fab: _Fabric, device: str, run: FrrRunning, routing: str, port: str, addr: Address) -> bool:
    net = str(addr.network)
    if routing == "bgp":
        bgp = run.bgp
        return bgp is not None and (net in {_canonical(n) for n in bgp.networks}
                                    or any(r.split()[0] == "connected" for r in bgp.redistribute))
    if routing == "ospf":
        ospf = run.ospf
        conf = run.interfaces.get(port)
        return addr.version == 4 and ospf is not None and (_in_any(addr, [n for n, _a in ospf.networks])
                                     or (conf is not None and conf.ospf_area is not None)
                                     or any(r.split()[0] == "connected" for r in ospf.redistribute))
    conf = run.interfaces.get(port)
    isis = run.isis
    return isis is not None and ((conf is not None and (conf.isis6 if addr.version == 6 else conf.isis))
                                 or any(r.split()[1:2] == ["connected"] for r in isis.redistribute))


def _roles(fab: _Fabric, prefixes: Mapping[str, set[str]], routing: str) -> dict[str, str]:
    """Clos roles by distance from the routers that have host subnets (the bottom tier). A link-state fabric
    that is no Clos (a link within a tier, or no 2 to 4 tiers) needs none: its routers are ``router``."""
    edge = {d for d, ends in fab.stubs.items() if any(d in prefixes.get(e.network, ()) for e in ends)}
    adj: dict[str, set[str]] = defaultdict(set)
    for a, b in fab.links:
        adj[a.device].add(b.device)
        adj[b.device].add(a.device)
    dist = {d: 0 for d in edge}
    frontier = sorted(edge)
    while frontier:
        nxt = []
        for d in frontier:
            for m in sorted(adj[d]):
                if m not in dist:
                    dist[m] = dist[d] + 1
                    nxt.append(m)
        frontier = nxt
    missing = sorted(set(fab.devices) - set(dist))
    for d in missing:
        fab.ask(f"device {d}", "not connected to any router with host subnets: which tier is it?")
    tiers = max(dist.values(), default=-1) + 1
    names = _ROLES.get(tiers)
    flat = [(a, b) for a, b in fab.links if a.device in dist and b.device in dist
            and abs(dist[a.device] - dist[b.device]) != 1]
    if routing != "bgp" and (names is None or flat):
        return {}  # shortest paths by metric: roles are labels, and this is no Clos
    if names is None:
        fab.ask("devices", f"{tiers} tiers from the host-facing routers: not a Clos of 2 to 4 tiers; roles left "
                "'router'")
        return {}
    for a, b in flat:
        fab.ask(f"link {a.device}:{a.port}", f"joins {a.device} and {b.device}, both in tier "
                f"{dist[a.device]}: a Clos links only adjacent tiers")
    return {d: names[k] for d, k in dist.items()}


def _router_id(fab: _Fabric, device: str, routing: str) -> str | None:
    run = fab.running[device]
    rid = None
    if routing == "bgp" and run.bgp is not None:
        rid = run.bgp.router_id
    elif routing == "ospf" and run.ospf is not None:
        rid = run.ospf.router_id
    if rid is None:
        lo = _loopback(fab, device, 4)
        rid = str(lo.ip) if lo is not None else None
        if routing == "isis" and rid is not None:
            return rid  # IS-IS has no router id: the loopback (the NET is checked against it)
        fab.ask(f"device {device}", f"no router id configured: FRR chose one; pinned to {rid} (its loopback)"
                if rid else "no router id configured and no loopback: which router id does it have?")
    return rid


def _device(fab: _Fabric, device: str, role: str | None, routing: str,
            prefixes: Mapping[str, set[str]]) -> dict[str, Any]:
    """A device's document; an IPv6 loopback it advertises is its ``loopback6`` (pinned as it runs)."""
    out: dict[str, Any] = {"name": device, "role": role or "router"}
    lo6 = _loopback(fab, device, 6)
    if lo6 is not None and device in prefixes.get(str(lo6.network), ()) and lo6.network.prefixlen == 128:
        out["loopback6"] = str(lo6.ip)
    run = fab.running[device]
    if routing == "bgp":
        if run.bgp is None:
            fab.ask(f"device {device}", "runs no BGP in a BGP fabric: which ASN should it have?")
        else:
            out["asn"] = run.bgp.asn
    rid = _router_id(fab, device, routing)
    if rid is not None:
        out["router_id"] = rid
    return out


def _cost(fab: _Fabric, end: _End, routing: str) -> int | None:
    conf = fab.running[end.device].interfaces.get(end.port)
    if routing == "isis":
        return conf.isis_metric if conf is not None and conf.isis_metric is not None else 10
    if routing == "ospf":
        if conf is not None and conf.ospf_cost is not None:
            return conf.ospf_cost
        return auto_ospf_cost(fab.devices[end.device], fab.running[end.device], end.port)
    return None


def _ospf_passive(run: FrrRunning, port: str) -> bool:
    """Whether OSPF is passive on ``port``: the interface's own ``ip ospf passive`` or ``no ip ospf passive``,
    then ``passive-interface IF`` or ``no passive-interface IF``, then ``passive-interface default``."""
    conf, ospf = run.interfaces.get(port), run.ospf
    if conf is not None and (conf.ospf_passive or conf.ospf_active):
        return conf.ospf_passive
    if ospf is None:
        return False
    if port in ospf.passive or port in ospf.active:
        return port in ospf.passive
    return ospf.passive_default


def _speeds(fab: _Fabric, a: _End, b: _End) -> list[int]:
    """The physical speeds (Mb/s) the link's ends report: none for virtual (veth) interfaces."""
    speeds = []
    for e in (a, b):
        itf = fab.devices[e.device].interface(e.port)
        if itf is not None and itf.speed_mbps and itf.speed_mbps > 0 and itf.kind != "veth":
            speeds.append(itf.speed_mbps)
    return speeds


def _capacity(fab: _Fabric, a: _End, b: _End, default_gbps: float) -> float:
    speeds = _speeds(fab, a, b)
    return min(speeds) / 1000 if speeds else default_gbps


def _link(fab: _Fabric, a: _End, b: _End, routing: str, default_gbps: float, underlay: str) -> dict[str, Any]:
    out: dict[str, Any] = {"a": a.device, "a_port": a.port, "b": b.device, "b_port": b.port,
                           "capacity_gbps": _capacity(fab, a, b, default_gbps)}
    for end in (a, b):
        if routing == "ospf" and _ospf_passive(fab.running[end.device], end.port):
            fab.ask(f"link {end.device}:{end.port}", f"OSPF is passive on {end.device}:{end.port}, so no "
                    "adjacency runs over this link; Loom would form one: keep the link out of the fabric?")
    ca, cb = _cost(fab, a, routing), _cost(fab, b, routing)
    if ca is not None and cb is not None:
        if ca != cb:
            fab.ask(f"link {a.device}:{a.port}", f"its ends have different costs ({ca} on {a.device}, {cb} on "
                    f"{b.device}); Loom's links have one metric: {max(ca, cb)} assumed")
        out["metric"] = max(ca, cb)
    if a.address is not None and b.address is not None and _link_kind(a) == underlay:
        out["a_address"], out["b_address"] = str(a.address), str(b.address)
    return out


def _group_by_asn(doc: dict[str, Any], routing: str) -> None:
    """Pods and planes for routers that share an ASN (RFC 7938 5.2.1): leaves of one ASN are a pod,
    spines of one ASN a plane (when spines have several ASNs)."""
    if routing != "bgp":
        return
    by_role: dict[str, dict[int, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for d in doc["devices"]:
        if "asn" in d:
            by_role[d["role"]][d["asn"]].append(d)
    leaves = by_role.get("leaf", {})
    for pod, (_asn, members) in enumerate(sorted((a, m) for a, m in leaves.items() if len(m) > 1)):
        for d in members:
            d["pod"] = pod
    spines = by_role.get("spine", {})
    if len(spines) > 1:
        for plane, asn in enumerate(sorted(spines)):
            for d in spines[asn]:
                d["plane"] = plane


def _check_sessions(fab: _Fabric, routing: str, doc: Mapping[str, Any]) -> None:
    """Each router's session form (``bgp``, :func:`~southbound.discovery.forms.session_form`), and BGP sessions
    that are not one per discovered link (Loom renders exactly those: to the peer's address on a numbered link,
    on the interface of an unnumbered one): they would go."""
    if routing != "bgp":
        return
    across: set[tuple[str, str]] = set()
    for a, b in fab.links:
        for here, there in ((a, b), (b, a)):
            across.add((here.device, here.port) if there.address is None else (here.device, str(there.address.ip)))
    devices = {d["name"]: d for d in doc["devices"]}
    for device, run in fab.running.items():
        if run.bgp is not None and device in devices:
            form, questions = session_form(run.bgp, (p for p in run.bgp.neighbors if (device, p) in across))
            if form is not None:
                devices[device]["bgp"] = form
            for q in questions:
                fab.ask(f"device {device}", q)
        for peer, remote in (run.bgp.neighbors if run.bgp is not None else {}).items():
            if remote == "internal" or (run.bgp is not None and remote == str(run.bgp.asn)):
                fab.ask(f"device {device}", f"BGP neighbor {peer} is an iBGP session (remote-as {remote}): Loom "
                        "renders eBGP between routers of different ASNs, so adopting would replace this session")
            if (device, peer) in across:
                continue
            how = "not across a discovered link"
            if not peer[0].isdigit() and ":" not in peer:
                how = "over an interface (unnumbered) that is on no discovered link"
            fab.ask(f"device {device}", f"BGP neighbor {peer} is {how}: Loom renders one session per link "
                    "(to the peer's address on it, or on the interface of an unnumbered link), so adopting would "
                    "remove this session")


def _check_ports(fab: _Fabric, doc: Mapping[str, Any]) -> None:
    """The ports a device's announced subnets are on, pinned (``host_ports``) where Loom would render them
    elsewhere (on ``host0``, ``host1``, ... in prefix order, each by the subnet's first address); and what
    Loom's rendering does not keep: a subnet not announced, loopback addresses besides the router id's."""
    rids = {d["name"]: d.get("router_id") for d in doc["devices"]}
    lo6 = {d["name"]: d.get("loopback6") for d in doc["devices"]}
    mine: dict[str, dict[int, list[str]]] = defaultdict(lambda: defaultdict(list))
    for p in doc["prefixes"]:
        for o in p["origins"]:
            if p["prefix"] not in (f"{rids.get(o)}/32", f"{lo6.get(o)}/128"):
                mine[o][4 if ":" not in p["prefix"] else 6].append(p["prefix"])
    devices = {d["name"]: d for d in doc["devices"]}
    for device in fab.devices:
        want = {net: (f"host{k}", host_address(net)) for nets in mine[device].values() for k, net in enumerate(nets)}
        kept: dict[str, list[str]] = defaultdict(list)
        for e in fab.stubs.get(device, []):
            if e.network not in want:
                fab.ask(f"device {device}", f"{e.port} has {e.address}, on no link and not announced: Loom's "
                        "rendering does not keep it; announce it (a prefix) or drop it?")
            else:
                kept[e.port].append(str(e.address))
        _pin_host_ports(fab, device, devices.get(device), kept, want)
        lo = [a for a in _addresses(fab, device).get("lo", []) if not a.ip.is_loopback]
        extra = [str(a) for a in lo if str(a.ip) not in (rids.get(device), lo6.get(device))]
        if extra:
            fab.ask(f"device {device}", f"loopback addresses {', '.join(extra)} besides the router id: Loom's "
                    "rendering keeps only the router id on the loopback")


def _check_isis_levels(fab: _Fabric) -> None:
    """Routers with level-1 adjacencies in several areas route between areas through level-2 (and a default
    route), not by the fabric-wide shortest paths Loom plans: a question."""
    areas = {run.isis.net.rsplit(".", 4)[0] for run in fab.running.values() if run.isis is not None and run.isis.net}
    level1 = sorted(n for n, run in fab.running.items()
                    if run.isis is not None and (run.isis.is_type or "level-1-2") != "level-2-only")
    if level1 and len(areas) > 1:
        fab.ask("devices", f"IS-IS areas {', '.join(sorted(areas))} with level-1 routing on {', '.join(level1)}: "
                "Loom plans one level's shortest paths; make them level-2-only, or one area?")


def _pin_host_ports(fab: _Fabric, device: str, doc: dict[str, Any] | None, kept: Mapping[str, list[str]],
                    want: Mapping[str, tuple[str, str]]) -> None:
    """``doc``'s ``host_ports``: every announced subnet's port and address as it runs, when any differs from
    what Loom renders by itself (``want``); a port with two addresses of a family is a question instead."""
    if doc is None or all(want[str(ipaddress.ip_interface(a).network)] == (port, a)
                          for port, addrs in kept.items() for a in addrs):
        return
    pins = []
    for port, addrs in sorted(kept.items(), key=lambda kv: port_order(kv[0])):
        if len({ipaddress.ip_interface(a).version for a in addrs}) < len(addrs):
            fab.ask(f"device {device}", f"{port} has several announced addresses of one family ({', '.join(addrs)}): "
                    "Loom's host port holds one of each; which one?")
            continue
        pins.append({"port": port, "addresses": addrs})
    if pins:
        doc["host_ports"] = pins


def _check_igp(fab: _Fabric, routing: str, doc: Mapping[str, Any]) -> None:
    """What an IS-IS or OSPF router runs that Loom would render otherwise (its adjacencies would reset); an
    OSPF router's form (``ospf``, :func:`~southbound.discovery.forms.ospf_form`) keeps what a form holds."""
    devices = {d["name"]: d for d in doc["devices"]}
    ports: dict[str, list[str]] = defaultdict(list)
    for pair in fab.links:
        for end in pair:
            ports[end.device].append(end.port)
    loom = ospf_intervals(DEFAULT_TIMERS)[:2]
    loom_isis = isis_hellos(DEFAULT_TIMERS)
    if routing == "isis":
        _check_isis_levels(fab)
    for device, run in fab.running.items():
        rid = devices.get(device, {}).get("router_id")
        if routing == "isis" and run.isis is not None:
            form, questions = isis_form(run, ports[device], isis_net(rid) if rid else None, loom_isis)
            if form is not None and device in devices:
                devices[device]["isis"] = form
            for q in questions:
                fab.ask(f"device {device}", q)
        if routing == "ospf" and run.ospf is not None:
            areas = {a for _n, a in run.ospf.networks} | {i.ospf_area for i in run.interfaces.values() if i.ospf_area}
            if areas - {"0", "0.0.0.0"}:
                fab.ask(f"device {device}", f"OSPF areas {', '.join(sorted(areas))}: which area should each "
                        "interface be in (Loom's fabric is one backbone area)?")
            form, questions = ospf_form(run, ports[device], loom)
            if form is not None and device in devices:
                devices[device]["ospf"] = form
            for q in questions:
                fab.ask(f"device {device}", q)


def _note_unmodelled(fab: _Fabric) -> None:
    """Configuration that Loom's rendering does not carry: static routes and unmodelled lines."""
    for device, run in fab.running.items():
        for line in run.statics:
            fab.ask(f"device {device}", f"static route '{line}': Loom's rendering has no static routes; "
                    "adopting would remove it")
        if run.other:
            shown = "; ".join(run.other[:5]) + (f"; ... ({len(run.other)} lines)" if len(run.other) > 5 else "")
            fab.ask(f"device {device}", f"configuration Loom does not model: {shown}")

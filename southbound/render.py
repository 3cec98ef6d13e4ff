"""From intent (and plan) to device configs, and from a device config to FRR.

This module is the one place that knows FRR's configuration syntax. It owns
two pure functions: :func:`device_configs` derives every device's
:class:`~southbound.config.DeviceConfig` from an intent, deterministically and
whatever the order of the intent's lists (a /31 per link and a router id per
device without a loopback from :mod:`controller.model.addressing`, which numbers
each by its own stable id, so adding or removing one link or device renumbers no
other; ports in port order; a host port per originated prefix, in prefix order,
holding the prefix's first address (but the router id's own /32, which the
loopback holds); one eBGP session per link as RFC 7938 prescribes), and, given a plan, the WCMP state it realizes; and
:func:`render_frr` turns one config into FRR's integrated configuration text
(``frr.conf``). ``loom lab gen`` writes lab files with it and the device agent
renders the changes it pushes with it, so lab and switch speak the same FRR.
"""

from __future__ import annotations

import ipaddress
import re
from collections import defaultdict

from controller.model import (
    DEFAULT_METRIC,
    BgpForm,
    HostPort,
    Intent,
    Link,
    Routing,
    Underlay,
    WcmpRealization,
    prefix_order,
    prefix_version,
)
from controller.model import IsisForm as IsisFormPin
from controller.model import OspfForm as OspfFormPin
from controller.model.addressing import LINK_POOL, LOOPBACK_POOL, Allocation, allocate, carried
from controller.model.plan import Plan
from southbound.config import (
    BgpNeighbor,
    DeviceConfig,
    FibNexthop,
    FibRoute,
    Interface,
    IsisForm,
    LinkBandwidth,
    OspfForm,
    SessionForm,
    bridge_config,
)
from southbound.rendered import FibHop, Rendered

__all__ = [
    "LINK_POOL",
    "LOOPBACK_POOL",
    "build_rendered",
    "bridged",
    "config_hash",
    "device_configs",
    "host_address",
    "isis_hellos",
    "isis_net",
    "ospf_intervals",
    "port_order",
    "render_frr",
]

ISIS_AREA = "49.0001"
ISIS_TAG = "loom"
#: the OSPF area every interface is in: Loom's OSPF fabrics are one backbone area
OSPF_AREA = "0.0.0.0"
_DENY = "LOOM-DENY"
_LOCAL = "LOOM-LOCAL"


def host_address(prefix: str) -> str:
    """The address a device originating ``prefix`` holds on its host port: the
    prefix's first address, in CIDR form (``10.0.0.0/24`` -> ``10.0.0.1/24``,
    ``2001:db8::/64`` -> ``2001:db8::1/64``)."""
    net = ipaddress.ip_network(prefix)
    first = net.network_address if net.num_addresses <= 2 else net.network_address + 1
    return f"{first}/{net.prefixlen}"


def isis_net(router_id: str) -> str:
    """An IS-IS NET from a router id: ``10.255.0.1`` -> ``49.0001.0102.5500.0001.00``."""
    digits = "".join(f"{int(o):03d}" for o in router_id.split("."))
    return f"{ISIS_AREA}.{digits[0:4]}.{digits[4:8]}.{digits[8:12]}.00"


def ospf_intervals(timers: tuple[int, int]) -> tuple[int, int, int]:
    """The OSPF hello, dead and retransmit intervals Loom renders on a fabric link for the BGP ``timers``
    (keepalive, hold): hellos every keepalive, dead after the hold rounded to hellos (two at least), retransmit
    every keepalive. Discovery holds a running fabric's intervals to these (neighbours whose hello or dead
    intervals differ drop their adjacency)."""
    keepalive, hold = timers
    return keepalive, keepalive * max(2, hold // keepalive), keepalive


def isis_hellos(timers: tuple[int, int]) -> tuple[int, int]:
    """The IS-IS hello interval and multiplier Loom renders on a fabric link for the BGP ``timers``
    (keepalive, hold): hellos every keepalive, held for the hold rounded to hellos (two at least). Discovery
    holds a running fabric's hellos to these."""
    keepalive, hold = timers
    return keepalive, max(2, hold // keepalive)


def port_order(name: str) -> tuple[str, int, str]:
    """Ports in natural order: ``eth2`` before ``eth10``."""
    m = re.match(r"^(.*?)(\d+)$", name)
    return (m.group(1), int(m.group(2)), name) if m else (name, -1, name)


def _prefix_order(prefix: str) -> tuple[int, int, int]:
    return prefix_order(prefix)


#: where a bridged intent (:func:`bridged`) keeps the intent it bridges to (a key no model field has)
_BRIDGE = "loom_bridge_to"


def bridged(active: Intent, proposed: Intent) -> Intent:
    """``active``, marked so that :func:`device_configs` gives each device the bridge toward ``proposed``'s
    sessions (:func:`southbound.config.bridge_config`): ``active``'s forwarding with both intents' BGP sessions,
    what a change that moves sessions (an underlay change) commits first, make before break."""
    out = active.model_copy()
    out.__dict__[_BRIDGE] = proposed
    return out


def _bridge_configs(intent: Intent, plan: Plan | None, allocation: Allocation | None) -> dict[str, DeviceConfig]:
    target = intent.__dict__[_BRIDGE]
    plain = intent.model_copy()
    del plain.__dict__[_BRIDGE]
    old, new = device_configs(plain, plan, allocation=allocation), device_configs(target)
    return {d: bridge_config(c, new[d]) if d in new else c for d, c in old.items()}


def device_configs(intent: Intent, plan: Plan | None = None, *,
                   allocation: Allocation | None = None) -> dict[str, DeviceConfig]:
    """Every device's config for ``intent``; with ``plan``, its WCMP state too.

    Addresses and router ids come from ``allocation``, by default the one :func:`allocate` gives
    ``intent`` keeping the pins its stored revision carries (:func:`controller.model.addressing.carried`).

    The realization follows ``intent.wcmp_realization`` when WCMP is enabled:
    ``link-bandwidth`` makes each next hop M of device N for prefix P attach
    the plan's weight as the link-bandwidth of P toward N; ``fib`` gives each
    device weighted nexthop groups for the agent to install.

    >>> from controller.model.intent import validate_intent
    >>> i = validate_intent({"name": "x", "devices": [
    ...     {"name": "t0", "role": "tor", "asn": 65100}, {"name": "s0", "role": "leaf", "asn": 65000}],
    ...     "links": [{"a": "t0", "a_port": "eth1", "b": "s0", "b_port": "eth1"}],
    ...     "prefixes": [{"prefix": "10.0.0.0/24", "origins": ["t0"]}]})
    >>> device_configs(i)["t0"].neighbors[0].address
    '100.76.227.54'
    """
    if _BRIDGE in intent.__dict__:
        return _bridge_configs(intent, plan, allocation)
    if allocation is None:
        allocation = allocate(intent, carried(intent))
    ports, neighbors, gateway = _link_ends(intent, allocation)
    originated = _originated(intent)
    lbw, fib = _wcmp_state(intent, plan, gateway)
    out: dict[str, DeviceConfig] = {}
    underlay = intent.defaults.underlay
    six = any(p.version == 6 for p in intent.prefixes) or any(d.loopback_v6 is not None for d in intent.devices)
    for d in intent.devices:
        router_id = allocation.router_id(intent, d.name)
        loopback6 = d.loopback_v6
        out[d.name] = DeviceConfig(
            hostname=d.name,
            asn=d.asn if intent.routing == Routing.BGP else None,
            router_id=router_id,
            interfaces=tuple(ports[d.name]) + _host_ports(originated[d.name], router_id, loopback6, d.host_ports or ()),
            neighbors=tuple(neighbors[d.name]),
            originated=tuple(originated[d.name]),
            routing=intent.routing.value,
            drained=d.name in intent.drained_devices,
            link_bandwidth=tuple(lbw[d.name]),
            fib_routes=tuple(fib[d.name]),
            underlay=underlay.value,
            loopback6=None if loopback6 is None else str(loopback6),
            ipv6=six,
            session_form=_session_form(d.bgp) if intent.routing == Routing.BGP else SessionForm(),
            ospf_form=_ospf_form(d.ospf) if intent.routing == Routing.OSPF else OspfForm(),
            isis_form=_isis_form(d.isis) if intent.routing == Routing.ISIS else IsisForm(),
        )
    return out


def _session_form(form: BgpForm | None) -> SessionForm:
    """The southbound form of a device's ``bgp`` (Loom's own when absent)."""
    if form is None:
        return SessionForm()
    return SessionForm(form.peer_group, form.remote_as == "external", form.v6only,
                       form.originate == "redistribute-connected")


def _ospf_form(form: OspfFormPin | None) -> OspfForm:
    """The southbound form of a device's ``ospf`` (Loom's own when absent)."""
    if form is None:
        return OspfForm()
    return OspfForm(form.network_type == "broadcast", form.hello_s, form.dead_s, form.networks)


def _isis_form(form: IsisFormPin | None) -> IsisForm:
    """The southbound form of a device's ``isis`` (Loom's own when absent)."""
    if form is None:
        return IsisForm()
    return IsisForm(form.tag or ISIS_TAG, form.net, form.is_type, form.metric_style, form.network_type == "broadcast",
                    form.hello_s, form.hello_multiplier)


def _host_ports(originated: list[str], router_id: str, loopback6: ipaddress.IPv6Address | None,
                pins: tuple[HostPort, ...] = ()) -> tuple[Interface, ...]:
    """The host ports where a device's prefixes live: a pinned port (:class:`~controller.model.HostPort`)
    holds the prefixes of its addresses, with those addresses; then ``hostK`` (a name no pin took) holds the
    K-th other IPv4 prefix and the K-th other IPv6 one (a dual-stack host subnet), each by its first address.
    A prefix that is the device's own loopback (its router id's /32, its IPv6 loopback's /128) lives on the
    loopback, not on a host port."""
    own = {f"{router_id}/32"} | ({f"{loopback6}/128"} if loopback6 is not None else set())
    pinned = [Interface(p.port, next((str(a) for a in p.addresses if a.version == 4), None), host=True,
                        address6=next((str(a) for a in p.addresses if a.version == 6), None)) for p in pins]
    taken = {str(a.network) for p in pins for a in p.addresses}
    v4 = [p for p in originated if p not in own and p not in taken and prefix_version(p) == 4]
    v6 = [p for p in originated if p not in own and p not in taken and prefix_version(p) == 6]
    names = (n for k in range(len(v4) + len(v6) + len(pins) + 1) if (n := f"host{k}") not in {p.port for p in pins})
    return tuple(pinned) + tuple(Interface(next(names), host_address(v4[k]) if k < len(v4) else None, host=True,
                                           address6=host_address(v6[k]) if k < len(v6) else None)
                                 for k in range(max(len(v4), len(v6))))


def _link_ends(intent: Intent, allocation: Allocation) -> tuple[
        dict[str, list[Interface]], dict[str, list[BgpNeighbor]], dict[tuple[str, str], str]]:
    """Per device, its link ports and (BGP) its sessions, in port order; and per ``(device, port)``, the
    peer's address on that link (a ``fib`` next hop's gateway)."""
    ports: dict[str, list[Interface]] = defaultdict(list)
    neighbors: dict[str, list[BgpNeighbor]] = defaultdict(list)
    gateway: dict[tuple[str, str], str] = {}  # (device, port) -> the peer's address on that link
    drained_links = intent.drained_links
    dmap = intent.device_map
    for link in intent.links:
        (a4, b4), (a6, b6) = _numbering(intent.defaults.underlay, allocation, link)
        drained = link.key in drained_links
        ports[link.a].append(Interface(link.a_port, a4, peer=link.b, peer_port=link.b_port,
                                       metric=link.metric, drained=drained, address6=a6))
        ports[link.b].append(Interface(link.b_port, b4, peer=link.a, peer_port=link.a_port,
                                       metric=link.metric, drained=drained, address6=b6))
        # the peer's address on the link: IPv4 where numbered so, else IPv6; None (unnumbered): link-local
        peer_of_a, peer_of_b = _host_part(b4 or b6), _host_part(a4 or a6)
        gateway[link.a, link.a_port] = peer_of_a or ""
        gateway[link.b, link.b_port] = peer_of_b or ""
        if intent.routing == Routing.BGP:
            asn_a, asn_b = dmap[link.a].asn, dmap[link.b].asn
            assert asn_a is not None and asn_b is not None  # validated: routing bgp needs ASNs
            neighbors[link.a].append(BgpNeighbor(link.a_port, link.b, asn_b, peer_of_a, drained))
            neighbors[link.b].append(BgpNeighbor(link.b_port, link.a, asn_a, peer_of_b, drained))
    for itfs in ports.values():
        itfs.sort(key=lambda x: port_order(x.name))
    for peers in neighbors.values():
        peers.sort(key=lambda x: port_order(x.port))
    return ports, neighbors, gateway


def _host_part(cidr: str | None) -> str | None:
    return None if cidr is None else cidr.split("/")[0]


def _numbering(underlay: Underlay, allocation: Allocation, link: Link
               ) -> tuple[tuple[str | None, str | None], tuple[str | None, str | None]]:
    """A link's ends' IPv4 and IPv6 addresses (CIDR) on ``underlay``: ``ipv4-numbered`` its /31 (or pins),
    ``ipv6-numbered`` its /127 (or pins), ``unnumbered`` none (the interfaces' link-local addresses)."""
    if underlay == Underlay.IPV4_NUMBERED:
        return allocation.link_addresses(link), (None, None)
    if underlay == Underlay.IPV6_NUMBERED:
        return (None, None), allocation.link_addresses6(link)
    return (None, None), (None, None)


def _originated(intent: Intent) -> dict[str, list[str]]:
    """Per device, the prefixes it originates, in prefix order."""
    originated: dict[str, list[str]] = defaultdict(list)
    for p in intent.prefixes:
        for origin in p.origins:
            originated[origin].append(p.prefix)
    for name in originated:
        originated[name].sort(key=_prefix_order)
    return originated


def _wcmp_state(intent: Intent, plan: Plan | None, gateway: dict[tuple[str, str], str]
                ) -> tuple[dict[str, list[LinkBandwidth]], dict[str, list[FibRoute]]]:
    """The WCMP state that realizes ``plan`` (none without a plan or with WCMP off): per device, the
    link-bandwidth it attaches toward its neighbors, or the weighted ``fib`` routes its agent installs."""
    lbw: dict[str, list[LinkBandwidth]] = defaultdict(list)
    fib: dict[str, list[FibRoute]] = defaultdict(list)
    if plan is not None and intent.wcmp_enabled:
        realization = intent.wcmp_realization
        for name, dp in sorted(plan.devices.items()):
            for prefix, gid in sorted(dp.routes.items()):
                hops = dp.groups[gid]
                if realization == WcmpRealization.LINK_BANDWIDTH:
                    for h in hops:
                        hop_link = intent.link_by_end.get(f"{name}:{h.port}")
                        if hop_link is None:
                            continue
                        far_port = hop_link.b_port if (hop_link.a, hop_link.a_port) == (name, h.port) \
                            else hop_link.a_port
                        lbw[h.neighbor].append(LinkBandwidth(far_port, prefix, max(1, min(25600, h.weight))))
                else:
                    fib[name].append(FibRoute(prefix, gid, tuple(
                        FibNexthop(h.port, _gateway_for(prefix, gateway.get((name, h.port), "")), h.weight)
                        for h in hops)))
    return lbw, fib


def _gateway_for(prefix: str, gateway: str) -> str:
    """A ``fib`` next hop's gateway for ``prefix``: the peer's link address, unless the prefix is IPv6 and the
    link numbered in IPv4 only, where the next hop is the peer's IPv6 link-local address ("": the agent
    finds it on the port). An IPv4 prefix keeps an IPv6 gateway (RFC 8950: IPv4 over an IPv6 next hop)."""
    return "" if prefix_version(prefix) == 6 and "." in gateway else gateway


def _name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "-", text)


def _out_map(config: DeviceConfig, port: str) -> str:
    return f"LOOM-OUT-{_name(port)}"


def _bandwidth_entries(config: DeviceConfig, port: str, mbps: int, prefixes: list[str], rmap: str, seq: int
                       ) -> list[list[str]]:
    """The prefix list and route-map entry that attach ``mbps`` to ``prefixes`` toward ``port``, one per
    family (``ip prefix-list`` matched by ``match ip address``, ``ipv6 prefix-list`` by ``match ipv6
    address``): the one route map serves both address families, each entry matching routes of its own."""
    out: list[list[str]] = []
    for version, ip, tag in ((4, "ip", "LB"), (6, "ipv6", "LB6")):
        family = sorted(p for p in prefixes if prefix_version(p) == version)
        if not family:
            continue
        plist = f"LOOM-{tag}-{_name(port)}-{mbps}"
        lines = [f"{ip} prefix-list {plist} seq {5 * (k + 1)} permit {p}" for k, p in enumerate(family)]
        lines += [f"route-map {rmap} permit {seq + 10 * len(out)}", f" match {ip} address prefix-list {plist}"]
        if config.drained:
            lines.append(f" match as-path {_LOCAL}")
        out.append(lines + [f" set extcommunity bandwidth {mbps}", "exit", "!"])
    return out


def _policy_lines(config: DeviceConfig) -> tuple[list[str], dict[str, str]]:
    """Prefix lists, as-path lists and route maps; returns the lines and, per
    port, the outbound route map its neighbor uses."""
    lines: list[str] = []
    out_maps: dict[str, str] = {}
    by_port: dict[str, dict[int, list[str]]] = defaultdict(lambda: defaultdict(list))
    for b in config.link_bandwidth:
        by_port[b.port][b.mbps].append(b.prefix)
    if config.drained:
        lines += [f"bgp as-path access-list {_LOCAL} seq 5 permit ^$", "!"]
    if any(n.drained for n in config.neighbors):
        lines += [f"route-map {_DENY} deny 10", "exit", "!"]
    for n in config.neighbors:
        if n.drained or not (config.drained or n.port in by_port) or n.port in out_maps:
            continue  # a port's route map once, whatever sessions run over it (two while a bridge moves them)
        rmap = _out_map(config, n.port)
        out_maps[n.port] = rmap
        seq = 10
        for mbps, prefixes in sorted(by_port.get(n.port, {}).items()):
            for entry in _bandwidth_entries(config, n.port, mbps, prefixes, rmap, seq):
                lines += entry
                seq += 10
        lines.append(f"route-map {rmap} permit 65000")
        if config.drained:
            lines.append(f" match as-path {_LOCAL}")
        lines += ["exit", "!"]
    return lines, out_maps


def render_frr(config: DeviceConfig) -> str:
    """FRR 8.4 integrated configuration (``frr.conf``) for ``config``.

    BGP (RFC 7938): one eBGP session per link to the peer's /31 address,
    ``maximum-paths`` with ``bgp bestpath as-path multipath-relax``, fast timers,
    ``network`` for each originated prefix. Unnumbered, the session is an
    interface peer ``v6only``: without it FRR runs the session over IPv4 when
    the port has a /30 or /31 (a bridge's ports do, while an underlay change
    moves the sessions), and resets it when that address goes. A drained device advertises only
    what it originates (outbound route maps matching an empty AS path); a
    drained link neither sends nor accepts routes. IS-IS: a level-2
    point-to-point adjacency per link with the link's metric; a drained device
    sets the overload bit, a drained link has no adjacency. OSPF (RFC 2328): one
    backbone area, a point-to-point adjacency per link whose interface cost is
    the link's metric, host subnets passive; a drained device is a stub router
    (RFC 6987: ``max-metric router-lsa administrative``), a drained link has no
    adjacency. With OSPF or IS-IS, a device that originates its router id's /32 has
    its loopback in the IGP (BGP announces it with a ``network``).

    zebra frees a nexthop group a second after no route uses it (``zebra
    nexthop-group keep 1``, not 180 s): a group whose next hop over a port
    the kernel deleted when the port went down would otherwise be reused,
    still without it, when the routes come back over that port (FRR 8.4;
    :mod:`southbound.device.nhgroups` mends a group that stayed in use).
    """
    lines = _global_lines(config) + _interface_lines(config)
    if config.routing == Routing.ISIS.value:
        lines += _isis_lines(config)
    elif config.routing == Routing.OSPF.value:
        lines += _ospf_lines(config)
    else:
        lines += _bgp_lines(config)
    return "\n".join(lines) + "\n"


def build_rendered(config: DeviceConfig) -> Rendered:
    """What an agent applies for ``config``: FRR text, fib routes, link-bandwidth signature per BGP peer.

    Its :attr:`~southbound.rendered.Rendered.hash` is the config hash the agent reports once it runs
    ``config``, so the controller predicts it from here without the agent's code.
    """
    fib = {r.prefix: tuple(FibHop(h.port, r.group, h.weight, h.gateway) for h in r.nexthops)
           for r in config.fib_routes}
    lb_peers: dict[str, str] = {}
    for n in config.neighbors:
        entries = sorted(f"{b.prefix}={b.mbps}" for b in config.link_bandwidth if b.port == n.port)
        if entries:
            lb_peers[n.key] = ",".join(entries)
    return Rendered(config.hostname, render_frr(config), fib, lb_peers)


def config_hash(config: DeviceConfig) -> str:
    """The hash of everything an agent applies for ``config`` (what ``GetState`` reports)."""
    return build_rendered(config).hash


def _has_ipv6(config: DeviceConfig) -> bool:
    """The device runs IPv6: the fabric carries it, or it has an IPv6 prefix, loopback or link address, or
    sessions that need it."""
    return (config.ipv6 or config.underlay != "ipv4-numbered" or config.loopback6 is not None
            or any(prefix_version(p) == 6 for p in config.originated)
            or any(i.address6 is not None for i in config.interfaces))


def _global_lines(config: DeviceConfig) -> list[str]:
    six = _has_ipv6(config)
    return [
        "frr defaults datacenter",
        f"hostname {config.hostname}",
        "ip forwarding",
        *(["ipv6 forwarding"] if six else []),
        "service integrated-vtysh-config",
        "zebra nexthop-group keep 1",
        "!",
        "interface lo",
        f" ip address {config.router_id}/32",
        *([f" ipv6 address {config.loopback6}/128"] if config.loopback6 is not None else []),
        *_loopback_igp(config),
        "exit",
        "!",
    ]


def _loopback_igp(config: DeviceConfig) -> list[str]:
    """The loopback in the IGP when the device originates its router id's /32 (BGP announces it with a
    ``network`` like any originated prefix; OSPF and IS-IS carry it as a passive interface)."""
    v4 = f"{config.router_id}/32" in config.originated
    v6 = config.loopback6 is not None and f"{config.loopback6}/128" in config.originated
    if config.routing == Routing.OSPF.value:  # by a network statement instead in that form (_ospf_networks)
        return [f" ip ospf area {OSPF_AREA}"] if v4 and config.ospf_form.networks is None else []
    if config.routing == Routing.ISIS.value and (v4 or v6):
        tag = config.isis_form.tag
        return ([f" ip router isis {tag}"] if v4 else []) + ([f" ipv6 router isis {tag}"] if v6 else []) + \
            [" isis passive"]
    return []


#: seconds between the router advertisements zebra sends on a port with an interface (unnumbered) BGP peer
RA_INTERVAL = 3


def _router_advertisements(config: DeviceConfig) -> list[str]:
    """IPv6 router advertisements on a port with an interface BGP peer: the peer learns this end's
    link-local address from them (in the order FRR 8.4's running config shows them)."""
    return [f" ipv6 nd ra-interval {RA_INTERVAL}", " no ipv6 nd suppress-ra"]


def _interface_lines(config: DeviceConfig) -> list[str]:
    lines: list[str] = []
    interface_peers = ({n.port for n in config.neighbors if n.address is None}
                       if config.routing == Routing.BGP.value else set())
    for itf in config.interfaces:
        lines.append(f"interface {itf.name}")
        if itf.peer is not None:
            lines.append(f" description to {itf.peer}:{itf.peer_port}")
        elif itf.host:
            lines.append(" description host subnet")
        if itf.address is not None:
            lines.append(f" ip address {itf.address}")
        if itf.address6 is not None:
            lines.append(f" ipv6 address {itf.address6}")
        if itf.name in interface_peers:
            lines += _router_advertisements(config)
        if not itf.drained:
            if config.routing == Routing.ISIS.value:
                lines += _isis_interface(config, itf)
            elif config.routing == Routing.OSPF.value:
                lines += _ospf_interface(config, itf)
        elif config.routing == Routing.OSPF.value and config.ospf_form.networks is not None:
            lines.append(" ip ospf passive")  # a network statement would bring up its adjacency
        lines += ["exit", "!"]
    return lines


def _isis_families(config: DeviceConfig) -> list[str]:
    """An IS-IS interface's families: IPv4 but on ``ipv6-numbered`` (whose links have no IPv4), IPv6 when the
    device has any IPv6 (its IPv6 routes over the links' IPv6 or link-local addresses); one topology."""
    tag = config.isis_form.tag
    v4 = [f" ip router isis {tag}"] if config.underlay != "ipv6-numbered" else []
    return v4 + ([f" ipv6 router isis {tag}"] if _has_ipv6(config) else [])


def _isis_interface(config: DeviceConfig, itf: Interface) -> list[str]:
    if itf.host:
        return [*_isis_families(config), " isis passive"]
    form = config.isis_form
    loom_hello, loom_multiplier = isis_hellos(config.timers)
    hello = form.hello or loom_hello
    multiplier = form.multiplier or (loom_multiplier if form.hello is None else 10)
    return [*_isis_families(config), *([] if form.broadcast else [" isis network point-to-point"]),
            f" isis metric {itf.metric}", f" isis hello-interval {hello}", f" isis hello-multiplier {multiplier}"]


def _ospf_interface(config: DeviceConfig, itf: Interface) -> list[str]:
    """An interface's OSPF lines in the order ospfd shows them (so the running config reads back as
    rendered): network type, cost, hello, dead and retransmit intervals (the BGP timers, as IS-IS's hellos),
    area, passive. A host port's cost is IS-IS's default metric, whatever the port's speed (OSPF's own cost of
    a port follows its bandwidth), so that every origin of an anycast prefix adds the same."""
    form = config.ospf_form
    area = [f" ip ospf area {OSPF_AREA}"] if form.networks is None else []  # else by network statements
    if itf.host:
        return [f" ip ospf cost {DEFAULT_METRIC}", *area, " ip ospf passive"]
    hello, dead, retransmit = ospf_intervals(config.timers)
    hello, dead = form.hello or hello, form.dead or (4 * form.hello if form.hello else dead)
    return [*([] if form.broadcast else [" ip ospf network point-to-point"]), f" ip ospf cost {itf.metric}",
            f" ip ospf hello-interval {hello}", f" ip ospf dead-interval {dead}",
            f" ip ospf retransmit-interval {retransmit}", *area]


def _isis_lines(config: DeviceConfig) -> list[str]:
    form = config.isis_form
    lines = [f"router isis {form.tag}", f" net {form.net or isis_net(config.router_id)}",
             f" is-type {form.is_type}", f" metric-style {form.metric_style}", " lsp-gen-interval 1",
             " spf-interval 1"]
    if config.drained:
        lines.append(" set-overload-bit")
    return lines + ["exit", "!"]


def _ospf_lines(config: DeviceConfig) -> list[str]:
    """``router ospf``: the router id, and the SPF and LSA throttling of a fabric (as IS-IS's ``spf-interval``
    and ``lsp-gen-interval``; OSPF's defaults, 5 s between two instances of a router's LSA, hold a fabric's
    convergence for seconds while its adjacencies come up one by one)."""
    lines = ["router ospf", f" ospf router-id {config.router_id}", " timers throttle spf 0 50 1000",
             " timers throttle lsa all 100", " timers lsa min-arrival 50"]
    if config.drained:
        lines.append(" max-metric router-lsa administrative")
    return lines + [f" network {n} area {OSPF_AREA}" for n in _ospf_networks(config)] + ["exit", "!"]


def _ospf_networks(config: DeviceConfig) -> list[str]:
    """The ``network ... area`` statements of a device whose OSPF form runs by them: its own (kept as the
    running device has them), then the subnet of each interface OSPF runs on that none of them covers (a
    link's but a drained one's, a host port's, the loopback's when the device originates it), in interface
    order. A drained link they cover is passive (:func:`_interface_lines`): no adjacency over it."""
    own = config.ospf_form.networks
    if own is None:
        return []
    covering = [ipaddress.IPv4Network(n) for n in own]  # OSPFv2: IPv4 (validated)
    wanted = [itf.address for itf in config.interfaces if itf.address is not None and not itf.drained]
    if f"{config.router_id}/32" in config.originated:
        wanted.append(f"{config.router_id}/32")
    extra: list[str] = []
    for address in wanted:
        net = ipaddress.IPv4Interface(address).network
        if not any(net.subnet_of(c) for c in covering) and str(net) not in extra:
            extra.append(str(net))
    return [*own, *extra]


def _bgp_lines(config: DeviceConfig) -> list[str]:
    """Policy, then ``router bgp``: the sessions, then each address family they carry."""
    if config.asn is None:
        raise ValueError(f"{config.hostname}: routing bgp needs an ASN")
    lines, out_maps = _policy_lines(config)
    keepalive, hold = config.timers
    lines += [
        f"router bgp {config.asn}",
        f" bgp router-id {config.router_id}",
        " no bgp ebgp-requires-policy",
        " no bgp default ipv4-unicast",
    ]
    if config.multipath_relax:
        lines.append(" bgp bestpath as-path multipath-relax")
    lines.append(f" timers bgp {keepalive} {hold}")
    lines += _peer_group_lines(config)
    for n in config.neighbors:
        key = n.key
        lines += _session_lines(config.session_form, n)
        lines += [f" neighbor {key} description {n.peer} via {n.port}",
                  f" neighbor {key} timers connect 1",
                  f" neighbor {key} advertisement-interval 0"]
        if n.address is not None and ":" in n.address:  # IPv4 routes over the IPv6 session (RFC 8950)
            lines.append(f" neighbor {key} capability extended-nexthop")
    for family in _bgp_families(config):
        lines += _address_family(config, family, out_maps)
    return lines + ["exit", "!"]


def _peer_group_lines(config: DeviceConfig) -> list[str]:
    """The device's peer-group, when its sessions are written through one (before its members, as FRR shows
    it), with ``remote-as external`` on the group when the form says so."""
    form = config.session_form
    if form.peer_group is None:
        return []
    return [f" neighbor {form.peer_group} peer-group",
            *([f" neighbor {form.peer_group} remote-as external"] if form.remote_as_external else [])]


def _session_lines(form: SessionForm, n: BgpNeighbor) -> list[str]:
    """The lines that define session ``n`` in the device's form, as FRR shows them: an unnumbered one on the
    interface (``v6only`` unless the form says otherwise: over the port's IPv6 link-local address, whatever
    IPv4 the port has too), its ``remote-as`` the peer's ASN or ``external``, through the peer-group if any
    (whose ``remote-as external`` the member then takes)."""
    remote = "external" if form.remote_as_external else str(n.remote_asn)
    group, key = form.peer_group, n.key
    own = [] if group is not None and form.remote_as_external else [f" neighbor {key} remote-as {remote}"]
    if n.address is None:
        head = f" neighbor {key} interface{' v6only' if form.v6only else ''}"
        return [f"{head} remote-as {remote}"] if group is None else [f"{head} peer-group {group}", *own]
    return own if group is None else [*own, f" neighbor {key} peer-group {group}"]


def _bgp_families(config: DeviceConfig) -> tuple[int, ...]:
    """The address families the sessions carry: IPv4 on ``ipv4-numbered``; both otherwise (IPv4 over IPv6
    next hops, RFC 8950)."""
    return (4,) if config.underlay == "ipv4-numbered" else (4, 6)


def _address_family(config: DeviceConfig, family: int, out_maps: dict[str, str]) -> list[str]:
    """One unicast address family: its originated prefixes, its sessions activated, the drains (a drained
    link neither sends nor accepts), the outbound route maps (drained device, link-bandwidth)."""
    lines = [" !", f" address-family {'ipv4' if family == 4 else 'ipv6'} unicast"]
    if config.session_form.redistribute_connected:
        lines.append("  redistribute connected")
    else:
        lines += [f"  network {p}" for p in config.originated if prefix_version(p) == family]
    if config.session_form.peer_group is not None:
        lines.append(f"  neighbor {config.session_form.peer_group} activate")
    for n in config.neighbors:
        if family == 6 and n.address is not None and "." in n.address:
            continue  # an IPv4 session (a bridge's old leg) carries no IPv6: its next hops would be IPv4-mapped
        lines.append(f"  neighbor {n.key} activate")
        if n.drained:
            lines += [f"  neighbor {n.key} route-map {_DENY} in", f"  neighbor {n.key} route-map {_DENY} out"]
        elif n.port in out_maps:
            lines.append(f"  neighbor {n.key} route-map {out_maps[n.port]} out")
    return lines + [f"  maximum-paths {config.maximum_paths}", " exit-address-family"]

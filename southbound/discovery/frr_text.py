"""FRR 8.4's running configuration, read into what discovery needs (no I/O).

:func:`parse_running` reads ``show running-config`` text into a
:class:`FrrRunning`: interface addresses of both families and their OSPF cost
and area or IS-IS metric, IPv6 router advertisements (what BGP unnumbered
needs), ``router bgp`` (ASN, router id, neighbors by address or, unnumbered,
by interface, ``network`` statements of both address families,
``redistribute``), ``router ospf`` (router id, ``network ... area``, passive
interfaces), ``router isis`` (NET), static routes, and every line it does not
model (route maps, prefix lists, ...) so that adoption can say what Loom's
rendering would drop. Lines that only describe (``description``, logging,
``frr version``) are read and ignored.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field

__all__ = ["BgpConf", "FrrRunning", "InterfaceConf", "IsisConf", "OspfConf", "parse_running"]

#: lines that change nothing a router forwards (or that Loom's rendering writes itself)
_COSMETIC = re.compile(
    r"^(frr version|frr defaults|hostname|log |no log|service |no service|password|enable password|"
    r"no ipv6 forwarding|ipv6 forwarding|ip forwarding|line vty|agentx|debug |end$|Building configuration|"
    r"zebra nexthop kernel enable|no zebra nexthop kernel enable|zebra nexthop-group keep |"
    r"Current configuration)")
_CONTEXT = re.compile(r"^(interface|router|route-map|key chain|vrf|line|segment-routing|bfd|mpls|"
                      r"address-family|ip prefix-list|ipv6 prefix-list|bgp as-path|ip community-list)\b")


@dataclass
class InterfaceConf:
    """An ``interface`` block: IPv4 ``addresses`` and IPv6 ``addresses6`` (CIDR), ``ra`` (IPv6 router
    advertisements sent: ``no ipv6 nd suppress-ra``), OSPF ``ospf_cost``/``ospf_area``/``ospf_passive``,
    ``ospf_network`` (``point-to-point``, ``broadcast``, ...; ``None``: FRR's default for the interface,
    broadcast on Ethernet), ``ospf_hello``/``ospf_dead``/``ospf_retransmit`` seconds (``None``: FRR's
    defaults, 10, four hellos and 5; ``ospf_dead`` is ``"minimal"`` for sub-second hellos),
    ``ospf_active``: ``no ip ospf passive`` (active under ``passive-interface default``), IS-IS ``isis``
    (enabled for IPv4: ``ip router isis``; ``isis6``: for IPv6), ``isis_metric``, ``isis_passive``,
    ``isis_network`` (``None``: FRR's default, broadcast), ``isis_hello`` and ``isis_multiplier``
    (``None``: FRR's defaults, 3 s and 10)."""

    name: str
    addresses: list[str] = field(default_factory=list)
    addresses6: list[str] = field(default_factory=list)
    ra: bool = False
    description: str | None = None
    ospf_cost: int | None = None
    ospf_area: str | None = None
    ospf_passive: bool = False
    ospf_active: bool = False
    ospf_network: str | None = None
    ospf_hello: int | None = None
    ospf_dead: int | str | None = None
    ospf_retransmit: int | None = None
    isis: bool = False
    isis6: bool = False
    isis_metric: int | None = None
    isis_passive: bool = False
    isis_network: str | None = None
    isis_hello: int | None = None
    isis_multiplier: int | None = None


@dataclass
class BgpConf:
    """``router bgp ASN``: ``neighbors`` maps FRR's name for a neighbor (address, IPv6 in canonical text,
    or interface: an unnumbered session) to its ``remote-as`` text (a number, ``external`` or ``internal``),
    its own or its peer-group's; ``groups`` maps each peer-group to its ``remote-as`` (``None``: set on the
    members), ``member_of`` a neighbor to its group; ``v6only`` the unnumbered neighbors written
    ``interface v6only``; ``networks`` of both address families, as written."""

    asn: int
    router_id: str | None = None
    neighbors: dict[str, str] = field(default_factory=dict)
    groups: dict[str, str | None] = field(default_factory=dict)
    member_of: dict[str, str] = field(default_factory=dict)
    v6only: set[str] = field(default_factory=set)
    networks: list[str] = field(default_factory=list)
    redistribute: list[str] = field(default_factory=list)
    maximum_paths: int | None = None
    multipath_relax: bool = False


@dataclass
class OspfConf:
    """``router ospf``: ``networks`` as ``(prefix, area)``, ``passive`` interfaces (``passive_default``:
    ``passive-interface default``; ``active``: ``no passive-interface IF`` under it), ``reference_mbps``:
    ``auto-cost reference-bandwidth`` (``None``: not
    set, discovery takes the reference it assumes for FRR's profile)."""

    router_id: str | None = None
    networks: list[tuple[str, str]] = field(default_factory=list)
    passive: set[str] = field(default_factory=set)
    passive_default: bool = False
    active: set[str] = field(default_factory=set)
    redistribute: list[str] = field(default_factory=list)
    reference_mbps: int | None = None


@dataclass
class IsisConf:
    """``router isis TAG``: its ``net``, ``is_type`` (``None``: FRR's default, ``level-1-2``) and
    ``metric_style`` (``None``: FRR's default, ``wide``)."""

    tag: str
    net: str | None = None
    is_type: str | None = None
    metric_style: str | None = None
    redistribute: list[str] = field(default_factory=list)


@dataclass
class FrrRunning:
    """What :func:`parse_running` read. ``other``: lines it does not model, as ``context: line``."""

    hostname: str | None = None
    interfaces: dict[str, InterfaceConf] = field(default_factory=dict)
    bgp: BgpConf | None = None
    ospf: OspfConf | None = None
    isis: IsisConf | None = None
    statics: list[str] = field(default_factory=list)
    other: list[str] = field(default_factory=list)

    def interface(self, name: str) -> InterfaceConf:
        return self.interfaces.setdefault(name, InterfaceConf(name))


def _blocks(text: str) -> list[tuple[str, list[str]]]:
    """Top-level lines with the indented lines under them (``exit``, ``!`` and the banner dropped)."""
    out: list[tuple[str, list[str]]] = []
    for raw in text.splitlines():
        line = raw.rstrip()
        stripped = line.strip()
        if not stripped or stripped.startswith("!") or stripped in ("exit", "exit-address-family", "end"):
            continue
        if line[0] != " " or not out:
            out.append((stripped, []))
        else:
            out[-1][1].append(stripped)
    return out


def parse_running(text: str) -> FrrRunning:
    """Parse FRR's ``show running-config`` (or an ``frr.conf``) into a :class:`FrrRunning`."""
    run = FrrRunning()
    for head, body in _blocks(text):
        if head.startswith("hostname ") and run.hostname is None:
            run.hostname = head.split()[1]
        elif head.startswith("interface "):
            _interface(run, head.split()[1], body)
        elif head.startswith("router bgp "):
            _bgp(run, head, body)
        elif head.startswith("router ospf") and not head.startswith("router ospf6"):
            _ospf(run, body)
        elif head.startswith("router isis "):
            _isis(run, head.split()[2], body)
        elif head.startswith(("ip route ", "ipv6 route ")):
            run.statics.append(head)
        elif _COSMETIC.match(head):
            continue
        else:
            run.other += [head] + [f"{head}: {b}" for b in body] if _CONTEXT.match(head) else [head]
    return run


def _interface(run: FrrRunning, name: str, body: list[str]) -> None:
    itf = run.interface(name)
    for line in body:
        w = line.split()
        if line.startswith("ip address ") and "/" in w[2]:
            itf.addresses.append(w[2])
        elif line.startswith("ipv6 address ") and "/" in w[2]:
            itf.addresses6.append(w[2])
        elif line == "no ipv6 nd suppress-ra":
            itf.ra = True
        elif line.startswith(("ipv6 nd ra-interval ", "ipv6 nd ra-lifetime ")):
            continue  # how often and how long: the session needs only that they are sent
        elif w[0] == "description":
            itf.description = line.partition(" ")[2]
        elif line.startswith("ip ospf cost "):
            itf.ospf_cost = int(w[3])
        elif line.startswith("ip ospf area "):
            itf.ospf_area = w[3]
        elif line == "ip ospf passive":
            itf.ospf_passive = True
        elif line == "no ip ospf passive":
            itf.ospf_passive = False  # FRR 8's form of "no passive-interface IF" under "passive-interface default"
            itf.ospf_active = True
        elif line.startswith(("ip ospf network ", "ip ospf hello-interval ", "ip ospf dead-interval ",
                               "ip ospf retransmit-interval ")):
            _ospf_interface(itf, w[2], w[3])
        elif line.startswith("ip router isis "):
            itf.isis = True
        elif line.startswith("ipv6 router isis "):
            itf.isis6 = True
        elif line.startswith("isis metric "):
            itf.isis_metric = int(w[-1])
        elif line == "isis passive":
            itf.isis_passive = True
        elif w[:2] == ["isis", "network"] and len(w) == 3:
            itf.isis_network = w[2]
        elif w[:2] == ["isis", "hello-interval"] and len(w) == 3 and w[2].isdigit():
            itf.isis_hello = int(w[2])
        elif w[:2] == ["isis", "hello-multiplier"] and len(w) == 3 and w[2].isdigit():
            itf.isis_multiplier = int(w[2])
        else:
            run.other.append(f"interface {name}: {line}")


def _ospf_interface(itf: InterfaceConf, key: str, value: str) -> None:
    """One ``ip ospf KEY VALUE`` line of network type or interval."""
    if key == "network":
        itf.ospf_network = value
    elif key == "hello-interval":
        itf.ospf_hello = int(value)
    elif key == "dead-interval":
        itf.ospf_dead = int(value) if value.isdigit() else value
    else:
        itf.ospf_retransmit = int(value)


def _bgp(run: FrrRunning, head: str, body: list[str]) -> None:
    w = head.split()
    if len(w) > 3:  # router bgp N vrf X: not the default instance
        run.other.append(head)
        return
    bgp = run.bgp = BgpConf(int(w[2]))
    bgp.groups = {line.split()[1]: None for line in body if re.fullmatch(r"neighbor \S+ peer-group", line)}
    for line in body:
        w = line.split()
        if w[0] == "neighbor" and w[2:4] == ["interface", "v6only"]:
            bgp.v6only.add(w[1])
        if w[0] == "neighbor" and len(w) >= 3 and (w[1] in bgp.groups or "peer-group" in w[2:]):
            _bgp_group_line(run, bgp, line, w)
        elif line.startswith("bgp router-id "):
            bgp.router_id = w[2]
        elif w[0] == "neighbor" and len(w) >= 4 and w[2] == "remote-as":
            bgp.neighbors[_peer(w[1])] = w[3]
        elif w[0] == "neighbor" and len(w) >= 5 and w[2] == "interface" and "remote-as" in w[3:-1]:
            bgp.neighbors[w[1]] = w[w.index("remote-as") + 1]  # unnumbered (also "interface v6only remote-as")
        elif w[0] == "network":
            bgp.networks.append(w[1])
        elif w[0] == "redistribute":
            bgp.redistribute.append(" ".join(w[1:]))
        elif w[0] == "maximum-paths":
            bgp.maximum_paths = int(w[1])
        elif line == "bgp bestpath as-path multipath-relax":
            bgp.multipath_relax = True
        elif not _bgp_cosmetic(line, w):
            run.other.append(f"router bgp {bgp.asn}: {line}")
    for peer, group in bgp.member_of.items():
        remote = bgp.groups.get(group)
        if peer not in bgp.neighbors and remote is not None:
            bgp.neighbors[peer] = remote


def _bgp_group_line(run: FrrRunning, bgp: BgpConf, line: str, w: list[str]) -> None:
    """A peer-group's own line (``neighbor G peer-group``, ``neighbor G remote-as X``, its settings) or a
    member's (``neighbor 10.0.0.1 peer-group G``, ``neighbor eth1 interface [v6only] peer-group G``)."""
    if w[1] in bgp.groups:
        if len(w) == 4 and w[2] == "remote-as":
            bgp.groups[w[1]] = w[3]
        elif w[2:] != ["peer-group"] and not _bgp_cosmetic(line, w):
            run.other.append(f"router bgp {bgp.asn}: {line}")
        return
    if w[-2] != "peer-group" or w[-1] not in bgp.groups:
        run.other.append(f"router bgp {bgp.asn}: {line}")
        return
    bgp.member_of[_peer(w[1])] = w[-1]
    if "remote-as" in w:  # "neighbor eth1 interface remote-as external peer-group G" is not FRR's syntax
        run.other.append(f"router bgp {bgp.asn}: {line}")


def _bgp_cosmetic(line: str, w: list[str]) -> bool:
    """BGP lines that change no route: descriptions, timers, logging, activation, address families."""
    if w[0] == "neighbor" and len(w) >= 3 and w[2] in ("description", "timers", "advertisement-interval", "activate"):
        return True
    if w[0] == "neighbor" and w[2:4] == ["capability", "extended-nexthop"]:
        return True  # IPv4 routes over IPv6 next hops (RFC 8950): what an IPv6 session carries them with
    return line.startswith(("address-family ipv4 unicast", "address-family ipv6 unicast", "bgp log-neighbor-changes",
                            "timers bgp",
                            "no bgp ebgp-requires-policy", "no bgp default ipv4-unicast",
                            "no bgp network import-check"))


def _peer(name: str) -> str:
    """A neighbor's name: an IPv6 address in canonical text (compressed), anything else as written."""
    if ":" not in name:
        return name
    try:
        return str(ipaddress.IPv6Address(name))
    except ValueError:
        return name


def _ospf(run: FrrRunning, body: list[str]) -> None:
    ospf = run.ospf = OspfConf()
    for line in body:
        w = line.split()
        if w[0] in ("ospf", "router-id") and "router-id" in w:
            ospf.router_id = w[-1]
        elif w[0] == "network" and len(w) == 4 and w[2] == "area":
            ospf.networks.append((w[1], w[3]))
        elif line == "passive-interface default":
            ospf.passive_default = True
        elif w[:2] == ["no", "passive-interface"] and len(w) == 3:
            ospf.active.add(w[2])
        elif w[0] == "passive-interface":
            ospf.passive.add(w[1])
        elif w[0] == "redistribute":
            ospf.redistribute.append(" ".join(w[1:]))
        elif w[:2] == ["auto-cost", "reference-bandwidth"] and len(w) == 3:
            ospf.reference_mbps = int(w[2])
        elif not line.startswith(("log-adjacency-changes", "timers throttle")):
            run.other.append(f"router ospf: {line}")


def _isis(run: FrrRunning, tag: str, body: list[str]) -> None:
    isis = run.isis = IsisConf(tag)
    for line in body:
        w = line.split()
        if w[0] == "net":
            isis.net = w[1]
        elif w[0] == "is-type" and len(w) == 2:
            isis.is_type = w[1]
        elif w[0] == "metric-style" and len(w) == 2:
            isis.metric_style = w[1]
        elif w[0] == "redistribute":
            isis.redistribute.append(" ".join(w[1:]))
        elif not line.startswith(("lsp-gen-interval", "spf-interval", "log-adjacency-changes")):
            run.other.append(f"router isis {tag}: {line}")

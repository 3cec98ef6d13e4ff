"""The kernel's interfaces and routes over rtnetlink, read directly: ``RTM_GETLINK`` and ``RTM_GETROUTE`` dumps,
parsed for what the agent uses.

The agent reads every interface's state once a second (its link watcher's safety net, :mod:`southbound.device.
opstate`) and its counters at every telemetry sample (:mod:`southbound.device.counters`). pyroute2 decodes every
attribute of every link into Python objects: on an idle lab switch that was half of its agent's CPU (measured with
py-spy: 172 of 362 samples). Here a dump is parsed for four things only: the name (``IFLA_IFNAME``), the
``IFF_UP`` flag of the ``ifinfomsg`` header, the operational state (``IFLA_OPERSTATE``, RFC 2863's values) and
the counters (``IFLA_STATS64``, or the 32-bit ``IFLA_STATS`` of an old kernel).

Routes: the agent reads its kernel's main table at every read-back of a commit (the controller asks until the
plan is installed) and whenever it resolves an unnumbered next hop. ``ip -j route`` cost a process and a JSON
text for each family; in the lab tests' phase that was about 12,000 processes. :func:`dump_routes` reads the
same routes in one dump per family and gives each in the form ``ip -j route show table main`` prints it
(:meth:`Route.ip_json`), so that the parsers of that form read either.

The socket is opened in the calling process's network namespace (an agent runs in its switch's), or in a named
one (``netns``: ``/run/netns/NAME``, as ``ip netns`` makes them): a thread of its own enters that namespace,
opens the socket and ends, and the socket stays in the namespace it was opened in. A lab reads its nodes'
routes this way while it converges, where ``ip netns exec NODE ip -j route`` cost two processes and a shell.
"""

from __future__ import annotations

import ctypes
import errno
import itertools
import os
import socket
import struct
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TypeVar

__all__ = ["IFF_UP", "OPERSTATES", "STATS_FIELDS", "Link", "Route", "RouteHop", "dump_links", "dump_routes",
           "parse_links", "parse_routes", "routes_ip_json"]

NLMSG_ERROR, NLMSG_DONE = 2, 3
RTM_NEWLINK, RTM_GETLINK = 16, 18
RTM_NEWROUTE, RTM_GETROUTE = 24, 26
RTA_DST, RTA_OIF, RTA_GATEWAY, RTA_PRIORITY, RTA_MULTIPATH, RTA_TABLE, RTA_VIA = 1, 4, 5, 6, 9, 15, 18
RTNH_F_DEAD, RTNH_F_ONLINK, RTNH_F_LINKDOWN = 0x1, 0x4, 0x10
RT_TABLE_MAIN = 254
RTPROT_KERNEL, RTN_UNICAST = 2, 1
#: ``rtm_type`` as iproute2 names it
ROUTE_TYPES = {1: "unicast", 2: "local", 3: "broadcast", 4: "anycast", 5: "multicast", 6: "blackhole",
               7: "unreachable", 8: "prohibit", 9: "throw", 10: "nat"}
#: ``rtm_protocol`` as iproute2 names it (``/etc/iproute2/rt_protos``); others print as their number
ROUTE_PROTOCOLS = {2: "kernel", 3: "boot", 4: "static", 9: "ra", 11: "zebra", 186: "bgp", 187: "isis", 188: "ospf",
                   189: "rip", 192: "eigrp"}
NLM_F_REQUEST, NLM_F_DUMP, NLM_F_MULTI = 0x1, 0x300, 0x2
IFLA_IFNAME, IFLA_STATS, IFLA_OPERSTATE, IFLA_STATS64 = 3, 7, 16, 23
IFF_UP = 0x1
_NLA_TYPE_MASK = 0x3FFF  # without NLA_F_NESTED and NLA_F_NET_BYTEORDER
#: RFC 2863's ifOperStatus as Linux numbers it (``IF_OPER_*``), by pyroute2's names of them
OPERSTATES = ("UNKNOWN", "NOTPRESENT", "DOWN", "LOWERLAYERDOWN", "TESTING", "DORMANT", "UP")
#: the leading fields of ``struct rtnl_link_stats64`` (and of the 32-bit ``rtnl_link_stats``), in order
STATS_FIELDS = ("rx_packets", "tx_packets", "rx_bytes", "tx_bytes", "rx_errors", "tx_errors", "rx_dropped",
                "tx_dropped")

_NLMSGHDR = struct.Struct("=IHHII")  # length, type, flags, sequence, port id
_IFINFOMSG = struct.Struct("=BxHiII")  # family, (pad), device type, index, flags, change mask
_NLATTR = struct.Struct("=HH")  # length, type
_RTMSG = struct.Struct("=BBBBBBBBI")  # family, dst_len, src_len, tos, table, protocol, scope, type, flags
_RTNEXTHOP = struct.Struct("=HBBi")  # length, flags, hops (the weight less one), ifindex
_STATS64 = struct.Struct(f"={len(STATS_FIELDS)}Q")
_STATS32 = struct.Struct(f"={len(STATS_FIELDS)}I")
_seq = itertools.count(1)
_CLONE_NEWNET = 0x40000000
T = TypeVar("T")


@dataclass(frozen=True)
class Link:
    """One interface as the dump gives it."""

    index: int
    name: str
    flags: int
    operstate: str  # one of OPERSTATES
    stats: dict[str, int] = field(default_factory=dict)  # STATS_FIELDS, empty when the kernel sent none

    @property
    def admin_up(self) -> bool:
        return bool(self.flags & IFF_UP)


def _align(n: int) -> int:
    return (n + 3) & ~3


def _attributes(buf: bytes, start: int, end: int) -> dict[int, bytes]:
    """The attributes in ``buf[start:end]`` by type (the last of a repeated type wins)."""
    out: dict[int, bytes] = {}
    pos = start
    while pos + _NLATTR.size <= end:
        length, kind = _NLATTR.unpack_from(buf, pos)
        if length < _NLATTR.size:
            break  # malformed: stop rather than loop
        out[kind & _NLA_TYPE_MASK] = buf[pos + _NLATTR.size:pos + length]
        pos += _align(length)
    return out


def _link(buf: bytes, pos: int, end: int) -> Link | None:
    _family, _kind, index, flags, _change = _IFINFOMSG.unpack_from(buf, pos)
    attrs = _attributes(buf, pos + _IFINFOMSG.size, end)
    raw_name = attrs.get(IFLA_IFNAME)
    if raw_name is None:
        return None
    state = attrs.get(IFLA_OPERSTATE, b"\0")[0]
    stats: dict[str, int] = {}
    if len(attrs.get(IFLA_STATS64, b"")) >= _STATS64.size:
        stats = dict(zip(STATS_FIELDS, _STATS64.unpack_from(attrs[IFLA_STATS64]), strict=True))
    elif len(attrs.get(IFLA_STATS, b"")) >= _STATS32.size:
        stats = dict(zip(STATS_FIELDS, _STATS32.unpack_from(attrs[IFLA_STATS]), strict=True))
    return Link(index, raw_name.split(b"\0", 1)[0].decode(errors="replace"), flags,
                OPERSTATES[state] if state < len(OPERSTATES) else "UNKNOWN", stats)


def _messages(buf: bytes, what: str) -> Iterator[tuple[int, int, int]]:
    """Each netlink message of ``buf``: its type, where its body starts and where it ends; the end of a dump
    (``NLMSG_DONE``) is the last. Raises :class:`OSError` for an ``NLMSG_ERROR`` with an error code (``what``: the
    request, for its text) and for a message whose length does not fit."""
    pos = 0
    while pos + _NLMSGHDR.size <= len(buf):
        length, kind, _flags, _seq_no, _port = _NLMSGHDR.unpack_from(buf, pos)
        if length < _NLMSGHDR.size or pos + length > len(buf):
            raise OSError(f"a malformed netlink message (length {length} at {pos} of {len(buf)})")
        body = pos + _NLMSGHDR.size
        if kind == NLMSG_ERROR:
            code = struct.unpack_from("=i", buf, body)[0]
            if code:
                raise OSError(-code, f"{what}: {errno.errorcode.get(-code, code)}")
        else:
            yield kind, body, pos + length
            if kind == NLMSG_DONE:
                return
        pos += _align(length)


def _parse(buf: bytes, what: str, wanted: int, header: struct.Struct,
           make: Callable[[bytes, int, int], T | None]) -> tuple[list[T], bool]:
    """What ``make`` makes of each message of type ``wanted`` in ``buf`` (its body at least ``header`` long), and
    whether the dump's end (``NLMSG_DONE``) was among them."""
    out: list[T] = []
    for kind, body, end in _messages(buf, what):
        if kind == NLMSG_DONE:
            return out, True
        if kind == wanted and end - body >= header.size:
            item = make(buf, body, end)
            if item is not None:
                out.append(item)
    return out, False


def parse_links(buf: bytes) -> tuple[list[Link], bool]:
    """The links of the netlink messages in ``buf``, and whether the dump's end (``NLMSG_DONE``) was among them.
    Raises :class:`OSError` for an ``NLMSG_ERROR`` with an error code."""
    return _parse(buf, "RTM_GETLINK", RTM_NEWLINK, _IFINFOMSG, _link)


def _socket(netns: str | None) -> socket.socket:
    """A route netlink socket of this network namespace, or of the named one (see the module's text)."""
    if netns is None:
        return socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
    if "/" in netns or netns in ("", ".", ".."):
        raise ValueError(f"not a network namespace name: {netns!r}")
    made: list[socket.socket | BaseException] = []

    def enter() -> None:  # this thread only: the namespace goes with it
        try:
            fd = os.open(f"/run/netns/{netns}", os.O_RDONLY | os.O_CLOEXEC)
            try:
                if ctypes.CDLL(None, use_errno=True).setns(fd, _CLONE_NEWNET) != 0:
                    code = ctypes.get_errno()
                    raise OSError(code, f"setns {netns}: {os.strerror(code)}")
            finally:
                os.close(fd)
            made.append(socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            made.append(exc)
    thread = threading.Thread(target=enter, name=f"netns-{netns}")
    thread.start()
    thread.join()
    if isinstance(made[0], BaseException):
        raise made[0]
    return made[0]


def _opened(netns: str | None, timeout: float) -> socket.socket:
    """A bound route netlink socket of this network namespace or ``netns``, its reads bounded by ``timeout``."""
    sock = _socket(netns)
    try:
        sock.settimeout(timeout)
        sock.bind((0, 0))
    except OSError:
        sock.close()
        raise
    return sock


def _dump(sock: socket.socket, kind: int, request: bytes, parse: Callable[[bytes], tuple[list[T], bool]]) -> list[T]:
    """Send the dump request ``kind`` with body ``request`` on ``sock`` (:func:`_opened`); what ``parse`` makes of
    every datagram of the answer, up to its end. One socket serves several dumps, one after another."""
    seq = next(_seq) & 0xFFFFFFFF
    sock.send(_NLMSGHDR.pack(_NLMSGHDR.size + len(request), kind, NLM_F_REQUEST | NLM_F_DUMP, seq, 0) + request)
    out: list[T] = []
    done = False
    while not done:
        part, done = parse(sock.recv(1 << 16))
        out += part
    return out


def _links(sock: socket.socket) -> list[Link]:
    return _dump(sock, RTM_GETLINK, _IFINFOMSG.pack(socket.AF_UNSPEC, 0, 0, 0, 0), parse_links)


def dump_links(timeout: float = 5.0, *, netns: str | None = None) -> list[Link]:
    """Every interface of this network namespace (or ``netns``; ``lo`` included), in the kernel's order."""
    with _opened(netns, timeout) as sock:
        return _links(sock)


# -- routes ----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RouteHop:
    """One next hop of a route: its port's interface index, its gateway (``RTA_GATEWAY`` of the route's family, or
    ``RTA_VIA`` of the other: an IPv4 route over an IPv6 next hop), its weight and its ``RTNH_F_*`` flags."""

    ifindex: int
    gateway: str = ""
    gateway_family: int = 0
    weight: int = 1
    flags: int = 0


@dataclass(frozen=True)
class Route:
    """One route as the dump gives it; ``hops`` is its ``RTA_MULTIPATH`` (several next hops) or its one next hop
    (``multipath`` False: the route's own ``RTA_OIF`` and gateway)."""

    family: int
    dst: str  # the destination address ("" for a default route)
    dst_len: int
    table: int
    protocol: int
    scope: int  # rtm_scope: 0 universe (a route through a gateway), 253 link, 254 host
    kind: int  # rtm_type
    flags: int
    metric: int | None
    hops: tuple[RouteHop, ...]
    multipath: bool

    def ip_json(self, names: dict[int, str]) -> dict[str, object]:
        """This route as ``ip -j route show`` prints it (the fields Loom reads: ``type``, ``dst``, ``protocol``,
        ``metric``, then ``dev``, ``gateway`` or ``via`` and ``flags`` inline, or ``nexthops`` each with its
        ``weight``), its ports named by ``names`` (interface index -> name)."""
        whole = 32 if self.family == socket.AF_INET else 128
        out: dict[str, object] = {"type": ROUTE_TYPES.get(self.kind, str(self.kind))}
        out["dst"] = ("default" if self.dst_len == 0 else
                      self.dst if self.dst_len == whole else f"{self.dst}/{self.dst_len}")
        out["protocol"] = ROUTE_PROTOCOLS.get(self.protocol, str(self.protocol))
        if self.metric is not None:
            out["metric"] = self.metric
        if self.multipath:
            out["nexthops"] = [self._hop(h, names, weight=True) for h in self.hops]
        elif self.hops:
            out.update(self._hop(self.hops[0], names, weight=False))
        return out

    def _hop(self, hop: RouteHop, names: dict[int, str], *, weight: bool) -> dict[str, object]:
        out: dict[str, object] = {}
        if hop.gateway and hop.gateway_family == self.family:
            out["gateway"] = hop.gateway
        elif hop.gateway:
            out["via"] = {"family": "inet6" if hop.gateway_family == socket.AF_INET6 else "inet", "host": hop.gateway}
        if hop.ifindex:
            out["dev"] = names.get(hop.ifindex, f"if{hop.ifindex}")
        if weight:
            out["weight"] = hop.weight
        flags = (self.flags if not self.multipath else 0) | hop.flags
        out["flags"] = [name for bit, name in ((RTNH_F_DEAD, "dead"), (RTNH_F_ONLINK, "onlink"),
                                               (RTNH_F_LINKDOWN, "linkdown")) if flags & bit]
        return out


def _address(family: int, raw: bytes) -> str:
    return socket.inet_ntop(family, raw) if raw else ""


def _via(raw: bytes) -> tuple[int, str]:
    """``struct rtvia``: the gateway's family (two bytes) and its address."""
    if len(raw) < 2:
        return 0, ""
    family = struct.unpack_from("=H", raw)[0]
    return family, _address(family, raw[2:])


def _gateway(family: int, attrs: dict[int, bytes]) -> tuple[int, str]:
    if RTA_GATEWAY in attrs:
        return family, _address(family, attrs[RTA_GATEWAY])
    if RTA_VIA in attrs:
        return _via(attrs[RTA_VIA])
    return 0, ""


def _multipath(family: int, raw: bytes) -> tuple[RouteHop, ...]:
    hops: list[RouteHop] = []
    pos = 0
    while pos + _RTNEXTHOP.size <= len(raw):
        length, flags, weight_less_one, ifindex = _RTNEXTHOP.unpack_from(raw, pos)
        if length < _RTNEXTHOP.size:
            break  # malformed: stop rather than loop
        gw_family, gateway = _gateway(family, _attributes(raw, pos + _RTNEXTHOP.size, pos + length))
        hops.append(RouteHop(ifindex, gateway, gw_family, weight_less_one + 1, flags))
        pos += _align(length)
    return tuple(hops)


def _route(buf: bytes, pos: int, end: int) -> Route:
    family, dst_len, _src_len, _tos, table, protocol, scope, kind, flags = _RTMSG.unpack_from(buf, pos)
    attrs = _attributes(buf, pos + _RTMSG.size, end)
    if RTA_TABLE in attrs:
        table = struct.unpack_from("=I", attrs[RTA_TABLE])[0]
    metric = struct.unpack_from("=I", attrs[RTA_PRIORITY])[0] if RTA_PRIORITY in attrs else None
    if RTA_MULTIPATH in attrs:
        hops, multipath = _multipath(family, attrs[RTA_MULTIPATH]), True
    else:
        gw_family, gateway = _gateway(family, attrs)
        oif = struct.unpack_from("=i", attrs[RTA_OIF])[0] if RTA_OIF in attrs else 0
        hops = (RouteHop(oif, gateway, gw_family),) if oif or gateway else ()
        multipath = False
    return Route(family, _address(family, attrs.get(RTA_DST, b"")), dst_len, table, protocol, scope, kind, flags,
                 metric, hops, multipath)


def parse_routes(buf: bytes) -> tuple[list[Route], bool]:
    """The routes of the netlink messages in ``buf`` (every table), and whether the dump ended among them.
    Raises :class:`OSError` for an ``NLMSG_ERROR`` with an error code."""
    return _parse(buf, "RTM_GETROUTE", RTM_NEWROUTE, _RTMSG, _route)


def _routes(sock: socket.socket, family: int, table: int) -> list[Route]:
    routes = _dump(sock, RTM_GETROUTE, _RTMSG.pack(family, 0, 0, 0, 0, 0, 0, 0, 0), parse_routes)
    return [r for r in routes if r.table == table and r.family == family]


def dump_routes(family: int, table: int = RT_TABLE_MAIN, timeout: float = 5.0, *,
                netns: str | None = None) -> list[Route]:
    """The routes of ``family`` (``socket.AF_INET`` or ``AF_INET6``) in ``table`` of this network namespace (or
    ``netns``)."""
    with _opened(netns, timeout) as sock:
        return _routes(sock, family, table)


def routes_ip_json(version: int, *, netns: str | None = None, timeout: float = 5.0) -> list[dict[str, object]]:
    """The main table's routes of IP ``version`` (4 or 6) as ``ip -j -4|-6 route show table main`` prints them
    (:meth:`Route.ip_json`), in this network namespace or ``netns``: the links (for the ports' names) and the
    routes read on one socket (one entry into ``netns``)."""
    with _opened(netns, timeout) as sock:
        names = {link.index: link.name for link in _links(sock)}
        routes = _routes(sock, socket.AF_INET if version == 4 else socket.AF_INET6, RT_TABLE_MAIN)
    return [r.ip_json(names) for r in routes]

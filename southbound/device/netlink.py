"""The kernel's interfaces over rtnetlink, read directly: one ``RTM_GETLINK`` dump, parsed for what the agent uses.

The agent reads every interface's state once a second (its link watcher's safety net, :mod:`southbound.device.
opstate`) and its counters at every telemetry sample (:mod:`southbound.device.counters`). pyroute2 decodes every
attribute of every link into Python objects: on an idle lab switch that was half of its agent's CPU (measured with
py-spy: 172 of 362 samples). Here a dump is parsed for four things only: the name (``IFLA_IFNAME``), the
``IFF_UP`` flag of the ``ifinfomsg`` header, the operational state (``IFLA_OPERSTATE``, RFC 2863's values) and
the counters (``IFLA_STATS64``, or the 32-bit ``IFLA_STATS`` of an old kernel).

The socket is opened in the calling process's network namespace: an agent runs in its switch's.
"""

from __future__ import annotations

import errno
import itertools
import socket
import struct
from dataclasses import dataclass, field

__all__ = ["IFF_UP", "OPERSTATES", "STATS_FIELDS", "Link", "dump_links", "parse_links"]

NLMSG_ERROR, NLMSG_DONE = 2, 3
RTM_NEWLINK, RTM_GETLINK = 16, 18
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
_STATS64 = struct.Struct(f"={len(STATS_FIELDS)}Q")
_STATS32 = struct.Struct(f"={len(STATS_FIELDS)}I")
_seq = itertools.count(1)


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


def parse_links(buf: bytes) -> tuple[list[Link], bool]:
    """The links of the netlink messages in ``buf``, and whether the dump's end (``NLMSG_DONE``) was among them.
    Raises :class:`OSError` for an ``NLMSG_ERROR`` with an error code."""
    links: list[Link] = []
    pos = 0
    while pos + _NLMSGHDR.size <= len(buf):
        length, kind, _flags, _seq_no, _port = _NLMSGHDR.unpack_from(buf, pos)
        if length < _NLMSGHDR.size or pos + length > len(buf):
            raise OSError(f"a malformed netlink message (length {length} at {pos} of {len(buf)})")
        body = pos + _NLMSGHDR.size
        if kind == NLMSG_DONE:
            return links, True
        if kind == NLMSG_ERROR:
            code = struct.unpack_from("=i", buf, body)[0]
            if code:
                raise OSError(-code, f"RTM_GETLINK: {errno.errorcode.get(-code, code)}")
        elif kind == RTM_NEWLINK and length >= _NLMSGHDR.size + _IFINFOMSG.size:
            link = _link(buf, body, pos + length)
            if link is not None:
                links.append(link)
        pos += _align(length)
    return links, False


def dump_links(timeout: float = 5.0) -> list[Link]:
    """Every interface of this network namespace (``lo`` included), in the kernel's order."""
    seq = next(_seq) & 0xFFFFFFFF
    request = _IFINFOMSG.pack(socket.AF_UNSPEC, 0, 0, 0, 0)
    header = _NLMSGHDR.pack(_NLMSGHDR.size + len(request), RTM_GETLINK, NLM_F_REQUEST | NLM_F_DUMP, seq, 0)
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE) as sock:
        sock.settimeout(timeout)
        sock.bind((0, 0))
        sock.send(header + request)
        links: list[Link] = []
        done = False
        while not done:
            part, done = parse_links(sock.recv(1 << 16))
            links.extend(part)
    return links

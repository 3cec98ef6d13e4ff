"""Loom's own rtnetlink link and route dumps (:mod:`southbound.netlink`): messages packed by hand as the kernel
sends them, and a dump of this machine's namespace against ``ip -j link`` (the routes against ``ip -j route`` in a
namespace of their own: ``tests/lab/test_kernel_routes_lab.py``)."""

from __future__ import annotations

import json
import shutil
import socket
import struct
import subprocess

import pytest

from southbound import netlink as nl


def _attr(kind: int, payload: bytes) -> bytes:
    length = 4 + len(payload)
    return struct.pack("=HH", length, kind) + payload + b"\0" * (-length % 4)


def _message(kind: int, body: bytes, seq: int = 1) -> bytes:
    return struct.pack("=IHHII", 16 + len(body), kind, nl.NLM_F_MULTI, seq, 0) + body


def _newlink(index: int, name: str, flags: int, state: int, stats: bytes | None, stats_kind: int) -> bytes:
    body = struct.pack("=BxHiII", 0, 1, index, flags, 0) + _attr(nl.IFLA_IFNAME, name.encode() + b"\0")
    body += _attr(nl.IFLA_OPERSTATE, bytes([state])) + _attr(99, b"\x01\x02\x03")  # an attribute not read
    if stats is not None:
        body += _attr(stats_kind, stats)
    return _message(nl.RTM_NEWLINK, body)


def test_a_dump_is_parsed_for_name_flags_state_and_counters() -> None:
    s64 = struct.pack("=8Q", 10, 20, 1 << 40, 4000, 0, 0, 7, 8) + b"\0" * 32  # the fields after are not read
    s32 = struct.pack("=8I", 1, 2, 3, 4, 5, 6, 7, 8)
    buf = (_newlink(2, "eth1", nl.IFF_UP, 6, s64, nl.IFLA_STATS64) + _newlink(3, "eth2", 0, 2, s32, nl.IFLA_STATS)
           + _newlink(4, "eth3", nl.IFF_UP, 3, None, 0))
    links, done = nl.parse_links(buf)
    assert not done
    assert [(x.index, x.name, x.admin_up, x.operstate) for x in links] == [
        (2, "eth1", True, "UP"), (3, "eth2", False, "DOWN"), (4, "eth3", True, "LOWERLAYERDOWN")]
    assert links[0].stats["rx_bytes"] == 1 << 40 and links[0].stats["tx_dropped"] == 8
    assert links[1].stats == dict(zip(nl.STATS_FIELDS, range(1, 9), strict=True))
    assert links[2].stats == {}
    more, done = nl.parse_links(_newlink(5, "eth4", 0, 99, None, 0) + _message(nl.NLMSG_DONE, b"\0" * 4))
    assert done and [(x.name, x.operstate) for x in more] == [("eth4", "UNKNOWN")]  # a state past RFC 2863's


def test_a_netlink_error_or_a_cut_message_is_an_os_error() -> None:
    with pytest.raises(OSError, match="EPERM"):
        nl.parse_links(_message(nl.NLMSG_ERROR, struct.pack("=i", -1) + b"\0" * 16))
    acked, done = nl.parse_links(_message(nl.NLMSG_ERROR, struct.pack("=i", 0) + b"\0" * 16))
    assert (acked, done) == ([], False)  # error 0 is an acknowledgement
    whole = _newlink(2, "eth1", nl.IFF_UP, 6, None, 0)
    with pytest.raises(OSError, match="malformed"):
        nl.parse_links(whole[:-8])  # its length says more than the datagram holds
    with pytest.raises(OSError, match="malformed"):
        nl.parse_links(struct.pack("=IHHII", 8, nl.RTM_NEWLINK, 0, 1, 0))  # a length shorter than its header


@pytest.mark.skipif(shutil.which("ip") is None, reason="iproute2's ip is not installed")
def test_a_dump_of_this_namespace_is_what_ip_link_shows() -> None:
    shown = {x["ifname"]: x for x in json.loads(subprocess.run(["ip", "-j", "link", "show"], capture_output=True,
                                                               text=True, check=True).stdout)}
    links = {x.name: x for x in nl.dump_links()}
    assert set(links) == set(shown)
    for name, x in links.items():
        assert x.index == shown[name]["ifindex"]
        assert x.operstate == shown[name]["operstate"].replace("_", ""), name
        assert x.admin_up == ("UP" in shown[name]["flags"]), name
    assert links["lo"].stats["rx_packets"] > 0  # the machine has spoken to itself


def _newroute(family: int, dst: bytes, dst_len: int, protocol: int, attrs: bytes, *, table: int = 254,
              kind: int = 1, flags: int = 0) -> bytes:
    body = struct.pack("=BBBBBBBBI", family, dst_len, 0, 0, table, protocol, 0, kind, flags)
    if dst:
        body += _attr(nl.RTA_DST, dst)
    return _message(nl.RTM_NEWROUTE, body + attrs)


def _hop(ifindex: int, weight: int, flags: int, attrs: bytes) -> bytes:
    return struct.pack("=HBBi", 8 + len(attrs), flags, weight - 1, ifindex) + attrs


def test_a_route_dump_is_parsed_into_ip_json_s_form() -> None:
    v4 = socket.inet_pton(socket.AF_INET, "10.1.0.0")
    gw1, gw2 = socket.inet_pton(socket.AF_INET, "10.0.0.2"), socket.inet_pton(socket.AF_INET, "10.0.1.2")
    ll = struct.pack("=H", socket.AF_INET6) + socket.inet_pton(socket.AF_INET6, "fe80::1")
    multipath = _hop(2, 3, 0, _attr(nl.RTA_GATEWAY, gw1)) + _hop(3, 1, nl.RTNH_F_DEAD | nl.RTNH_F_LINKDOWN,
                                                                   _attr(nl.RTA_GATEWAY, gw2))
    buf = (_newroute(socket.AF_INET, v4, 24, 186, _attr(nl.RTA_MULTIPATH, multipath)
                     + _attr(nl.RTA_PRIORITY, struct.pack("=I", 20)))
           + _newroute(socket.AF_INET, socket.inet_pton(socket.AF_INET, "10.2.0.1"), 32, 250,
                       _attr(nl.RTA_OIF, struct.pack("=i", 2)) + _attr(nl.RTA_VIA, ll))
           + _newroute(socket.AF_INET, b"", 0, 2, _attr(nl.RTA_OIF, struct.pack("=i", 3))
                       + _attr(nl.RTA_GATEWAY, gw2), table=255, kind=2)
           + _message(nl.NLMSG_DONE, b"\0" * 4))
    routes, done = nl.parse_routes(buf)
    assert done and len(routes) == 3
    names = {2: "eth1", 3: "eth2"}
    assert routes[0].ip_json(names) == {
        "type": "unicast", "dst": "10.1.0.0/24", "protocol": "bgp", "metric": 20,
        "nexthops": [{"gateway": "10.0.0.2", "dev": "eth1", "weight": 3, "flags": []},
                     {"gateway": "10.0.1.2", "dev": "eth2", "weight": 1, "flags": ["dead", "linkdown"]}]}
    assert routes[1].ip_json(names) == {  # RFC 8950: an IPv4 route over an IPv6 next hop; a host route
        "type": "unicast", "dst": "10.2.0.1", "protocol": "250",
        "via": {"family": "inet6", "host": "fe80::1"}, "dev": "eth1", "flags": []}
    assert (routes[2].table, routes[2].ip_json(names)["type"], routes[2].ip_json(names)["dst"]) == (255, "local",
                                                                                                   "default")
    with pytest.raises(OSError, match="RTM_GETROUTE"):
        nl.parse_routes(_message(nl.NLMSG_ERROR, struct.pack("=i", -13) + b"\0" * 16))

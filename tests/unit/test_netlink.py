"""The agent's own rtnetlink link dump (:mod:`southbound.netlink`): messages packed by hand as the kernel
sends them, and a dump of this machine's namespace against ``ip -j link``."""

from __future__ import annotations

import json
import shutil
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

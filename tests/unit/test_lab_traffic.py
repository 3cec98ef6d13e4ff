"""Traffic matrices and the traffic plan, without a lab.

A matrix is checked against the lab's hosts with every error located and is
refused whole; the plan spreads each demand over its flows from every host of
the ToR to every host of the prefix, and the flows' rates add up to the demand.
"""

from __future__ import annotations

import ipaddress
import socket
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from controller.model.domain import Demand
from labs.clab import load_topology
from labs.traffic import (
    MAX_FLOWS,
    HostInfo,
    InvalidMatrix,
    TrafficOptions,
    lab_hosts,
    load_matrix,
    plan_traffic,
    validate_matrix,
)

REPO = Path(__file__).resolve().parents[2]
HOSTS = lab_hosts(load_topology(REPO / "labs" / "clos3-hosts"))


def test_the_shipped_lab_has_two_hosts_per_tor() -> None:
    assert len(HOSTS) == 8
    assert Counter(h.tor for h in HOSTS.values()) == {f"tor-{p}-{t}": 2 for p in (0, 1) for t in (0, 1)}
    assert HOSTS["tor-1-0-h1"] == HostInfo("tor-1-0-h1", "loom-clos3-hosts-tor-1-0-h1", "tor-1-0",
                                           "10.1.0.11", "10.1.0.0/24")


def test_a_good_matrix_reads_from_yaml_or_json(tmp_path: Path) -> None:
    (tmp_path / "m.yaml").write_text("- {from: tor-0-0, to: 10.1.0.0/24, gbps: 0.02}\n")
    (tmp_path / "m.json").write_text('{"demands": [{"from": "tor-0-0", "to": "10.1.0.0/24", "gbps": 0.02}]}')
    for name in ("m.yaml", "m.json"):
        (dm,) = load_matrix(tmp_path / name, HOSTS)
        assert (dm.from_, dm.to, dm.gbps) == ("tor-0-0", "10.1.0.0/24", 0.02)


@pytest.mark.parametrize("doc, loc, words", [
    ([], "", "non-empty list"),
    ({"demands": [], "extra": 1}, "", "non-empty list"),
    (["x"], "demands[0]", "valid dictionary"),
    ([{"from": "tor-0-0", "to": "10.1.0.0/24"}], "demands[0].gbps", "required field missing"),
    ([{"from": "tor-0-0", "to": "10.1.0.0/24", "gbps": 1, "tos": 3}], "demands[0].tos", "unknown field"),
    ([{"from": "tor-0-0", "to": "10.1.0.1/24", "gbps": 1}], "demands[0].to", "10.1.0.0/24"),
    ([{"from": "leaf-0-0", "to": "10.1.0.0/24", "gbps": 1}], "demands[0].from", "not a ToR with hosts"),
    ([{"from": "tor-0-0-h0", "to": "10.1.0.0/24", "gbps": 1}], "demands[0].from", "not a ToR with hosts"),
    ([{"from": "tor-0-0", "to": "10.7.0.0/24", "gbps": 1}], "demands[0].to", "no host lives in 10.7.0.0/24"),
    ([{"from": "tor-0-0", "to": "10.1.0.0/24", "gbps": 1}, {"from": "tor-0-0", "to": "10.1.0.0/24", "gbps": 2}],
     "demands[1]", "first at demands[0]"),
])
def test_a_bad_matrix_is_refused_whole_with_located_errors(doc: Any, loc: str, words: str) -> None:
    good = {"from": "tor-1-1", "to": "10.0.0.0/24", "gbps": 0.01}
    if isinstance(doc, list) and doc and isinstance(doc[0], dict) and loc != "demands[1]":
        doc = [*doc, good]  # one good demand beside: the matrix is still refused
    with pytest.raises(InvalidMatrix) as err:
        validate_matrix(doc, HOSTS)
    assert any(e.loc == loc and words in e.msg for e in err.value.errors), err.value.errors


def test_syntax_errors_and_missing_files_are_refused(tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text("- {from: tor-0-0, to: [\n")
    with pytest.raises(InvalidMatrix) as err:
        load_matrix(tmp_path / "bad.yaml", HOSTS)
    assert "YAML syntax error" in err.value.errors[0].msg
    with pytest.raises(InvalidMatrix) as err:
        load_matrix(tmp_path / "nowhere.yaml", HOSTS)
    assert "cannot read" in err.value.errors[0].msg


def test_the_plan_spreads_every_demand_over_its_flows() -> None:
    demands = tuple(Demand.model_validate(d) for d in (
        {"from": "tor-0-0", "to": "10.1.0.0/24", "gbps": 0.04},
        {"from": "tor-0-0", "to": "10.0.1.0/24", "gbps": 0.01},
        {"from": "tor-1-1", "to": "10.0.0.0/24", "gbps": 0.0}))  # nothing to send
    options = TrafficOptions(flows=32)
    plan = plan_traffic(demands, HOSTS, options)
    assert set(plan) == {"tor-0-0-h0", "tor-0-0-h1"}  # only hosts send; the ToR itself never
    for d, dm in enumerate(demands[:2]):
        streams = [s for p in plan.values() for s in p.streams if s["demand"] == d]
        assert sum(s["bps"] for s in streams) == pytest.approx(dm.gbps * 1e9)
        flows = [tuple(f) for s in streams for f in s["flows"]]
        assert len(set(flows)) == 32  # distinct 5-tuples
        targets = {a for a, _port in flows}
        assert targets == {h.address for h in HOSTS.values() if h.prefix == dm.to}
        ports = {port for _a, port in flows}
        assert ports == set(range(options.base_port + 32 * d, options.base_port + 32 * d + 32))  # a block of flows
        assert {(p.host, t) for p in plan.values() for s in p.streams if s["demand"] == d
                for t, _port in s["flows"]} == {(h, t) for h in plan for t in targets}  # every pair has flows


def test_options_are_checked() -> None:
    with pytest.raises(ValueError, match="flows"):
        TrafficOptions(flows=MAX_FLOWS + 1)
    with pytest.raises(ValueError, match="packet_bytes"):
        TrafficOptions(packet_bytes=9000)
    with pytest.raises(ValueError, match="duty"):
        TrafficOptions(period_s=2.0, duty=0.0)


def test_an_on_off_sender_sends_only_its_busy_share_at_the_mean_rate_over_whole_periods() -> None:
    """The sender on loopback (to a port nobody reads): over 0.25 s of a 0.2 s period half busy, it is busy
    0.1 + 0.05 s at twice the stream's rate: 300 packets where a steady sender sends 250; over whole periods,
    as many as a steady one."""
    from labs.udp_sender import run

    def spec(duration: float, period_s: float) -> dict[str, Any]:
        return {"start_at": 0, "duration": duration, "tick_s": 0.001, "packet_bytes": 100, "period_s": period_s,
                "duty": 0.5, "streams": [{"demand": 0, "bps": 800_000, "flows": [["127.0.0.1", 9]]}]}

    assert run(spec(0.25, 0.0))["streams"][0]["packets"] == 250
    assert run(spec(0.25, 0.2))["streams"][0]["packets"] == 300
    assert run(spec(0.4, 0.2))["streams"][0]["packets"] == 400


def dual_stack(hosts: dict[str, HostInfo], *, skip: frozenset[str] = frozenset()) -> dict[str, HostInfo]:
    """The hosts of ``hosts`` with an IPv6 twin of each address: 10.P.T.H in 2001:db8:P:T::H/64."""
    out = {}
    for name, h in hosts.items():
        p, t, last = h.address.split(".")[1:]
        v6 = {} if name in skip else {"address6": f"2001:db8:{p}:{t}::{last}", "prefix6": f"2001:db8:{p}:{t}::/64"}
        out[name] = HostInfo(h.name, h.netns, h.tor, h.address, h.prefix, **v6)
    return out


def test_demands_to_ipv6_prefixes_go_over_ipv6_between_the_hosts_ipv6_addresses() -> None:
    hosts = dual_stack(HOSTS, skip=frozenset({"tor-0-0-h1"}))
    assert hosts["tor-1-0-h1"].to_document() == {
        "netns": "loom-clos3-hosts-tor-1-0-h1", "tor": "tor-1-0", "address": "10.1.0.11", "prefix": "10.1.0.0/24",
        "address6": "2001:db8:1:0::11", "prefix6": "2001:db8:1:0::/64"}
    assert "address6" not in hosts["tor-0-0-h1"].to_document()  # an IPv4-only host's document is as before
    demands = validate_matrix([{"from": "tor-0-0", "to": "2001:DB8:1::/64", "gbps": 0.04},
                               {"from": "tor-0-0", "to": "10.1.0.0/24", "gbps": 0.02}], canonical6(hosts))
    assert demands[0].to == "2001:db8:1::/64"
    plan = plan_traffic(demands, canonical6(hosts), TrafficOptions(flows=16))
    v6 = [(p.host, f) for p in plan.values() for s in p.streams if s["demand"] == 0 for f in s["flows"]]
    assert {h for h, _f in v6} == {"tor-0-0-h0"}  # the ToR's host without IPv6 sends none of it
    assert {a for _h, (a, _port) in v6} == {"2001:db8:1::10", "2001:db8:1::11"}
    assert len(v6) == 16 and sum(s["bps"] for p in plan.values() for s in p.streams if s["demand"] == 0) == \
        pytest.approx(0.04e9)
    v4 = {(p.host, a) for p in plan.values() for s in p.streams if s["demand"] == 1 for a, _port in s["flows"]}
    assert v4 == {(h, a) for h in ("tor-0-0-h0", "tor-0-0-h1") for a in ("10.1.0.10", "10.1.0.11")}  # as before


def canonical6(hosts: dict[str, HostInfo]) -> dict[str, HostInfo]:
    """What lab_hosts reads from a namespace: canonical IPv6 text."""
    return {n: HostInfo(h.name, h.netns, h.tor, h.address, h.prefix,
                        str(ipaddress.IPv6Address(h.address6)) if h.address6 else None,
                        str(ipaddress.IPv6Network(h.prefix6)) if h.prefix6 else None) for n, h in hosts.items()}


def test_an_ipv6_matrix_is_refused_where_no_host_has_ipv6() -> None:
    with pytest.raises(InvalidMatrix) as err:
        validate_matrix([{"from": "tor-0-0", "to": "2001:db8:1::/64", "gbps": 0.01}], HOSTS)
    assert [e.loc for e in err.value.errors] == ["demands[0].to"]
    hosts = canonical6(dual_stack(HOSTS, skip=frozenset({"tor-0-0-h0", "tor-0-0-h1"})))
    with pytest.raises(InvalidMatrix) as err:
        validate_matrix([{"from": "tor-0-0", "to": "2001:db8:1::/64", "gbps": 0.01}], hosts)
    assert [(e.loc, "IPv6" in e.msg) for e in err.value.errors] == [("demands[0].from", True)]


def test_the_sender_sends_ipv6_flows_over_ipv6_with_the_same_packet_size() -> None:
    """On loopback: an IPv6 flow's datagrams carry 20 bytes less payload, so each IPv6 packet is the size asked."""
    from labs.udp_sender import run

    rx = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    rx.bind(("::1", 0))
    rx.settimeout(2)
    port = rx.getsockname()[1]
    try:
        got = run({"start_at": 0, "duration": 0.05, "tick_s": 0.001, "packet_bytes": 200,
                   "streams": [{"demand": 0, "bps": 320_000, "flows": [["::1", port]]},
                               {"demand": 1, "bps": 320_000, "flows": [["127.0.0.1", 9]]}]})
        sizes = {len(rx.recv(2048)) for _ in range(got["streams"][0]["packets"])}
    finally:
        rx.close()
    assert [s["packets"] for s in got["streams"]] == [10, 10] and got["streams"][0]["bytes"] == 2000
    assert sizes == {200 - 48}

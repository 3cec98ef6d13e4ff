"""The device agent's side of IPv6 and unnumbered fabrics (#36), on what FRR 8.4 and kernel 6.18 really show
(``tests/unit/samples/frr84/clos_unnumbered``, captured from a dual-stack BGP-unnumbered lab): kernel routes of both
families read back per port whatever the gateway form, sessions of both address families named by interface,
soft clears per address family, the peers' link-local addresses found for ``fib`` next hops without a gateway,
netlink next hops with IPv6 gateways, and ``GetRunning``'s addresses of both families and link-local neighbors."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest

from controller.model.errors import FrrError
from southbound.config import BgpNeighbor, DeviceConfig, FibNexthop, FibRoute, Interface
from southbound.device.agent import AgentCore
from southbound.device.fib import netlink_next_hop
from southbound.device.frr_apply import DryFrr, kernel_route_from_ip_json, peer_families, soft_clears
from southbound.device.linklocal import (
    LinkLocals,
    UnresolvedNextHop,
    bgp_link_locals,
    neighbor_routers,
    route_link_locals,
)
from southbound.device.opstate import parse_bgp_summary
from southbound.discovery.observed import ObservedDevice, interfaces_from_ip_json
from southbound.grpc_adapter import running_from_proto, running_to_proto
from southbound.rendered import FibHop, Rendered
from southbound.state import AgentError, BgpSession, KernelNextHop

SAMPLES = Path(__file__).parent / "samples" / "frr84" / "clos_unnumbered"
LEAF00, LEAF01 = "fe80::dc5a:a5ff:fec7:bf87", "fe80::406e:54ff:fe22:cd1"  # tor-0-0's peers on eth1 and eth2


def sample(name: str) -> Any:
    return json.loads((SAMPLES / f"tor-0-0.{name}").read_text())


def routes(name: str, version: int) -> dict[str, Any]:
    out = {}
    for r in sample(name):
        route = kernel_route_from_ip_json(r, version)
        if route is not None:
            out[route.prefix] = route
    return out


def test_ipv4_routes_over_ipv6_link_local_next_hops_map_to_their_ports() -> None:
    got = routes("route4.json", 4)
    assert sorted(got) == ["10.0.1.0/24", "10.1.0.0/24", "10.1.1.0/24"]  # the connected host subnet is left out
    assert got["10.1.0.0/24"].protocol == "bgp"
    assert got["10.1.0.0/24"].nexthops == (KernelNextHop("eth1", LEAF00, 1), KernelNextHop("eth2", LEAF01, 1))


def test_the_onlink_form_and_an_ipv4_default_over_ipv6_read_back_too() -> None:
    got = routes("route4-onlink.json", 4)
    assert got["10.99.0.0/24"].weights() == {"eth1": 3, "eth2": 1}  # via 169.254.0.1 dev ethN onlink
    assert got["10.99.0.0/24"].nexthops[0].via == "169.254.0.1"
    assert got["10.98.0.7/32"].nexthops == (KernelNextHop("eth1", "169.254.0.1", 1),)
    assert got["0.0.0.0/0"].nexthops == (KernelNextHop("eth1", LEAF00, 1),)  # default via inet6 fe80::..


def test_ipv6_routes_are_canonical_and_the_kernels_own_are_left_out() -> None:
    got = routes("route6-host.json", 6)
    # no fe80::/64, no connected 2001:db8::/64, no RA default route: only FRR's
    assert sorted(got) == ["2001:db8:0:1::/64", "2001:db8:1:1::/64", "2001:db8:1::/64", "2001:db8:99::5/128"]
    assert got["2001:db8:1::/64"].weights() == {"eth1": 1, "eth2": 1}
    assert got["2001:db8:99::5/128"].nexthops == (KernelNextHop("eth1", LEAF00, 1),)
    # an IPv6 default route is ::/0, told by its family or guessed from its IPv6 gateway
    default = {"dst": "default", "gateway": LEAF00, "dev": "eth1", "protocol": "bgp", "metric": 20}
    for version in (6, None):
        route = kernel_route_from_ip_json(default, version)
        assert route is not None and route.prefix == "::/0"


def test_an_inline_next_hop_flagged_dead_is_not_read_as_forwarding() -> None:
    """zebra installs multipath routes with inline next hops (``no zebra nexthop kernel enable``): over a port
    that is down the kernel keeps the next hop, flagged ``dead``, until the route is replaced. It forwards
    nothing: the reading leaves it out (as it did with nexthop groups, where the kernel drops it)."""
    r = {"dst": "10.0.0.0/24", "protocol": "bgp", "metric": 20, "flags": [],
         "nexthops": [{"gateway": "100.0.0.1", "dev": "eth4", "weight": 50, "flags": []},
                      {"gateway": "100.0.0.3", "dev": "eth3", "weight": 50, "flags": ["dead", "linkdown"]}]}
    route = kernel_route_from_ip_json(r, 4)
    assert route is not None and route.weights() == {"eth4": 50}
    r["nexthops"][1]["flags"] = ["onlink"]
    route = kernel_route_from_ip_json(r, 4)
    assert route is not None and route.weights() == {"eth4": 50, "eth3": 50}


def test_a_dry_agent_reads_back_ipv6_prefixes_asked_for_in_any_spelling(tmp_path: Path) -> None:
    hop = FibHop("eth1", "g1", 3)
    rendered = Rendered("tor-0-0", "", {"2001:db8::/64": (hop,), "10.0.0.0/24": (hop,)})
    observed, got = DryFrr(tmp_path).read_routes(["2001:db8:0:0::/64"], rendered)
    assert not observed and list(got) == ["2001:db8::/64"]


def test_sessions_of_both_families_are_one_per_interface_named_neighbor() -> None:
    sessions = parse_bgp_summary(sample("bgp-summary.json"))
    # each peer is active in ipv4Unicast and ipv6Unicast with 3 prefixes each: one session, 6 received
    assert sessions == (BgpSession("eth1", "Established", 64768, 6), BgpSession("eth2", "Established", 64768, 6))
    only_v6 = {"ipv6Unicast": sample("bgp-summary.json")["ipv6Unicast"]}
    assert [s.neighbor for s in parse_bgp_summary(only_v6)] == ["eth1", "eth2"]
    assert parse_bgp_summary({}) == ()
    # ipv6-numbered: the neighbor's address as the rendered config spells it (canonical), whatever FRR prints
    numbered = {"ipv6Unicast": {"peers": {"FD6C:6F6F:6D00:1:0:0:0:1": {"state": "Active", "remoteAs": 64512}}}}
    assert parse_bgp_summary(numbered) == (BgpSession("fd6c:6f6f:6d00:1::1", "Active", 64512, 0),)


def test_soft_clears_go_to_each_family_the_peer_is_active_in() -> None:
    text = (SAMPLES / "tor-0-0.running.txt").read_text()
    assert peer_families(text) == {"eth1": ("ipv4", "ipv6"), "eth2": ("ipv4", "ipv6")}
    old = Rendered("tor-0-0", text, lb_peers={"eth1": "10.1.0.0/24=10", "eth2": "10.1.0.0/24=10"})
    new = Rendered("tor-0-0", text, lb_peers={"eth1": "10.1.0.0/24=30", "eth2": "10.1.0.0/24=10"})
    assert soft_clears(old, new) == ["clear bgp ipv4 unicast eth1 soft out", "clear bgp ipv6 unicast eth1 soft out"]
    v4_only = text.replace(" address-family ipv6 unicast\n", " address-family l2vpn evpn\n")
    assert soft_clears(old, Rendered("tor-0-0", v4_only, lb_peers=new.lb_peers)) == [
        "clear bgp ipv4 unicast eth1 soft out"]


def test_the_peers_link_locals_from_the_neighbor_table_routes_and_bgpd() -> None:
    assert neighbor_routers(sample("neigh6.json")) == {"eth1": [LEAF00], "eth2": [LEAF01]}
    assert neighbor_routers(sample("neigh6-delay.json"))["eth1"] == [LEAF00]  # DELAY still names the peer
    assert "eth1" not in neighbor_routers(sample("neigh6-flap.json"))  # flushed with the link
    assert neighbor_routers(sample("neigh6-incomplete.json"))["eth1"] == [LEAF00]  # fe80::dead:1 never answered
    assert route_link_locals(sample("route4.json")) == {"eth1": [LEAF00], "eth2": [LEAF01]}
    assert route_link_locals(sample("route6.json")) == {"eth1": [LEAF00], "eth2": [LEAF01]}  # not the RA defaults'
    assert bgp_link_locals(sample("bgp-neighbors.json")) == {"eth1": LEAF00, "eth2": LEAF01}


def test_resolving_falls_back_source_by_source_and_names_the_port_nobody_knows() -> None:
    asked: list[str] = []

    def source(name: str, doc: Any) -> Any:
        def read() -> Any:
            asked.append(name)
            return doc
        return read

    found = LinkLocals(source("neigh", sample("neigh6-flap.json")), source("routes", sample("route4.json")),
                       source("bgp", {}))
    assert found.resolve(["eth1", "eth2"]) == {"eth1": LEAF00, "eth2": LEAF01}
    assert asked == ["neigh", "routes"]  # eth1 from FRR's routes; bgpd not asked once both are known
    nothing = LinkLocals(source("neigh", []), source("routes", []), source("bgp", {}))
    with pytest.raises(UnresolvedNextHop, match="on eth3 yet"):
        nothing.resolve(["eth3"])
    nothing.last["eth3"] = LEAF00  # found before the port went down
    assert nothing.resolve(["eth3"]) == {"eth3": LEAF00}


def test_netlink_next_hops_of_either_family_over_ipv6_gateways() -> None:
    index = {"eth1": 2}
    assert netlink_next_hop("10.1.0.0/24", FibHop("eth1", "g", 3, LEAF00), index) == {
        "oif": 2, "hops": 2, "via": {"family": socket.AF_INET6, "addr": LEAF00}}  # RTA_VIA: RFC 8950
    assert netlink_next_hop("2001:db8::/64", FibHop("eth1", "g", 1, LEAF00), index) == {"oif": 2, "hops": 0,
                                                                                 "gateway": LEAF00}
    assert netlink_next_hop("10.1.0.0/24", FibHop("eth1", "g", 1, "100.64.0.1"), index)["gateway"] == "100.64.0.1"
    with pytest.raises(FrrError, match="IPv4 gateway 100.64.0.1"):
        netlink_next_hop("2001:db8::/64", FibHop("eth1", "g", 1, "100.64.0.1"), index)


def test_get_running_carries_both_families_and_the_link_local_neighbors_over_the_wire() -> None:
    addr, neigh = (SAMPLES / "tor-0-0.addr.json").read_text(), (SAMPLES / "tor-0-0.neigh6.json").read_text()
    observed = ObservedDevice("tor-0-0", "", interfaces_from_ip_json(addr, None, neigh))
    wire = running_to_proto(observed)
    host0 = next(i for i in wire.interfaces if i.name == "host0")
    assert list(host0.addresses) == ["10.0.0.1/24", "2001:db8::1/64"]  # both families, as the proto says
    back = running_from_proto(wire)
    assert back == observed
    eth1 = back.interface("eth1")
    assert eth1 is not None and eth1.addresses == eth1.addresses6 == ()  # unnumbered: no address of its own
    assert eth1.link_local == ("fe80::686a:16ff:fe5e:42f",) and eth1.neighbors6 == (LEAF00,)  # pairs the link


class _KernelLinkLocals(DryFrr):
    """The dry backend, but its fib's link-local addresses looked for as a real one does, in what tor-0-0's kernel
    showed just after eth1 flapped (eth1's router not in the neighbor table yet, no route, no bgpd)."""

    def __init__(self, record_dir: Path):
        super().__init__(record_dir)
        self.link_locals = LinkLocals(lambda: sample("neigh6-flap.json"), list, dict)

    def check_fib(self, target: Rendered) -> None:
        self.link_locals.resolve({h.port for hops in target.fib.values() for h in hops if not h.via})


@pytest.mark.anyio
async def test_prepare_refuses_a_fib_next_hop_without_a_link_local_and_a_preview_shows_its_diff(tmp_path: Path
                                                                                              ) -> None:
    config = DeviceConfig(hostname="tor-0-0", asn=4200000000, router_id="10.255.0.1", underlay="unnumbered",
                          interfaces=(Interface("eth1", None, peer="leaf-0-0", peer_port="eth1"),
                                      Interface("eth2", None, peer="leaf-0-1", peer_port="eth1")),
                          neighbors=(BgpNeighbor("eth1", "leaf-0-0", 64768), BgpNeighbor("eth2", "leaf-0-1", 64768)),
                          fib_routes=(FibRoute("2001:db8:1::/64", "g1", (FibNexthop("eth1", "", 3),
                                                                          FibNexthop("eth2", "", 1))),))
    core = AgentCore(_KernelLinkLocals(tmp_path / "dry"), tmp_path, "tor-0-0")
    await core.start()
    preview = await core.prepare("c1", config, preview=True)
    assert preview.changed and "fib 2001:db8:1::/64 eth1:3 eth2:1" in preview.diff
    with pytest.raises(AgentError, match=r"cannot install the fib routes yet: .*on eth1 yet") as err:
        await core.prepare("c1", config)
    assert err.value.code == "failed_precondition"
    await core.close()

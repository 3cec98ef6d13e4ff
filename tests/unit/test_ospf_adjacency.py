"""OSPF state (issue 33, item 2), beside IS-IS's (``test_adjacency``): the kernel routes ospfd installs read
as routes, and the adjacencies: ospfd's neighbors parsed
into OpenConfig's OSPFv2 neighbors (area, interface, router id), those it forgets kept down, the dry agent's
model, the path in the agent's gNMI tree and the view's stream, and the view's sessions, documents and drift.

ospfd's output is FRR 8.4.4's, captured in a three-router ring (``tests/golden/frr/ospf/README``).
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from controller.model.intent import validate_intent
from controller.operations.service import Operations, OperationsOptions
from controller.operations.stream import PATHS, parse_state
from controller.operations.view import OperationalView
from southbound.device import opstate
from southbound.device.counters import CounterSnapshot
from southbound.device.frr_apply import kernel_route_from_ip_json
from southbound.device.gnmi_server import _changed, _entity_elems, _notifications, compile_path, select
from southbound.device.opstate import (
    DOWN,
    UP,
    DryStatus,
    KernelStatus,
    OperSnapshot,
    ospf_circuits,
    parse_ospf_neighbors,
)
from southbound.gnmi import _samples, format_path, parse_path
from tests.unit.test_operations import INTENT

GOLDEN = Path(__file__).resolve().parent.parent / "golden" / "frr"
B_ID, C_ID = "100.127.235.55", "100.127.241.125"  # a's neighbors: b on eth1, c on eth2
AREA = "0.0.0.0"
NBR = ("/network-instances/network-instance[name=default]/protocols/protocol[identifier=OSPF][name=OSPF]/ospfv2/"
       "areas/area[identifier={}]/interfaces/interface[id={}]/neighbors/neighbor[router-id={}]/state/adjacency-state")
OSPF_INTENT = validate_intent({**INTENT.to_document(), "routing": "ospf"})


def neighbors(name: str) -> Any:
    return json.loads((GOLDEN / "ospf" / name).read_text())


def test_the_routes_ospfd_installs_are_read_back() -> None:
    """``ip -j route``'s OSPF routes (protocol ``ospf``, 188) are routes of the device's state, as BGP's and
    IS-IS's: a fabric without ``fib`` routes is verified against them."""
    hops = [{"gateway": "100.64.0.1", "dev": "eth1", "weight": 1},
            {"gateway": "100.64.0.3", "dev": "eth2", "weight": 1}]
    for proto in ("ospf", 188):
        route = kernel_route_from_ip_json({"dst": "10.9.1.0/24", "protocol": proto, "metric": 20, "nexthops": hops})
        assert route is not None and route.protocol == "ospf" and [h.port for h in route.nexthops] == ["eth1", "eth2"]
    assert kernel_route_from_ip_json({"dst": "10.9.1.0/24", "protocol": "kernel", "dev": "eth1"}) is None


def test_ospfd_s_neighbors_are_read_by_port_area_and_router_id() -> None:
    areas = {"eth1": AREA, "eth2": AREA}
    assert parse_ospf_neighbors(neighbors("neighbor-a.json"), areas) == {
        (AREA, "eth1", B_ID): {"adjacency-state": "FULL"}, (AREA, "eth2", C_ID): {"adjacency-state": "FULL"}}
    assert parse_ospf_neighbors(neighbors("neighbor-a-eth1-down.json"), areas) == {  # ospfd forgot b
        (AREA, "eth2", C_ID): {"adjacency-state": "FULL"}}
    assert parse_ospf_neighbors(neighbors("neighbor-a-mtu.json"), {"eth1": "0.0.0.1"}) == {  # MTUs differ
        ("0.0.0.1", "eth1", B_ID): {"adjacency-state": "EXCHANGE"}, (AREA, "eth2", C_ID): {"adjacency-state": "FULL"}}
    doc = {"neighbors": {"10.0.0.9": [{"nbrState": "2-Way/DROther", "ifaceName": "eth7:10.1.1.1"}],
                         "10.0.0.8": [{"converged": "Init", "ifaceName": "eth8"}, {"converged": "Full"}]}}
    assert parse_ospf_neighbors(doc, {}) == {(AREA, "eth7", "10.0.0.9"): {"adjacency-state": "TWO_WAY"},
                                            (AREA, "eth8", "10.0.0.8"): {"adjacency-state": "INIT"}}
    assert parse_ospf_neighbors({"neighbors": []}, {}) == {} and parse_ospf_neighbors([], {}) == {}


def test_the_ospf_ports_of_a_rendered_config_and_a_dry_agent_s_adjacencies(tmp_path: Path) -> None:
    """The golden r1 is drained on eth2 (no OSPF there) and has a passive host port: eth1 alone."""
    text = (GOLDEN / "ospf-r1.conf").read_text()
    assert ospf_circuits(text) == {"eth1": ("r2", AREA)}
    st = DryStatus(lambda: text, tmp_path / "down")
    assert st.read().ospf == {(AREA, "eth1", "r2"): {"adjacency-state": "FULL"}} and st.read().isis == {}
    (tmp_path / "down").write_text("eth1\n")
    assert st.read().ospf == {(AREA, "eth1", "r2"): {"adjacency-state": DOWN}}
    assert ospf_circuits((GOLDEN / "isis-r1.conf").read_text()) == {}


def test_an_adjacency_ospfd_forgets_stays_down_while_its_port_runs_ospf(monkeypatch: pytest.MonkeyPatch,
                                                                        tmp_path: Path) -> None:
    text = "".join(f"interface {p}\n description to {n}:eth1\n ip ospf area {AREA}\nexit\n!\n"
                   for p, n in (("eth1", "b"), ("eth2", "c")))
    reading = {"doc": neighbors("neighbor-a.json")}
    monkeypatch.setattr(opstate, "read_ospf", lambda vty, areas: parse_ospf_neighbors(reading["doc"], areas))
    st = KernelStatus(tmp_path, frr_text=lambda: text)
    st._read_ospf(tmp_path, ospf_circuits(text))
    assert st._ospf == parse_ospf_neighbors(reading["doc"], {})
    reading["doc"] = neighbors("neighbor-a-eth1-down.json")
    st._read_ospf(tmp_path, ospf_circuits(text))
    assert st._ospf == {(AREA, "eth1", B_ID): {"adjacency-state": DOWN},
                        (AREA, "eth2", C_ID): {"adjacency-state": "FULL"}}
    st._read_ospf(tmp_path, {"eth2": ("c", AREA)})  # eth1 left OSPF (drained): nothing is kept for it
    assert st._ospf == {(AREA, "eth2", C_ID): {"adjacency-state": "FULL"}}


STATUS = OperSnapshot(5, {"eth1": {"oper-status": UP, "admin-status": UP}},
                      ospf={(AREA, "eth1", B_ID): {"adjacency-state": "FULL"},
                            (AREA, "eth2", C_ID): {"adjacency-state": "INIT"}})


def picked(xpath: str, status: OperSnapshot = STATUS) -> dict[str, Any]:
    got = select(CounterSnapshot(5), compile_path(parse_path(xpath)), status)
    return {format_path(_entity_elems(tree, e)): v for (tree, e), v in got.items()}


def test_the_ospf_neighbor_path_is_openconfig_s_and_the_stream_follows_it() -> None:
    assert len(picked(NBR.format("*", "*", "*"))) == 2
    assert picked(NBR.format(AREA, "eth2", "*")) == {
        NBR.format(AREA, "eth2", C_ID).removesuffix("/adjacency-state"): {"adjacency-state": "INIT"}}
    [q] = compile_path(parse_path(NBR.format(AREA, "eth1", B_ID)))
    assert q.entity == (AREA, "eth1", B_ID) and q.concrete
    assert len(picked(NBR.format("*", "*", "*").replace("[name=OSPF]", "[name=*]"))) == 2
    assert len(picked("/")) == 1 + 2  # the interface and the two neighbors
    # ON_CHANGE: a neighbor that changes state is sent, one that is gone is deleted
    queries = compile_path(parse_path(NBR.format("*", "*", "*")))
    after = OperSnapshot(6, ospf={(AREA, "eth1", B_ID): {"adjacency-state": DOWN}})
    changed, gone = _changed(select(CounterSnapshot(5), queries, STATUS), select(CounterSnapshot(6), queries, after))
    samples = [s for n in _notifications(CounterSnapshot(6), changed, "", gone) for s in _samples("a", n)]
    assert {(s.path, s.value) for s in samples} == {(NBR.format(AREA, "eth1", B_ID), DOWN),
                                                    (NBR.format(AREA, "eth2", C_ID), None)}
    # the view's stream subscribes to any instance's neighbors and reads them port first
    assert NBR.format("*", "*", "*").replace("[name=OSPF]", "[name=*]") in PATHS
    assert parse_state(NBR.format(AREA, "eth1", B_ID)) == ("ospf", ("eth1", AREA, B_ID))


def test_the_view_counts_ospf_adjacencies_as_sessions_and_lists_them() -> None:
    v = OperationalView()
    v.set_topology(OSPF_INTENT, 0.0)
    v.report_adjacency("leaf-0-0", ("eth3", AREA, B_ID), "FULL", 1.0, protocol="ospf")
    v.report_adjacency("leaf-0-0", ("eth4", AREA, C_ID), "EXSTART", 1.0, protocol="ospf")
    leaf = next(d for d in v.devices_document().devices if d.name == "leaf-0-0")
    assert (leaf.sessions_up, leaf.sessions, leaf.adjacencies) == (1, 2, [])
    assert [(a.port, a.area, a.neighbor, a.state, a.link) for a in leaf.ospf_adjacencies] == [
        ("eth3", AREA, B_ID, "FULL", "leaf-0-0:eth3"), ("eth4", AREA, C_ID, "EXSTART", "leaf-0-0:eth4")]
    assert v.adjacency_at("leaf-0-0", "eth3") == ("FULL", 1.0)
    v.report_adjacency("leaf-0-0", ("eth4", AREA, C_ID), None, 2.0, protocol="ospf")
    leaf = next(d for d in v.devices_document().devices if d.name == "leaf-0-0")
    assert (leaf.sessions_up, leaf.sessions) == (1, 1)
    v.set_reachable("leaf-0-0", False, 3.0)
    assert next(d for d in v.devices_document().devices if d.name == "leaf-0-0").ospf_adjacencies == []


def test_drift_reports_an_ospf_adjacency_not_full_on_a_link_that_is_up() -> None:
    clock = {"now": 0.0}
    runtime: Any = SimpleNamespace(settings=SimpleNamespace(reaction_precompute_s=0.0))
    ops = Operations(runtime, commit=None,  # type: ignore[arg-type]
                     options=OperationsOptions(adjacency_grace_s=10.0), clock=lambda: clock["now"])
    ops.live = True
    v = ops.view
    v.set_topology(OSPF_INTENT, 0.0)
    for ln in OSPF_INTENT.links:
        for dev, port, peer in ((ln.a, ln.a_port, ln.b), (ln.b, ln.b_port, ln.a)):
            v.report_port(dev, port, "UP", 0.0)
            v.report_adjacency(dev, (port, AREA, peer), "FULL", 0.0, protocol="ospf")
    circuits = {"leaf-0-0": frozenset({"eth3", "eth4"})}
    assert ops.drift(None, {}, circuits) == {}
    v.report_adjacency("leaf-0-0", ("eth3", AREA, "spine-0-0"), "EXCHANGE", 5.0, protocol="ospf")
    clock["now"] = 15.0
    assert ops.drift(None, {}, circuits) == {
        "leaf-0-0": ["OSPF adjacency on eth3 (link leaf-0-0:eth3) is EXCHANGE while the link is up"]}

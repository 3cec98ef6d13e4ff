"""IS-IS adjacency state (issue 30, item 1): isisd's output parsed, the adjacencies it forgets kept down,
the dry agent's model, OpenConfig's multi-key adjacency path in the agent's gNMI tree (beside the one-key
paths of interfaces and BGP, unchanged), the deletes ON_CHANGE sends, and the view's sessions and drift.

isisd's output is FRR 8.4.4's, captured in a two-router lab (``tests/golden/frr/isis/README``).
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from controller.operations.service import Operations, OperationsOptions
from controller.operations.stream import PATHS, parse_state
from controller.operations.view import OperationalView
from southbound.device.counters import CounterSnapshot
from southbound.device.gnmi_server import _changed, _entity_elems, _notifications, compile_path, select
from southbound.device.opstate import (
    DOWN,
    UP,
    AdjacencyMemory,
    DryStatus,
    OperSnapshot,
    isis_circuits,
    parse_isis_hostnames,
    parse_isis_neighbors,
)
from southbound.gnmi import PathError, _samples, format_path, parse_path
from tests.unit.test_operations import INTENT

GOLDEN = Path(__file__).resolve().parent.parent / "golden" / "frr"
B_ID, A_ID = "1001.2723.5055", "1001.2717.1021"
ADJ = ("/network-instances/network-instance[name=default]/protocols/protocol[identifier=ISIS][name=ISIS]/isis/"
       "interfaces/interface[interface-id={}]/levels/level[level-number={}]/adjacencies/adjacency[system-id={}]/"
       "state/adjacency-state")


def frr(name: str) -> str:
    return (GOLDEN / "isis" / name).read_text()


def test_isisd_s_neighbors_are_read_with_their_system_ids() -> None:
    """FRR names a neighbor by its dynamic hostname once it knows it (``"adj": "b"``); ``show isis hostname``
    gives the system id back (the router's own row, ``*``, included)."""
    hostnames = parse_isis_hostnames(frr("hostname.txt"))
    assert hostnames == {"b": B_ID, "a": A_ID}
    up = parse_isis_neighbors(json.loads(frr("neighbor-up.json")), hostnames)
    assert up == {("eth1", "2", B_ID): {"adjacency-state": UP}}
    assert parse_isis_neighbors(json.loads(frr("neighbor-down.json")), hostnames) == {}  # isisd forgot it
    # a neighbor whose hostname is not known yet is named by its system id; level 3 is level-1-2: one per level
    doc = {"areas": [{"area": "loom", "circuits": [
        {"circuit": 0, "adj": "0100.0000.0009", "interface": "eth4", "level": 3, "state": "Initializing"}]}]}
    assert parse_isis_neighbors(doc, {}) == {("eth4", "1", "0100.0000.0009"): {"adjacency-state": "INIT"},
                                             ("eth4", "2", "0100.0000.0009"): {"adjacency-state": "INIT"}}
    assert parse_isis_neighbors({"areas": "nonsense"}, {}) == {} and parse_isis_neighbors([], {}) == {}


def test_an_adjacency_isisd_forgets_stays_down_while_its_port_is_a_circuit() -> None:
    hostnames = parse_isis_hostnames(frr("hostname.txt"))
    up = parse_isis_neighbors(json.loads(frr("neighbor-up.json")), hostnames)
    gone = parse_isis_neighbors(json.loads(frr("neighbor-down.json")), hostnames)
    memory = AdjacencyMemory()
    assert memory(up, {"eth1", "eth2"}) == up
    assert memory(gone, {"eth1", "eth2"}) == {("eth1", "2", B_ID): {"adjacency-state": DOWN}}
    assert memory(up, {"eth1", "eth2"}) == up  # back up
    other = {("eth1", "2", "0100.0000.0042"): {"adjacency-state": UP}}  # another neighbor took the port
    assert memory(other, {"eth1"}) == other and memory(gone, {"eth1"}) == {
        ("eth1", "2", "0100.0000.0042"): {"adjacency-state": DOWN}}
    assert memory(gone, {"eth2"}) == {}  # eth1 left IS-IS (drained): nothing is kept for it
    assert memory(gone, {"eth1"}) == {}


def test_the_isis_ports_of_a_rendered_config_and_a_dry_agent_s_adjacencies(tmp_path: Path) -> None:
    text = (GOLDEN / "isis-r1.conf").read_text()
    circuits = isis_circuits(text)
    assert circuits and all(peer for peer in circuits.values())
    assert "eth1" in circuits and circuits["eth1"] == "r2"
    passive = "interface eth9\n description host subnet\n ip router isis loom\n isis passive\nexit\n!\n"
    assert "eth9" not in isis_circuits(text + passive)
    st = DryStatus(lambda: text, tmp_path / "down")
    assert st.read().isis == {(p, "2", peer): {"adjacency-state": UP} for p, peer in circuits.items()}
    (tmp_path / "down").write_text("eth1\n")
    assert st.read().isis["eth1", "2", "r2"] == {"adjacency-state": DOWN}
    assert DryStatus(lambda: "interface eth1\n ip address 10.0.0.0/31\nexit\n", tmp_path / "x").read().isis == {}


STATUS = OperSnapshot(5, {"eth1": {"oper-status": UP, "admin-status": UP}}, {"10.0.0.1": {"session-state": "IDLE"}},
                      {("eth1", "2", B_ID): {"adjacency-state": UP}, ("eth2", "2", A_ID): {"adjacency-state": DOWN},
                       ("eth2", "1", A_ID): {"adjacency-state": "INIT"}})


def picked(xpath: str) -> dict[str, Any]:
    got = select(CounterSnapshot(5), compile_path(parse_path(xpath)), STATUS)
    return {format_path(_entity_elems(tree, e)): v for (tree, e), v in got.items()}


def test_the_adjacency_path_has_three_keys_and_any_of_them_may_be_a_wildcard() -> None:
    root = ADJ.format("*", "*", "*").removesuffix("/state/adjacency-state")
    assert len(picked(root)) == 3
    assert picked(ADJ.format("eth2", "*", "*")) == {
        ADJ.format("eth2", "1", A_ID).removesuffix("/adjacency-state"): {"adjacency-state": "INIT"},
        ADJ.format("eth2", "2", A_ID).removesuffix("/adjacency-state"): {"adjacency-state": DOWN}}
    assert list(picked(ADJ.format("*", "2", B_ID)).values()) == [{"adjacency-state": UP}]
    assert picked(ADJ.format("eth1", "2", A_ID)) == {}  # every key given: that entity or nothing
    [q] = compile_path(parse_path(ADJ.format("eth1", "2", B_ID)))
    assert q.entity == ("eth1", "2", B_ID) and q.concrete
    # a controller that does not know the instance's name asks for any (name=*), as the view's stream does
    assert len(picked(ADJ.format("*", "*", "*").replace("[name=ISIS]", "[name=*]"))) == 3
    for bad in ("[name=ISIS]", "[name=OSPF]"), ("interface-id=*", "name=*"):
        with pytest.raises(PathError) as refused:
            compile_path(parse_path(ADJ.format("*", "*", "*").replace(*bad)))
        assert refused.value.code == "not_found"
    # the one-key trees are as they were: an entity is its key's value, and the paths are the same
    assert picked("/interfaces/interface[name=eth1]/state/oper-status") == {
        "/interfaces/interface[name=eth1]/state": {"oper-status": UP}}
    [q] = compile_path(parse_path("/interfaces/interface[name=eth1]/state/oper-status"))
    assert q.entity == "eth1"
    bgp = ("/network-instances/network-instance[name=default]/protocols/protocol[identifier=BGP][name=BGP]/bgp/"
           "neighbors/neighbor[neighbor-address=10.0.0.1]/state")
    assert picked(bgp + "/session-state") == {bgp: {"session-state": "IDLE"}}
    assert len(picked("/")) == 1 + 1 + 3 + 0  # (no counters in the snapshot) interface, neighbor, adjacencies


def test_on_change_deletes_what_is_gone_and_the_client_and_the_view_follow() -> None:
    queries = compile_path(parse_path(ADJ.format("*", "*", "*")))
    before = select(CounterSnapshot(5), queries, STATUS)
    after_status = OperSnapshot(6, isis={("eth1", "2", B_ID): {"adjacency-state": DOWN}})
    after = select(CounterSnapshot(6), queries, after_status)
    changed, gone = _changed(before, after)
    assert changed == {("isis", ("eth1", "2", B_ID)): {"adjacency-state": DOWN}}
    assert set(gone) == {("isis", ("eth2", "2", A_ID)), ("isis", ("eth2", "1", A_ID))}
    samples = [s for n in _notifications(CounterSnapshot(6), changed, "", gone) for s in _samples("b", n)]
    assert {(s.path, s.value) for s in samples} == {(ADJ.format("eth1", "2", B_ID), DOWN),
                                                    (ADJ.format("eth2", "2", A_ID), None),
                                                    (ADJ.format("eth2", "1", A_ID), None)}
    # the view's stream subscribes to this path and parses what comes
    assert ADJ.format("*", "*", "*").replace("[name=ISIS]", "[name=*]") in PATHS
    assert parse_state(ADJ.format("eth1", "2", B_ID)) == ("isis", ("eth1", "2", B_ID))
    v = OperationalView()
    v.set_topology(INTENT, 0.0)
    v.report_adjacency("leaf-0-0", ("eth3", "2", B_ID), UP, 1.0)
    v.report_adjacency("leaf-0-0", ("eth4", "2", A_ID), "INIT", 1.0)
    leaf = next(d for d in v.devices_document().devices if d.name == "leaf-0-0")
    assert (leaf.sessions_up, leaf.sessions) == (1, 2)
    assert [(a.port, a.level, a.neighbor, a.state, a.link) for a in leaf.adjacencies] == [
        ("eth3", 2, B_ID, UP, "leaf-0-0:eth3"), ("eth4", 2, A_ID, "INIT", "leaf-0-0:eth4")]
    v.report_adjacency("leaf-0-0", ("eth4", "2", A_ID), None, 2.0)
    leaf = next(d for d in v.devices_document().devices if d.name == "leaf-0-0")
    assert (leaf.sessions_up, leaf.sessions) == (1, 1)
    v.set_reachable("leaf-0-0", False, 3.0)
    assert next(d for d in v.devices_document().devices if d.name == "leaf-0-0").adjacencies == []


def test_drift_reports_an_adjacency_down_on_a_link_that_is_up_after_the_grace() -> None:
    """Both ends of leaf-0-0:eth3 report their ports up; leaf-0-0's adjacency there is down: drift says so once
    it has been so for the grace (an adjacency takes a few hellos to come up), and not for a link that is down
    (that is reported as the link) nor for a port the plan runs no IS-IS on."""
    clock = {"now": 0.0}
    runtime: Any = SimpleNamespace(settings=SimpleNamespace(reaction_precompute_s=0.0))
    ops = Operations(runtime, commit=None,  # type: ignore[arg-type]
                     options=OperationsOptions(adjacency_grace_s=10.0), clock=lambda: clock["now"])
    ops.live = True
    v = ops.view
    v.set_topology(INTENT, 0.0)
    for ln in INTENT.links:
        v.report_port(ln.a, ln.a_port, "UP", 0.0)
        v.report_port(ln.b, ln.b_port, "UP", 0.0)
        v.report_adjacency(ln.a, (ln.a_port, "2", ln.b), UP, 0.0)
        v.report_adjacency(ln.b, (ln.b_port, "2", ln.a), UP, 0.0)
    circuits = {"leaf-0-0": frozenset({"eth3", "eth4"}), "spine-0-0": frozenset({"eth1"})}
    assert ops.drift(None, {}, circuits) == {}
    v.report_adjacency("leaf-0-0", ("eth3", "2", "spine-0-0"), DOWN, 5.0)
    clock["now"] = 14.0
    assert ops.drift(None, {}, circuits) == {}  # within the grace
    clock["now"] = 15.0
    assert ops.drift(None, {}, circuits) == {
        "leaf-0-0": ["IS-IS adjacency on eth3 (link leaf-0-0:eth3) is DOWN while the link is up"]}
    assert ops.drift(None, {}, {"spine-0-0": frozenset({"eth1"})}) == {}  # not an IS-IS port of the plan
    assert ops.drift({"links": ["leaf-0-0:eth3"], "devices": []}, {}, circuits) == {}  # overlaid: expected
    v.report_adjacency("leaf-0-0", ("eth3", "2", "spine-0-0"), None, 16.0)  # gone altogether
    clock["now"] = 30.0
    assert ops.drift(None, {}, circuits)["leaf-0-0"] == [
        "IS-IS adjacency on eth3 (link leaf-0-0:eth3) is not reported while the link is up"]
    v.report_port("spine-0-0", "eth1", DOWN, 31.0)  # now the link is down: reported as such, not twice
    clock["now"] = 50.0
    assert [m.split(" (")[0] for m in ops.drift(None, {}, circuits)["leaf-0-0"]] == [
        "link leaf-0-0:eth3 is down where the plan expects it up"]

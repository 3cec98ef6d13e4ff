"""Adopting an OSPF fabric: what discovery asks of a running OSPF configuration that Loom would render
otherwise, what the adoption review calls a forwarding change in an agent's diff, the loopback in the IGP,
and the IGP's link subnets in the kernel-vs-plan comparison (the lab test is tests/lab/test_adopt_ospf_lab.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller.model.intent import validate_intent
from controller.planning import compile_plan
from controller.workflow.review import route_changes
from southbound.discovery.forms import unchanged_costs
from southbound.discovery.frr_text import parse_running
from southbound.discovery.impact import forwarding_impact
from southbound.discovery.infer import discover
from southbound.discovery.observed import ObservedDevice, interfaces_from_ip_json
from southbound.render import device_configs, render_frr

SAMPLES = Path(__file__).parent / "samples" / "frr84" / "adopt_ospf"
NODES = ("leaf1", "leaf2", "spine1", "spine2")


def _observed(edit: dict[str, tuple[str, str]] | None = None) -> list[ObservedDevice]:
    out = []
    for n in NODES:
        text = (SAMPLES / f"{n}.running.txt").read_text()
        if edit and n in edit:
            text = text.replace(*edit[n])
        out.append(ObservedDevice(n, text, interfaces_from_ip_json((SAMPLES / f"{n}.addr.json").read_text())))
    return out


def test_parser_reads_ospf_network_type_and_intervals():
    run = parse_running("interface eth1\n ip ospf network point-to-point\n ip ospf hello-interval 2\n"
                        " ip ospf dead-interval 8\n ip ospf retransmit-interval 3\nexit\n"
                        "interface eth2\n ip ospf dead-interval minimal hello-multiplier 4\nexit\n")
    eth1, eth2 = run.interfaces["eth1"], run.interfaces["eth2"]
    assert (eth1.ospf_network, eth1.ospf_hello, eth1.ospf_dead, eth1.ospf_retransmit) == ("point-to-point", 2, 8, 3)
    assert (eth2.ospf_network, eth2.ospf_hello, eth2.ospf_dead) == (None, None, "minimal")
    assert run.other == []


def _ospf_questions(found) -> list[tuple[str, str]]:
    return [(q.where, q.question) for q in found.questions if "OSPF network types" in q.question
            or "OSPF hello/dead" in q.question]


def _ospf_forms(found) -> dict:
    return {d["name"]: d.get("ospf") for d in found.intent["devices"]}


def test_discovery_keeps_each_router_s_ospf_form_and_asks_what_no_form_holds():
    """The captured fabric: eth1 point-to-point, eth2 broadcast, FRR's default 10 s hellos everywhere, OSPF by
    'network ... area' statements. One device's links of two network types is a question (Loom writes a device's
    links one way); the intervals and the statements are its form."""
    found = discover(_observed(), name="adopt-ospf")
    asked = _ospf_questions(found)
    assert ("device leaf1", "its links run OSPF network types broadcast, point-to-point: Loom writes a device's "
            "links point-to-point or broadcast, and FRR resets an adjacency whose type changes") in asked
    form = _ospf_forms(found)["leaf1"]
    assert form["hello_s"] == 10 and form["dead_s"] == 40 and "network_type" not in form, form
    assert found.valid
    alike = discover(_observed({n: (" ip ospf network point-to-point\n", "") for n in NODES}), name="x")
    assert _ospf_questions(alike) == []
    assert {f.get("network_type") for f in _ospf_forms(alike).values()} == {"broadcast"}


def test_discovery_asks_nothing_of_a_fabric_that_runs_loom_s_ospf():
    fabric = (" ip ospf network point-to-point\n ip ospf hello-interval 1\n ip ospf dead-interval 3\n"
              " ip ospf retransmit-interval 1\n")
    devs = _observed()
    loomish = []
    for d in devs:
        text = d.running_config.replace(" ip ospf network point-to-point\n", "")
        for port in ("eth1", "eth2"):
            head = f"interface {port}\n"
            text = text.replace(head, head + fabric, 1)
        loomish.append(ObservedDevice(d.name, text, d.interfaces))
    found = discover(loomish, name="x")
    assert _ospf_questions(found) == []
    assert {n: set(f or ()) for n, f in _ospf_forms(found).items()} == {n: {"networks"} for n in NODES}


@pytest.mark.parametrize(("deleted", "added", "expected"), [
    ("interface eth1\n no ip ospf network point-to-point", "",
     "removes an interface's network type (its adjacency resets): 'ip ospf network point-to-point' (in interface "
     "eth1)"),
    ("", "interface eth2\n ip ospf network point-to-point",
     "adds an interface's network type (its adjacency resets): 'ip ospf network point-to-point' (in interface eth2)"),
    ("interface eth1\n no ip ospf hello-interval 10", "interface eth1\n ip ospf hello-interval 1",
     "adds OSPF hello or dead intervals (the adjacency drops while its neighbour's differ): "
     "'ip ospf hello-interval 1' (in interface eth1)"),
    ("", "interface eth1\n ip ospf dead-interval 3",
     "adds OSPF hello or dead intervals (the adjacency drops while its neighbour's differ): "
     "'ip ospf dead-interval 3' (in interface eth1)"),
    ("", "interface eth1\n isis network point-to-point",
     "adds an interface's network type (its adjacency resets): 'isis network point-to-point' (in interface eth1)"),
    ("router ospf\n no network 192.168.0.0/16 area 0", "",
     "removes an IGP cost, area or adjacency: 'network 192.168.0.0/16 area 0' (in router ospf)"),
])
def test_adoption_review_flags_what_resets_an_adjacency(deleted, added, expected):
    diff = f"Lines To Delete\n===============\n{deleted}\n\nLines To Add\n============\n{added}\n"
    assert expected in [i.text() for i in forwarding_impact(diff) or []]


def test_throttling_retransmit_and_the_agents_fib_diff_are_cosmetic():
    diff = ("Lines To Delete\n===============\nrouter ospf\n no timers throttle spf 10 100 2000\n"
            " no timers throttle lsa all 200\ninterface eth1\n no ip ospf retransmit-interval 5\n\n"
            "Lines To Add\n============\nrouter ospf\n timers throttle spf 0 50 1000\n timers throttle lsa all 100\n"
            " timers lsa min-arrival 50\ninterface eth1\n ip ospf retransmit-interval 1\n"
            "--- running\n+++ candidate\n@@ -0,0 +1 @@\n+fib 10.0.0.2/32 eth1:1 eth2:1")
    assert forwarding_impact(diff) == []


def test_the_loopback_is_in_the_igp_when_the_router_id_is_originated():
    found = discover(_observed(), name="adopt-ospf")
    intent = validate_intent(found.intent)
    assert "10.0.0.11/32" in {p.prefix for p in intent.prefixes}
    text = render_frr(device_configs(intent)["leaf1"])
    assert "interface lo\n ip address 10.0.0.11/32\nexit" in text  # by its network statement, in this form
    assert " network 10.0.0.11/32 area 0.0.0.0\n" in text
    found.intent["devices"] = [{k: v for k, v in d.items() if k != "ospf"} for d in found.intent["devices"]]
    intent = validate_intent(found.intent)
    text = render_frr(device_configs(intent)["leaf1"])
    assert "interface lo\n ip address 10.0.0.11/32\n ip ospf area 0.0.0.0\nexit" in text
    isis = validate_intent({**found.intent, "routing": "isis"})
    assert "interface lo\n ip address 10.0.0.11/32\n ip router isis loom\n isis passive\nexit" in render_frr(
        device_configs(isis)["leaf1"])
    unannounced = validate_intent({**found.intent, "prefixes": [
        p for p in found.intent["prefixes"] if p["prefix"] != "10.0.0.11/32"]})
    assert "interface lo\n ip address 10.0.0.11/32\nexit" in render_frr(device_configs(unannounced)["leaf1"])


def test_an_igp_s_link_subnets_in_the_kernel_are_no_route_change():
    intent = validate_intent(discover(_observed(), name="x").intent)
    plan = compile_plan(intent)
    plan = plan[0] if isinstance(plan, tuple) else plan
    planned = {p: frozenset(h.port for h in plan.devices["leaf1"].groups[g])
               for p, g in plan.devices["leaf1"].routes.items()}
    kernel = {"leaf1": {**planned, "192.168.12.0/30": frozenset({"eth1"})}}
    assert [(w.context, w.line) for w in route_changes(plan, kernel)] == [("route 192.168.12.0/30", "next hop eth1")]
    assert route_changes(plan, kernel, frozenset({"192.168.12.0/30"})) == []


def test_a_cost_written_out_as_ospfd_computes_it_changes_nothing():
    """An adoption writes ``ip ospf cost N`` where the router runs without one: no change when ospfd computes
    ``N`` already (the reference bandwidth over the speed, rounded), a change otherwise or where the router has
    a cost of its own."""
    text = "interface eth1\n ip address 10.0.0.1/30\nexit\ninterface eth2\n ip ospf cost 7\nexit\nrouter ospf\nexit\n"
    addr = ('[{"ifname": "eth1", "link_type": "ether", "addr_info": []}, '
            '{"ifname": "eth2", "link_type": "ether", "addr_info": []}]')
    dev = ObservedDevice("r1", text, interfaces_from_ip_json(addr, {"eth1": 40_000, "eth2": 10_000}))
    added = [("interface eth1", "ip ospf cost 3"), ("interface eth1", "ip ospf cost 2"),
             ("interface eth2", "ip ospf cost 10"), ("interface eth3", "ip ospf cost 10"), ("router ospf", "x")]
    # eth1: 100000 / 40000 = 2.5, which ospfd rounds to 3; eth2 has its own cost; eth3 reports no speed (10000)
    assert unchanged_costs(dev, added) == {("interface eth1", "ip ospf cost 3"), ("interface eth3", "ip ospf cost 10")}
    ref = ObservedDevice("r1", text.replace("router ospf\n", "router ospf\n auto-cost reference-bandwidth 400000\n"),
                         dev.interfaces)
    assert unchanged_costs(ref, added) == set()  # 10 and 40 now


def test_frr_defaults_written_out_are_cosmetic_but_a_changed_setting_is_not():
    """``isis metric 10`` and ``is-type level-1-2`` are FRR's defaults: written where the router had none, they
    change nothing; replacing another value, they do."""
    def diff(deleted: str, added: str) -> str:
        return (f"Lines To Delete\n===============\n{deleted}\nLines To Add\n============\n"
                f"interface eth1\n isis metric 10\nrouter isis core\n is-type level-1-2\n{added}")
    assert forwarding_impact(diff("", "")) == []
    changed = forwarding_impact(diff("interface eth1\n no isis metric 20\nrouter isis core\n no is-type level-1\n", ""))
    assert {(i.action, i.line) for i in changed or []} >= {("adds", "isis metric 10"), ("adds", "is-type level-1-2")}

"""Adopting an OSPF fabric: what discovery asks of a running OSPF configuration that Loom would render
otherwise, what the adoption review calls a forwarding change in an agent's diff, the loopback in the IGP,
and the IGP's link subnets in the kernel-vs-plan comparison (the lab test is tests/lab/test_adopt_ospf_lab.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller.model.intent import validate_intent
from controller.planning import compile_plan
from controller.workflow.review import route_changes
from southbound.discovery.frr_text import parse_running
from southbound.discovery.impact import forwarding_impact
from southbound.discovery.infer import discover
from southbound.discovery.observed import ObservedDevice, interfaces_from_ip_json
from southbound.render import device_configs, ospf_intervals, render_frr

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
    return [(q.where, q.question) for q in found.questions if "OSPF network type" in q.question
            or "OSPF hello" in q.question]


def test_discovery_asks_where_the_network_type_or_intervals_differ_from_loom():
    # the captured fabric: eth1 point-to-point, eth2 broadcast, FRR's default 10 s hellos everywhere
    found = discover(_observed(), name="adopt-ospf")
    asked = _ospf_questions(found)
    assert ("device leaf1", "eth2 runs OSPF network type broadcast; Loom renders point-to-point: adopting resets "
            "this adjacency (the routes through it move while it comes back)") in asked
    assert not any(w == "device leaf1" and q.startswith("eth1 runs OSPF network type") for w, q in asked)
    hello, dead, _r = ospf_intervals((1, 3))
    assert ("device leaf1", f"eth1 runs OSPF hello 10 s and dead 40 s; Loom renders {hello} s and {dead} s: the "
            "adjacency drops while one end has the new intervals and the other not") in asked
    assert found.valid


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
    assert _ospf_questions(discover(loomish, name="x")) == []


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

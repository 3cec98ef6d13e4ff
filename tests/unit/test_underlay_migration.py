"""Moving a running fabric's BGP sessions to another underlay (#36 item 4), make before break.

An ``ipv4-numbered`` to ``unnumbered`` change moves every session to the link-local transport over the same
link: every session end resets (its address changes). Committed device by device, a ToR whose uplinks have
moved while its leaves have not has no session at all, so its prefix goes dark in those states, whatever
the order. The review therefore schedules it through a bridge: first every device runs the active plan
with the proposed sessions beside its own (moving no traffic), then the proposed configs, their sessions
up already. These tests hold the review's schedule, the bridge configs and the read-back of a link that
carries two sessions.
"""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

from controller.model.intent import validate_intent
from controller.model.plan import DevicePlan, NextHop
from controller.operations.service import Operations, OperationsOptions
from controller.workflow.changes import ReviewInputs
from controller.workflow.review import build_review
from safety.transition import schedule
from solver.solve import solve
from southbound.config import bgp_session_resets, session_moves
from southbound.device.frr_delta import delta_commands, dropped_addresses, keeping, parse_config
from southbound.render import bridged, device_configs, render_frr
from southbound.state import BgpSession, DeviceState, KernelNextHop, KernelRoute
from southbound.wcmp import compare
from tests.unit.test_safety_replay import clos_doc


def _pair(underlay: str = "unnumbered", v6: bool = True) -> tuple[dict[str, Any], dict[str, Any]]:
    doc = clos_doc(2, 2, 2, 1)
    doc["policies"] = [{"kind": "utilization_limit", "max": 0.9}]
    new = json.loads(json.dumps(doc))
    new["defaults"] = {"underlay": underlay}
    if v6:
        new["prefixes"].append({"prefix": "2001:db8::/64", "origins": ["tor-0-0"]})
        new["demands"].append({"from": "tor-1-1", "to": "2001:db8::/64", "gbps": 5.0})
    return doc, new


def _review(old_doc: dict[str, Any], new_doc: dict[str, Any]) -> dict[str, Any]:
    it, it2 = validate_intent(old_doc), validate_intent(new_doc)
    return build_review(ReviewInputs(SimpleNamespace(proposed_revision=2), it2, solve(it2), 1,  # type: ignore[arg-type]
                                     it, solve(it)), {})


def test_numbered_to_unnumbered_is_scheduled_through_a_bridge_and_is_safe() -> None:
    old_doc, new_doc = _pair(v6=False)
    it, it2 = validate_intent(old_doc), validate_intent(new_doc)
    links = len(it.links)
    ends = [(r.device, r.port) for r in bgp_session_resets(device_configs(it), device_configs(it2))]
    assert len(ends) == 2 * links
    # committed as any change, with the sessions down while their ends differ, there is no safe order
    assert not schedule(it, solve(it), it2, solve(it2), resets=ends).safe
    rv = _review(old_doc, new_doc)
    moves = rv["session_moves"]
    assert moves["count"] == 2 * links and moves["bridged"]
    row = next(m for m in moves["sessions"] if m["device"] == "tor-0-0" and m["port"] == "eth1")
    assert row["from"].startswith("100.") and row["to"] == "eth1"
    sched = rv["schedule"]
    assert sched["intermediate_intent"] == "bridge" and sched["intermediate_plans"] == 1
    assert sched["safe"] and rv["verdict"] == "safe", sched["failing"]
    bridge = [set(st["devices"]) for st, c in zip(sched["stages"], sched["checks"], strict=True) if c["plan"] == 1]
    assert set().union(*bridge) == {d.name for d in it.devices}  # every device runs the bridge first
    assert sched["checks"][-1]["plan"] == 0


def test_the_bridge_runs_both_sessions_on_every_link_and_the_active_forwarding() -> None:
    old_doc, new_doc = _pair(v6=False)
    it, it2 = validate_intent(old_doc), validate_intent(new_doc)
    plan = solve(it)
    before, after = device_configs(it, plan), device_configs(it2, plan)
    mid = device_configs(bridged(it, it2), plan)
    for name, cfg in mid.items():
        keys = {(n.port, n.key) for n in cfg.neighbors}
        assert {(n.port, n.key) for n in before[name].neighbors} <= keys
        assert {(n.port, n.key) for n in after[name].neighbors} <= keys
        assert len(cfg.neighbors) == 2 * len(before[name].neighbors)
        assert cfg.link_bandwidth == before[name].link_bandwidth  # the active plan's weights
        assert [i.address for i in cfg.interfaces] == [i.address for i in before[name].interfaces]  # /31s kept
        assert cfg.underlay == "unnumbered"
    text = render_frr(mid["leaf-0-0"])
    assert "neighbor eth1 interface" in text and f"neighbor {before['leaf-0-0'].neighbors[0].address} " in text
    heads = [line for line in text.splitlines() if line.startswith(("route-map ", "ip prefix-list "))]
    assert heads and len(heads) == len(set(heads))  # a port's route map once, though two sessions use it
    # from the bridge nothing resets that the proposed configs still have, and the moved sessions are reported
    assert {r.reason for r in bgp_session_resets(before, mid)} == set()
    gone = bgp_session_resets(mid, after)  # the old sessions go, with the new ones over the same links up
    assert len(gone) == 2 * len(it.links) and {r.reason for r in gone} == {"address"}
    assert len(session_moves(before, after)) == 2 * len(it.links)


def test_an_unnumbered_to_numbered_change_is_bridged_too() -> None:
    old_doc, new_doc = _pair(v6=False)
    rv = _review(new_doc, old_doc)
    assert rv["session_moves"]["bridged"] and rv["schedule"]["safe"]
    row = next(m for m in rv["session_moves"]["sessions"] if m["device"] == "tor-0-0" and m["port"] == "eth1")
    assert row["from"] == "eth1" and row["to"].startswith("100.")


def test_a_change_without_moves_has_no_bridge() -> None:
    doc, _ = _pair()
    doc2 = json.loads(json.dumps(doc))
    doc2["demands"][0]["gbps"] = 20.0
    rv = _review(doc, doc2)
    assert rv.get("session_moves") is None and rv["schedule"]["intermediate_intent"] != "bridge"


def _state(route: KernelRoute, sessions: tuple[BgpSession, ...] = ()) -> DeviceState:
    return DeviceState("leaf-0-0", "h", True, {route.prefix: route}, sessions)


def test_a_link_with_two_sessions_is_read_back_by_each_ports_share() -> None:
    dp = DevicePlan({"g1": (NextHop("eth1", "a", 3), NextHop("eth2", "b", 1))}, {"10.0.0.0/24": "g1"})
    doubled = KernelRoute("10.0.0.0/24", "bgp", (KernelNextHop("eth1", "100.64.0.1", 37),
                                                 KernelNextHop("eth1", "169.254.0.1", 37),
                                                 KernelNextHop("eth2", "100.64.0.3", 12),
                                                 KernelNextHop("eth2", "169.254.0.1", 12)))
    assert compare(dp, _state(doubled), realization="link-bandwidth") == []
    skewed = KernelRoute("10.0.0.0/24", "bgp", (KernelNextHop("eth1", "100.64.0.1", 25),
                                                KernelNextHop("eth1", "169.254.0.1", 25),
                                                KernelNextHop("eth2", "100.64.0.3", 25),
                                                KernelNextHop("eth2", "169.254.0.1", 25)))
    assert compare(dp, _state(skewed), realization="link-bandwidth")
    single = DevicePlan({"g1": (NextHop("eth1", "a", 1),)}, {"10.0.0.0/24": "g1"})
    one_link = KernelRoute("10.0.0.0/24", "bgp", (KernelNextHop("eth1", "100.64.0.1", 50),
                                                  KernelNextHop("eth1", "169.254.0.1", 50)))
    assert compare(single, _state(one_link), realization="link-bandwidth") == []


def test_a_bridge_leg_is_read_back_only_once_each_links_new_session_is_up() -> None:
    from southbound.transaction import _read_back_checks

    old_doc, new_doc = _pair(v6=False)
    it, it2 = validate_intent(old_doc), validate_intent(new_doc)
    plan = solve(it)
    mid = device_configs(bridged(it, it2), plan)
    names = set(mid)
    check, _ = _read_back_checks(mid, plan, realization="link-bandwidth", wcmp=True, sessions=None, moved=names)
    cfg = mid["tor-0-0"]
    old_up = tuple(BgpSession(n.key, "Established") for n in cfg.neighbors if n.address is not None)
    all_up = tuple(BgpSession(n.key, "Established") for n in cfg.neighbors)
    waiting = [p for p in check("tor-0-0", DeviceState("tor-0-0", "h", True, {}, old_up)) if "BGP session" in p]
    assert sorted(waiting) == sorted(f"BGP session to {n.peer} ({n.port}) not established yet"
                                     for n in cfg.neighbors if n.address is None)
    assert not [p for p in check("tor-0-0", DeviceState("tor-0-0", "h", True, {}, all_up)) if "BGP session" in p]
    # up is not enough: the leg ends once the kernel's routes go over both sessions of each bridged port
    dp = plan.devices["tor-0-0"]
    ports = {p: [h.port for h in dp.groups[g]] for p, g in dp.routes.items()}

    def routes(per_port: int) -> dict[str, KernelRoute]:
        return {p: KernelRoute(p, "bgp", tuple(KernelNextHop(port, f"gw{k}", 1) for port in hops
                                               for k in range(per_port))) for p, hops in ports.items()}

    carrying = [p for p in check("tor-0-0", DeviceState("tor-0-0", "h", True, routes(1), all_up))
                if "sessions over" in p]
    assert sorted(carrying) == sorted(f"{p}: 1 of its 2 sessions over {port} carry it yet"
                                      for p, hops in ports.items() for port in sorted(set(hops)))
    assert check("tor-0-0", DeviceState("tor-0-0", "h", True, routes(2), all_up)) == []


def _session_lines(text: str, key: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.strip().startswith(f"neighbor {key} ")]


def test_the_last_leg_leaves_the_sessions_it_keeps_untouched() -> None:
    """From the bridge to the proposed configs only the old sessions and addresses go: every line of a kept
    session is the bridge's, byte for byte, so that the difference the agent applies (or ``frr-reload.py``'s)
    never re-sends one (FRR resets a session whose ``v6only`` or address family it is told again), and the
    interface sessions are ``v6only``: FRR would otherwise run them over the bridge's /31s (it derives the
    peer's IPv4 address from a /30 or /31 on the port) and reset them when the last leg removes those."""
    for old_doc, new_doc in (_pair(v6=False), _pair(v6=False)[::-1]):
        it, it2 = validate_intent(old_doc), validate_intent(new_doc)
        plan = solve(it)
        mid, after = device_configs(bridged(it, it2), plan), device_configs(it2, plan)
        for name, cfg in after.items():
            bridge_text, final_text = render_frr(mid[name]), render_frr(cfg)
            for n in cfg.neighbors:
                assert _session_lines(final_text, n.key) == _session_lines(bridge_text, n.key)
                if n.address is None:
                    assert f" neighbor {n.key} interface v6only remote-as {n.remote_asn}" in final_text
            commands = delta_commands(parse_config(bridge_text), parse_config(final_text))
            kept = {f"neighbor {n.key} " for n in cfg.neighbors}
            assert not [c for c in commands if c.removeprefix("no ").startswith(tuple(kept))], (name, commands)
            gone = [k for k, c in enumerate(commands) if " remote-as " in c]
            unaddressed = [k for k, c in enumerate(commands) if c.startswith("no ip address ")]
            assert gone and (not unaddressed or max(gone) < min(unaddressed))  # sessions go before addresses


def test_drift_leaves_out_the_sessions_a_change_removed() -> None:
    """The gNMI stream leaves a deleted neighbor's last state standing in the operational view; once an underlay
    change has removed the numbered sessions, the one last seen Idle is not the plan's, so not drift, while a
    session of the plan down over a link that is up is."""
    _, new_doc = _pair(v6=False)
    it = validate_intent(new_doc)
    ops = Operations(SimpleNamespace(settings=SimpleNamespace(reaction_precompute_s=0.0)),  # type: ignore[arg-type]
                     commit=None, options=OperationsOptions(), clock=lambda: 0.0)  # type: ignore[arg-type]
    ops.live = True
    ops.view.set_topology(it, 0.0)
    for ln in it.links:
        ops.view.report_port(ln.a, ln.a_port, "UP", 0.0)
        ops.view.report_port(ln.b, ln.b_port, "UP", 0.0)
    configs = device_configs(it)
    sessions = {d: {n.key: n.port for n in c.neighbors} for d, c in configs.items()}
    for d, c in configs.items():
        for n in c.neighbors:
            ops.view.report_session(d, n.key, "ESTABLISHED", 0.0)
    ops.view.report_session("tor-0-0", "100.76.86.31", "IDLE", 0.0)  # a numbered session the change removed
    assert ops.drift(None, sessions) == {}
    ops.view.report_session("tor-0-0", "eth1", "ACTIVE", 0.0)
    assert ops.drift(None, sessions) == {"tor-0-0": ["BGP session eth1 is ACTIVE"]}


def test_the_last_leg_takes_the_addresses_away_only_after_the_sessions() -> None:
    """The agent applies the last leg in two steps: the difference to the proposed config with the links'
    addresses kept (the numbered sessions go, and with them their routes), then, once no route goes through
    those addresses, the addresses alone (a port's last IPv4 address going flushes its ARP entries: in the lab
    a route not yet withdrawn dropped a datagram there)."""
    old_doc, new_doc = _pair(v6=False)
    it, it2 = validate_intent(old_doc), validate_intent(new_doc)
    plan = solve(it)
    bridge = parse_config(render_frr(device_configs(bridged(it, it2), plan)["leaf-0-0"]))
    final = parse_config(render_frr(device_configs(it2, plan)["leaf-0-0"]))
    dropped = dropped_addresses(bridge, final)
    links = [i.name for i in device_configs(it)["leaf-0-0"].interfaces if i.peer is not None]
    assert sorted(dropped) == sorted((f"interface {p}",) for p in links) and len(links) > 1
    assert all(len(v) == 1 and v[0].startswith("ip address 100.") for v in dropped.values())
    first = delta_commands(bridge, keeping(final, dropped))
    assert any(" remote-as " in c for c in first) and not [c for c in first if "address 100." in c]
    then = delta_commands(keeping(final, dropped), final)
    assert [c for c in then if c.startswith("no ")] == [f"no {v[0]}" for _, v in sorted(dropped.items())]
    assert dropped_addresses(final, final) == {}

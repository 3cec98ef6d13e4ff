"""The operational view, the damping of a failure reaction, its judgement and the overlay (pure parts).

The view is held to DESIGN.md's rules (down when either end says so, unknown while an end's agent is
unreachable, a device failed when its agent is gone and all its links are down); the damping to its
hold-down that doubles with each flap; the overlay intent to what it leaves out and what it keeps
(addresses included); the judgement through the safety replay itself, the oracle.
"""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest

from controller.model.addressing import allocate, carry
from controller.model.errors import InvalidIntent
from controller.model.intent import load_intent, validate_intent
from controller.operations.overlay import Overlay, overlay_intent
from controller.operations.reaction import Damping, judge
from controller.operations.service import Operations
from controller.operations.view import OperationalView
from controller.planning import compile_plan
from southbound.render import device_configs
from tests.component.test_workflow_api import REPO

INTENT = load_intent(REPO / "labs" / "clos3-small" / "intent.yaml")
POLICY: Any = INTENT.model_validate({**INTENT.to_document(), "policies": [
    {"kind": "failure_reaction", "detect_s": 1, "hold_down_s": 10}]}).policy("failure_reaction")
LINK = "leaf-0-0:eth3"


def view_up() -> OperationalView:
    v = OperationalView()
    v.set_topology(INTENT, 0.0)
    for ln in INTENT.links:
        v.report_port(ln.a, ln.a_port, "UP", 0.0)
        v.report_port(ln.b, ln.b_port, "UP", 0.0)
    return v


def oper(v: OperationalView, link: str) -> str:
    return next(x.oper for x in v.links_document(0.0).links if x.id == link)


def test_a_link_is_down_when_either_end_says_so_and_unknown_while_an_agent_is_away() -> None:
    v = OperationalView()
    v.set_topology(INTENT, 0.0)
    assert {x.oper for x in v.links_document(0.0).links} == {"unknown"}  # nothing reported yet
    v = view_up()
    assert {x.oper for x in v.links_document(0.0).links} == {"up"}
    events = v.report_port("spine-0-0", "eth1", "LOWER_LAYER_DOWN", 5.0)
    assert [(e.kind, e.data["link"]) for e in events] == [("link.down", LINK)]
    assert "spine-0-0:eth1 reports LOWER_LAYER_DOWN" in events[0].data["reason"]
    assert v.report_port("leaf-0-0", "eth3", "DOWN", 5.5) == []  # already down
    assert v.down_links(6.0, for_s=1.0) == {LINK: 5.0} and v.down_links(5.5, for_s=1.0) == {}
    events = v.report_port("spine-0-0", "eth1", "UP", 7.0) + v.report_port("leaf-0-0", "eth3", "UP", 7.0)
    assert [e.kind for e in events] == ["link.up"] and v.flaps_1h(LINK, 8.0) == 1
    # an unreachable agent is not a failed link: its links are unknown, and come back up without an event
    events = v.set_reachable("tor-0-0", False, 9.0, "stream broke")
    assert [e.kind for e in events] == ["device.unreachable"]
    assert oper(v, "leaf-0-0:eth1") == "unknown" and v.down_links(99.0) == {} and v.failed_devices(99.0) == {}
    assert [e.kind for e in v.set_reachable("tor-0-0", True, 10.0)] == ["device.reachable"]
    assert oper(v, "leaf-0-0:eth1") == "up"


def test_a_device_fails_when_its_agent_is_gone_and_its_neighbors_see_its_links_down() -> None:
    v = view_up()
    v.set_reachable("spine-0-0", False, 3.0)
    assert v.failed_devices(10.0) == {}  # its neighbors still see their ports up
    v.report_port("leaf-0-0", "eth3", "DOWN", 4.0)
    v.report_port("leaf-1-0", "eth3", "DOWN", 4.5)
    assert v.failed_devices(10.0, for_s=1.0) == {"spine-0-0": 4.5}
    devices = {d.name: d for d in v.devices_document().devices}
    assert devices["spine-0-0"].agent == "unreachable" and devices["leaf-0-0"].agent == "reachable"


def test_damping_holds_a_flapping_part_down_longer_each_time() -> None:
    d, healthy = Damping(), lambda p: True
    part = frozenset({LINK})
    d.observe({LINK: 0.0}, frozenset(), healthy, 0.5)
    assert d.desired({LINK: 0.0}, frozenset(), POLICY, 0.5) == frozenset()  # not yet detect_s
    assert d.desired({LINK: 0.0}, frozenset(), POLICY, 1.0) == part
    d.observe({}, part, healthy, 2.0)  # back up at 2: held for hold_down_s
    assert d.desired({}, part, POLICY, 11.9) == part and d.desired({}, part, POLICY, 12.0) == frozenset()
    for t in (20.0, 40.0):  # two more flaps within the hour: 20 s, then 40 s of hold-down
        d.observe({LINK: t}, part, healthy, t)
        d.observe({}, part, healthy, t + 1)
    assert d.hold_s(LINK, 10.0) == 40.0
    assert d.desired({}, part, POLICY, 41.0 + 39.0) == part and d.desired({}, part, POLICY, 81.0) == frozenset()
    # a part in force whose health is not known (its agent unreachable) stays out
    d2 = Damping()
    d2.observe({}, part, lambda p: False, 100.0)
    assert d2.desired({}, part, POLICY, 10_000.0) == part


def test_the_overlay_intent_drains_the_parts_and_keeps_every_interface_and_address() -> None:
    pinned = carry(INTENT, allocate(INTENT).pins())
    out = overlay_intent(pinned, Overlay(frozenset({LINK}), frozenset({"tor-1-1"})))
    assert out.drained_links >= {LINK} and "tor-1-1" in out.drained_devices
    assert [ln.key for ln in out.links] == [ln.key for ln in INTENT.links]  # nothing removed, nothing renumbered
    assert device_configs(out)["leaf-0-0"].interfaces == tuple(
        replace(i, drained=i.name == "eth3") for i in device_configs(pinned)["leaf-0-0"].interfaces)
    plan = compile_plan(out)
    assert all(h.port != "eth3" for g in plan.devices["leaf-0-0"].groups.values() for h in g)  # carries nothing
    assert overlay_intent(INTENT, Overlay()) is INTENT
    twice = overlay_intent(out, Overlay(frozenset({LINK})))  # a part drained already is not drained twice
    assert sum(1 for p in twice.policies if p.kind == "drain") == 2
    # the oracle: the whole document with the drains added, validated again, is the same intent
    doc = INTENT.to_document()
    doc["policies"] += [{"kind": "drain", "target": "tor-1-1"}, {"kind": "drain", "target": LINK}]
    assert out == validate_intent(doc) and out.drained_devices == validate_intent(doc).drained_devices
    with pytest.raises(InvalidIntent) as bad:
        overlay_intent(INTENT, Overlay(frozenset({"leaf-0-0:eth99"}), frozenset({"nobody"})))
    assert [e.loc for e in bad.value.errors] == ["overlay.devices['nobody']", "overlay.links['leaf-0-0:eth99']"]


@pytest.mark.parametrize("parts", [Overlay(frozenset({LINK})), Overlay(devices=frozenset({"spine-0-0"}))])
def test_the_reaction_is_judged_by_the_replay(parts: Overlay) -> None:
    current = (INTENT, compile_plan(INTENT))
    reduced = overlay_intent(INTENT, parts)
    verdict = judge(current, parts, (reduced, compile_plan(reduced)))
    assert verdict.verdict == "safe" and verdict.commit
    assert verdict.reaction["dropped_gbps"] == 0 and verdict.reaction["loops"] == 0
    assert verdict.reaction["max_utilization"] <= 1.0


def test_what_a_device_said_before_the_intent_was_known_counts() -> None:
    """The first full set of a stream can arrive before the view knows its topology: ON_CHANGE never sends it
    again, so the view must keep it (a race that left every link unknown)."""
    v = OperationalView()
    for ln in INTENT.links:
        v.report_port(ln.a, ln.a_port, "UP", 0.0)
        v.report_port(ln.b, ln.b_port, "UP", 0.0)
    assert v.links_document(0.0).links == [] and v.devices_document().devices == []
    assert v.set_topology(INTENT, 1.0) == []  # no link.up event for a link seen up from the start
    assert {x.oper for x in v.links_document(1.0).links} == {"up"}
    assert {d.agent for d in v.devices_document().devices} == {"reachable"}


def test_an_agent_drops_its_dead_next_hops_and_keeps_the_rest_of_the_weights() -> None:
    """Kernel-local repair under ``fib``: the next hops over a port that is down go, the others keep their
    planned weights (the kernel renormalizes), a route left with none is withdrawn (the protocol's is used);
    with every port up the planned routes are back whole."""
    from southbound.device.frr_apply import live_fib
    from southbound.rendered import FibHop

    fib = {"10.0.0.0/24": (FibHop("eth1", "g1", 3), FibHop("eth2", "g1", 1)),
           "10.0.1.0/24": (FibHop("eth2", "g2", 5),)}
    assert live_fib(fib, frozenset({"eth2"})) == {"10.0.0.0/24": (FibHop("eth1", "g1", 3),)}
    assert live_fib(fib, frozenset()) == fib


def test_the_link_watcher_reads_at_once_when_the_kernel_says_a_link_changed(tmp_path: Any) -> None:
    """The watcher sleeps its whole interval unless the source's event socket wakes it (netlink's link
    notifications on a switch): a wake-up is read within the same moment, and a reading that changed no
    state keeps the snapshot the gNMI service serves (nothing for ON_CHANGE to compare)."""
    import asyncio
    import socket
    import time

    from southbound.device.opstate import DOWN, UP, LinkWatcher, OperSnapshot

    class Source:
        blocking, interval_s = False, 60.0

        def __init__(self) -> None:
            self.reads = 0
            self.state = UP
            self.ours, self.theirs = socket.socketpair()
            self.ours.setblocking(False)

        def read(self) -> OperSnapshot:
            self.reads += 1
            return OperSnapshot(time.time_ns(), {"eth1": {"oper-status": self.state, "admin-status": UP}})

        def events(self) -> socket.socket:
            return self.ours

    async def run() -> None:
        src = Source()
        seen: list[frozenset[str]] = []

        async def on_ports(down: frozenset[str]) -> None:
            seen.append(down)
        w = LinkWatcher(src, on_ports=on_ports)
        assert w.interval_s == 60.0
        await w.start()
        first = w.read()
        await asyncio.sleep(0.2)
        assert src.reads == 1  # no polling while nothing happens
        src.state = DOWN
        t0 = time.monotonic()
        src.theirs.send(b"x")
        while seen[-1:] != [frozenset({"eth1"})] and time.monotonic() - t0 < 5:
            await asyncio.sleep(0.01)
        assert seen == [frozenset(), frozenset({"eth1"})] and time.monotonic() - t0 < 1.0
        down = w.read()
        assert down is not first
        src.theirs.send(b"x")  # a notification that changed nothing: the same snapshot stays
        while src.reads < 3 and time.monotonic() - t0 < 5:
            await asyncio.sleep(0.01)
        assert src.reads == 3 and w.read() is down
        await w.stop()
        src.theirs.close()
    asyncio.run(run())


def test_a_dry_agent_scans_its_config_for_ports_only_when_it_changed(tmp_path: Any) -> None:
    from southbound.device.opstate import DOWN, UP, DryStatus

    text = {"v": "interface eth1\n!\ninterface eth2\n!\n"}
    st = DryStatus(lambda: text["v"], tmp_path / "down")
    snap = st.read()
    assert {p: v["oper-status"] for p, v in snap.interfaces.items()} == {"eth1": UP, "eth2": UP}
    (tmp_path / "down").write_text("eth2\n")
    assert st.read().interfaces["eth2"]["oper-status"] == DOWN
    text["v"] = "interface eth1\n!\ninterface eth3\n!\n"  # a port once configured stays, as in a kernel
    assert sorted(st.read().interfaces) == ["eth1", "eth2", "eth3"]
    (tmp_path / "down").unlink()
    assert {v["oper-status"] for v in st.read().interfaces.values()} == {UP}


def test_the_reaction_table_holds_one_revision_s_precomputed_plans_by_identity_and_normal_overlay() -> None:
    """Entries are found by what the revision plans as (two stores' revision 1 are not one), in the
    overlay's normal form (a failed device implies its links); a newer precomputation takes the table
    over and an older one can no longer write into it."""
    from controller.operations.overlay import intent_ends, normal
    from controller.operations.precompute import reaction_of
    from controller.operations.reaction import implied_links_out
    from controller.operations.table import ReactionTable

    spine_links = frozenset(ln.key for ln in INTENT.links if "spine-0-0" in (ln.a, ln.b))
    assert normal(Overlay(spine_links | {LINK}, frozenset({"spine-0-0"})), intent_ends(INTENT)) == \
        Overlay(frozenset({LINK}) - spine_links, frozenset({"spine-0-0"}))
    v = view_up()
    assert implied_links_out(frozenset({*spine_links, "device:spine-0-0", "tor-0-0:eth1"}), v) == \
        frozenset({"device:spine-0-0", "tor-0-0:eth1"})

    plan = compile_plan(INTENT)
    over = Overlay(frozenset({LINK}))
    got = reaction_of(INTENT, plan, over)
    assert got.judgement is not None and got.judgement.commit
    assert got.judgement == judge((INTENT, plan), over, (got.intent, got.plan))  # the same verdict as on failure
    t = ReactionTable()
    run = t.begin("rev-a", 1, 3)
    t.put("rev-a", over, got, run=run)
    assert t.get("rev-a", over) is got and t.get("rev-b", over) is None
    assert t.get("rev-a", Overlay(frozenset({"tor-0-0:eth1"}))) is None
    assert t.status("rev-a").model_dump(exclude_unset=True) == {
        "state": "building", "revision": 1, "scenarios": 3, "ready": 1, "failed": 0,
        "seconds": t.status("rev-a").seconds}
    # another store's revision: its own status
    assert t.status("rev-b", 7).model_dump(exclude_unset=True) == {"state": "idle", "revision": 7}
    again = t.begin("rev-a", 1, 3)  # the revision precomputed again (a new leader, say)
    t.put("rev-a", over, got, run=run)  # the older run, still going, writes nothing
    assert t.get("rev-a", over) is None and t.status("rev-a").ready == 0
    t.finish("rev-a", again)
    assert t.status("rev-a").state == "ready"


def test_the_plan_in_force_is_compiled_for_replay_once_per_revision_and_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    """A reaction judges its plan against the plan in force: the replayer of that plan is kept under the
    revision's identity and the plan's fingerprint, gives the very judgement a fresh one gives, and is never
    reused for another revision, another overlay in force or another plan of the same revision."""
    import controller.operations.reaction as mod
    from controller.operations.reaction import ReplayerCache, replay_key

    plan = compile_plan(INTENT)
    cache = ReplayerCache(size=8)
    for parts in (Overlay(frozenset({LINK})), Overlay(devices=frozenset({"spine-0-0"}))):
        reduced = overlay_intent(INTENT, parts)
        reaction = (reduced, compile_plan(reduced))
        fresh = judge((INTENT, plan), parts, reaction)
        with monkeypatch.context() as m:
            m.setattr(mod, "REPLAYERS", cache)
            assert judge((INTENT, plan), parts, reaction, key=replay_key("rev-a")) == fresh
    assert cache.built == 1  # two failures judged, the plan in force compiled once
    first = cache.get("rev-a", INTENT, plan)
    assert cache.built == 1 and first.topo is cache.get("rev-a", INTENT, plan).topo  # shared, scratch its own
    assert first._acc is not cache.get("rev-a", INTENT, plan)._acc
    cache.get("rev-b", INTENT, plan)  # another revision: its own
    assert cache.built == 2
    cache.get(replay_key("rev-a", Overlay(frozenset({LINK}))), INTENT, plan)  # another overlay in force
    assert cache.built == 3
    again = compile_plan(INTENT)  # the same revision compiled again: another plan, never taken for the first
    cache.get("rev-a", INTENT, again)
    assert cache.built == 4
    assert replay_key("rev-a") != replay_key("rev-a", Overlay(frozenset({LINK})))


def test_a_commit_s_read_back_is_abandoned_for_a_failure_its_intent_routes_over() -> None:
    """``Operations.failure_watch(intent)``: nothing while every link is up, or for a blip shorter than the
    reaction's ``detect_s``; a link down that long which the intent routes over is a reason; the same link in the
    intent's overlay (a reaction drains its failed parts), or behind a drained device, is none."""
    now = [0.0]
    rt: Any = SimpleNamespace(settings=SimpleNamespace(reaction_precompute_s=0.0))
    ops = Operations(rt, commit=None, clock=lambda: now[0])  # type: ignore[arg-type]
    ops.view = view_up()
    ops.live = True
    ops._topology = (1, INTENT, POLICY)
    watch = ops.failure_watch(INTENT)
    assert watch() is None
    a, port = LINK.split(":")
    ops.view.report_port(a, port, "DOWN", 10.0)
    now[0] = 10.5
    assert watch() is None  # down for 0.5 s: a blip, under detect_s
    now[0] = 11.2
    assert watch() == f"link {LINK} is down (for 1 s or more) and the plan routes over it"
    assert ops.failure_watch(overlay_intent(INTENT, Overlay(links=(LINK,))))() is None
    peer = next(ln.b if ln.a == a else ln.a for ln in INTENT.links if ln.key == LINK)
    assert ops.failure_watch(overlay_intent(INTENT, Overlay(devices=(peer,))))() is None
    ops.live = False
    assert watch() is None  # a follower's view is not the one in force

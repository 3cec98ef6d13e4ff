"""Static ``fib`` routes in a lab: a staged commit against a one-shot one, and a link failure against the replay.

**A drain, staged and not.** Draining ``b-d`` moves ``a`` off ``b`` (``a`` sends all
to ``c``) and turns ``b`` toward ``a``. In a one-shot commit both change at once,
in whatever order their agents happen to finish; where ``b`` goes first,
``a``'s share to ``b`` comes straight back: a loop until ``a`` moves. The
schedule commits ``a`` first (and on the way back ``b`` first), each stage read
back before the next. To make the race's bad outcome certain rather than
likely, one device's Commit is held back 0.6 s (a busy switch), the same in
both kinds of commit. UDP flows run through each commit and the lost ones are
counted: the scheduled commits lose none, the one-shot ones lose the flows
that loop while the late device has not moved.

**A failure.**
The square of ``test_transition.test_fib_routes_are_judged_static_after_a_failure``
as a real IS-IS lab with agents: ``a`` splits the demand to ``d``'s prefix over
``a-b-d`` and ``a-c-d`` with weighted static routes the agents install. Then
``b-d`` goes down. The kernel drops ``b``'s dead next hop, ``b`` falls back to
IS-IS, whose shortest path to ``d`` is back through ``a``, and ``a``'s static
route still hashes ``b``'s share of the flows to ``b``: those flows loop until
their TTL runs out. The replay's ``static`` model (the default under ``fib``)
says so: ``b``'s share is black-holed at once and loops once IS-IS has
reconverged. The ``routing`` model, which assumes the protocol reroutes
everything, said nothing was lost. UDP flows with distinct source ports (the
labs hash on L4) measure the lab's loss, before and after the failure.

**OSPF.** The same square runs under ``routing: ospf`` too (a lab of its own,
``fibospf``), for the failure against the replay, the failure reaction and the
adjacency state: everything there holds of OSPF as of IS-IS. The staged drain
and the killed agent are the routing's business only through the commits, and
run on IS-IS alone.
"""

from __future__ import annotations

import asyncio
import copy
import json
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest

from controller.model import Intent
from controller.model.intent import validate_intent
from controller.model.plan import Plan
from labs import runner
from safety.replay import replay
from safety.scenarios import Scenario
from safety.transition import schedule
from solver import solve
from southbound.driver import AgentDriver
from southbound.transaction import commit_plan
from tests.apps import Api, running_api
from tests.labkit import LabAgents, lab_up

pytestmark = pytest.mark.anyio
#: the lab of each link-state routing the square runs (an IS-IS one, and an OSPF one for fewer of the tests)
LABS = {"isis": "fibfail", "ospf": "fibospf"}
ROUTING = {lab: routing for routing, lab in LABS.items()}
PREFIX = "10.0.0.0/24"
FLOWS = 3000

RECEIVER = """
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, 33, 16 << 20)  # SO_RCVBUFFORCE: a burst must not overflow the socket
s.bind(("0.0.0.0", int(sys.argv[1])))
s.settimeout(float(sys.argv[2]))
expected = int(sys.argv[3]) if len(sys.argv) > 3 else 0  # every datagram sent has come: no need to wait for more
print("ready", flush=True)
n = 0
try:
    while not expected or n < expected:
        s.recv(2048)
        n += 1
        s.settimeout(1.5)  # the flows have ended once nothing came for that long
except socket.timeout:
    pass
print(n, flush=True)
"""

SENDER = """
import socket, sys
dst, first, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for p in range(first, first + count):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("0.0.0.0", p))
    s.sendto(b"loom-fib-failure", (dst, 5001))
    s.close()
"""


def square_doc(routing: str = "isis") -> dict:
    """``a`` to ``d`` two ways: via ``b`` on thin links (10 Gbps), via ``c`` on thick ones (20 Gbps) whose
    IS-IS metric (or OSPF cost) makes that way the longer; 12 Gbps from ``a``, more than either side of the thin
    way takes."""
    links = [{"a": "a", "a_port": "eth1", "b": "b", "b_port": "eth1", "capacity_gbps": 10, "metric": 10},
             {"a": "b", "a_port": "eth2", "b": "d", "b_port": "eth1", "capacity_gbps": 10, "metric": 10},
             {"a": "a", "a_port": "eth2", "b": "c", "b_port": "eth1", "capacity_gbps": 20, "metric": 10},
             {"a": "c", "a_port": "eth2", "b": "d", "b_port": "eth2", "capacity_gbps": 20, "metric": 20}]
    return {"name": LABS[routing], "routing": routing, "devices": [{"name": n} for n in "abcd"], "links": links,
            "prefixes": [{"prefix": PREFIX, "origins": ["d"]}],
            "demands": [{"from": "a", "to": PREFIX, "gbps": 12}],
            "policies": [{"kind": "paths", "mode": "loop_free"},
                         {"kind": "wcmp", "enabled": True, "realization": "fib"}]}


def doc_of(square: LabAgents) -> dict:
    return square_doc(ROUTING[square.lab])


@pytest.fixture(scope="module", params=list(LABS))
def square(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabAgents]:
    """The square under ``request.param``'s routing; a test for IS-IS alone says so
    (``@pytest.mark.parametrize("square", ["isis"], indirect=True)``)."""
    lab = LABS[request.param]
    base = tmp_path_factory.mktemp(lab)
    nodes: list[str] = []
    agents = LabAgents(lab, nodes)
    try:
        topo = lab_up(base, lab, square_doc(request.param))
        nodes += [n.name for n in topo.nodes]
        agents.start_all()
        yield agents
    finally:
        agents.stop_all()
        runner.down(lab, nodes or list("abcd"))


ISIS_ONLY = pytest.mark.parametrize("square", ["isis"], indirect=True)


def delivered(lab: str, flows: int, first_port: int) -> int:
    """Send ``flows`` one-datagram UDP flows from ``a`` to ``d``'s address in the prefix; how many ``d`` got."""
    recv = subprocess.Popen(["ip", "netns", "exec", runner.namespace(lab, "d"), sys.executable, "-c", RECEIVER,
                             "5001", "20", str(flows)], stdout=subprocess.PIPE, text=True)
    try:
        assert recv.stdout is not None and recv.stdout.readline().strip() == "ready"
        dst = PREFIX.replace(".0/24", ".1")  # d holds the prefix's .1 on its host port
        subprocess.run(["ip", "netns", "exec", runner.namespace(lab, "a"), sys.executable, "-c", SENDER, dst,
                        str(first_port), str(flows)], check=True, timeout=120)
        out, _ = recv.communicate(timeout=60)
        return int(out.strip().splitlines()[-1])
    finally:
        if recv.poll() is None:
            recv.kill()
            recv.wait(10)


STREAM = """
import socket, sys, time
dst, seconds, rate, flows = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
socks = []
for p in range(40000, 40000 + flows):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("0.0.0.0", p))
    socks.append(s)
t0, sent = time.monotonic(), 0
while time.monotonic() - t0 < seconds:
    while sent < (time.monotonic() - t0) * rate:
        socks[sent % flows].sendto(b"loom-stream", (dst, 5001))
        sent += 1
    time.sleep(0.002)
print(sent, flush=True)
"""


async def lost_during(lab: str, commit: Awaitable[None], *, seconds: float = 4.0, rate: float = 1500.0,
                      flows: int = 256) -> tuple[int, int]:
    """Run ``flows`` UDP flows from ``a`` to ``d`` at ``rate`` packets/s for ``seconds``, awaiting ``commit``
    one second in; (packets sent, packets lost)."""
    ns_a, ns_d = runner.namespace(lab, "a"), runner.namespace(lab, "d")
    recv = subprocess.Popen(["ip", "netns", "exec", ns_d, sys.executable, "-c", RECEIVER, "5001", "20"],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert recv.stdout is not None and recv.stdout.readline().strip() == "ready"
        dst = PREFIX.replace(".0/24", ".1")
        send = await asyncio.create_subprocess_exec("ip", "netns", "exec", ns_a, sys.executable, "-c", STREAM, dst,
                                                    str(seconds), str(rate), str(flows), stdout=subprocess.PIPE)
        await asyncio.sleep(1.0)
        await commit
        out, _ = await send.communicate()
        sent = int(out.decode().strip())
        got_text, _ = await asyncio.to_thread(recv.communicate, timeout=60)
        return sent, sent - int(got_text.strip().splitlines()[-1])
    finally:
        if recv.poll() is None:
            recv.kill()
            recv.wait(10)


def route_ports(lab: str, node: str, prefix: str) -> set[str]:
    """The ports of the route the kernel of ``node`` forwards ``prefix`` on (lowest metric)."""
    routes = runner.node_routes(lab, node, 6 if ":" in prefix else 4, dst=prefix)
    if not routes:
        return set()
    best = min(routes, key=lambda r: int(r.get("metric", 0)))
    return {h["dev"] for h in best.get("nexthops", [best])}


class LateDevice:
    """A driver whose Commit to ``late`` starts ``delay`` seconds after it is asked for; all else as is."""

    def __init__(self, driver: AgentDriver, late: str, delay: float = 0.6):
        self.driver, self.late, self.delay = driver, late, delay

    def __getattr__(self, name: str) -> object:
        return getattr(self.driver, name)

    async def commit(self, device: str, change: str, confirm_within: float) -> object:
        if device == self.late:
            await asyncio.sleep(self.delay)
        return await self.driver.commit(device, change, confirm_within)


def drained(doc: dict) -> dict:
    out = copy.deepcopy(doc)
    out["policies"].append({"kind": "drain", "target": "b:eth2"})
    return out


@ISIS_ONLY
async def test_a_staged_commit_loses_no_flow_where_a_one_shot_order_loops(square: LabAgents) -> None:
    base, drain = validate_intent(doc_of(square)), validate_intent(drained(doc_of(square)))
    p_base, p_drain = solve(base), solve(drain)
    assert [h.neighbor for h in p_drain.devices["a"].nexthops(PREFIX)] == ["c"]
    assert [h.neighbor for h in p_drain.devices["b"].nexthops(PREFIX)] == ["a"]
    to_drain = schedule(base, p_base, drain, p_drain).to_document()
    back = schedule(drain, p_drain, base, p_base).to_document()
    assert to_drain["safe"] and [s["devices"] for s in to_drain["stages"]] == [["a"], ["b"]]
    assert back["safe"] and [s["devices"] for s in back["stages"]] == [["b"], ["a"]]
    async with AgentDriver(square.endpoints(), timeout=20, commit_timeout=120) as drv:
        async def push(intent: Intent, plan: Plan, stages: list[list[str]] | None, late: str = "") -> None:
            r = await commit_plan(LateDevice(drv, late) if late else drv, intent, plan,  # type: ignore[arg-type]
                                  confirm_within=0, verify_timeout=45, verify_interval=0.1, stages=stages)
            assert r.ok, r.error

        await push(base, p_base, None)
        counts: dict[str, tuple[int, int]] = {}
        for label, intent, plan, stages, late in (
                ("scheduled drain (a, then b; a late)", drain, p_drain, [s["devices"] for s in to_drain["stages"]],
                 "a"),
                ("scheduled undrain (b, then a; b late)", base, p_base, [s["devices"] for s in back["stages"]], "b"),
                ("one-shot drain (a late)", drain, p_drain, None, "a"),
                ("one-shot undrain (b late)", base, p_base, None, "b")):
            counts[label] = await lost_during(square.lab, push(intent, plan, stages, late))
    report = "; ".join(f"{k}: lost {lost} of {sent}" for k, (sent, lost) in counts.items())
    print(report)
    for label, (sent, lost) in counts.items():
        assert sent > 3000, report
        if label.startswith("scheduled"):
            assert lost == 0, report
        else:  # b's share of the flows loops between a and b while the late device has not moved
            assert lost >= 20, report


async def test_a_failed_link_under_static_fib_routes_loses_what_the_replay_says(square: LabAgents) -> None:
    intent = validate_intent(doc_of(square))
    plan = solve(intent)
    a_hops = {h.neighbor: h.weight for h in plan.devices["a"].nexthops(PREFIX)}
    assert set(a_hops) == {"b", "c"}, a_hops
    async with AgentDriver(square.endpoints(), timeout=20, commit_timeout=120) as drv:
        r = await commit_plan(drv, intent, plan, confirm_within=0, verify_timeout=45)
    assert r.ok, r.error
    assert route_ports(square.lab, "a", PREFIX) == {"eth1", "eth2"}

    # the replay, before anything fails: what b-d going down costs under each model
    sc = Scenario("link:b:eth2", "link", frozenset(), frozenset({"b:eth2"}))
    static = replay(intent, plan, only=[sc]).scenarios[0]
    protocol = replay(intent, plan, only=[sc], model="routing").scenarios[0]
    demand = 12.0
    lost_share = static.immediate.dropped_gbps / demand  # b's share, black-holed until IS-IS reconverges...
    assert lost_share == pytest.approx(a_hops["b"] / sum(a_hops.values()), abs=1e-6)
    assert static.reconverged.loops and PREFIX in static.reconverged.loops[0]  # ...and looping after it
    assert protocol.reconverged.ok and protocol.reconverged.dropped_gbps == 0 and not protocol.reconverged.loops

    whole = delivered(square.lab, FLOWS, 20000)
    assert whole >= 0.99 * FLOWS, f"before the failure d got {whole} of {FLOWS}"

    runner.node_exec(square.lab, "b", ["ip", "link", "set", "eth2", "down"])
    deadline = time.monotonic() + 60
    while route_ports(square.lab, "b", PREFIX) != {"eth1"}:  # IS-IS has reconverged: b's way to d is back through a
        assert time.monotonic() < deadline, f"b still routes {PREFIX} on {route_ports(square.lab, 'b', PREFIX)}"
        time.sleep(0.2)
    assert route_ports(square.lab, "a", PREFIX) == {"eth1", "eth2"}  # a's static route still sends b its share
    got = delivered(square.lab, FLOWS, 30000)
    lab_lost = 1 - got / FLOWS
    # per-flow hashing puts each flow on one side: the loss is b's weighted share, within sampling noise
    assert abs(lab_lost - lost_share) < 0.06, \
        f"the lab lost {lab_lost:.3f} of the flows, the static replay {lost_share:.3f}, the protocol replay 0"
    print(f"static replay lost {lost_share:.3f}; lab lost {lab_lost:.3f} ({FLOWS - got} of {FLOWS} flows)")


def _committed_reactions(api: Api) -> list[dict]:
    items = api("GET", "/v1/changes?limit=100", role="viewer").json()["items"]
    return [c for c in items if c["kind"] == "reaction" and c["state"] == "committed"]


def _until(what: Callable[[], object], timeout: float, why: str, show: Callable[[], object] | None = None) -> object:
    deadline = time.monotonic() + timeout
    while not (got := what()):
        assert time.monotonic() < deadline, f"{why}: {show() if show is not None else ''}"
        time.sleep(0.05)
    return got


def test_the_controller_replans_around_a_failed_link_and_brings_the_plan_back(square: LabAgents,
                                                                                tmp_path: Path) -> None:
    """Issue 30: ``b-d`` goes down with nobody touching Loom. The leader sees it over gNMI, commits the plan
    without it (``a`` sends everything via ``c``) and every flow is delivered again; when the link comes
    back, the full plan returns after the hold-down, with ``b``'s and ``a``'s routes as planned (before,
    the kernel flushed Loom's routes with the interface and they never came back)."""
    runner.node_exec(square.lab, "b", ["ip", "link", "set", "eth2", "up"])  # the test before left it down
    doc = doc_of(square)
    doc["policies"].append({"kind": "failure_reaction", "detect_s": 0.5, "hold_down_s": 3})
    settings = {"agents": json.dumps(square.endpoints()), "drift_interval": 0, "verify_timeout": 45,
                "agent_commit_timeout": 120}
    with running_api(f"sqlite:///{tmp_path / 'loom.db'}", intent=doc, **settings) as api:
        assert api.initial()["state"] == "committed"
        _until(lambda: route_ports(square.lab, "a", PREFIX) == {"eth1", "eth2"}
               and route_ports(square.lab, "b", PREFIX) == {"eth2"},
               60, "the full plan is not in the kernels")
        _until(lambda: all(x["oper"] == "up" for x in api("GET", "/v1/state/links", role="viewer").json()["links"]),
               30, "the links are not all seen up", lambda: (api("GET", "/v1/state/links", role="viewer").json(),
                                                             api("GET", "/v1/state/devices", role="viewer").json()))
        assert delivered(square.lab, FLOWS, 21000) >= 0.99 * FLOWS

        t0 = time.monotonic()
        runner.node_exec(square.lab, "b", ["ip", "link", "set", "eth2", "down"])
        first = _until(lambda: _committed_reactions(api), 60, "no reaction was committed",  # type: ignore[index]
                       lambda: [(c["id"], c["state"], c["error"], (c.get("progress") or {}).get("devices"))
                                for c in api("GET", "/v1/changes?limit=5", role="viewer").json()["items"]])[0]
        _until(lambda: route_ports(square.lab, "a", PREFIX) == {"eth2"}, 30, "a still sends some of d's traffic to b")
        reacted = time.monotonic() - t0
        assert first["author"] == "failover" and first["overlay"]["links"] == ["b:eth2"]
        got = delivered(square.lab, FLOWS, 31000)
        assert got >= 0.99 * FLOWS, f"after the reaction d got {got} of {FLOWS}"

        t1 = time.monotonic()
        runner.node_exec(square.lab, "b", ["ip", "link", "set", "eth2", "up"])
        _until(lambda: len(_committed_reactions(api)) >= 2, 90, "the full plan did not return")
        _until(lambda: route_ports(square.lab, "a", PREFIX) == {"eth1", "eth2"}
               and route_ports(square.lab, "b", PREFIX) == {"eth2"},
               60, "the full plan's routes are not back in the kernels")
        back = time.monotonic() - t1
        assert api("GET", "/v1/plans/active", role="viewer").json()["overlay"] == {"links": [], "devices": []}
        got = delivered(square.lab, FLOWS, 41000)
        assert got >= 0.99 * FLOWS, f"after the link came back d got {got} of {FLOWS}"
        print(f"link down -> re-planned kernel weights: {reacted:.2f} s; link up -> full plan back: {back:.2f} s "
              "(hold-down 3 s)")


@ISIS_ONLY
def test_an_agent_killed_is_not_a_failure_and_a_failed_device_is_planned_around(square: LabAgents,
                                                                                  tmp_path: Path) -> None:
    """Issue 30's other two failures. ``c``'s agent is killed with its router running: its links are
    ``unknown`` (not down), the device is unreachable, and nothing is re-planned (an unreachable agent is
    not a failed link); traffic goes on. Then ``b`` fails whole (its links down, its agent gone): the leader
    sees a failed device, commits the plan without it (``overlay.devices == ["b"]``: its links are implied)
    without waiting for ``b``, and every flow is delivered via ``c``; when ``b`` is back (links up, agent
    restarted) the full plan returns after the hold-down, ``b`` included."""
    for node in "abcd":
        for port in ("eth1", "eth2"):
            subprocess.run(["ip", "netns", "exec", runner.namespace(square.lab, node), "ip", "link", "set", port, "up"],
                           capture_output=True)
    doc = doc_of(square)
    doc["policies"].append({"kind": "failure_reaction", "detect_s": 0.5, "hold_down_s": 3})
    settings = {"agents": json.dumps(square.endpoints()), "drift_interval": 0, "verify_timeout": 45,
                "agent_commit_timeout": 120}

    def links() -> dict[str, str]:
        return {x["id"]: x["oper"] for x in api("GET", "/v1/state/links", role="viewer").json()["links"]}

    def agents() -> dict[str, str]:
        return {d["name"]: d["agent"] for d in api("GET", "/v1/state/devices", role="viewer").json()["devices"]}

    def recent() -> list[tuple[int, str, str | None]]:
        items = api("GET", "/v1/changes?limit=5", role="viewer").json()["items"]
        return [(c["id"], c["state"], c["error"]) for c in items]

    with running_api(f"sqlite:///{tmp_path / 'loom.db'}", intent=doc, **settings) as api:
        assert api.initial()["state"] == "committed"
        _until(lambda: set(links().values()) == {"up"}, 30, "the links are not all seen up", links)
        _until(lambda: route_ports(square.lab, "a", PREFIX) == {"eth1", "eth2"}, 60,
               "the full plan is not in a's kernel")

        square.kill("c")
        try:
            _until(lambda: agents()["c"] == "unreachable", 15, "c's agent is not seen gone", agents)
            seen = links()
            assert seen["a:eth2"] == seen["c:eth2"] == "unknown" and seen["a:eth1"] == "up", seen
            time.sleep(3.0)  # six times detect_s
            assert _committed_reactions(api) == [] and links()["a:eth2"] == "unknown"
            assert delivered(square.lab, FLOWS, 51000) >= 0.99 * FLOWS
        finally:
            square.launch("c")
            square.wait("c")
        _until(lambda: agents()["c"] == "reachable" and set(links().values()) == {"up"}, 30, "c is not back", links)

        t0 = time.monotonic()
        for port in ("eth1", "eth2"):
            runner.node_exec(square.lab, "b", ["ip", "link", "set", port, "down"])
        square.kill("b")
        try:
            first = _until(lambda: _committed_reactions(api), 60, "no reaction to b's failure",  # type: ignore[index]
                           lambda: (agents(), links(), recent()))[0]
            _until(lambda: route_ports(square.lab, "a", PREFIX) == {"eth2"}, 30,
                   "a still sends some of d's traffic to b")
            reacted = time.monotonic() - t0
            assert first["overlay"] == {"links": [], "devices": ["b"]} and first["author"] == "failover"
            assert first["trigger"]["devices"] == ["b"]
            got = delivered(square.lab, FLOWS, 61000)
            assert got >= 0.99 * FLOWS, f"with b failed d got {got} of {FLOWS}"
        finally:
            for port in ("eth1", "eth2"):
                runner.node_exec(square.lab, "b", ["ip", "link", "set", port, "up"])
            square.launch("b")
            square.wait("b")
        t1 = time.monotonic()
        _until(lambda: len(_committed_reactions(api)) >= 2, 90, "the full plan did not return")
        _until(lambda: route_ports(square.lab, "a", PREFIX) == {"eth1", "eth2"}
               and route_ports(square.lab, "b", PREFIX) == {"eth2"},
               60, "the full plan's routes are not back in a's and b's kernels")
        back = time.monotonic() - t1
        assert api("GET", "/v1/plans/active", role="viewer").json()["overlay"] == {"links": [], "devices": []}
        got = delivered(square.lab, FLOWS, 62000)
        assert got >= 0.99 * FLOWS, f"with b back d got {got} of {FLOWS}"
        print(f"device b failed -> re-planned kernel weights: {reacted:.2f} s; b back -> full plan: {back:.2f} s")


def test_adjacencies_are_seen_through_the_api_going_down_with_a_link_and_back(square: LabAgents,
                                                                             tmp_path: Path) -> None:
    """Issue 30, item 1 (and issue 33's OSPF): IS-IS (OSPF) adjacency state over gNMI. Each agent reads isisd's
    adjacencies (ospfd's neighbors) and publishes them ON_CHANGE under OpenConfig's multi-key path (interface,
    level, system id; for OSPF area, interface, router id); ``/v1/state/devices`` counts them as the devices'
    sessions and lists them (``adjacencies``; ``ospf_adjacencies``). ``b-d`` goes down: the daemon forgets the
    adjacency, the agents keep it ``DOWN`` (its port still runs the protocol), and the API shows it down at
    both ends while the other adjacencies stay up (``UP``; ``FULL``); the link comes back and so does the
    adjacency, to the same neighbor. (No failure reaction here: a reaction would drain the link, and a
    drained port runs no IS-IS or OSPF.)"""
    isis = ROUTING[square.lab] == "isis"
    field, up_state, name = ("adjacencies", "UP", "IS-IS") if isis else ("ospf_adjacencies", "FULL", "OSPF")
    for node in "abcd":
        for port in ("eth1", "eth2"):
            subprocess.run(["ip", "netns", "exec", runner.namespace(square.lab, node), "ip", "link", "set", port, "up"],
                           capture_output=True)
    doc = doc_of(square)
    doc["policies"].append({"kind": "failure_reaction", "enabled": False})
    settings = {"agents": json.dumps(square.endpoints()), "drift_interval": 0, "verify_timeout": 45,
                "agent_commit_timeout": 120}

    def devices() -> dict[str, dict]:
        return {d["name"]: d for d in api("GET", "/v1/state/devices", role="viewer").json()["devices"]}

    def adjacencies() -> dict[tuple[str, str], tuple[str, str, str | None]]:
        """(device, port) -> (state, neighbor system or router id, link id), every adjacency the API lists."""
        return {(dev, a["port"]): (a["state"], a["neighbor"], a["link"])
                for dev, d in devices().items() for a in d[field]}

    def states() -> dict[tuple[str, str], str]:
        return {k: v[0] for k, v in adjacencies().items()}

    ends = {("a", "eth1"), ("a", "eth2"), ("b", "eth1"), ("b", "eth2"), ("c", "eth1"), ("c", "eth2"),
            ("d", "eth1"), ("d", "eth2")}
    with running_api(f"sqlite:///{tmp_path / 'loom.db'}", intent=doc, **settings) as api:
        assert api.initial()["state"] == "committed"
        _until(lambda: states() == dict.fromkeys(ends, up_state), 60, "the adjacencies are not all seen up",
               lambda: (adjacencies(), devices()))
        up = adjacencies()
        assert all(d["sessions"] == d["sessions_up"] == 2 for d in devices().values()), devices()
        assert up["b", "eth2"][2] == up["d", "eth1"][2] == "b:eth2"  # both ends name the link they run over
        assert up["d", "eth1"][1] == up["a", "eth1"][1] != up["b", "eth2"][1] == up["c", "eth2"][1]  # b's id, d's

        runner.node_exec(square.lab, "b", ["ip", "link", "set", "eth2", "down"])
        down = {("b", "eth2"), ("d", "eth1")}
        _until(lambda: states() == {k: "DOWN" if k in down else up_state for k in ends}, 30,
               "the adjacency over b-d is not seen down (and only it)", adjacencies)
        gone = adjacencies()
        assert gone["b", "eth2"][1] == up["b", "eth2"][1] and gone["d", "eth1"][1] == up["d", "eth1"][1]
        seen = devices()
        assert (seen["b"]["sessions_up"], seen["b"]["sessions"]) == (1, 2)
        assert (seen["d"]["sessions_up"], seen["d"]["sessions"]) == (1, 2)
        assert seen["a"]["sessions_up"] == 2

        runner.node_exec(square.lab, "b", ["ip", "link", "set", "eth2", "up"])
        _until(lambda: states() == dict.fromkeys(ends, up_state), 60, "the adjacency over b-d did not come back",
               adjacencies)
        assert adjacencies() == {k: (v[0], v[1], v[2]) for k, v in up.items()}  # the same neighbors again
        drift = api("GET", "/v1/drift?refresh=true", role="viewer").json()["devices"]
        assert {d: r["status"] for d, r in drift.items()} == dict.fromkeys("abcd", "ok"), drift

        # an adjacency down on a link whose ports are both up: b's eth2 takes no frame over 1400 bytes, and
        # isisd pads its hellos to the port's MTU (1500 on d), so b hears no hello from d while every port
        # stays up (ospfd refuses d's database description, whose MTU is over b's: stuck before FULL). Only
        # the adjacency says so, and drift reports it (after its grace).
        runner.node_exec(square.lab, "b", ["ip", "link", "set", "eth2", "mtu", "1400"])
        try:
            _until(lambda: states()["b", "eth2"] != up_state, 30, "b's adjacency to d stays up", adjacencies)
            links = {x["id"]: x["oper"] for x in api("GET", "/v1/state/links", role="viewer").json()["links"]}
            assert links["b:eth2"] == "up", links

            def drifted() -> list[str]:
                report = api("GET", "/v1/drift?refresh=true", role="viewer").json()["devices"]
                return [m for m in report["b"]["details"] if f"{name} adjacency on eth2" in m]
            why = _until(drifted, 40, "drift does not report b's adjacency to d",
                         lambda: api("GET", "/v1/drift", role="viewer").json())
            assert "while the link is up" in why[0], why  # type: ignore[index]
        finally:
            runner.node_exec(square.lab, "b", ["ip", "link", "set", "eth2", "mtu", "1500"])
        _until(lambda: states() == dict.fromkeys(ends, up_state), 60, "the adjacency over b-d did not come back",
               adjacencies)

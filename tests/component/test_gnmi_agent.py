"""gNMI on the device agent: pygnmi reads a Loom agent over mutual TLS; Loom's GnmiClient subscribes
(ONCE, POLL, STREAM SAMPLE and ON_CHANGE) over a unix socket; bad paths get gNMI's status codes; and in
network namespaces the kernel's interface counters and the agent's nftables prefix counters count real
traffic (lab)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import grpc
import pytest

from controller.model.errors import FatalDriverError
from controller.telemetry.stream import PATHS as STREAM_PATHS
from labs.traffic import SENDER, namespace_ipv6
from southbound.device.agent import AgentCore, serve
from southbound.device.counters import CounterSnapshot, NftTable, SyntheticCounters, fabric_ports
from southbound.device.frr_apply import DryFrr
from southbound.device.gnmi_server import GnmiOptions, GnmiService, add_gnmi_servicer
from southbound.gnmi import GnmiClient, Sample, SyncMarker, format_path, parse_path
from southbound.pki import ServerTls, init_ca, issue

pytestmark = [
    pytest.mark.anyio,
    # pygnmi's reader thread re-raises the CANCELLED that its own close() causes; it is reported later, elsewhere
    pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning"),
]

IF = "/interfaces/interface[name={}]/state/counters/{}"
AFT = "/network-instances/network-instance[name=default]/afts/ipv4-unicast/ipv4-entry[prefix={}]/state/counters/{}"
PREFIXES = ("10.0.0.0/24", "10.0.1.0/24")


def synthetic(**kw: Any) -> SyntheticCounters:
    return SyntheticCounters("leaf-1", seed=7, default_ports=("eth1", "eth2", "host0"), extra_prefixes=PREFIXES, **kw)


@asynccontextmanager
async def agent(tmp: Path, listen: str, *, counters: Any = None, tls: Any = None,
                options: GnmiOptions | None = None) -> AsyncIterator[str]:
    """A dry agent serving gNMI in process; yields its endpoint."""
    core = AgentCore(DryFrr(tmp / "dry"), tmp / "state", "leaf-1")
    stop, ready = asyncio.Event(), asyncio.Event()
    task = asyncio.create_task(serve(core, listen, tls=tls, ready=ready.set, stop=stop,
                                     counters=counters if counters is not None else synthetic(),
                                     gnmi_options=options or GnmiOptions(min_interval_s=0.05)))
    await asyncio.wait_for(ready.wait(), 10)
    try:
        yield listen if listen.startswith("unix:") else f"127.0.0.1:{core.port}"
    finally:
        stop.set()
        await task


@asynccontextmanager
async def client(tmp: Path, **kw: Any) -> AsyncIterator[GnmiClient]:
    async with agent(tmp, f"unix:{tmp / 'agent.sock'}", **kw) as endpoint, \
            GnmiClient("leaf-1", endpoint, timeout=5, max_attempts=1) as c:
        yield c


async def take(it: AsyncIterator[Sample | SyncMarker], n: int, timeout: float = 10) -> list[Sample | SyncMarker]:
    async def go() -> list[Sample | SyncMarker]:
        out = []
        async for x in it:
            out.append(x)
            if len(out) == n:
                break
        return out
    return await asyncio.wait_for(go(), timeout)


async def until_sync(it: AsyncIterator[Sample | SyncMarker], timeout: float = 10) -> list[Sample]:
    async def go() -> list[Sample]:
        out: list[Sample] = []
        async for x in it:
            if isinstance(x, SyncMarker):
                return out
            out.append(x)
        raise AssertionError("stream ended before its sync_response")
    return await asyncio.wait_for(go(), timeout)


# -- paths --------------------------------------------------------------------------------------------------
@pytest.mark.unit
def test_paths_round_trip_with_slashes_in_keys() -> None:
    for p in (IF.format("eth1", "in-octets"), AFT.format("10.0.0.0/24", "packets-forwarded"), "/interfaces",
              "/interfaces/interface[name=*]"):
        assert format_path(parse_path(p)) == p
    assert parse_path("interfaces/interface[name=a\\]b]") == (("interfaces", ()), ("interface", (("name", "a]b"),)))
    assert format_path(parse_path("/")) == "/"


@pytest.mark.unit
def test_fabric_ports_come_from_the_running_config() -> None:
    text = Path(__file__).resolve().parents[1].joinpath("golden", "frr", "clos3-tor-0-0.conf").read_text()
    assert fabric_ports(text) == {"eth1", "eth2"}
    assert fabric_ports("") == frozenset()


@pytest.mark.unit
def test_synthetic_counters_grow_at_their_rates_and_are_cheap() -> None:
    now = [10**18]
    src = synthetic(clock=lambda: now[0], start=10**18)
    a = src.read()
    now[0] += 10 * 10**9
    b = src.read()
    assert set(b.interfaces) == {"eth1", "eth2", "host0"} and set(b.prefixes) == set(PREFIXES)
    rate = src.rate("in", "eth1")
    assert b.interfaces["eth1"]["in-octets"] - a.interfaces["eth1"]["in-octets"] == int(rate * 10)
    assert synthetic(clock=lambda: now[0], start=10**18).read() == b  # deterministic from the seed
    many = [SyntheticCounters(f"d{i}", extra_prefixes=PREFIXES) for i in range(1000)]
    t0 = time.perf_counter()
    for s in many:
        s.read()
    assert time.perf_counter() - t0 < 1.0  # 1,000 dry agents' samples: far below 10 s of one core


# -- an outside client: pygnmi over mutual TLS -----------------------------------------------------------------
def test_pygnmi_reads_a_loom_agent_over_mutual_tls(tmp_path: Path) -> None:
    from pygnmi.client import gNMIclient

    ca = tmp_path / "ca"
    init_ca(ca)
    issue(ca, "leaf-1", kind="server")
    issue(ca, "controller", kind="client")
    tls = ServerTls(ca / "leaf-1.crt", ca / "leaf-1.key", ca / "ca.crt")

    def read(port: int) -> tuple[Any, Any, list[Any]]:
        with gNMIclient(target=("127.0.0.1", port), path_cert=str(ca / "controller.crt"),
                        path_key=str(ca / "controller.key"), path_root=str(ca / "ca.crt"), gnmi_timeout=5) as gc:
            caps = gc.capabilities()
            got = gc.get(path=["/interfaces/interface[name=eth1]/state/counters",
                               AFT.format("10.0.0.0/24", "octets-forwarded")])
            sub = gc.subscribe2(subscribe={"mode": "stream", "encoding": "json", "subscription": [
                {"path": "/interfaces/interface[name=*]/state/counters/in-octets", "mode": "sample",
                 "sample_interval": 200_000_000}]})
            try:
                updates = [sub.get_update(timeout=5) for _ in range(3)]
            finally:
                sub.close()
            return caps, got, updates

    async def run() -> tuple[Any, Any, list[Any]]:
        async with agent(tmp_path, "127.0.0.1:0", tls=tls) as endpoint:
            return await asyncio.to_thread(read, int(endpoint.rsplit(":", 1)[1]))

    caps, got, updates = asyncio.run(run())
    assert {m["name"] for m in caps["supported_models"]} == {"openconfig-interfaces", "openconfig-network-instance"}
    assert set(caps["supported_encodings"]) == {"json", "json_ietf", "proto"} and caps["gnmi_version"] == "0.8.0"
    leaves = {(n["prefix"], u["path"]): u["val"] for n in got["notification"] for u in n["update"]}
    assert leaves[("interfaces/interface[name=eth1]/state/counters", "in-octets")] > 0
    assert len([k for k in leaves if k[0].startswith("interfaces")]) == 6
    aft = "network-instances/network-instance[name=default]/afts/ipv4-unicast/ipv4-entry[prefix=10.0.0.0/24]/" \
          "state/counters"
    assert leaves[(aft, "octets-forwarded")] >= 0
    first = updates[0]["update"]  # coalesced until sync_response: every port's in-octets
    assert len(first["update"]) == 3
    later = [u["update"] for u in updates[1:]]
    assert all(u["timestamp"] > first["timestamp"] for u in later)


# -- Loom's client over a unix socket ---------------------------------------------------------------------------
async def test_get_wildcards_and_subtrees(tmp_path: Path) -> None:
    async with client(tmp_path) as c:
        caps = await c.capabilities()
        assert caps.version == "0.8.0" and "PROTO" in caps.encodings
        one = await c.get([IF.format("eth1", "in-octets")])
        assert [(s.device, s.path) for s in one] == [("leaf-1", IF.format("eth1", "in-octets"))]
        assert one[0].value > 0 and one[0].timestamp_ns > 0
        ports = await c.get(["/interfaces/interface[name=*]/state/counters/out-pkts"])
        assert {s.path for s in ports} == {IF.format(p, "out-pkts") for p in ("eth1", "eth2", "host0")}
        assert len(await c.get(["/interfaces"])) == 18
        assert {s.path for s in await c.get(["/network-instances"])} == {
            AFT.format(p, leaf) for p in PREFIXES for leaf in ("octets-forwarded", "packets-forwarded")}
        assert len(await c.get(["/"])) == 18 + 4


async def test_once_poll_and_stream_sample(tmp_path: Path) -> None:
    path = "/interfaces/interface[name=*]/state/counters/in-octets"
    async with client(tmp_path) as c:
        once = [x async for x in c.subscribe([path], once=True)]
        assert isinstance(once[-1], SyncMarker) and len(once) == 4
        async with c.poller([path, AFT.format("10.0.1.0/24", "packets-forwarded")]) as p:
            first = await p.poll()
            await asyncio.sleep(0.1)
            second = await p.poll()
        assert len(first) == len(second) == 4
        assert all(b.timestamp_ns > a.timestamp_ns and b.value >= a.value
                   for a, b in zip(sorted(first), sorted(second), strict=True))
        stream = c.subscribe([IF.format("eth2", "out-octets")], "sample", interval_s=0.1)
        got = await take(stream, 4)
        await stream.aclose()  # type: ignore[attr-defined]
        assert isinstance(got[1], SyncMarker)
        s = [x for x in got if isinstance(x, Sample)]
        assert [x.path for x in s] == [IF.format("eth2", "out-octets")] * 3
        assert all(b.value >= a.value and b.timestamp_ns > a.timestamp_ns for a, b in zip(s, s[1:], strict=False))
        target_defined = c.subscribe(["/network-instances"], "target_defined", interval_s=0.1)
        assert len(await until_sync(target_defined)) == 4
        await target_defined.aclose()  # type: ignore[attr-defined]


class Stepped:
    """Counters that change only when told: ON_CHANGE must send what changed, and only that."""

    blocking = False

    def __init__(self) -> None:
        self.values = {"eth1": 100, "eth2": 200}

    def read(self) -> CounterSnapshot:
        return CounterSnapshot(time.time_ns(), {p: {"in-octets": v, "out-octets": 0} for p, v in self.values.items()})


async def test_on_change_sends_changes_only(tmp_path: Path) -> None:
    src = Stepped()
    opts = GnmiOptions(on_change_check_s=0.05, min_interval_s=0.01)
    async with client(tmp_path, counters=src, options=opts) as c:
        stream = c.subscribe(["/interfaces/interface[name=*]/state/counters"], "on_change")
        initial = await until_sync(stream)
        assert {(x.path, x.value) for x in initial} >= {(IF.format("eth1", "in-octets"), 100),
                                                        (IF.format("eth2", "in-octets"), 200)}
        src.values["eth2"] = 250
        [change] = await take(stream, 1)
        assert isinstance(change, Sample) and (change.path, change.value) == (IF.format("eth2", "in-octets"), 250)
        src.values["eth1"] = 111
        [change] = await take(stream, 1)
        assert isinstance(change, Sample) and (change.path, change.value) == (IF.format("eth1", "in-octets"), 111)
        await stream.aclose()  # type: ignore[attr-defined]


# -- IPv6 AFT entries ----------------------------------------------------------------------------------------------
V6 = ("2001:db8::/64", "2001:db8:1::/64")
AFT6_ = "/network-instances/network-instance[name=default]/afts/ipv6-unicast/ipv6-entry[prefix={}]/state/counters/{}"
LEAVES = ("octets-forwarded", "packets-forwarded")


@pytest.mark.unit
def test_config_prefixes_of_both_families_are_canonical() -> None:
    from southbound.device.counters import config_prefixes

    text = ("router bgp 65001\n address-family ipv4 unicast\n  network 10.0.0.0/24\n exit-address-family\n"
            " address-family ipv6 unicast\n  network 2001:DB8:0::/64\n exit-address-family\n"
            "ip prefix-list L seq 5 permit 10.0.1.0/24\nipv6 prefix-list L6 seq 5 permit 2001:db8:1:0::/64\n")
    assert config_prefixes(text, ["2001:db8:2::/64"]) == ("10.0.0.0/24", "10.0.1.0/24", "2001:db8::/64",
                                                            "2001:db8:1::/64", "2001:db8:2::/64")


async def test_ipv6_entries_are_served_beside_ipv4_ones(tmp_path: Path) -> None:
    # a clock that stands still until the streaming part, so that two reads of one counter agree however far
    # apart a loaded machine runs them
    src = SyntheticCounters("leaf-1", seed=7, default_ports=("eth1",), extra_prefixes=PREFIXES + V6,
                            clock=lambda: 10**18, start=10**18 - 10**10)
    async with client(tmp_path, counters=src) as c:
        got = {s.path: s.value for s in await c.get(["/network-instances"])}
        assert set(got) == {AFT.format(p, leaf) for p in PREFIXES for leaf in LEAVES} | {
            AFT6_.format(p, leaf) for p in V6 for leaf in LEAVES}
        v6 = await c.get(["/network-instances/network-instance[name=default]/afts/ipv6-unicast"])
        assert {s.path for s in v6} == {AFT6_.format(p, leaf) for p in V6 for leaf in LEAVES}
        v4 = await c.get(["/network-instances/network-instance[name=default]/afts/ipv4-unicast/ipv4-entry[prefix=*]"])
        assert {s.path for s in v4} == {AFT.format(p, leaf) for p in PREFIXES for leaf in LEAVES}
        # any spelling of a prefix names its canonical entry, which is what the reply names
        [one] = await c.get([AFT6_.format("2001:DB8:0:0::/64", "octets-forwarded")])
        assert one.path == AFT6_.format("2001:db8::/64", "octets-forwarded") and one.value == got[one.path]
        once = [x async for x in c.subscribe([AFT6_.format("*", "packets-forwarded")], once=True)]
        assert isinstance(once[-1], SyncMarker)
        assert {x.path for x in once if isinstance(x, Sample)} == {AFT6_.format(p, "packets-forwarded") for p in V6}
        collected = [x async for x in c.subscribe(list(STREAM_PATHS), once=True)]  # what the collector asks for
        assert {x.path for x in collected if isinstance(x, Sample) and "/afts/" in x.path} == set(got)
        src.clock, src.start = time.time_ns, time.time_ns() - 10**10  # from here on, the machine's clock
        stream = c.subscribe([AFT6_.format("2001:db8:1::/64", "octets-forwarded")], "sample", interval_s=0.1)
        samples = [x for x in await take(stream, 3) if isinstance(x, Sample)]
        await stream.aclose()  # type: ignore[attr-defined]
        assert [x.path for x in samples] == [AFT6_.format("2001:db8:1::/64", "octets-forwarded")] * 2
        assert samples[1].value > samples[0].value

        async def code_of(path: str) -> str:
            with pytest.raises(FatalDriverError) as exc:
                await c.get([path])
            return exc.value.text.split(":", 1)[0]

        assert await code_of(AFT6_.format("2001:db8::1/64", "octets-forwarded")) == "INVALID_ARGUMENT"  # host bits
        assert await code_of(AFT.format("2001:db8::/64", "octets-forwarded")) == "INVALID_ARGUMENT"  # wrong family
        assert await code_of(AFT6_.format("10.0.0.0/24", "octets-forwarded")) == "INVALID_ARGUMENT"
        assert await code_of(AFT6_.format("2001:db8:9::/64", "octets-forwarded")) == "NOT_FOUND"
        assert await code_of("/network-instances/network-instance[name=default]/afts/ipv6-unicast/"
                             "ipv4-entry[prefix=*]") == "NOT_FOUND"


# -- errors ------------------------------------------------------------------------------------------------------
async def test_bad_paths_get_gnmi_status_codes(tmp_path: Path) -> None:
    from pygnmi.spec.v080 import gnmi_pb2 as pb  # the test speaks the wire directly for encodings
    from pygnmi.spec.v080 import gnmi_pb2_grpc as pb_grpc

    async def code_of(call: Callable[[], Awaitable[Any]]) -> str:
        with pytest.raises(FatalDriverError) as exc:
            await call()
        return exc.value.text.split(":", 1)[0]

    async with client(tmp_path) as c:
        assert await code_of(lambda: c.get(["/system/state/hostname"])) == "NOT_FOUND"
        assert await code_of(lambda: c.get([IF.format("eth1", "bogus")])) == "NOT_FOUND"
        assert await code_of(lambda: c.get([IF.format("eth9", "in-octets")])) == "NOT_FOUND"
        assert await code_of(lambda: c.get(["/interfaces/interface[ifname=eth1]"])) == "NOT_FOUND"
        assert await code_of(lambda: c.get([
            "/network-instances/network-instance[name=red]/afts"])) == "NOT_FOUND"
        assert await code_of(lambda: c.get([AFT.format("10.0.0.1/24", "octets-forwarded")])) == "INVALID_ARGUMENT"
        assert await code_of(lambda: take(c.subscribe(["/nowhere"]), 1)) == "NOT_FOUND"

        stub = pb_grpc.gNMIStub(c._channel)
        path = pb.Path(elem=[pb.PathElem(name="interfaces")])
        for req, code in ((pb.GetRequest(path=[path], encoding=pb.ASCII), grpc.StatusCode.UNIMPLEMENTED),
                          (pb.GetRequest(path=[pb.Path(elem=[pb.PathElem(name="")])]),
                           grpc.StatusCode.INVALID_ARGUMENT)):
            with pytest.raises(grpc.aio.AioRpcError) as exc:
                await stub.Get(req, timeout=5)
            assert exc.value.code() == code
        call = stub.Subscribe(iter([pb.SubscribeRequest(poll=pb.Poll())]))
        with pytest.raises(grpc.aio.AioRpcError) as exc:
            await call.read()
        assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        with pytest.raises(grpc.aio.AioRpcError) as exc:
            await stub.Set(pb.SetRequest(), timeout=5)
        assert exc.value.code() == grpc.StatusCode.UNIMPLEMENTED


async def test_dry_agent_serves_the_synthetic_source_of_its_config(tmp_path: Path) -> None:
    core = AgentCore(DryFrr(tmp_path / "dry"), tmp_path / "state", "tor-0-0")
    from southbound.device.agent import default_counters
    await core.start()
    text = Path(__file__).resolve().parents[1].joinpath("golden", "frr", "clos3-tor-0-0.conf").read_text()
    (tmp_path / "dry" / "frr.conf").parent.mkdir(parents=True, exist_ok=True)
    from southbound.rendered import Rendered
    core.running = Rendered("tor-0-0", text)
    snap = default_counters(core).read()
    assert set(snap.interfaces) == {"eth1", "eth2", "host0"} and set(snap.prefixes) == {"10.0.0.0/24"}


# -- lab: real counters in network namespaces ---------------------------------------------------------------------
NS = ("loomgn-h", "loomgn-r", "loomgn-d")


def sh(*cmd: str) -> str:
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def ns(name: str, *cmd: str) -> str:
    return sh("ip", "netns", "exec", name, *cmd)


@pytest.fixture
def three_namespaces() -> Iterator[None]:
    """host h --(h0 | r-host)-- router r --(r-fab | d0)-- far side d. r forwards 10.9.0.0/24 to d
    (a host destination) and 10.8.0.0/24 to h (reached from d: it enters r on its fabric port); and the
    same in IPv6: 2001:db8:9::/64 to d, 2001:db8:8::/64 to h."""
    if shutil.which("nft") is None:
        pytest.skip("nftables is not installed (apt-get install nftables)")

    def cleanup() -> None:
        for n in NS:
            subprocess.run(["ip", "netns", "del", n], capture_output=True)

    cleanup()
    try:
        for n in NS:
            sh("ip", "netns", "add", n)
            ns(n, "ip", "link", "set", "lo", "up")
            for conf in ("all", "default"):  # before the veths exist: no duplicate address detection to wait for
                ns(n, "sysctl", "-qw", f"net.ipv6.conf.{conf}.disable_ipv6=0", f"net.ipv6.conf.{conf}.accept_dad=0")
        sh("ip", "link", "add", "h0", "netns", "loomgn-h", "type", "veth", "peer", "r-host", "netns", "loomgn-r")
        sh("ip", "link", "add", "r-fab", "netns", "loomgn-r", "type", "veth", "peer", "d0", "netns", "loomgn-d")
        for n, dev, addrs in (("loomgn-h", "h0", ("192.168.1.2/24", "10.8.0.5/24", "fd00:1::2/64", "2001:db8:8::5/64")),
                              ("loomgn-r", "r-host", ("192.168.1.1/24", "fd00:1::1/64")),
                              ("loomgn-r", "r-fab", ("192.168.2.1/24", "fd00:2::1/64")),
                              ("loomgn-d", "d0", ("192.168.2.2/24", "10.9.0.5/24", "10.9.0.200/32", "fd00:2::2/64",
                                                  "2001:db8:9::5/64", "2001:db8:9:0:8000::200/128"))):
            for a in addrs:
                ns(n, "ip", "addr", "add", a, "dev", dev)
            ns(n, "ip", "link", "set", dev, "up")
        ns("loomgn-r", "sysctl", "-qw", "net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1")
        ns("loomgn-h", "ip", "route", "add", "default", "via", "192.168.1.1")
        ns("loomgn-d", "ip", "route", "add", "default", "via", "192.168.2.1")
        ns("loomgn-r", "ip", "route", "add", "10.9.0.0/24", "via", "192.168.2.2", "proto", "static")
        ns("loomgn-r", "ip", "route", "add", "10.8.0.0/24", "via", "192.168.1.2", "proto", "static")
        ns("loomgn-h", "ip", "-6", "route", "add", "default", "via", "fd00:1::1")
        ns("loomgn-d", "ip", "-6", "route", "add", "default", "via", "fd00:2::1")
        ns("loomgn-r", "ip", "-6", "route", "add", "2001:db8:9::/64", "via", "fd00:2::2", "proto", "static")
        ns("loomgn-r", "ip", "-6", "route", "add", "2001:db8:8::/64", "via", "fd00:1::2", "proto", "static")
        yield
    finally:
        cleanup()


AGENT = """
import asyncio, sys
from pathlib import Path
from southbound.device.agent import AgentCore, serve
from southbound.device.counters import KernelCounters
from southbound.device.frr_apply import DryFrr
from southbound.device.gnmi_server import GnmiOptions
tmp = Path(sys.argv[1])
core = AgentCore(DryFrr(tmp / "dry"), tmp / "state", "r")
asyncio.run(serve(core, f"unix:{tmp / 'agent.sock'}", counters=KernelCounters(lambda: frozenset({"r-fab"})),
                  gnmi_options=GnmiOptions(share_s=0.0)))
"""


@asynccontextmanager
async def _namespace_agent(tmp_path: Path) -> AsyncIterator[GnmiClient]:
    """An agent of real counters in namespace ``loomgn-r`` (:data:`AGENT`), a gNMI client on it; the agent
    stopped and its nftables tables (both families) deleted after."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.Popen(["ip", "netns", "exec", "loomgn-r", sys.executable, "-c", AGENT, str(tmp_path)], env=env)
    try:
        for _ in range(100):
            if (tmp_path / "agent.sock").exists():
                break
            await asyncio.sleep(0.1)
        async with GnmiClient("r", f"unix:{tmp_path / 'agent.sock'}", timeout=10, max_attempts=1) as c:
            yield c
    finally:
        proc.terminate()
        proc.wait(10)
        for family in ("ip", "ip6"):
            subprocess.run(["ip", "netns", "exec", "loomgn-r", "nft", "delete", "table", family, NftTable().name],
                           capture_output=True)


@pytest.mark.lab
async def test_kernel_and_nft_counters_count_real_traffic(tmp_path: Path, three_namespaces: None) -> None:
    async with _namespace_agent(tmp_path) as c:
        async def counters() -> dict[str, int]:
            return {s.path: s.value for s in await c.get(["/"])}

        before = await counters()
        assert AFT.format("10.9.0.0/24", "packets-forwarded") in before
        assert AFT.format("192.168.1.0/24", "packets-forwarded") not in before  # connected: not a destination
        n = 200
        await asyncio.to_thread(ns, "loomgn-h", "ping", "-q", "-f", "-c", str(n), "10.9.0.5")
        await asyncio.to_thread(ns, "loomgn-d", "ping", "-q", "-f", "-c", str(n), "10.8.0.5")  # enters on fabric
        t0 = time.perf_counter()
        after = await counters()
        print(f"one Get of every counter, kernel source: {1000 * (time.perf_counter() - t0):.1f} ms")

        def grew(path: str) -> int:
            return after[path] - before.get(path, 0)

        assert grew(AFT.format("10.9.0.0/24", "packets-forwarded")) == n
        assert grew(AFT.format("10.9.0.0/24", "octets-forwarded")) == n * 84  # IPv4 length of a 56-byte ping
        assert grew(AFT.format("10.8.0.0/24", "packets-forwarded")) == 0  # not from a host-facing port
        # the kernel counts frames: 98 bytes per echo request (14 + 84), a few ARPs beside
        assert 2 * n * 98 <= grew(IF.format("r-host", "in-octets")) <= 2 * n * 98 + 2000
        assert n <= grew(IF.format("r-fab", "out-pkts")) - n <= n + 20

        # a new FIB prefix gets a rule, before the shorter one (longest match); the others keep their counts
        await asyncio.to_thread(ns, "loomgn-r", "ip", "route", "add", "10.9.0.128/25", "via", "192.168.2.2",
                                "proto", "static")
        third = await counters()
        assert third[AFT.format("10.9.0.128/25", "packets-forwarded")] == 0
        assert third[AFT.format("10.9.0.0/24", "packets-forwarded")] == after[AFT.format("10.9.0.0/24",
                                                                                        "packets-forwarded")]
        await asyncio.to_thread(ns, "loomgn-h", "ping", "-q", "-f", "-c", "10", "10.9.0.200")
        last = await counters()
        assert last[AFT.format("10.9.0.128/25", "packets-forwarded")] == 10
        assert last[AFT.format("10.9.0.0/24", "packets-forwarded")] == third[AFT.format("10.9.0.0/24",
                                                                                       "packets-forwarded")]


AFT6 = "/network-instances/network-instance[name=default]/afts/ipv6-unicast/ipv6-entry[prefix={}]/state/counters/{}"


@pytest.mark.lab
async def test_nft_ip6_rules_count_ipv6_traffic_beside_ipv4(tmp_path: Path, three_namespaces: None) -> None:
    """The ``ip6`` table counts what hosts send to each IPv6 prefix (the IPv6 packet, header included),
    longest match first, and nothing that enters on the fabric port; the IPv4 table counts on beside it."""
    async with _namespace_agent(tmp_path) as c:
        async def counters() -> dict[str, int]:
            return {s.path: s.value for s in await c.get(["/"])}

        before = await counters()
        assert AFT6.format("2001:db8:9::/64", "packets-forwarded") in before
        assert AFT.format("10.9.0.0/24", "packets-forwarded") in before
        assert not [p for p in before if "fd00:" in p or "fe80:" in p]  # connected: not destinations
        n = 200
        await asyncio.to_thread(ns, "loomgn-h", "ping", "-6", "-q", "-f", "-c", str(n), "2001:db8:9::5")
        # from d's link address: the host's replies then go to a connected prefix, which is not counted
        await asyncio.to_thread(ns, "loomgn-d", "ping", "-6", "-q", "-f", "-c", str(n), "-I", "fd00:2::2",
                                "2001:db8:8::5")
        await asyncio.to_thread(ns, "loomgn-h", "ping", "-q", "-f", "-c", "20", "10.9.0.5")
        after = await counters()

        def grew(path: str) -> int:
            return after[path] - before.get(path, 0)

        assert grew(AFT6.format("2001:db8:9::/64", "packets-forwarded")) == n
        assert grew(AFT6.format("2001:db8:9::/64", "octets-forwarded")) == n * 104  # 40 + 8 + 56 bytes
        assert grew(AFT6.format("2001:db8:8::/64", "packets-forwarded")) == 0  # entered on the fabric port
        assert grew(AFT.format("10.9.0.0/24", "packets-forwarded")) == 20  # IPv4 unchanged beside it

        # lab traffic's sender over IPv6 from the host: every byte it sent is counted, IP header included
        spec = tmp_path / "spec.json"
        spec.write_text(json.dumps({"start_at": 0, "duration": 0.5, "packet_bytes": 1000, "streams": [
            {"demand": 0, "bps": 8e6, "flows": [["2001:db8:9::5", 40000 + k] for k in range(4)]}]}))
        sent = json.loads(await asyncio.to_thread(ns, "loomgn-h", sys.executable, str(SENDER), str(spec)))
        udp = await counters()
        assert sent["streams"][0]["errors"] == 0 and sent["streams"][0]["bytes"] == 500 * 1000
        assert udp[AFT6.format("2001:db8:9::/64", "octets-forwarded")] - after[
            AFT6.format("2001:db8:9::/64", "octets-forwarded")] == sent["streams"][0]["bytes"]
        assert namespace_ipv6("loomgn-r", "r-host") == ("fd00:1::1", "fd00:1::/64")  # what lab_hosts reads
        assert namespace_ipv6("loomgn-r", "lo") is None

        # a longer IPv6 prefix gets its rule before the /64's; the /64 keeps its count
        await asyncio.to_thread(ns, "loomgn-r", "ip", "-6", "route", "add", "2001:db8:9:0:8000::/65",
                                "via", "fd00:2::2", "proto", "static")
        third = await counters()
        assert third[AFT6.format("2001:db8:9:0:8000::/65", "packets-forwarded")] == 0
        await asyncio.to_thread(ns, "loomgn-h", "ping", "-6", "-q", "-f", "-c", "10", "2001:db8:9:0:8000::200")
        last = await counters()
        assert last[AFT6.format("2001:db8:9:0:8000::/65", "packets-forwarded")] == 10
        assert last[AFT6.format("2001:db8:9::/64", "packets-forwarded")] == third[
            AFT6.format("2001:db8:9::/64", "packets-forwarded")]


class Failing:
    blocking = True

    def read(self) -> CounterSnapshot:
        raise OSError("netlink is gone")


async def test_a_failing_source_is_unavailable_not_a_crash(tmp_path: Path) -> None:
    from controller.model.errors import RetryableDriverError

    async with client(tmp_path, counters=Failing()) as c:
        with pytest.raises(RetryableDriverError, match="UNAVAILABLE"):
            await c.get(["/interfaces"])
        assert (await c.capabilities()).version == "0.8.0"


def test_without_nftables_a_switch_serves_interface_counters_only() -> None:
    from southbound.device.counters import KernelCounters

    snap = KernelCounters(table=NftTable(nft="/bin/false")).read()  # reads this namespace's links, writes nothing
    assert snap.interfaces and not snap.prefixes


async def test_suppress_redundant_with_a_heartbeat(tmp_path: Path) -> None:
    src = Stepped()
    async with client(tmp_path, counters=src, options=GnmiOptions(min_interval_s=0.01, share_s=0.0)) as c:
        stream = c.subscribe([IF.format("eth1", "in-octets")], "sample", interval_s=0.05, suppress_redundant=True,
                             heartbeat_s=1.0)
        assert [x.value for x in await until_sync(stream)] == [100]
        t0 = time.monotonic()
        [beat] = await take(stream, 1)  # nothing changed: the next update is the heartbeat's
        assert isinstance(beat, Sample) and beat.value == 100 and time.monotonic() - t0 > 0.6
        src.values["eth1"] = 150
        t1 = time.monotonic()
        [change] = await take(stream, 1)  # a change goes out at the next sample, not at the next heartbeat
        assert isinstance(change, Sample) and change.value == 150 and time.monotonic() - t1 < 0.95
        await stream.aclose()  # type: ignore[attr-defined]


class Ipv4OnlyService(GnmiService):
    """The gNMI service of a switch that serves no IPv6 AFT entries (an older agent, another vendor's
    switch): it refuses the path with ``NOT_FOUND``, as gNMI says a target does for a path it does not know."""

    async def _subscriptions(self, sl: Any, context: Any) -> Any:
        for s in sl.subscription:
            if any(e.name == "ipv6-unicast" for e in s.path.elem):
                await context.abort(grpc.StatusCode.NOT_FOUND, "afts/ipv6-unicast: not served")
        return await super()._subscriptions(sl, context)


async def test_the_collector_streams_a_switch_without_ipv6_aft_entries(tmp_path: Path) -> None:
    from controller.telemetry import Telemetry
    from controller.telemetry.stream import StreamOptions, TelemetryStream

    server = grpc.aio.server()
    add_gnmi_servicer(server, Ipv4OnlyService(synthetic(), "leaf-1", GnmiOptions(min_interval_s=0.05)))
    server.add_insecure_port(f"unix:{tmp_path / 'gnmi.sock'}")
    await server.start()
    telemetry = Telemetry()

    async def active() -> None:
        return None

    stream = TelemetryStream(telemetry, {"leaf-1": f"unix:{tmp_path / 'gnmi.sock'}"}, active,
                             options=StreamOptions(interval_s=0.1, flush_s=0.05, backoff_s=(5.0, 5.0)))
    try:
        await stream.start()
        for _ in range(100):
            if {p for _d, p in telemetry.store.rows} >= {AFT.format(p, "octets-forwarded") for p in PREFIXES}:
                break
            await asyncio.sleep(0.05)
        assert {p for _d, p in telemetry.store.rows} >= {AFT.format(p, "octets-forwarded") for p in PREFIXES} | {
            IF.format("eth1", "in-octets")}  # at once (no back-off), every other counter streaming
        assert "leaf-1" in stream.connected
    finally:
        await stream.stop()
        await server.stop(None)

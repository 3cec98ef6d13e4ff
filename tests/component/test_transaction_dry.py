"""The network-wide transaction against real agent processes on unix sockets (``--dry-frr``, no FRR).

Fault injection kills agents with SIGKILL while a call is in flight, makes the
controller vanish between Commit and Confirm, and restarts an agent in the
middle of a transaction; the 200-agent test pushes to a whole fleet at once.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from southbound.config import BgpNeighbor, DeviceConfig, FibNexthop, FibRoute, Interface, LinkBandwidth
from southbound.driver import AgentDriver
from southbound.state import StepResult
from southbound.transaction import commit
from tests.serving import LOOM, stop_processes

pytestmark = pytest.mark.anyio



def fabric_configs(names: list[str], version: int) -> dict[str, DeviceConfig]:
    """A small ring of devices; ``version`` changes every device's WCMP weights."""
    out = {}
    for i, name in enumerate(names):
        left, right = names[i - 1], names[(i + 1) % len(names)]
        out[name] = DeviceConfig(
            hostname=name, asn=65000 + i, router_id=f"10.255.{i // 250}.{i % 250 + 1}",
            interfaces=(Interface("eth1", f"100.64.{i // 100}.{(2 * i) % 200}/31", peer=left, peer_port="eth2"),
                        Interface("eth2", f"100.65.{i // 100}.{(2 * i) % 200}/31", peer=right, peer_port="eth1")),
            neighbors=(BgpNeighbor("eth1", left, 65000 + (i - 1) % len(names)),
                       BgpNeighbor("eth2", right, 65000 + (i + 1) % len(names))),
            originated=(f"10.{i // 250}.{i % 250}.0/24",),
            link_bandwidth=(LinkBandwidth("eth1", "10.200.0.0/24", version),),
            fib_routes=(FibRoute("10.200.0.0/24", "g1", (FibNexthop("eth1", "", version), FibNexthop("eth2", "", 1))),),
        )
    return out


class Agents:
    """Agent processes (``loom agent --dry-frr``) in a temp dir; all are killed at teardown."""

    def __init__(self, base: Path):
        self.base = base
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def sock(self, name: str) -> Path:
        return self.base / name / "agent.sock"

    def endpoints(self, names: list[str]) -> dict[str, str]:
        return {n: f"unix:{self.sock(n)}" for n in names}

    def start(self, name: str, *extra: str) -> None:
        self.launch(name, *extra)
        self.wait(name)

    def launch(self, name: str, *extra: str) -> None:
        self.sock(name).unlink(missing_ok=True)
        log = open(self.base / f"{name}.log", "ab")  # noqa: SIM115 - closed with the process
        argv = [*LOOM, "agent", "--frr-dir", str(self.base / name), "--hostname", name,
                "--listen", f"unix:{self.sock(name)}", "--dry-frr", *extra]
        self.procs[name] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        log.close()

    def wait(self, name: str) -> None:
        deadline = time.monotonic() + 90
        while not self.sock(name).exists():
            if self.procs[name].poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"agent {name} did not start: {(self.base / f'{name}.log').read_text()[-2000:]}")
            time.sleep(0.05)

    def kill(self, name: str) -> None:
        p = self.procs[name]
        if p.poll() is None:
            p.send_signal(signal.SIGKILL)
            p.wait(10)

    def journal(self, name: str) -> dict[str, object] | None:
        path = self.base / name / "agent" / "journal.json"
        try:
            return json.loads(path.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return None

    def stop_all(self) -> None:
        stop_processes(list(self.procs.values()), 10)


@pytest.fixture
def agents(tmp_path: Path) -> Iterator[Agents]:
    a = Agents(tmp_path)
    try:
        yield a
    finally:
        a.stop_all()


NAMES = ["d0", "d1", "d2", "d3"]


async def hashes(drv: AgentDriver, names: list[str]) -> dict[str, str]:
    return {n: (await drv.state(n)).running_hash for n in names}


async def baseline(agents: Agents, *delayed: tuple[str, str, str]) -> tuple[AgentDriver, dict[str, str]]:
    """Start the agents (``delayed``: (name, option, seconds)), commit version 1, return its hashes."""
    for n in NAMES:
        extra = [x for d in delayed if d[0] == n for x in (d[1], d[2])]
        agents.launch(n, *extra)
    for n in NAMES:
        agents.wait(n)
    drv = AgentDriver(agents.endpoints(NAMES), timeout=10, commit_timeout=30)
    r = await commit(drv, fabric_configs(NAMES, 1), confirm_within=30)
    assert r.ok, r.error
    return drv, await hashes(drv, NAMES)


async def test_commit_everywhere_then_roll_back_a_change(agents: Agents) -> None:
    drv, v1 = await baseline(agents)
    async with drv:
        events: list[tuple[str, str, StepResult | None]] = []
        r = await commit(drv, fabric_configs(NAMES, 2), confirm_within=30,
                         progress=lambda s, d, res: events.append((s, d, res)))
        assert r.ok and r.stage == "confirm", r.error
        assert r.changed_devices() == NAMES
        assert all("bandwidth 2" in res.diff for res in r.steps["prepare"].values())
        assert [s for s in ("prepare", "commit", "verify", "confirm") if any(e[0] == s for e in events)] == \
            ["prepare", "commit", "verify", "confirm"]
        v2 = await hashes(drv, NAMES)
        assert all(v2[n] == r.steps["prepare"][n].config_hash != v1[n] for n in NAMES)
        # pushing the same configs again changes nothing
        same = await commit(drv, fabric_configs(NAMES, 2), confirm_within=30)
        assert same.ok and same.changed_devices() == []
        # rolling back the confirmed change restores version 1 everywhere
        back = await asyncio.gather(*(drv.rollback(n, r.change) for n in NAMES))
        assert all(b.changed and not b.failed for b in back)
        assert await hashes(drv, NAMES) == v1
        assert all(await asyncio.gather(*(drv.healthy(n) for n in NAMES)))


async def test_dry_run_shows_diffs_and_changes_nothing(agents: Agents) -> None:
    drv, v1 = await baseline(agents)
    async with drv:
        r = await commit(drv, fabric_configs(NAMES, 3), dry_run=True)
        assert r.ok and r.dry_run and set(r.steps) == {"prepare", "abort"}
        assert all("bandwidth 3" in x.diff for x in r.steps["prepare"].values())
        assert await hashes(drv, NAMES) == v1
        assert [(await drv.info(n)).prepared_change for n in NAMES] == [""] * len(NAMES)


async def test_a_device_that_refuses_prepare_aborts_everywhere(agents: Agents) -> None:
    drv, v1 = await baseline(agents)
    async with drv:
        configs = fabric_configs(NAMES, 2)
        configs["d2"] = fabric_configs(["x"], 2)["x"]  # a config for another device: d2 refuses it
        r = await commit(drv, configs)
        assert not r.ok and r.stage == "prepare"
        assert [f.device for f in r.failures()] == ["d2"]
        assert "INVALID_ARGUMENT" in r.error and "d2" in r.error
        assert set(r.steps) == {"prepare", "abort"}
        assert await hashes(drv, NAMES) == v1


async def test_kill_an_agent_during_prepare_changes_nothing(agents: Agents) -> None:
    drv, v1 = await baseline(agents, ("d1", "--dry-prepare-delay", "1.5"))
    async with drv:
        def progress(step: str, device: str, res: StepResult | None) -> None:
            if step == "prepare" and device == "d1" and res is None:
                asyncio.get_running_loop().call_later(0.5, agents.kill, "d1")

        r = await commit(drv, fabric_configs(NAMES, 2), progress=progress)
        assert not r.ok and r.stage == "prepare"
        assert [f.device for f in r.failures("prepare")] == ["d1"]
        assert "UNAVAILABLE" in r.steps["prepare"]["d1"].error
        alive = [n for n in NAMES if n != "d1"]
        assert await hashes(drv, alive) == {n: v1[n] for n in alive}
        assert [(await drv.info(n)).prepared_change for n in alive] == [""] * len(alive)  # aborted
        agents.start("d1")
        assert (await drv.state("d1")).running_hash == v1["d1"]


async def test_kill_an_agent_during_commit_leaves_every_device_on_the_old_config(agents: Agents) -> None:
    drv, v1 = await baseline(agents, ("d2", "--dry-apply-delay", "2"))
    async with drv:
        async def kill_when_applying() -> None:
            for _ in range(200):
                j = agents.journal("d2")
                if j and j.get("phase") == "applying" and "version" not in j:
                    agents.kill("d2")
                    return
                await asyncio.sleep(0.02)

        tasks: list[asyncio.Task[None]] = []

        def progress(step: str, device: str, res: StepResult | None) -> None:
            if step == "commit" and device == "d2" and res is None:
                tasks.append(asyncio.get_running_loop().create_task(kill_when_applying()))

        r = await commit(drv, fabric_configs(NAMES, 2), progress=progress)
        await asyncio.gather(*tasks)
        assert not r.ok and r.stage == "commit"
        assert [f.device for f in r.failures("commit")] == ["d2"]
        assert "rollback" in r.steps
        alive = [n for n in NAMES if n != "d2"]
        assert await hashes(drv, alive) == {n: v1[n] for n in alive}
        # d2 died half way through applying; on restart it undoes the half-applied config
        assert agents.journal("d2") is not None
        agents.start("d2", "--dry-apply-delay", "0.1")
        st = await drv.state("d2")
        assert st.running_hash == v1["d2"] and st.pending_change == ""
        assert agents.journal("d2") is None


async def test_controller_gone_before_confirm_every_device_rolls_back_by_itself(agents: Agents) -> None:
    drv, v1 = await baseline(agents)
    configs = fabric_configs(NAMES, 2)
    async with AgentDriver(agents.endpoints(NAMES), timeout=10) as ctl:
        prep = await asyncio.gather(*(ctl.prepare(n, "chg-vanish", configs[n]) for n in NAMES))
        assert not any(p.failed for p in prep)
        com = await asyncio.gather(*(ctl.commit(n, "chg-vanish", 1.5) for n in NAMES))
        assert not any(c.failed for c in com)
        assert all(h != v1[n] for n, h in (await hashes(ctl, NAMES)).items())
    # the controller's channels are closed: nobody will confirm
    async with drv:
        deadline = time.monotonic() + 15
        while await hashes(drv, NAMES) != v1 and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        assert await hashes(drv, NAMES) == v1
        late = await drv.confirm("d0", "chg-vanish")
        assert late.failed and "FAILED_PRECONDITION" in late.error


async def test_agent_restarted_mid_transaction_recovers_and_confirms(agents: Agents) -> None:
    drv, v1 = await baseline(agents)
    configs = fabric_configs(NAMES, 2)
    async with drv:
        assert not any(p.failed for p in await asyncio.gather(*(drv.prepare(n, "c2", configs[n]) for n in NAMES)))
        com = await asyncio.gather(*(drv.commit(n, "c2", 60) for n in NAMES))
        agents.kill("d3")
        agents.start("d3")
        st = await drv.state("d3")
        assert st.pending_change == "c2" and st.running_hash == com[3].config_hash
        assert not any(c.failed for c in await asyncio.gather(*(drv.confirm(n, "c2") for n in NAMES)))
        assert [(await drv.state(n)).pending_change for n in NAMES] == [""] * len(NAMES)
        # and once more: killed with a short timer, restarted after it expired -> rolled back at start
        assert not any(p.failed for p in await asyncio.gather(*(drv.prepare(n, "c3", fabric_configs(NAMES, 3)[n])
                                                                for n in NAMES)))
        assert not (await drv.commit("d0", "c3", 0.5)).failed
        agents.kill("d0")
        await asyncio.sleep(1.0)
        agents.start("d0")
        assert (await drv.state("d0")).running_hash == com[0].config_hash


def spawn_fleet(base: Path, names: list[str]) -> subprocess.Popen[bytes]:
    """``len(names)`` dry agents, each its own gRPC server and state, in one child process."""
    ready = base / "fleet.ready"
    code = ("import asyncio, sys; from pathlib import Path; from southbound.device.agent import serve_dry_fleet; "
            "base = Path(sys.argv[1]); "
            "asyncio.run(serve_dry_fleet(sys.argv[2:], base, ready_file=base / 'fleet.ready'))")
    log = open(base / "fleet.log", "ab")  # noqa: SIM115
    proc = subprocess.Popen([sys.executable, "-c", code, str(base), *names], stdout=log, stderr=subprocess.STDOUT,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    log.close()
    deadline = time.monotonic() + 120
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"fleet did not start: {(base / 'fleet.log').read_text()[-2000:]}")
        time.sleep(0.1)
    return proc


@pytest.mark.slow
async def test_one_transaction_over_200_agents(tmp_path: Path) -> None:
    names = [f"sw{i:03d}" for i in range(200)]
    fleet = spawn_fleet(tmp_path, names)
    try:
        async with AgentDriver({n: f"unix:{tmp_path / n / 'agent.sock'}" for n in names}, timeout=30,
                               commit_timeout=60) as drv:
            first = await commit(drv, fabric_configs(names, 1), confirm_within=60, verify_timeout=60)
            assert first.ok, first.error
            second = await commit(drv, fabric_configs(names, 2), confirm_within=60, verify_timeout=60)
            assert second.ok, second.error
            assert second.changed_devices() == names
            states = await drv.states(names)
            assert all(not isinstance(s, BaseException) and s.running_hash == second.steps["prepare"][n].config_hash
                       for n, s in states.items())
    finally:
        stop_processes([fleet], 30)

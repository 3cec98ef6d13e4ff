"""The device agent in process: wire conversions, the transaction state machine, its timer, its recovery.

A real gRPC server on a unix socket in a temp dir, with the ``--dry-frr``
backend (no FRR here; the lab tests run the agent against real FRR).
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

from southbound.config import BgpNeighbor, DeviceConfig, FibNexthop, FibRoute, Interface, LinkBandwidth
from southbound.device.agent import AgentCore, serve
from southbound.device.frr_apply import DryFrr, FrrError, script_interpreter
from southbound.driver import AgentDriver
from southbound.grpc_adapter import config_from_proto, config_to_proto
from southbound.render import build_rendered
from southbound.rendered import Rendered
from southbound.state import AgentError

pytestmark = pytest.mark.anyio


def make_config(name: str = "tor-0", weight: int = 1, *, lb: bool = True) -> DeviceConfig:
    return DeviceConfig(
        hostname=name, asn=65100, router_id="10.255.0.1",
        interfaces=(Interface("eth1", "100.64.0.0/31", peer="leaf-0", peer_port="eth1"),
                    Interface("eth2", "100.64.0.2/31", peer="leaf-1", peer_port="eth1"),
                    Interface("host0", "10.0.0.1/24", host=True)),
        neighbors=(BgpNeighbor("eth1", "leaf-0", 65010, "100.64.0.1"),
                   BgpNeighbor("eth2", "leaf-1", 65010, None, drained=True)),
        originated=("10.0.0.0/24",),
        link_bandwidth=(LinkBandwidth("eth1", "10.1.0.0/24", weight),) if lb else (),
        fib_routes=(FibRoute("10.2.0.0/24", "g1", (FibNexthop("eth1", "100.64.0.1", weight),
                                                   FibNexthop("eth2", "100.64.0.3", 1))),),
    )


def test_device_config_survives_the_wire() -> None:
    for cfg in (make_config(), make_config(weight=7, lb=False),
                DeviceConfig(hostname="r1", asn=None, router_id="10.0.0.9", routing="isis")):
        assert config_from_proto(config_to_proto(cfg)) == cfg


def test_rendered_names_peers_whose_link_bandwidth_changed() -> None:
    a, b = build_rendered(make_config(weight=1)), build_rendered(make_config(weight=3))
    assert a.hash != b.hash
    assert a.lb_peers.keys() == {"100.64.0.1"}
    assert a.lb_peers != b.lb_peers
    assert "set extcommunity bandwidth 3" in b.frr_text
    assert Rendered.from_document(json.loads(json.dumps(b.to_document()))) == b


def _core(tmp: Path, **kw: float) -> AgentCore:
    return AgentCore(DryFrr(tmp / "dry", **kw), tmp / "state", "tor-0")


async def test_prepare_commit_confirm_and_rollback(tmp_path: Path) -> None:
    core = _core(tmp_path)
    await core.start()
    empty = core.running
    assert empty is not None
    o = await core.prepare("c1", make_config(weight=1))
    assert o.changed and "+hostname tor-0" in o.diff
    c = await core.commit("c1", 30)
    assert c.config_hash == o.config_hash and c.confirm_deadline > 0
    assert (await core.info()).pending_change == "c1"
    await core.confirm("c1")
    assert (await core.info()).pending_change == ""
    assert (tmp_path / "dry" / "frr.conf").read_text() == build_rendered(make_config(weight=1)).frr_text
    # a second change, committed without a timer, then rolled back by change id
    o2 = await core.prepare("c2", make_config(weight=5))
    assert "bandwidth 5" in o2.diff
    await core.commit("c2", 0)
    assert "100.64.0.1" in (tmp_path / "dry" / "clears.log").read_text()
    r = await core.rollback("c2", "")
    assert r.changed and r.config_hash == c.config_hash
    assert (await core.rollback("c2", "")).changed is False  # idempotent
    # and back to the very first (empty) config by hash
    r0 = await core.rollback("", empty.hash)
    assert r0.config_hash == empty.hash
    await core.close()


async def test_state_machine_refuses_out_of_order_calls(tmp_path: Path) -> None:
    core = _core(tmp_path)
    await core.start()
    with pytest.raises(AgentError) as e:
        await core.commit("nope", 10)
    assert e.value.code == "failed_precondition"
    with pytest.raises(AgentError) as e:
        await core.prepare("c1", make_config(name="someone-else"))
    assert e.value.code == "invalid_argument"
    await core.prepare("c1", make_config())
    await core.commit("c1", 30)
    with pytest.raises(AgentError) as e:
        await core.prepare("c2", make_config(weight=2))
    assert e.value.code == "failed_precondition" and "c1" in str(e.value)
    with pytest.raises(AgentError):
        await core.confirm("c2")
    assert await core.abort("c9") is False
    await core.close()


async def test_unconfirmed_commit_rolls_back_by_itself(tmp_path: Path) -> None:
    core = _core(tmp_path)
    await core.start()
    before = core.running.hash if core.running else ""
    await core.prepare("c1", make_config())
    await core.commit("c1", 0.3)
    assert core.running is not None and core.running.hash != before
    for _ in range(100):
        await asyncio.sleep(0.05)
        if core.running.hash == before and not (tmp_path / "state" / "journal.json").exists():
            break
    assert core.running.hash == before
    with pytest.raises(AgentError):
        await core.confirm("c1")
    await core.close()


async def test_restart_resumes_timer_or_rolls_back_after_deadline(tmp_path: Path) -> None:
    now = [1000.0]
    core = AgentCore(DryFrr(tmp_path / "dry"), tmp_path / "state", "tor-0", clock=lambda: now[0])
    await core.start()
    before = core.running.hash if core.running else ""
    await core.prepare("c1", make_config())
    o = await core.commit("c1", 3600)
    await core.close()  # the agent stops with the commit unconfirmed
    again = AgentCore(DryFrr(tmp_path / "dry"), tmp_path / "state", "tor-0", clock=lambda: now[0])
    await again.start()
    assert again.running is not None and again.running.hash == o.config_hash
    assert (await again.info()).pending_change == "c1"
    await again.close()
    now[0] += 7200  # restarts after the deadline: rolls back at once
    late = AgentCore(DryFrr(tmp_path / "dry"), tmp_path / "state", "tor-0", clock=lambda: now[0])
    await late.start()
    assert late.running is not None and late.running.hash == before
    assert (tmp_path / "dry" / "frr.conf").read_text() == ""
    await late.close()


@pytest.mark.component
async def test_grpc_round_trip_and_health(tmp_path: Path) -> None:
    core = _core(tmp_path)
    sock = tmp_path / "agent.sock"
    stop = asyncio.Event()
    ready = asyncio.Event()
    server = asyncio.create_task(serve(core, f"unix:{sock}", ready=ready.set, stop=stop))
    await asyncio.wait_for(ready.wait(), 10)
    try:
        async with AgentDriver({"tor-0": f"unix:{sock}"}, timeout=5) as drv:
            assert await drv.healthy("tor-0")
            info = await drv.info("tor-0")
            assert info.hostname == "tor-0" and info.dry_frr
            p = await drv.prepare("tor-0", "c1", make_config())
            assert not p.failed and p.changed and p.diff
            bad = await drv.commit("tor-0", "other", 10)
            assert bad.failed and bad.error.startswith("FAILED_PRECONDITION")
            assert not (await drv.commit("tor-0", "c1", 10)).failed
            st = await drv.state("tor-0")
            assert st.running_hash == p.config_hash and st.pending_change == "c1" and not st.observed
            assert st.routes["10.2.0.0/24"].weights() == {"eth1": 1, "eth2": 1}
            assert not (await drv.confirm("tor-0", "c1")).failed
            assert (await drv.state("tor-0")).pending_change == ""
            back = await drv.rollback("tor-0", "", to_hash=info.running_hash)  # the config before c1
            assert back.changed and back.config_hash == info.running_hash
            assert (await drv.state("tor-0")).running_hash == info.running_hash
            missing = await drv.rollback("tor-0", "", to_hash="0" * 64)
            assert missing.failed and missing.error.startswith("NOT_FOUND")
    finally:
        stop.set()
        await server


async def test_rollback_of_an_older_change_waits_for_the_pending_one(tmp_path: Path) -> None:
    core = _core(tmp_path)
    await core.start()
    await core.prepare("c1", make_config(weight=1))
    first = await core.commit("c1", 0)
    await core.prepare("c2", make_config(weight=2))
    second = await core.commit("c2", 60)
    with pytest.raises(AgentError) as e:
        await core.rollback("c1", "")
    assert e.value.code == "failed_precondition" and "c2" in str(e.value)
    assert core.running is not None and core.running.hash == second.config_hash
    undone = await core.rollback("c2", "")  # the pending one first, then the older one
    assert undone.config_hash == first.config_hash
    assert (await core.rollback("c1", "")).changed
    await core.close()


class FailingFrr(DryFrr):
    """A dry backend that records what it applies and fails its next ``failing`` applies, as FRR does while a
    daemon is down or starting."""

    def __init__(self, record_dir: Path) -> None:
        super().__init__(record_dir)
        self.applied: list[tuple[str, str]] = []
        self.failing = 0

    def apply(self, current: Rendered | None, target: Rendered) -> str:
        self.applied.append((current.hash if current else "", target.hash))
        if self.failing:
            self.failing -= 1
            raise FrrError("bgpd.vty: [Errno 111] Connection refused")
        return super().apply(current, target)


async def test_a_restarted_frr_daemon_gets_the_running_config_again(tmp_path: Path) -> None:
    """A routing daemon that restarts starts from its own file, not from what the agent applied: when a
    daemon's process id changes, the agent applies its running config again (the backend's reload makes
    FRR run it); a look that finds the same daemons does nothing, and an edit behind Loom (no restart)
    is left for drift to report."""

    class Restarting(FailingFrr):
        pids = {"zebra": 10, "bgpd": 11}

        def daemon_pids(self) -> dict[str, int]:
            return dict(self.pids)

    backend = Restarting(tmp_path / "dry")
    core = AgentCore(backend, tmp_path / "state", "tor-0")
    await core.start()
    assert await core.heal_restarted() == []  # the first look only learns the process ids
    await core.prepare("c1", make_config(weight=1))
    await core.commit("c1", 0)
    running = core.running
    assert running is not None
    backend.applied.clear()
    assert await core.heal_restarted() == [] and backend.applied == []
    (tmp_path / "dry" / "frr.conf").write_text("hostname edited-behind-loom\n")  # an edit: nothing restarts
    assert await core.heal_restarted() == [] and backend.applied == []
    backend.pids = {"zebra": 10, "bgpd": 99}  # bgpd restarted (empty)
    assert await core.heal_restarted() == ["bgpd"]
    assert backend.applied == [(running.hash, running.hash)]
    assert (tmp_path / "dry" / "frr.conf").read_text() == running.frr_text
    assert await core.heal_restarted() == [] and len(backend.applied) == 1  # once per restart
    # a daemon still starting fails the apply (FrrReload's check after the reload): the next look applies again
    backend.pids = {"zebra": 10, "bgpd": 100}
    backend.failing = 1
    with pytest.raises(FrrError):
        await core.heal_restarted()
    assert await core.heal_restarted() == ["bgpd"] and len(backend.applied) == 3
    assert await core.heal_restarted() == [] and len(backend.applied) == 3


def test_a_reload_that_a_daemon_missed_fails_and_is_not_recorded_as_the_candidate(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``frr-reload.py`` skips what no daemon answers for: a bgpd down or starting during the reload takes
    nothing. The apply fails (the transaction's step, or the restart heal that tries again) instead of recording
    how FRR shows that state as the candidate's, which made every later apply a no-op (the chaos run)."""
    from southbound.device.frr_apply import FrrReload
    from southbound.device.frr_delta import parse_config

    target = build_rendered(make_config(weight=1))
    frr = FrrReload(tmp_path / "vty", tmp_path / "work")
    (tmp_path / "work").mkdir()
    monkeypatch.setattr(frr, "_reload", lambda rendered, mode, daemon=None: "reloaded")
    without_bgp = "\n".join(ln for ln in target.frr_text.splitlines() if not ln.startswith(("router bgp", " ")))
    monkeypatch.setattr(frr, "running_tree", lambda: parse_config(without_bgp))
    with pytest.raises(FrrError, match="router bgp"):
        frr.apply(None, target)
    assert not frr._shown_path.exists()
    monkeypatch.setattr(frr, "running_tree", lambda: parse_config(target.frr_text))
    monkeypatch.setattr(frr, "_install_fib", lambda before, fib: [])
    assert frr.apply(None, target) == "reloaded" and frr._shown_path.exists()


async def test_a_rollback_that_failed_is_tried_again_until_the_agent_takes_changes(tmp_path: Path) -> None:
    """A commit whose apply fails restores the previous config; when that fails too (the daemon is down), the
    journal stays ``rolling_back`` and every Prepare is refused as busy. The watch loop's
    :meth:`finish_rollback` tries it again: once FRR takes it, the device is on its previous config and
    takes changes again (the chaos run had an agent refuse every repair for good)."""

    backend = FailingFrr(tmp_path / "dry")
    core = AgentCore(backend, tmp_path / "state", "tor-0")
    await core.start()
    await core.prepare("c1", make_config(weight=1))
    await core.commit("c1", 0)
    first = core.running
    assert first is not None and await core.finish_rollback() is None  # nothing to finish
    await core.prepare("c2", make_config(weight=2))
    backend.failing = 2  # the apply, then the restore
    with pytest.raises(AgentError, match="so did the restore"):
        await core.commit("c2", 0)
    with pytest.raises(AgentError, match="busy: change c2 is rolling_back"):
        await core.prepare("c3", make_config(weight=3))
    backend.failing = 1  # still down at the first try
    with pytest.raises(FrrError):
        await core.finish_rollback()
    assert await core.finish_rollback() == "c2"
    assert core.running is not None and core.running.hash == first.hash
    assert (tmp_path / "dry" / "frr.conf").read_text() == first.frr_text
    await core.prepare("c3", make_config(weight=3))
    await core.commit("c3", 0)


def test_a_restarted_daemon_is_reloaded_against_what_it_alone_runs(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A reload against the merged view skips the lines another daemon still shows (a restarted bgpd got no
    prefix-list, zebra still held them): the heal reloads each restarted daemon with ``--daemon``."""
    from southbound.device.frr_apply import FrrReload
    from southbound.device.frr_delta import parse_config

    target = build_rendered(make_config(weight=1))
    vty = tmp_path / "vty"
    vty.mkdir()
    for d in ("zebra", "bgpd"):
        (vty / f"{d}.vty").touch()
    frr = FrrReload(vty, tmp_path / "work")
    calls: list[tuple[str, str | None]] = []
    monkeypatch.setattr(frr, "_reload", lambda rendered, mode, daemon=None: calls.append((mode, daemon)) or "")
    monkeypatch.setattr(frr, "running_tree", lambda: parse_config(target.frr_text))
    frr.heal(target, ["bgpd", "staticd"])  # staticd has no vty socket: not running, nothing to reload
    assert calls == [("--reload", "bgpd")]
    assert frr._shown_path.exists()


def test_a_script_runs_with_the_interpreter_its_first_line_names(tmp_path: Path) -> None:
    """frr-reload.py starts with the Python its ``#!`` names, not ``python3`` from PATH (a pyenv shim there cost
    three bash processes a reload); a script that names none, or one not there, gets this process's Python."""
    python = tmp_path / "python3.99"
    python.symlink_to(sys.executable)
    named = tmp_path / "named.py"
    named.write_text(f"#!{python} -u\nprint(1)\n")
    env = tmp_path / "env.py"
    env.write_text("#!/usr/bin/env python3\n")
    gone = tmp_path / "gone.py"
    gone.write_text("#!/nonexistent/python3\n")
    shell = tmp_path / "shell.sh"
    shell.write_text("#!/bin/sh\n")
    assert script_interpreter(str(named)) == str(python)
    assert script_interpreter(str(env)) == sys.executable
    assert script_interpreter(str(gone)) == sys.executable
    assert script_interpreter(str(shell)) == sys.executable  # not a Python: frr-reload.py is one
    assert script_interpreter(str(tmp_path / "missing.py")) == sys.executable

"""Discovery through a device agent: ``GetRunning`` of a real agent in process (dry FRR, whose running
configuration is the file it records) answers FRR's configuration for ``loom discover --agents``; and the
command's bad input exits 2 with a message."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from typer.testing import CliRunner

from controller.cli import _register, app
from southbound.device.agent import AgentCore, serve
from southbound.device.frr_apply import DryFrr
from southbound.driver import AgentDriver

pytestmark = pytest.mark.anyio
SAMPLE = Path(__file__).parents[1] / "unit" / "samples" / "frr84" / "adopt_bgp" / "leaf1.running.txt"


async def test_get_running_answers_what_frr_runs(tmp_path: Path) -> None:
    (tmp_path / "dry").mkdir()
    text = SAMPLE.read_text()
    (tmp_path / "dry" / "frr.conf").write_text(text)
    core = AgentCore(DryFrr(tmp_path / "dry"), tmp_path / "state", "leaf1")
    listen = f"unix:{tmp_path / 'agent.sock'}"
    stop, ready = asyncio.Event(), asyncio.Event()
    task = asyncio.create_task(serve(core, listen, ready=ready.set, stop=stop))
    await asyncio.wait_for(ready.wait(), 10)
    try:
        async with AgentDriver({"leaf1": listen}) as driver:
            got = await driver.running("leaf1")
    finally:
        stop.set()
        await task
    assert got.name == "leaf1" and got.running_config == text and got.interfaces == ()


@pytest.mark.parametrize(("args", "message"), [
    ([], "give a lab PATH or --agents FILE"),
    (["x", "--agents", "y"], "give a lab PATH or --agents FILE"),
])
def test_discover_needs_one_source(args: list[str], message: str) -> None:
    _register(("discover",))
    out = CliRunner().invoke(app, ["discover", *args])
    assert out.exit_code == 2 and message in out.output, out.output


def test_discover_refuses_a_bad_agents_file(tmp_path: Path) -> None:
    _register(("discover",))
    (tmp_path / "agents.json").write_text('["not", "a", "map"]')
    out = CliRunner().invoke(app, ["discover", "--agents", str(tmp_path / "agents.json")])
    assert out.exit_code == 2 and "expected an agents file" in out.output, out.output

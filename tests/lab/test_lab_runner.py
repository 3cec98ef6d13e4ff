"""The lab runner's life cycle: crashes, half-built labs, repeated downs, no leftovers.

A lab (clos-2x2's intent under another name, so it cannot disturb the shipped
labs) is brought up by the real ``loom`` command, killed mid-``up``, brought up
again over the remains, torn down twice, and torn down without its state file;
after each ``down`` no namespace, daemon or run directory of the lab is left.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from controller.model.intent import load_intent
from labs import runner
from labs.clab import Topology, load_topology
from labs.gen import generate_lab

REPO = Path(__file__).resolve().parents[2]
_EXE = Path(sys.executable).with_name("loom")
LOOM = [str(_EXE)] if _EXE.exists() else [sys.executable, "-c", "from controller.cli import main; main()"]


def loom(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*LOOM, *args], capture_output=True, text=True, timeout=timeout)


def leftovers(topo: Topology) -> list[str]:
    """Namespaces, processes and files of the lab that still exist."""
    names = {runner.namespace(topo.name, n.name) for n in topo.nodes}
    out = json.loads(subprocess.run(["ip", "-j", "netns", "list"], capture_output=True, text=True).stdout or "[]")
    found = [f"namespace {n['name']}" for n in out if n["name"] in names]
    found += [f"process {pid}" for pid in runner._our_pids(runner.run_dir(topo.name))]
    if runner.run_dir(topo.name).exists():
        found.append(f"directory {runner.run_dir(topo.name)}")
    return found


@pytest.fixture(scope="module")
def topo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Topology]:
    path = generate_lab(load_intent(REPO / "labs" / "clos-2x2" / "intent.yaml"),
                        tmp_path_factory.mktemp("labs") / "rt-2x2")
    topology = load_topology(path)
    yield topology
    runner.down(topology.name, [n.name for n in topology.nodes])


def test_crash_during_up_then_up_again_then_down_twice(topo: Topology) -> None:
    proc = subprocess.Popen([*LOOM, "lab", "up", str(topo.directory)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        zebra = runner.run_dir(topo.name) / topo.nodes[-1].name / "zebra.pid"
        deadline = time.monotonic() + 60
        while not zebra.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.02)
        assert zebra.exists(), "the lab never started its daemons"
    finally:
        proc.send_signal(signal.SIGKILL)  # the runner dies mid-up: daemons and namespaces stay behind
        proc.wait()
    assert leftovers(topo), "a crash mid-up should leave a half-built lab behind"

    up = loom("lab", "up", str(topo.directory), "--json")  # cleans the remains first
    assert up.returncode == 0, up.stdout + up.stderr
    assert json.loads(up.stdout)["converged"]

    first = loom("lab", "down", str(topo.directory), "--json")
    assert first.returncode == 0, first.stderr
    doc = json.loads(first.stdout)
    agents = json.loads(up.stdout)["agents"]  # loom lab up starts one device agent per node
    assert agents == len(topo.nodes)
    assert doc["daemons_stopped"] == 3 * len(topo.nodes) + agents and doc["namespaces_deleted"] == len(topo.nodes)
    assert leftovers(topo) == []
    second = loom("lab", "down", str(topo.directory), "--json")
    assert second.returncode == 0 and json.loads(second.stdout)["daemons_stopped"] == 0
    assert leftovers(topo) == []


def test_down_without_a_state_file_still_removes_everything(topo: Topology) -> None:
    report = runner.up(topo, timeout=60)
    assert report.converged, report.problems
    (runner.run_dir(topo.name) / "state.json").unlink()
    runner.down(topo.name, [n.name for n in topo.nodes])
    assert leftovers(topo) == []


def test_status_and_routes_of_a_lab_that_is_not_up(topo: Topology) -> None:
    runner.down(topo.name, [n.name for n in topo.nodes])
    for command in ("status", "routes"):
        proc = loom("lab", command, str(topo.directory))
        assert proc.returncode == 1 and "not up" in proc.stderr, proc.stderr


def test_the_shipped_labs_left_nothing_behind() -> None:
    """Runs after the fabric tests (module order): their finalizers removed everything."""
    for lab in ("clos-2x2", "clos3-small"):
        assert leftovers(load_topology(REPO / "labs" / lab)) == []

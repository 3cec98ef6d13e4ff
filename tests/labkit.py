"""The one lab harness: real FRR in network namespaces, the agents, and ``loom serve`` attached to them.

Lab modules build on three pieces, each cleaning up after itself even when a test fails:

* :func:`lab_up` / :func:`lab_down`: the lab ``loom lab gen`` makes of an intent document, brought up and
  converged; down removes every daemon, agent and namespace it made (by pid and by name);
* :class:`LabAgents`: one ``loom agent`` per node inside its namespace, for tests that drive the agents
  directly (the transaction, the FIB, a killed agent);
* :class:`ServedLab`: a lab with ``loom serve --lab`` on it (the controller starts the agents), with the
  CLI and the API as a user has them; :func:`served_lab` is the module fixture's body.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from labs import runner
from labs.clab import Topology, load_topology
from labs.traffic import TrafficOptions, lab_hosts, send, validate_matrix
from tests.serving import LOOM, LoomServer, settled_change, stop_processes

__all__ = ["REPO", "HostTraffic", "LabAgents", "ServedLab", "lab_down", "lab_up", "served_lab"]

REPO = Path(__file__).resolve().parent.parent


def lab_up(base: Path, name: str, doc: dict[str, Any], *, timeout: float = 90, hosts: int = 0) -> Topology:
    """The lab ``loom lab gen`` makes of intent ``doc`` (in ``base/name``, the document in
    ``base/intent.yaml``), up and converged."""
    (base / "intent.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    extra = ["--hosts", str(hosts)] if hosts else []
    gen = subprocess.run([*LOOM, "lab", "gen", str(base / "intent.yaml"), "--out", str(base / name), *extra],
                         capture_output=True, text=True, timeout=max(120, timeout), cwd=REPO)
    assert gen.returncode == 0, gen.stdout + gen.stderr
    topo = load_topology(base / name)
    report = runner.up(topo, timeout=timeout)
    assert report.converged, report.problems
    return topo


def lab_down(name: str, doc: dict[str, Any]) -> None:
    """Everything lab ``name`` of intent ``doc`` runs, gone (its daemons, agents and namespaces)."""
    runner.down(name, [d["name"] for d in doc["devices"]])


class LabAgents:
    """One ``loom agent`` per lab node, inside the node's namespace, on ``RUN/NODE/agent.sock``."""

    def __init__(self, lab: str, nodes: list[str]):
        self.lab = lab
        self.nodes = nodes
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def dir(self, node: str) -> Path:
        return runner.run_dir(self.lab) / node

    def endpoints(self) -> dict[str, str]:
        return {n: f"unix:{self.dir(n) / 'agent.sock'}" for n in self.nodes}

    def launch(self, node: str) -> None:
        d = self.dir(node)
        (d / "agent.sock").unlink(missing_ok=True)
        log = open(d / "agent.log", "ab")  # noqa: SIM115 - the child holds it
        self.procs[node] = subprocess.Popen(
            ["ip", "netns", "exec", runner.namespace(self.lab, node), *runner.lab_agent_command(node, d)],
            stdout=log, stderr=subprocess.STDOUT)
        log.close()

    def wait(self, node: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not (self.dir(node) / "agent.sock").exists():
            if self.procs[node].poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"agent {node} did not start: {(self.dir(node) / 'agent.log').read_text()[-2000:]}")
            time.sleep(0.05)

    def start_all(self) -> None:
        for n in self.nodes:
            self.launch(n)
        for n in self.nodes:
            self.wait(n)

    def kill(self, node: str) -> None:
        p = self.procs[node]
        if p.poll() is None:
            p.send_signal(signal.SIGKILL)
            p.wait(10)

    def journal(self, node: str) -> dict[str, Any] | None:
        try:
            return dict(json.loads((self.dir(node) / "agent" / "journal.json").read_text()))
        except (FileNotFoundError, json.JSONDecodeError):
            return None

    def stop_all(self) -> None:
        stop_processes(list(self.procs.values()), 15)


class ServedLab:
    """Lab ``name`` of intent ``doc`` with ``loom serve --lab`` on it: the API (call it like
    :class:`LoomServer`), the CLI with the token (:meth:`cli`) and applying documents (:meth:`apply`).
    ``doc`` is what the controller is given; ``lab_doc`` (default ``doc``) is what the lab is generated from."""

    def __init__(self, base: Path, name: str, doc: dict[str, Any], token: str, *, hosts: int = 0,
                 env: dict[str, str] | None = None, lab_doc: dict[str, Any] | None = None):
        self.base, self.name, self.doc, self.token, self.hosts = base, name, doc, token, hosts
        self.lab_doc = lab_doc or doc
        self.path = base / name
        self.topo: Topology | None = None
        self.server = LoomServer(base, ["--db", str(base / "loom.db"), "--lab", str(self.path)], token, cwd=REPO,
                                 env={"LOOM_DRIFT_INTERVAL": "0", **(env or {})})

    @property
    def url(self) -> str:
        return self.server.url

    def __call__(self, method: str, path: str, **kw: Any) -> Any:
        return self.server(method, path, **kw)

    def up(self, timeout: float = 90) -> None:
        self.topo = lab_up(self.base, self.name, self.lab_doc, timeout=timeout, hosts=self.hosts)
        self.server.start()

    def kill9(self) -> None:
        """The controller dies at once (the lab and its agents run on)."""
        self.server.kill9()

    def start(self) -> None:
        """The controller (again) on the lab that is up."""
        self.server.start()

    def down(self) -> None:
        # a controller stopping mid-commit waits up to 30 s for it (its verify, when FRR never converges);
        # the lab goes next, so its flush does not matter here: 5 s, then SIGKILL
        self.server.stop(grace=5)
        lab_down(self.name, self.lab_doc)  # stops the agents too (their command lines name the lab's run dir)

    def cli(self, *args: str, timeout: float = 300, check: bool = False) -> subprocess.CompletedProcess[str]:
        """The ``loom`` command as a user runs it against this controller."""
        env = {**os.environ, "LOOM_TOKEN": self.token, "LOOM_SERVER": self.server.url}
        out = subprocess.run([*LOOM, *args], capture_output=True, text=True, env=env, cwd=REPO, timeout=timeout)
        assert not check or out.returncode == 0, out.stdout + out.stderr
        return out

    def apply(self, doc: dict[str, Any], *args: str) -> dict[str, Any]:
        """``loom apply FILE --json`` of ``doc``: the change it leaves."""
        path = self.base / "apply.yaml"
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        return dict(json.loads(self.cli("apply", str(path), "--json", *args, check=True).stdout))

    def get(self, path: str) -> Any:
        r = self.server("GET", path)
        assert r.status_code == 200, r.text
        return r.json()

    def wait(self, cid: int, timeout: float = 180) -> dict[str, Any]:
        """Change ``cid`` once it is final and settled."""
        return settled_change(lambda path: self.server("GET", path).json(), cid, timeout=timeout, interval=0.3,
                              must_settle=True)


@contextmanager
def served_lab(lab: ServedLab, timeout: float = 90) -> Iterator[ServedLab]:
    """``lab`` up with its controller for the ``with`` block, and down after it whatever happened."""
    try:
        lab.up(timeout)
        yield lab
    finally:
        lab.down()


class HostTraffic:
    """The lab's hosts send one matrix at a time (``labs.traffic.send`` in a thread, 512 flows) for at most
    ``duration`` seconds; :meth:`run` swaps it, :meth:`stop` ends it."""

    def __init__(self, topo: Topology, duration: float = 600.0):
        self.topo, self.hosts, self.duration = topo, lab_hosts(topo), duration
        self.options = TrafficOptions(flows=512)
        self._stop: threading.Event | None = None
        self._thread: threading.Thread | None = None
        self.reports: list[Any] = []

    def run(self, matrix: list[dict[str, Any]]) -> None:
        self.stop()
        demands = validate_matrix(matrix, self.hosts, self.options)
        stop = threading.Event()
        self._stop = stop
        self._thread = threading.Thread(
            target=lambda: self.reports.append(send(self.topo, demands, self.duration, options=self.options,
                                                            stop=stop)),
            daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._stop is not None and self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=30)
            self._stop = self._thread = None

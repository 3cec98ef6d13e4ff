"""A two-node Ray cluster on loopback for tests: a head and a worker node, each a ``ray start --block``
process of its own (its own session, so the node and every process it starts can be killed at once,
as a machine that dies would be, and nothing else is touched). Both nodes have one CPU and a
temporary directory of their own under /tmp; their workers import this checkout (``PYTHONPATH``).
The head checks its nodes' health every half second, so a dead node is known within about two
seconds (Ray's default is about thirty). ``ray stop`` is never used: it would stop every Ray process
of the user on the machine, other tests' and other sessions' included."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.serving import Ports

__all__ = ["RayNodes"]

ROOT = Path(__file__).resolve().parents[1]
HEALTH = '{"health_check_period_ms": 500, "health_check_failure_threshold": 3, "health_check_initial_delay_ms": 0}'


#: ``ray`` for the worker node, which must reach the head at 127.0.0.1: Ray replaces a loopback address
#: given to ``--address`` with the machine's routable one (where the head, bound to loopback, is not),
#: unless the node runs in its single-machine mode, which refuses to join a cluster. So the worker
#: node's ``ray`` keeps the address as given.
WORKER_RAY = ("import sys; import ray._private.services as s; s.resolve_ip_for_localhost = lambda host: host; "
              "from ray.scripts.scripts import main; sys.argv[0] = 'ray'; main()")


class RayNodes:
    """``start()`` the head and the worker node; ``gcs`` is the head's port; ``kill_worker()``
    SIGKILLs every process of the worker node (its session); ``stop()`` ends both nodes and removes
    the temporary directory."""

    def __init__(self) -> None:
        self.tmp = tempfile.mkdtemp(prefix="loom-ray-", dir="/tmp")
        self._ports = Ports()  # every component of both nodes a port of its own
        self.gcs = self._ports.take()
        self.client_port = self._ports.take()
        self.env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
                    "RAY_AUTH_MODE": "disabled",
                    "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)}
        self.head: subprocess.Popen[bytes] | None = None
        self.worker: subprocess.Popen[bytes] | None = None

    def _node(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        log = open(Path(self.tmp) / f"{name}.log", "wb")  # noqa: SIM115 - the node's whole life
        env = dict(self.env)
        if name != "head":  # Ray's single-machine mode (loopback only) refuses a second node
            env.pop("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER")
        ray = [sys.executable, "-c", WORKER_RAY] if name != "head" else [sys.executable, "-m", "ray.scripts.scripts"]
        return subprocess.Popen(
            [*ray, "start", "--block", "--node-ip-address=127.0.0.1", "--num-cpus=1",
             f"--temp-dir={self.tmp}", "--disable-usage-stats", f"--dashboard-agent-listen-port={self._ports.take()}",
             f"--dashboard-agent-grpc-port={self._ports.take()}", f"--runtime-env-agent-port={self._ports.take()}",
             f"--metrics-export-port={self._ports.take()}", *args],
            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def start(self, timeout: float = 60.0) -> None:
        self.head = self._node("head", "--head", f"--port={self.gcs}", f"--ray-client-server-port={self.client_port}",
                               "--include-dashboard=false", f"--dashboard-port={self._ports.take()}",
                               f"--system-config={HEALTH}")
        self._wait_port(self.gcs, timeout)
        self.worker = self._node("worker", f"--address=127.0.0.1:{self.gcs}")
        self._wait_port(self.client_port, timeout)

    def _wait_port(self, port: int, timeout: float) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            assert self.head is not None
            if self.head.poll() is not None:
                raise RuntimeError(f"the Ray head exited: {self.log('head')[-2000:]}")
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    return
            time.sleep(0.2)
        raise TimeoutError(f"port {port} of the Ray head did not open within {timeout:g} s: {self.log('head')[-2000:]}")

    def log(self, name: str) -> str:
        path = Path(self.tmp) / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    @staticmethod
    def _session(sid: int) -> list[int]:
        """The processes of session ``sid`` (a node: its raylet, GCS, agents, and its workers, which
        Ray puts in process groups of their own but not in sessions of their own)."""
        out = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if int(fields[3]) == sid:  # after the command: state, ppid, pgrp, session
                out.append(int(stat.parent.name))
        return out

    def _kill(self, proc: subprocess.Popen[bytes] | None) -> None:
        """SIGKILL every process of the node, as the machine's death would end them."""
        if proc is None:
            return
        for pid in self._session(proc.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.wait(timeout=10)

    def kill_worker(self) -> None:
        self._kill(self.worker)

    def stop(self) -> None:
        self._kill(self.worker)
        self._kill(self.head)
        shutil.rmtree(self.tmp, ignore_errors=True)

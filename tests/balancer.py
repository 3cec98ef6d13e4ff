"""HAProxy in front of ``loom serve`` replicas, for tests and the bench.

:class:`Balancer` writes an HAProxy configuration (:func:`haproxy_config`) and
runs Debian's ``haproxy -f CFG -db`` in the foreground as a child process of
its own, on a free loopback port, stopped by pid. Every replica is
health-checked on ``/readyz`` (200 on the leader and on followers alike: every
replica serves reads and writes; a replica that shuts down stops listening and
is marked down), every ``inter`` with ``fall``/``rise`` thresholds, and a
connection error seen on live traffic marks a replica down at once. A request
whose connection to a replica fails before it was sent is redispatched to
another one; a read (GET, HEAD) is also retried elsewhere when the replica
closed the connection without answering (it died); a write is not (it may have
been applied: the client gets a 502 and must look at the store). The errors
HAProxy answers itself are problem documents, its 503 with ``Retry-After``.
:meth:`Balancer.states` reads the servers' states from the admin socket.
"""

from __future__ import annotations

import functools
import json
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from tests.serving import free_port, stop_processes

__all__ = ["Balancer", "BalancerOptions", "haproxy_config", "haproxy_missing"]

HAPROXY = "haproxy"


@functools.cache
def haproxy_missing() -> str | None:
    """Why HAProxy cannot run here, or None (Debian's package ``haproxy``; ``make test`` installs it as root)."""
    if shutil.which(HAPROXY) is None:
        return "haproxy is not installed (Debian package haproxy: make test installs it as root)"
    return None


@dataclass(frozen=True)
class BalancerOptions:
    """Health checks every ``inter_ms`` (``fall`` failures mark a replica down, ``rise`` successes up);
    ``retries`` connection attempts per request, each on another replica (``option redispatch 1``);
    ``retry_after`` seconds in HAProxy's own 503."""

    inter_ms: int = 200
    fall: int = 2
    rise: int = 1
    retries: int = 3
    retry_after: int = 1
    timeout_server_s: int = 120


def _problem(status: int, title: str, detail: str) -> str:
    assert "'" not in detail + title, "HAProxy quotes the body with single quotes"
    body = {"type": f"urn:loom:problem:balancer-{status}", "title": title, "status": status, "detail": detail}
    return json.dumps(body, separators=(",", ":"))


def haproxy_config(port: int, servers: dict[str, int], admin_socket: Path,
                   options: BalancerOptions | None = None) -> str:
    """The configuration of a balancer on ``127.0.0.1:port`` in front of ``servers`` (name -> port on
    127.0.0.1), round robin, health-checked on ``/readyz``."""
    o = options or BalancerOptions()
    lines = [
        "global",
        "    maxconn 4096",
        f"    stats socket {admin_socket} mode 600 level admin",
        "",
        "defaults",
        "    mode http",
        "    option http-keep-alive",
        "    timeout connect 1s",
        "    timeout client 120s",
        f"    timeout server {o.timeout_server_s}s",
        "    timeout http-request 30s",
        "    timeout queue 10s",
        "    timeout check 2s",
        f"    retries {o.retries}",
        "    option redispatch 1",  # every retry goes to another replica
        "    retry-on conn-failure empty-response",
        "",
        "frontend loom",
        f"    bind 127.0.0.1:{port}",
        "    default_backend replicas",
        # a write that reached a replica which then died may have been applied: only reads are replayed
        "    http-request disable-l7-retry unless METH_GET",
        *(f"    http-error status {code} content-type application/problem+json string '{_problem(code, title, detail)}'"
          + (f" hdr Retry-After {o.retry_after}" if code in (502, 503, 504) else "")
          for code, title, detail in (
              (400, "Bad request", "the load balancer could not parse the request"),
              (408, "Request timeout", "the request was not received in time"),
              (500, "Internal error", "the load balancer failed"),
              (502, "Bad gateway", "the replica closed the connection without an answer (it may have died): "
                                   "a write may or may not have been applied; read the store before retrying"),
              (503, "No replica available", "no replica is up; retry after the seconds of the Retry-After header"),
              (504, "Gateway timeout", "the replica did not answer in time"),
          )),
        "",
        "backend replicas",
        "    balance roundrobin",
        "    option httpchk",
        "    http-check send meth GET uri /readyz",
        "    http-check expect status 200",
        f"    default-server check inter {o.inter_ms}ms fastinter {o.inter_ms}ms downinter {o.inter_ms}ms "
        f"fall {o.fall} rise {o.rise} observe layer4 error-limit 1 on-error mark-down",
        *(f"    server {name} 127.0.0.1:{p}" for name, p in servers.items()),
        "",
    ]
    return "\n".join(lines)


class Balancer:
    """``haproxy -f base/haproxy.cfg -db`` on a free port of 127.0.0.1 in front of ``servers`` (name -> port)."""

    def __init__(self, base: Path, servers: dict[str, int], options: BalancerOptions | None = None):
        self.base, self.servers, self.options = base, dict(servers), options or BalancerOptions()
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.cfg = base / "haproxy.cfg"
        self.admin = base / "haproxy.sock"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def log(self) -> Path:
        return self.base / "haproxy.log"

    def start(self, timeout: float = 30.0) -> None:
        """Check the configuration, start HAProxy and wait until it accepts connections."""
        self.cfg.write_text(haproxy_config(self.port, self.servers, self.admin, self.options))
        check = subprocess.run([HAPROXY, "-c", "-f", str(self.cfg)], capture_output=True, text=True, timeout=30)
        assert check.returncode == 0, check.stdout + check.stderr
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen([HAPROXY, "-f", str(self.cfg), "-db"], stdout=log,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    break
            except OSError:
                assert self.proc.poll() is None and time.monotonic() < deadline, self.log.read_text()[-3000:]
                time.sleep(0.05)
        while not self.admin.exists():
            assert self.proc.poll() is None and time.monotonic() < deadline, self.log.read_text()[-3000:]
            time.sleep(0.05)

    def stop(self) -> None:
        if self.proc is not None:
            stop_processes([self.proc], 5)

    def command(self, line: str) -> str:
        """One command on HAProxy's admin socket, its answer."""
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(5)
            s.connect(str(self.admin))
            s.sendall(line.encode() + b"\n")
            chunks = []
            while chunk := s.recv(65536):
                chunks.append(chunk)
        return b"".join(chunks).decode()

    def states(self) -> dict[str, str]:
        """Each replica's state as HAProxy sees it: ``UP``, ``DOWN``, ``MAINT``... (``show stat``)."""
        lines = self.command("show stat").splitlines()
        header = lines[0].lstrip("# ").split(",")
        name, status = header.index("svname"), header.index("status")
        out = {}
        for line in lines[1:]:
            cols = line.split(",")
            if len(cols) > status and cols[name] in self.servers:
                out[cols[name]] = cols[status].split(" ")[0]
        return out

    def wait_states(self, want: dict[str, str], timeout: float = 30.0) -> None:
        """Wait until each named replica is in the wanted state (``UP``, ``DOWN``)."""
        deadline = time.monotonic() + timeout
        while True:
            got = self.states()
            if all(got.get(n) == s for n, s in want.items()):
                return
            assert time.monotonic() < deadline, (want, got)
            time.sleep(0.05)

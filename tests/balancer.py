"""HAProxy in front of ``loom serve`` replicas, for tests and the bench.

:class:`Balancer` writes an HAProxy configuration (:func:`haproxy_config`) and
runs Debian's ``haproxy -f CFG -db`` in the foreground as a child process of
its own, on a free loopback port, stopped by pid. Every replica is
health-checked on ``/readyz`` (200 on the leader and on followers alike: every
replica serves reads and writes; a replica that shuts down stops listening and
is marked down), every ``inter`` with ``fall``/``rise`` thresholds, and a
connection error seen on live traffic marks a replica down at once.

A request whose replica died with it is replayed on another replica where that
is safe: a read (GET, HEAD), and every write but a token's
(:data:`REPLAYABLE_WRITES`). Loom stores the ``Idempotency-Key`` of a write of
the intent, and of a change's create, commit and rollback, in the transaction
of its work, so the replay of a write that the dead replica had committed finds
it done and answers it without doing it again; the balancer gives every such
write that comes without a key one of its own (``lb-`` and a UUID). Requests
are buffered whole (``option http-buffer-request``) so that they can be sent
again; a body larger than HAProxy's buffer (16 kB) cannot be, nor can a
token's POST. When
no replay is possible or the replays fail too, the client gets a 503 with
``Retry-After`` whose problem document says that a write may have been
applied (retry it with the same ``Idempotency-Key``, or read the store), never a
502. The errors HAProxy answers itself are problem documents, its 503s with
``Retry-After``. :meth:`Balancer.states` reads the servers' states from the
admin socket.
"""

from __future__ import annotations

import functools
import json
import shutil
import socket
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from tests.serving import free_port, stop_processes

__all__ = ["REPLAYABLE_WRITES", "REPLICA_LOST", "Balancer", "BalancerOptions", "MuteReplica", "haproxy_config",
           "haproxy_missing", "replica_lost_reply"]

HAPROXY = "haproxy"
#: the paths whose writes the balancer may send again: those Loom runs at most once per ``Idempotency-Key``
#: (the intent's, in the transaction of their revision; a change's create, commit and rollback, in the
#: transaction of their work), a review (computed again), and the auto-te switch and the drift repair (the
#: same state again). Not the tokens': a token's POST answers its secret, which no store keeps.
REPLAYABLE_WRITES = (r"^/v1/(intent|devices|links|failure-domains|prefixes|policies|demands|jobs|changes|auto-te|drift)"
                     r"(/|$)|^/v1/revisions/[0-9]+/rollback$")
#: the problem type of the balancer's 503 for a request whose replica died and that it could not replay
REPLICA_LOST = "urn:loom:problem:balancer-replica-lost"
#: the problem type of the balancer's own 503 (every replica down): the request was sent to none (_problem)
NO_REPLICA = "urn:loom:problem:balancer-503"


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


def replica_lost_reply(retry_after: int) -> bytes:
    """HAProxy's answer, in place of a 502, to a request whose replica closed the connection without an
    answer (it died) and that could not be replayed on another: a 503 with ``Retry-After``."""
    body = json.dumps({
        "type": REPLICA_LOST, "title": "Replica lost", "status": 503,
        "detail": "the replica that had the request stopped before it answered, and the request could not be "
                  "sent to another one; a write may have been applied: retry it with the same Idempotency-Key "
                  "(a write of the intent is then answered once), or read the store before retrying"},
        separators=(",", ":")).encode()
    head = ("HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/problem+json\r\n"
            f"Retry-After: {retry_after}\r\nCache-Control: no-store\r\nContent-Length: {len(body)}\r\n\r\n")
    return head.encode() + body


def haproxy_config(port: int, servers: dict[str, int], admin_socket: Path,
                   options: BalancerOptions | None = None, *, replica_lost: Path | None = None) -> str:
    """The configuration of a balancer on ``127.0.0.1:port`` in front of ``servers`` (name -> port on
    127.0.0.1), round robin, health-checked on ``/readyz``; ``replica_lost`` is the file of
    :func:`replica_lost_reply` (HAProxy's 502 is otherwise a 502)."""
    o = options or BalancerOptions()
    lines = [
        "global",
        "    maxconn 4096",
        f"    stats socket {admin_socket} mode 600 level admin",
        "",
        "defaults",
        "    mode http",
        "    option http-keep-alive",
        "    option http-buffer-request",  # the whole request is kept: it can be replayed on another replica
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
        # a write that reached a replica which then died may have been applied: only reads and the writes
        # Loom answers once per Idempotency-Key are replayed; such a write without a key is given one
        f"    acl replayable path_reg {REPLAYABLE_WRITES}",
        "    acl keyed req.hdr(idempotency-key) -m found",
        "    http-request set-header Idempotency-Key lb-%[uuid] if replayable !METH_GET !keyed",
        "    http-request disable-l7-retry unless METH_GET or replayable",
        *([f"    errorfile 502 {replica_lost}"] if replica_lost is not None else []),
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
          ) if not (code == 502 and replica_lost is not None)),
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
        lost = self.base / "replica-lost.http"
        lost.write_bytes(replica_lost_reply(self.options.retry_after))
        self.cfg.write_text(haproxy_config(self.port, self.servers, self.admin, self.options, replica_lost=lost))
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

    def retries(self) -> dict[str, int]:
        """The backend's counters of requests sent again (``show stat``): ``retries`` (to the same replica
        or another) and ``redispatches`` (to another replica)."""
        lines = self.command("show stat").splitlines()
        header = lines[0].lstrip("# ").split(",")
        name, retr, redis = header.index("svname"), header.index("wretr"), header.index("wredis")
        for line in lines[1:]:
            cols = line.split(",")
            if cols[name] == "BACKEND":
                return {"retries": int(cols[retr] or 0), "redispatches": int(cols[redis] or 0)}
        return {"retries": 0, "redispatches": 0}

    def wait_states(self, want: dict[str, str], timeout: float = 30.0) -> None:
        """Wait until each named replica is in the wanted state (``UP``, ``DOWN``)."""
        deadline = time.monotonic() + timeout
        while True:
            got = self.states()
            if all(got.get(n) == s for n, s in want.items()):
                return
            assert time.monotonic() < deadline, (want, got)
            time.sleep(0.05)


class MuteReplica:
    """A replica that dies after doing the work: a proxy on a free loopback port in front of a real
    ``loom serve`` (``upstream``, a port on 127.0.0.1) that forwards every request whole and its answer,
    except the answer to the first ``mute`` requests that are not GET or HEAD: those it reads from the
    replica and drops, closing the connection (what the balancer sees of a replica killed between its
    commit and its answer). :attr:`muted` lists the request lines it swallowed."""

    def __init__(self, upstream: int, mute: int = 1):
        self.upstream, self.mute = upstream, mute
        self.port = free_port()
        self.muted: list[str] = []
        self._sock = socket.create_server(("127.0.0.1", self.port))
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self) -> MuteReplica:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._sock.close()

    @staticmethod
    def _message(conn: socket.socket, buf: bytes) -> tuple[bytes, bytes] | None:
        """One whole HTTP/1.1 message (head and Content-Length body) from ``buf`` and ``conn``, and the rest."""
        while b"\r\n\r\n" not in buf:
            data = conn.recv(65536)
            if not data:
                return None
            buf += data
        head, rest = buf.split(b"\r\n\r\n", 1)
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value.strip())
        while len(rest) < length:
            data = conn.recv(65536)
            if not data:
                return None
            rest += data
        return head + b"\r\n\r\n" + rest[:length], rest[length:]

    def _serve(self) -> None:
        while True:
            try:
                client, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._relay, args=(client,), daemon=True).start()

    def _relay(self, client: socket.socket) -> None:
        try:
            self._relay_messages(client)
        except OSError:  # HAProxy ends its health checks' connections with a reset
            pass

    def _relay_messages(self, client: socket.socket) -> None:
        with client, socket.create_connection(("127.0.0.1", self.upstream)) as up:
            buf = b""
            while True:
                got = self._message(client, buf)
                if got is None:
                    return
                request, buf = got
                line = request.split(b"\r\n", 1)[0].decode()
                up.sendall(request)
                answer = self._message(up, b"")
                if answer is None:
                    return
                with self._lock:
                    drop = not line.startswith(("GET ", "HEAD ")) and len(self.muted) < self.mute
                    if drop:
                        self.muted.append(line)
                if drop:
                    return  # the work is done; the answer dies with the "replica"
                client.sendall(answer[0])

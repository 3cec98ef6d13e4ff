"""A replicated PostgreSQL store under pg_auto_failover, for tests and the bench (issue 31).

:func:`formation` brings up, under a temp directory owned by the ``postgres`` user (PostgreSQL refuses to
run as root, as in :mod:`tests.pg`), a pg_auto_failover **monitor** and two **data nodes** on loopback
(``--auth trust --no-ssl``, distinct ports), each a ``pg_autoctl run`` process of our own (started as
``postgres`` in a session of its own, so its pid is its process group: the keeper and the PostgreSQL it
supervises). It yields a :class:`Formation` whose :attr:`Formation.url` is the multi-host URL Loom is given
(``host=127.0.0.1,127.0.0.1&port=A,B&target_session_attrs=read-write``), and on exit kills every process
group it started (by pid) and removes the directory, even when the test failed. ``pg_autoctl`` keeps its
configuration and state under ``XDG_CONFIG_HOME``/``XDG_DATA_HOME``, which point into the temp directory.

Replication is **synchronous**: with one standby, pg_auto_failover lists it in ``synchronous_standby_names``
(``number_sync_standbys`` 0 and the standby's ``replication-quorum`` true, its defaults), so a commit is
acknowledged once it is flushed on both nodes. Only while the standby is gone (the formation's
``wait_primary`` state, e.g. after a failover until the old primary has re-joined) does the primary commit
alone; :meth:`Formation.wait_healthy` waits for ``primary`` + ``secondary`` before the next kill.

A **failure** is the death of the primary's machine: :meth:`Formation.kill_primary` SIGKILLs the node's
whole process group, the keeper and PostgreSQL together. Killing PostgreSQL alone is not a failover: its
keeper restarts it within a second, on the same node. :meth:`Formation.restart` starts the node's
``pg_autoctl run`` again; the monitor has meanwhile promoted the standby, so the old primary rewinds
(``pg_rewind``) and re-joins as the new standby.

The monitor's health checks are tuned (:data:`MONITOR_SETTINGS`) so that a failover takes a few seconds
instead of pg_auto_failover's production defaults (checks every 5 s with a 5 s timeout, two retries 2 s
apart, a node unhealthy after 20 s without a keeper report, nothing decided in the first 10 s after the
monitor starts, then 30 s for the old primary to confirm its demotion: about a minute). Here a node is
checked every second with a one-second timeout and one retry after 0.5 s, and is unhealthy after 2 s without
a report from its keeper; on loopback a dead node refuses connections at once, so these do not produce false
failovers, and they keep the test's twenty failovers cheap. The monitor promotes the standby only once the
old primary has confirmed its demotion or ``primary_demote_timeout`` has passed (30 s by default, 3 s
here): a primary that is alive but cut off demotes itself after the keeper's
``timeout.network_partition_timeout`` without the monitor and the standby (20 s by default, 2 s here), so
the second must stay below the first, or two primaries could take writes (the standby has stopped
replicating by then, so the cut-off primary could not acknowledge a synchronous commit anyway). The keeper's
wait for the standby's WAL receiver to drain before promoting (``timeout.prepare_promotion_walreceiver``,
5 s by default) is 1 s. A failover here takes about 2 s to detect and 3 s of demote timeout, plus the
promotion. PostgreSQL runs
with ``fsync=off``: the tests kill processes, not machines, so the page cache survives every kill.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests import pg
from tests.serving import Ports

__all__ = ["MONITOR_SETTINGS", "Formation", "Node", "formation", "missing", "write_outage"]

#: the monitor's health checks (milliseconds), see the module's docstring
MONITOR_SETTINGS = {
    "pgautofailover.health_check_period": 1000,
    "pgautofailover.health_check_timeout": 1000,
    "pgautofailover.health_check_max_retries": 1,
    "pgautofailover.health_check_retry_delay": 500,
    "pgautofailover.node_considered_unhealthy_timeout": 2000,
    "pgautofailover.startup_grace_period": 1000,
    "pgautofailover.primary_demote_timeout": 3000,
}
#: the keepers' settings (``pg_autoctl config set``), see the module's docstring
KEEPER_SETTINGS = {"timeout.prepare_promotion_walreceiver": "1", "timeout.prepare_promotion_catchup": "10",
                   "timeout.network_partition_timeout": "2"}
DBNAME = "loom"
EXTENSION = "pgautofailover.control"


def missing() -> str | None:
    """Why a pg_auto_failover formation cannot run here, or None."""
    reason = pg.missing()
    if reason:
        return reason
    if shutil.which("pg_autoctl") is None:
        return "pg_auto_failover is not installed (Debian packages pg-auto-failover-cli, postgresql-15-auto-failover)"
    bindir = pg.find_pg_bin()
    assert bindir is not None
    if not (bindir.parent.parent.parent.parent / "share/postgresql" / bindir.parent.name / "extension" /
            EXTENSION).exists() and not list(Path("/usr/share/postgresql").glob(f"*/extension/{EXTENSION}")):
        return "the pgautofailover extension is missing (Debian package postgresql-15-auto-failover)"
    return None


@dataclass
class Node:
    """One ``pg_autoctl`` node (the monitor or a data node): its data directory, port and running process."""

    name: str
    pgdata: Path
    port: int
    proc: subprocess.Popen[bytes] | None = None
    killed_at: float = 0.0  # time.monotonic() of the last kill9
    log: Path = field(init=False)

    def __post_init__(self) -> None:
        self.log = self.pgdata.parent / f"{self.name}.log"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill9(self) -> None:
        """SIGKILL the node's process group (the keeper and its PostgreSQL), and reap the keeper."""
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.killed_at = time.monotonic()
        self.proc.wait(30)
        self._wait_port_free()

    def _wait_port_free(self, timeout: float = 30) -> None:
        """Wait until nothing of the killed group listens on the port any more (its backends die with it)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) != 0:
                    return
            time.sleep(0.05)


class Formation:
    """A monitor and ``data_nodes`` data nodes under ``root`` (two by default; see the module's docstring).
    ``sync_standbys``: the formation's ``number-sync-standbys``. With three data nodes and 1, a commit waits
    for one standby even while the other is gone, so every acknowledged write is on two nodes at all times
    (``docs/store-ha.md``); with two and 0 the primary commits alone in ``wait_primary``."""

    def __init__(self, root: Path, bindir: Path, *, data_nodes: int = 2, sync_standbys: int = 0):
        self.root, self.bindir = root, bindir
        self.sync_standbys = sync_standbys
        self.created = time.monotonic()
        ports = Ports()
        self.monitor = Node("monitor", root / "monitor", ports.take())
        self.nodes = [Node(f"node{i + 1}", root / f"node{i + 1}", ports.take()) for i in range(data_nodes)]
        pw = pwd.getpwnam("postgres")
        self.uid, self.gid = pw.pw_uid, pw.pw_gid
        self.env = {"PATH": f"{bindir}:/usr/bin:/bin", "HOME": str(root), "XDG_CONFIG_HOME": str(root / "config"),
                    "XDG_DATA_HOME": str(root / "share"), "XDG_RUNTIME_DIR": str(root / "run"),
                    "PG_CONFIG": str(bindir / "pg_config"), "LANG": "C.UTF-8"}
        self.monitor_uri = f"postgres://autoctl_node@127.0.0.1:{self.monitor.port}/pg_auto_failover?sslmode=disable"

    @property
    def url(self) -> str:
        """Loom's multi-host URL: whichever node takes read-write sessions is the one it talks to."""
        hosts = ",".join("127.0.0.1" for _ in self.nodes)
        ports = ",".join(str(n.port) for n in self.nodes)
        return (f"postgresql+psycopg://postgres@/{DBNAME}?host={hosts}&port={ports}"
                f"&target_session_attrs=read-write&connect_timeout=2")

    # -- processes -------------------------------------------------------------------------------------
    def _run(self, *argv: str, timeout: float = 180) -> str:
        r = subprocess.run(argv, env=self.env, user=self.uid, group=self.gid, extra_groups=[], cwd=self.root,
                           capture_output=True, text=True, timeout=timeout)
        if r.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed ({r.returncode}): {r.stderr[-2000:] or r.stdout[-2000:]}")
        return r.stdout

    def start(self, node: Node) -> None:
        """``pg_autoctl run`` for ``node``, as ``postgres`` in a session of its own (its pid: its group)."""
        with open(node.log, "ab") as log:
            node.proc = subprocess.Popen(["pg_autoctl", "run", "--pgdata", str(node.pgdata)], env=self.env,
                                         user=self.uid, group=self.gid, extra_groups=[], cwd=self.root,
                                         stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def restart(self, node: Node) -> None:
        """Start a killed node again: it re-joins the formation (as the standby, once rewound)."""
        assert not node.running
        self.start(node)

    def stop(self) -> None:
        """Kill every process group this formation started (data nodes first), by pid."""
        for node in [*self.nodes, self.monitor]:
            if node.running:
                node.kill9()

    # -- setup -----------------------------------------------------------------------------------------
    def create(self) -> None:
        os.chown(self.root, self.uid, self.gid)
        for sub in ("config", "share", "run"):
            (self.root / sub).mkdir(mode=0o700)
            os.chown(self.root / sub, self.uid, self.gid)
        common = ("--pgctl", str(self.bindir / "pg_ctl"), "--hostname", "127.0.0.1", "--auth", "trust", "--no-ssl")
        self._run("pg_autoctl", "create", "monitor", "--pgdata", str(self.monitor.pgdata), "--pgport",
                  str(self.monitor.port), *common)
        self._tune(self.monitor.pgdata)
        self.start(self.monitor)
        self._wait_accepting(self.monitor.port, "pg_auto_failover")
        self.monitor_sql(*(f"ALTER SYSTEM SET {k} = {v}" for k, v in MONITOR_SETTINGS.items()),
                         "SELECT pg_reload_conf()")
        for i, node in enumerate(self.nodes):
            self._run("pg_autoctl", "create", "postgres", "--pgdata", str(node.pgdata), "--pgport", str(node.port),
                      "--name", node.name, "--dbname", DBNAME, "--monitor", self.monitor_uri,
                      "--username", "postgres", *common)
            for key, value in KEEPER_SETTINGS.items():
                self._run("pg_autoctl", "config", "set", "--pgdata", str(node.pgdata), key, value)
            self._tune(node.pgdata)
            self.start(node)
            self.wait_states({n.name: ("single",) for n in self.nodes[:1]} if i == 0 else
                             {self.nodes[0].name: ("primary",), node.name: ("secondary",)}, timeout=180)
        if self.sync_standbys:
            self._run("pg_autoctl", "set", "formation", "number-sync-standbys", str(self.sync_standbys),
                      "--pgdata", str(self.nodes[0].pgdata))
            self.wait_healthy(timeout=180)

    def _tune(self, pgdata: Path) -> None:
        with open(pgdata / "postgresql.conf", "a") as conf:
            conf.write("\n# tests/pgha.py: processes are killed, never the machine\nfsync = off\n"
                       "full_page_writes = on\n")

    def _wait_accepting(self, port: int, db: str, timeout: float = 60) -> None:
        import psycopg  # lazy: only the harness's own checks need the driver

        deadline = time.monotonic() + timeout
        while True:
            try:
                psycopg.connect(host="127.0.0.1", port=port, user="postgres", dbname=db, connect_timeout=2).close()
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    # -- the monitor's view ----------------------------------------------------------------------------
    def monitor_sql(self, *statements: str) -> list[tuple[object, ...]]:
        """Run ``statements`` on the monitor (autocommit); the rows of the last."""
        import psycopg  # lazy: only the harness's own checks need the driver

        with psycopg.connect(host="127.0.0.1", port=self.monitor.port, user="postgres", dbname="pg_auto_failover",
                             autocommit=True, connect_timeout=2) as conn:
            rows: list[tuple[object, ...]] = []
            for st in statements:
                cur = conn.execute(st)  # type: ignore[call-overload]
                rows = cur.fetchall() if cur.description else []
            return rows

    def states(self) -> dict[str, tuple[str, str]]:
        """Each data node's (reported, goal) state as the monitor has them."""
        rows = self.monitor_sql("SELECT nodename, reportedstate::text, goalstate::text FROM pgautofailover.node")
        return {str(n): (str(r), str(g)) for n, r, g in rows}

    def _wait(self, done: Any, what: str, timeout: float) -> dict[str, tuple[str, str]]:
        """The nodes' states once ``done(name -> in_one_of(states))`` holds, asked every 0.1 s."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                now = self.states()
            except Exception:  # noqa: BLE001 - the monitor restarting: ask again
                now = {}

            def in_one_of(node: str, wanted: tuple[str, ...], now: dict[str, tuple[str, str]] = now) -> bool:
                reported, goal = now.get(node, ("", ""))  # reported, and assigned
                return reported in wanted and goal in wanted

            if done(in_one_of):
                return now
            if time.monotonic() > deadline:
                raise TimeoutError(f"formation not {what} after {timeout} s: {now}; logs in {self.root}")
            time.sleep(0.1)

    def wait_states(self, want: dict[str, tuple[str, ...]], timeout: float = 120) -> dict[str, tuple[str, str]]:
        """Wait until each named node reports, and is assigned, one of its wanted states."""
        return self._wait(lambda in_one_of: all(in_one_of(n, w) for n, w in want.items()), f"in {want}", timeout)

    def wait_promoted(self, victim: Node, timeout: float = 120) -> dict[str, tuple[str, str]]:
        """Wait until a data node other than ``victim`` takes writes (``wait_primary`` or ``primary``): with
        three data nodes the other standby goes on as a secondary, of the new primary."""
        others = [n.name for n in self.nodes if n is not victim]
        return self._wait(lambda in_one_of: any(in_one_of(n, ("wait_primary", "primary")) for n in others),
                          f"promoting one of {others}", timeout)

    def primary(self) -> Node:
        """The data node the monitor holds as primary (waiting for a healthy pair)."""
        states = self.wait_healthy()
        return next(n for n in self.nodes if states[n.name][0] == "primary")

    def wait_healthy(self, timeout: float = 120) -> dict[str, tuple[str, str]]:
        """Wait for one primary and every other data node a secondary, reported and assigned (synchronous
        again)."""
        return self.wait_states({n.name: ("primary", "secondary") for n in self.nodes}, timeout=timeout)

    def kill_primary(self) -> Node:
        """SIGKILL the primary's whole node (its keeper and its PostgreSQL): a machine that died."""
        victim = self.primary()
        victim.kill9()
        return victim


def write_outage(writes: Iterable[Any], t_kill: float) -> float | None:
    """Seconds from a kill at ``t_kill`` to the answer of the first acknowledged write sent after it
    (``writes``: :class:`tests.ha_cluster.Outcome`), or None if none was."""
    after = [o.ended for o in writes if o.started >= t_kill and 200 <= o.status < 300]
    return min(after) - t_kill if after else None


@contextlib.contextmanager
def formation(*, data_nodes: int = 2, sync_standbys: int = 0) -> Iterator[Formation]:
    """A running formation (monitor, primary, synchronous standbys: :class:`Formation`) with database ``loom``;
    killed and removed on exit. Skips where it cannot run (a failure in CI, by ``tests/conftest.py``)."""
    reason = missing()
    if reason:
        pytest.skip(reason)
    bindir = pg.find_pg_bin()
    assert bindir is not None
    root = Path(tempfile.mkdtemp(prefix="loom-pgha-"))
    f = Formation(root, bindir, data_nodes=data_nodes, sync_standbys=sync_standbys)
    try:
        f.create()
        yield f
    finally:
        f.stop()
        if os.environ.get("LOOM_KEEP_PGHA"):
            print(f"pgha: kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)

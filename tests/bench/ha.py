"""Benchmark tables for replicas behind HAProxy (``make bench`` section ``ha``).

Three real ``loom serve`` replicas on a private PostgreSQL server (as the
store tests start one), the twelve dry agents of clos3-small, Debian's HAProxy
in front health-checking ``/readyz`` (:mod:`tests.balancer`,
:mod:`tests.ha_cluster`).

**Failover**: ``RUNS`` times, with the leader idle and a change reviewed, the
leader is killed (SIGKILL) and a client asks at once, through the balancer, for
the change's commit (a follower queues it: 202). Measured from the kill: a
follower holds the lease (its ``/readyz`` says leader), the new leader has
taken the commit up (its progress is recorded), the change is committed. The
killed replica is started again (in the background) before the next run. The
lease's TTL and renewal interval are printed with the figures: a failover
takes about the TTL less the age of the last renewal, plus a poll.

**Throughput**: reads (``GET /v1/devices?limit=50``) and writes (one-field
PATCHes of a link's capacity, each to a value no other sets, so that each
makes a revision) over keep-alive connections (:mod:`tests.bench.httpload`),
straight to one replica (the reference, no balancer), through HAProxy in front
of that one replica, and through HAProxy in front of all three, in alternating
rounds so that all see the same machine.

Wall-clock figures on a shared machine: the load average is printed with them.
"""

from __future__ import annotations

import itertools
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.table import Table

from tests.bench.httpload import Load, json_request, measure, request_bytes

__all__ = ["run"]

RUNS = 20
TTL, RENEW = 2.0, 0.5
ROUNDS = 3
SECONDS = 2.0
CONNECTIONS = 6


def _load() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.1f} (5 min {five:.1f}) on {os.cpu_count()} cores"


@dataclass
class _Cluster:
    replicas: Any  # tests.ha_cluster.Replicas
    balancer: Any  # tests.balancer.Balancer (all three replicas)
    single: Any  # tests.balancer.Balancer (r0 alone)
    fleet: Any


@contextmanager
def _cluster() -> Iterator[_Cluster]:
    """PostgreSQL, the agents, three replicas, a balancer in front of them all and one in front of r0."""
    from controller import service
    from controller.store.db import Database
    from tests import pg
    from tests.apps import SETUP
    from tests.balancer import Balancer
    from tests.component.test_workflow_api import DOC, Fleet
    from tests.ha_cluster import Replicas

    base = Path(tempfile.mkdtemp(prefix="loom-bench-ha-"))
    try:
        with pg.private_cluster() as server:
            db = Database(server.url)
            db.migrate()
            with db.session() as s:
                service.replace_intent(DOC, session=s, ctx=SETUP)
            db.dispose()
            fleet = Fleet(base / "agents")
            fleet.base.mkdir()
            replicas = Replicas(base, server.url, fleet, 3, ttl=TTL, renew=RENEW)
            (base / "lb3").mkdir()
            (base / "lb1").mkdir()
            balancer = Balancer(base / "lb3", replicas.ports())
            single = Balancer(base / "lb1", {"r0": replicas.servers[0].port})
            try:
                fleet.start()
                replicas.start()
                balancer.start()
                single.start()
                balancer.wait_states({n: "UP" for n in balancer.servers})
                single.wait_states({"r0": "UP"})
                yield _Cluster(replicas, balancer, single, fleet)
            finally:
                single.stop()
                balancer.stop()
                replicas.stop()
                fleet.stop()
    finally:
        shutil.rmtree(base, ignore_errors=True)


# -- failover ----------------------------------------------------------------------------------------
def _reviewed(lb: Any) -> tuple[int, int]:
    """A change toggling spine-0-0's drain on the active revision, reviewed: (change id, its revision)."""
    from tests.ha_cluster import propose, toggle_drain

    active = lb("GET", "/v1/status").json()["active_revision"] or 1
    doc = lb("GET", f"/v1/revisions/{active}/intent").json()
    ch = propose(lb, patch=toggle_drain(doc), base=active)
    return int(ch["id"]), int(ch["proposed_revision"])


def _failover(c: _Cluster) -> tuple[float, float, float, list[int]]:
    """One kill of the idle leader: seconds to a new leader, to the commit taken up, to it committed;
    the statuses the client saw asking for the commit through the balancer."""
    from tests.ha_cluster import Via

    lb = Via(c.balancer.url, timeout=30)
    cid, _ = _reviewed(lb)
    victim = c.replicas.leader()
    others = [s for s in c.replicas.servers if s is not victim]
    t0 = time.monotonic()
    victim.kill9()
    restart = c.replicas.restart_in_background(victim)
    statuses = []
    while True:  # the client asks at once and again until it is answered 202
        r = lb("POST", f"/v1/changes/{cid}/commit", json={})
        statuses.append(r.status_code)
        if r.status_code == 202:
            break
        assert r.status_code == 503 and time.monotonic() - t0 < 60, r.text
        time.sleep(0.05)
    elected = taken = None
    while True:
        now = time.monotonic() - t0
        if elected is None:
            for s in others:
                try:
                    if s("GET", "/readyz", timeout=2).json().get("role") == "leader":
                        elected = time.monotonic() - t0
                except Exception:  # noqa: BLE001 - a replica that does not answer is not the leader
                    pass
        ch = lb("GET", f"/v1/changes/{cid}").json()
        if taken is None and (ch.get("progress") or ch["state"] != "committing"):
            taken = time.monotonic() - t0
        if ch["state"] != "committing" and elected is not None and taken is not None:
            assert ch["state"] == "committed", ch
            done = time.monotonic() - t0
            break
        assert now < 120, ch
        time.sleep(0.01)
    restart.join()
    c.balancer.wait_states({n: "UP" for n in c.balancer.servers})
    c.single.wait_states({"r0": "UP"})
    return elected, taken, done, statuses


def failover_table(c: _Cluster, runs: int | None = None) -> Table:
    runs = runs or RUNS
    rows = [_failover(c) for _ in range(runs)]
    table = Table(title=f"ha: failover after SIGKILL of the idle leader, {runs} runs, lease TTL {TTL:g} s renewed "
                        f"every {RENEW:g} s, 3 replicas behind HAProxy on PostgreSQL; {_load()}")
    for col in ("from the kill to", "min s", "median s", "max s"):
        table.add_column(col, justify="left" if col.startswith("from") else "right")
    for i, what in enumerate(("a follower holds the lease", "the new leader takes the commit up (first commit "
                              "accepted)", "that commit is committed")):
        values = sorted(r[i] for r in rows)
        table.add_row(what, f"{values[0]:.2f}", f"{statistics.median(values):.2f}", f"{values[-1]:.2f}")
    seen = [s for r in rows for s in r[3]]
    table.add_row("the client's commit requests through HAProxy", "", "",
                  ", ".join(f"{n} x {st}" for st, n in sorted({st: seen.count(st) for st in seen}.items())))
    table.add_row("reference: the TTL, the renewal interval", f"{TTL:g}", f"{RENEW:g}", "")
    return table


# -- throughput ----------------------------------------------------------------------------------------
def throughput_table(c: _Cluster) -> Table:
    from tests.ha_cluster import TOKEN

    auth = {"Authorization": f"Bearer {TOKEN}"}
    r0 = c.replicas.servers[0]
    link = r0("GET", "/v1/links?limit=1").json()["items"][0]["id"]
    values = itertools.count(1)

    def write() -> bytes:
        return json_request("PATCH", f"/v1/links/{link}", {"capacity_gbps": 1000 + next(values)}, auth)

    targets = {"one replica, no balancer": r0.port, "HAProxy, 1 replica": c.single.port,
               "HAProxy, 3 replicas": c.balancer.port}
    loads: dict[tuple[str, str], list[Load]] = {}
    for kind, request in (("reads", request_bytes("/v1/devices?limit=50", auth)), ("writes", write)):
        for port in targets.values():
            measure(port, request, seconds=0.5, connections=CONNECTIONS)  # warm
        for _ in range(ROUNDS):
            for name, port in targets.items():
                loads.setdefault((kind, name), []).append(
                    measure(port, request, seconds=SECONDS, connections=CONNECTIONS))
    table = Table(title=f"ha: throughput, {CONNECTIONS} keep-alive connections, {ROUNDS} rounds of {SECONDS:g} s "
                        f"(median req/s, p99 ms over all rounds); {_load()}")
    table.add_column("")
    for name in targets:
        table.add_column(f"{name} req/s", justify="right")
        table.add_column("p99 ms", justify="right")
    table.add_column("3 / 1 replicas", justify="right")
    for kind, what in (("reads", "GET /v1/devices?limit=50"), ("writes", "PATCH /v1/links/ID (a revision each)")):
        cells, rps = [], {}
        for name in targets:
            runs = loads[(kind, name)]
            rps[name] = statistics.median(r.rps for r in runs)
            errors = sum(r.errors for r in runs)
            lat = sorted(x for r in runs for x in r.latencies)
            p99 = lat[min(len(lat) - 1, int(0.99 * len(lat)))] * 1000 if lat else float("nan")
            cells += [f"{rps[name]:,.0f}" + (f" ({errors} errors)" if errors else ""), f"{p99:.1f}"]
        ratio = rps["HAProxy, 3 replicas"] / rps["HAProxy, 1 replica"] if rps["HAProxy, 1 replica"] else 0.0
        table.add_row(what, *cells, f"{ratio:.2f}")
    return table


def run(args: Any) -> list[Table] | str:
    """The failover table, then the throughput table (one cluster for both); why not, where PostgreSQL
    or HAProxy cannot run."""
    from tests import pg
    from tests.balancer import haproxy_missing

    why = pg.missing() or haproxy_missing()
    if why:
        return f"ha: skipped ({why})"
    with _cluster() as c:
        return [failover_table(c), throughput_table(c)]

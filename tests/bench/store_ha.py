"""Benchmark table of the store's failover (``make bench`` section ``store_ha``, issue 31).

Three ``loom serve`` replicas behind HAProxy (:mod:`tests.ha_fixture`) on a pg_auto_failover formation
(:mod:`tests.pgha`: a monitor, a primary and a synchronous standby, health checks tuned as documented
there), writers PATCHing links through HAProxy (:class:`tests.ha_cluster.Traffic`). ``RUNS`` times the
primary's node is SIGKILLed (keeper and PostgreSQL) and started again once the standby took over; then, as
the reference, ``RUNS`` times the Loom leader is SIGKILLed and started again (the store untouched). For
each kill: the **write outage**, from the kill to the answer of the first acknowledged write sent after it
(:func:`tests.pgha.write_outage`), and for the store the time to the standby's promotion as the monitor
reports it. Wall-clock figures on a shared machine: the load average is printed with them.
"""

from __future__ import annotations

import os
import random
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.table import Table

__all__ = ["run"]

RUNS = 10


def _load() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.1f} (5 min {five:.1f}) on {os.cpu_count()} cores"


def _store_kill(ha: Any, formation: Any) -> tuple[float, float]:
    """Kill the primary's node; (its kill time, seconds to the standby's promotion). Starts it again."""
    victim = formation.kill_primary()
    formation.wait_states({n.name: ("wait_primary", "primary") for n in formation.nodes if n is not victim})
    promoted = time.monotonic() - victim.killed_at
    formation.restart(victim)
    formation.wait_healthy()
    ha.all_up(timeout=120)
    return victim.killed_at, promoted


def _leader_kill(ha: Any) -> tuple[float, float]:
    """Kill the Loom leader; (its kill time, seconds to a new leader). Starts it again."""
    replicas = ha.replicas
    victim = replicas.leader()
    victim.kill9()
    t_kill = time.monotonic()
    replicas.leader([s for s in replicas.servers if s is not victim], timeout=60)
    elected = time.monotonic() - t_kill
    replicas.restart_in_background(victim).join()
    ha.all_up(timeout=120)
    return t_kill, elected


def _row(table: Table, what: str, outages: list[float | None], other: list[float]) -> None:
    seen = sorted(x for x in outages if x is not None)
    table.add_row(what, f"{statistics.median(seen):.2f}" if seen else "-", f"{seen[-1]:.2f}" if seen else "-",
                  f"{statistics.median(other):.2f} / {max(other):.2f}", f"{len(outages) - len(seen)}")


def run(args: Any) -> list[Table] | str:
    from tests import pgha
    from tests.balancer import haproxy_missing
    from tests.ha_cluster import Traffic
    from tests.ha_fixture import ha_cluster

    why = pgha.missing() or haproxy_missing()
    if why:
        return f"store_ha: skipped ({why})"
    rng = random.Random(31)
    base = Path(tempfile.mkdtemp(prefix="loom-bench-store-ha-"))
    try:
        with pgha.formation() as formation, ha_cluster(base, formation.url) as ha:
            links = [item["id"] for item in ha.lb("GET", "/v1/links?limit=4").json()["items"]]
            traffic = Traffic(ha.balancer.url, links, pause=0.05)
            traffic.start()
            store: list[tuple[float, float]] = []
            leader: list[tuple[float, float]] = []
            try:
                for _ in range(RUNS):
                    time.sleep(rng.uniform(0.5, 1.0))
                    store.append(_store_kill(ha, formation))
                for _ in range(RUNS):
                    time.sleep(rng.uniform(0.5, 1.0))
                    leader.append(_leader_kill(ha))
                time.sleep(1.0)
            finally:
                traffic.stop()
            writes = [o for o in traffic.outcomes if o.kind == "write"]
            bad = [o for o in traffic.outcomes if o.status >= 500 and o.status != 503]
    finally:
        shutil.rmtree(base, ignore_errors=True)
    table = Table(title=f"store_ha: write outage per failover, {RUNS} SIGKILLs each, 3 replicas behind HAProxy "
                        f"on pg_auto_failover (primary + synchronous standby, tests/pgha.py settings), "
                        f"{len(links)} writers; {len(writes)} writes, {len(bad)} answered 5xx other than 503; "
                        f"{_load()}")
    for col in ("SIGKILL of", "write outage p50 s", "max s", "promotion / election p50 / max s", "no write after"):
        table.add_column(col, justify="left" if col == "SIGKILL of" else "right")
    _row(table, "the store's primary node (pg_autoctl + PostgreSQL)",
         [pgha.write_outage(writes, t) for t, _ in store], [p for _, p in store])
    _row(table, "reference: the Loom leader (store untouched)",
         [pgha.write_outage(writes, t) for t, _ in leader], [e for _, e in leader])
    return [table]

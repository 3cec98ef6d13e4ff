"""Benchmark table of the store's failover (``make bench`` section ``store_ha``, issue 31).

Three ``loom serve`` replicas behind HAProxy (:mod:`tests.ha_fixture`) on a pg_auto_failover formation
(:mod:`tests.pgha`, health checks tuned as documented there), writers PATCHing links through HAProxy
(:class:`tests.ha_cluster.Traffic`). ``RUNS`` times the primary's node is SIGKILLed (keeper and PostgreSQL)
and started again once a standby took over, on each formation of :data:`FORMATIONS`: two data nodes as Loom
runs by default (a write is acknowledged once the standby holds it, :mod:`controller.store.replication`);
the same with that check off (``LOOM_STORE_ACK_STANDBYS=0``, the previous behaviour: the reference for what
the check costs); three data nodes with ``number-sync-standbys 1``. Then, as the reference of a failover
that does not touch the store, ``RUNS`` times the Loom leader is SIGKILLed and started again. For each kill:
the **write outage**, from the kill to the answer of the first acknowledged write sent after it
(:func:`tests.pgha.write_outage`), the time to the standby's promotion as the monitor reports it (or to a
new leader), and how many writes were answered 503 "may or may not have been applied". Wall-clock figures
on a shared machine: the load average is printed with them.
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
    formation.wait_promoted(victim)
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


def _row(table: Table, what: str, outages: list[float | None], other: list[float], writes: list[Any]) -> None:
    seen = sorted(x for x in outages if x is not None)
    doubt = sum(1 for o in writes if o.outcome_unknown)
    table.add_row(what, f"{statistics.median(seen):.2f}" if seen else "-", f"{seen[-1]:.2f}" if seen else "-",
                  f"{statistics.median(other):.2f} / {max(other):.2f}", f"{len(outages) - len(seen)}",
                  f"{len(writes)}", f"{doubt}")


#: (what, data nodes, number-sync-standbys, replicas' extra settings, leader kills too) per formation measured
FORMATIONS: tuple[tuple[str, int, int, dict[str, str], bool], ...] = (
    ("2 data nodes: a write waits for the standby (default)", 2, 0, {}, True),
    ("2 data nodes, LOOM_STORE_ACK_STANDBYS=0 (previous: the primary's COMMIT is enough)", 2, 0,
     {"LOOM_STORE_ACK_STANDBYS": "0"}, False),
    ("3 data nodes, number-sync-standbys 1 (docs/store-ha.md)", 3, 1, {}, False),
)


def _measure(base: Path, nodes: int, sync: int, env: dict[str, str], leader_too: bool,
             rng: random.Random) -> dict[str, Any]:
    """One formation: ``RUNS`` store kills (and leader kills when asked) under writes; what each measured."""
    from tests import pgha
    from tests.ha_cluster import Traffic
    from tests.ha_fixture import ha_cluster

    base.mkdir(parents=True)
    with pgha.formation(data_nodes=nodes, sync_standbys=sync) as formation, \
            ha_cluster(base, formation.url, env=env) as ha:
        links = [item["id"] for item in ha.lb("GET", "/v1/links?limit=4").json()["items"]]
        traffic = Traffic(ha.balancer.url, links, pause=0.05)
        traffic.start()
        store: list[tuple[float, float]] = []
        leader: list[tuple[float, float]] = []
        t0 = time.monotonic()
        try:
            for _ in range(RUNS):
                time.sleep(rng.uniform(0.5, 1.0))
                store.append(_store_kill(ha, formation))
            t_store = time.monotonic()
            for _ in range(RUNS if leader_too else 0):
                time.sleep(rng.uniform(0.5, 1.0))
                leader.append(_leader_kill(ha))
            time.sleep(1.0)
        finally:
            traffic.stop()
    writes = [o for o in traffic.outcomes if o.kind == "write"]
    return {"links": len(links), "store": store, "leader": leader, "writes": writes,
            "store_writes": [o for o in writes if o.started < t_store and o.started >= t0],
            "leader_writes": [o for o in writes if o.started >= t_store],
            "bad": [o for o in traffic.outcomes if o.status >= 500 and o.status != 503]}


def run(args: Any) -> list[Table] | str:
    from tests import pgha
    from tests.balancer import haproxy_missing

    why = pgha.missing() or haproxy_missing()
    if why:
        return f"store_ha: skipped ({why})"
    rng = random.Random(31)
    base = Path(tempfile.mkdtemp(prefix="loom-bench-store-ha-"))
    try:
        runs = [(what, _measure(base / f"f{i}", nodes, sync, env, leader_too, rng))
                for i, (what, nodes, sync, env, leader_too) in enumerate(FORMATIONS)]
    finally:
        shutil.rmtree(base, ignore_errors=True)
    bad = sum(len(r["bad"]) for _, r in runs)
    table = Table(title=f"store_ha: write outage per failover, {RUNS} SIGKILLs each, 3 replicas behind HAProxy "
                        f"on pg_auto_failover (tests/pgha.py settings), {runs[0][1]['links']} writers; "
                        f"{bad} answers 5xx other than 503; {_load()}")
    for col in ("SIGKILL of", "write outage p50 s", "max s", "promotion / election p50 / max s", "no write after",
                "writes", "503 in doubt"):
        table.add_column(col, justify="left" if col == "SIGKILL of" else "right")
    for what, r in runs:
        _row(table, f"the store's primary node; {what}", [pgha.write_outage(r["writes"], t) for t, _ in r["store"]],
             [x for _, x in r["store"]], r["store_writes"])
        if r["leader"]:
            _row(table, "reference: the Loom leader (store untouched, 2 data nodes)",
                 [pgha.write_outage(r["writes"], t) for t, _ in r["leader"]], [e for _, e in r["leader"]],
                 r["leader_writes"])
    return [table]

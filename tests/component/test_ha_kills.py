"""Twenty leader kills mid-commit lose no acknowledged write through HAProxy (issue 31): the longest test of
the HA suite, in a module of its own so that pytest-xdist runs it beside the others (each module gets its own
cluster, :mod:`tests.ha_fixture`).
"""

from __future__ import annotations

import random
import time
from typing import Any

import pytest

from tests.ha_cluster import Traffic, check_history, settle, wait_step
from tests.ha_fixture import HA, KILLS, RENEW, SLACK, TTL
from tests.ha_fixture import ha_commit as _commit
from tests.ha_fixture import ha_status as _status

pytestmark = [pytest.mark.postgres, pytest.mark.haproxy]


# -- SIGKILL, twenty times -------------------------------------------------------------------------
def test_twenty_leader_kills_mid_commit_lose_no_acknowledged_write_through_haproxy(ha: HA) -> None:
    replicas, lb = ha.replicas, ha.lb
    rng = random.Random(KILLS)
    since = _status(lb)["head_revision"]
    links = [item["id"] for item in lb("GET", "/v1/links?limit=6").json()["items"]][3:5]
    traffic = Traffic(ha.balancer.url, links, pause=0.15)
    rows: list[tuple[float, float, str]] = []
    killed_at: list[tuple[float, float]] = []
    resent_before = ha.balancer.retries()
    kills = 0
    pending: list[tuple[str, Any]] = []  # (name, restart) of killed replicas starting again
    traffic.start()
    try:
        active = _status(lb)["active_revision"]
        if active is None:  # alone, this test starts from a fabric with nothing committed: commit once first
            first = settle(lb, _commit(lb, active)["id"])
            assert first["state"] == "committed", first
            active = first["proposed_revision"]
        lost_before, ch = lease_moves(ha), _commit(lb, active)
        missed = lapses = 0
        while len(rows) < KILLS:
            if not wait_step(lb, ch["id"], "commit"):  # the commit ended before its Commits were seen
                missed += 1
                assert missed <= KILLS, "the commits kept ending before they could be caught"
                done = settle(lb, ch["id"])
                if done["state"] != "committed":
                    # No kill hit it, so only a lease that lapsed under load (a leader stalled past TTL) may
                    # have ended it otherwise: the next leader then finished or undid it, as after a kill, and
                    # every switch is on the revision active after it. Anything else fails, with the leases'
                    # story from the replicas' logs.
                    why = done["transitions"][-1]["reason"] or ""
                    assert "recovered after a controller restart" in why and lapse_seen(ha, lost_before), (
                        done["id"], done["transitions"], lease_story(ha)[-60:])
                    lapses += 1
                    assert ha.fleet.hashes() == ha.expected(active)  # the rollback left the active revision
                else:
                    active = done["proposed_revision"]
                lost_before, ch = lease_moves(ha), _commit(lb, active)
                continue
            kills += 1
            assert kills <= KILLS + 10, "the kills kept landing after their commit had ended"
            time.sleep(rng.uniform(0.0, 0.3))  # somewhere in the Commits of the first stage
            victim = replicas.leader()
            t_kill = time.monotonic()
            victim.kill9()
            t0 = time.monotonic()
            killed_at.append((t_kill, t0))
            others = [s for s in replicas.servers if s is not victim]
            caught = lb("GET", f"/v1/changes/{ch['id']}").json()["state"] == "committing"
            replicas.leader(others, timeout=TTL + RENEW + 60)
            elected = time.monotonic() - t0
            # The victim starts again only once a follower leads: restarted at once, it could win the lapsed
            # lease itself (its first attempt comes before the followers' next), and no follower would lead.
            pending.append((replicas.name(victim), replicas.restart_in_background(victim)))
            assert elected <= TTL + RENEW + SLACK, f"kill {kills}: a new leader after {elected:.1f} s"
            done = settle(lb, ch["id"])
            recovered = time.monotonic() - t0
            assert done["state"] in ("committed", "rolled_back"), done
            before, active = active, _status(lb)["active_revision"]
            assert active == (done["proposed_revision"] if done["state"] == "committed" else before)
            assert ha.fleet.hashes() == ha.expected(active), f"kill {kills}: a switch is not on revision {active}"
            if caught:  # killed while committing: the next leader finished or undid it
                assert "recovered after a controller restart" in done["transitions"][-1]["reason"], done
                rows.append((elected, recovered, done["state"]))
            while len(pending) > 1:  # one replica may still be starting at the next kill: two others are up
                name, restart = pending.pop(0)
                restart.join()
                ha.balancer.wait_states({name: "UP"})
            lost_before, ch = lease_moves(ha), _commit(lb, active)
        last = settle(lb, ch["id"])
        assert last["state"] == "committed", last
        assert ha.fleet.hashes() == ha.expected(last["proposed_revision"])
    finally:
        traffic.stop()
        for _, restart in pending:
            restart.join()
    ha.all_up()  # three replicas again for the next test
    reads = [o for o in traffic.outcomes if o.kind == "read"]
    writes = [o for o in traffic.outcomes if o.kind == "write"]

    def near_a_kill(o: Any) -> bool:
        return any(o.started <= b + 0.5 and o.ended >= a - 0.05 for a, b in killed_at)
    # HAProxy replays a read elsewhere when its replica dies before answering; one whose answer had begun
    # (the headers forwarded, the body not yet sent) when the replica died is cut short: only those fail.
    cut_reads = [o for o in reads if o.status == 0 and near_a_kill(o)]
    bad_reads = [o for o in reads if not (o.status == 200 or (o.status == 503 and o.retry_after))
                 and o not in cut_reads]
    assert bad_reads == [], bad_reads[:5]
    assert [o for o in traffic.outcomes if o.status >= 500 and o.status != 503] == []  # no 500, 502, 504
    # A write in flight on the replica that was killed is replayed by HAProxy on another replica with its
    # Idempotency-Key (the client's, or the one the balancer gave it): answered once, applied once. Only when
    # the replays fail too does the client get the balancer's 503 (with Retry-After), and a keyed client's retry
    # with the same key then finds the write done or does it. No write goes without an answer.
    assert [o for o in writes if o.status in (0, 502)] == [], [o for o in writes if o.status in (0, 502)][:5]
    lost_answers = [o for o in writes if o.replica_lost]
    assert all(near_a_kill(o) for o in lost_answers), lost_answers[:5]
    assert all(o.key is None for o in lost_answers), lost_answers[:5]  # a keyed client retried until answered
    replays = [o for o in writes if o.replayed]  # the write had been applied by the replica that died with it
    resent = {k: v - resent_before[k] for k, v in ha.balancer.retries().items()}
    sample = random.Random(since)  # the content of every write near a kill, and of one in ten of the others

    def read_diff(o: Any) -> bool:
        return any(o.started <= b + 3 and o.ended >= a - 1 for a, b in killed_at) or sample.random() < 0.1
    report = check_history(lb, writes, since=since, read_diff=read_diff)
    assert report.acknowledged > 0
    elected_s = sorted(r[0] for r in rows)
    recovered_s = sorted(r[1] for r in rows)
    states = {s: sum(1 for r in rows if r[2] == s) for s in ("committed", "rolled_back")}
    retried = sum(1 for o in writes if o.attempts > 1)
    print(f"\n{KILLS} leader kills mid-commit ({kills - KILLS} more landed after their commit ended, "
          f"{missed} commits ended before they could be caught, {lapses} of them by a lease lapsed under load): "
          f"new leader {elected_s[0]:.2f}/{elected_s[len(rows) // 2]:.2f}/{elected_s[-1]:.2f} s, change settled "
          f"{recovered_s[0]:.2f}/{recovered_s[len(rows) // 2]:.2f}/{recovered_s[-1]:.2f} s (min/median/max), "
          f"recovered {states}; clients through HAProxy: {len(reads)} reads ({len(cut_reads)} cut short by a kill), "
          f"{len(writes)} writes ({sum(1 for o in writes if o.key)} with the client's key), "
          f"HAProxy sent {resent['retries']} requests again ({resent['redispatches']} to another replica), "
          f"{len(replays)} answered by a replay of a write the killed replica had applied, "
          f"{retried} retried by the client after a 503, "
          f"{len(lost_answers)} unkeyed writes answered the balancer's 503: {report}")


def lease_story(ha: HA) -> list[str]:
    """The replicas' log lines about leases and recoveries, in each replica's order."""
    keys = ("lease", "was committing when", "recovered change")
    return [f"{ha.replicas.name(s)}: {line.strip()}" for s in ha.replicas.servers if s.log.exists()
            for line in s.log.read_text(errors="replace").splitlines() if any(k in line for k in keys)]


def lease_moves(ha: HA) -> int:
    """How many times a replica logged that it lost the lease it held or acquired one (a new epoch: a leader
    whose lease lapsed may take it again itself)."""
    return sum(1 for line in lease_story(ha) if "lease lost" in line or "lease acquired" in line)


def lapse_seen(ha: HA, before: int, timeout: float = 15) -> bool:
    """Whether the replicas log a move of the lease beyond the ``before`` first ones within ``timeout`` s (a
    stalled leader logs its loss when it next tries to renew)."""
    deadline = time.monotonic() + timeout
    while lease_moves(ha) <= before:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


# -- a lease flapping under a slow store -----------------------------------------------------------

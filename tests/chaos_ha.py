"""The chaos run with Loom deployed as production runs it (#31): replicas, a replicated store, auto-TE.

:class:`FullChaosLab` is :class:`tests.chaos.ChaosLab` on clos3-hosts (two hosts per ToR, two ToR uplinks at
half capacity, as in the closed-loop lab test) whose controller is :class:`Replicated`: two ``loom serve
--lab`` replicas (leases of 3 s renewed every 0.5 s) on a pg_auto_failover formation (:mod:`tests.pgha`: a
monitor and three data nodes with ``number-sync-standbys`` 1, so that a commit is on two nodes even while one
is down, as ``docs/store-ha.md`` says to run it) behind HAProxy (:mod:`tests.balancer`). Every API call of the
run, the writers' included, goes through the balancer. The hosts send UDP the whole time (one of two matrices,
:data:`MATRICES`) and the intent runs auto-TE. The mix is :data:`FULL_KINDS`, the chaos kinds and two more:

* ``controller`` kills the **leader** replica during a commit (the follower takes the lease over and recovers
  the commit in flight); it is started again after the outage;
* ``replica`` kills a follower during a commit (the requests it had are cut: the balancer replays the reads
  and the keyed writes on the leader), started again after the outage;
* ``store``: the store's primary machine dies during a commit (:meth:`tests.pgha.Formation.kill_primary`: its
  keeper and PostgreSQL together) and comes back after the outage as the new standby; the round ends only once
  the formation is a primary with synchronous standbys again;
* ``autote``: the operator's edits are committed first (the writers are held: auto-TE never commits over
  uncommitted edits), the hosts switch to the other matrix, and once auto-TE's own change is committing, one of
  :data:`AUTOTE_FAULTS` strikes it;
* ``reaction`` (the chaos run's) strikes the failure reaction's commit with the follower and the store too.

The checks are the chaos run's: after every round the fabric is quiet with every device and kernel on the
active plan; at the end every acknowledged write is in the history exactly once.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any

import httpx

from controller.model.intent import load_intent
from tests import pgha
from tests.balancer import NO_REPLICA, Balancer
from tests.chaos import CHAOS_ENV, CHAOS_KINDS, STRIKES, ChaosLab
from tests.faults import REPO, Round
from tests.ha_cluster import TOKEN as TRAFFIC_TOKEN
from tests.labkit import HostTraffic
from tests.serving import LoomServer, request

__all__ = ["AUTOTE_FAULTS", "FULL_KINDS", "FullChaosLab", "Replicated"]

FULL_KINDS = (*CHAOS_KINDS, "replica", "store", "autote")
#: what strikes an auto-TE commit
AUTOTE_FAULTS = (*STRIKES, "replica", "store", "link")
#: two ToR uplinks at half capacity: the first plan leaves the heavy demand of either matrix on one of them
HALF = {("tor-0-0", "eth2"), ("tor-0-1", "eth1")}
MATRICES = (
    [{"from": "tor-0-0", "to": "10.1.0.0/24", "gbps": 0.03}, {"from": "tor-1-1", "to": "10.0.0.0/24", "gbps": 0.01}],
    [{"from": "tor-0-1", "to": "10.1.1.0/24", "gbps": 0.03}, {"from": "tor-1-0", "to": "10.0.1.0/24", "gbps": 0.01}],
)
AUTO_TE = {"kind": "auto_te", "interval_s": 3, "window_s": 4, "stat": "mean", "headroom": 1.1, "min_gain": 0.05}
#: seconds an auto-TE change is waited for after the traffic switched
AUTOTE_WAIT = 90.0
#: the answers a read through the balancer is retried after (a failover: no leader, no store, no replica)
RETRIED = {502, 503, 504}


def full_intent(name: str) -> dict[str, Any]:
    doc = load_intent(REPO / "labs" / "clos3-hosts" / "intent.yaml").to_document()
    doc["name"] = name
    for link in doc["links"]:
        if (link["a"], link["a_port"]) in HALF:
            link["capacity_gbps"] = 0.025
    doc["policies"] = [{"kind": "utilization_limit", "max": 0.95},
                       {"kind": "failure_reaction", "enabled": True, "detect_s": 1, "hold_down_s": 2,
                        "max_per_hour": 1000}, AUTO_TE]
    return doc


class Replicated:
    """``n`` replicas of ``loom serve ARGS`` on a pg_auto_failover formation behind HAProxy, with
    :class:`tests.serving.LoomServer`'s interface: the first :meth:`start` brings everything up (the replicas one
    after another: the first migrates the store), a later one starts the replicas that are not running;
    :meth:`kill9` kills the leader; calls go through the balancer (reads retried through a failover)."""

    def __init__(self, base: Path, args: list[str], token: str, *, env: dict[str, str], n: int = 2,
                 ttl: float = 3.0, renew: float = 0.5, request_timeout: float = 60.0):
        self.base, self.args, self.token, self.env, self.n = base, args, token, env, n
        self.lease = {"LOOM_LEASE_TTL": str(ttl), "LOOM_LEASE_RENEW": str(renew)}
        self.request_timeout = request_timeout
        self.stack = contextlib.ExitStack()
        self.formation: pgha.Formation | None = None
        self.servers: list[LoomServer] = []
        self.balancer: Balancer | None = None
        self.url = ""
        self.leader_kills = self.follower_kills = self.store_kills = 0

    def start(self) -> None:
        if self.formation is not None:
            for s in self.servers:
                if s.proc is None or s.proc.poll() is not None:
                    s.start()
            return
        self.formation = self.stack.enter_context(pgha.formation(data_nodes=3, sync_standbys=1))
        for i in range(self.n):
            (self.base / f"r{i}").mkdir(exist_ok=True)
            self.servers.append(LoomServer(
                self.base / f"r{i}", ["--db", self.formation.url, *self.args], self.token, cwd=REPO,
                env={**self.env, **self.lease, "LOOM_REPLICA_ID": f"r{i}"}, ready_timeout=180,
                request_timeout=self.request_timeout))
            self.servers[-1].start()
        self.balancer = Balancer(self.base, {f"r{i}": s.port for i, s in enumerate(self.servers)})
        self.balancer.start()
        self.balancer.wait_states({f"r{i}": "UP" for i in range(self.n)}, 60)
        self.url = self.balancer.url

    def stop(self, grace: float = 30.0) -> None:
        if self.balancer is not None:
            self.balancer.stop()
        for s in self.servers:
            s.stop(grace)
        self.stack.close()

    def leader(self, timeout: float = 60.0) -> LoomServer:
        deadline = time.monotonic() + timeout
        while True:
            for s in self.servers:
                try:
                    if s.proc is not None and s.proc.poll() is None and \
                            s("GET", "/readyz", timeout=2).json().get("role") == "leader":
                        return s
                except (httpx.HTTPError, ValueError):  # a replica that does not answer is not the leader
                    pass
            assert time.monotonic() < deadline, "no leader among the replicas"
            time.sleep(0.05)

    def kill9(self) -> str:
        """The leader dies at once (the follower takes the lease over when it lapses): its name."""
        victim = self.leader()
        victim.kill9()
        self.leader_kills += 1
        return f"r{self.servers.index(victim)}"

    def kill_follower(self) -> str:
        """A replica that is not the leader dies at once: its name."""
        leader = self.leader()
        victim = next(s for s in self.servers if s is not leader)
        victim.kill9()
        self.follower_kills += 1
        return f"r{self.servers.index(victim)}"

    def kill_store(self) -> pgha.Node:
        """The store's primary machine dies (:meth:`tests.pgha.Formation.kill_primary`)."""
        assert self.formation is not None
        self.store_kills += 1
        return self.formation.kill_primary()

    def __call__(self, method: str, path: str, **kw: Any) -> httpx.Response:
        """An API call through the balancer with the admin token; a read answered 502-504 or not at all (a
        failover) is asked again for up to a minute, and so is any call the balancer refused itself, sent to
        no replica (its 503 while health checks have every replica down: on a loaded machine a replica's
        ``/readyz`` can outlast the check's timeout, as it did in a CI run)."""
        headers = {"Authorization": f"Bearer {self.token}", **kw.pop("headers", {})}
        kw.setdefault("timeout", self.request_timeout)
        deadline = time.monotonic() + 60
        while True:
            try:
                r = request(method, self.url + path, headers=headers, **kw)
                again = (method == "GET" and r.status_code in RETRIED) or _unsent(r)
                if not again or time.monotonic() > deadline:
                    return r
            except httpx.TransportError:
                if method != "GET" or time.monotonic() > deadline:
                    raise
            time.sleep(0.5)


def _unsent(r: httpx.Response) -> bool:
    """``r`` is the balancer's own 503 for a request it sent to no replica (every one was down)."""
    if r.status_code != 503 or "json" not in r.headers.get("content-type", ""):
        return False
    with contextlib.suppress(ValueError):
        return bool(r.json().get("type") == NO_REPLICA)
    return False


class FullChaosLab(ChaosLab):
    """The chaos lab with :class:`Replicated` for a controller, hosts sending traffic and auto-TE on."""

    def __init__(self, base: Path, seed: int, *, name: str = "chaosha", settle_timeout: float = 180.0,
                 say: Any = None):
        super().__init__(base, seed, name=name, settle_timeout=settle_timeout, say=say)
        self.intent = full_intent(name)
        self.hosts = 2
        self.ctl: Replicated = Replicated(  # type: ignore[assignment]
            base, ["--lab", str(self.lab_dir)], TRAFFIC_TOKEN,
            env={**CHAOS_ENV, "LOOM_TELEMETRY_INTERVAL_S": "1", "LOOM_AUTO_TE_CONFIRM": "2"})
        self.kernels_checked = FULL_KINDS
        self.strikes = (*STRIKES, "replica", "store")
        self.host_traffic: HostTraffic | None = None
        self.matrix = 0

    def up(self) -> None:
        super().up()
        assert self.topo is not None
        self.host_traffic = HostTraffic(self.topo, duration=24 * 3600.0)  # the run's whole length
        self.host_traffic.run(MATRICES[self.matrix])

    def down(self) -> None:
        if self.host_traffic is not None:
            self.host_traffic.stop()
        super().down()

    # -- the rounds ------------------------------------------------------------------------------
    def fault_round(self, index: int, kind: str) -> Round:
        return self._autote(index) if kind == "autote" else super().fault_round(index, kind)

    def _fault(self, kind: str, outage: float) -> str:
        if kind in ("controller", "replica"):
            name = self.ctl.kill9() if kind == "controller" else self.ctl.kill_follower()
            time.sleep(outage)
            self.ctl.start()
            return f"{'leader' if kind == 'controller' else 'follower'} {name}"
        if kind != "store":
            return super()._fault(kind, outage)
        assert self.ctl.formation is not None
        victim = self.ctl.kill_store()
        time.sleep(outage)
        self.ctl.formation.restart(victim)
        return f"store:{victim.name}"

    def _autote(self, index: int) -> Round:
        """Commit the operator's edits (writers held), switch the hosts' matrix, and strike auto-TE's change
        while it commits (or, when auto-TE commits nothing in :data:`AUTOTE_WAIT` s, the steady fabric)."""
        rnd = Round(index, "autote")
        self._wait_idle(time.monotonic() + self.settle_timeout)
        assert self.traffic is not None and self.host_traffic is not None
        self.traffic.hold()
        try:
            self._commit_head()
            before = self._last_auto_te()
            self.matrix = 1 - self.matrix
            self.host_traffic.run(MATRICES[self.matrix])
            cid = self._new_change(lambda c: c.get("author") == "auto-te", before, time.monotonic() + AUTOTE_WAIT)
            time.sleep(self.rng.uniform(0.0, self.commit_estimate) if cid else 0.0)
            kind = self.rng.choice(AUTOTE_FAULTS)
            rnd.outage_s = round(self.rng.uniform(1.0, 3.0), 2)
            rnd.target = f"{kind} {self._fault(kind, rnd.outage_s)}"
            if cid:
                rnd.change = cid
                rnd.state = self._final(cid, time.monotonic() + self.settle_timeout)["state"]
            else:
                rnd.state = "no auto-te change"
            rnd.ok = True
        except AssertionError as exc:
            rnd.detail = str(exc)[:3000]
        finally:
            self.traffic.resume()
        return rnd

    def _commit_head(self) -> None:
        """A drain toggle on the head, committed: the writers' edits are active, auto-TE is free to act."""
        cid = self.reviewed_toggle(self.get("/v1/status")["head_revision"])
        c = self.ctl("POST", f"/v1/changes/{cid}/commit", json={})
        assert c.status_code == 202, c.text
        ch = self._final(cid, time.monotonic() + self.settle_timeout)
        assert ch["state"] == "committed", ch
        self._wait_idle(time.monotonic() + self.settle_timeout)

    def _last_auto_te(self) -> int:
        items = self.get("/v1/changes?limit=20")["items"]
        return max((c["id"] for c in items if c.get("author") == "auto-te"), default=0)

    def _wait_quiet(self, deadline: float) -> None:
        assert self.ctl.formation is not None
        self.ctl.formation.wait_healthy(timeout=max(10.0, deadline - time.monotonic()))
        super()._wait_quiet(deadline)

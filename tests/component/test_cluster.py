"""The leader lease, the agents' fence, the commit queue and the one-process rule of SQLite.

Leases are taken and renewed on a real store (PostgreSQL for several replicas,
SQLite for one) by real :class:`Cluster` objects with a short TTL; nothing about
the store is mocked. Their claims are checked by sampling every replica's
``is_leader()`` many times a second: never two at once, even when the store
answers a renewal more slowly than the TTL. The fence is the agent's own
(:class:`AgentCore` on a dry backend, and over gRPC through the driver). The
queue: a commit asked of a follower app is run by the leader app on the same
PostgreSQL store, and both read the same outcome.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from api.app import create_app
from controller.model.errors import AgentError, SingleReplicaStore, StoreUnavailable
from controller.settings import Settings
from controller.store.db import Database
from controller.workflow.cluster import Cluster, SingleReplicaLock, sqlite_lock_path
from southbound.config import DeviceConfig
from southbound.device.agent import AgentCore, serve
from southbound.device.dry import DryDriver
from southbound.device.frr_apply import DryFrr
from southbound.driver import AgentDriver
from southbound.state import CALLER
from tests.apps import Api, TestClient, running_api
from tests.pg import drop_schema
from tests.serving import LOOM, LoomServer

pytestmark = pytest.mark.anyio


@pytest.fixture
def pg_db(postgres_url: str) -> Any:
    db = Database(postgres_url)
    drop_schema(db)
    db.migrate()
    yield db
    db.dispose()


def replica(db: Database, name: str, ttl: float = 1.0, renew: float = 0.3) -> Cluster:
    return Cluster(Settings(db_url=db.url, replica_id=name, lease_ttl=ttl, lease_renew=renew), db)


async def sample_leaders(replicas: list[Cluster], seconds: float) -> list[set[str]]:
    """Who believes it leads, every 5 ms for ``seconds``."""
    seen: list[set[str]] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        seen.append({c.replica for c in replicas if c.is_leader()})
        await asyncio.sleep(0.005)
    return seen


@pytest.mark.postgres
async def test_one_leader_and_a_lapsed_lease_passes_on_with_a_higher_epoch(pg_db: Database) -> None:
    a, b = replica(pg_db, "a"), replica(pg_db, "b")
    await a.start()
    await b.start()
    try:
        assert a.is_leader() and not b.is_leader() and a.epoch == 1
        seen = await sample_leaders([a, b], 1.5)  # a renews past its TTL; b keeps trying
        assert all(s == {"a"} for s in seen)
        doc = await b.document()
        assert doc.leader == "a" and doc.epoch == 1 and doc.role == "follower"
        assert {r.id for r in doc.replicas} == {"a", "b"}
        assert a._task is not None
        a._task.cancel()  # a freezes: no more renewals
        seen = await sample_leaders([a, b], 2.0)
        assert all(len(s) <= 1 for s in seen)
        assert seen[-1] == {"b"} and b.epoch == 2
        await a.tick()  # a wakes: its renewal of epoch 1 fails, it follows
        assert not a.is_leader() and b.is_leader()
    finally:
        await b.stop()
        await a.stop()


@pytest.mark.postgres
async def test_a_slow_store_never_makes_two_leaders(pg_db: Database) -> None:
    """Every attempt of every replica takes up to 1.5 TTL in the store: leadership flaps, never doubles."""
    replicas = [replica(pg_db, f"r{i}", ttl=0.6, renew=0.2) for i in range(3)]
    for i, c in enumerate(replicas):
        slow = c._attempt

        def attempt(slow: Any = slow, i: int = i) -> Any:
            time.sleep((0.2, 0.9, 0.5)[i] * (1 + (time.monotonic() * 7) % 1))  # 0.2..1.8 s
            return slow()
        c._attempt = attempt  # type: ignore[method-assign]
    for c in replicas:
        await c.start()
    try:
        seen = await sample_leaders(replicas, 6.0)
    finally:
        for c in replicas:
            await c.stop()
    assert all(len(s) <= 1 for s in seen), [s for s in seen if len(s) > 1][:3]
    assert any(seen), "somebody led at some point"
    epochs = [c.epoch for c in replicas if c.epoch]
    assert len(set(epochs)) == len(epochs)  # each acquisition had an epoch of its own


@pytest.mark.postgres
def test_a_process_paused_inside_a_write_transaction_does_not_keep_its_locks(pg_db: Database) -> None:
    """A leader frozen (SIGSTOP) inside a write transaction holds its row locks; PostgreSQL ends that
    transaction once it idles past ``write_idle_timeout_s``, so the next leader's write goes through
    instead of timing out on the lock for as long as the frozen process sleeps."""
    from sqlalchemy import exc as sa_exc
    from sqlalchemy import text

    from controller.store.db import write_transaction

    frozen = Database(pg_db.url, write_idle_timeout_s=1.0)
    other = Database(pg_db.url, lock_timeout_s=10.0)
    try:
        through = False
        with frozen.session() as s:
            with pytest.raises((sa_exc.SQLAlchemyError, StoreUnavailable)):  # the paused one is gone: it cannot go on
                with write_transaction(s):
                    s.execute(text("UPDATE leader_lease SET epoch = epoch WHERE id = 1"))
                    with other.session() as o:  # waits on the row lock until PostgreSQL ends the idle one
                        with write_transaction(o):  # (else it gives up after its 10 s lock_timeout: an error)
                            o.execute(text("UPDATE leader_lease SET epoch = epoch WHERE id = 1"))
                    through = True
                    s.execute(text("SELECT 1"))
        assert through
    finally:
        frozen.dispose()
        other.dispose()


async def test_stop_gives_the_lease_up_and_the_next_replica_takes_it_at_once(tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path / 'loom.db'}")
    db.migrate()
    a = replica(db, "a", ttl=30, renew=10)
    await a.start()
    assert a.is_leader() and a.epoch == 1
    await a.stop()
    b = replica(db, "b", ttl=30, renew=10)
    await b.start()  # on SQLite the one process takes over at once anyway; the lease says so
    try:
        assert b.is_leader() and b.epoch == 2
        assert (await b.document()).leader == "b"
    finally:
        await b.stop()
        db.dispose()


def test_a_second_process_on_one_sqlite_file_is_refused(tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path / 'loom.db'}")
    path = sqlite_lock_path(db)
    assert path == (tmp_path / "loom.db.lock").resolve()
    first = SingleReplicaLock(path, holder="pid 1 on http://127.0.0.1:1")
    first.acquire()
    with pytest.raises(SingleReplicaStore, match="pid 1 on http://127.0.0.1:1.*SQLite allows one replica"):
        SingleReplicaLock(path).acquire()
    first.release()
    SingleReplicaLock(path).acquire()  # free again (the lock dies with its descriptor)
    assert sqlite_lock_path(Database("sqlite://")) is None


def test_loom_serve_refuses_to_start_beside_another_on_the_same_sqlite_file(tmp_path: Path) -> None:
    token = "t" + "0123456789abcdefghijklmnopqrstuvwxyz"
    first = LoomServer(tmp_path, ["--db", str(tmp_path / "loom.db")], token)
    first.start()
    try:
        second = subprocess.run([*LOOM, "serve", "--db", str(tmp_path / "loom.db"), "--port", "0"],
                                capture_output=True, text=True, timeout=60,
                                env={"LOOM_ADMIN_TOKEN": token, "PATH": "/usr/bin:/bin", "COLUMNS": "300"})
        assert second.returncode == 2, second.stdout + second.stderr
        assert "SQLite allows one replica" in second.stderr and "another loom serve" in second.stderr
        assert first("GET", "/readyz").json()["role"] == "leader"
    finally:
        first.stop()


def test_cluster_view_readiness_role_and_metrics(api: Any) -> None:
    doc = api("GET", "/v1/cluster", role="viewer").json()
    assert doc["role"] == "leader" and doc["leader"] == doc["replica"] and doc["epoch"] >= 1
    assert [r["id"] for r in doc["replicas"]] == [doc["replica"]]
    assert doc["lease"]["ttl_s"] == 10 and doc["lease"]["renew_s"] == pytest.approx(10 / 3)
    assert api("GET", "/v1/cluster", role=None).status_code == 401
    assert api("GET", "/readyz", role=None).json()["role"] == "leader"
    text = api("GET", "/metrics", role=None).text
    assert "loom_leader 1.0" in text and "loom_lease_renewals_total" in text
    assert f"loom_lease_epoch {float(doc['epoch'])}" in text


def test_lease_timing_is_validated() -> None:
    with pytest.raises(ValueError, match="must be shorter than LOOM_LEASE_TTL"):
        Settings(lease_ttl=3, lease_renew=3)
    assert Settings(lease_ttl=9).lease_renew_interval == 3


# -- the fence -------------------------------------------------------------------------------

def _config(name: str, prefix: str) -> DeviceConfig:
    return DeviceConfig(hostname=name, asn=65001, router_id="10.255.0.1", originated=(prefix,))


async def test_the_agent_refuses_an_older_epoch_and_remembers_the_newest_across_restarts(tmp_path: Path) -> None:
    core = AgentCore(DryFrr(tmp_path / "dry"), tmp_path, "tor-0-0")
    await core.start()
    assert (await core.prepare("c1", _config("tor-0-0", "10.0.0.0/24"), epoch=1)).changed
    await core.commit("c1", 0, epoch=1)
    await core.state((), epoch=2)  # a new leader reads: the fence rises to 2
    with pytest.raises(AgentError, match=r"fenced: Prepare of change c2 comes from the leader of epoch 1, "
                                         r"but this agent follows epoch 2") as err:
        await core.prepare("c2", _config("tor-0-0", "10.9.0.0/24"), epoch=1)
    assert err.value.code == "failed_precondition"
    await core.prepare("c3", _config("tor-0-0", "10.3.0.0/24"), epoch=2)
    await core.close()
    again = AgentCore(DryFrr(tmp_path / "dry"), tmp_path, "tor-0-0")  # the agent restarts
    await again.start()
    with pytest.raises(AgentError, match="fenced: Commit"):
        await again.commit("c3", 0, epoch=1)
    log = again.epoch_log()
    assert log["epoch"] == 2 and [e["epoch"] for e in log["raised"]] == [1, 2]
    assert [(e["call"], e["epoch"], e["fence"]) for e in log["refused"]] == [("Prepare", 1, 2), ("Commit", 1, 2)]
    # a call that carries no epoch (a tool, a review's preview) is not fenced; a preview stores nothing
    out = await again.prepare("review-x", _config("tor-0-0", "10.7.0.0/24"), preview=True)
    assert out.changed and "10.7.0.0/24" in out.diff
    assert (await again.info()).prepared_change == "c3"
    await again.close()


async def test_the_epoch_travels_as_grpc_metadata_and_an_older_one_is_failed_precondition(tmp_path: Path) -> None:
    core = AgentCore(DryFrr(tmp_path / "dry"), tmp_path / "state", "tor-0-0")
    stop = asyncio.Event()
    ready = asyncio.Event()
    server = asyncio.create_task(serve(core, f"unix:{tmp_path / 'agent.sock'}", ready=ready.set, stop=stop))
    await asyncio.wait_for(ready.wait(), 30)
    try:
        async with AgentDriver({"tor-0-0": f"unix:{tmp_path / 'agent.sock'}"}) as drv:
            new, old = drv.fenced(5), drv.fenced(4)
            assert not (await new.prepare("tor-0-0", "c1", _config("tor-0-0", "10.0.0.0/24"))).failed
            r = await old.commit("tor-0-0", "c1", 0)
            assert r.failed and r.error.startswith("FAILED_PRECONDITION: fenced: Commit of change c1")
            assert not (await new.commit("tor-0-0", "c1", 0)).failed
            assert not (await drv.preview("tor-0-0", "r", _config("tor-0-0", "10.1.0.0/24"))).failed
            await new.close()  # a view closes nothing: the driver still works
            assert (await drv.state("tor-0-0")).running_hash
        assert core.epoch == 5 and AgentCore.read_epoch_log(tmp_path / "state")["refused"][0]["epoch"] == 4
    finally:
        stop.set()
        await server


async def test_the_agent_records_which_replica_raised_each_epoch_and_a_second_one_using_it(tmp_path: Path) -> None:
    """The replica travels as ``loom-replica`` beside the epoch: the epoch log says who raised each epoch, and
    a call of the current epoch from another replica (two leaders of one epoch) is listed as shared, once."""
    state = tmp_path / "state"
    core = AgentCore(DryFrr(tmp_path / "dry"), state, "tor-0-0")
    stop = asyncio.Event()
    ready = asyncio.Event()
    server = asyncio.create_task(serve(core, f"unix:{tmp_path / 'agent.sock'}", ready=ready.set, stop=stop))
    await asyncio.wait_for(ready.wait(), 30)
    try:
        async with AgentDriver({"tor-0-0": f"unix:{tmp_path / 'agent.sock'}"}) as drv:
            a, b, c = drv.fenced(3, "r-a"), drv.fenced(3, "r-b"), drv.fenced(4, "r-c")
            assert not (await a.prepare("tor-0-0", "c1", _config("tor-0-0", "10.0.0.0/24"))).failed
            assert not (await a.commit("tor-0-0", "c1", 0)).failed
            log = AgentCore.read_epoch_log(state)
            assert [(e["epoch"], e["replica"]) for e in log["raised"]] == [(3, "r-a")] and log["shared"] == []
            await b.state("tor-0-0")  # accepted (the fence refuses only lower epochs), but recorded
            await b.state("tor-0-0")
            await c.state("tor-0-0")
            await drv.fenced(4, "r-c").info("tor-0-0")
        log = AgentCore.read_epoch_log(state)
        assert [(e["epoch"], e["replica"], e["holder"]) for e in log["shared"]] == [(3, "r-b", "r-a")]
        assert [(e["epoch"], e["replica"]) for e in log["raised"]] == [(3, "r-a"), (4, "r-c")]
    finally:
        stop.set()
        await server
    again = AgentCore(DryFrr(tmp_path / "dry"), state, "tor-0-0")  # restarted: it still knows who raised 4
    await again.start()
    token = CALLER.set("r-d")
    try:
        await again.state((), epoch=4)
    finally:
        CALLER.reset(token)
        await again.close()
    assert [(e["epoch"], e["replica"], e["holder"]) for e in again.epoch_log()["shared"]][-1] == (4, "r-d", "r-c")
    async with DryDriver(["tor-0-0"], tmp_path / "dry-agents") as dry:  # in-process agents record it as well
        await dry.fenced(7, "r-e").state("tor-0-0")
        assert [(e["epoch"], e["replica"]) for e in dry.epoch_log("tor-0-0")["raised"]] == [(7, "r-e")]


# -- the commit queue --------------------------------------------------------------------------

@pytest.mark.postgres
def test_a_commit_asked_of_a_follower_is_run_by_the_leader(postgres_url: str) -> None:
    db = Database(postgres_url)
    drop_schema(db)
    db.dispose()
    with running_api(postgres_url, replica_id="lead", lease_ttl=30) as leader:
        other = Database(postgres_url)
        app = create_app(Settings(db_url=postgres_url, replica_id="follow", lease_ttl=30), database=other)
        with TestClient(app) as client:
            follower = Api(client, leader.tokens, other)
            assert leader("GET", "/readyz", role=None).json()["role"] == "leader"
            assert follower("GET", "/readyz", role=None).json()["role"] == "follower"
            ch = follower.change(intent=follower("GET", "/v1/intent").json())
            follower.review(ch["id"])
            r = follower("POST", f"/v1/changes/{ch['id']}/commit", json={})
            assert r.status_code == 202 and r.json()["state"] == "committing"
            done = follower.wait(ch["id"], timeout=30)
            assert done["state"] == "committed", done
            assert leader("GET", f"/v1/changes/{ch['id']}").json()["state"] == "committed"
            assert done["transitions"][-1]["actor"] == "operator-1"  # recorded for who asked, on either replica
            view = follower("GET", "/v1/cluster", role="viewer").json()
            assert view["leader"] == "lead" and {r["id"]: r["role"] for r in view["replicas"]} == {
                "lead": "leader", "follow": "follower"}
        other.dispose()

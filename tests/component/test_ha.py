"""Replicas of ``loom serve`` behind HAProxy on one PostgreSQL store, against real device agents (``--dry-frr``).

Three real ``loom serve`` processes share a private PostgreSQL server behind a
real HAProxy (Debian's, health checks on ``/readyz``: :mod:`tests.balancer`);
the twelve agents of clos3-small run in one subprocess on unix sockets, every
apply stretched to a second so that a commit can be caught in the middle. The
lease's TTL is short (2 s, renewed every 0.5 s). Covered:

- writes through the balancer and straight to each replica, interleaved, make
  one linear history: revision ids contiguous, each the child of the one
  before, every acknowledged write in exactly one revision that holds that
  write alone, every ``If-Match`` honoured (:func:`tests.ha_cluster.check_history`);
- a commit asked of a follower runs on the leader; a leader frozen with SIGSTOP
  past its lease mid-commit is replaced (epoch + 1), marked down by the
  balancer, its change recovered, and when it wakes every call it still makes
  is refused by the agents and no switch ends on a mixed config;
- twenty times, the leader is killed (SIGKILL) while it commits and restarted:
  a new leader within the TTL plus one renewal (with slack for a loaded
  machine), the change committed or rolled back, every switch on the active
  revision's config, while clients write and read through the balancer all
  along: no 500, no lost acknowledged write, and a write whose answer died
  with its replica found applied or not in the store (counted, printed);
- three replicas on a store made slow (a relay delaying every answer of
  PostgreSQL beyond the TTL, on and off) flap the lease while they commit; the
  agents' epoch logs show every epoch raised in order, each by one replica
  (the one that acquired it), and none shared by two;
- schemathesis through the balancer: no 5xx, every answer as documented.
"""

from __future__ import annotations

import copy
import json
import signal
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import response_schema_conformance

from api.app import create_app
from controller import service
from controller.settings import Settings
from controller.store.db import Database
from tests.apps import SETUP
from tests.balancer import REPLICA_LOST, Balancer, MuteReplica
from tests.component.test_workflow_api import DOC, Fleet
from tests.fuzzing import fuzz, operations
from tests.ha_cluster import (
    TOKEN,
    Expected,
    Replicas,
    Traffic,
    Via,
    check_history,
    epoch_logs,
    propose,
    revisions,
    settle,
    wait_step,
)
from tests.ha_fixture import HA, RENEW, SLACK, TTL
from tests.ha_fixture import ha_commit as _commit
from tests.ha_fixture import ha_status as _status
from tests.pg import fresh_database
from tests.serving import LoomServer
from tests.slowstore import SlowStore

pytestmark = [pytest.mark.postgres, pytest.mark.haproxy]



def test_writes_on_every_replica_interleave_into_one_linear_history(ha: HA) -> None:
    lb = ha.lb
    since = _status(lb)["head_revision"]
    links = [item["id"] for item in lb("GET", "/v1/links?limit=5").json()["items"]]
    targets: list[Any] = [lb, lb, *ha.replicas.servers]  # two writers through the balancer, one per replica
    outcomes = []
    lock = threading.Lock()

    def writer(i: int, api: Any) -> None:
        traffic = Traffic(api.url, [])
        with httpx.Client(base_url=api.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60) as c:
            etag = None
            for n in range(12):
                if etag is None or n % 3 == 0:  # an If-Match read now, or kept from an answer (often stale)
                    etag = int(c.get(f"/v1/links/{links[0]}").headers["etag"].strip('"'))
                o = traffic.write(c, links[i % 2], etag if n % 2 == 0 else None)
                etag = o.revision
        with lock:
            outcomes.extend(traffic.outcomes)

    threads = [threading.Thread(target=writer, args=(i, api)) for i, api in enumerate(targets)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert len(outcomes) == 12 * len(targets)
    assert {o.status for o in outcomes} <= {200, 409, 503}, [o for o in outcomes if o.status not in (200, 409, 503)]
    report = check_history(lb, outcomes, since=since)
    assert report.acknowledged == report.revisions  # nothing else wrote meanwhile: every revision is one of them
    assert report.acknowledged >= len(targets)  # every writer got writes through (the first one reads the head)

    # a stale If-Match is refused on any replica, whoever wrote the revision that made it stale
    r0, r1, r2 = ha.replicas.servers
    # r0 may answer with the head it saw up to read_cache_s (0.5 s) ago, another replica's last write not yet in
    # it (settings.read_cache_s): past that window it reads the store's head
    time.sleep(0.6)
    etag = r0("GET", f"/v1/links/{links[2]}").headers["etag"]
    assert r1("PATCH", f"/v1/links/{links[2]}", json={"metric": 11}, headers={"If-Match": etag}).status_code == 200
    head = _status(lb)["head_revision"]
    stale = r2("PATCH", f"/v1/links/{links[2]}", json={"metric": 12}, headers={"If-Match": etag})
    assert stale.status_code == 409 and stale.json()["revision"] == head
    assert _status(lb)["head_revision"] == head
    print(f"\nlinear history: {report}")


# -- a replica that dies between its commit and its answer -----------------------------------------
def test_a_write_whose_replica_died_after_applying_it_is_answered_once_through_haproxy(
        ha: HA, tmp_path: Path) -> None:
    """Deterministic: the first write through the balancer reaches a replica (behind :class:`MuteReplica`)
    that applies it and dies before answering. HAProxy replays it on the other replica with the
    Idempotency-Key it gave the write, and Loom answers it from the store: one revision, one 200, marked
    replayed. So is a change's POST. A write that is not replayed (a token's POST, whose answer holds a
    secret no store keeps) gets the balancer's 503 with Retry-After, not a 502 and not a closed connection."""
    r0, r1 = ha.replicas.servers[:2]
    link = ha.lb("GET", "/v1/links?limit=1").json()["items"][0]["id"]
    rid = f"mute-{time.time_ns()}"
    with MuteReplica(r0.port) as mute:
        lb = Balancer(tmp_path, {"mute": mute.port, "r1": r1.port})
        try:
            lb.start()
            lb.wait_states({"mute": "UP", "r1": "UP"})
            via = Via(lb.url)
            answers = []
            while not mute.muted:  # round robin: at most two writes until one goes to the mute replica
                answers.append(via("PATCH", f"/v1/links/{link}", json={"capacity_gbps": 4242.0 + len(answers)},
                                   headers={"X-Request-ID": f"{rid}-{len(answers)}"}))
                assert len(answers) <= 2
            r = answers[-1]
            assert r.status_code == 200 and r.headers.get("idempotent-replayed") == "true", (r.status_code, r.text)
            assert r.json()["capacity_gbps"] == 4242.0 + len(answers) - 1
            revs = [x for x in revisions(ha.lb) if x["request_id"] == f"{rid}-{len(answers) - 1}"]
            assert [x["id"] for x in revs] == [int(r.headers["etag"].strip('"'))]  # applied once, where it says

            active = _status(ha.lb)["active_revision"] or 1
            changes_before = ha.lb("GET", "/v1/changes?limit=1").json()["total"]
            mute.mute += 1  # the next write that is not a GET dies with its replica
            made = []
            while len(mute.muted) < 2:
                made.append(via("POST", "/v1/changes", json={"base_revision": active, "patch": []},
                                headers={"X-Request-ID": f"{rid}-change-{len(made)}"}))
                assert made[-1].status_code == 201, made[-1].text
                assert len(made) <= 2
            assert made[-1].headers.get("idempotent-replayed") == "true"
            assert ha.lb("GET", "/v1/changes?limit=1").json()["total"] == changes_before + len(made)  # one each

            mute.mute += 1
            tokens = []
            while len(mute.muted) < 3:  # a fresh connection each time: a first request, which HAProxy answers
                tokens.append(via("POST", "/v1/tokens", json={"name": f"{rid}-{len(tokens)}", "role": "viewer"}))
                if len(mute.muted) < 3:
                    assert tokens[-1].status_code == 201, tokens[-1].text
                assert len(tokens) <= 2
            got = tokens[-1]
            assert got.status_code == 503 and got.headers["retry-after"] == str(lb.options.retry_after), got.text
            assert got.json()["type"] == REPLICA_LOST and "may have been applied" in got.json()["detail"]
        finally:
            lb.stop()


# -- SIGSTOP: a frozen leader is fenced ------------------------------------------------------------
def test_a_leader_frozen_past_its_lease_is_marked_down_replaced_and_fenced_when_it_wakes(ha: HA) -> None:
    replicas, fleet, lb = ha.replicas, ha.fleet, ha.lb
    old = replicas.leader()
    others = [s for s in replicas.servers if s is not old]
    follower = others[0]
    assert follower("GET", "/readyz").json()["role"] == "follower"
    active = _status(lb)["active_revision"]
    first = _commit(follower, active)  # a commit asked of a follower runs on the leader
    done = settle(follower, first["id"])
    assert done["state"] == "committed", done
    assert fleet.hashes() == ha.expected(done["proposed_revision"])
    heard = {(log["raised"][-1]["epoch"], log["raised"][-1]["replica"]) for log in epoch_logs(fleet).values()}
    assert len(heard) == 1 and next(iter(heard))[1] == replicas.name(old), heard  # the leader's, not the follower's

    frozen = _commit(old, done["proposed_revision"])
    assert wait_step(old, frozen["id"], "commit"), "the commit ended before it could be frozen"
    view = old("GET", "/v1/cluster").json()  # (a lease that lapsed under load and came back has a newer epoch)
    assert view["leader"] == replicas.name(old), view
    epoch = view["epoch"]
    assert old.proc is not None
    old.proc.send_signal(signal.SIGSTOP)  # the leader freezes while its Commits are applied
    t0 = time.monotonic()
    try:
        new = replicas.leader(others)
        took_over = time.monotonic() - t0
        assert took_over <= TTL + RENEW + SLACK, took_over
        view = new("GET", "/v1/cluster").json()
        assert view["leader"] == view["replica"] == replicas.name(new)
        assert view["epoch"] == epoch + 1
        ha.balancer.wait_states({replicas.name(old): "DOWN"})  # its /readyz does not answer: out of rotation
        recovered = settle(lb, frozen["id"])  # the new leader recovers the frozen leader's change
        assert recovered["state"] in ("committed", "rolled_back"), recovered
        assert "recovered after a controller restart" in recovered["transitions"][-1]["reason"]
        base = recovered["proposed_revision"] if recovered["state"] == "committed" else done["proposed_revision"]
        after = _commit(lb, base)  # through the balancer, which no longer sends anything to the frozen one
        finished = settle(lb, after["id"])
        assert finished["state"] == "committed", finished
        target = ha.expected(finished["proposed_revision"])
        assert fleet.hashes() == target
        before = {n: len(log["refused"]) for n, log in epoch_logs(fleet).items()}
    finally:
        old.proc.send_signal(signal.SIGCONT)  # the old leader wakes up and carries on with its transaction
    deadline = time.monotonic() + 30
    while True:  # its next calls (verify's GetState, then Rollback) reach every agent and are refused
        logs = epoch_logs(fleet)
        refused = {n: [e for e in log["refused"][before[n]:] if e["epoch"] == epoch] for n, log in logs.items()}
        if all(refused.values()):
            break
        assert time.monotonic() < deadline, refused
        time.sleep(0.2)
    time.sleep(1.0)
    for n, log in logs.items():
        assert log["epoch"] == epoch + 1, (n, log)
        assert [(e["epoch"], e["replica"]) for e in log["raised"]][-2:] == \
            [(epoch, replicas.name(old)), (epoch + 1, replicas.name(new))]
        assert all(e["fence"] == epoch + 1 for e in refused[n])
        assert log["shared"] == []
    assert fleet.hashes() == target  # every switch on the new leader's revision: none mixed, none stale
    assert old("GET", "/readyz").json()["role"] == "follower"
    assert old("GET", "/v1/cluster").json()["epoch"] == epoch + 1
    assert settle(new, frozen["id"])["state"] == recovered["state"]  # the old leader's outcome is not recorded
    assert _status(new)["active_revision"] == finished["proposed_revision"]
    deadline = time.monotonic() + 30
    while "is no longer run by the leader of epoch" not in old.log.read_text():  # its outcome was refused
        assert time.monotonic() < deadline, old.log.read_text()[-3000:]
        time.sleep(0.2)
    assert "lease lost: replica" in old.log.read_text()
    assert settle(new, frozen["id"])["state"] == recovered["state"]
    assert fleet.hashes() == target
    ha.all_up()  # awake, it answers /readyz again and is back in rotation


def _acquisitions(server: LoomServer) -> dict[int, str]:
    """epoch -> replica of every 'lease acquired' record in ``server``'s log."""
    out = {}
    for line in server.log.read_text().splitlines():
        if '"lease acquired' in line:
            rec = json.loads(line)
            out[int(rec["epoch"])] = str(rec["replica"])
    return out


def _pushing_epochs(fleet: Fleet) -> set[int]:
    """The epochs any device of ``fleet`` has accepted a call under."""
    return {int(e["epoch"]) for log in epoch_logs(fleet).values() for e in log["raised"]}


def test_a_lease_flapping_under_a_slow_store_never_makes_two_leaders(tmp_path: Path, postgres_url: str) -> None:
    url = fresh_database(postgres_url, "loomflap")  # its own database: the module's replicas keep theirs
    db = Database(url)
    db.migrate()
    with db.session() as s:
        service.replace_intent(DOC, session=s, ctx=SETUP)
    slow = SlowStore(tmp_path, url)
    fleet = Fleet(tmp_path / "agents", delay=0.3)
    fleet.base.mkdir()
    replicas = Replicas(tmp_path, slow.url, fleet, 3, ttl=1.0, renew=0.3)
    stop = threading.Event()
    asked: list[int] = []

    def committer() -> None:  # commits, one after the other, asked of each replica in turn
        n = 0
        while not stop.is_set():
            api = replicas.servers[n % 3]
            n += 1
            try:
                active = api("GET", "/v1/status").json()["active_revision"]
                ch = _commit(api, active)
                asked.append(ch["id"])
                settle(api, ch["id"], timeout=60)
            except Exception:  # noqa: BLE001 - a slow store may time a request out: ask again
                time.sleep(0.2)

    try:
        slow.start()
        fleet.start()
        replicas.start()
        first = replicas.servers[0]("GET", "/v1/cluster").json()["epoch"]
        worker = threading.Thread(target=committer, daemon=True)
        worker.start()
        # each round trip to the store takes longer than the TTL for 2 s, then none; at least 5 rounds, and
        # on a loaded machine (a commit may outlast a fast window) more, until pushes came from 2 leaders
        for cycle in range(15):
            time.sleep(1.5)
            slow.set_delay(0.5)
            time.sleep(2.0)
            slow.set_delay(0.0)
            if cycle >= 4 and len(_pushing_epochs(fleet)) >= 2:
                break
        stop.set()
        worker.join(120)
        leader = replicas.leader(timeout=60)
        for cid in asked:
            settle(leader, cid, timeout=120)
        # the store healthy again, the leader commits: every commit asked in the flapping may have failed
        final = _commit(leader, _status(leader)["active_revision"])
        assert settle(leader, final["id"], timeout=120)["state"] == "committed"
        active = _status(leader)["active_revision"]
        assert fleet.hashes() == Expected(db)(active)  # one consistent config everywhere
        last = leader("GET", "/v1/cluster").json()["epoch"]
        acquired: dict[int, str] = {}
        for server in replicas.servers:
            for epoch, who in _acquisitions(server).items():
                assert acquired.setdefault(epoch, who) == who, f"epoch {epoch} acquired by {who} and {acquired[epoch]}"
    finally:
        stop.set()
        replicas.stop()
        fleet.stop()
        slow.stop()
        db.dispose()
    assert last - first >= 2, f"the lease did not flap (epochs {first}..{last}): the store was not slow enough"
    logs = epoch_logs(fleet)
    pushed: dict[int, str] = {}
    for name, log in logs.items():
        raised = [(e["epoch"], e["replica"]) for e in log["raised"]]
        epochs = [e for e, _ in raised]
        assert epochs == sorted(set(epochs)), f"{name} accepted epochs out of order: {raised}"
        assert log["shared"] == [], f"{name} heard two replicas with one epoch: {log['shared']}"
        for epoch, who in raised:
            assert pushed.setdefault(epoch, who) == who, f"epoch {epoch} pushed by {who} and {pushed[epoch]}"
            assert acquired.get(epoch) == who, f"{name}: epoch {epoch} from {who}, acquired by {acquired.get(epoch)}"
        assert all(e["epoch"] < e["fence"] for e in log["refused"]), log["refused"]
    assert len(pushed) >= 2, f"commits were pushed under one leadership only: {pushed}"
    print(f"\nflapping lease: epochs {first}..{last}, pushes under {sorted(pushed.items())}, "
          f"{sum(len(log['refused']) for log in logs.values())} calls of deposed leaders refused, "
          f"{len(asked)} commits asked")


# -- schemathesis through the balancer ---------------------------------------------------------------
# The operations are read at collection time from the app's own OpenAPI document (built in-process: no
# server runs yet); the test checks that the replicas behind the balancer serve that very document.
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    SPEC = create_app(Settings(db_url="sqlite:///:memory:")).openapi()
    # the event stream never ends by design: a generated call would hold until a timeout (minutes of the
    # suite for nothing); test_the_event_stream_passes_through_haproxy_as_it_is_sent checks it instead
    schema = schemathesis.openapi.from_dict(SPEC).exclude(path="/v1/events")


@pytest.fixture
def balanced(ha: HA) -> str:
    """The balancer's URL, once it serves the OpenAPI document the operations were generated from."""
    served = ha.lb("GET", "/openapi.json")
    assert served.status_code == 200 and served.json() == json.loads(json.dumps(SPEC)), "another API is served"
    return ha.balancer.url


OPERATIONS = operations(schema)


@pytest.mark.parametrize("operation", sorted(OPERATIONS))
def test_the_api_through_haproxy_conforms_to_its_schema(operation: str, balanced: str) -> None:
    fuzz(OPERATIONS[operation], lambda case: case.call_and_validate(
        base_url=balanced, headers={"Authorization": f"Bearer {TOKEN}"},
        checks=[not_a_server_error, response_schema_conformance], timeout=60), examples=3)


def test_the_event_stream_passes_through_haproxy_as_it_is_sent(ha: HA) -> None:
    """``GET /v1/events`` through the balancer: refused without a token like any read, and with one a
    ``text/event-stream`` whose first event (the store keeps the commits' ``change.state`` events) arrives
    while the stream stays open: nothing between the replica and the client buffers it."""
    assert httpx.get(f"{ha.balancer.url}/v1/events", timeout=10).status_code == 401
    drained = {**DOC, "policies": [p for p in DOC.get("policies", []) if p.get("kind") != "drain"]
               + [{"kind": "drain", "target": "spine-0-0"}]}  # valid whatever the tests before left as the head
    propose(ha.lb, intent=drained, base=_status(ha.lb)["head_revision"])  # a change.state event at least
    headers = {"Authorization": f"Bearer {TOKEN}", "Last-Event-ID": "0"}
    # a read timeout below the stream's keep-alive: an event held back anywhere fails the test, not hangs it
    with httpx.Client(base_url=ha.balancer.url, timeout=httpx.Timeout(10.0)) as c, \
            c.stream("GET", "/v1/events", headers=headers) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        seen: list[str] = []
        for line in r.iter_lines():
            seen.append(line)
            if line.startswith("data: "):
                break
    assert seen[0] == "retry: 1000" and any(x.startswith("event: ") for x in seen), seen
    assert int(next(x for x in seen if x.startswith("id: ")).removeprefix("id: ")) >= 1


def test_a_leader_killed_mid_reaction_leaves_the_next_one_to_finish_or_undo_it(ha: HA) -> None:
    """Issue 30: a link fails on the dry fleet (every apply takes a second), the leader commits its failure
    reaction, and is killed while that reaction is committing. The next leader recovers the reaction like
    any change (finished or undone, with the reaction's overlay), and the fabric ends planned around the
    link either way: a reaction undone is decided again by the new leader's own view. When the link is
    back, the full plan returns after the hold-down."""
    from tests.component.test_failure_reaction import ENDS, LINK, fail

    replicas, lb = ha.replicas, ha.lb
    intent = copy.deepcopy(DOC)
    intent["policies"] = [*intent.get("policies", []), {"kind": "failure_reaction", "detect_s": 0.5,
                                                        "hold_down_s": 2}]
    time.sleep(0.6)  # past the read cache's window (read_cache_s): any replica's status names the store's head
    ch = propose(lb, intent=intent, base=_status(lb)["head_revision"])
    r = lb("POST", f"/v1/changes/{ch['id']}/commit", json={})
    assert r.status_code == 202, r.text
    assert settle(lb, ch["id"])["state"] == "committed"

    def reaction(state: str) -> dict[str, Any] | None:
        items = lb("GET", "/v1/changes?limit=20").json()["items"]
        return next((c for c in items if c["kind"] == "reaction" and c["state"] == state and c["id"] > ch["id"]),
                    None)

    def overlay() -> list[str]:
        return list(lb("GET", "/v1/plans/active").json()["overlay"]["links"])

    restart = None
    fail(ha.fleet, ENDS)
    try:
        deadline = time.monotonic() + 60
        while (caught := reaction("committing")) is None:
            assert time.monotonic() < deadline, "no reaction was caught committing"
            time.sleep(0.05)
        victim = replicas.leader()
        victim.kill9()
        replicas.leader([s for s in replicas.servers if s is not victim], timeout=TTL + RENEW + 60)
        restart = (replicas.name(victim), replicas.restart_in_background(victim))
        done = settle(lb, caught["id"], timeout=120)
        reason = done["transitions"][-1]["reason"]
        # finished, undone, or (the kill came before the first prepare reached an agent) failed with nothing
        # to undo: recovery then says the change never reached the devices, and it rolled no device back
        assert done["state"] in ("committed", "rolled_back", "failed"), done
        assert "recovered after a controller restart" in reason, done
        if done["state"] == "failed":
            assert "the change never reached the devices" in reason, done
            assert "unchanged" in reason and "rolled back" not in reason, done
        assert done["author"] == "failover" and done["overlay"]["links"] == [LINK]
        deadline = time.monotonic() + 90
        while overlay() != [LINK] or _status(lb)["committing_change"] is not None:
            assert time.monotonic() < deadline, f"the fabric is not planned around {LINK}: {overlay()}"
            time.sleep(0.2)
    finally:
        fail(ha.fleet, ENDS, down=False)
        if restart is not None:
            restart[1].join()
            ha.balancer.wait_states({restart[0]: "UP"})
    deadline = time.monotonic() + 90
    while overlay() or _status(lb)["committing_change"] is not None:
        assert time.monotonic() < deadline, f"the full plan did not return: {overlay()}"
        time.sleep(0.2)

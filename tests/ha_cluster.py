"""Replicas of ``loom serve`` behind HAProxy, their clients, and the checks of their history (tests and bench).

:class:`Replicas` runs ``n`` real ``loom serve`` processes (``r0``, ``r1``...) on
one PostgreSQL store with the fleet's agents, starts them side by side, finds the
leader by asking each ``/readyz``, and restarts one that was killed. :class:`Via`
calls the API through any base URL (the balancer's), as :class:`LoomServer`
calls one replica. :class:`Traffic` is a client population: writers PATCH one
link's capacity (one field, each value and ``X-Request-ID`` unique, with or
without ``If-Match``) and readers list devices, recording every outcome.
:func:`check_history` holds those outcomes against the store: revision ids
contiguous and each the child of the one before, every acknowledged write in
exactly one revision (the one its ``ETag`` names, the child of its ``If-Match``)
whose only change is that write, a refused stale ``If-Match`` in none, and each
write whose outcome the client never learnt found applied or not by its
request id (never counted lost).
"""

from __future__ import annotations

import itertools
import json
import random
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from controller.store.db import Database
from southbound.device.agent import AgentCore
from tests.balancer import REPLICA_LOST
from tests.component.test_workflow_api import NAMES, Fleet, revision_doc, want
from tests.serving import LoomServer, request

__all__ = ["TOKEN", "Outcome", "Replicas", "Traffic", "Via", "check_history", "epoch_logs", "propose", "settle",
           "toggle_drain", "wait_step", "Expected"]

TOKEN = "t" + "0123456789abcdefghijklmnopqrstuvwxyz"
Call = Callable[..., httpx.Response]
#: the revision diffs :func:`check_history` reads at once
DIFF_READERS = 4


class Via:
    """API calls with the admin token through ``url`` (the balancer), like :class:`LoomServer`'s."""

    def __init__(self, url: str, token: str = TOKEN, timeout: float = 60.0):
        self.url, self.token, self.timeout = url, token, timeout

    def __call__(self, method: str, path: str, **kw: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.token}", **kw.pop("headers", {})}
        return request(method, self.url + path, headers=headers, timeout=self.timeout, **kw)


class Replicas:
    """``n`` replicas of ``loom serve`` on ``url`` with the fleet's agents, named r0, r1, ..."""

    def __init__(self, base: Path, url: str, fleet: Fleet, n: int, *, ttl: float, renew: float,
                 env: dict[str, str] | None = None):
        (base / "agents.json").write_text(json.dumps(fleet.endpoints()))
        common = {"LOOM_DRIFT_INTERVAL": "0", "LOOM_CONFIRM_WITHIN": "60", "LOOM_TELEMETRY_INTERVAL_S": "0",
                  "LOOM_LEASE_TTL": str(ttl), "LOOM_LEASE_RENEW": str(renew), "LOOM_VERIFY_TIMEOUT": "10",
                  **(env or {})}
        self.ttl, self.renew = ttl, renew
        self.servers: list[LoomServer] = []
        for i in range(n):
            (base / f"r{i}").mkdir()
            self.servers.append(LoomServer(base / f"r{i}", ["--db", url, "--agents", str(base / "agents.json")],
                                           TOKEN, env={**common, "LOOM_REPLICA_ID": f"r{i}"}, ready_timeout=120,
                                           request_timeout=60))

    def name(self, server: LoomServer) -> str:
        return f"r{self.servers.index(server)}"

    def ports(self) -> dict[str, int]:
        return {self.name(s): s.port for s in self.servers}

    def start(self) -> None:
        """Start every replica side by side; fail if any does not become ready."""
        errors: list[BaseException] = []

        def one(s: LoomServer) -> None:
            try:
                s.start()
            except BaseException as exc:  # noqa: BLE001 - reported below, in the test's thread
                errors.append(exc)
        threads = [threading.Thread(target=one, args=(s,)) for s in self.servers]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]

    def restart_in_background(self, server: LoomServer) -> threading.Thread:
        """Start ``server`` again (it was killed) in a thread; join it to know it is ready."""
        box: list[BaseException] = []

        def run() -> None:
            try:
                server.start()
            except BaseException as exc:  # noqa: BLE001 - re-raised by join()
                box.append(exc)
        t = _Restart(target=run, box=box)
        t.start()
        return t

    def stop(self) -> None:
        for s in self.servers:
            if s.proc is not None and s.proc.poll() is None:
                s.proc.send_signal(signal.SIGCONT)  # a frozen one must hear SIGTERM
        threads = [threading.Thread(target=s.stop) for s in self.servers]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    def leader(self, among: list[LoomServer] | None = None, timeout: float = 30) -> LoomServer:
        deadline = time.monotonic() + timeout
        while True:
            for s in among or self.servers:
                try:
                    if s("GET", "/readyz", timeout=2).json().get("role") == "leader":
                        return s
                except Exception:  # noqa: BLE001 - a replica that does not answer is not the leader
                    pass
            assert time.monotonic() < deadline, "no leader"
            time.sleep(0.02)


class _Restart(threading.Thread):
    def __init__(self, *, target: Callable[[], None], box: list[BaseException]):
        super().__init__(target=target, daemon=True)
        self.box = box

    def join(self, timeout: float | None = None) -> None:
        super().join(timeout)
        if self.box:
            raise self.box[0]


# -- the change workflow over HTTP ---------------------------------------------------------------
def settle(api: Call, cid: int, timeout: float = 90) -> dict[str, Any]:
    """Change ``cid`` once it is no longer committing (a failed assertion after ``timeout`` s)."""
    deadline = time.monotonic() + timeout
    while True:
        r = api("GET", f"/v1/changes/{cid}")
        if r.status_code == 200 and r.json()["state"] != "committing":
            return dict(r.json())
        assert time.monotonic() < deadline, r.text
        time.sleep(0.05)


def propose(api: Call, *, patch: Any = None, intent: Any = None, base: int = 1) -> dict[str, Any]:
    """A change on ``base`` (a JSON patch or a whole intent), reviewed."""
    r = api("POST", "/v1/changes", json={"base_revision": base, "patch": patch, "intent": intent})
    assert r.status_code == 201, r.text
    ch = r.json()
    review = api("POST", f"/v1/changes/{ch['id']}/review")
    assert review.status_code == 200, review.text
    return dict(ch)


def wait_step(api: Call, cid: int, step: str, timeout: float = 60) -> bool:
    """Until change ``cid``'s progress reaches ``step`` while it commits: True then; False when the change
    settled first (a loaded machine may miss a short step)."""
    deadline = time.monotonic() + timeout
    while True:
        r = api("GET", f"/v1/changes/{cid}")
        if r.status_code == 200:
            ch = r.json()
            if ch["state"] != "committing" and ch["state"] != "reviewed":
                return False
            if ch["state"] == "committing" and (ch.get("progress") or {}).get("step") == step:
                return True
        assert time.monotonic() < deadline, r.text
        time.sleep(0.05)  # the steps waited for last a second (the fleet's applies): 20 polls a second is plenty


def toggle_drain(doc: dict[str, Any], target: str = "spine-0-0") -> list[dict[str, Any]]:
    """The JSON patch that drains ``target`` in ``doc``, or undrains it when it is drained."""
    for i, p in enumerate(doc.get("policies") or []):
        if p.get("kind") == "drain" and p.get("target") == target:
            return [{"op": "remove", "path": f"/policies/{i}"}]
    return [{"op": "add", "path": "/policies/-", "value": {"kind": "drain", "target": target}}]


def epoch_logs(fleet: Fleet) -> dict[str, dict[str, Any]]:
    return {n: AgentCore.read_epoch_log(fleet.base / n / "state") for n in NAMES}


class Expected:
    """The config hashes each device should run for a revision (solved once per revision)."""

    def __init__(self, db: Database):
        self.db = db
        self._memo: dict[int, dict[str, str]] = {}

    def __call__(self, revision: int) -> dict[str, str]:
        if revision not in self._memo:
            self._memo[revision] = want(revision_doc(self.db, revision))
        return self._memo[revision]


_VALUES = itertools.count(1)
_VALUES_LOCK = threading.Lock()


# -- clients through the balancer ------------------------------------------------------------------
@dataclass
class Outcome:
    """One request a client made: what it sent and what it got (``status`` 0: no answer at all)."""

    kind: str  # "write" or "read"
    request_id: str
    started: float
    ended: float
    status: int
    link: str = ""
    value: float = 0.0
    if_match: int | None = None
    revision: int | None = None  # the ETag of a 2xx write
    retry_after: str | None = None
    error: str = ""
    wall_ended: float = field(default_factory=time.time)  # when the answer came, on the store's clock (one host)
    key: str | None = None  # the client's Idempotency-Key (None: the balancer gives the write one)
    attempts: int = 1  # sent this many times with that key (a 503 is retried after its Retry-After)
    replayed: bool = False  # answered with Idempotent-Replayed: an earlier attempt had been applied
    in_doubt: bool = False  # an earlier attempt's outcome is unknown (no answer, its replica lost, its COMMIT cut)
    earlier: tuple[str, ...] = ()  # the earlier attempts' answers (status and the start of the error), for a report

    @property
    def outcome_unknown(self) -> bool:
        """Loom's own 503 for a write whose COMMIT the store cut, or that no standby holds yet: applied or not,
        only the store can say."""
        return self.status == 503 and "may or may not have been applied" in self.error

    @property
    def unknown(self) -> bool:
        """Whether the write may have been applied without being acknowledged: no answer (0), the balancer's
        502, its 503 for a lost replica, Loom's in-doubt 503, or a last answer after an attempt that was one of
        these (its retries with the same key got only 503s that wrote nothing): only the store can say."""
        return self.status in (0, 502) or self.replica_lost or self.in_doubt or self.outcome_unknown

    @property
    def replica_lost(self) -> bool:
        """The balancer's 503 for a request whose replica died and that it could not replay elsewhere."""
        return self.status == 503 and REPLICA_LOST in self.error


@dataclass
class Traffic:
    """``writers`` threads PATCHing the capacity of their own link (``If-Match`` every other write, from the
    ETag of their last answer) and ``readers`` threads listing devices, through ``url``, until stopped.
    The writers of the links ``keyed`` picks send an ``Idempotency-Key`` of their own and retry a 503 with
    it (as a careful client does); the others send none (the balancer gives each write one)."""

    url: str
    links: list[str]
    readers: int = 1
    pause: float = 0.02
    seed: int = 17
    keyed: Callable[[int], bool] = lambda i: i % 2 == 0
    outcomes: list[Outcome] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._go = threading.Event()  # cleared by hold(): writers wait before their next write
        self._go.set()
        self._in_flight = 0
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    @staticmethod
    def _value() -> float:
        with _VALUES_LOCK:  # every write of every client sets a value no other write sets (an equal one
            return float(1000 + next(_VALUES))  # would change nothing and be answered with the head)

    def _record(self, o: Outcome) -> None:
        with self._lock:
            self.outcomes.append(o)

    def write(self, client: httpx.Client, link: str, if_match: int | None, *, keyed: bool = False,
              tries: int = 6) -> Outcome:
        """One PATCH of ``link``'s capacity to a fresh value, recorded; ``keyed``: with an ``Idempotency-Key``
        of its own, sent again (same key, same request id) after a 503's ``Retry-After``, ``tries`` times."""
        value, rid = self._value(), f"w-{uuid.uuid4().hex}"
        headers = {"X-Request-ID": rid}
        if if_match is not None:
            headers["If-Match"] = f'"{if_match}"'
        if keyed:
            headers["Idempotency-Key"] = f"k-{rid}"
        t0, doubt, seen = time.monotonic(), False, []
        for attempt in range(1, tries + 1):
            try:
                r = client.patch(f"/v1/links/{link}", json={"capacity_gbps": value}, headers=headers)
            except httpx.HTTPError as exc:
                o = Outcome("write", rid, t0, time.monotonic(), 0, link, value, if_match, error=repr(exc))
            else:
                etag = r.headers.get("etag", "").strip('"')
                o = Outcome("write", rid, t0, time.monotonic(), r.status_code, link, value, if_match,
                            revision=int(etag) if r.is_success and etag.isdigit() else None,
                            retry_after=r.headers.get("retry-after"), error="" if r.is_success else r.text[:300],
                            replayed=r.headers.get("idempotent-replayed") == "true")
            o.key, o.attempts, o.in_doubt, o.earlier = headers.get("Idempotency-Key"), attempt, doubt, tuple(seen)
            if not (keyed and o.status == 503 and attempt < tries):
                break
            # this attempt may have been applied: a later answer that did not reach Loom (the balancer's "no
            # replica available") says nothing about it, and the write's outcome stays unknown
            doubt = doubt or o.replica_lost or "may or may not have been applied" in o.error
            seen.append(f"{o.status}: {o.error[:120]}")
            time.sleep(float(o.retry_after or 1))
        self._record(o)
        return o

    def _writer(self, link: str, rng: random.Random, keyed: bool) -> None:
        with httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60) as c:
            etag: int | None = None
            n = 0
            while not self._stop.is_set():
                with self._lock:  # go and in-flight read and counted together: hold() sees every write begun
                    go = self._go.is_set()
                    self._in_flight += go
                if not go:
                    self._go.wait(0.5)
                    continue
                n += 1
                try:
                    o = self.write(c, link, etag if n % 2 == 0 else None, keyed=keyed)
                finally:
                    with self._lock:
                        self._in_flight -= 1
                if o.revision is not None:
                    etag = o.revision
                elif o.status == 409:  # stale: read the head again
                    etag = None
                if etag is None:
                    try:
                        r = c.get(f"/v1/links/{link}")
                        etag = int(r.headers["etag"].strip('"')) if r.status_code == 200 else None
                    except (httpx.HTTPError, KeyError, ValueError):
                        etag = None
                time.sleep(self.pause * rng.random())

    def _reader(self) -> None:
        with httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60) as c:
            while not self._stop.is_set():
                rid, t0 = f"r-{uuid.uuid4().hex}", time.monotonic()
                try:
                    r = c.get("/v1/devices?limit=50", headers={"X-Request-ID": rid})
                    self._record(Outcome("read", rid, t0, time.monotonic(), r.status_code,
                                         retry_after=r.headers.get("retry-after"),
                                         error="" if r.is_success else r.text[:300]))
                except httpx.HTTPError as exc:
                    self._record(Outcome("read", rid, t0, time.monotonic(), 0, error=repr(exc)))
                time.sleep(self.pause)

    def start(self) -> None:
        rng = random.Random(self.seed)
        self._threads = [threading.Thread(target=self._writer, args=(link, random.Random(rng.random()), self.keyed(i)),
                                          daemon=True) for i, link in enumerate(self.links)]
        self._threads += [threading.Thread(target=self._reader, daemon=True) for _ in range(self.readers)]
        for t in self._threads:
            t.start()

    def hold(self, timeout: float = 120.0) -> None:
        """The writers stop before their next write; returns once none is in flight (a keyed write retrying
        after 503s finishes first)."""
        with self._lock:
            self._go.clear()
        deadline = time.monotonic() + timeout
        while self._in_flight and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not self._in_flight, f"{self._in_flight} writes still in flight after {timeout} s"

    def resume(self) -> None:
        self._go.set()

    def stop(self) -> None:
        self._stop.set()
        self._go.set()
        for t in self._threads:
            t.join(90)

    def between(self, t0: float, t1: float) -> list[Outcome]:
        with self._lock:
            return [o for o in self.outcomes if o.ended >= t0 and o.started <= t1]


# -- the history ------------------------------------------------------------------------------------
def _unix(stamp: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def revisions(api: Call) -> list[dict[str, Any]]:
    """Every revision's metadata, oldest first."""
    out: list[dict[str, Any]] = []
    offset = 0
    while True:
        page = api("GET", f"/v1/revisions?limit=500&offset={offset}").json()
        out += page["items"]
        offset += len(page["items"])
        if not page["items"] or offset >= page["total"]:
            return sorted(out, key=lambda r: r["id"])


@dataclass
class HistoryReport:
    """What :func:`check_history` found: acknowledged writes, refused ones, unknown outcomes applied or not."""

    acknowledged: int
    refused_stale: int
    unavailable: int
    unknown_applied: int
    unknown_not_applied: int
    revisions: int
    diffs_read: int = 0


def check_history(api: Call, writes: Iterable[Outcome], *, since: int,
                  read_diff: Callable[[Outcome], bool] = lambda o: True) -> HistoryReport:
    """Hold the writes against the revisions after ``since``: one linear history in which every
    acknowledged write is present exactly once, where its answer says, and nothing else of theirs.
    The content of an acknowledged write's revision (its diff: that write alone) is read for the writes
    ``read_diff`` picks (a diff per write costs a request: a long run checks a sample and those near
    its faults); the metadata of every revision is checked whole."""
    writes = [o for o in writes if o.kind == "write"]
    revs = [r for r in revisions(api) if r["id"] > since]
    ids = [r["id"] for r in revs]
    assert ids == list(range(since + 1, since + 1 + len(ids))), f"revision ids not contiguous: {ids}"
    assert all(r["parent"] == r["id"] - 1 for r in revs), [r for r in revs if r["parent"] != r["id"] - 1]
    by_id = {r["id"]: r for r in revs}
    # the head's line: the revisions that are not a change's proposal (a write is made on the one before it)
    line = [since, *(r["id"] for r in revs if not r.get("proposal"))]
    before = {b: a for a, b in zip(line, line[1:], strict=False)}
    after = {a: b for a, b in zip(line, line[1:], strict=False)}
    by_request: dict[str, list[int]] = {}
    for r in revs:
        if r["request_id"]:
            by_request.setdefault(r["request_id"], []).append(r["id"])
    mine = {o.request_id for o in writes}
    report = HistoryReport(0, 0, 0, 0, 0, len(revs))
    to_diff: list[Outcome] = []
    for o in writes:
        found = by_request.get(o.request_id, [])
        assert len(found) <= 1, f"write {o.request_id} applied {len(found)} times: revisions {found}"
        if 200 <= o.status < 300:
            report.acknowledged += 1
            assert found == [o.revision], \
                f"acknowledged write {o} is in revisions {found}; {[r for r in revs if r['id'] == o.revision]}"
            if o.if_match is not None:
                assert before.get(o.revision) == o.if_match, f"If-Match {o.if_match} write became revision {o.revision}"
            if read_diff(o):
                to_diff.append(o)
        elif o.status == 409:
            report.refused_stale += 1
            assert o.if_match is not None and found == [], o
            nxt = by_id.get(after.get(o.if_match, -1))  # what made it stale
            assert nxt is not None and _unix(nxt["created_at"]) <= o.wall_ended + 0.5, \
                f"If-Match {o.if_match} refused while it named the head: {o}, next {nxt}"
        elif o.status == 503 and not o.unknown:  # nothing was written
            report.unavailable += 1
            assert o.retry_after and found == [], f"a 503 without Retry-After, or one that wrote: {o}"
        else:  # no answer (0), the balancer's 503 (502 without it): the replica died with it; a 503 after an
            # attempt whose outcome is unknown, or Loom's 503 for a COMMIT the store cut: the store says
            assert o.status in (0, 502) or (o.unknown and o.retry_after), \
                f"unexpected answer to a write: {o}"
            if found:
                report.unknown_applied += 1
            else:
                report.unknown_not_applied += 1
    # a write's revision that its answer did not name, and whose outcome it did not leave unknown (the loop
    # above and this list judge unknown outcomes alike: a keyed write whose first attempt was cut and whose
    # retries all found the store away is one, applied or not)
    strangers = [r for r in revs if r["request_id"] in mine and r["id"] not in
                 {o.revision for o in writes if o.revision is not None} and
                 not any(o.request_id == r["request_id"] and o.unknown for o in writes)]
    assert strangers == [], f"revisions of writes that were refused: {strangers}"

    def diff_of(o: Outcome) -> None:  # the write's revision changes that write alone
        assert o.revision is not None
        diff = api("GET", f"/v1/revisions/{before[o.revision]}/diff/{o.revision}").json()
        assert diff["added"] == [] and diff["removed"] == [] and diff["fields"] == {}, diff
        assert [(c["kind"], c["name"], c["fields"]["capacity_gbps"][1]) for c in diff["changed"]] == \
            [("link", o.link, o.value)], diff
    # a thousand diffs or more after a long run: read DIFF_READERS at a time (the replicas answer them side by side)
    with ThreadPoolExecutor(max_workers=DIFF_READERS, thread_name_prefix="diff") as pool:
        list(pool.map(diff_of, to_diff))  # list(): the first failed assertion is raised here
    report.diffs_read = len(to_diff)
    return report

"""A chaos run on a real FRR lab (#31): faults of every kind, during commits, failure reactions and writes.

:class:`ChaosLab` is the settle harness (:class:`tests.faults.FaultLab`: clos3-small in network namespaces, its
``loom serve --lab``) run as production would run it: failure reaction on (``detect_s`` 1, ``hold_down_s`` 2,
doubling for a part that flaps), drift repair on (every 2 s), and writers PATCHing two links' capacity the whole
time (:class:`tests.ha_cluster.Traffic`, half of them with an ``Idempotency-Key`` retried after a 503). A round is
one fault of :data:`CHAOS_KINDS`: during the commit of a drain toggle, a SIGKILL of a device agent, of a node's
``bgpd`` or ``zebra`` (started again empty, as after a crash; a ``zebra`` with the node's other daemons, as
FRR's watchfrr restarts them), of the controller (the leader: it recovers the commit in flight), or a fabric
link set down; or, with no commit of its own, a link flap (down until the failure reaction has committed an
overlay around it, then up: the full plan returns after the hold-down); or a link down whose failure reaction
is struck, while it commits, by one of :data:`STRIKES` (``reaction``). After each round the run
waits, with a bound, until the fabric is quiet (nothing committing, every change settled, no link down, no
overlay left) and then requires every device to run the configuration of the active plan with kernels that
match it (a drift check: a device on a mixed or stale configuration, or whose kernel is off the plan, fails the
round). At the end every acknowledged write must be in the history exactly once, where its answer said
(:func:`tests.ha_cluster.check_history`). Draws come from one ``random.Random(seed)``; rounds are logged.

``python -m tests.chaos --faults 120`` runs it long (outside CI), by default as production runs Loom
(:mod:`tests.chaos_ha`: replicas on a replicated store behind HAProxy, auto-TE on the hosts' traffic, the leader,
the follower and the store's primary killed too); ``--single`` runs this module's lab alone (one controller on
SQLite). ``tests/lab/test_chaos_lab.py`` runs one round of each kind of the full mix in CI.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict
from pathlib import Path
from typing import Any

from tests.faults import REPO, FaultLab, Round, lab_intent
from tests.ha_cluster import TOKEN as TRAFFIC_TOKEN
from tests.ha_cluster import Traffic, check_history
from tests.serving import LoomServer

__all__ = ["CHAOS_ENV", "CHAOS_KINDS", "STRIKES", "ChaosLab", "main", "run", "summary"]

#: the faults of a round: the settle harness's during a commit (``frr`` is ``bgpd``), ``zebra``, and ``flap``
CHAOS_KINDS = ("agent", "frr", "zebra", "controller", "link", "flap", "reaction")
#: what strikes the failure reaction's own commit in a ``reaction`` round
STRIKES = ("agent", "frr", "zebra", "controller")


#: the controller's settings: drift checked (and repaired) every 2 s, changes settled every half second
CHAOS_ENV = {"LOOM_DRIFT_INTERVAL": "2", "LOOM_DRIFT_REPAIR": "true", "LOOM_CONFIRM_WITHIN": "30",
             "LOOM_VERIFY_TIMEOUT": "20", "LOOM_SETTLE_INTERVAL": "0.5", "LOOM_COMMIT_POLL_INTERVAL": "0.2"}


def chaos_intent(name: str) -> dict[str, Any]:
    doc = lab_intent(name)
    doc["policies"] = [{"kind": "utilization_limit", "max": 0.35},
                       {"kind": "failure_reaction", "enabled": True, "detect_s": 1, "hold_down_s": 2,
                        "max_per_hour": 1000}]
    return doc


class ChaosLab(FaultLab):
    """The settle harness with failure reaction, drift repair and writers on: :meth:`up`, rounds, :meth:`down`."""

    def __init__(self, base: Path, seed: int, *, name: str = "chaos", settle_timeout: float = 150.0,
                 say: Any = None):
        super().__init__(base, seed, name=name, settle_timeout=settle_timeout, say=say)
        self.intent = chaos_intent(name)
        self.ctl = LoomServer(base, ["--db", str(base / "loom.db"), "--lab", str(self.lab_dir)], TRAFFIC_TOKEN,
                              cwd=REPO, env=CHAOS_ENV, request_timeout=60)
        self.kernels_checked = CHAOS_KINDS
        self.strikes = STRIKES
        self.traffic: Traffic | None = None
        self.since = 0

    def start_writes(self) -> None:
        links = [x["id"] for x in self.get("/v1/links?limit=8")["items"]][4:6]
        self.since = self.get("/v1/status")["head_revision"]
        self.traffic = Traffic(self.ctl.url, links, pause=0.5, readers=0, seed=self.seed)
        self.traffic.start()

    def round(self, index: int, kind: str) -> Round:
        rnd = self.fault_round(index, kind)
        t0 = time.monotonic()
        if rnd.ok:  # the change settled (or the link is back): now the whole fabric, reactions and kernels too
            try:
                self._wait_quiet(time.monotonic() + self.settle_timeout)
                rnd.settle_s = round(rnd.settle_s + time.monotonic() - t0, 2)
            except AssertionError as exc:
                rnd.ok, rnd.detail = False, str(exc)[:3000]
        self.say(f"round {index} {kind} {rnd.target}: {'quiet and on the plan' if rnd.ok else 'FAILED'} "
                 f"{rnd.settle_s} s after the fault {rnd.detail[:500]}")
        return rnd

    def fault_round(self, index: int, kind: str) -> Round:
        """The round's fault and the end of what it disturbed (the quiet fabric is waited for after it)."""
        if kind == "flap":
            return self._flap(index)
        return self._reaction(index) if kind == "reaction" else super().round(index, kind)

    def _flap(self, index: int) -> Round:
        """A link down until the failure reaction has committed its overlay (20 s at most), then up again: the
        full plan returns after the hold-down. ``state`` says whether the reaction was seen."""
        from labs import runner

        rnd = Round(index, "flap")
        self._wait_idle(time.monotonic() + self.settle_timeout)
        before = self._last_reaction()
        link = self.rng.choice([x for x in self.intent["links"] if x["a"] in self.nodes and x["b"] in self.nodes])
        rnd.target = f"{link['a']}:{link['a_port']}"
        t0 = time.monotonic()
        runner.node_exec(self.name, link["a"], ["ip", "link", "set", link["a_port"], "down"])
        try:
            while time.monotonic() - t0 < 20 and self._last_reaction() == before:
                time.sleep(0.2)
            time.sleep(self.rng.uniform(0.0, 1.0))
        finally:
            runner.node_exec(self.name, link["a"], ["ip", "link", "set", link["a_port"], "up"])
        rnd.outage_s = round(time.monotonic() - t0, 2)
        rnd.state = "reacted" if self._last_reaction() != before else "no reaction"
        rnd.ok = True
        return rnd

    def _reaction(self, index: int) -> Round:
        """A link down and, once the failure reaction's change is committing, one of :attr:`strikes` (the
        link comes up again after that change is final): ``state`` is how the struck reaction ended."""
        from labs import runner

        rnd = Round(index, "reaction")
        self._wait_idle(time.monotonic() + self.settle_timeout)
        before = self._last_reaction()
        link = self.rng.choice([x for x in self.intent["links"] if x["a"] in self.nodes and x["b"] in self.nodes])
        runner.node_exec(self.name, link["a"], ["ip", "link", "set", link["a_port"], "down"])
        try:
            cid = self._new_change(lambda c: c.get("kind") == "reaction", before, time.monotonic() + 20)
            time.sleep(self.rng.uniform(0.0, 0.5))
            kind = self.rng.choice(self.strikes)
            rnd.outage_s = round(self.rng.uniform(1.0, 3.0), 2)
            rnd.target = f"{link['a']}:{link['a_port']} then {kind} {self._fault(kind, rnd.outage_s)}"
            rnd.change = cid
            rnd.state = self._final(cid, time.monotonic() + self.settle_timeout)["state"] if cid else "no reaction"
            rnd.ok = True
        except AssertionError as exc:
            rnd.detail = str(exc)[:3000]
        finally:
            runner.node_exec(self.name, link["a"], ["ip", "link", "set", link["a_port"], "up"])
        return rnd

    def _last_reaction(self) -> int:
        """The id of the newest failure reaction change (0: none yet)."""
        items = self.get("/v1/changes?limit=20")["items"]
        return max((c["id"] for c in items if c.get("kind") == "reaction"), default=0)

    def _new_change(self, match: Any, after: int, deadline: float) -> int:
        """The id of the first change after ``after`` that ``match``es once it has left review (committing or
        final), or 0 when none has by ``deadline``."""
        while time.monotonic() < deadline:
            going = [c["id"] for c in self.get("/v1/changes?limit=20")["items"]
                     if c["id"] > after and match(c) and c["state"] not in ("draft", "reviewed")]
            if going:
                return int(min(going))
            time.sleep(0.1)
        return 0

    def _wait_quiet(self, deadline: float) -> None:
        """Until nothing commits, every change is settled, every link is up, no overlay is left, and a drift
        check finds every device on the active plan with its kernel as planned."""
        why: Any = None
        while time.monotonic() < deadline:
            st = self.get("/v1/status")
            unsettled = [c["id"] for c in self.get("/v1/changes?limit=10")["items"] if c.get("settled") is False]
            down = [x["id"] for x in self.get("/v1/state/links")["links"] if x["oper"] != "up"]
            overlay = self.get("/v1/plans/active").get("overlay") or {}
            overlaid = (overlay.get("links") or []) + (overlay.get("devices") or [])
            why = {"committing": st["committing_change"], "unsettled": unsettled, "down": down,
                   "overlay": overlaid}
            if st["committing_change"] is None and not unsettled and not down and not overlaid:
                drift = self.get("/v1/drift?refresh=true")
                off = {d: r["details"] for d, r in drift["devices"].items() if r["status"] != "ok"}
                if not off and drift["devices"] and drift.get("active_revision") == st["active_revision"]:
                    return
                why["drift"] = off
            time.sleep(0.5)
        raise AssertionError(f"the fabric is not quiet and on its plan: {why}")

    def writes_report(self) -> dict[str, Any]:
        """Stop the writers and hold their writes against the history: every acknowledged one exactly once."""
        assert self.traffic is not None
        self.traffic.stop()
        writes = [o for o in self.traffic.outcomes if o.kind == "write"]
        assert [o for o in writes if o.status >= 500 and o.status != 503] == [], \
            [o for o in writes if o.status >= 500 and o.status != 503][:5]
        report = check_history(self.ctl, writes, since=self.since)
        return {"writes": len(writes), **asdict(report)}

    def changes_report(self) -> dict[str, int]:
        """How many changes of each kind, author and final state the run made (``kind author state``)."""
        seen: Counter[str] = Counter()
        offset = 0
        while True:
            page = self.get(f"/v1/changes?limit=100&offset={offset}")["items"]
            seen.update(f"{c.get('kind')} {c.get('author')} {c['state']}" for c in page)
            if len(page) < 100:
                return dict(sorted(seen.items()))
            offset += 100


def run(base: Path, seed: int, faults: int, say: Any = print, *, name: str = "chaos", full: bool = False,
        kinds: tuple[str, ...] | None = None) -> tuple[list[Round], dict[str, Any]]:
    """``faults`` rounds on lab ``name``, every kind in turn (shuffled each turn), stopping at the first round
    that fails. ``full``: Loom as production runs it (:class:`tests.chaos_ha.FullChaosLab`: replicas on a
    replicated store, auto-TE, the store and auto-TE kinds too); the writes' report then says how many leaders
    and store primaries were killed and how auto-TE's struck changes ended. ``kinds``: only those (default:
    every kind of the mode). On a failure the nodes' logs are kept in ``base/logs`` (and the store's formation,
    whose directory :mod:`tests.pgha` then names)."""
    if full:
        from tests.chaos_ha import FULL_KINDS, FullChaosLab  # lazy: tests.chaos_ha builds on this module

        lab: ChaosLab = FullChaosLab(base, seed, name=name, say=say)
        kinds = kinds or FULL_KINDS
    else:
        lab, kinds = ChaosLab(base, seed, name=name, say=say), kinds or CHAOS_KINDS
    rounds: list[Round] = []
    writes: dict[str, Any] = {}
    ok = False
    try:
        lab.up()
        lab.start_writes()
        lab.run_rounds(kinds, faults, rounds)
        writes = {**lab.writes_report(), "changes": lab.changes_report()}
        if full:
            writes.update(leader_kills=lab.ctl.leader_kills, follower_kills=lab.ctl.follower_kills,  # type: ignore[attr-defined]
                          store_kills=lab.ctl.store_kills)  # type: ignore[attr-defined]
        ok = bool(rounds) and all(r.ok for r in rounds)
    finally:
        if lab.traffic is not None:
            lab.traffic.stop()
        if not ok:
            keep_logs(lab.name, lab.nodes, base / "logs")  # the agents' and daemons' side of a failure
            os.environ["LOOM_KEEP_PGHA"] = "1"  # and the store's
        lab.down()
    return rounds, writes


def keep_logs(name: str, nodes: list[str], into: Path) -> None:
    """Copy every node's agent and FRR logs of lab ``name`` under ``into`` (the lab's run directory goes
    with it)."""
    from labs import runner

    for node in nodes:
        for log_file in sorted((runner.run_dir(name) / node).glob("*.log")):
            (into / node).mkdir(parents=True, exist_ok=True)
            (into / node / log_file.name).write_bytes(log_file.read_bytes())


def _keep_run(tmp: Path, kept: Path) -> None:
    """The run's round log, the controllers' and the balancer's logs and the nodes' kept ones, into ``kept``."""
    kept.mkdir(exist_ok=True)
    for name in ("rounds.jsonl", "serve.log", "haproxy.log", *(f"r{i}/serve.log" for i in range(4))):
        if (tmp / name).exists():
            (kept / name.replace("/", "-")).write_bytes((tmp / name).read_bytes())
    if (tmp / "logs").exists():
        shutil.copytree(tmp / "logs", kept / "logs", dirs_exist_ok=True)


def summary(rounds: list[Round], writes: dict[str, Any]) -> dict[str, Any]:
    per_kind = {}
    for kind in dict.fromkeys(r.kind for r in rounds):
        rs = [r for r in rounds if r.kind == kind]
        times = [r.settle_s for r in rs if r.ok]
        per_kind[kind] = {"rounds": len(rs), "ok": sum(r.ok for r in rs),
                          "outcomes": dict(Counter(r.state or "-" for r in rs)),
                          "settle_s_median": round(statistics.median(times), 1) if times else None,
                          "settle_s_worst": round(max(times), 1) if times else None}
    return {"faults": len(rounds), "ok": sum(r.ok for r in rounds),
            "failed": [asdict(r) for r in rounds if not r.ok], "per_kind": per_kind, "writes": writes}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos", description=__doc__.split("\n\n")[0])
    parser.add_argument("--faults", type=int, default=120)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.add_argument("--single", action="store_true",
                        help="one controller on SQLite, no hosts' traffic (default: replicas on a replicated "
                             "store behind HAProxy, auto-TE on the hosts' traffic, store and auto-TE faults)")
    parser.add_argument("--kinds", default="", help="only these kinds of fault, comma-separated")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a stopped run still takes its lab down
    seed = args.seed if args.seed is not None else int(time.time()) % (1 << 31)
    kinds = tuple(k for k in args.kinds.split(",") if k) or None
    kept = Path(tempfile.gettempdir()) / f"loom-chaos-{seed}"
    with tempfile.TemporaryDirectory(prefix="loom-chaos-") as tmp:
        try:
            rounds, writes = run(Path(tmp), seed, args.faults, say=lambda m: print(m, file=sys.stderr, flush=True),
                                 name="chaosrun", full=not args.single, kinds=kinds)  # not the CI test's lab
        finally:  # the logs, whatever happened (a failed check of the history raises)
            _keep_run(Path(tmp), kept)
        out = {"seed": seed, **summary(rounds, writes), "kept": str(kept)}
    print(json.dumps(out, indent=None if args.json else 2))
    return 0 if out["ok"] == out["faults"] == args.faults else 1


if __name__ == "__main__":
    sys.exit(main())

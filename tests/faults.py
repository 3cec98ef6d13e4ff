"""Faults from outside during commits, on a real FRR lab: the harness of the settle lab test and bench.

:class:`FaultLab` brings clos3-small up in network namespaces under its own
name, with a ``loom serve --lab`` whose leader settles every half second,
and commits the lab's intent. A round (:meth:`FaultLab.round`) toggles
a drain of a spine as a reviewed change, commits it and, at a random moment
of the commit, does one of :data:`KINDS` from outside: SIGKILL one random
device agent, SIGKILL one random node's ``bgpd``, SIGKILL the controller, or
set one random fabric link down; 1 to 3 s later it restarts what it killed
(the agent with :func:`labs.runner.start_agents`, ``bgpd`` as the runner
starts it, empty as after a crash; the controller, which recovers) or sets the
link up. Then it waits, with a bound, until the change is final and settled,
no change commits, the active revision is the one the change's final state
names, and every device runs it with nothing pending and kernels that match
its plan (a drift check). Every draw comes from one ``random.Random(seed)``
and every round is logged (:attr:`FaultLab.log`), so a failure replays with
the same seed.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from labs.clab import Topology
from tests.labkit import lab_up
from tests.serving import LOOM, LoomServer

__all__ = ["KERNEL_CHECKED", "KINDS", "FaultLab", "Round", "restart_daemon"]

REPO = Path(__file__).resolve().parent.parent
KINDS = ("agent", "frr", "controller", "link")
#: Faults after which the kernels must match the plan too (``LOOM_FAULT_KERNELS``, comma-separated; default none).
#: The rounds always hold revisions (every device on the final state's config hash, nothing pending); kernels are
#: recorded in ``Round.kernel_drift``: with drift repair off (as here) a restarted bgpd is empty, and BGP sessions
#: reset by a bgpd or agent restart can leave a neighbour's kernel off the plan until something re-pushes it.
#: The chaos run (:mod:`tests.chaos`) turns drift repair on and checks kernels after every kind of fault. (A veth
#: set down used to lose its next hop from zebra's kernel nexthop groups for good, an FRR 8.4 bug; Loom renders
#: ``no zebra nexthop kernel enable`` since, and inline next hops come back with the link.)
KERNEL_CHECKED = tuple(k for k in os.environ.get("LOOM_FAULT_KERNELS", "").split(",") if k)
TOKEN = "faults-" + "Qm8Zt2Lx5Wc9Vb4Nh7Jd3Ks6Pf1Rg0Ya"


@dataclass
class Round:
    """One round: what was done, when, and how the fabric ended."""

    index: int
    kind: str
    target: str = ""
    delay_s: float = 0.0  # after the commit was asked
    outage_s: float = 0.0
    change: int = 0
    state: str = ""
    settled: bool = False
    settle_s: float = 0.0  # from the fault's end to every device on the final revision
    commit_s: float = 0.0  # from the commit asked to the change final
    ok: bool = False
    detail: str = ""
    unsettled_seen: list[str] = field(default_factory=list)  # devices a settle document named on the way
    kernel_drift: dict[str, list[str]] = field(default_factory=dict)  # kernels off the plan at the end (frr, link)


def lab_intent(name: str) -> dict[str, Any]:
    doc = yaml.safe_load((REPO / "labs" / "clos3-small" / "intent.yaml").read_text())
    doc["name"] = name
    for link in doc["links"]:
        if link["b"].startswith("spine"):
            link["capacity_gbps"] = 25.0
    # the rounds judge how a commit ends under faults; a failure reaction to the link fault would be a
    # second change of its own (tests/component/test_failure_reaction.py and the e2e lab test that one)
    doc["policies"] = [{"kind": "utilization_limit", "max": 0.35}, {"kind": "failure_reaction", "enabled": False}]
    return doc


class FaultLab:
    """clos3-small as lab ``name`` under ``base`` with its controller; :meth:`up` then rounds, then :meth:`down`."""

    def __init__(self, base: Path, seed: int, *, name: str = "settle", settle_timeout: float = 90.0,
                 say: Callable[[str], None] | None = None):
        self.base, self.name, self.seed = base, name, seed
        self.rng = random.Random(seed)
        self.settle_timeout = settle_timeout
        self.log = base / "rounds.jsonl"
        self.say = say or (lambda _m: None)
        self.lab_dir = base / name
        self.intent = lab_intent(name)
        self.nodes = [d["name"] for d in self.intent["devices"]]
        self.ctl = LoomServer(base, ["--db", str(base / "loom.db"), "--lab", str(self.lab_dir)], TOKEN, cwd=REPO,
                              env={"LOOM_DRIFT_INTERVAL": "0", "LOOM_DRIFT_REPAIR": "false",
                                   "LOOM_CONFIRM_WITHIN": "30", "LOOM_VERIFY_TIMEOUT": "20",
                                   "LOOM_SETTLE_INTERVAL": "0.5", "LOOM_COMMIT_POLL_INTERVAL": "0.2"},
                              request_timeout=60)
        self.topo: Topology | None = None
        self.commit_estimate = 5.0
        self.kernels_checked: tuple[str, ...] = KERNEL_CHECKED
        self.hosts = 0  # hosts per ToR in the lab

    # -- life cycle ----------------------------------------------------------------
    def up(self) -> None:
        self.topo = lab_up(self.base, self.name, self.intent, hosts=self.hosts)
        self.ctl.start()
        ch = self._apply(self.base / "intent.yaml")
        assert ch["state"] == "committed", ch
        self.commit_estimate = max(1.0, _commit_seconds(ch))  # faults land within a commit as long as this one
        self._wait_fabric(ch["id"], "committed", time.monotonic() + self.settle_timeout)

    def down(self) -> None:
        from labs import runner

        self.ctl.stop()
        runner.down(self.name, self.nodes)

    # -- the API -------------------------------------------------------------------
    def get(self, path: str) -> Any:
        r = self.ctl("GET", path)
        assert r.status_code == 200, (path, r.status_code, r.text)
        return r.json()

    def _apply(self, path: Path) -> dict[str, Any]:
        """``loom apply`` of the intent at ``path`` (review, commit, wait), as an operator would."""
        env = {**os.environ, "LOOM_TOKEN": self.ctl.token, "LOOM_SERVER": self.ctl.url}
        done = subprocess.run([*LOOM, "apply", str(path), "--json", "-m", "the lab's intent"], capture_output=True,
                              text=True, env=env, cwd=REPO, timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
        return dict(json.loads(done.stdout))

    def _final(self, cid: int, deadline: float) -> dict[str, Any]:
        while True:
            try:
                ch = self.get(f"/v1/changes/{cid}")
                if ch["state"] != "committing":
                    return dict(ch)
            except Exception:  # the controller is restarting  # noqa: BLE001
                pass
            assert time.monotonic() < deadline, f"change {cid} still committing"
            time.sleep(0.2)

    # -- one round -----------------------------------------------------------------
    def round(self, index: int, kind: str) -> Round:
        rnd = Round(index, kind)
        self._wait_idle(time.monotonic() + self.settle_timeout)
        active = self.get("/v1/status")["active_revision"]
        cid = rnd.change = self.reviewed_toggle(active)
        rnd.delay_s = round(self.rng.uniform(0.0, self.commit_estimate), 2)
        rnd.outage_s = round(self.rng.uniform(1.0, 3.0), 2)
        t_commit = time.monotonic()
        c = self.ctl("POST", f"/v1/changes/{cid}/commit", json={})
        assert c.status_code == 202, c.text
        time.sleep(max(0.0, rnd.delay_s - (time.monotonic() - t_commit)))
        rnd.target = self._fault(kind, rnd.outage_s)
        t_back = time.monotonic()
        deadline = t_back + self.settle_timeout
        try:
            ch = self._final(cid, deadline)
            rnd.commit_s = round(time.monotonic() - t_commit, 2)
            rnd.state = ch["state"]
            want = ch["proposed_revision"] if ch["state"] == "committed" else active
            rnd.unsettled_seen, rnd.kernel_drift = self._wait_fabric(
                cid, ch["state"], deadline, want_active=want, kernels=kind in self.kernels_checked)
            rnd.settled, rnd.ok = True, True
            rnd.settle_s = round(time.monotonic() - t_back, 2)
        except AssertionError as exc:
            rnd.detail = str(exc)[:3000]
        with self.log.open("a") as fh:
            fh.write(json.dumps({"seed": self.seed, **asdict(rnd)}) + "\n")
        self.say(f"round {index} {kind} {rnd.target} at +{rnd.delay_s}s for {rnd.outage_s}s: change {cid} "
                 f"{rnd.state} {'settled' if rnd.ok else 'NOT SETTLED'} in {rnd.settle_s}s "
                 f"(unsettled on the way: {rnd.unsettled_seen or '-'}; kernels off the plan: "
                 f"{sorted(rnd.kernel_drift) or '-'})")
        return rnd

    def reviewed_toggle(self, base: int) -> int:
        """A change toggling the drain of spine-0-0 on revision ``base``, reviewed safe: its id."""
        doc = self.get(f"/v1/revisions/{base}/intent")
        drained = [i for i, p in enumerate(doc["policies"]) if p.get("kind") == "drain"]
        patch = ([{"op": "remove", "path": f"/policies/{drained[0]}"}] if drained else
                 [{"op": "add", "path": "/policies/-", "value": {"kind": "drain", "target": "spine-0-0"}}])
        r = self.ctl("POST", "/v1/changes", json={"base_revision": base, "patch": patch})
        assert r.status_code == 201, r.text
        cid = int(r.json()["id"])
        rv = self.ctl("POST", f"/v1/changes/{cid}/review")
        assert rv.status_code == 200 and rv.json()["verdict"] == "safe", rv.text
        return cid

    def run_rounds(self, kinds: tuple[str, ...], count: int, into: list[Round]) -> list[Round]:
        """``count`` rounds appended to ``into``, every kind in turn (the order shuffled at each turn),
        stopping at the first round that does not end settled (later rounds would start from a broken state)."""
        order = list(kinds)
        for i in range(count):
            if i % len(order) == 0:
                self.rng.shuffle(order)
            into.append(self.round(i, order[i % len(order)]))
            if not into[-1].ok:
                break
        return into

    def _fault(self, kind: str, outage: float) -> str:
        from labs import runner

        if kind == "controller":
            self.ctl.kill9()
            time.sleep(outage)
            self.ctl.start()
            return "controller"
        node = self.rng.choice(self.nodes)
        ndir = runner.run_dir(self.name) / node
        if kind == "agent":
            needle = f"{ndir / 'agent.sock'}".encode()
            pids = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and _cmdline(p).count(needle)]
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):  # one that ended since it was listed
                    os.kill(pid, signal.SIGKILL)
            time.sleep(outage)
            runner.start_agents(self.topo)
            return node
        if kind == "frr":
            os.kill(int((ndir / "bgpd.pid").read_text().split()[0]), signal.SIGKILL)
            time.sleep(outage)
            restart_daemon(self.name, node, "bgpd")
            return f"{node}/bgpd"
        if kind == "zebra":  # FRR's clients do not resync with a new zebra: watchfrr restarts them all with it
            os.kill(int((ndir / "zebra.pid").read_text().split()[0]), signal.SIGKILL)
            time.sleep(outage)
            others = [p.stem for p in sorted(ndir.glob("*.pid")) if p.stem not in ("zebra", "agent")]
            for daemon in others:
                try:
                    os.kill(int((ndir / f"{daemon}.pid").read_text().split()[0]), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
            for daemon in ["zebra", *others]:
                restart_daemon(self.name, node, daemon)
            return f"{node}/zebra"
        assert kind == "link", kind
        link = self.rng.choice([x for x in self.intent["links"] if x["a"] in self.nodes and x["b"] in self.nodes])
        runner.node_exec(self.name, link["a"], ["ip", "link", "set", link["a_port"], "down"])
        time.sleep(outage)
        runner.node_exec(self.name, link["a"], ["ip", "link", "set", link["a_port"], "up"])
        return f"{link['a']}:{link['a_port']}"

    # -- waiting ---------------------------------------------------------------------
    def _wait_idle(self, deadline: float) -> None:
        while True:
            st = self.get("/v1/status")
            left = [c for c in self.get("/v1/changes?limit=5")["items"] if c.get("settled") is False]
            if st["committing_change"] is None and not left:
                return
            assert time.monotonic() < deadline, f"not idle: committing {st['committing_change']}, unsettled {left}"
            time.sleep(0.3)

    def _wait_fabric(self, cid: int, state: str, deadline: float, want_active: int | None = None,
                     kernels: bool = True) -> tuple[list[str], dict[str, list[str]]]:
        """Until change ``cid`` is settled, nothing commits, the active revision is ``want_active`` and a drift
        check finds every device on it with nothing pending (``kernels``: and kernels as planned). Returns the
        devices seen unsettled on the way and the kernel differences left (without ``kernels``)."""
        seen: set[str] = set()
        last: Any = None
        while True:
            ch = self.get(f"/v1/changes/{cid}")
            seen |= set((ch.get("settle") or {}).get("pending") or {})
            st = self.get("/v1/status")
            ok = ch["state"] == state and ch.get("settled") is True and st["committing_change"] is None and (
                want_active is None or st["active_revision"] == want_active)
            if ok:
                last = self.get("/v1/drift?refresh=true")
                if last.get("active_revision") == st["active_revision"] and last["devices"]:
                    off = {d: r["details"] for d, r in last["devices"].items() if r["status"] != "ok"}
                    revision = {d: [x for x in why if not _kernel_only(x)] for d, why in off.items()}
                    if not off or not kernels and not any(revision.values()):
                        return sorted(seen), off
            assert time.monotonic() < deadline, (
                f"change {cid} not settled in time: state {ch['state']} settled {ch.get('settled')} "
                f"settle {ch.get('settle')} status {st} drift "
                f"{ {d: r for d, r in ((last or {}).get('devices') or {}).items() if r['status'] != 'ok'} }")
            time.sleep(0.5)


def restart_daemon(lab: str, node: str, daemon: str) -> None:
    """Start FRR's ``daemon`` on ``node`` again as the runner starts it, empty as after a crash (its pid file
    and vty socket replaced), and wait for its vty."""
    from labs import runner

    ndir = runner.run_dir(lab) / node
    (ndir / f"{daemon}.vty").unlink(missing_ok=True)
    subprocess.run(["ip", "netns", "exec", runner.namespace(lab, node), "unshare", "--uts", "sh", "-c",
                    f"hostname {node}; {runner.daemon_command(ndir, daemon)}"], check=True, timeout=30)
    deadline = time.monotonic() + 15
    while not (ndir / f"{daemon}.vty").exists() and time.monotonic() < deadline:
        time.sleep(0.05)


def _kernel_only(detail: str) -> bool:
    """A drift detail about kernel routes (``PREFIX: ...``), not the running config or a pending change."""
    return detail[:1].isdigit()


def _commit_seconds(ch: dict[str, Any]) -> float:
    """From a change's ``committing`` transition to its final one."""
    from datetime import datetime

    at = {t["state"]: datetime.fromisoformat(t["at"]) for t in ch["transitions"]}
    return (at[ch["state"]] - at["committing"]).total_seconds()


def _cmdline(p: Path) -> bytes:
    try:
        return (p / "cmdline").read_bytes()
    except OSError:
        return b""

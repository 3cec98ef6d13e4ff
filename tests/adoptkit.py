"""The harness of the adoption labs (``tests/lab/test_adopt_*_lab.py``): a hand-written lab that Loom did not
build, ``loom serve --lab`` on it, and the checks every adoption makes whatever the routing.

* :class:`AdoptLab`: the lab and its controller (started by :meth:`AdoptLab.up`, torn down by ``down``);
  :func:`served` is a module fixture's body.
* :func:`hops`: a kernel route's next hops as (gateway, port, share of the weight), so that two routes that
  split alike compare equal whatever the scale of their weights.
* :func:`adopt_under_watch`: ``loom apply`` of the discovered intent while a :class:`Sampler` reads every
  router's routes every 50 ms and a host pings another across the fabric every 20 ms.
* :func:`adopt_cleanly`: the review of the adoption is cosmetic, and the adoption under watch changes no route
  sample and loses no ping.
* :func:`best_routes`: what a router forwards on (the kernel's lowest-metric route per destination).
* :func:`check_reweighting` and :func:`check_drain`: what a Loom-built lab does after the adoption.
"""

from __future__ import annotations

import json
import re
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from labs import runner
from labs.clab import load_topology
from tests.labkit import ServedLab
from tests.serving import LoomServer

REPO = Path(__file__).resolve().parents[1]

#: destination -> (protocol, next hops as (gateway, port, share of the weight))
Routes = dict[str, tuple[str, tuple[tuple[str, str, float], ...]]]


class AdoptLab(ServedLab):
    """A hand-written lab (not generated from an intent) with ``loom serve --lab`` on it."""

    def __init__(self, base: Path, name: str, topology: Path, nodes: tuple[str, ...], hosts: tuple[str, ...],
                 token: str):
        super().__init__(base, name, {"name": name, "devices": [{"name": n} for n in nodes + hosts]}, token)
        self.topology, self.nodes, self.host_nodes = topology, nodes, hosts
        self.server = LoomServer(base, ["--db", str(base / "loom.db"), "--lab", str(topology)], token, cwd=REPO,
                                 env={"LOOM_DRIFT_INTERVAL": "0"})

    def up(self, timeout: float = 90) -> None:
        runner.down(self.name, self.nodes + self.host_nodes)  # a lab left by an earlier run that was killed
        report = runner.up(load_topology(self.topology), timeout=timeout, settle=True)  # as `loom lab up` does
        assert report.converged, report.problems
        self.server.start()

    def vtysh(self, node: str, command: str) -> Any:
        """The JSON answer of ``command`` on ``node``'s FRR."""
        return json.loads(self.vtysh_text(node, command))

    def vtysh_text(self, node: str, command: str) -> str:
        return runner.node_exec(self.name, node, ["vtysh", "--vty_socket", str(runner.run_dir(self.name) / node),
                                                  "-c", command])

    def discover(self, *args: str) -> dict[str, Any]:
        """``loom discover ARGS --json``'s document (exit 0 asserted)."""
        out = self.cli("discover", *args, "--json")
        assert out.returncode == 0, out.stdout + out.stderr
        return dict(json.loads(out.stdout))

    def ping(self, host: str, address: str, *, count: int = 3, interval: float = 0.2) -> bool:
        out = subprocess.run(["ip", "netns", "exec", runner.namespace(self.name, host), "ping", "-q", "-n",
                              "-c", str(count), "-i", str(interval), address], capture_output=True, text=True,
                             timeout=10 + count * interval)
        return out.returncode == 0


def served(tmp_path_factory: pytest.TempPathFactory, *args: Any) -> Iterator[AdoptLab]:
    """A module fixture's body: :class:`AdoptLab` ``(base, *args)`` up, yielded, always torn down."""
    lab = AdoptLab(tmp_path_factory.mktemp(str(args[0])), *args)
    try:
        lab.up()
        yield lab
    finally:
        lab.down()


def hops(r: dict[str, Any]) -> tuple[tuple[str, str, float], ...]:
    """An ``ip -j route`` entry's next hops: (gateway, port, share of the weight), sorted."""
    nexthops = r.get("nexthops") or [r]
    total = sum(int(h.get("weight", 1)) for h in nexthops)
    return tuple(sorted((h.get("gateway", ""), h.get("dev", ""), round(int(h.get("weight", 1)) / total, 6))
                        for h in nexthops))


class Sampler(threading.Thread):
    """``read()`` (every router's routes) every ``every`` seconds until :attr:`halt` is set."""

    def __init__(self, read: Callable[[], dict[str, Routes]], every: float = 0.05):
        super().__init__(daemon=True)
        self.read, self.every = read, every
        self.samples: list[tuple[float, dict[str, Routes]]] = []
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            self.samples.append((time.monotonic(), self.read()))
            time.sleep(self.every)


@dataclass
class Watched:
    """What :func:`adopt_under_watch` saw: the change as it ended, the pings sent and received, the samples."""

    done: dict[str, Any]
    sent: int
    received: int
    samples: list[tuple[float, dict[str, Routes]]]

    def differing(self, before: dict[str, Routes]) -> list[tuple[float, str]]:
        """(time, router) of every sample in which a router's routes differ from ``before``."""
        return [(round(t, 2), n) for t, s in self.samples for n in s if s[n] != before[n]]

    def summary(self) -> str:
        return (f"{len(self.samples)} samples of {len(self.samples[0][1])} routers' routes over "
                f"{self.samples[-1][0] - self.samples[0][0]:.1f} s; ping: {self.received}/{self.sent} received")


def adopt_under_watch(lab: AdoptLab, path: Path, read: Callable[[], dict[str, Routes]], src: str, dst: str, *,
                      settle_s: float = 1.0) -> Watched:
    """``loom apply PATH`` while :class:`Sampler` runs ``read`` every 50 ms and host ``src`` pings ``dst`` 400
    times, 20 ms apart; then ``settle_s`` more (what the routing does after the commit is part of the adoption)."""
    sampler = Sampler(read)
    sampler.start()
    ping = subprocess.Popen(["ip", "netns", "exec", runner.namespace(lab.name, src), "ping", "-q", "-n", "-i", "0.02",
                             "-c", "400", dst], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        change = json.loads(lab.cli("apply", str(path), "--json", check=True).stdout)
        done = lab.wait(change["id"])
        time.sleep(settle_s)
        pinged, _ = ping.communicate(timeout=30)
    finally:
        ping.kill()
        sampler.halt.set()
        sampler.join(10)
    counts = re.search(r"(\d+) packets transmitted, (\d+) received", pinged)
    assert counts is not None, pinged
    return Watched(done, int(counts.group(1)), int(counts.group(2)), sampler.samples)


def adopt_cleanly(lab: AdoptLab, path: Path, read: Callable[[], dict[str, Routes]], src: str, dst: str) -> Watched:
    """The review of ``loom apply PATH`` is a cosmetic adoption of every router of the lab and pushes nothing;
    then :func:`adopt_under_watch` commits it with no sample of ``read()`` differing from before and no ping
    from ``src`` to ``dst`` lost."""
    before = read()
    dry = json.loads(lab.cli("apply", str(path), "--dry-run", "--json", check=True).stdout)
    adoption = dry.get("review", dry)["adoption"]
    assert adoption == {"devices": list(lab.nodes), "cosmetic": True, "warnings": []}, adoption
    assert before == read()  # a review pushes nothing
    seen = adopt_under_watch(lab, path, read, src, dst)
    assert seen.done["state"] == "committed", seen.done
    assert seen.sent == 400 and seen.received == seen.sent, seen.summary()
    differing = seen.differing(before)
    assert len(seen.samples) > 20 and differing == [], differing[:10]
    assert read() == before
    return seen


def best_routes(lab: str, node: str, family: str = "-4") -> Routes:
    """What ``node`` forwards on per destination of ``family`` (``-4``, ``-6``): the route the kernel uses (the
    lowest metric: Loom's ``fib`` routes sit above the IGP's with the same next hops), as next hops (gateway,
    port, share of the weight)."""
    best: dict[str, tuple[int, Any]] = {}
    for r in runner.node_routes(lab, node, 6 if family == "-6" else 4):
        if r["dst"] not in best or int(r.get("metric", 0)) < best[r["dst"]][0]:
            best[r["dst"]] = (int(r.get("metric", 0)), r)
    return {dst: ("", hops(r)) for dst, (_m, r) in best.items()}


def routes(lab: str, node: str) -> Routes:
    """Every route of ``node``'s main table, both families: protocol and next hops (gateway, port, share of the
    weight) by destination as ``ip`` prints it."""
    return {str(r["dst"]): (str(r.get("protocol", "")), hops(r)) for version in (4, 6)
            for r in runner.node_routes(lab, node, version)}


def until(read: Callable[[], Routes], prefix: str, want: Callable[[Any], bool], timeout: float = 20) -> Any:
    """The route to ``prefix`` in ``read()`` once ``want(route)`` holds, or the last one read at ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        got = read().get(prefix)
        if (got is not None and want(got)) or time.monotonic() > deadline:
            return got
        time.sleep(0.2)


def check_reweighting(lab: AdoptLab, read: Callable[[], Routes], *, fast: str, slow: str, spine: str,
                      src: str, prefix: str) -> None:
    """Uneven capacities (the links of ``spine`` 10, the others 30) and a demand from ``src`` to ``prefix``:
    ``read()`` (``src``'s routes) splits 1:3 over ``slow`` and ``fast``, as the plan's WCMP weights say."""
    doc = yaml.safe_load((lab.base / "intent.yaml").read_text())
    for link in doc["links"]:
        link["capacity_gbps"] = 10.0 if spine in (link["a"], link["b"]) else 30.0
    doc["demands"] = [{"from": src, "to": prefix, "gbps": 20}]
    done = lab.wait(lab.apply(doc)["id"])
    assert done["state"] == "committed", done
    got = until(read, prefix, lambda r: {h[1]: h[2] for h in r[1]}.get(fast) == 0.75)
    assert got is not None and {h[1]: h[2] for h in got[1]} == {slow: 0.25, fast: 0.75}, got


def check_drain(lab: AdoptLab, read: Callable[[], Routes], *, spine: str, prefix: str, port_left: str) -> None:
    """A drain of ``spine``: ``read()``'s route to ``prefix`` leaves only through ``port_left``."""
    doc = yaml.safe_load((lab.base / "intent.yaml").read_text())
    doc["policies"] = [{"kind": "drain", "target": spine}]
    done = lab.wait(lab.apply(doc)["id"])
    assert done["state"] == "committed", done
    got = until(read, prefix, lambda r: [h[1] for h in r[1]] == [port_left])
    assert got is not None and [h[1] for h in got[1]] == [port_left], got

"""The chaos run, short (#31): one fault of each kind, Loom deployed as production runs it (two replicas on a
pg_auto_failover store behind HAProxy, :mod:`tests.chaos_ha`) on clos3-hosts with the hosts' traffic, auto-TE,
failure reaction, drift repair and writers on (``python -m tests.chaos --faults 120`` runs it long). The kinds:
a device agent, a node's bgpd, its zebra, the leader replica, the follower, the store's primary machine and a
link, each killed (or set down) during a commit; a link flap; a link down whose failure reaction is struck by
one of those while it commits; and one of those striking auto-TE's own commit after the hosts' traffic shifted.

After every round the fabric must end quiet (nothing committing, every change settled, every link up, no
overlay left) with every device on the active plan and every kernel as planned; at the end, every acknowledged
write is in the history exactly once. The seed is printed and ``LOOM_CHAOS_SEED=N`` replays it.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from tests.chaos import run, summary
from tests.chaos_ha import FULL_KINDS

pytestmark = pytest.mark.slow


def test_one_fault_of_each_kind_leaves_every_device_on_the_plan_and_loses_no_write(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    seed = int(os.environ.get("LOOM_CHAOS_SEED") or random.SystemRandom().randrange(1 << 31))
    base: Path = tmp_path_factory.mktemp("chaos")
    print(f"chaos seed {seed} (LOOM_CHAOS_SEED={seed} replays it); rounds logged in {base / 'rounds.jsonl'}")
    rounds, writes = run(base, seed, len(FULL_KINDS), full=True)
    out = summary(rounds, writes)
    print(out)
    assert not out["failed"], f"seed {seed}: {out['failed'][0]}"
    assert {r.kind for r in rounds} == set(FULL_KINDS)
    autote = [r for r in rounds if r.kind == "autote"]
    assert autote[0].change, f"auto-TE committed nothing after the traffic shifted: {autote[0]}"
    assert all(r.state == "reacted" for r in rounds if r.kind == "flap"), [r for r in rounds if r.kind == "flap"]
    assert all(r.change for r in rounds if r.kind == "reaction"), [r for r in rounds if r.kind == "reaction"]
    assert writes["acknowledged"] > 0, writes

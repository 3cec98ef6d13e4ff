"""A change is final only when the fabric is: randomized faults during commits on clos3-small.

Each round toggles a drain of a spine as a reviewed change, commits it, and at
a random moment of the commit SIGKILLs a random device agent, a random node's
``bgpd`` or the controller, or sets a random fabric link down, restarting it
(or setting the link up) 1 to 3 s later (:mod:`tests.faults`). After every
round, within a bound, the change is final and settled and every device runs
the revision its final state names, with nothing awaiting confirmation
(kernels are recorded and printed: FRR 8.4 does not always restore them after
a bgpd restart or a link flap, :data:`tests.faults.KERNEL_CHECKED`).
Rounds run while the module's time budget lasts
(``LOOM_FAULT_BUDGET_S``, default 60 s of rounds: about 3 minutes in all), at least one of each kind;
the seed is printed and every round logged, and ``LOOM_FAULT_SEED=N`` replays
a run (``make bench`` runs more rounds).
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import pytest

from tests.faults import KINDS, FaultLab

pytestmark = pytest.mark.slow


def test_after_every_fault_every_device_ends_on_the_revision_the_change_names(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    seed = int(os.environ.get("LOOM_FAULT_SEED") or random.SystemRandom().randrange(1 << 31))
    budget = float(os.environ.get("LOOM_FAULT_BUDGET_S", "60"))
    base: Path = tmp_path_factory.mktemp("settle")
    print(f"fault seed {seed} (LOOM_FAULT_SEED={seed} replays it); rounds logged in {base / 'rounds.jsonl'}")
    lab = FaultLab(base, seed, say=print)
    rounds = []
    try:
        lab.up()
        t0 = time.monotonic()
        order = list(KINDS)
        while len(rounds) < len(KINDS) or time.monotonic() - t0 < budget:
            if len(rounds) % len(KINDS) == 0:
                lab.rng.shuffle(order)
            rounds.append(lab.round(len(rounds), order[len(rounds) % len(KINDS)]))
            if not rounds[-1].ok:
                break  # the fabric is not settled: later rounds would start from a broken state
    finally:
        lab.down()
    bad = [r for r in rounds if not r.ok]
    assert not bad, f"seed {seed}: round {bad[0].index} ({bad[0].kind} {bad[0].target} at +{bad[0].delay_s}s " \
                    f"for {bad[0].outage_s}s): {bad[0].detail}"
    assert {r.kind for r in rounds} == set(KINDS)

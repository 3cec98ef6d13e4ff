"""Compile the numba kernels once, before the suite's workers start.

The kernels are compiled with ``cache=True`` (see :mod:`solver.core.jit`): the first process to call
one compiles it and writes the package's ``__pycache__``; later processes load it in milliseconds. In a
fresh clone no cache exists, and the suite's first phase starts three workers at once that all reach
the replay kernels within seconds, so each compiles all of them, on two cores, beside the other tests:
one test that replays every single failure took 51-208 s in CI against 4 s with the cache. Run serially
first (``make test`` does), the compile happens once, on a quiet machine, in about 15 s; with the cache
present this takes about 2 s.

``python -m tests.warm``: a replay of a small Clos under every single failure and under the pairs of
single failures (the two kernel paths the safety sweep takes), on writable arrays and on read-only ones (as
a Ray worker maps them from the object store: :mod:`safety.raysweep`); one failure pushed directly (a
reaction's judgement, :mod:`safety.direct`); and the example fabric's plan (the solver's kernels).
"""

from __future__ import annotations

import pickle
import sys
import time
from pathlib import Path

import yaml

import controller.examples
from controller.model.intent import validate_intent
from safety.direct import replay_scenario
from safety.replay import Replayer
from safety.scenarios import scenarios
from safety.sweep import LocalExecutor, sweep
from solver.solve import solve
from tests.unit.test_safety_replay import routed_plan
from tests.unit.test_safety_sweep import fabric


def read_only(rp: Replayer) -> Replayer:
    """``rp`` as a Ray worker gets it from the object store: every array read-only (pickled with its buffers
    apart, loaded over read-only views of them), which numba compiles its own kernels for."""
    buffers: list[pickle.PickleBuffer] = []
    data = pickle.dumps(rp, protocol=5, buffer_callback=buffers.append)
    copy: Replayer = pickle.loads(data, buffers=[b.raw().toreadonly() for b in buffers])
    return copy


def main() -> int:
    t0 = time.perf_counter()
    intent = fabric(0.45)
    plan = routed_plan(intent, seed=3)
    for rp in (Replayer(intent, plan), read_only(Replayer(intent, plan))):
        for scope in ("all_single", "single_pairs"):
            sweep(intent, plan, scope=scope, executor=LocalExecutor(workers=1), rp=rp)
    # a ToR's failure leaves its rack's traffic uncounted and no other crosses it: the direct push of a
    # reaction's judgement (safety.direct)
    rack = next(sc for sc in scenarios(intent, "all_single") if sc.kind == "device" and
                next(iter(sc.devices)).startswith("tor-"))
    replay_scenario(intent, plan, rack)
    example = Path(controller.examples.__file__).with_name("dc1.yaml")
    solve(validate_intent(yaml.safe_load(example.read_text())))
    print(f"tests.warm: kernels compiled or loaded in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

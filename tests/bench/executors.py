"""Benchmark rows for the sweep's executors: scenarios per second per worker, the local executor's
beside a Ray cluster's, on one sweep of pairs of single failures of Clos L (``make bench``; not
part of the tests).

The sweep: ``--executor-sample`` (default 100,000) pairs of single links and devices of Clos L
(the ``single_pairs`` sweep's scenarios, the two-failure scope on a fabric whose every pair is
too many: 360 million), drawn at random (seeded) among all pairs, none pruned, in chunks of 512.
Each executor replays the same chunks; the pairs' results (the failing pairs in full, the
passing ones counted, :class:`safety.sweep.PairTally`) must be identical, and the row says so.
Every pair of this plan stays under the fabric's failure limit (1.0: its worst link under two
failures is at about 0.22), so the sweep judges them at :data:`JUDGED_AT` instead: some 7% then
fail, and their full results (every stage, every invariant) cross back from the workers too, as
an unsafe change's would.

Rows: the local executor (workers forked after the compile, as ``loom check`` runs it); a local
Ray cluster, as many workers as the local executor has, started and warm before the clock
starts (the start, which puts the fabric in the object store once and has each worker read it
and load the kernels, is its own column, and the row's result counts it in too); and the same
with each worker copying the fabric into its own memory (``private=True``, see
:mod:`safety.raysweep`). The executors take turns, slice after slice of the sample
(:data:`ROUNDS`), so that other work on a shared machine weighs on each alike. Per worker:
scenarios per second divided by the workers. The issue's figure for the Ray executor before
this version: 57 scenarios per second per worker against the local executor's 1,715 (0.03x;
Clos M, every single failure, the start inside the window).
"""

from __future__ import annotations

import time
from typing import Any

from rich.table import Table

__all__ = ["run"]

SAMPLE = 100_000
CHUNK = 512
ROUNDS = 4  # slices of the sample, each swept by every executor in turn
JUDGED_AT = 0.21  # the failure limit the pairs are judged at (see the module's docstring)
BEFORE = "before: 57 against 1,715 per worker (0.03x; issue 35)"


def sample_pairs(n_single: int, count: int, seed: int = 1) -> Any:
    """``count`` distinct pairs ``(i, j)``, ``i < j``, of ``n_single`` singles, seeded, in index order."""
    import numpy as np

    rng = np.random.default_rng(seed)
    seen: set[tuple[int, int]] = set()
    while len(seen) < count:
        a, b = rng.integers(0, n_single, (2, 2 * (count - len(seen))))
        for i, j in zip(np.minimum(a, b).tolist(), np.maximum(a, b).tolist(), strict=True):
            if i != j and len(seen) < count:
                seen.add((i, j))
    return np.array(sorted(seen), dtype=np.int64)


def _same(a: Any, b: Any) -> bool:
    return bool(a.replayed == b.replayed and a.transient == b.transient and a.keyed == b.keyed)


def _merge(parts: list[Any]) -> Any:
    from safety.sweep import PairTally

    out = PairTally()
    for t in parts:
        out._keyed.extend(t.keyed)
        out.replayed += t.replayed
        out.transient += t.transient
    return out


class _ForkedLocal:
    """The local executor in a child forked before Ray starts, sweeping slices on request: once Ray
    runs threads in this process, the local executor would (rightly) not fork its workers here,
    and ``loom check`` forks them. The child holds the compiled fabric it was forked with."""

    def __init__(self, rp: Any, single: Any):
        import multiprocessing

        self.mode, self._n = "processes", 0
        ctx = multiprocessing.get_context("fork")
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=self._serve, args=(child, rp, single))
        self._proc.start()
        self._n = self._conn.recv()

    @staticmethod
    def _serve(conn: Any, rp: Any, single: Any) -> None:
        from safety.sweep import LocalExecutor, sweep_pairs

        ex = LocalExecutor()
        conn.send(ex.workers())
        while (piece := conn.recv()) is not None:
            tally = sweep_pairs(rp, single, piece, ex, CHUNK)
            conn.send((tally.keyed, tally.replayed, tally.transient, ex.mode))

    def workers(self) -> int:
        return self._n

    def sweep(self, piece: Any) -> Any:
        from safety.sweep import PairTally

        self._conn.send(piece)
        keyed, replayed, transient, self.mode = self._conn.recv()
        out = PairTally()
        out._keyed, out.replayed, out.transient = keyed, replayed, transient
        return out

    def close(self) -> None:
        try:
            self._conn.send(None)
        except OSError:
            pass
        self._proc.join(timeout=30)
        if self._proc.is_alive():
            self._proc.kill()


def _sweeps(rp: Any, single: Any, pairs: Any, executors: dict[str, Any]) -> dict[str, tuple[float, Any]]:
    """Every executor's sweep of ``pairs``, in :data:`ROUNDS` interleaved slices (local, then each Ray
    executor, slice after slice): on a shared machine a load that comes and goes weighs on every row
    alike. Seconds and the merged results per executor."""
    import numpy as np

    from safety.sweep import sweep_pairs

    spent = dict.fromkeys(executors, 0.0)
    parts: dict[str, list[Any]] = {k: [] for k in executors}
    for piece in np.array_split(pairs, ROUNDS):
        for name, ex in executors.items():
            t0 = time.perf_counter()
            parts[name].append(ex.sweep(piece) if isinstance(ex, _ForkedLocal)
                               else sweep_pairs(rp, single, piece, ex, CHUNK))
            spent[name] += time.perf_counter() - t0
    return {k: (spent[k], _merge(parts[k])) for k in executors}


def run(args: Any) -> Table:
    from safety.replay import Replayer
    from safety.scenarios import singles
    from safety.sweep import RayExecutor, loopback_ray
    from tests.bench.safety import planned

    count = getattr(args, "executor_sample", None) or SAMPLE
    intent, plan, _ = planned("L")
    rp = Replayer(intent, plan)
    rp.limits = {**rp.limits, "failure": JUDGED_AT}
    single = list(singles(intent))
    pairs = sample_pairs(len(single), count)
    table = Table(title=f"sweep executors: {len(pairs):,} random pairs of single failures of Clos L "
                        f"({len(single):,} singles), judged at {JUDGED_AT:g}, chunks of {CHUNK}, {ROUNDS} interleaved "
                        "rounds (2-core shared machine: indicative)")
    for col in ("executor", "workers", "start s", "sweep s", "scenarios/s", "per worker", "vs local", "result"):
        table.add_column(col, justify="left" if col in ("executor", "result") else "right")
    local_ex = _ForkedLocal(rp, single)
    n = local_ex.workers()
    loopback_ray()
    import ray

    ray.init(num_cpus=2 * n, include_dashboard=False, log_to_driver=False, _node_ip_address="127.0.0.1")
    try:
        rays = {"ray": RayExecutor(workers=n), "ray, private copy of the fabric": RayExecutor(workers=n, private=True)}
        started = {k: ex.start(rp, single) for k, ex in rays.items()}
        got = _sweeps(rp, single, pairs, {"local": local_ex, **rays})
        for ex in rays.values():
            ex.close()
    finally:
        ray.shutdown()
        local_ex.close()
    t_local, local = got["local"]
    ref = len(pairs) / t_local / n
    table.add_row(f"local ({local_ex.mode})", str(n), "", f"{t_local:.1f}", f"{len(pairs) / t_local:.0f}",
                  f"{ref:.0f}", "1.00",
                  f"the reference: {len(local.keyed)} failing, {local.transient} with transient black holes")
    for label, ex in rays.items():
        t_ray, res = got[label]
        per, t_start = len(pairs) / t_ray / ex.workers(), started[label]
        with_start = len(pairs) / (t_ray + t_start) / ex.workers()
        table.add_row(label, str(ex.workers()), f"{t_start:.1f}", f"{t_ray:.1f}", f"{len(pairs) / t_ray:.0f}",
                      f"{per:.0f}", f"{per / ref:.2f}",
                      f"results {'identical to' if _same(res, local) else 'DIFFER from'} the local executor's; with "
                      f"the start: {with_start:.0f} per worker, {with_start / ref:.2f}x; {BEFORE}")
    return table


if __name__ == "__main__":
    import argparse

    from rich.console import Console

    ap = argparse.ArgumentParser()
    ap.add_argument("--executor-sample", type=int, default=SAMPLE)
    Console(width=220).print(run(ap.parse_args()))

"""Benchmark rows for telemetry (``make bench`` section ``telemetry``; not part of the tests).

Two tables, each row beside its reference.

* **Ingest**: the collector (:class:`controller.telemetry.Telemetry`) fed the
  samples of 1,000 devices at a 10 s interval: 64 interfaces x 6 counters and
  128 AFT prefixes x 2 counters per device (640,000 samples per interval, one
  batch per device as a gNMI stream delivers them), after two warm-up intervals
  that create the rows. CPU seconds per interval (and the share of one core at
  10 s), and the resident memory the collector added (its rings are allocated
  whole, so this is its size at a full window). The reference is a bare dict of
  ``deque(maxlen=36)`` appending ``(t, value)`` per counter (no rates, no
  checks) on the same samples; its memory is after the 7 intervals run and
  grows with every sample until its deques are full. Each runs in a fresh
  process.
* **Live subscription**: ``STREAM_DEVICES`` dry agents in one process serve
  synthetic counters (64 ports, 128 prefixes each) over gNMI on unix sockets;
  the collector's :class:`~controller.telemetry.stream.TelemetryStream` in
  another process subscribes to all of them. Its CPU per sample round (gNMI
  decode, buffering and ingest) scaled to 1,000 devices, beside the ingest row's
  figure (ingest alone) as the reference.
* **Demand estimation** on Clos M and L (sizes of :mod:`tests.bench.solver`,
  seed 1, 5% of links missing, 20% heterogeneous): with AFT counters (the
  collector's demand view on synthetic counters, exact by construction) and
  without (tomogravity: routing-matrix build and fit times, relative L1 error
  over the matrix, the link-load residual), beside the plain gravity prior's
  error as the reference. At L (4.2 million unknown pairs) ``A`` is not built:
  :func:`safety.estimate.routing_operator` applies it by propagation, and the
  fit is cut at 100 LSQR iterations x 2 rounds. Two matrices: the solver bench's ``uniform`` (all
  pairs at M, 32 random destinations per ToR at L; a product-form matrix that
  gravity already gets right at M) and ``sparse`` (16 random destinations per
  ToR with log-normal masses, which gravity does not).
"""

from __future__ import annotations

import multiprocessing as mp
import resource
import time
from collections import deque
from typing import Any

import numpy as np
from rich.table import Table

__all__ = ["estimation_row", "ingest_row", "run", "stream_row"]

DEVICES, IFACES, IFACE_COUNTERS, AFT_PREFIXES = 1000, 64, 6, 128
INTERVAL_S, WARMUP, MEASURED = 10.0, 2, 5
LARGE_ITER_LIM, LARGE_ROUNDS = 100, 2  # LSQR at L, on the matrix-free operator (about 1 s per iteration)
_COUNTERS = ("in-octets", "out-octets", "in-pkts", "out-pkts", "in-discards", "out-discards")


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def _paths() -> list[str]:
    from controller.telemetry import aft_path, interface_path

    paths = [interface_path(f"eth{i}", c) for i in range(IFACES) for c in _COUNTERS[:IFACE_COUNTERS]]
    for k in range(AFT_PREFIXES):
        prefix = f"10.{k // 256}.{k % 256}.0/24"
        paths += [aft_path(prefix, "octets-forwarded"), aft_path(prefix, "packets-forwarded")]
    return paths


def _ingest_child(kind: str, queue: Any) -> None:
    try:
        from controller.telemetry import Sample, Telemetry

        paths = _paths()
        names = [f"dev-{i}" for i in range(DEVICES)]
        rng = np.random.default_rng(1)
        rates = rng.uniform(1e6, 1e9, size=len(paths))
        t0 = 1_700_000_000.0
        store: Any = Telemetry() if kind == "collector" else {}
        before = _rss_mb()
        cpu = 0.0
        for k in range(WARMUP + MEASURED):
            now = t0 + k * INTERVAL_S
            values = (rates * (k * INTERVAL_S)).astype(np.int64).tolist()
            ns = int(now * 1e9)
            spent = 0.0
            for dev in names:
                batch = [Sample(dev, p, v, ns) for p, v in zip(paths, values, strict=True)]
                c0 = time.process_time()
                if kind == "collector":
                    store.ingest(batch, now)
                else:
                    for s in batch:
                        q = store.get((s.device, s.path))
                        if q is None:
                            q = store[(s.device, s.path)] = deque(maxlen=36)
                        q.append((s.timestamp_ns, s.value))
                spent += time.process_time() - c0
            if k >= WARMUP:
                cpu += spent
        queue.put({"kind": kind, "samples": DEVICES * len(paths), "cpu_s": cpu / MEASURED,
                   "mem_mb": _rss_mb() - before})
    except BaseException as exc:  # report, never hang the parent
        queue.put({"kind": kind, "error": f"{type(exc).__name__}: {exc}"[:200]})


def _in_child(target: Any, *args: Any, timeout: float = 1800) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=target, args=(*args, queue))
    proc.start()
    try:
        return queue.get(timeout=timeout)  # type: ignore[no-any-return]
    except Exception:
        return {"error": f"no answer within {timeout:.0f} s"}
    finally:
        if proc.is_alive():
            proc.terminate()
        proc.join(10)


STREAM_DEVICES, STREAM_INTERVAL_S, STREAM_ROUNDS = 200, 5.0, 4


def _fleet_child(names: list[str], base: str, queue: Any) -> None:
    """``names`` dry agents in one process, each serving gNMI over synthetic counters (64 ports, 128 prefixes)."""
    import asyncio
    from pathlib import Path

    from southbound.device.agent import AgentCore, serve
    from southbound.device.counters import SyntheticCounters
    from southbound.device.frr_apply import DryFrr

    ports = tuple(f"eth{i}" for i in range(1, IFACES + 1))
    prefixes = tuple(f"10.{k // 256}.{k % 256}.0/24" for k in range(AFT_PREFIXES))

    async def main() -> None:
        ready = asyncio.Event()
        started = []

        def one() -> None:
            started.append(1)
            if len(started) == len(names):
                ready.set()

        stop = asyncio.Event()
        tasks = [asyncio.create_task(serve(
            AgentCore(DryFrr(Path(base) / n / "dry"), Path(base) / n / "state", n), f"unix:{base}/{n}.sock",
            ready=one, stop=stop, counters=SyntheticCounters(n, default_ports=ports, extra_prefixes=prefixes)))
            for n in names]
        await ready.wait()
        queue.put({"ready": True})
        await asyncio.gather(*tasks)

    asyncio.run(main())


def _stream_child(names: list[str], base: str, queue: Any) -> None:
    """The server's gNMI subscription (:class:`controller.telemetry.stream.TelemetryStream`) to ``names``,
    CPU and memory measured over ``STREAM_ROUNDS`` sample intervals after the first full round."""
    try:
        import asyncio

        from controller.telemetry import Options, Telemetry
        from controller.telemetry.stream import StreamOptions, TelemetryStream

        async def main() -> dict[str, Any]:
            async def active() -> None:
                return None

            before = _rss_mb()
            tel = Telemetry(Options(interval_s=STREAM_INTERVAL_S))
            stream = TelemetryStream(tel, {n: f"unix:{base}/{n}.sock" for n in names}, active,
                                     options=StreamOptions(interval_s=STREAM_INTERVAL_S))
            await stream.start()
            deadline = time.monotonic() + 120
            while len(stream.connected) < len(names):
                assert time.monotonic() < deadline, f"{len(stream.connected)} of {len(names)} streams up"
                await asyncio.sleep(0.2)
            await asyncio.sleep(STREAM_INTERVAL_S)  # one full round after every stream is up
            c0, k0 = time.process_time(), tel.counts()["counters"]
            await asyncio.sleep(STREAM_ROUNDS * STREAM_INTERVAL_S)
            cpu = (time.process_time() - c0) / STREAM_ROUNDS
            counts = tel.counts()
            await stream.stop()
            return {"devices": len(names), "counters": counts["counters"], "new_counters": counts["counters"] - k0,
                    "cpu_s": cpu, "mem_mb": _rss_mb() - before}

        queue.put(asyncio.run(main()))
    except BaseException as exc:  # report, never hang the parent
        queue.put({"error": f"{type(exc).__name__}: {exc}"[:200]})


def stream_row(devices: int = STREAM_DEVICES) -> dict[str, Any]:
    """A fleet of ``devices`` dry agents serving synthetic counters over gNMI in one process, and the
    collector's live subscription to all of them in another: the subscriber's CPU per sample round."""
    import tempfile

    ctx = mp.get_context("spawn")
    names = [f"dev-{i}" for i in range(devices)]
    with tempfile.TemporaryDirectory() as base:
        queue = ctx.Queue()
        fleet = ctx.Process(target=_fleet_child, args=(names, base, queue))
        fleet.start()
        try:
            if "ready" not in queue.get(timeout=300):
                return {"error": "the fleet did not start"}
            row = _in_child(_stream_child, names, base, timeout=600)
        finally:
            fleet.terminate()
            fleet.join(10)
    return row


def ingest_row(kind: str) -> dict[str, Any]:
    """CPU seconds per interval and memory of ``collector`` or ``reference`` ingest (a fresh process)."""
    return _in_child(_ingest_child, kind)


def _estimation_child(size: str, matrix: str, queue: Any) -> None:
    try:
        from controller.gen import clos_document
        from controller.model.intent import validate_intent
        from controller.planning import compile_plan
        from controller.telemetry import Telemetry
        from safety.estimate import link_loads, routing_matrix, routing_operator, tomogravity
        from tests.bench.solver import SIZES
        from tests.telemetry_synth import Fabric

        pods, tors, planes, spines = SIZES[size]
        kw: dict[str, Any] = {"demand": "uniform"} if matrix == "uniform" else {"demand": "gravity", "fanout": 16}
        intent = validate_intent(clos_document(pods=pods, tors=tors, planes=planes, spines=spines, seed=1,
                                               missing=0.05, hetero=0.2, load=0.9, **kw))
        plan = compile_plan(intent)
        truth = {(d.from_, d.to): d.gbps for d in intent.demands if d.gbps > 0}
        total = sum(truth.values())
        y = link_loads(intent, plan)
        row: dict[str, Any] = {"size": size, "matrix": matrix, "devices": len(intent.devices),
                               "demands": len(truth)}
        tors_n = pods * tors
        row["unknowns"] = tors_n * (tors_n - 1)
        # the AFT view through the collector (at L, only the entries that carry traffic)
        fabric = Fabric(intent, plan, aft_zeros=tors_n <= 256)
        tel = Telemetry()
        for k in range(4):
            tel.ingest(fabric.samples(fabric.t0 + 10 * k), now=fabric.t0 + 10 * k)
        t0 = time.perf_counter()
        view = tel.demand(intent, plan, fabric.t0 + 35, 60)
        row["aft_s"] = time.perf_counter() - t0
        keys = set(truth) | set(view.demands)
        row["aft_err"] = sum(abs(view.demands.get(k, 0) - truth.get(k, 0)) for k in keys) / total
        del fabric, tel
        explicit = row["unknowns"] <= 1_000_000  # beyond, A would hold hundreds of millions of entries
        t0 = time.perf_counter()
        rm = routing_matrix(intent, plan) if explicit else routing_operator(intent, plan)
        t1 = time.perf_counter()
        est = tomogravity(rm, y) if explicit else tomogravity(rm, y, iter_lim=LARGE_ITER_LIM, rounds=LARGE_ROUNDS)
        t2 = time.perf_counter()
        x_true = np.array([truth.get(p, 0.0) for p in rm.pairs])
        row.update(a_s=t1 - t0, fit_s=t2 - t1, nnz=rm.matrix.nnz if explicit else "operator",
                   tomo_err=float(np.abs(est.gbps - x_true).sum() / total),
                   grav_err=float(np.abs(est.prior - x_true).sum() / total),
                   residual=est.residual / float(y.sum()))
        row["peak_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        queue.put(row)
    except BaseException as exc:  # report, never hang the parent
        queue.put({"size": size, "matrix": matrix, "error": f"{type(exc).__name__}: {exc}"[:200]})


def estimation_row(size: str, matrix: str) -> dict[str, Any]:
    """Demand estimation on one Clos size and matrix (a fresh process)."""
    return _in_child(_estimation_child, size, matrix)


def _f(row: dict[str, Any], key: str, fmt: str = "{:.3f}") -> str:
    return fmt.format(row[key]) if key in row else "-"


def _nnz(row: dict[str, Any]) -> str:
    nnz = row.get("nnz", "-")
    return f"{nnz:,}" if isinstance(nnz, int) else str(nnz)


def run(args: Any) -> list[Table]:
    ingest = Table(title=f"telemetry ingest: {DEVICES} devices, {IFACES} x {IFACE_COUNTERS} interface + "
                         f"{AFT_PREFIXES} x 2 AFT counters each, every {INTERVAL_S:g} s")
    for col in ("ingest", "samples / interval", "CPU s / interval", "core share", "memory MB",
                "reference CPU s", "reference MB (7 samples)"):
        ingest.add_column(col, justify="right")
    ref = ingest_row("reference")
    col = ingest_row("collector")
    if "error" in col or "error" in ref:
        ingest.add_row("collector", col.get("error", ""), ref.get("error", ""), "", "", "", "")
    else:
        ingest.add_row("collector (rates, resets, wraps, stale)", f"{col['samples']:,}", f"{col['cpu_s']:.2f}",
                       f"{100 * col['cpu_s'] / INTERVAL_S:.0f}%", f"{col['mem_mb']:.0f}",
                       f"{ref['cpu_s']:.2f}", f"{ref['mem_mb']:.0f}")
    stream = Table(title=f"live gNMI subscription: {STREAM_DEVICES} dry agents (synthetic counters, one process) "
                         f"every {STREAM_INTERVAL_S:g} s, scaled to 1,000 devices at {INTERVAL_S:g} s")
    for c in ("devices", "counters", "subscriber CPU s / round", "per 1,000 devices", "core share at 10 s",
              "memory MB", "reference: ingest alone per 1,000"):
        stream.add_column(c, justify="right")
    sr = stream_row()
    if "error" in sr:
        stream.add_row(sr["error"], *[""] * 6)
    else:
        per_k = sr["cpu_s"] * 1000 / sr["devices"]
        stream.add_row(str(sr["devices"]), f"{sr['counters']:,}", f"{sr['cpu_s']:.2f}", f"{per_k:.2f}",
                       f"{100 * per_k / INTERVAL_S:.0f}%", f"{sr['mem_mb']:.0f}",
                       f"{col['cpu_s']:.2f}" if "cpu_s" in col else "")
    est = Table(title="demand estimation: AFT counters (exact) and tomogravity (link counters only), "
                      "beside the gravity prior")
    for c in ("size", "matrix", "devices", "demands", "unknowns", "AFT s", "AFT err", "A s", "A nnz",
              "tomogravity s", "tomogravity err", "link residual", "gravity err (ref)", "peak MB"):
        est.add_column(c, justify="right")
    sizes = (args.sizes.split(",") if getattr(args, "sizes", None) else ["M", "L"])
    for size in sizes:
        for matrix in ("uniform", "sparse"):
            r = estimation_row(size, matrix)
            if "error" in r:
                est.add_row(size, matrix, r["error"], *[""] * 11)
                continue
            est.add_row(size, matrix, str(r["devices"]), f"{r['demands']:,}", f"{r['unknowns']:,}",
                        _f(r, "aft_s"), _f(r, "aft_err", "{:.1e}"), _f(r, "a_s", "{:.1f}"),
                        _nnz(r), _f(r, "fit_s", "{:.1f}"), _f(r, "tomo_err"),
                        _f(r, "residual", "{:.1e}"), _f(r, "grav_err"), _f(r, "peak_mb", "{:.0f}"))
    return [ingest, stream, est]

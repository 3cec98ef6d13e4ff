"""Benchmark tables for the REST API (``make bench`` section ``api``).

**Reads**: ``loom serve`` on a SQLite store holding Clos M, and beside it a bare
FastAPI app (:mod:`tests.bench.bare_app`) that answers the very bytes Loom
answered, on the same uvicorn with the same settings. Each read (``GET
/v1/intent``, ``GET /v1/devices?limit=50``, ``GET /v1/links?limit=50``, one
device) is loaded by :mod:`tests.bench.httpload` with a viewer token from the
store, Loom and the bare app in alternating rounds so that both see the same
machine; the table gives requests per second (median of the rounds), p99
latency (over all rounds) and Loom's share of the bare app's rate. A last row
is Loom answering ``If-None-Match`` with 304.

**Writes**: one-field PATCHes of a link's capacity (with ``If-Match``) through
``loom serve`` on Clos M, Clos L and a fabric of 100,000 devices: the first
PATCH after the server starts (it checks the stored head whole once), then the
median and worst of the next ones, and the bytes each revision added to the
store's tables beside the size of the document (what a full copy per revision
stored before).

Wall-clock figures on a shared machine: the load average is printed with them.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from rich.table import Table
from sqlalchemy import create_engine, text

from tests.bench.httpload import measure, request_bytes

__all__ = ["fabric", "patch_row", "reads_table", "run"]

READS = ("/v1/intent", "/v1/devices?limit=50", "/v1/links?limit=50", "/v1/devices/leaf-3-1")
ADMIN_TOKEN = "bench-" + "x7Kq2vR9mZ4pL8sT3nW6yB1cF5hJ0dG"
ROUNDS = 3
SECONDS = 2.0
CONNECTIONS = 4
FABRICS: dict[str, dict[str, Any]] = {
    "Clos M": {"pods": 16, "tors": 16, "planes": 4, "spines": 8},
    "Clos L": {"pods": 64, "tors": 32, "planes": 8, "spines": 16},
    "100k devices": {"pods": 250, "tors": 400, "planes": 1, "spines": 8, "fanout": 1},
}


#: explicit loopbacks for fabrics larger than the router-id pool (validation refuses such a fabric without them)
LOOPBACKS = "172.16.0.0"


def fabric(sizes: dict[str, Any]) -> dict[str, Any]:
    """The bench's intent document of ``sizes``; past the router-id pool every device gets an explicit loopback
    (from 172.16.0.0/12), as an operator of such a fabric would give them."""
    import ipaddress

    from controller.gen import clos_document
    from controller.model.addressing import DEVICE_SLOTS

    doc = clos_document(**sizes, scale_to_ecmp=False)
    if len(doc["devices"]) > DEVICE_SLOTS:
        first = ipaddress.IPv4Address(LOOPBACKS)
        for i, d in enumerate(doc["devices"]):
            d["loopback"] = str(first + 1 + i)
    return doc


def _load() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.1f} (5 min {five:.1f}) on {os.cpu_count()} cores"


def _seed(url: str, doc: dict[str, Any]) -> dict[str, str]:
    from controller import service
    from controller.store.db import Database

    db = Database(url)
    db.migrate()
    ctx = service.WriteContext(actor=service.Actor("bench", "admin"))
    with db.session() as s:
        service.replace_intent(doc, session=s, ctx=ctx)
        tokens = {r: service.create_token(f"bench-{r}", r, session=s, ctx=ctx)[1] for r in ("viewer", "operator")}
    db.dispose()
    return tokens


def _serve(base: Path, url: str) -> Any:
    from tests.serving import LoomServer

    server = LoomServer(base, ["--db", url], ADMIN_TOKEN, ready_timeout=300, request_timeout=300)
    server.start()
    return server


def _bare(base: Path, bodies: dict[str, tuple[bytes, str]]) -> tuple[subprocess.Popen[bytes], int]:
    from tests.serving import free_port, stop_processes, wait_ready

    index = {}
    for i, (path, (body, ctype)) in enumerate(bodies.items()):
        (base / f"r{i}").write_bytes(body)
        index[path] = [f"r{i}", ctype]
    index["/readyz"] = ["ready", "application/json"]
    (base / "ready").write_bytes(b"{}")
    (base / "index.json").write_text(json.dumps(index))
    port = free_port()
    log = base / "bare.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen([sys.executable, "-m", "tests.bench.bare_app", str(base), str(port)], stdout=out,
                                stderr=subprocess.STDOUT, cwd=Path(__file__).resolve().parents[2])
    try:
        wait_ready(f"http://127.0.0.1:{port}", proc, log)
    except BaseException:  # never leave the app running when it did not come up as expected
        stop_processes([proc])
        raise
    return proc, port


def reads_table(sizes: dict[str, int] | None = None) -> Table:
    from tests.serving import stop_processes

    base = Path(tempfile.mkdtemp(prefix="loom-bench-api-"))
    url = f"sqlite:///{base / 'loom.db'}"
    doc = fabric(sizes or FABRICS["Clos M"])
    tokens = _seed(url, doc)
    server = _serve(base, url)
    bare = None
    try:
        auth = {"Authorization": f"Bearer {tokens['viewer']}"}
        bodies: dict[str, tuple[bytes, str]] = {}
        etags: dict[str, str] = {}
        for path in READS:
            r = httpx.get(server.url + path, headers=auth, timeout=300)
            r.raise_for_status()
            bodies[path] = (r.content, r.headers["content-type"])
            etags[path] = r.headers.get("etag", "")
        bare, bare_port = _bare(base, bodies)
        for path in READS:  # the bare app answers the same bytes
            assert httpx.get(f"http://127.0.0.1:{bare_port}{path}").content == bodies[path][0]
        table = Table(title=f"api: reads on {doc['name']} ({len(bodies['/v1/intent'][0]) / 1e6:.1f} MB intent), "
                            f"{CONNECTIONS} connections, {ROUNDS} rounds of {SECONDS:g} s; {_load()}")
        for col in ("GET", "bytes", "Loom req/s", "Loom p99 ms", "bare req/s", "bare p99 ms", "Loom / bare"):
            table.add_column(col, justify="left" if col == "GET" else "right")
        for path in READS:
            req = request_bytes(path, auth)
            loom_runs, bare_runs = [], []
            measure(server.port, req, seconds=0.5, connections=CONNECTIONS)  # warm
            measure(bare_port, req, seconds=0.5, connections=CONNECTIONS)
            for _ in range(ROUNDS):
                loom_runs.append(measure(server.port, req, seconds=SECONDS, connections=CONNECTIONS))
                bare_runs.append(measure(bare_port, req, seconds=SECONDS, connections=CONNECTIONS))
            lr = statistics.median(r.rps for r in loom_runs)
            br = statistics.median(r.rps for r in bare_runs)
            errors = sum(r.errors for r in loom_runs + bare_runs)
            table.add_row(path, f"{len(bodies[path][0]):,}", f"{lr:,.0f}", _p99(loom_runs), f"{br:,.0f}",
                          _p99(bare_runs), f"{lr / br:.2f}" + (f" ({errors} errors)" if errors else ""))
        req = request_bytes("/v1/intent", {**auth, "If-None-Match": etags["/v1/intent"]})
        runs = [measure(server.port, req, seconds=SECONDS, connections=CONNECTIONS, expect=304)
                for _ in range(ROUNDS)]
        errors = sum(r.errors for r in runs)
        table.add_row("/v1/intent If-None-Match", "0", f"{statistics.median(r.rps for r in runs):,.0f}", _p99(runs),
                      "-", "-", "304" + (f" ({errors} not 304)" if errors else ""))
        return table
    finally:
        stop_processes([p for p in (server.proc, bare) if p is not None])
        shutil.rmtree(base, ignore_errors=True)


def _p99(runs: list[Any]) -> str:
    lat = sorted(x for r in runs for x in r.latencies)
    return f"{lat[min(len(lat) - 1, int(0.99 * len(lat)))] * 1000:.1f}" if lat else "-"


def _stored_bytes(url: str) -> int:
    """What the revisions take in the tables (the same sum as tests/component/test_revisions.py)."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return sum(int(conn.execute(text(q)).scalar() or 0) for q in (
                "SELECT sum(length(body) + length(hash)) FROM intent_objects",
                "SELECT sum(length(section) + length(ident) + 8 + coalesce(length(object_hash), 0)) "
                "FROM revision_entries",
                "SELECT sum(length(hash) + length(top_hash) + length(whole) + length(author) + length(message) + 32) "
                "FROM revisions"))
    finally:
        engine.dispose()


def patch_row(name: str, sizes: dict[str, Any], patches: int = 10) -> list[str]:
    from tests.serving import stop_processes

    base = Path(tempfile.mkdtemp(prefix="loom-bench-patch-"))
    url = f"sqlite:///{base / 'loom.db'}"
    try:
        doc = fabric(sizes)
        doc_bytes = len(json.dumps(doc, separators=(",", ":")))
        t0 = time.perf_counter()
        tokens = _seed(url, doc)
        seed_s = time.perf_counter() - t0
        server = _serve(base, url)
        try:
            auth = {"Authorization": f"Bearer {tokens['operator']}"}
            link = f"leaf-0-0:eth{sizes['tors'] + 1}"
            with httpx.Client(base_url=server.url, headers=auth, timeout=600) as client:
                etag = client.get(f"/v1/links/{link}").headers["etag"]
                times, stored = [], []
                for i in range(patches + 1):
                    before = _stored_bytes(url)
                    t = time.perf_counter()
                    r = client.patch(f"/v1/links/{link}", json={"capacity_gbps": 40 + i}, headers={"If-Match": etag})
                    times.append(time.perf_counter() - t)
                    r.raise_for_status()
                    etag = r.headers["etag"]
                    stored.append(_stored_bytes(url) - before)
        finally:
            stop_processes([server.proc] if server.proc else [])
        devices = len(doc["devices"])
        rest = times[1:]
        return [name, f"{devices:,}", f"{len(doc['links']):,}", f"{doc_bytes / 1e6:.1f} MB", f"{seed_s:.1f}",
                f"{times[0] * 1000:.0f}", f"{statistics.median(rest) * 1000:.1f}", f"{max(rest) * 1000:.1f}",
                f"{statistics.median(stored[1:]):,.0f}", f"{doc_bytes / statistics.median(stored[1:]):,.0f}x"]
    finally:
        shutil.rmtree(base, ignore_errors=True)


def patch_table(names: list[str]) -> Table:
    table = Table(title=f"api: one-field PATCH (a link's capacity, If-Match) through loom serve on SQLite; {_load()}")
    for col in ("fabric", "devices", "links", "document", "seed s", "first PATCH ms", "PATCH ms (median)",
                "PATCH ms (worst)", "bytes stored / revision", "full copy / stored"):
        table.add_column(col, justify="left" if col == "fabric" else "right")
    for name in names:
        table.add_row(*patch_row(name, FABRICS[name]))
    return table


def run(args: Any) -> list[Table]:
    """The reads table, then the PATCH table (``--sizes`` picks fabrics: M, L, 100k)."""
    wanted = {"M": "Clos M", "L": "Clos L", "100K": "100k devices"}
    names = [wanted[s.strip().upper()] for s in args.sizes.split(",")] if args.sizes else list(FABRICS)
    return [reads_table(), patch_table(names)]

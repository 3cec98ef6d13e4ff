"""Shared test configuration: tiers, prerequisites, and the fixtures many modules use.

Tiers. Every test has exactly one tier marker, so a run can pick a tier with
``-m`` (``make test TIER=unit``):

* ``unit``: pure, in one process; no servers, no subprocesses;
* ``component``: real servers in-process (the ASGI app under ``TestClient``,
  gRPC agents on unix sockets or port 0), ``loom serve`` or agent subprocesses,
  PostgreSQL;
* ``lab``: root and FRR, real routers in network namespaces;
* ``browser``: Debian's chromium driven by Playwright against ``loom serve``.

A module's tier is :data:`TIERS`' entry for it; a test that differs from its
module carries its own tier marker (``@pytest.mark.component``), which then
replaces the module's. Collection fails for a module missing from the table, a
table entry naming no module, or a test with two tiers, so a new (or renamed)
module cannot be forgotten.

Prerequisites. Lab tests (root and FRR), PostgreSQL tests (``@pytest.mark.postgres``),
HAProxy tests (``@pytest.mark.haproxy``) and browser tests (chromium and playwright)
skip here with a reason where their prerequisites are missing, decided once for the session. In CI (``CI`` set)
the prerequisites are installed by ``make test``, so a skip of any of them
there is turned into a failure: the suite must not pass without having run them.
"""

from __future__ import annotations

import functools
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import pg
from tests.balancer import haproxy_missing

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
_MUST_RUN = ("lab", "postgres", "haproxy", "browser")

TIER_NAMES = ("unit", "component", "lab", "browser")

#: each test module's tier (see the module docstring); a test may override it with its own marker
TIERS: dict[str, str] = {
    "test_addressing.py": "unit",            # stable numbering; through the store and the app is component
    "test_agent_core.py": "unit",            # the agent's state machine on files; its gRPC round trip is component
    "test_agent_golden.py": "unit",
    "test_agent_lab.py": "lab",
    "test_api.py": "component",
    "test_auto_te.py": "component",          # the re-tuning loop through the app on dry agents; its rails are unit
    "test_api_fuzz.py": "component",
    "test_api_reads.py": "component",        # cached reads, 304s, token and head caches across replicas
    "test_closed_loop_lab.py": "lab",
    "test_cluster.py": "component",          # leases on real stores, the agents' fence, the commit queue
    "test_commit_legs.py": "component",      # a commit through intermediate plans on dry agents, and its undo
    "test_check_cli.py": "unit",
    "test_documents.py": "component",        # the typed documents through a real app and its OpenAPI
    "test_dry_driver.py": "component",       # the workflow through the app, on in-process dry agents
    "test_errors.py": "component",
    "test_cli_core.py": "unit",              # `loom serve` as a subprocess is component
    "test_client.py": "component",           # the public client against a real `loom serve`, through a proxy
    "test_cli_polish.py": "unit",            # the CLI on a pseudo-terminal is component
    "test_e2e_lab.py": "lab",
    "test_gen.py": "unit",
    "test_gnmi_agent.py": "component",       # gNMI served by in-process agents; real counters in netns are lab
    "test_ha.py": "component",               # replicas behind HAProxy on PostgreSQL: kills, freezes, a slow store
    "test_input_bounds.py": "unit",          # reading text within bounds; the numbers of the model
    "test_fib_failure_lab.py": "lab",        # a failed link under static fib routes against the replay
    "test_frr_delta.py": "unit",               # the agent's fast path: config trees and the vtysh difference
    "test_idempotent_writes.py": "component",  # Idempotency-Key on intent writes, across two replicas
    "test_hostile.py": "component",          # hostile input against one real `loom serve`
    "test_intent.py": "unit",
    "test_jobs.py": "component",                # the compile is unit; the what-if runs the API in-process
    "test_lab_fabric.py": "lab",
    "test_lab_files.py": "unit",             # `loom lab up` as a subprocess is component
    "test_lab_hosts.py": "lab",              # one lab with hosts for the module
    "test_lab_traffic.py": "unit",           # matrices and the traffic plan, no lab
    "test_lab_runner.py": "lab",
    "test_logs.py": "component",
    "test_metrics.py": "component",
    "test_outage.py": "component",       # PostgreSQL stopped under a real loom serve; the pure checks are unit
    "test_pki.py": "component",
    "test_render.py": "unit",                # FRR's own parser is lab
    "test_revisions.py": "component",        # revisions stored by content, on SQLite and PostgreSQL
    "test_safety_replay.py": "unit",
    "test_safety_robust.py": "unit",
    "test_safety_sweep.py": "unit",          # pairs of single failures against brute force
    "test_safety_ray.py": "component",       # a local Ray cluster (2 CPUs, loopback) against the local executor
    "test_settle.py": "unit",                # staged commits and settling on in-process dry agents
    "test_settle_lab.py": "lab",             # randomized faults during commits on clos3-small; every round settles
    "test_solver_lp.py": "unit",
    "test_solver_relax.py": "unit",
    "test_solver_routing.py": "unit",
    "test_merge.py": "unit",                 # a change's edits carried onto a moved head (31.1)
    "test_lost_edits.py": "component",       # no edit lost to a dry run, a drain or a stale base (31.1)
    "test_failure_reaction.py": "component",  # links fail on dry agents: seen, re-planned around, back
    "test_operations.py": "unit",            # the operational view, damping, overlay and judgement
    "test_bench_smoke.py": "component",      # the API bench at small sizes (31.8)
    "test_take_up.py": "component",          # the leader's take-up of its own commit against recovery (31.0)
    "test_solver_descent.py": "unit",
    "test_solver_weights.py": "unit",
    "test_snapshot.py": "unit",              # snapshots and incremental validation against the whole-document oracle
    "test_store.py": "component",
    "test_transition.py": "unit",            # mixed states, stage bounds and schedules against brute force
    "test_tokens.py": "component",        # the last admin, token names, refused requests in the audit log
    "test_telemetry.py": "unit",             # counter windows, views and tomogravity on synthetic counters
    "test_telemetry_api.py": "component",    # the views and the capture through the app, on dry agents
    "test_telemetry_drains.py": "unit",
    "test_telemetry_lab.py": "lab",
    "test_telemetry_patterns.py": "unit",     # the endpoint test through the app is component
    "test_telemetry_stream.py": "component",     # the server's gNMI subscription to a fleet of real agents
    "test_transaction_dry.py": "component",
    "test_ui_browser.py": "browser",
    "test_vty.py": "unit",                   # the vty shell protocol against a daemon on a unix socket
    "test_workflow_api.py": "component",
    "test_workflow_cli.py": "component",
}


# -- tiers -------------------------------------------------------------------------------

@pytest.hookimpl(tryfirst=True)  # before -m deselects by the markers given here
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Give each test its module's tier unless it carries its own; refuse untiered modules and double tiers."""
    untiered: set[str] = set()
    doubled: list[str] = []
    for item in items:
        own = {m.name for m in item.iter_markers() if m.name in TIER_NAMES}
        module = item.path.name
        if not own:
            tier = TIERS.get(module)
            if tier is None:
                untiered.add(module)
                continue
            item.add_marker(tier)
        elif len(own) > 1:
            doubled.append(f"{item.nodeid}: {sorted(own)}")
        if module in ALONE:
            item.add_marker("alone")
    problems = []
    stale = sorted(m for m in TIERS if not (Path(__file__).parent / m).exists())
    if stale:
        problems.append(f"TIERS in tests/conftest.py names modules that do not exist: {stale}")
    if untiered:
        problems.append(f"test modules without a tier (add them to TIERS in tests/conftest.py): {sorted(untiered)}")
    if doubled:
        problems.append(f"tests with more than one tier: {doubled}")
    if problems:
        raise pytest.UsageError("; ".join(problems))


#: modules whose timings (leases of one second) do not hold beside busy xdist workers: ``make test`` runs
#: them with the labs, alone on the machine (marker ``alone``)
ALONE = frozenset({"test_cluster.py"})

#: tiers whose tests run one module after another on one worker under xdist (``make test`` runs ``-n``):
#: real routers and a browser each take the machine's cores, and their timings are the ones the tests hold
SERIAL_TIERS = ("lab", "browser")


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under pytest-xdist (``make test`` runs ``-n``): each module's tests go to one worker, so its
    module-scoped labs, fleets and servers are set up once as before, and every lab and browser module to
    the same worker, one after another (the other workers run the unit and component modules beside
    them). A scheduler of our own: xdist's ``loadgroup`` marks a group by rewriting node ids, which
    pytest 9.2 no longer allows (every test would go its own way)."""
    from xdist.scheduler import LoadScopeScheduling

    class ByModule(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0].rsplit("/", 1)[-1]
            return "serial" if TIERS.get(module) in SERIAL_TIERS else module

    return ByModule(config, log)


# -- prerequisites -------------------------------------------------------------------------

@functools.cache
def lab_missing() -> str | None:
    """Why lab tests cannot run here (root, FRR's daemons, vtysh and frr-reload), or None."""
    if os.geteuid() != 0:
        return "lab tests need root (network namespaces)"
    from labs import runner

    if not (runner.FRR_BIN / "zebra").exists() or shutil.which("vtysh") is None \
            or not Path("/usr/lib/frr/frr-reload.py").exists():
        return "FRR is not installed (apt-get install frr frr-pythontools)"
    return None


CHROMIUM = "/usr/bin/chromium"


@functools.cache
def browser_missing() -> str | None:
    """Why browser tests cannot run here (Debian's chromium, playwright), or None."""
    if not os.access(CHROMIUM, os.X_OK):
        return f"{CHROMIUM} is missing (Debian's chromium: make test installs it as root)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install -e '.[test]')"
    return None


#: marker → why its tests cannot run here (None: they can)
PREREQUISITES: dict[str, Callable[[], str | None]] = {
    "lab": lab_missing,
    "postgres": functools.cache(pg.missing),
    "haproxy": haproxy_missing,
    "browser": browser_missing,
}


@pytest.hookimpl(tryfirst=True)  # before any fixture of the test is set up (a lab's fixture builds the lab)
def pytest_runtest_setup(item: pytest.Item) -> None:
    for marker, missing in PREREQUISITES.items():
        if item.get_closest_marker(marker) is not None:
            reason = missing()
            if reason:
                pytest.skip(reason)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):  # type: ignore[no-untyped-def]
    outcome = yield
    report = outcome.get_result()
    if IN_CI and report.skipped and any(item.get_closest_marker(m) for m in _MUST_RUN):
        report.outcome = "failed"
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.longrepr = f"CI requires this test to run, but it skipped: {reason}"


# -- shared fixtures -------------------------------------------------------------------------

@pytest.fixture
def anyio_backend() -> str:
    """``@pytest.mark.anyio`` tests run on asyncio (gRPC's aio API needs it)."""
    return "asyncio"


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """URL of a fresh database on a private PostgreSQL server (session-wide; see ``tests/pg.py``)."""
    with pg.postgres_cluster() as url:
        yield url


@pytest.fixture
def api_intent() -> dict[str, Any] | None:
    """The intent document the ``api`` fixture's store holds; None: the example fabric. Override per module."""
    return None


@pytest.fixture
def api_settings() -> dict[str, Any]:
    """Extra ``Settings`` of the ``api`` fixture's app. Override per module."""
    return {}


@pytest.fixture
def api(tmp_path: Path, api_intent: dict[str, Any] | None, api_settings: dict[str, Any]) -> Iterator[Any]:
    """The API app in-process on a fresh SQLite store with a token per role (:class:`tests.apps.Api`)."""
    from tests.apps import running_api

    with running_api(f"sqlite:///{tmp_path / 'api.db'}", intent=api_intent, **api_settings) as client:
        yield client

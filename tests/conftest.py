"""Shared test configuration: tiers, prerequisites, and the fixtures many modules use.

Tiers. Every test has exactly one tier marker, so a run can pick a tier with
``-m`` (``make test TIER=unit``):

* ``unit``: pure, in one process; no servers, no subprocesses;
* ``component``: real servers in-process (the ASGI app under ``TestClient``,
  gRPC agents on unix sockets or port 0), ``loom serve`` or agent subprocesses,
  PostgreSQL;
* ``lab``: root and FRR, real routers in network namespaces;
* ``browser``: Debian's chromium driven by Playwright against ``loom serve``.

A module's tier is the folder it sits in (``tests/unit``, ``tests/component``,
``tests/lab``, ``tests/browser``; the benchmarks are ``tests/bench``, run by
``make bench``); a test that differs from its module carries its own tier marker
(``@pytest.mark.component``), which then replaces the module's. Collection fails
for a test module outside the tier folders or a test with two tiers, so a new
module cannot be forgotten. Shared harnesses (servers, labs, fleets, stores) are
the modules of ``tests/`` itself.

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

#: the folder of tests/ that holds each tier's modules
TESTS = Path(__file__).resolve().parent


# -- tiers -------------------------------------------------------------------------------

def module_tier(path: Path) -> str | None:
    """The tier of the test module at ``path``: the folder of tests/ it sits in (``tests/lab/...``)."""
    parent = path.resolve().parent
    return parent.name if parent.parent == TESTS and parent.name in TIER_NAMES else None


@pytest.hookimpl(tryfirst=True)  # before -m deselects by the markers given here
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Give each test its module's tier (its folder) unless it carries its own; refuse a test module outside
    the tier folders and a test with two tiers."""
    untiered: set[str] = set()
    doubled: list[str] = []
    for item in items:
        own = {m.name for m in item.iter_markers() if m.name in TIER_NAMES}
        if not own:
            tier = module_tier(item.path)
            if tier is None:
                untiered.add(str(item.path.relative_to(TESTS.parent)))
                continue
            item.add_marker(tier)
        elif len(own) > 1:
            doubled.append(f"{item.nodeid}: {sorted(own)}")
        if item.path.name in ALONE:
            item.add_marker("alone")
        if item.path.name in TRAFFIC_LABS:
            item.add_marker("traffic")
    problems = []
    if untiered:
        problems.append(f"test modules outside the tier folders (tests/{{{','.join(TIER_NAMES)}}}/): "
                        f"{sorted(untiered)}")
    if doubled:
        problems.append(f"tests with more than one tier: {doubled}")
    if problems:
        raise pytest.UsageError("; ".join(problems))


#: modules whose timings (leases of one second) do not hold beside busy xdist workers: ``make test`` runs
#: them with the labs, alone on the machine (marker ``alone``)
ALONE = frozenset({"test_cluster.py"})

#: the lab modules whose assertions measure traffic (rates within 2%, counters against the kernels' within
#: 5%, UDP flows lost): they get the marker ``traffic``, and ``make test`` runs them one after another,
#: alone on the machine; the other lab and browser modules (faults, convergence, commits, the browser) run
#: before them on two workers, two labs at a time (a sender beside another lab's load drifts past 5%)
TRAFFIC_LABS = frozenset({"test_telemetry_lab.py", "test_closed_loop_lab.py", "test_fib_failure_lab.py",
                          "test_lab_hosts.py"})


#: the modules that take minutes, with about how many seconds each takes in ``make test`` (its ``--durations``).
#: Under pytest-xdist they go to the workers first, longest first, so that the others fill in around them:
#: xdist's own order (the modules with the most tests first) left a 1-test module of four minutes to start
#: last and run alone at the end of its phase. Only their order matters here; a module missing from this
#: table keeps xdist's place for it.
LONG_MODULES = {
    # unit and component (phase 1)
    "test_store_ha.py": 240, "test_ha_kills.py": 180, "test_workflow_cli.py": 150, "test_ha.py": 110,
    "test_transaction_dry.py": 80, "test_workflow_api.py": 75, "test_hostile.py": 65, "test_bench_smoke.py": 50,
    "test_safety_ray.py": 40, "test_outage.py": 40,
    # lab and browser (phase 2)
    "test_settle_lab.py": 90, "test_agent_lab.py": 70, "test_lab_fabric.py": 60, "test_adopt_lab.py": 45,
    "test_e2e_lab.py": 40, "test_clab_labs.py": 40, "test_dualstack_e2e_lab.py": 50, "test_isis_dualstack_lab.py": 30,
    "test_underlay_migration_lab.py": 45, "test_chaos_lab.py": 150,
}


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under pytest-xdist (``make test`` runs ``-n``): each module's tests go to one worker, so its
    module-scoped labs, fleets and servers are set up once (xdist's ``loadscope`` would split a module's
    test classes across workers). ``make test`` runs the lab and browser tiers in pytest runs of their own,
    with no unit or component worker beside them. The modules of :data:`LONG_MODULES` go out first, the
    longest first; a worker running one of them is given the smallest module left as the one xdist queues
    behind it (a worker needs a test after the one it runs), not the next long one."""
    from xdist.scheduler import LoadScopeScheduling

    def seconds(scope: str) -> float:
        return LONG_MODULES.get(Path(scope).name, 0)

    class ByModule(LoadScopeScheduling):
        _long_first = False

        def _split_scope(self, nodeid: str) -> str:
            return nodeid.split("::", 1)[0]

        def _assign_work_unit(self, node: Any) -> None:
            if not self._long_first:  # the queue is complete by the first assignment
                self._long_first = True
                order = sorted(self.workqueue, key=seconds, reverse=True)  # stable: the rest keep xdist's order
                for scope in reversed(order):
                    self.workqueue.move_to_end(scope, last=False)
            busy = any(seconds(scope) and not all(unit.values())
                       for scope, unit in self.assigned_work.get(node, {}).items())
            if busy and len(self.workqueue) > 1:
                self.workqueue.move_to_end(next(reversed(self.workqueue)), last=False)
            super()._assign_work_unit(node)

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

"""Shared test configuration.

Lab tests (``@pytest.mark.lab``: root and FRR), PostgreSQL tests
(``@pytest.mark.postgres``) and browser tests (``@pytest.mark.browser``:
Debian's chromium and playwright) skip with a reason where their prerequisites are
missing, but in CI (``CI`` set) the prerequisites are installed by ``make
test``, so a skip there is turned into a failure: the suite must not pass
without having run them.
"""

from __future__ import annotations

import os

import pytest

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
_MUST_RUN = ("lab", "postgres", "browser")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):  # type: ignore[no-untyped-def]
    outcome = yield
    report = outcome.get_result()
    if IN_CI and report.skipped and any(item.get_closest_marker(m) for m in _MUST_RUN):
        report.outcome = "failed"
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.longrepr = f"CI requires this test to run, but it skipped: {reason}"

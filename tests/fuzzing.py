"""Schemathesis operation by operation, one pytest test each, with a node id of its own.

``schema.parametrize()`` gives every operation's test the same node id, which pytest-xdist (``make
test`` runs ``-n``) takes for one test: all but one operation went unrun. :func:`operations` names each
operation (``GET /v1/links``) for ``pytest.mark.parametrize``, and :func:`fuzz` runs Hypothesis over one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, given, settings

__all__ = ["fuzz", "operations"]


def operations(schema: Any) -> dict[str, Any]:
    """Each operation of ``schema`` by its label (``METHOD /path``)."""
    out: dict[str, Any] = {}
    for result in schema.get_all_operations():
        op = result.ok()
        out[op.label] = op
    return out


def fuzz(operation: Any, call: Callable[[Any], None], *, examples: int) -> None:
    """``call(case)`` on up to ``examples`` generated requests of ``operation`` (valid and invalid)."""

    @settings(max_examples=examples, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large])
    @given(case=operation.as_strategy())
    def run(case: Any) -> None:
        call(case)

    run()

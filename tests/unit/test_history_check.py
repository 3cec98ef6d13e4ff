"""The HA tests' history check (:func:`tests.ha_cluster.check_history`) judges each write by its answers.

A keyed write whose first attempt was cut (the balancer lost its replica) and whose retries then found only
Loom's "nothing written" 503 may have been applied by that first attempt: its revision is an unknown outcome
applied, not a stranger. The same revision after a write whose only answer was that plain 503 is a write
Loom said it had not made, which the check must refuse.
"""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest

from tests.ha_cluster import REPLICA_LOST, Outcome, check_history


def _api(revs: list[dict[str, object]]) -> Callable[..., httpx.Response]:
    def call(method: str, path: str, **_kw: object) -> httpx.Response:
        assert method == "GET" and path.startswith("/v1/revisions")
        return httpx.Response(200, json={"items": revs, "total": len(revs)})
    return call


def _rev(i: int, request_id: str) -> dict[str, object]:
    return {"id": i, "parent": i - 1, "hash": f"h{i}", "created_at": "2026-11-29T13:13:35Z", "author": "admin",
            "message": "", "request_id": request_id, "proposal": False}


def _written(**kw: object) -> Outcome:
    return Outcome("write", "w-1", 0.0, 1.0, 503, "l:eth1", 1.0, None, retry_after="1",
                   error="the store is unavailable", **kw)  # type: ignore[arg-type]


def test_a_retried_write_whose_first_attempt_was_cut_may_have_been_applied() -> None:
    report = check_history(_api([_rev(2, "w-1")]), [_written(in_doubt=True, attempts=6,
                                                             earlier=(f"503: {REPLICA_LOST}",))], since=1)
    assert report.unknown_applied == 1 and report.acknowledged == 0


def test_a_write_answered_nothing_written_that_wrote_is_refused() -> None:
    with pytest.raises(AssertionError, match="one that wrote"):
        check_history(_api([_rev(2, "w-1")]), [_written()], since=1)

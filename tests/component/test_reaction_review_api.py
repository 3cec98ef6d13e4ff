"""A review through the API says, for each failure, what is lost until the reaction and whether the reaction
plan is safe (issue 30.5), and the worst post-failure utilization (30.4).

The ``fib`` square of ``tests/lab/test_fib_failure_lab.py`` (no agents: the config diff is rendered locally).
The reaction to ``b-d`` failing is safe; the reaction to ``c-d`` failing is worse than leaving the plan in
place (the leader would not commit it); with the failure_reaction policy off, nothing reacts. The numbers are
worked out by hand in ``tests/unit/test_review_reaction.py``.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from controller.cli.changes import print_review
from tests.apps import running_api
from tests.lab.test_fib_failure_lab import square_doc


def doc() -> dict[str, Any]:
    d = square_doc()
    d["policies"] = [*d["policies"], {"kind": "failure_tolerance", "scope": "all_single"},
                     {"kind": "failure_reaction", "detect_s": 1.0}]
    return d


def test_a_review_carries_each_failure_until_the_reaction_and_its_verdict(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with running_api(f"sqlite:///{tmp_path / 'loom.db'}", intent=doc(), example=False, reaction_push_s=0.5) as api:
        more = doc()  # unsafe under failure (loops, a link over its limit): reviewed, not committed
        ch = api.change(intent=more, base=1)
        rv = api.review(ch["id"])
        rc = rv["reaction"]
        assert rc["enabled"] and rc["detect_s"] == 1.0 and rc["push_s"] == 0.5
        rows = {r["scenario"]: r for r in rc["scenarios"]}
        assert set(rows) == {s["name"] for s in rv["safety"]["scenarios"] if s["kind"] != "baseline"}
        bd, cd = rows["link:b:eth2"], rows["link:c:eth2"]
        assert bd["verdict"] == "safe" and bd["safe"] is True and bd["plan"] in ("planned", "precomputed")
        assert bd["immediate"]["black_holed_gbps"] == pytest.approx(4.0)
        assert bd["reconverged"]["looped_gbps"] == pytest.approx(4.0)
        assert bd["window_s"] >= 1.5 and bd["lost_gbit"] == pytest.approx(4.0 * bd["window_s"], abs=1e-3)
        assert cd["verdict"] == "worse" and cd["safe"] is False and cd["window_s"] is None
        assert cd["reconverged"]["looped_gbps"] == pytest.approx(8.0) and "operator" in cd["note"]
        assert rv["robustness"]["failure_mlu"] == pytest.approx(1.2) and rv["robustness"]["robust"] is False
        assert rv["verdict"] == rv["safety"]["verdict"]  # the reaction does not change the verdict
        stored = api("GET", f"/v1/changes/{ch['id']}", role="viewer").json()["review"]
        assert stored["reaction"] == rc

        print_review(rv)
        out = capsys.readouterr().out
        assert "failure reaction: detect 1 s + push 0.5 s" in out and "link:c:eth2" in out and "worse" in out

        off = copy.deepcopy(more)
        off["policies"] = [p for p in off["policies"] if p["kind"] != "failure_reaction"]
        off["policies"].append({"kind": "failure_reaction", "enabled": False})
        rv = api.review(api.change(intent=off, base=1)["id"])
        rc = rv["reaction"]
        assert rc["enabled"] is False and rc["worst_lost_gbit"] is None and "operator" in rc["note"]
        assert {r["plan"] for r in rc["scenarios"]} == {"disabled"}
        bd = next(r for r in rc["scenarios"] if r["scenario"] == "link:b:eth2")
        assert bd["lost_gbps"] == pytest.approx(4.0) and bd["window_s"] is None and bd["verdict"] is None

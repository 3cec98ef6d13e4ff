"""The API bench at small sizes, so that a change cannot break ``make bench`` unseen (issue 31.8).

Its reads table (Loom beside the bare framework, through a real ``loom serve``) and its PATCH row run on a
small Clos for a fraction of a second each; the figures are not judged here (timings belong in the bench),
only that every row is produced. The 100,000-device fabric is checked for what made its row crash: more
devices than the router-id pool, which the bench now numbers with explicit loopbacks.
"""

from __future__ import annotations

from typing import Any

import pytest

from controller.model.addressing import DEVICE_SLOTS
from controller.model.errors import InvalidIntent
from controller.model.intent import validate_intent
from tests.bench import api as bench

SMALL = {"pods": 4, "tors": 2, "planes": 2, "spines": 2}


def test_the_api_bench_produces_its_tables_at_a_small_size(monkeypatch: Any) -> None:
    monkeypatch.setattr(bench, "ROUNDS", 1)
    monkeypatch.setattr(bench, "SECONDS", 0.2)
    table = bench.reads_table(SMALL)
    assert table.row_count >= len(bench.READS)  # a row per read (and a summary)
    row = bench.patch_row("small", SMALL, patches=2)
    assert row[0] == "small" and len(row) == 10 and int(row[1].replace(",", "")) == 4 * 2 + 4 * 2 + 2 * 2


def test_the_largest_bench_fabric_is_a_valid_intent_past_the_router_id_pool() -> None:
    doc = bench.fabric(bench.FABRICS["100k devices"])
    assert len(doc["devices"]) > DEVICE_SLOTS and all(d.get("loopback") for d in doc["devices"])
    small = {"name": "x", "routing": "isis", "links": [],
             "devices": [{"name": f"r{i}"} for i in range(DEVICE_SLOTS + 3)]}
    with pytest.raises(InvalidIntent) as err:
        validate_intent(small)
    assert [e.loc for e in err.value.errors] == [f"devices[{DEVICE_SLOTS}].loopback"]
    assert "give this one and the 2 after it an explicit loopback" in str(err.value)


def test_the_topology_bench_row_converts_a_node_link_graph_and_meets_the_plain_lp(tmp_path: Any) -> None:
    """Issue 35's rows on a small node-link graph: a link per direction pair at the smaller capacity
    (Mb/s to Gb/s), hop metrics, the seeded gravity matrix, and Loom's plan at the plain LP's optimum
    (0.90 after scaling) within the target's 1%."""
    import json

    from tests.bench import solver as sbench

    ring = [(i, (i + 1) % 8) for i in range(8)] + [(0, 4), (2, 6)]
    links = [{"source": a, "target": b, "capacity": 1000.0 * (1 + i % 3)} for i, (a, b) in enumerate(ring)]
    links += [{"source": b, "target": a, "capacity": 1500.0} for a, b in ring]
    path = tmp_path / "Ring.json"
    path.write_text(json.dumps({"directed": True, "nodes": [{"id": i} for i in range(8)], "links": links}))
    doc = sbench.topology_intent(path, destinations=3)
    assert len(doc["links"]) == len(ring) and {x["metric"] for x in doc["links"]} == {1}
    assert sorted(x["capacity_gbps"] for x in doc["links"])[:2] == [1.0, 1.0]
    assert max(x["capacity_gbps"] for x in doc["links"]) == 1.5
    assert len(doc["prefixes"]) == 3 and len(doc["demands"]) == 3 * 7
    assert doc == sbench.topology_intent(path, destinations=3)  # seeded: the same matrix every run
    r = sbench.topology_row(path, destinations=3)
    assert r["plain_u"] == pytest.approx(0.9) and r["lp"] == pytest.approx(0.9, rel=1e-6)
    assert 0.9 - 1e-6 <= r["mlu"] <= 0.9 * 1.01

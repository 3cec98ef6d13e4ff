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

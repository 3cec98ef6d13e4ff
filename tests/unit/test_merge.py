"""The three-way merge that carries a change's edits onto a head that moved since its base (issue 31.1).

Checked by its properties on the example fabric rather than by expected documents: what only the
change touched comes from the change, what only the head touched stays as the head has it, and
what both touched differently is refused with its place.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from controller.model.errors import MergeConflict
from controller.model.intent import load_intent
from controller.service import EXAMPLE_INTENT
from controller.store.merge import merge_onto_head
from controller.store.snapshot import Snapshot

BASE: dict[str, Any] = load_intent(EXAMPLE_INTENT).to_document()
LINK = "leaf-0-0:eth3"


def snap(doc: dict[str, Any]) -> Snapshot:
    return Snapshot.from_document(doc)


def edited(doc: dict[str, Any], *, capacity: float | None = None, drain: str | None = None,
           demand: float | None = None, ecmp: int | None = None, drop_demand: bool = False,
           add_prefix: str | None = None) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    if capacity is not None:
        next(ln for ln in out["links"] if ln["a"] == "leaf-0-0" and ln["a_port"] == "eth3")["capacity_gbps"] = capacity
    if drain is not None:
        out["policies"].append({"kind": "drain", "target": drain})
    if demand is not None:
        out["demands"][0]["gbps"] = demand
    if drop_demand:
        out["demands"].pop(0)
    if ecmp is not None:
        out["defaults"]["max_ecmp_entries"] = ecmp
    if add_prefix is not None:
        out["prefixes"].append({"prefix": add_prefix, "origins": ["tor-0-0"]})
    return out


def merged(head: dict[str, Any], proposal: dict[str, Any]) -> dict[str, Any]:
    return merge_onto_head(snap(BASE), snap(head), snap(proposal))


def link(doc: dict[str, Any]) -> dict[str, Any]:
    return next(ln for ln in doc["links"] if ln["a"] == "leaf-0-0" and ln["a_port"] == "eth3")


def test_edits_on_different_objects_both_survive() -> None:
    out = merged(edited(BASE, capacity=40), edited(BASE, drain="spine-0-0", demand=33, add_prefix="10.9.0.0/24"))
    assert link(out)["capacity_gbps"] == 40  # the head's edit
    assert {"kind": "drain", "target": "spine-0-0"} in out["policies"]  # the change's
    assert out["demands"][0]["gbps"] == 33 and out["prefixes"][-1]["prefix"] == "10.9.0.0/24"


def test_removals_on_either_side_survive() -> None:
    out = merged(edited(BASE, drop_demand=True), edited(BASE, capacity=50))
    assert len(out["demands"]) == len(BASE["demands"]) - 1 and link(out)["capacity_gbps"] == 50
    out = merged(edited(BASE, capacity=40), edited(BASE, drop_demand=True))
    assert len(out["demands"]) == len(BASE["demands"]) - 1 and link(out)["capacity_gbps"] == 40


def test_the_same_edit_on_both_sides_is_no_conflict() -> None:
    out = merged(edited(BASE, capacity=40, ecmp=64), edited(BASE, capacity=40, ecmp=64))
    assert link(out)["capacity_gbps"] == 40 and out["defaults"]["max_ecmp_entries"] == 64


def test_a_change_that_touches_nothing_the_head_changed_gives_the_head() -> None:
    head = edited(BASE, capacity=40)
    assert merged(head, BASE) == snap(head).document()


@pytest.mark.parametrize(("head", "proposal", "where"), [
    (edited(BASE, capacity=40), edited(BASE, capacity=50), f"links[{LINK}]"),
    (edited(BASE, ecmp=64), edited(BASE, ecmp=32), "defaults.max_ecmp_entries"),
    (edited(BASE, drop_demand=True), edited(BASE, demand=1), "demands[tor-0-0,10.0.2.0/24]"),
    (edited(BASE, demand=1), edited(BASE, drop_demand=True), "demands[tor-0-0,10.0.2.0/24]"),
])
def test_both_sides_changing_one_thing_differently_is_refused_with_its_place(
        head: dict[str, Any], proposal: dict[str, Any], where: str) -> None:
    with pytest.raises(MergeConflict) as err:
        merged(head, proposal)
    assert [c.loc for c in err.value.conflicts] == [where]
    assert where in str(err.value)

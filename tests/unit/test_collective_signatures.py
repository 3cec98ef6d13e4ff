"""The classifier reads the collective templates (DESIGN.md, ML workloads): groups of generated traffic
of each template are named by it; a template only an intent defines is recognized with that intent's
registry and not without; templates with the same matrix shape come back as alternatives; the five
labels keep their answers."""

from __future__ import annotations

import numpy as np
import pytest

from controller.model.collectives_builtin import BUILTINS
from controller.model.documents import PatternsDocument
from controller.telemetry.patterns import classify
from controller.telemetry.signatures import match, template_matrix
from tests.pattern_synth import Job, background, synth

STAR = {"phases": [{"from": "range(1, n)", "to": 0, "bytes": "B"}, {"from": 0, "to": "range(1, n)", "bytes": "B"}]}


def _group(name: str, members: tuple[int, ...], seed: int = 1, registry=BUILTINS, **kw: object):  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(seed)
    jobs = [Job(name, members, 10.0, period=4, params=kw or None), Job("ring_allreduce", (20, 21, 22), 8.0, period=5)]
    series = synth(24, jobs, noise=0.1, bg=background(rng, 24, 5.0), seed=seed, registry=registry)
    found = classify(series, registry=registry)
    truth = {series.tors[i] for i in members}
    return max(found, key=lambda g: len(truth & set(g.members)))


@pytest.mark.parametrize("name", [n for n in BUILTINS.names() if n not in ("reduce_scatter", "all_gather")])
def test_each_builtin_is_named_by_its_template(name: str) -> None:
    g = _group(name, (3, 7, 1, 12, 9, 15))
    assert g.collective == name, (g.collective, g.collective_confidence)
    assert set(g.members) == {f"tor-{i:02d}" for i in (3, 7, 1, 12, 9, 15)}
    assert g.collective_confidence >= 0.5


def test_same_shaped_templates_are_alternatives_and_the_label_stays() -> None:
    g = _group("reduce_scatter", (2, 4, 6, 8, 10))
    assert g.pattern == "ring_allreduce"  # the five labels keep their answers
    assert g.collective == "ring_allreduce" and set(g.alternatives) == {"reduce_scatter", "all_gather"}
    assert _group("pipeline", (2, 4, 6, 8, 10)).pattern == "pipeline"


def test_an_intent_collective_is_recognized_with_its_registry_only() -> None:
    registry = BUILTINS.extended({"star": STAR})
    mine = _group("star", (5, 6, 7, 8, 9), registry=registry)
    assert mine.collective == "star"
    builtin_only = classify(synth(24, [Job("star", (5, 6, 7, 8, 9), 10.0, period=4)], noise=0.1, seed=1,
                                  registry=registry))
    assert all(g.collective != "star" for g in builtin_only)


def test_background_is_no_collective() -> None:
    rng = np.random.default_rng(3)
    bg = background(rng, 24, 5.0) + background(rng, 24, 60.0, (1, 2, 3, 4, 5))
    found = classify(synth(24, [], noise=0.2, bg=bg, seed=3))
    assert all(g.collective is None for g in found)


def test_the_document_carries_the_optional_fields() -> None:
    g = _group("tree_allreduce", (1, 2, 3, 4, 5, 6, 7))
    doc = PatternsDocument(window_s=300, method="aft", groups=[g.to_model()])
    body = doc.model_dump()["groups"][0]
    assert body["collective"] == "tree_allreduce" and 0.5 <= body["collective_confidence"] <= 1
    assert body["alternatives"] == [] and body["pattern"] in ("ring_allreduce", "all_to_all", "pipeline", "incast",
                                                              "background")


def test_templates_that_cannot_be_filled_are_not_candidates() -> None:
    assert template_matrix(BUILTINS.get("hierarchical_allreduce"), 5) is None  # n % local
    need = BUILTINS.extended({"w": {"params": {"w": {"kind": "list"}},
                                    "phases": [{"from": "all", "to": "others", "bytes": "w[i]"}]}})
    ring = np.roll(np.eye(5), 1, axis=1)
    found = match(ring, need)
    assert found is not None and found.name == "ring_allreduce"

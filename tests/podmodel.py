"""A generated Clos and its pod model, for the tests of the solver's Clos path.

It owns the one recipe those tests share: ``loom gen clos`` with the given
shape, validated, its fabric, its pod model (asserted present: a generated
Clos is clean) and each device's least share ``1 / budget``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from controller.gen import clos_document
from controller.model import Intent
from controller.model.intent import validate_intent
from solver.clos.model import PodModel, build_pod_model
from solver.core.fabric import Fabric, build_fabric
from solver.core.weights import device_budget

__all__ = ["generated_pod_model"]


def generated_pod_model(**shape: Any) -> tuple[Intent, Fabric, PodModel, np.ndarray]:
    """``clos_document(**shape)`` (uniform demand at ECMP load 0.9 unless ``shape`` says otherwise):
    the intent, its fabric, its pod model and the least share per device."""
    doc = clos_document(**{"demand": "uniform", "load": 0.9, **shape})
    intent = validate_intent(doc)
    fab = build_fabric(intent)
    m = build_pod_model(fab)
    assert m is not None
    share = np.array([1.0 / device_budget(intent, n) for n in fab.names])
    return intent, fab, m, share

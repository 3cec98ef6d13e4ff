"""An overlay: the failed links and devices a plan leaves out, without touching the intent.

A failure reaction plans the active revision's intent around the failed parts
(DESIGN.md, "Operational state and failure reaction"). The overlay is
``{"links": [LINK_ID, ...], "devices": [NAME, ...]}`` (a link id is its lower
end ``device:port``); :func:`overlay_intent` is the intent it stands for: the
same fabric with every overlaid part **drained** (a drain policy per part that
the intent does not drain already). A drained link carries nothing and a
drained device no transit (DESIGN.md, Semantics), so the plan routes around
them exactly as if they were gone, while every device keeps its interfaces,
addresses and sessions: the switches only stop using the parts (a drained BGP
session neither sends nor accepts routes, a drained IS-IS link has no
adjacency), which FRR applies in place, and when the full plan returns the same
parts are simply undrained. A part that flaps is thereby held out of service
until its hold-down ends, even when it comes back before.

Pure: values in, an intent out (the revision's address pins carried).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from controller.model import Intent
from controller.model.addressing import carried, carry
from controller.model.intent import validate_intent

__all__ = ["Overlay", "overlay_intent"]


@dataclass(frozen=True, slots=True)
class Overlay:
    """The parts a plan leaves out."""

    links: frozenset[str] = frozenset()
    devices: frozenset[str] = frozenset()

    def __bool__(self) -> bool:
        return bool(self.links or self.devices)

    def to_document(self) -> dict[str, list[str]]:
        return {"links": sorted(self.links), "devices": sorted(self.devices)}

    def key(self) -> str:
        return json.dumps(self.to_document(), separators=(",", ":"))

    @classmethod
    def of(cls, doc: dict[str, Any] | None) -> Overlay:
        doc = doc or {}
        return cls(frozenset(doc.get("links") or ()), frozenset(doc.get("devices") or ()))

    def __or__(self, other: Overlay) -> Overlay:
        return Overlay(self.links | other.links, self.devices | other.devices)


def overlay_intent(intent: Intent, overlay: Overlay) -> Intent:
    """``intent`` with ``overlay``'s parts drained (see the module docstring); raises ``ValueError``
    (pydantic's ``ValidationError``) when a part is not in the intent."""
    if not overlay:
        return intent
    doc = intent.to_document()
    drained = {str(p.get("target")) for p in doc.get("policies", []) if p.get("kind") == "drain"}
    for target in [*sorted(overlay.devices), *sorted(overlay.links)]:
        if target not in drained:
            doc["policies"].append({"kind": "drain", "target": target})
    out = validate_intent(doc)
    pins = carried(intent)
    return carry(out, pins) if pins is not None else out

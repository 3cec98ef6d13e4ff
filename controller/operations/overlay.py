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
session neither sends nor accepts routes, a drained IS-IS or OSPF link has no
adjacency), which FRR applies in place, and when the full plan returns the same
parts are simply undrained. A part that flaps is thereby held out of service
until its hold-down ends, even when it comes back before.

Pure: values in, an intent out (the revision's address pins carried: copies keep them).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

from controller.model import DrainPolicy, Intent
from controller.model.documents import JsonObject, OverlayDocument
from controller.model.errors import IntentError, InvalidIntent

__all__ = ["Overlay", "intent_ends", "normal", "overlay_intent"]


@dataclass(frozen=True, slots=True)
class Overlay:
    """The parts a plan leaves out."""

    links: frozenset[str] = frozenset()
    devices: frozenset[str] = frozenset()

    def __bool__(self) -> bool:
        return bool(self.links or self.devices)

    def to_document(self) -> JsonObject:
        return self.to_model().model_dump(mode="json")

    def to_model(self) -> OverlayDocument:
        return OverlayDocument(links=sorted(self.links), devices=sorted(self.devices))

    def key(self) -> str:
        return json.dumps(self.to_document(), separators=(",", ":"))

    @classmethod
    def of(cls, doc: JsonObject | OverlayDocument | None) -> Overlay:
        """The overlay a stored JSON document (or its model) names; none for None or an empty one."""
        if not doc:
            return cls()
        if not isinstance(doc, OverlayDocument):
            doc = OverlayDocument.model_validate({"links": doc.get("links") or [], "devices": doc.get("devices") or []})
        return cls(frozenset(doc.links), frozenset(doc.devices))

    def __or__(self, other: Overlay) -> Overlay:
        return Overlay(self.links | other.links, self.devices | other.devices)


def overlay_intent(intent: Intent, overlay: Overlay) -> Intent:
    """``intent`` with ``overlay``'s parts drained (see the module docstring), its address pins kept;
    raises :class:`~controller.model.errors.InvalidIntent` naming a part the intent does not have.

    The drains are added to the validated intent as they are (a copy, its derived views computed again),
    not by validating the whole document again: the only rules a drain is held to are that its target
    exists and is not drained twice (:func:`controller.model.intent.validate_intent` checks no more),
    and a Clos of 65,000 demands took most of a second to validate."""
    if not overlay:
        return intent
    errors = [IntentError(f"overlay.devices[{d!r}]", f"unknown device '{d}'")
              for d in sorted(overlay.devices) if d not in intent.device_map]
    errors += [IntentError(f"overlay.links[{ln!r}]", f"unknown link '{ln}'")
               for ln in sorted(overlay.links) if ln not in intent.link_by_end]
    if errors:
        raise InvalidIntent(errors)
    drained = intent.drained_devices | intent.drained_link_ends
    add = tuple(DrainPolicy(kind="drain", target=t) for t in [*sorted(overlay.devices), *sorted(overlay.links)]
                if t not in drained)
    return intent.model_copy(update={"policies": (*intent.policies, *add)}) if add else intent


def normal(overlay: Overlay, ends_of: Callable[[str], tuple[str, str] | None]) -> Overlay:
    """``overlay`` without the links of its own devices (``ends_of(link id)``: the link's two devices, or
    None for a link it does not know)."""
    if not overlay.devices or not overlay.links:
        return overlay
    implied = {lid for lid in overlay.links if (e := ends_of(lid)) is not None and set(e) & overlay.devices}
    return Overlay(overlay.links - implied, overlay.devices) if implied else overlay


def intent_ends(intent: Intent) -> Callable[[str], tuple[str, str] | None]:
    """:func:`normal`'s ``ends_of`` for ``intent``'s links (a link id is its lower end)."""
    def ends_of(lid: str) -> tuple[str, str] | None:
        link = intent.link_by_end.get(lid)
        return (link.a, link.b) if link is not None else None
    return ends_of

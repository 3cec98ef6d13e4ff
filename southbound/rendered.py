"""What the device agent applies for one configuration, and the config hash that names it.

This module owns :class:`Rendered`: FRR's integrated config text, the ``fib``
WCMP routes (weighted nexthop groups, :class:`FibHop`) and per BGP peer a
signature of the link-bandwidth route-maps toward it; its :attr:`Rendered.hash`
is the config hash an agent reports and the controller predicts. Both sides of
the wire need it: :mod:`southbound.render` builds it from a device config (the
controller's config hashes, the agent's rendering), and the device agent
(:mod:`southbound.device`) applies, journals and restores it. It is pure: no I/O.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["FibHop", "Rendered"]


@dataclass(frozen=True, slots=True)
class FibHop:
    """One weighted next hop of a ``fib`` route: out of ``port`` to ``via``, in the plan's ``group``."""

    port: str
    group: str
    weight: int
    via: str = ""


@dataclass(frozen=True, slots=True)
class Rendered:
    """Everything the agent applies for one configuration; its :attr:`hash` names it."""

    hostname: str
    frr_text: str
    fib: Mapping[str, tuple[FibHop, ...]] = field(default_factory=dict)
    lb_peers: Mapping[str, str] = field(default_factory=dict)  # FRR peer name -> route-map signature

    @property
    def hash(self) -> str:
        blob = json.dumps({"frr": self.frr_text, "fib": self._fib_doc()}, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()

    def _fib_doc(self) -> dict[str, list[list[Any]]]:
        return {p: [[h.port, h.group, h.weight, h.via] for h in hops] for p, hops in sorted(self.fib.items())}

    def to_document(self) -> dict[str, Any]:
        return {"hostname": self.hostname, "frr_text": self.frr_text, "fib": self._fib_doc(),
                "lb_peers": dict(self.lb_peers)}

    @classmethod
    def from_document(cls, doc: Mapping[str, Any]) -> Rendered:
        fib = {p: tuple(FibHop(str(h[0]), str(h[1]), int(h[2]), str(h[3])) for h in hops)
               for p, hops in doc.get("fib", {}).items()}
        return cls(str(doc["hostname"]), str(doc["frr_text"]), fib, dict(doc.get("lb_peers", {})))

    def fib_lines(self) -> list[str]:
        return [f"fib {p} " + " ".join(f"{h.port}:{h.weight}" for h in hops) for p, hops in sorted(self.fib.items())]

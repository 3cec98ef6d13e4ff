"""Address families: which prefixes, loopbacks and link pins an intent's routing and underlay can carry.

Prefixes, demands, jobs and loopbacks take IPv4 or IPv6 (DESIGN.md "Underlay"); how far a family reaches
depends on the routing and on ``defaults.underlay``:

- ``routing: bgp``: ``ipv4-numbered`` sessions run to IPv4 link addresses and carry IPv4 only;
  ``unnumbered`` (sessions on the interfaces over IPv6 link-local) and ``ipv6-numbered`` (sessions to
  IPv6 link addresses) carry both families, IPv4 over IPv6 next hops (RFC 8950);
- ``routing: isis``: IS-IS carries IPv6 over the interfaces' link-local addresses whatever the link
  numbering, and IPv4 only where links have IPv4 addresses (``ipv4-numbered``); ``unnumbered`` is BGP's;
- ``routing: ospf``: OSPFv2 carries IPv4 only, over numbered links.

Link pins (``a_address``, ``b_address``) are in the underlay's family; an unnumbered underlay has none.
This module owns those cross-object rules, each error located at the field to change. Pure: no I/O.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from typing import Any

from controller.model.domain import Routing, Underlay, prefix_version
from controller.model.errors import IntentError

__all__ = ["check_families", "carried_families"]


def carried_families(routing: Routing, underlay: Underlay) -> frozenset[int]:
    """The prefix families (4, 6) a fabric of ``routing`` on ``underlay`` carries."""
    if routing == Routing.BGP:
        return frozenset({4}) if underlay == Underlay.IPV4_NUMBERED else frozenset({4, 6})
    if routing == Routing.ISIS:
        return frozenset({4, 6}) if underlay == Underlay.IPV4_NUMBERED else frozenset({6})
    return frozenset({4}) if underlay == Underlay.IPV4_NUMBERED else frozenset()


def _why_not(routing: Routing, underlay: Underlay, version: int) -> str:
    if routing == Routing.OSPF:
        return "routing ospf (OSPFv2) carries IPv4 only" if version == 6 else \
            f"routing ospf needs IPv4 link addresses (defaults.underlay ipv4-numbered, not {underlay.value})"
    if routing == Routing.ISIS:
        return f"routing isis carries IPv4 only over IPv4 link addresses (defaults.underlay ipv4-numbered, " \
               f"not {underlay.value})"
    return "BGP sessions of defaults.underlay ipv4-numbered carry IPv4 only: an IPv6 prefix needs " \
           "defaults.underlay unnumbered or ipv6-numbered"


def check_families(routing: Routing, underlay: Underlay | None, items: Mapping[str, list[tuple[int, Any]]],
                   errors: list[IntentError]) -> None:
    """Append an error to ``errors`` for every family the fabric cannot carry and every loopback used twice
    across ``loopback`` and ``loopback6``. ``underlay`` is None when ``defaults`` was malformed (its own
    error is reported): the rules that need it are skipped then."""
    _check_loopbacks(items.get("devices", []), errors)
    if underlay is None:
        return
    if underlay == Underlay.UNNUMBERED and routing != Routing.BGP:
        errors.append(IntentError("defaults.underlay", f"unnumbered is BGP's (sessions on the interfaces); "
                                  f"routing {routing.value} takes ipv4-numbered or ipv6-numbered"))
        return
    carried = carried_families(routing, underlay)
    for i, p in items.get("prefixes", []):
        prefix = getattr(p, "prefix", None)
        if isinstance(prefix, str) and prefix_version(prefix) not in carried:
            errors.append(IntentError(f"prefixes[{i}].prefix",
                                      f"{prefix}: {_why_not(routing, underlay, prefix_version(prefix))}"))
    _check_link_pins(underlay, items.get("links", []), errors)


def _check_link_pins(underlay: Underlay, links: list[tuple[int, Any]], errors: list[IntentError]) -> None:
    want = {Underlay.IPV4_NUMBERED: 4, Underlay.IPV6_NUMBERED: 6}.get(underlay)
    for i, link in links:
        for side in ("a_address", "b_address"):
            pin = getattr(link, side, None)
            if pin is None:
                continue
            if want is None:
                errors.append(IntentError(f"links[{i}].{side}", "defaults.underlay unnumbered has no link "
                                          "addresses: leave the link unpinned"))
            elif pin.version != want:
                errors.append(IntentError(f"links[{i}].{side}", f"{pin} is IPv{pin.version}, and defaults.underlay "
                                          f"{underlay.value} numbers links in IPv{want}"))


def _check_loopbacks(devices: list[tuple[int, Any]], errors: list[IntentError]) -> None:
    """An IPv6 loopback (``loopback`` or ``loopback6``) used by two devices."""
    seen: dict[ipaddress.IPv6Address, str] = {}
    for i, d in devices:
        name = getattr(d, "name", "?")
        for field in ("loopback", "loopback6"):
            lb = getattr(d, field, None)
            if not isinstance(lb, ipaddress.IPv6Address):
                continue
            if lb in seen and seen[lb] != name:
                if field == "loopback6":  # `loopback` duplicates are reported where all loopbacks are
                    errors.append(IntentError(f"devices[{i}].{field}", f"loopback {lb} already used by '{seen[lb]}'"))
            else:
                seen.setdefault(lb, name)

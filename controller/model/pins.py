"""Pinned numbering: the link addresses and router ids an intent keeps exactly (DESIGN.md "Adoption").

A fabric Loom adopts already runs with its own numbering: point-to-point
subnets of any length (``192.168.1.1/30``), router ids of its own. The intent
pins them (a link's ``a_address`` and ``b_address``, a device's ``router_id``)
and :mod:`controller.model.addressing` allocates only what is not pinned,
around them. This module owns the cross-object rules of pins, each error
located: both ends or neither, both on one subnet, distinct usable addresses,
no address or subnet used by two links, no router id used twice (nor as
another device's loopback). Pure: no I/O.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from controller.model.errors import IntentError

__all__ = ["check_pins"]


def check_pins(devices: list[tuple[int, Any]], links: list[tuple[int, Any]], errors: list[IntentError]) -> None:
    """Append an error to ``errors`` for every bad pin of ``devices`` and ``links`` (indexed elements,
    possibly partial: a missing field is skipped)."""
    _check_router_ids(devices, errors)
    addresses: dict[ipaddress.IPv4Address, str] = {}
    subnets: dict[ipaddress.IPv4Network, int] = {}
    for i, link in links:
        a, b = getattr(link, "a_address", None), getattr(link, "b_address", None)
        if a is None and b is None:
            continue
        if a is None or b is None:
            missing = "a_address" if a is None else "b_address"
            errors.append(IntentError(f"links[{i}].{missing}",
                                      "pin both ends' addresses or neither (the other end is pinned)"))
            continue
        if _check_pair(i, a, b, errors):
            _check_unique(i, a, b, addresses, subnets, errors)


def _check_pair(i: int, a: ipaddress.IPv4Interface, b: ipaddress.IPv4Interface, errors: list[IntentError]) -> bool:
    """One link's two pinned ends: one subnet, two distinct usable addresses."""
    if a.network != b.network:
        errors.append(IntentError(f"links[{i}].b_address",
                                  f"{b} is not on the subnet of a_address {a} ({a.network}): "
                                  "a link's ends share one subnet"))
        return False
    net = a.network
    if net.prefixlen == 32:
        errors.append(IntentError(f"links[{i}].a_address", f"{a} is a /32: a link's ends need a /31 or wider subnet"))
        return False
    if a.ip == b.ip:
        errors.append(IntentError(f"links[{i}].b_address", f"both ends have the address {a.ip}"))
        return False
    ok = True
    if net.prefixlen < 31:
        for side, end in (("a_address", a), ("b_address", b)):
            if end.ip in (net.network_address, net.broadcast_address):
                what = "network" if end.ip == net.network_address else "broadcast"
                errors.append(IntentError(f"links[{i}].{side}", f"{end.ip} is the {what} address of {net}"))
                ok = False
    return ok


def _check_unique(i: int, a: ipaddress.IPv4Interface, b: ipaddress.IPv4Interface,
                  addresses: dict[ipaddress.IPv4Address, str], subnets: dict[ipaddress.IPv4Network, int],
                  errors: list[IntentError]) -> None:
    duplicate = False
    for side, end in (("a_address", a), ("b_address", b)):
        if end.ip in addresses:
            errors.append(IntentError(f"links[{i}].{side}", f"address {end.ip} already used by {addresses[end.ip]}"))
            duplicate = True
        else:
            addresses[end.ip] = f"links[{i}].{side}"
    other = next((j for net, j in subnets.items() if net.overlaps(a.network)), None)
    if duplicate:
        return
    if other is not None:
        errors.append(IntentError(f"links[{i}].a_address",
                                  f"subnet {a.network} overlaps that of links[{other}]: each link has its own subnet"))
    else:
        subnets[a.network] = i


def _check_router_ids(devices: list[tuple[int, Any]], errors: list[IntentError]) -> None:
    """Usable router ids, none used by two devices (a device's own loopback may equal its router id)."""
    loopbacks = {lb: getattr(d, "name", "?") for _, d in devices if (lb := getattr(d, "loopback", None)) is not None}
    seen: dict[ipaddress.IPv4Address, str] = {}
    for i, d in devices:
        rid = getattr(d, "router_id", None)
        if rid is None:
            continue
        name = getattr(d, "name", "?")
        if rid.is_unspecified or rid.is_multicast or rid == ipaddress.IPv4Address("255.255.255.255"):
            errors.append(IntentError(f"devices[{i}].router_id", f"{rid} cannot be a router id"))
        elif rid in seen:
            errors.append(IntentError(f"devices[{i}].router_id", f"router id {rid} already used by '{seen[rid]}'"))
        elif rid in loopbacks and loopbacks[rid] != name:
            errors.append(IntentError(f"devices[{i}].router_id",
                                      f"router id {rid} is the loopback of '{loopbacks[rid]}'"))
        else:
            seen[rid] = name

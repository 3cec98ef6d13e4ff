"""Pinned numbering: the link addresses and router ids an intent keeps exactly (DESIGN.md "Adoption").

A fabric Loom adopts already runs with its own numbering: point-to-point
subnets of any length (``192.168.1.1/30``), router ids of its own. The intent
pins them (a link's ``a_address`` and ``b_address``, a device's ``router_id``)
and :mod:`controller.model.addressing` allocates only what is not pinned,
around them. This module owns the cross-object rules of pins, each error
located: both ends or neither, both on one subnet, distinct usable addresses,
no address or subnet used by two links, no router id used twice (nor as
another device's loopback); and that the pools Loom numbers from hold what it
must number (:func:`check_pools`). Pure: no I/O.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from controller.model.addressing import DEVICE_SLOTS, LINK_POOL, LINK_SLOTS, LOOPBACK_POOL
from controller.model.errors import IntentError

__all__ = ["check_forms", "check_host_ports", "check_pins", "check_pools"]

_Pin = ipaddress.IPv4Interface | ipaddress.IPv6Interface
_Address = ipaddress.IPv4Address | ipaddress.IPv6Address
_Subnet = ipaddress.IPv4Network | ipaddress.IPv6Network


def check_forms(routing: str, devices: list[tuple[int, Any]], links: list[tuple[int, Any]],
                errors: list[IntentError]) -> None:
    """A device's BGP session form (``devices[i].bgp``) is only for ``routing: bgp``, its OSPF and IS-IS forms
    only for ``routing: ospf`` and ``isis``: elsewhere there is nothing to write in them. Pinned IS-IS system
    ids are distinct, and the links of a device on ``narrow`` IS-IS metrics have metrics up to 63."""
    for field, what in (("bgp", "the form of the device's BGP sessions"), ("ospf", "the form of the device's OSPF"),
                        ("isis", "the form of the device's IS-IS")):
        if routing != field:
            errors += [IntentError(f"devices[{i}].{field}", f"only for routing: {field} ({what})")
                       for i, d in devices if getattr(d, field, None) is not None]
    if routing != "isis":
        return
    forms = {getattr(d, "name", None): (i, f) for i, d in devices if (f := getattr(d, "isis", None)) is not None}
    seen: dict[str, str] = {}
    for name, (i, form) in forms.items():
        sid = form.system_id
        if sid is not None and sid in seen:
            errors.append(IntentError(f"devices[{i}].isis.net", f"system id {sid} already used by '{seen[sid]}'"))
        if sid is not None:
            seen.setdefault(sid, str(name))
    narrow = {n for n, (_i, f) in forms.items() if f.metric_style == "narrow"}
    for i, lk in links:
        ends = {getattr(lk, "a", None), getattr(lk, "b", None)} & narrow
        if ends and getattr(lk, "metric", 0) > 63:
            errors.append(IntentError(f"links[{i}].metric", f"{lk.metric} is over 63, the largest narrow IS-IS "
                                      f"metric ('{sorted(map(str, ends))[0]}' runs metric-style narrow)"))


def check_host_ports(devices: list[tuple[int, Any]], links: list[tuple[int, Any]], prefixes: list[tuple[int, Any]],
                     errors: list[IntentError]) -> None:
    """Each pinned host port (``devices[i].host_ports[j]``) is no link's port of its device and named once, and
    each of its addresses is in a subnet the device originates (the address's own subnet, exactly), held by
    no other of its ports and not its loopback's."""
    link_ports = {(getattr(lk, end, None), getattr(lk, f"{end}_port", None)) for _i, lk in links for end in ("a", "b")}
    origins: dict[str, set[str]] = {}
    for _i, p in prefixes:
        for o in getattr(p, "origins", None) or ():
            origins.setdefault(o, set()).add(str(getattr(p, "prefix", "")))
    for i, d in devices:
        name, pins = getattr(d, "name", None), getattr(d, "host_ports", None)
        if name is None or not pins:
            continue
        seen_ports: set[str] = set()
        seen_nets: dict[str, str] = {}
        loopbacks = {str(a) for a in (getattr(d, "loopback", None), getattr(d, "loopback6", None),
                                      getattr(d, "router_id", None)) if a is not None}
        for j, pin in enumerate(pins):
            where = f"devices[{i}].host_ports[{j}]"
            if pin.port in seen_ports or (name, pin.port) in link_ports:
                errors.append(IntentError(f"{where}.port", f"{pin.port} is " + (
                    "pinned twice" if pin.port in seen_ports else f"a link's port of '{name}'")))
            seen_ports.add(pin.port)
            for k, addr in enumerate(pin.addresses):
                net = str(addr.network)
                if str(addr.ip) in loopbacks:
                    errors.append(IntentError(f"{where}.addresses[{k}]", f"{addr.ip} is '{name}''s loopback"))
                elif net not in origins.get(name, set()):
                    errors.append(IntentError(f"{where}.addresses[{k}]", f"{addr} is in no prefix '{name}' "
                                              f"originates (its subnet {net} must be one)"))
                elif net in seen_nets:
                    errors.append(IntentError(f"{where}.addresses[{k}]", f"{net} is on {seen_nets[net]} already"))
                seen_nets.setdefault(net, pin.port)


def check_pins(devices: list[tuple[int, Any]], links: list[tuple[int, Any]], errors: list[IntentError]) -> None:
    """Append an error to ``errors`` for every bad pin of ``devices`` and ``links`` (indexed elements,
    possibly partial: a missing field is skipped)."""
    _check_router_ids(devices, errors)
    addresses: dict[_Address, str] = {}
    subnets: dict[_Subnet, int] = {}
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


def _check_pair(i: int, a: _Pin, b: _Pin, errors: list[IntentError]) -> bool:
    """One link's two pinned ends: one subnet, two distinct usable addresses."""
    if a.network != b.network:
        errors.append(IntentError(f"links[{i}].b_address",
                                  f"{b} is not on the subnet of a_address {a} ({a.network}): "
                                  "a link's ends share one subnet"))
        return False
    net = a.network
    if net.prefixlen == net.max_prefixlen:
        errors.append(IntentError(f"links[{i}].a_address", f"{a} is a /{net.max_prefixlen}: a link's ends need a "
                                  f"/{net.max_prefixlen - 1} or wider subnet"))
        return False
    if a.ip == b.ip:
        errors.append(IntentError(f"links[{i}].b_address", f"both ends have the address {a.ip}"))
        return False
    ok = True
    if net.version == 4 and net.prefixlen < 31:
        for side, end in (("a_address", a), ("b_address", b)):
            if end.ip in (net.network_address, net.broadcast_address):
                what = "network" if end.ip == net.network_address else "broadcast"
                errors.append(IntentError(f"links[{i}].{side}", f"{end.ip} is the {what} address of {net}"))
                ok = False
    return ok


def _check_unique(i: int, a: _Pin, b: _Pin,
                  addresses: dict[_Address, str], subnets: dict[_Subnet, int],
                  errors: list[IntentError]) -> None:
    duplicate = False
    for side, end in (("a_address", a), ("b_address", b)):
        if end.ip in addresses:
            errors.append(IntentError(f"links[{i}].{side}", f"address {end.ip} already used by {addresses[end.ip]}"))
            duplicate = True
        else:
            addresses[end.ip] = f"links[{i}].{side}"
    other = next((j for net, j in subnets.items() if net.version == a.version and net.overlaps(a.network)), None)
    if duplicate:
        return
    if other is not None:
        errors.append(IntentError(f"links[{i}].a_address",
                                  f"subnet {a.network} overlaps that of links[{other}]: each link has its own subnet"))
    else:
        subnets[a.network] = i


def _check_router_ids(devices: list[tuple[int, Any]], errors: list[IntentError]) -> None:
    """Usable router ids, none used by two devices (a device's own loopback may equal its router id)."""
    loopbacks = {lb: getattr(d, "name", "?") for _, d in devices
                 if (lb := getattr(d, "loopback", None)) is not None and lb.version == 4}
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


def check_pools(devices: list[tuple[int, Any]], links: list[tuple[int, Any]], errors: list[IntentError]) -> None:
    """The pools Loom numbers from must hold every link and every device that has no loopback of its own:
    past them, the first one that does not fit is located (a device can be given a loopback)."""
    explicit = {int(lb) for _, d in devices if (lb := getattr(d, "loopback", None)) is not None
                and lb.version == 4 and lb in LOOPBACK_POOL}
    room = DEVICE_SLOTS - len(explicit)
    unnumbered = [i for i, d in devices if getattr(d, "name", None) is not None and _needs_router_id(d)]
    if len(unnumbered) > room:
        errors.append(IntentError(
            f"devices[{unnumbered[room]}].loopback",
            f"{len(unnumbered)} devices have no loopback, and the router-id pool {LOOPBACK_POOL} holds {room}: "
            f"give this one and the {len(unnumbered) - room - 1} after it an explicit loopback"))
    if len(links) > LINK_SLOTS:
        errors.append(IntentError(f"links[{links[LINK_SLOTS][0]}]",
                                  f"{len(links)} links, and the link address pool {LINK_POOL} holds {LINK_SLOTS} /31s"))


def _needs_router_id(d: Any) -> bool:
    """Whether a device takes its router id from the pool: no pinned one and no IPv4 loopback (a malformed
    loopback, absent from a partial device, is not counted)."""
    if getattr(d, "router_id", None) is not None or not hasattr(d, "loopback"):
        return False
    return d.loopback is None or d.loopback.version == 6

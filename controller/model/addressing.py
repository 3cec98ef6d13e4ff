"""Stable numbering of a fabric: each link's /31 and each device's router id.

The intent names no link addresses and, for most devices, no loopback, so Loom
allocates them. Numbering them by their position in the intent's lists made
every removal renumber whatever followed (new addresses, so new BGP sessions,
and new IS-IS NETs, across the whole fabric) and every reordering change every
config. Here a number depends only on what it numbers:

- a link's **home slot** in the /31 pool is a hash (SHA-256) of its stable id,
  its two ends ``device:port`` sorted (:func:`link_id`); the lower address of
  the /31 goes to the lower end by name, whichever end the intent calls ``a``;
- a device without a loopback in its intent gets its router id from the
  loopback pool the same way, from its name; explicit loopbacks are reserved.

Two ids whose homes collide are resolved deterministically: ids not yet placed
take their home or, when it is taken, the next free slot (linear probing), in
the sorted order of the ids. So the same intent, in any order, numbers the same
way, and without collisions (the pools hold a million /31s and 65534 router
ids) removing or adding one link or device moves no other.

Collisions are where history matters: a link that was probed past its home
must keep its slot when the link at its home goes away, and a link added later
must not displace an existing one. :func:`allocate` therefore takes the
allocation to **keep** (the parent revision's): kept ids keep their slots, new
ids are placed around them. Every placed id that is not at its home is a
**pin** (:meth:`Allocation.pins`); the pins alone, with the intent, give back
the whole allocation, so the store keeps only them with each revision (usually
none). The CLI, with no store, allocates from nothing: the same numbers as a
store whose history never saw a collision.

**Pinned** values (DESIGN.md "Adoption": a link's ``a_address`` and
``b_address``, a device's ``router_id``) are kept exactly and take no slot;
a pinned address or router id that falls inside a pool reserves its slot, so
nothing allocated collides with it.

Pure: no I/O.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from controller.model.domain import Intent, Link

__all__ = [
    "DEVICE_SLOTS",
    "LINK6_POOL",
    "LINK_POOL",
    "LINK_SLOTS",
    "LOOPBACK_POOL",
    "Allocation",
    "allocate",
    "carried",
    "carry",
    "link_id",
]

#: /31s for fabric links: 2**20 of them, placed by the hash of the link's ends.
LINK_POOL = ipaddress.IPv4Network("100.64.0.0/11")
#: Router ids (loopbacks) of devices whose intent gives none, placed by the hash of the device's name.
LOOPBACK_POOL = ipaddress.IPv4Network("100.127.0.0/16")
#: /127s for fabric links of ``defaults.underlay: ipv6-numbered`` (a ULA, RFC 4193): a link's /127 is the
#: slot of its /31 in :data:`LINK_POOL`, so the two numberings of a link move together and a change of
#: underlay moves no slot.
LINK6_POOL = ipaddress.IPv6Network("fd6c:6f6f:6d00:1::/64")

_LINK_SLOTS = LINK_POOL.num_addresses // 2
_DEVICE_SLOTS = LOOPBACK_POOL.num_addresses - 2  # neither the pool's first nor its last address
#: how many links, and devices without an explicit loopback, a fabric may have (validation refuses more)
LINK_SLOTS, DEVICE_SLOTS = _LINK_SLOTS, _DEVICE_SLOTS
#: where a stored revision's intent carries its allocation (a key no model field has)
_CARRIED = "loom_allocation"


def link_id(link: Link) -> str:
    """A link's stable id: its two ends ``device:port``, sorted, joined by ``|``."""
    lo, hi = sorted((link.end_a, link.end_b))
    return f"{lo}|{hi}"


@lru_cache(maxsize=1 << 16)
def _home(key: str, size: int) -> int:
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") % size


@dataclass(frozen=True)
class Allocation:
    """Slots by id: ``links`` (:func:`link_id` -> /31 index in :data:`LINK_POOL`) and ``devices``
    (name -> index in :data:`LOOPBACK_POOL`, for devices without an explicit loopback)."""

    links: Mapping[str, int] = field(default_factory=dict)
    devices: Mapping[str, int] = field(default_factory=dict)

    def link_addresses(self, link: Link) -> tuple[str, str]:
        """The CIDR addresses of ``link``'s ``a`` and ``b`` ends: its pinned ones, else its /31's (the
        lower address on the lower end)."""
        if link.a_address is not None and link.b_address is not None:
            return str(link.a_address), str(link.b_address)
        base = LINK_POOL.network_address + 2 * self.links[link_id(link)]
        lo, hi = f"{base}/31", f"{base + 1}/31"
        return (lo, hi) if link.end_a < link.end_b else (hi, lo)

    def link_addresses6(self, link: Link) -> tuple[str, str]:
        """The IPv6 CIDR addresses of ``link``'s ends (``ipv6-numbered``): its pinned ones, else its /127's
        in :data:`LINK6_POOL` at the slot of its /31 (the lower address on the lower end)."""
        if link.a_address is not None and link.b_address is not None:
            return str(link.a_address), str(link.b_address)
        base = LINK6_POOL.network_address + 2 * self.links[link_id(link)]
        lo, hi = f"{base}/127", f"{base + 1}/127"
        return (lo, hi) if link.end_a < link.end_b else (hi, lo)

    def router_id(self, intent: Intent, name: str) -> str:
        """``name``'s router id: its pinned ``router_id``, else its intent's IPv4 loopback, else its slot in
        :data:`LOOPBACK_POOL` (a router id is 32 bits in BGP, OSPF and Loom's IS-IS NETs, whatever the
        families the device routes)."""
        d = intent.device_map[name]
        if d.router_id is not None:
            return str(d.router_id)
        if d.loopback_v4 is not None:
            return str(d.loopback_v4)
        return str(LOOPBACK_POOL.network_address + 1 + self.devices[name])

    def pins(self) -> Allocation:
        """The entries not at their home slot: with the intent, all :func:`allocate` needs to give
        this allocation back (``allocate(intent, keep=a.pins()) == a``)."""
        return Allocation({k: s for k, s in self.links.items() if s != _home(k, _LINK_SLOTS)},
                          {k: s for k, s in self.devices.items() if s != _home(k, _DEVICE_SLOTS)})

    def __bool__(self) -> bool:
        return bool(self.links or self.devices)

    def to_json(self) -> str:
        """Compact JSON with sorted keys (``""`` when empty), as the store keeps pins."""
        if not self:
            return ""
        return json.dumps({"links": dict(self.links), "devices": dict(self.devices)},
                          sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | None) -> Allocation:
        """The inverse of :meth:`to_json`."""
        if not text:
            return cls()
        doc: dict[str, Any] = json.loads(text)
        return cls({str(k): int(v) for k, v in doc.get("links", {}).items()},
                   {str(k): int(v) for k, v in doc.get("devices", {}).items()})


def _place(keys: Iterable[str], keep: Mapping[str, int], reserved: set[int], size: int, what: str) -> dict[str, int]:
    wanted = sorted(set(keys))
    out: dict[str, int] = {}
    used = set(reserved)
    for k in wanted:  # kept slots first: an existing id never moves for a new one
        s = keep.get(k)
        if s is not None and 0 <= s < size and s not in used:
            out[k] = s
            used.add(s)
    if len(wanted) > size - len(reserved):
        raise ValueError(f"more than {size - len(reserved)} {what}: the pool is exhausted")
    for k in wanted:
        if k in out:
            continue
        s = _home(k, size)
        while s in used:
            s = (s + 1) % size
        out[k] = s
        used.add(s)
    return out


def _explicit(intent: Intent) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    """Every address ``intent`` gives itself: loopbacks, pinned router ids, and pinned links' addresses
    (a small subnet's every address, so no allocated /31 falls inside it)."""
    out = [a for d in intent.devices for a in (d.loopback, d.router_id) if a is not None]
    for lk in intent.links:
        for e in (lk.a_address, lk.b_address):
            if e is not None:
                out += list(e.network) if e.network.num_addresses <= 1024 else [e.ip]
    return out


def _reserved(intent: Intent, pool: ipaddress.IPv4Network | ipaddress.IPv6Network, offset: int, width: int,
              size: int) -> set[int]:
    """Slots of ``pool`` (slot ``s`` holds addresses ``offset + width * s`` onward) that hold an
    address ``intent`` gives explicitly (a loopback, a pinned router id or link address)."""
    base = int(pool.network_address)
    slots = ((int(a) - base - offset) // width for a in _explicit(intent) if a.version == pool.version and a in pool)
    return {s for s in slots if 0 <= s < size}


def allocate(intent: Intent, keep: Allocation | None = None) -> Allocation:
    """The slots of ``intent``'s links and of its devices that have no loopback.

    Parameters
    ----------
    intent : a validated intent.
    keep : an earlier allocation (or its pins): an id it places keeps its slot while the intent has
        it and the slot is still free; new ids are placed around the kept ones.

    Returns
    -------
    The :class:`Allocation`; independent of the order of the intent's lists.

    Raises
    ------
    ValueError
        When a pool has fewer free slots than ids.

    Examples
    --------
    >>> from controller.model.intent import validate_intent
    >>> i = validate_intent({"name": "x", "devices": [
    ...     {"name": "t0", "role": "tor", "asn": 65100}, {"name": "s0", "role": "leaf", "asn": 65000}],
    ...     "links": [{"a": "t0", "a_port": "eth1", "b": "s0", "b_port": "eth1"}]})
    >>> a = allocate(i)
    >>> a.link_addresses(i.links[0])
    ('100.76.227.55/31', '100.76.227.54/31')
    >>> a.router_id(i, "t0")
    '100.127.65.241'
    >>> allocate(i, keep=a.pins()) == a
    True
    """
    keep = keep or Allocation()
    links = _place((link_id(lk) for lk in intent.links if not lk.pinned), keep.links,
                   _reserved(intent, LINK_POOL, 0, 2, _LINK_SLOTS) | _reserved(intent, LINK6_POOL, 0, 2, _LINK_SLOTS),
                   _LINK_SLOTS, "links")
    devices = _place((d.name for d in intent.devices if d.loopback_v4 is None and d.router_id is None), keep.devices,
                     _reserved(intent, LOOPBACK_POOL, 1, 1, _DEVICE_SLOTS), _DEVICE_SLOTS, "devices")
    return Allocation(links, devices)


def carried(intent: Intent) -> Allocation | None:
    """The allocation (pins) ``intent`` carries from its stored revision, if any (see :func:`carry`)."""
    got = intent.__dict__.get(_CARRIED)
    return got if isinstance(got, Allocation) else None


def carry(intent: Intent, pins: Allocation) -> Intent:
    """``intent`` carrying ``pins`` (its revision's, from the store), which every config built from it
    honours. Not a field: the document, its hash and equality ignore it; copies keep it."""
    if not pins:
        return intent
    copy = intent.model_copy()
    copy.__dict__[_CARRIED] = pins
    return copy

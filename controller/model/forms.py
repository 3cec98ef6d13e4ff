"""How a running device writes what Loom renders, kept by the intent so that adopting it changes nothing
(DESIGN.md "Adoption"): its BGP sessions' form, its OSPF's and IS-IS's, and the ports its subnets are on.

FRR resets a BGP session whose form changes (a peer-group left, ``remote-as external`` made a number,
``v6only`` toggled), an adjacency whose network type, level or system id changes, starts a new IS-IS instance
for another tag, takes OSPF by ``network`` statements or ``ip ospf area`` but not both, and a subnet moved to
another port is a forwarding change. Each form is optional on a device; absent, Loom's own. Pure: no I/O.
"""

from __future__ import annotations

import ipaddress
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from controller.model.fields import NUMBER as _Number
from controller.model.fields import Frozen as _Frozen
from controller.model.fields import IpInterface

__all__ = ["BgpForm", "HostPort", "IsisForm", "OspfForm"]

PrefixText = Annotated[str, Field(max_length=64)]


class BgpForm(_Frozen):
    """How a device's BGP sessions are written, as a running fabric writes them (DESIGN.md "Adoption"): FRR
    resets a session whose form changes, so an adopted device keeps its own. ``peer_group``: every session is
    a member of this peer-group (``neighbor G peer-group``), which carries ``remote-as`` when that is
    ``external``; ``remote_as``: the peer's ASN (``asn``, Loom's default) or ``external``; ``v6only``: an
    unnumbered session is ``interface v6only`` (Loom's default: it never runs over IPv4) or plain
    ``interface``; ``originate``: ``network`` statements for the device's prefixes (default) or
    ``redistribute-connected``, which announces every connected subnet of the device (its prefixes are
    connected, and so are its numbered links' subnets, which it then announces too). Only for
    ``routing: bgp``. Absent, Loom's own form."""

    peer_group: str | None = Field(default=None, min_length=1, max_length=64, pattern=r"^[A-Za-z][A-Za-z0-9_.-]*$")
    remote_as: Literal["asn", "external"] = "asn"
    v6only: bool = True
    originate: Literal["network", "redistribute-connected"] = "network"


class HostPort(_Frozen):
    """A port where a device's own subnets live, as a running device has it (DESIGN.md "Adoption"): its name
    and its addresses with their length, at most one per family, each in a prefix the device originates.
    Loom puts such a prefix on this port with this address; the device's other prefixes go on ``host0``,
    ``host1``, ... by their first address."""

    port: str = Field(min_length=1, max_length=15, pattern=r"^[A-Za-z0-9_.:-]+$")
    addresses: tuple[IpInterface, ...] = Field(min_length=1, max_length=2)

    @field_validator("addresses")
    @classmethod
    def _one_per_family(cls, v: tuple[ipaddress.IPv4Interface | ipaddress.IPv6Interface, ...]
                        ) -> tuple[ipaddress.IPv4Interface | ipaddress.IPv6Interface, ...]:
        if len({a.version for a in v}) < len(v):
            raise ValueError("at most one address of each family")
        return v


class OspfForm(_Frozen):
    """How a device runs OSPF on its links, as a running device has it (DESIGN.md "Adoption"): FRR resets an
    adjacency whose network type changes, and drops one while its two ends' hello or dead intervals differ.
    ``network_type``: ``point-to-point`` (Loom's) or ``broadcast``; ``hello_s`` and ``dead_s``: the intervals
    (absent: Loom's, from the BGP timers); ``networks``: OSPF runs by these ``network ... area 0.0.0.0``
    statements (and one for each subnet of the device they do not cover) instead of ``ip ospf area`` on each
    interface (FRR takes one form only; a drained link is then passive). Only for ``routing: ospf``."""

    network_type: Literal["point-to-point", "broadcast"] = "point-to-point"
    hello_s: Annotated[int, Field(ge=1, le=65535), _Number] | None = None
    dead_s: Annotated[int, Field(ge=1, le=65535), _Number] | None = None
    networks: tuple[PrefixText, ...] | None = Field(default=None, max_length=4096)

    @field_validator("networks")
    @classmethod
    def _networks(cls, v: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if v is None:
            return v
        out = []
        for text in v:
            try:
                net = ipaddress.ip_network(text, strict=False)
            except ValueError:
                raise ValueError(f"'{text}' is not a prefix (expected one like '10.0.0.0/16')") from None
            if net.version != 4:
                raise ValueError(f"{text}: OSPF (v2) networks are IPv4")
            out.append(str(net))
        return tuple(out)

    @model_validator(mode="after")
    def _dead_after_hello(self) -> OspfForm:
        if self.hello_s is not None and self.dead_s is not None and self.dead_s <= self.hello_s:
            raise ValueError(f"dead_s {self.dead_s} must be longer than hello_s {self.hello_s}")
        return self


class IsisForm(_Frozen):
    """How a device runs IS-IS, as a running device has it (DESIGN.md "Adoption"): FRR starts a new instance
    for another ``tag``, resets adjacencies for another ``net`` (system id) or level, changes every LSP for
    another ``metric_style``, resets an adjacency whose network type changes and drops one while its ends'
    hellos disagree. ``tag`` (Loom's: ``loom``), ``net`` (Loom's: from the router id), ``is_type`` (Loom's:
    ``level-2-only``), ``metric_style`` (Loom's: ``wide``; ``narrow`` metrics stop at 63),
    ``network_type`` (Loom's: ``point-to-point``), ``hello_s`` and ``hello_multiplier`` (Loom's: from the BGP
    timers). Only for ``routing: isis``."""

    tag: str | None = Field(default=None, min_length=1, max_length=32, pattern=r"^[A-Za-z0-9_.-]+$")
    net: str | None = Field(default=None, pattern=r"^[0-9A-Fa-f]{2}(\.[0-9A-Fa-f]{4}){1,7}\.00$")
    is_type: Literal["level-1", "level-1-2", "level-2-only"] = "level-2-only"
    metric_style: Literal["wide", "narrow", "transition"] = "wide"
    network_type: Literal["point-to-point", "broadcast"] = "point-to-point"
    hello_s: Annotated[int, Field(ge=1, le=600), _Number] | None = None
    hello_multiplier: Annotated[int, Field(ge=2, le=100), _Number] | None = None

    @property
    def system_id(self) -> str | None:
        """The NET's system id (its three groups before the selector)."""
        return None if self.net is None else ".".join(self.net.split(".")[-4:-1])

    @field_validator("net")
    @classmethod
    def _net_has_a_system_id(cls, v: str | None) -> str | None:
        if v is not None and len(v.split(".")) < 5:
            raise ValueError(f"{v}: a NET is an area, a six-byte system id and the selector "
                             "(49.0001.0000.0000.0001.00)")
        return None if v is None else v.lower()

"""Field types the intent's objects share: numbers that are never booleans, IP values of either family with one
clean message, and the frozen, strict base of every object (:mod:`controller.model.domain`,
:mod:`controller.model.forms`). Pure: no I/O.
"""

from __future__ import annotations

import ipaddress
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict

__all__ = ["Frozen", "IpAddress", "IpInterface", "NUMBER", "not_boolean"]


def not_boolean(value: Any) -> Any:
    """A number is not a boolean: JSON ``true`` would otherwise be read as 1."""
    if isinstance(value, bool):
        raise ValueError("expected a number, not a boolean")
    return value


NUMBER = BeforeValidator(not_boolean)  # after the constraints in Annotated: it runs first, they stay in the schema
def _ip_value(kind: str, parse: Any, example: str) -> Any:
    """A validator that parses either family with ``parse`` (``ipaddress.ip_address`` or ``ip_interface``):
    one clean message for a bad value rather than one per family."""

    def check(v: Any) -> Any:
        if isinstance(v, (ipaddress.IPv4Address, ipaddress.IPv6Address, ipaddress.IPv4Interface,
                          ipaddress.IPv6Interface)):
            return v
        if not isinstance(v, str):
            raise ValueError(f"expected {kind} string like {example}")
        try:
            return parse(v)
        except ValueError:
            raise ValueError(f"'{v}' is not {kind} (expected one like {example})") from None

    return BeforeValidator(check)


#: An IPv4 or IPv6 address (a loopback).
IpAddress = Annotated[ipaddress.IPv4Address | ipaddress.IPv6Address,
                      _ip_value("an IPv4 or IPv6 address", ipaddress.ip_address, "'10.255.0.1' or '2001:db8::1'")]
#: An interface address of either family with its length (a pinned link end).
IpInterface = Annotated[ipaddress.IPv4Interface | ipaddress.IPv6Interface,
                        _ip_value("an interface address", ipaddress.ip_interface, "'192.168.1.1/30' or 'fd00::1/127'")]


class Frozen(BaseModel):
    """Unknown keys are errors, and an object is immutable once built."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

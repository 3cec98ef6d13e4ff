"""A lab host's network, read from its containerlab ``exec`` commands, in both address families.

This module owns what a host of a containerlab file is on the network: :class:`HostSpec` (its
interface, an IPv4 and/or an IPv6 address with the default route of each family) and the two ways of
reading it from the host's ``exec`` commands. Loom's own hosts (``loom.role: host``, :mod:`labs.clab`)
are read strictly by :func:`parse_host_exec`: only ``ip [-4|-6] addr add A/L dev IF``, ``ip [-4|-6]
route add|replace default via G [dev IF]`` (``0.0.0.0/0`` and ``::/0`` too) and ``ip link set IF up``,
at most one address of each family, every family given with its default route inside its subnet (an
IPv6 link-local gateway, ``fe80::/10``, needs ``dev``), both on one interface; anything else is a
located error. Another file's hosts run their commands as they are, and :func:`read_host_exec` only
reads what it can of them (their first address of each family, for ``loom lab hosts``). The command
forms follow iproute2's: ``default`` takes its family from the flag or the gateway, ``0.0.0.0/0`` is
IPv4's only.
"""

from __future__ import annotations

import ipaddress
import shlex
from dataclasses import dataclass, field

from controller.model.errors import IntentError

__all__ = ["HostSpec", "parse_host_exec", "read_host_exec"]

IPInterface = ipaddress.IPv4Interface | ipaddress.IPv6Interface
_ADDR = ("a", "addr", "address")
_ROUTE = ("r", "ro", "route")
_DEFAULTS = {"default": None, "0.0.0.0/0": 4, "::/0": 6}
_FAMILY = {4: "IPv4", 6: "IPv6"}


@dataclass(frozen=True, slots=True)
class HostSpec:
    """A host's network on ``interface``: ``address`` (IPv4, CIDR) with its default route via
    ``gateway``, and ``address6`` (IPv6, CIDR) with its default route via ``gateway6``; a host has one
    family at least. :attr:`ip` and :attr:`prefix` are its first family's (IPv4's, or IPv6's on an
    IPv6-only host), :attr:`ip6` and :attr:`prefix6` its IPv6 ones (None without IPv6)."""

    interface: str
    address: str | None
    gateway: str | None = None
    address6: str | None = None
    gateway6: str | None = None

    @property
    def ip(self) -> str:
        return _first(self.address or self.address6)

    @property
    def prefix(self) -> str:
        return str(ipaddress.ip_interface(self.address or self.address6 or "").network)

    @property
    def ip6(self) -> str | None:
        return None if self.address6 is None else _first(self.address6)

    @property
    def prefix6(self) -> str | None:
        return None if self.address6 is None else str(ipaddress.IPv6Interface(self.address6).network)

    @property
    def ips(self) -> tuple[str, ...]:
        """Its addresses, IPv4 first."""
        return tuple(_first(a) for a in (self.address, self.address6) if a)


def _first(cidr: str | None) -> str:
    return (cidr or "").split("/")[0]


def _ip_words(command: str) -> tuple[int | None, list[str]] | None:
    """``ip [-4|-6] OBJECT ...`` -> (the family flag, the words from OBJECT on); None for another command
    or one that does not parse."""
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    if words[:1] != ["ip"]:
        return None
    flag = {"-4": 4, "-6": 6}.get(words[1]) if len(words) > 1 else None
    return flag, words[2:] if flag else words[1:]


def _interface(text: str, flag: int | None, *, strict: bool = True) -> IPInterface | str:
    """An address with its prefix length for ``ip addr add``, or why it is not one (``strict``: a host
    subnet's, not a /31, /32, /127 or /128)."""
    family = _FAMILY.get(flag or 0, "IP")
    try:
        iface = ipaddress.ip_interface(text)
    except ValueError:
        return f"'{text}' is not an {family} address with a prefix length"
    if flag is not None and iface.version != flag:
        return f"'{text}' is not an {family} address (ip -{flag})"
    if "/" not in text:
        return f"'{text}' has no prefix length"
    if strict and iface.network.prefixlen >= iface.max_prefixlen - 1:
        return f"'{text}' needs a prefix length below {iface.max_prefixlen - 1} (the host subnet)"
    if iface.version == 6 and iface.ip.is_link_local:
        return f"'{text}' is link-local: the kernel gives every interface one; a host's address is global"
    return iface


def _gateway(dest: str, text: str, flag: int | None) -> tuple[int, str] | str:
    """A default route's gateway -> (family, address), or why it is not one for ``dest``."""
    want = flag or _DEFAULTS[dest]
    try:
        gw = ipaddress.ip_address(text)
    except ValueError:
        return f"'{text}' is not an {_FAMILY.get(want or 0, 'IP')} address"
    if want is not None and gw.version != want:
        return f"'{text}' is not an {_FAMILY[want]} address (the route is {'ip -' + str(flag) if flag else dest})"
    return gw.version, str(gw)


@dataclass
class _Found:
    """What a host's commands gave so far: per family, (interface, CIDR) and the default gateway."""

    addresses: dict[int, tuple[str, str]] = field(default_factory=dict)
    gateways: dict[int, tuple[str, str | None]] = field(default_factory=dict)  # family -> (gateway, dev)


def read_host_exec(commands: list[str]) -> HostSpec | None:
    """A host's network as far as its ``exec`` commands show it (its first address of each family with a
    prefix length, on the interface of the first, and its default gateways), for ``loom lab hosts``;
    None when no address is given. Nothing is refused: the commands run as they are."""
    found = _Found()
    for cmd in commands:
        parsed = _ip_words(cmd)
        if parsed is None:
            continue
        flag, words = parsed
        if words[:1] and words[0] in _ADDR and words[1:2] == ["add"] and "dev" in words[3:-1]:
            iface = _interface(words[2], flag, strict=False)
            dev = words[words.index("dev", 3) + 1]
            first_dev = next(iter(found.addresses.values()), (dev, ""))[0]
            if not isinstance(iface, str) and iface.version not in found.addresses and dev == first_dev:
                found.addresses[iface.version] = (dev, str(iface))
        elif words[:1] and words[0] in _ROUTE and words[1:2] in (["add"], ["replace"]) \
                and words[2:4] and words[2] in _DEFAULTS and words[3] == "via" and len(words) > 4:
            gw = _gateway(words[2], words[4], flag)
            if not isinstance(gw, str):
                found.gateways.setdefault(gw[0], (gw[1], None))
    if not found.addresses:
        return None
    return _spec(found)


def _spec(found: _Found) -> HostSpec:
    v4, v6 = found.addresses.get(4), found.addresses.get(6)
    dev = (v4 or v6 or ("", ""))[0]
    return HostSpec(dev, v4[1] if v4 else None, found.gateways.get(4, (None, None))[0],
                    v6[1] if v6 else None, found.gateways.get(6, (None, None))[0])


def _take_address(where: str, flag: int | None, words: list[str], found: _Found, errors: list[IntentError]) -> None:
    iface = _interface(words[2], flag)
    if isinstance(iface, str):
        errors.append(IntentError(where, iface))
    elif iface.version in found.addresses:
        errors.append(IntentError(where, f"a host has one {_FAMILY[iface.version]} address (a second 'ip addr add')"))
    else:
        found.addresses[iface.version] = (words[4], str(iface))


def _take_route(where: str, flag: int | None, words: list[str], found: _Found, errors: list[IntentError]) -> None:
    gw = _gateway(words[2], words[4], flag)
    if isinstance(gw, str):
        errors.append(IntentError(where, gw))
    elif gw[0] == 6 and ipaddress.IPv6Address(gw[1]).is_link_local and len(words) == 5:
        errors.append(IntentError(where, f"a link-local gateway ({gw[1]}) needs 'dev IF'"))
    else:
        found.gateways[gw[0]] = (gw[1], words[6] if len(words) == 7 else None)


def parse_host_exec(loc: str, raw: object, errors: list[IntentError]) -> HostSpec | None:
    """A Loom host's network from its containerlab ``exec`` commands (see the module docstring); errors
    are appended, located at ``loc.exec[j]`` or ``loc.exec``."""
    if not isinstance(raw, list):
        errors.append(IntentError(f"{loc}.exec", "must be a list of commands"))
        return None
    found, n = _Found(), len(errors)
    for j, cmd in enumerate(raw):
        where = f"{loc}.exec[{j}]"
        parsed = _ip_words(str(cmd))
        flag, words = parsed if parsed is not None else (None, [])
        if words[:1] and words[0] in _ADDR and words[1:2] == ["add"] and len(words) == 5 and words[3] == "dev":
            _take_address(where, flag, words, found, errors)
        elif words[:1] and words[0] in _ROUTE and words[1:2] in (["add"], ["replace"]) and words[2:3] \
                and words[2] in _DEFAULTS and words[3:4] == ["via"] and len(words) in (5, 7) \
                and words[5:6] in ([], ["dev"]):
            _take_route(where, flag, words, found, errors)
        elif words[:2] == ["link", "set"] and len(words) == 4 and words[3] == "up" and flag is None:
            continue
        else:
            errors.append(IntentError(where, f"'{cmd}' is not supported on a host (expected 'ip [-6] addr add A/L "
                                             "dev IF', 'ip [-6] route replace default via G', 'ip link set IF up')"))
    if len(errors) > n:
        return None
    return _complete(loc, found, errors)


def _complete(loc: str, found: _Found, errors: list[IntentError]) -> HostSpec | None:
    """The host's spec once every family it has an address of has its default route in its subnet, and
    the addresses share one interface; else None, with the errors."""
    where = f"{loc}.exec"
    if not found.addresses:
        errors.append(IntentError(where, "a host needs 'ip addr add A/L dev IF' and 'ip route replace default via G'"))
        return None
    n = len(errors)
    for family in sorted(set(found.addresses) | set(found.gateways)):
        name, flag = _FAMILY[family], "" if family == 4 else " -6"
        if family not in found.gateways:
            address = found.addresses[family][1]
            errors.append(IntentError(where, f"the {name} address {address} needs its default route "
                                             f"('ip{flag} route replace default via G')"))
        elif family not in found.addresses:
            errors.append(IntentError(where, f"a default route via {found.gateways[family][0]} but no {name} "
                                             f"address ('ip{flag} addr add A/L dev IF')"))
        else:
            _check_gateway(where, found, family, errors)
    devs = {dev for dev, _a in found.addresses.values()}
    if len(devs) > 1:
        errors.append(IntentError(where, f"the addresses are on {' and '.join(sorted(devs))}: a host has one link"))
    return None if len(errors) > n else _spec(found)


def _check_gateway(where: str, found: _Found, family: int, errors: list[IntentError]) -> None:
    dev, address = found.addresses[family]
    gateway, via_dev = found.gateways[family]
    gw = ipaddress.ip_address(gateway)
    if via_dev is not None and via_dev != dev:
        errors.append(IntentError(where, f"the default route is via {via_dev}, but the address is on {dev}"))
    elif not (gw.version == 6 and gw.is_link_local) and gw not in ipaddress.ip_interface(address).network:
        errors.append(IntentError(where, f"gateway {gateway} is not in the host's subnet {address}"))

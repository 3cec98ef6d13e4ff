"""Where a device agent's telemetry counters come from: the kernel, or a synthetic model.

This module owns the counter sources behind the agent's gNMI service
(:mod:`southbound.device.gnmi_server`), in domain values: a :class:`CounterSnapshot` holds,
at one instant, every interface's counters (OpenConfig
``openconfig-interfaces`` leaf names: ``in-octets``, ``out-pkts``, ...) and
every destination prefix's forwarding counters (OpenConfig AFT
``ipv4-entry`` and ``ipv6-entry`` ``octets-forwarded`` / ``packets-forwarded``; a
snapshot holds both families, each prefix in its canonical text, IPv6 compressed).
:class:`CounterSource` is the protocol; two sources implement it:

* :class:`KernelCounters` reads the node it runs in (the agent runs in the
  node's network namespace): interface statistics over netlink (``IFLA_STATS64``),
  and per-prefix packet counters from two nftables tables the agent owns, one
  per family (``table ip loom_telemetry`` for IPv4 prefixes, ``table ip6
  loom_telemetry`` for IPv6 ones: each family's rules and longest-first order
  stay on their own, and the IPv4 table is the one earlier agents made, so its
  counts survive an upgrade). Each table's ``forward`` chain first lets through
  everything that did not enter on a host-facing port (a named set
  ``host_ports``), then has one ``counter accept`` rule per prefix of that
  family in the node's FIB (``ip daddr P`` / ``ip6 daddr P``), longest prefix
  first, so each forwarded packet is counted once, against the prefix the FIB
  forwards it by (longest match). A rule counts the IP packet: the IPv4 total
  length, or the IPv6 payload length plus its 40-byte header. ``accept`` ends
  only this table's chain; other tables' chains on the hook still see the
  packet. The FIB prefixes are the main table's routes of both families except
  connected and host/link-scope ones (``proto kernel``) and the default routes; when they,
  or the host-facing ports, change, the rule set is resynced in one atomic
  ``nft -f`` batch that adds and deletes rules by handle, so the counters of
  prefixes that stay are never reset. The table is left in place when the agent
  stops: a restarted agent keeps counting from where it was.
* :class:`SyntheticCounters` (``--dry-frr`` agents, benchmarks): deterministic
  counters growing at rates drawn from a seed per device, interface and
  prefix, computed from the clock on demand (no state per sample).

Host-facing ports (the rule of :func:`fabric_ports`): every interface of the
node except ``lo`` and the fabric ports, a fabric port being an interface the
running FRR configuration describes as a link to a peer (``description to
PEER:PORT``, what :mod:`southbound.render` writes for an interface whose
``peer`` is set) or carries a BGP session (``neighbor ... via PORT``). Before
any configuration is known, no port is a fabric port, so every interface counts
as host-facing.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import re
import socket
import subprocess
import time
import zlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from southbound.device import nftables
from southbound.netlink import RTN_UNICAST, RTPROT_KERNEL, dump_links, dump_routes

__all__ = ["AFT_LEAVES", "INTERFACE_LEAVES", "CounterSnapshot", "CounterSource", "KernelCounters", "NftTable",
           "SyntheticCounters", "canonical", "config_ports", "config_prefixes", "fabric_ports", "family_of"]

log = logging.getLogger("loom.agent.counters")

#: the ``openconfig-interfaces`` counters served, and the ``IFLA_STATS64`` field each comes from
INTERFACE_LEAVES: dict[str, str] = {
    "in-octets": "rx_bytes", "out-octets": "tx_bytes", "in-pkts": "rx_packets", "out-pkts": "tx_packets",
    "in-discards": "rx_dropped", "out-discards": "tx_dropped",
}
#: the AFT ``ipv4-entry`` / ``ipv6-entry`` counters served
AFT_LEAVES: tuple[str, ...] = ("octets-forwarded", "packets-forwarded")


@dataclass(frozen=True, slots=True)
class CounterSnapshot:
    """Every counter of a device at ``timestamp_ns``: ``interfaces[PORT][LEAF]`` and ``prefixes[PREFIX][LEAF]``."""

    timestamp_ns: int
    interfaces: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    prefixes: Mapping[str, Mapping[str, int]] = field(default_factory=dict)


class CounterSource(Protocol):
    """What the gNMI service reads. ``blocking``: :meth:`read` does I/O (it is run in a thread)."""

    blocking: bool

    def read(self) -> CounterSnapshot: ...


# -- what the running configuration says --------------------------------------------------------------------
_IFACE = re.compile(r"^interface (\S+)", re.M)
_FABRIC_DESC = re.compile(r"^interface (\S+)\n(?: [^\n]*\n)*? description to \S+", re.M)
_NEIGHBOR_VIA = re.compile(r"^ neighbor \S+ description \S+ via (\S+)", re.M)
_UNNUMBERED = re.compile(r"^ neighbor (\S+) interface", re.M)
_NETWORK = re.compile(r"^\s*network (\d+\.\d+\.\d+\.\d+/\d+|[0-9A-Fa-f:]*:[0-9A-Fa-f:.]*/\d+)", re.M)
_PREFIX_LIST = re.compile(r"^(?:ip|ipv6) prefix-list \S+ (?:seq \d+ )?permit (\d+\.\d+\.\d+\.\d+/\d+|"
                          r"[0-9A-Fa-f:]*:[0-9A-Fa-f:.]*/\d+)", re.M)


def fabric_ports(frr_text: str) -> frozenset[str]:
    """The fabric ports of a rendered FRR configuration (links to peers, BGP sessions)."""
    ports = set(_FABRIC_DESC.findall(frr_text)) | set(_NEIGHBOR_VIA.findall(frr_text))
    ports |= set(_UNNUMBERED.findall(frr_text))
    return frozenset(ports)


def config_ports(frr_text: str) -> tuple[str, ...]:
    """The interfaces a rendered FRR configuration names, ``lo`` excluded."""
    return tuple(sorted({p for p in _IFACE.findall(frr_text) if p != "lo"}))


def config_prefixes(frr_text: str, fib: Iterable[str] = ()) -> tuple[str, ...]:
    """The prefixes of both families a configuration mentions: originated, in prefix lists, in its FIB
    routes; canonical (IPv6 compressed), IPv4 first."""
    found = set(_NETWORK.findall(frr_text)) | set(_PREFIX_LIST.findall(frr_text)) | set(fib)
    out = set()
    for p in found:
        try:
            out.add(canonical(p))
        except ValueError:
            continue  # text that only looks like a prefix
    return tuple(sorted(out, key=_prefix_order))


def canonical(prefix: str) -> str:
    """A prefix's canonical text (host bits cleared, IPv6 compressed and lower case)."""
    return str(ipaddress.ip_network(prefix, strict=False))


def family_of(prefix: str) -> int:
    """4 or 6."""
    return 6 if ":" in prefix else 4


def _prefix_order(prefix: str) -> tuple[int, int, int]:
    """IPv4 first, then longest prefix first, then by address: the order of the counter rules."""
    net = ipaddress.ip_network(prefix, strict=False)
    return (net.version, -net.prefixlen, int(net.network_address))


# -- the kernel ------------------------------------------------------------------------------------------


def read_links() -> dict[str, dict[str, int]]:
    """Every interface's counters over netlink (``IFLA_STATS64``), ``lo`` excluded."""
    return {link.name: {leaf: int(link.stats.get(k, 0)) for leaf, k in INTERFACE_LEAVES.items()}
            for link in dump_links() if link.name != "lo"}


def read_fib_prefixes() -> frozenset[str]:
    """The IPv4 and IPv6 destinations of the main table (canonical text): routes learned or installed
    (BGP, IS-IS, static, Loom), not the connected or link-scope routes of the node's own interfaces
    (IPv6's ``fe80::/64`` among them), not the default routes, not unreachable or multicast ones."""
    return frozenset(canonical(f"{r.dst}/{r.dst_len}") for family in (socket.AF_INET, socket.AF_INET6)
                     for r in dump_routes(family)
                     if r.protocol != RTPROT_KERNEL and r.scope == 0 and r.dst_len and r.kind == RTN_UNICAST)


@dataclass
class NftTable:
    """The agent's nftables table of per-prefix counters of one family (``family``: ``ip`` for IPv4
    prefixes, ``ip6`` for IPv6 ones; see the module docstring for its design)."""

    name: str = "loom_telemetry"
    nft: str = "nft"
    priority: int = -150
    family: str = "ip"
    _prefixes: dict[str, int] = field(default_factory=dict)  # prefix -> rule handle
    _host_ports: frozenset[str] | None = None
    _ready: bool = False
    _has_skip: bool = False

    def _run(self, args: list[str], stdin: str | None = None) -> str:
        """``nft ARGS`` (``-f -`` reads ``stdin``): through libnftables in this process where the command is the
        system's ``nft`` and the library loads (:mod:`southbound.device.nftables`), else the command."""
        if self.nft == "nft" and nftables.available():
            as_json = args[:1] == ["-j"]
            rest = args[1:] if as_json else args
            text = stdin if rest == ["-f", "-"] and stdin is not None else " ".join(rest)
            try:
                return nftables.run(text, json=as_json)
            except nftables.NftError as exc:
                raise OSError(f"nft {' '.join(args)}: {str(exc)[-500:]}") from exc
        proc = subprocess.run([self.nft, *args], input=stdin, capture_output=True, text=True, timeout=10)
        if proc.returncode != 0:
            raise OSError(f"nft {' '.join(args)}: {proc.stderr.strip()[-500:]}")
        return proc.stdout

    @property
    def counting(self) -> bool:
        """Whether the table has prefix rules (as far as this agent knows)."""
        return bool(self._prefixes)

    @property
    def _t(self) -> str:
        return f"{self.family} {self.name}"

    def _ensure(self) -> None:
        t = self._t
        self._run(["-f", "-"], "\n".join([
            f"add table {t}",
            f"add set {t} host_ports {{ type ifname; }}",
            f"add chain {t} forward {{ type filter hook forward priority {self.priority}; policy accept; }}",
        ]) + "\n")
        counters = self.list_counters()  # learns the rules (and handles) a previous agent left
        if not self._has_skip:
            self._run(["add", "rule", self.family, self.name, "forward", "iifname", "!=", "@host_ports", "accept",
                       "comment", '"skip"'])
        self._prefixes = {p: h for p, (h, _, _) in counters.items()}
        self._ready = True

    def list_counters(self) -> dict[str, tuple[int, int, int]]:
        """``{PREFIX: (handle, packets, bytes)}`` from ``nft -j list table``."""
        doc = json.loads(self._run(["-j", "list", "table", self.family, self.name]) or "{}")
        out: dict[str, tuple[int, int, int]] = {}
        seen: set[str] = set()
        for item in doc.get("nftables", []):
            rule = item.get("rule")
            if not rule:
                continue
            comment = str(rule.get("comment", ""))
            seen.add(comment)
            counter = next((e["counter"] for e in rule.get("expr", []) if "counter" in e), None)
            if counter is not None and comment != "skip":
                out[comment] = (int(rule["handle"]), int(counter["packets"]), int(counter["bytes"]))
        self._has_skip = "skip" in seen
        return out

    def sync(self, prefixes: frozenset[str], host_ports: frozenset[str]) -> bool:
        """Make the rules count exactly ``prefixes`` (of this table's family, canonical) from ``host_ports``;
        returns whether anything changed."""
        if not self._ready:
            self._ensure()
        t = self._t
        lines: list[str] = []
        if host_ports != self._host_ports:
            lines.append(f"flush set {t} host_ports")
            if host_ports:
                lines.append(f"add element {t} host_ports {{ {', '.join(json.dumps(p) for p in sorted(host_ports))} }}")
        gone = set(self._prefixes) - prefixes
        lines += [f"delete rule {t} forward handle {self._prefixes[p]}" for p in sorted(gone)]
        keep = sorted((p for p in self._prefixes if p not in gone), key=_prefix_order)
        for p in sorted(prefixes - set(self._prefixes), key=_prefix_order):
            # before the first remaining rule of a shorter prefix: longest match stays first
            plen = -_prefix_order(p)[1]
            after = next((self._prefixes[q] for q in keep if -_prefix_order(q)[1] < plen), None)
            where = f"insert rule {t} forward position {after}" if after is not None else f"add rule {t} forward"
            lines.append(f'{where} {self.family} daddr {p} counter accept comment "{p}"')
        if not lines:
            return False
        self._run(["-f", "-"], "\n".join(lines) + "\n")
        self._host_ports = host_ports
        if gone or prefixes - set(self._prefixes):
            self._prefixes = {p: h for p, (h, _, _) in self.list_counters().items()}
        return True

    def delete(self) -> None:
        """Remove the table (tests; an agent leaves it so that its counters survive a restart)."""
        self._run(["delete", "table", self.family, self.name])
        self._ready = False
        self._prefixes = {}
        self._host_ports = None


class KernelCounters:
    """The node's own counters: netlink for interfaces, the agent's nftables tables for prefixes.

    ``fabric``: the fabric ports now (from the running config); every other interface but ``lo`` is
    host-facing. ``prefixes`` overrides where the counted prefixes come from (default: the FIB, both
    families). ``table`` is the IPv4 table; ``table6``, the IPv6 one, defaults to ``table``'s name, nft and
    priority in the ``ip6`` family.
    """

    blocking = True

    def __init__(self, fabric: Callable[[], frozenset[str]] = frozenset, *, table: NftTable | None = None,
                 table6: NftTable | None = None, prefixes: Callable[[], frozenset[str]] = read_fib_prefixes,
                 clock: Callable[[], int] = time.time_ns):
        self.fabric = fabric
        self.table = table or NftTable()
        self.table6 = table6 or NftTable(self.table.name, self.table.nft, self.table.priority, family="ip6")
        self.prefixes = prefixes
        self.clock = clock
        self._nft_failed: set[str] = set()

    def read(self) -> CounterSnapshot:
        """Interface counters always; prefix counters of each family when nftables works here (else none,
        logged once: the device then serves interface counters only, as many switches do)."""
        links = read_links()
        host = frozenset(links) - self.fabric()
        counts: dict[str, tuple[int, int, int]] = {}
        try:
            wanted = self.prefixes()
        except (OSError, ValueError) as exc:
            log.warning("no prefix counters: cannot read the FIB's prefixes (%s)", exc)
            wanted = None
        for version in (4, 6):
            if wanted is not None:
                counts.update(self._count(version, frozenset(p for p in wanted if family_of(p) == version), host))
        now = self.clock()
        return CounterSnapshot(now, links, {p: {"octets-forwarded": b, "packets-forwarded": n}
                                            for p, (_, n, b) in counts.items()})

    def _count(self, version: int, prefixes: frozenset[str], host: frozenset[str]) -> dict[str, tuple[int, int, int]]:
        """One family's table synced to ``prefixes`` and read; {} (logged once) when nftables fails."""
        table = self.table if version == 4 else self.table6
        if version == 6 and not prefixes and not table.counting:
            return {}  # no IPv6 prefix (an IPv4 fabric): no ip6 table made, no nft call per reading
        try:
            table.sync(prefixes, host)
            counts = table.list_counters() if table.counting else {}
        except (OSError, subprocess.SubprocessError, ValueError) as exc:
            if table.family not in self._nft_failed:
                log.warning("no IPv%d prefix counters: nftables failed (%s); serving interface counters only",
                            version, exc)
            self._nft_failed.add(table.family)
            fresh = NftTable(table.name, table.nft, table.priority, family=table.family)  # start over next time
            if version == 4:
                self.table = fresh
            else:
                self.table6 = fresh
            return {}
        self._nft_failed.discard(table.family)
        return counts


# -- synthetic --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Model:
    ports: tuple[str, ...]
    prefixes: tuple[str, ...]
    rates: tuple[tuple[str, str, float], ...]  # (kind, key, bytes per second) for each entity


class SyntheticCounters:
    """Deterministic counters for dry agents: each interface direction and each prefix grows at a rate
    (bytes/s, drawn from ``seed``, the device and the key, between ``min_bps`` and ``max_bps`` bits/s)
    since ``start`` (a restart resets them, as a real switch's would), packets at ``packet_bytes`` each.

    ``config``: the running config's FRR text and FIB prefixes (the ports and prefixes it names; when it
    names no port, ``default_ports``); ``extra_prefixes`` are counted as well.
    """

    blocking = False

    def __init__(self, device: str, *, seed: int = 0, config: Callable[[], tuple[str, Iterable[str]]] | None = None,
                 default_ports: tuple[str, ...] = ("eth1", "eth2"), extra_prefixes: tuple[str, ...] = (),
                 min_bps: float = 1e6, max_bps: float = 1e9, packet_bytes: int = 1000,
                 clock: Callable[[], int] = time.time_ns, start: int | None = None):
        self.device = device
        self.seed = seed
        self.config = config or (lambda: ("", ()))
        self.default_ports = default_ports
        self.extra_prefixes = extra_prefixes
        self.min_bps, self.max_bps = min_bps, max_bps
        self.packet_bytes = packet_bytes
        self.clock = clock
        self.start = clock() if start is None else start
        self._key: tuple[str, tuple[str, ...]] | None = None
        self._model = _Model((), (), ())

    def rate(self, kind: str, key: str) -> float:
        """Bytes per second of one counter (``kind``: ``in``, ``out`` or ``aft``)."""
        h = zlib.crc32(f"{self.seed}/{self.device}/{kind}/{key}".encode()) / 0xFFFFFFFF
        return (self.min_bps + h * (self.max_bps - self.min_bps)) / 8

    def _current(self) -> _Model:
        text, fib = self.config()
        key = (text, tuple(fib))
        if key != self._key:
            ports = config_ports(text) or self.default_ports
            prefixes = tuple(dict.fromkeys(config_prefixes(text, fib) + self.extra_prefixes))
            rates = tuple((k, p, self.rate(k, p)) for p in ports for k in ("in", "out")) + tuple(
                ("aft", p, self.rate("aft", p)) for p in prefixes)
            self._model, self._key = _Model(ports, prefixes, rates), key
        return self._model

    def read(self) -> CounterSnapshot:
        m = self._current()
        now = self.clock()
        elapsed = max(0, now - self.start) / 1e9
        octets = {(k, p): int(r * elapsed) for k, p, r in m.rates}
        pb = self.packet_bytes
        interfaces: dict[str, dict[str, int]] = {}
        for p in m.ports:
            i, o = octets[("in", p)], octets[("out", p)]
            interfaces[p] = {"in-octets": i, "out-octets": o, "in-pkts": i // pb, "out-pkts": o // pb,
                             "in-discards": 0, "out-discards": 0}
        prefixes = {p: {"octets-forwarded": octets[("aft", p)], "packets-forwarded": octets[("aft", p)] // pb}
                    for p in m.prefixes}
        return CounterSnapshot(now, interfaces, prefixes)


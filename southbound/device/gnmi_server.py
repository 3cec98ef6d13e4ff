"""The gNMI service a device agent serves (gNMI specification 0.8.0, OpenConfig paths).

It owns the switch side of the gNMI wire: the **service** a device agent
serves beside its own on the same listener (:class:`GnmiService`, registered
by :func:`add_gnmi_servicer`): ``Capabilities``; ``Get``; ``Subscribe`` in
``STREAM`` (``SAMPLE``, ``ON_CHANGE``, ``TARGET_DEFINED`` as ``SAMPLE``),
``ONCE`` and ``POLL``, with ``sync_response`` after the first complete set of
updates. It serves the OpenConfig paths of DESIGN.md's Telemetry table (the AFT
counters of both families: ``afts/ipv4-unicast/ipv4-entry[prefix=P]`` and
``afts/ipv6-unicast/ipv6-entry[prefix=P]``, ``P`` in canonical text), read
from a :class:`~southbound.device.counters.CounterSource` (and operational
state from a :class:`~southbound.device.opstate.StatusSource`: interfaces, BGP
neighbors, IS-IS adjacencies, an entity of which has several keys: interface,
level, system id; OSPF adjacencies: area, interface, router id). An ON_CHANGE
subscription also says when an entity is gone (a Notification whose ``delete``
names its leaves). Values are
``uint_val`` leaves whatever the requested encoding (JSON, JSON_IETF or PROTO:
the encoding governs structured values, and only leaves are sent); each
Notification carries a prefix (the entity's ``.../state/counters`` container)
and updates with the leaf name. Errors are gRPC status codes on the RPC as the
specification says: an unknown path ``NOT_FOUND``, a malformed one
``INVALID_ARGUMENT``, an unsupported encoding ``UNIMPLEMENTED``.

The path codec and the controller's client are :mod:`southbound.gnmi`; this
module and that one are the only two that import pygnmi's stubs.
"""

from __future__ import annotations

import asyncio
import ipaddress
import time
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc
from pygnmi.spec.v080 import gnmi_pb2 as pb
from pygnmi.spec.v080 import gnmi_pb2_grpc as pb_grpc

from southbound.device.counters import AFT_LEAVES, INTERFACE_LEAVES, CounterSnapshot, CounterSource
from southbound.device.opstate import OperSnapshot, StatusSource
from southbound.gnmi import ENCODINGS, GNMI_VERSION, Elems, PathError, format_path, path_from_pb, path_to_pb

__all__ = ["STATUS_TREES", "GnmiOptions", "GnmiService", "Key", "Query", "add_gnmi_servicer", "compile_path", "select"]

MODELS = (("openconfig-interfaces", "OpenConfig working group", "3.0.0"),
          ("openconfig-network-instance", "OpenConfig working group", "1.3.0"))
_ORIGINS = {"", "openconfig", "openconfig-interfaces", "openconfig-network-instance"}


# -- the OpenConfig tree served ---------------------------------------------------------------------------
# each tree: its elems from the root to the leaf's container, each with its key: "" (none), the name of a key
# that tells entities apart, or "k=v,k=v" for fixed keys (the default network instance, a protocol instance).
# An entity is named by the values of its tree's entity keys, in the tree's order: a string where the tree has
# one (an interface's name, a prefix), a tuple where it has several (an IS-IS adjacency: interface, level,
# system id).
_DEFAULT_NI = ("network-instance", "name=default")
_IF_TREE: tuple[tuple[str, str], ...] = (("interfaces", ""), ("interface", "name"), ("state", ""), ("counters", ""))
_IF_STATUS_TREE: tuple[tuple[str, str], ...] = (("interfaces", ""), ("interface", "name"), ("state", ""))
_AFT_TREE: tuple[tuple[str, str], ...] = (("network-instances", ""), _DEFAULT_NI, ("afts", ""),
                                         ("ipv4-unicast", ""), ("ipv4-entry", "prefix"), ("state", ""),
                                         ("counters", ""))
_AFT6_TREE: tuple[tuple[str, str], ...] = (("network-instances", ""), _DEFAULT_NI, ("afts", ""),
                                          ("ipv6-unicast", ""), ("ipv6-entry", "prefix"), ("state", ""),
                                          ("counters", ""))
_BGP_TREE: tuple[tuple[str, str], ...] = (("network-instances", ""), _DEFAULT_NI, ("protocols", ""),
                                         ("protocol", "identifier=BGP,name=BGP"), ("bgp", ""), ("neighbors", ""),
                                         ("neighbor", "neighbor-address"), ("state", ""))
_ISIS_TREE: tuple[tuple[str, str], ...] = (("network-instances", ""), _DEFAULT_NI, ("protocols", ""),
                                          ("protocol", "identifier=ISIS,name=ISIS"), ("isis", ""), ("interfaces", ""),
                                          ("interface", "interface-id"), ("levels", ""), ("level", "level-number"),
                                          ("adjacencies", ""), ("adjacency", "system-id"), ("state", ""))
_OSPF_TREE: tuple[tuple[str, str], ...] = (("network-instances", ""), _DEFAULT_NI, ("protocols", ""),
                                          ("protocol", "identifier=OSPF,name=OSPF"), ("ospfv2", ""), ("areas", ""),
                                          ("area", "identifier"), ("interfaces", ""), ("interface", "id"),
                                          ("neighbors", ""), ("neighbor", "router-id"), ("state", ""))
IF_STATUS_LEAVES = ("oper-status", "admin-status")
BGP_LEAVES = ("session-state",)
ISIS_LEAVES = ("adjacency-state",)
_TREES = {"interfaces": (_IF_TREE, tuple(INTERFACE_LEAVES)), "aft": (_AFT_TREE, AFT_LEAVES),
          "aft6": (_AFT6_TREE, AFT_LEAVES),
          "if_status": (_IF_STATUS_TREE, IF_STATUS_LEAVES), "bgp": (_BGP_TREE, BGP_LEAVES),
          "isis": (_ISIS_TREE, ISIS_LEAVES), "ospf": (_OSPF_TREE, ISIS_LEAVES)}
#: the trees whose values are operational state (strings, read from a StatusSource), not counters
STATUS_TREES = frozenset({"if_status", "bgp", "isis", "ospf"})
Value = int | str
#: an entity of a tree: its one key's value, or the values of its several keys in the tree's order
Key = str | tuple[str, ...]
_ENTITY_KEYS = {t: tuple(k for _, k in spine if k and "=" not in k) for t, (spine, _) in _TREES.items()}


@dataclass(frozen=True, slots=True)
class Query:
    """A compiled request path: which tree, which entities (``keys``: per entity key of the tree its value, or
    None for any) and which leaves."""

    tree: str
    keys: tuple[str | None, ...]
    leaves: tuple[str, ...]

    @property
    def entity(self) -> Key | None:
        """The one entity the path names (every key given), else None."""
        if any(k is None for k in self.keys):
            return None
        return _key(self.tree, self.keys)  # type: ignore[arg-type]

    @property
    def concrete(self) -> bool:
        return self.entity is not None and len(self.leaves) == 1

    def matches(self, key: Key) -> bool:
        values = key if isinstance(key, tuple) else (key,)
        return all(want is None or want == got for want, got in zip(self.keys, values, strict=True))


def _key(tree: str, values: Sequence[str]) -> Key:
    return values[0] if len(_ENTITY_KEYS[tree]) == 1 else tuple(values)


def _match_tree(tree: str, elems: Elems) -> Query | str:
    """``elems`` against one tree: its query, or why they name something else (a :class:`PathError` for a
    value the tree refuses, such as a prefix that is not one)."""
    spine, leaves = _TREES[tree]
    keys: dict[str, str | None] = dict.fromkeys(_ENTITY_KEYS[tree])
    for depth, (name, given_keys) in enumerate(elems):
        if depth < len(spine):
            want, key = spine[depth]
            if name != want:
                return f"no {name!r} here (expected {want!r})"
            given = dict(given_keys)
            fixed = dict(kv.split("=", 1) for kv in key.split(",")) if "=" in key else {}
            allowed = set(fixed) if fixed else ({key} if key else set())
            if set(given) - allowed:
                return f"{name} has no key {sorted(set(given) - allowed)[0]!r}"
            wrong = [k for k, v in fixed.items() if given.get(k, "*") not in ("*", v)]
            if wrong:
                return f"no {name} {wrong[0]}={given[wrong[0]]!r} (only {fixed[wrong[0]]!r})"
            value = given.get(key, "*") if key and not fixed else "*"
            if value != "*":
                keys[key] = _canonical_entity(tree, key, value, elems)
        elif depth == len(spine):
            if given_keys:
                return f"leaf {name} has no keys"
            if name not in leaves:
                return f"no leaf {name!r} (known: {', '.join(leaves)})"
            leaves = (name,)
        else:
            return "path goes below a leaf"
    return Query(tree, tuple(keys.values()), tuple(leaves))


def _canonical_entity(tree: str, key: str, value: str, elems: Elems) -> str:
    """A key's value as the snapshot holds it: a prefix in its canonical text (an IPv6 one compressed, in
    lower case: ``2001:DB8:0::/64`` names ``2001:db8::/64``); a prefix with host bits set is refused."""
    if key != "prefix":
        return value
    network, family = (ipaddress.IPv6Network, "IPv6") if tree == "aft6" else (ipaddress.IPv4Network, "IPv4")
    try:
        return str(network(value))
    except ValueError:
        raise PathError("invalid_argument", f"{format_path(elems)}: {value!r} is not an {family} "
                        "prefix in canonical form") from None


def compile_path(elems: Elems, origin: str = "") -> list[Query]:
    """The queries a request path stands for (the root: everything); raises :class:`PathError`."""
    if origin not in _ORIGINS:
        raise PathError("not_found", f"origin {origin!r} is not served (OpenConfig paths only)")
    if not elems:
        return [Query(t, (None,) * len(_ENTITY_KEYS[t]), leaves) for t, (_, leaves) in _TREES.items()]
    found: list[Query] = []
    why = ""
    for tree in _TREES:
        q = _match_tree(tree, elems)
        if isinstance(q, Query):
            found.append(q)
        elif elems[0][0] == _TREES[tree][0][0][0] and not why:
            why = q
    if found:
        return found
    raise PathError("not_found", f"{format_path(elems)}: {why or 'not served (see DESIGN.md, Telemetry)'}")


def _entity_elems(tree: str, entity: Key) -> Elems:
    """The elems of one entity's container (its leaves' prefix) in ``tree``."""
    spine, _ = _TREES[tree]
    values = iter(entity if isinstance(entity, tuple) else (entity,))
    out: list[tuple[str, tuple[tuple[str, str], ...]]] = []
    for name, key in spine:
        if "=" in key:
            out.append((name, tuple(sorted((k, v) for k, v in (kv.split("=", 1) for kv in key.split(","))))))
        elif key:
            out.append((name, ((key, next(values)),)))
        else:
            out.append((name, ()))
    return tuple(out)


def _table(snapshot: CounterSnapshot, status: OperSnapshot | None, tree: str) -> Mapping[Any, Mapping[str, Value]]:
    if tree == "interfaces":
        return snapshot.interfaces
    if tree in ("aft", "aft6"):
        return _Family(snapshot.prefixes, 6 if tree == "aft6" else 4)
    if status is None:
        return {}
    if tree == "isis":
        return status.isis
    if tree == "ospf":
        return status.ospf
    return status.interfaces if tree == "if_status" else status.bgp


class _Family(Mapping[str, Mapping[str, Value]]):
    """The prefixes of one family in a snapshot's (a view: a lookup costs what the snapshot's does)."""

    def __init__(self, prefixes: Mapping[str, Mapping[str, Value]], version: int):
        self.prefixes = prefixes
        self.v6 = version == 6

    def __getitem__(self, prefix: str) -> Mapping[str, Value]:
        if (":" in prefix) != self.v6:
            raise KeyError(prefix)
        return self.prefixes[prefix]

    def __iter__(self) -> Iterator[str]:
        return (p for p in self.prefixes if (":" in p) == self.v6)

    def __len__(self) -> int:
        return sum(1 for _ in self)


Picked = dict[tuple[str, Key], dict[str, Value]]


def select(snapshot: CounterSnapshot, queries: Iterable[Query], status: OperSnapshot | None = None) -> Picked:
    """``{(tree, entity): {leaf: value}}`` for every value the queries name in ``snapshot`` and ``status``."""
    out: Picked = {}
    for q in queries:
        table = _table(snapshot, status, q.tree)
        one = q.entity
        entities: Iterable[Key]
        if one is not None:
            entities = [one] if one in table else []
        elif all(k is None for k in q.keys):
            entities = table
        else:
            entities = [e for e in table if q.matches(e)]
        for e in entities:
            values = table[e]
            got = out.setdefault((q.tree, e), {})
            for leaf in q.leaves:
                if leaf in values:
                    got[leaf] = values[leaf]
    return {k: v for k, v in out.items() if v}


def _typed(v: Value) -> Any:
    return pb.TypedValue(string_val=v) if isinstance(v, str) else pb.TypedValue(uint_val=v)


def _notifications(snapshot: CounterSnapshot, picked: Mapping[tuple[str, Key], Mapping[str, Value]],
                   target: str, deleted: Mapping[tuple[str, Key], Iterable[str]] | None = None) -> list[Any]:
    """One Notification per entity: its prefix, and an update per leaf; ``deleted``: per entity that is gone
    (gNMI 0.8.0 3.5.2.3: an ON_CHANGE subscription says so), a Notification that deletes its leaves."""
    out = [pb.Notification(timestamp=snapshot.timestamp_ns, prefix=path_to_pb(_entity_elems(tree, e), target=target),
                           update=[pb.Update(path=pb.Path(elem=[pb.PathElem(name=leaf)]),
                                             val=_typed(v)) for leaf, v in values.items()])
           for (tree, e), values in picked.items()]
    for (tree, e), leaves in (deleted or {}).items():
        out.append(pb.Notification(timestamp=snapshot.timestamp_ns,
                                   prefix=path_to_pb(_entity_elems(tree, e), target=target),
                                   delete=[pb.Path(elem=[pb.PathElem(name=leaf)]) for leaf in leaves]))
    return out


# -- the service ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class GnmiOptions:
    """Knobs of the service: the interval of a SAMPLE subscription that asks for none (and of
    TARGET_DEFINED), the shortest interval granted, how often ON_CHANGE looks for changes, and how long
    one reading of the counters is shared between the calls and subscriptions that ask for it."""

    default_interval_s: float = 10.0
    min_interval_s: float = 0.1
    on_change_check_s: float = 1.0
    share_s: float = 0.05
    #: how often ON_CHANGE looks at operational state alone (link and session states: read from the
    #: agent's link watcher, which costs nothing; a failure must reach the controller within a second)
    status_check_s: float = 0.1


@dataclass
class _Sub:
    queries: list[Query]
    mode: int
    interval_ns: int
    suppress_redundant: bool
    heartbeat_ns: int
    due: int = 0
    beat_due: int = 0
    last: Picked = field(default_factory=dict)


class GnmiService:
    """The gNMI service of one device, over a counter source and (operational state) a status source."""

    def __init__(self, source: CounterSource, device: str = "", options: GnmiOptions | None = None,
                 status: StatusSource | None = None):
        self.source = source
        self.status = status
        self.device = device
        self.options = options or GnmiOptions()
        self._lock = asyncio.Lock()
        self._last: CounterSnapshot | None = None
        self._last_at = 0.0

    async def values(self, queries: Iterable[Query], context: Any = None
                     ) -> tuple[CounterSnapshot, OperSnapshot | None]:
        """The readings ``queries`` need: the counters (shared, :meth:`read`) unless they ask for operational
        state alone, and the status source's latest state when they ask for any."""
        trees = {q.tree for q in queries}
        status: OperSnapshot | None = None
        if trees & STATUS_TREES and self.status is not None:
            status = await asyncio.to_thread(self.status.read) if self.status.blocking else self.status.read()
        if trees - STATUS_TREES:
            return await self.read(context), status
        return CounterSnapshot(status.timestamp_ns if status and status.timestamp_ns else time.time_ns()), status

    async def read(self, context: Any = None) -> CounterSnapshot:
        """One reading of the counters, shared by the callers within ``share_s`` of each other;
        a source that fails ends the call with ``UNAVAILABLE`` (the client retries later)."""
        try:
            return await self._read()
        except Exception as exc:
            if context is None:
                raise
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"reading the counters failed: {exc}")
            raise

    async def _read(self) -> CounterSnapshot:
        async with self._lock:
            now = time.monotonic()
            if self._last is None or now - self._last_at > self.options.share_s:
                if self.source.blocking:
                    self._last = await asyncio.to_thread(self.source.read)
                else:
                    self._last = self.source.read()
                self._last_at = time.monotonic()
            return self._last

    # -- RPCs ---------------------------------------------------------------------------
    async def Capabilities(self, request: Any, context: Any) -> Any:  # noqa: N802 (the RPC's name)
        return pb.CapabilityResponse(
            supported_models=[pb.ModelData(name=n, organization=o, version=v) for n, o, v in MODELS],
            supported_encodings=list(ENCODINGS.values()), gNMI_version=GNMI_VERSION)

    async def Get(self, request: Any, context: Any) -> Any:  # noqa: N802
        await self._check_encoding(request.encoding, context)
        try:
            prefix = path_from_pb(request.prefix)
            paths = [(prefix + path_from_pb(p), p.origin or request.prefix.origin) for p in request.path] or [
                (prefix, request.prefix.origin)]
            queries = [compile_path(e, o) for e, o in paths]
        except PathError as exc:
            await _abort(context, exc)
        snapshot, status = await self.values([q for qs in queries for q in qs], context)
        picked: Picked = {}
        for (elems, _), qs in zip(paths, queries, strict=True):
            got = select(snapshot, qs, status)
            if not got and all(q.entity is not None for q in qs):
                await _abort(context, PathError("not_found", f"{format_path(elems)}: no such entity on "
                                                f"{self.device or 'this device'}"))
            for k, v in got.items():
                picked.setdefault(k, {}).update(v)
        return pb.GetResponse(notification=_notifications(snapshot, picked, request.prefix.target))

    async def Set(self, request: Any, context: Any) -> Any:  # noqa: N802
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "Set is not supported: configure through Loom's intent")

    async def Subscribe(self, request_iterator: Any, context: Any) -> AsyncIterator[Any]:  # noqa: N802
        first = await _next_request(request_iterator)
        if first is None or not first.HasField("subscribe"):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "the first SubscribeRequest must carry a "
                                "SubscriptionList")
        sl = first.subscribe
        await self._check_encoding(sl.encoding, context)
        subs = await self._subscriptions(sl, context)
        target = sl.prefix.target
        if sl.mode == pb.SubscriptionList.ONCE:
            async for r in self._full(subs, target, sl.updates_only, context):
                yield r
            return
        if sl.mode == pb.SubscriptionList.POLL:
            async for r in self._full(subs, target, sl.updates_only, context):
                yield r
            while (req := await _next_request(request_iterator)) is not None:
                if not req.HasField("poll"):
                    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "a POLL subscription takes Poll requests")
                async for r in self._full(subs, target, False, context):
                    yield r
            return
        async for r in self._stream(subs, target, sl.updates_only, context):
            yield r

    # -- parts --------------------------------------------------------------------------
    @staticmethod
    async def _check_encoding(encoding: int, context: Any) -> None:
        if encoding not in ENCODINGS.values():
            name = pb.Encoding.Name(encoding) if encoding in pb.Encoding.values() else str(encoding)
            await context.abort(grpc.StatusCode.UNIMPLEMENTED,
                                f"encoding {name} is not supported (JSON, JSON_IETF, PROTO)")

    async def _subscriptions(self, sl: Any, context: Any) -> list[_Sub]:
        if sl.mode not in (pb.SubscriptionList.STREAM, pb.SubscriptionList.ONCE, pb.SubscriptionList.POLL):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"unknown subscription list mode {sl.mode}")
        if not sl.subscription:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "a SubscriptionList needs subscriptions")
        o = self.options
        subs = []
        for s in sl.subscription:
            try:
                queries = compile_path(path_from_pb(sl.prefix) + path_from_pb(s.path),
                                       s.path.origin or sl.prefix.origin)
            except PathError as exc:
                await _abort(context, exc)
            mode = s.mode
            if mode not in (pb.SAMPLE, pb.ON_CHANGE, pb.TARGET_DEFINED):
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"unknown subscription mode {mode}")
            if mode == pb.TARGET_DEFINED:
                mode = pb.SAMPLE
            interval = s.sample_interval or int(o.default_interval_s * 1e9)
            if mode == pb.ON_CHANGE:
                alone = all(q.tree in STATUS_TREES for q in queries)
                interval = int((o.status_check_s if alone else o.on_change_check_s) * 1e9)
            subs.append(_Sub(queries, mode, max(interval, int(o.min_interval_s * 1e9)), s.suppress_redundant,
                             s.heartbeat_interval))
        return subs

    async def _full(self, subs: Sequence[_Sub], target: str, updates_only: bool, context: Any) -> AsyncIterator[Any]:
        """Every subscribed value now (nothing with ``updates_only``), then ``sync_response``."""
        snapshot, status = await self.values([q for s in subs for q in s.queries], context)
        for s in subs:
            s.last = select(snapshot, s.queries, status)
            if not updates_only:
                for n in _notifications(snapshot, s.last, target):
                    yield pb.SubscribeResponse(update=n)
        yield pb.SubscribeResponse(sync_response=True)

    async def _stream(self, subs: Sequence[_Sub], target: str, updates_only: bool, context: Any) -> AsyncIterator[Any]:
        async for r in self._full(subs, target, updates_only, context):
            yield r
        now = time.monotonic_ns()
        for s in subs:
            s.due = now + s.interval_ns
            s.beat_due = now + s.heartbeat_ns
        while True:
            wake = min(s.due for s in subs)
            await asyncio.sleep(max(0, wake - time.monotonic_ns()) / 1e9)
            now = time.monotonic_ns()
            snapshot, status = await self.values([q for s in subs if s.due <= now for q in s.queries], context)
            now = time.monotonic_ns()
            for s in subs:
                if s.due > now:
                    continue
                s.due = max(s.due + s.interval_ns, now + s.interval_ns // 2)
                current = select(snapshot, s.queries, status)
                beat = bool(s.heartbeat_ns) and now >= s.beat_due
                if beat:
                    s.beat_due = now + s.heartbeat_ns
                gone: dict[tuple[str, Key], list[str]] = {}
                if s.mode == pb.SAMPLE and not s.suppress_redundant or beat:
                    send = current
                else:
                    send, gone = _changed(s.last, current)
                s.last = current
                for n in _notifications(snapshot, send, target, gone):
                    yield pb.SubscribeResponse(update=n)


def _changed(before: Picked, now: Picked) -> tuple[Picked, dict[tuple[str, Key], list[str]]]:
    """What changed from ``before`` to ``now``: the values new or different, and the leaves no longer there."""
    out: Picked = {}
    gone: dict[tuple[str, Key], list[str]] = {}
    for k, values in now.items():
        old = before.get(k, {})
        diff = {leaf: v for leaf, v in values.items() if old.get(leaf) != v}
        if diff:
            out[k] = diff
    for k, values in before.items():
        left = [leaf for leaf in values if leaf not in now.get(k, {})]
        if left:
            gone[k] = left
    return out, gone


async def _next_request(it: Any) -> Any:
    try:
        return await it.__anext__()
    except StopAsyncIteration:
        return None


async def _abort(context: Any, exc: PathError) -> Any:
    code = grpc.StatusCode.NOT_FOUND if exc.code == "not_found" else grpc.StatusCode.INVALID_ARGUMENT
    await context.abort(code, str(exc))


def add_gnmi_servicer(server: Any, service: GnmiService) -> None:
    """Register ``service`` as ``gnmi.gNMI`` on a ``grpc.aio`` server."""
    pb_grpc.add_gNMIServicer_to_server(service, server)

"""The one gNMI codec and the controller's gNMI client (gNMI specification 0.8.0, OpenConfig paths).

It owns the gNMI protocol's published stubs on the controller's side of the
wire (``pygnmi.spec.v080``; CONVENTIONS 2) and what both ends share:

* the **client** the controller's collector uses (:class:`GnmiClient`), in
  domain values, not protobufs: :class:`Sample` (device, xpath, value,
  timestamp in ns) and :class:`SyncMarker`. It reads any target that serves
  these paths (prefix-carrying or full-path notifications alike);
* the path helpers :func:`parse_path` and :func:`format_path`, which convert
  between the xpath form (``/interfaces/interface[name=eth1]/state/counters/in-octets``)
  and :data:`Elems`, a tuple of ``(name, ((key, value), ...))``, and
  :func:`path_to_pb` and :func:`path_from_pb`, between elems and the wire's
  ``Path``; the service name, version and encodings.

The **service** a device agent serves is :mod:`southbound.device.gnmi_server`
(the switch side of the wire).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple

import grpc
from pygnmi.spec.v080 import gnmi_pb2 as pb
from pygnmi.spec.v080 import gnmi_pb2_grpc as pb_grpc

from southbound.driver import driver_error

__all__ = ["ENCODINGS", "GNMI_SERVICE", "GNMI_VERSION", "Capabilities", "Elems", "GnmiClient", "PathError", "Poller",
           "Sample", "SyncMarker", "format_path", "parse_path", "path_from_pb", "path_to_pb"]

GNMI_SERVICE = "gnmi.gNMI"
GNMI_VERSION = "0.8.0"
ENCODINGS = {"json": pb.JSON, "json_ietf": pb.JSON_IETF, "proto": pb.PROTO}

Elems = tuple[tuple[str, tuple[tuple[str, str], ...]], ...]


# -- xpath <-> elems ----------------------------------------------------------------------------------------
class PathError(ValueError):
    """A path the service refuses: ``code`` is ``not_found`` or ``invalid_argument``."""

    def __init__(self, code: str, message: str):
        self.code = code
        super().__init__(message)


def parse_path(xpath: str) -> Elems:
    """``/a/b[k=v]/c`` as elems; key values may hold ``/`` (``[prefix=10.0.0.0/24]``), ``\\]`` escapes ``]``.

    >>> parse_path("/interfaces/interface[name=eth1]/state")
    (('interfaces', ()), ('interface', (('name', 'eth1'),)), ('state', ()))
    """
    elems: list[tuple[str, tuple[tuple[str, str], ...]]] = []
    i, n = 0, len(xpath)
    while i < n:
        if xpath[i] == "/":
            i += 1
            continue
        name_start = i
        while i < n and xpath[i] not in "/[":
            i += 1
        name = xpath[name_start:i]
        keys: list[tuple[str, str]] = []
        while i < n and xpath[i] == "[":
            j = i + 1
            buf: list[str] = []
            while j < n and xpath[j] != "]":
                if xpath[j] == "\\" and j + 1 < n:
                    j += 1
                buf.append(xpath[j])
                j += 1
            if j >= n:
                raise PathError("invalid_argument", f"{xpath!r}: unterminated key selector")
            k, sep, v = "".join(buf).partition("=")
            if not sep or not k:
                raise PathError("invalid_argument", f"{xpath!r}: key selector without name=value")
            keys.append((k, v))
            i = j + 1
        if not name:
            raise PathError("invalid_argument", f"{xpath!r}: empty path element")
        elems.append((name, tuple(sorted(keys))))
    return tuple(elems)


def format_path(elems: Elems) -> str:
    """Elems as an xpath (keys sorted by name); the inverse of :func:`parse_path`."""
    parts = []
    for name, keys in elems:
        sel = "".join(f"[{k}={v.replace(']', chr(92) + ']')}]" for k, v in sorted(keys))
        parts.append(name + sel)
    return "/" + "/".join(parts)


# -- protobuf paths (the service's too) -------------------------------------------------------------------
def path_to_pb(elems: Elems, *, target: str = "", origin: str = "") -> Any:
    """``elems`` as a wire ``Path``."""
    return pb.Path(elem=[pb.PathElem(name=n, key=dict(k)) for n, k in elems], target=target, origin=origin)


def path_from_pb(path: Any) -> Elems:
    """A wire ``Path`` as elems; raises :class:`PathError` for what the service refuses."""
    if len(path.element) and not len(path.elem):
        raise PathError("invalid_argument", "the deprecated 'element' path field is not supported; use 'elem'")
    out = []
    for e in path.elem:
        if not e.name:
            raise PathError("invalid_argument", "empty path element name")
        out.append((e.name, tuple(sorted(e.key.items()))))
    return tuple(out)


# -- the client -----------------------------------------------------------------------------------------
class Sample(NamedTuple):
    """One reading: ``path`` in xpath form (:func:`format_path`), ``timestamp_ns`` the target's; ``value`` a
    counter (int) or an operational state (str: ``UP``, ``ESTABLISHED``...), or None where the target deleted
    the path (a gNMI ``delete``: an entity that is gone, such as an IS-IS adjacency whose port left IS-IS)."""

    device: str
    path: str
    value: int | str | None
    timestamp_ns: int


class SyncMarker(NamedTuple):
    """The target has sent every subscribed counter once (gNMI ``sync_response``)."""

    device: str


@dataclass(frozen=True)
class Capabilities:
    models: tuple[str, ...]
    encodings: tuple[str, ...]
    version: str


def _value(v: Any) -> int | str | None:
    kind = v.WhichOneof("value")
    if kind in ("uint_val", "int_val"):
        return int(getattr(v, kind))
    if kind in ("json_val", "json_ietf_val"):
        try:
            got = json.loads(getattr(v, kind))
        except ValueError:
            return None
        if isinstance(got, str) and not got.isdigit():
            return got  # an enumeration (RFC 7951 writes it as a string)
        try:
            return int(got)  # RFC 7951 writes uint64 as a string: int() takes both
        except (ValueError, TypeError):
            return None
    if kind == "string_val":
        return int(v.string_val) if v.string_val.isdigit() else v.string_val
    return None


_PATH_TEXT: dict[bytes, str] = {}  # a path's wire bytes -> its xpath (streams repeat the same paths)
_PATH_TEXT_MAX = 200_000


def _path_text(path: Any) -> str:
    """``format_path`` of a wire path, remembered by its bytes: a stream sends the same few paths every
    interval, and formatting them again was most of a subscriber's CPU."""
    key = path.SerializeToString(deterministic=True)
    text = _PATH_TEXT.get(key)
    if text is None:
        text = format_path(path_from_pb(path)) if len(path.elem) or len(path.element) else ""
        if len(_PATH_TEXT) >= _PATH_TEXT_MAX:
            _PATH_TEXT.clear()
        _PATH_TEXT[key] = text
    return text


def _samples(device: str, n: Any) -> list[Sample]:
    prefix = _path_text(n.prefix)
    ts = int(n.timestamp)
    out = []
    for u in n.update:
        value = _value(u.val)
        if value is not None:
            out.append(Sample(device, prefix + _path_text(u.path) or "/", value, ts))
    for d in n.delete:
        out.append(Sample(device, prefix + _path_text(d) or "/", None, ts))
    return out


def _service_config(max_attempts: int) -> str:
    method: dict[str, Any] = {"name": [{"service": GNMI_SERVICE, "method": "Capabilities"},
                                       {"service": GNMI_SERVICE, "method": "Get"}]}
    if max_attempts >= 2:
        method["retryPolicy"] = {"maxAttempts": max_attempts, "initialBackoff": "0.2s", "maxBackoff": "2s",
                                 "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}
    return json.dumps({"methodConfig": [method]})


_MODES = {"sample": pb.SAMPLE, "on_change": pb.ON_CHANGE, "target_defined": pb.TARGET_DEFINED}


class GnmiClient:
    """gNMI to one device: ``endpoint`` ``unix:PATH`` or ``HOST:PORT`` (TCP needs ``tls``, a
    :class:`southbound.pki.ClientTls`, as :class:`southbound.driver.AgentDriver` uses). One channel,
    closed by :meth:`close` (or ``async with``); ``timeout`` is the deadline of the unary calls.
    Failed calls raise :class:`~controller.model.errors.RetryableDriverError` (UNAVAILABLE, a deadline)
    or :class:`~controller.model.errors.FatalDriverError`; their ``text`` starts with the status name.
    """

    def __init__(self, device: str, endpoint: str, *, tls: Any = None, timeout: float = 10.0,
                 max_attempts: int = 5, encoding: str = "proto"):
        self.device = device
        self.endpoint = endpoint
        self.timeout = timeout
        self.encoding = ENCODINGS[encoding]
        options: list[tuple[str, Any]] = [
            ("grpc.service_config", _service_config(max_attempts)), ("grpc.enable_retries", 1),
            ("grpc.initial_reconnect_backoff_ms", 100), ("grpc.min_reconnect_backoff_ms", 100),
            ("grpc.max_reconnect_backoff_ms", 2000), ("grpc.max_receive_message_length", 64 << 20)]
        if endpoint.startswith("unix:"):
            self._channel = grpc.aio.insecure_channel(endpoint, options=options)
        else:
            if tls is None:
                raise ValueError(f"{device}: TCP endpoint {endpoint} needs client TLS (mutual TLS)")
            self._channel = grpc.aio.secure_channel(endpoint, tls.channel_credentials(),
                                                    options=options + tls.channel_options())
        self._stub = pb_grpc.gNMIStub(self._channel)

    async def __aenter__(self) -> GnmiClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self._channel.close()

    def _error(self, exc: grpc.aio.AioRpcError) -> Exception:
        return driver_error(self.device, exc)

    async def capabilities(self) -> Capabilities:
        try:
            r = await self._stub.Capabilities(pb.CapabilityRequest(), timeout=self.timeout)
        except grpc.aio.AioRpcError as exc:
            raise self._error(exc) from exc
        return Capabilities(tuple(m.name for m in r.supported_models),
                            tuple(pb.Encoding.Name(e) for e in r.supported_encodings), r.gNMI_version)

    async def get(self, paths: Iterable[str]) -> list[Sample]:
        """The counters under ``paths`` (xpaths; wildcards ``[name=*]`` and subtrees allowed)."""
        req = pb.GetRequest(path=[path_to_pb(parse_path(p)) for p in paths], encoding=self.encoding)
        try:
            r = await self._stub.Get(req, timeout=self.timeout)
        except grpc.aio.AioRpcError as exc:
            raise self._error(exc) from exc
        return [s for n in r.notification for s in _samples(self.device, n)]

    async def subscribe(self, paths: Iterable[str], mode: str = "sample", interval_s: float = 10.0, *,
                        once: bool = False, updates_only: bool = False, suppress_redundant: bool = False,
                        heartbeat_s: float = 0.0) -> AsyncIterator[Sample | SyncMarker]:
        """A ``STREAM`` subscription (``mode`` ``sample``, ``on_change`` or ``target_defined``), or with
        ``once`` a ``ONCE`` one that ends after its :class:`SyncMarker`. Runs until the caller stops."""
        subs = [pb.Subscription(path=path_to_pb(parse_path(p)), mode=_MODES[mode],
                                sample_interval=int(interval_s * 1e9), suppress_redundant=suppress_redundant,
                                heartbeat_interval=int(heartbeat_s * 1e9)) for p in paths]
        sl = pb.SubscriptionList(subscription=subs, encoding=self.encoding, updates_only=updates_only,
                                 mode=pb.SubscriptionList.ONCE if once else pb.SubscriptionList.STREAM)
        call = self._stub.Subscribe()
        try:
            await call.write(pb.SubscribeRequest(subscribe=sl))
            if once:
                await call.done_writing()
            while True:
                r = await call.read()
                if r is grpc.aio.EOF:
                    return
                if r.HasField("sync_response") and r.sync_response:
                    yield SyncMarker(self.device)
                    if once:
                        return
                elif r.HasField("update"):
                    for s in _samples(self.device, r.update):
                        yield s
        except grpc.aio.AioRpcError as exc:
            raise self._error(exc) from exc
        finally:
            call.cancel()

    def poller(self, paths: Iterable[str]) -> Poller:
        """A ``POLL`` subscription: ``async with client.poller(paths) as p: samples = await p.poll()``."""
        return Poller(self, [path_to_pb(parse_path(p)) for p in paths])


class Poller:
    """An open ``POLL`` subscription; each :meth:`poll` returns every subscribed counter once."""

    def __init__(self, client: GnmiClient, paths: list[Any]):
        self.client = client
        self._paths = paths
        self._call: Any = None

    async def __aenter__(self) -> Poller:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def poll(self) -> list[Sample]:
        c = self.client
        try:
            if self._call is None:
                self._call = c._stub.Subscribe()
                sl = pb.SubscriptionList(subscription=[pb.Subscription(path=p) for p in self._paths],
                                         encoding=c.encoding, mode=pb.SubscriptionList.POLL)
                await self._call.write(pb.SubscribeRequest(subscribe=sl))
            else:
                await self._call.write(pb.SubscribeRequest(poll=pb.Poll()))
            out: list[Sample] = []
            while True:
                r = await asyncio.wait_for(self._call.read(), c.timeout)
                if r is grpc.aio.EOF:
                    raise grpc.aio.AioRpcError(grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(),
                                               grpc.aio.Metadata(), "the target closed the poll subscription")
                if r.HasField("sync_response") and r.sync_response:
                    return out
                out += _samples(c.device, r.update)
        except grpc.aio.AioRpcError as exc:
            raise c._error(exc) from exc

    async def close(self) -> None:
        if self._call is not None:
            self._call.cancel()
            self._call = None
